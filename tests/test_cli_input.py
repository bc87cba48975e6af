"""Prompts and arguments from files and stdin, as gh, curl and llm take them: ``-`` reads
stdin, ``@FILE`` reads a file, and a pipe into ``tools run`` is the call's arguments."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import forked
from click.testing import CliRunner
from conftest import python_tool

from zagent_cli.main import cli
from zagent_store import SQLiteJournal

# Prints the arguments it was given, so a test sees exactly what reached the tool.
ECHO = "import json, sys\nprint(json.dumps(json.load(sys.stdin), sort_keys=True))\n"


def zagent(home: Path, *args: str, stdin: object = subprocess.DEVNULL,
           text_in: str | None = None) -> subprocess.CompletedProcess[str]:
    return forked.run([sys.executable, "-m", "zagent_cli", "--home", str(home), *args], input=text_in,
                      stdin=None if text_in is not None else stdin, capture_output=True, text=True, timeout=60)


def invoke(home: Path, *args: str, stdin: str = ""):
    return CliRunner().invoke(cli, ["--home", str(home), *args], input=stdin, catch_exceptions=False)


def test_json_piped_into_tools_run_is_the_calls_arguments(tmp_path: Path) -> None:
    home = tmp_path / "home"
    python_tool(home, "greet", ECHO)
    piped = zagent(home, "tools", "run", "greet", text_in='{"name": "Ada"}\n')
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout.splitlines()[0] == '{"name": "Ada"}'
    nothing = zagent(home, "tools", "run", "greet")  # stdin is /dev/null: no arguments, and no wait
    assert nothing.returncode == 0 and nothing.stdout.splitlines()[0] == "{}", nothing.stderr


def test_args_at_file_reads_the_arguments_from_the_file_and_at_dash_from_stdin(tmp_path: Path) -> None:
    home = tmp_path / "home"
    python_tool(home, "greet", ECHO)
    args_file = tmp_path / "args.json"
    args_file.write_text('{"name": "Grace", "n": 2}')
    from_file = invoke(home, "tools", "run", "greet", "--args", f"@{args_file}")
    assert from_file.exit_code == 0 and from_file.stdout.splitlines()[0] == '{"n": 2, "name": "Grace"}'
    from_stdin = invoke(home, "tools", "run", "greet", "--args", "@-", stdin='{"name": "Lin"}')
    assert from_stdin.exit_code == 0 and from_stdin.stdout.splitlines()[0] == '{"name": "Lin"}'
    # --args given wins over what is piped in
    given = invoke(home, "tools", "run", "greet", "--args", '{"name": "Bo"}', stdin='{"name": "Lin"}')
    assert given.stdout.splitlines()[0] == '{"name": "Bo"}'


def test_unreadable_or_bad_argument_sources_are_usage_errors_that_name_the_source(tmp_path: Path) -> None:
    home = tmp_path / "home"
    python_tool(home, "greet", ECHO)
    missing = invoke(home, "tools", "run", "greet", "--args", f"@{tmp_path}/nope.json")
    assert missing.exit_code == 2
    assert f"--args @{tmp_path}/nope.json: cannot read {tmp_path}/nope.json: No such file or directory" in missing.stderr
    bad = invoke(home, "tools", "run", "greet", stdin="{name: x}")
    assert bad.exit_code == 2 and "the arguments on stdin is not valid JSON" in bad.stderr
    listed = invoke(home, "tools", "run", "greet", stdin="[1, 2]")
    assert listed.exit_code == 2 and "the arguments on stdin must be a JSON object" in listed.stderr
    assert not (home / "journal.db").exists(), "nothing runs on arguments that are not an object"


def test_run_dash_reads_the_prompt_from_stdin(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "tools").mkdir(parents=True)
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": "read it"}]))
    done = zagent(home, "run", "--model", f"scripted:{script}", "-", text_in="summarise\nthis file\n")
    assert done.returncode == 0, done.stderr
    assert "user: summarise\nthis file" in done.stdout
    with SQLiteJournal(home / "journal.db") as journal:
        (summary,) = journal.sessions()
        texts = [e.event.text for e in journal.read(summary.session_id) if e.event.type == "user_message"]
    assert texts == ["summarise\nthis file"]
    empty = invoke(home, "run", "--model", f"scripted:{script}", "-", stdin="\n")
    assert empty.exit_code == 2 and "the prompt on stdin is empty" in empty.stderr


def test_a_file_redirected_to_stdin_is_read_and_a_terminal_is_not_waited_on(tmp_path: Path) -> None:
    import os
    import pty

    home = tmp_path / "home"
    python_tool(home, "greet", ECHO)
    args_file = tmp_path / "args.json"
    args_file.write_text('{"name": "Kay"}')
    with args_file.open() as handle:  # zagent tools run greet < args.json
        redirected = zagent(home, "tools", "run", "greet", stdin=handle)
    assert redirected.returncode == 0 and redirected.stdout.splitlines()[0] == '{"name": "Kay"}'
    leader, follower = pty.openpty()  # typed at a terminal: nothing to read, so {} at once
    try:
        on_terminal = zagent(home, "tools", "run", "greet", stdin=follower)
    finally:
        os.close(follower)
        os.close(leader)
    assert on_terminal.returncode == 0 and on_terminal.stdout.splitlines()[0] == "{}"


def script_of(tmp_path: Path, *replies: str) -> str:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": reply} for reply in replies]))
    return f"scripted:{script}"


def user_messages(home: Path) -> list[str]:
    with SQLiteJournal(home / "journal.db") as journal:
        return [e.event.text for s in reversed(journal.sessions()) for e in journal.read(s.session_id)
                if e.event.type == "user_message"]


def test_text_piped_into_run_with_a_prompt_is_sent_with_it_as_one_message(tmp_path: Path) -> None:
    home = tmp_path / "home"
    model = script_of(tmp_path, "a summary")
    done = zagent(home, "run", "--model", model, "summarize this", text_in="line one\nline two\n")
    assert done.returncode == 0, done.stderr
    assert "user: summarize this\n\nline one\nline two\nassistant: a summary" in done.stdout
    session_id = done.stderr.rsplit("session ", 1)[1].split("]")[0]
    # resume takes it too; with no PROMPT, what is piped is the prompt
    again = zagent(home, "resume", session_id, "--model", script_of(tmp_path, "x", "y", "z"), text_in="more text")
    assert again.returncode == 0, again.stderr
    third = zagent(home, "resume", session_id, "and", "--model", script_of(tmp_path, "x", "y", "z"), text_in="\n")
    assert third.returncode == 0, third.stderr  # nothing but blank lines piped: the prompt alone
    assert user_messages(home) == ["summarize this\n\nline one\nline two", "more text", "and"]


def test_a_file_redirected_into_run_joins_the_prompt_and_a_terminal_or_dev_null_is_not_read(tmp_path: Path) -> None:
    import os
    import pty

    home = tmp_path / "home"
    model = script_of(tmp_path, "ok")
    notes = tmp_path / "notes.txt"
    notes.write_text("the notes\n")
    with notes.open() as handle:  # zagent run "read this" < notes.txt
        assert zagent(home, "run", "--model", model, "read this", stdin=handle).returncode == 0
    assert zagent(home, "run", "--model", model, "no stdin").returncode == 0  # /dev/null: a device, not read
    leader, follower = pty.openpty()
    try:
        assert zagent(home, "run", "--model", model, "a terminal", stdin=follower).returncode == 0
    finally:
        os.close(follower)
        os.close(leader)
    assert user_messages(home) == ["read this\n\nthe notes", "no stdin", "a terminal"]


def test_a_pipe_nobody_writes_to_is_waited_on_briefly_then_the_prompt_goes_alone(tmp_path: Path) -> None:
    import os
    import time

    home = tmp_path / "home"
    started = time.monotonic()
    read_end, write_end = os.pipe()  # held open by this test, never written to, as a harness may leave it
    try:
        with (tmp_path / "err").open("w") as err_file:
            run = forked.run([sys.executable, "-m", "zagent_cli", "--home", str(home), "run", "--model",
                              script_of(tmp_path, "ok"), "hello"], stdin=read_end,
                             stdout=subprocess.DEVNULL, stderr=err_file, timeout=60)
    finally:
        os.close(read_end)
        os.close(write_end)
    err = (tmp_path / "err").read_text()
    assert run.returncode == 0, err
    assert "[stdin is a pipe that sent nothing in 3 s: going on with 'hello' alone; give stdin from /dev/null" in err
    assert time.monotonic() - started < 30
    assert user_messages(home) == ["hello"]


def test_a_flood_piped_into_run_is_refused_once_it_is_over_the_cap_not_read_to_its_end(tmp_path: Path) -> None:
    home = tmp_path / "home"
    # an endless producer: a command that read all of stdin before refusing would never end
    flood = subprocess.Popen([sys.executable, "-c", "import sys\nwhile True: sys.stdout.write('x' * 65536)"],
                             stdout=subprocess.PIPE)
    try:
        refused = zagent(home, "run", "--model", script_of(tmp_path, "ok"), "summarize", stdin=flood.stdout)
    finally:
        flood.kill()
        flood.wait()
    assert refused.returncode == 2
    assert "the message is more than 262,144 bytes, over limits.user_message_bytes (262,144 bytes); it was not " \
           "journaled" in refused.stderr
    assert not (home / "journal.db").exists()
