"""Text given on the command line is journaled whatever bytes it holds (argv is bytes on POSIX)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner
from conftest import python_tool
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from zagent_cli.main import cli
from zagent_core.journal.events import UserMessage
from zagent_store import SQLiteJournal


def zagent(home: Path, *args: str | bytes) -> subprocess.CompletedProcess[str]:
    argv = [os.fsencode(a) if isinstance(a, str) else a for a in (sys.executable, "-m", "zagent_cli", "--home",
                                                                    str(home), *args)]
    return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, encoding="utf-8",
                          errors="replace")


def test_a_prompt_with_a_byte_that_is_not_utf8_is_journaled_with_a_replacement(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "tools").mkdir(parents=True)
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": "done"}]))
    done = zagent(home, "run", "--model", f"scripted:{script}", b"caf\xe9 \xff")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "user: caf\ufffd \ufffd" in done.stdout
    export = zagent(home, "sessions", "export", json.loads(zagent(home, "sessions", "list", "--json").stdout)
                    ["sessions"][0]["session_id"])
    messages = [json.loads(line) for line in export.stdout.splitlines()]
    assert [m["data"]["text"] for m in messages if m["type"] == "user_message"] == ["caf\ufffd \ufffd"]


def test_tool_arguments_and_ids_with_such_bytes_are_used_or_refused_cleanly(tmp_path: Path) -> None:
    home = tmp_path / "home"
    python_tool(home, "echo", "import sys; print(sys.stdin.read())")
    ran = zagent(home, "tools", "run", "echo", "--args", b'{"text": "\xff"}', "--json")
    assert ran.returncode == 0, ran.stderr
    assert "\ufffd" in json.loads(ran.stdout)["output"]
    for args, code in (((b"sessions", b"show", b"\xff"), 2), ((b"sessions", b"export", b"\xff"), 2),
                       ((b"tools", b"run", b"\xff"), 2), ((b"audit", b"--tool", b"\xff"), 0)):
        done = zagent(home, *args)
        assert done.returncode == code and "Traceback" not in done.stderr, (args, done.stderr)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
# "-" alone is no prompt: it says to read the prompt from stdin (docs/cli.md).
@given(prompt=st.binary(min_size=1, max_size=40).filter(lambda b: b"\0" not in b and b != b"-"))
@example(prompt=b"-\x01")  # what looks like an option is still the prompt, after "--"
def test_any_bytes_of_a_prompt_start_a_session_that_keeps_the_text(tmp_path: Path, prompt: bytes) -> None:
    home = tmp_path / "home"
    (home / "tools").mkdir(parents=True, exist_ok=True)
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": "done"}]))
    argv = os.fsdecode(prompt)  # what Python makes of argv bytes (surrogateescape)
    # "--": a prompt that starts with "-" is still the prompt, as a user would write it.
    done = CliRunner().invoke(cli, ["--home", str(home), "run", "--model", f"scripted:{script}", "--", argv])
    assert done.exit_code == 0, done.output
    with SQLiteJournal(home / "journal.db") as journal:
        latest = journal.sessions(1)[0].session_id
        (message,) = [s.event for s in journal.read(latest) if isinstance(s.event, UserMessage)]
    assert message.text == "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in argv)
