"""The ``zagent`` command: output, JSON forms and exit codes, against real homes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import forked
from click.testing import CliRunner
from conftest import EXAMPLES, PYTHON, python_tool, write_tool

from zagent_cli.main import cli


@pytest.fixture
def example_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    shutil.copytree(EXAMPLES, home, ignore=shutil.ignore_patterns("journal.db*", "sessions"))
    # The examples say "python"; pin this interpreter so no PATH shim slows the tests.
    for manifest in (home / "tools").glob("*/*.json"):
        data = json.loads(manifest.read_text())
        if data["command"][0] == "python":
            data["command"][0] = PYTHON
            manifest.write_text(json.dumps(data))
    return home


def run(home: Path, *args: str, workspace: Path | None = None):
    options = ["--home", str(home)] + (["--workspace", str(workspace)] if workspace else [])
    return CliRunner().invoke(cli, [*options, *args], catch_exceptions=False)


def test_tools_list_shows_loaded_tools_and_why_others_did_not_load(example_home: Path) -> None:
    write_tool(example_home, "broken", '{"description": "x", "command": []')
    write_tool(example_home, "typo", {"description": "d", "command": [PYTHON], "timeout": 3})
    result = run(example_home, "tools", "list")
    assert result.exit_code == 0
    assert "word_count" in result.output and "hello_node" in result.output
    assert "tools/broken: not loaded: broken.json is not valid JSON" in result.output
    assert 'tools/typo: unknown field "timeout" is ignored (did you mean "timeout_seconds"?)' in result.output

    listed = json.loads(run(example_home, "tools", "list", "--json").output)
    names = [t["name"] for t in listed["tools"]]
    assert "typo" in names and "broken" not in names
    assert {p["source"] for p in listed["problems"]} == {"tools/broken", "tools/typo"}


def test_tools_run_prints_what_the_model_receives_and_journals_it(example_home: Path, tmp_path: Path) -> None:
    result = run(example_home, "tools", "run", "word_count", "--args", '{"text": "b a b", "top": "1"}',
                 workspace=tmp_path)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("3 words")
    assert "journaled as session" in result.stderr

    shown = run(example_home, "sessions", "show", "--json", "--events")
    state = json.loads(shown.output)
    (call,) = state["calls"].values()
    assert call["tool"] == "word_count" and call["status"] == "finished" and call["is_error"] is False
    assert call["coercions"] == [{"path": "top", "before": "1", "after": 1}]
    assert [e["type"] for e in state["events"]][-2:] == ["tool_call_finished", "session_ended"]


def test_tools_run_json_has_the_documented_fields(example_home: Path) -> None:
    result = run(example_home, "tools", "run", "image_maker", "--args", '{"color": "#00ff00"}', "--json")
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert set(body) == {"output", "is_error", "media", "files", "structured", "outcome", "session_id", "call_id",
                         "notes", "waiting"}
    assert body["media"][0]["mime"] == "image/png"
    assert Path(body["files"][0]["path"]).read_bytes().startswith(b"\x89PNG")


def test_an_error_result_exits_1_and_tells_the_model_what_to_fix(example_home: Path) -> None:
    result = run(example_home, "tools", "run", "word_count", "--args", '{"txt": "a"}')
    assert result.exit_code == 1
    assert 'unknown argument "txt" (allowed: text, top)' in result.stdout
    assert 'missing argument "text"' in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["tools", "run", "word_cont"], 'unknown tool "word_cont" (did you mean "word_count"'),
        (["tools", "run", "word_count", "--args", "{text: 1}"], "--args is not valid JSON"),
        (["tools", "run", "word_count", "--args", "[1]"], "--args must be a JSON object"),
        (["sessions", "show", "nope"], "no journal at"),
    ],
)
def test_usage_errors_exit_2_with_a_message(example_home: Path, args: list[str], message: str) -> None:
    result = run(example_home, *args)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def test_doctor_reports_broken_manifests_config_and_journal_health(example_home: Path) -> None:
    healthy = run(example_home, "doctor")
    assert healthy.exit_code == 0 and "all good" in healthy.output
    (example_home / "config.json").write_text('{"limits": {"output_cap_bytes": "big"}}')
    write_tool(example_home, "nodesc", {"command": [PYTHON]})
    run(example_home, "tools", "run", "word_count", "--args", '{"text": "x"}')
    report = run(example_home, "doctor", "--json")
    assert report.exit_code == 1
    body = json.loads(report.output)
    messages = [p["message"] for p in body["problems"]]
    assert any('"limits.output_cap_bytes"' in m and "using the default" in m for m in messages)
    assert 'not loaded: missing required field "description"' in messages
    assert body["limits"]["output_cap_bytes"] == 32768
    assert body["journal"]["problems"] == [] and body["journal"]["events"] == 5


def test_sessions_list_and_show(example_home: Path) -> None:
    empty = run(example_home, "sessions", "list")  # nothing ran yet: an empty list, not an error
    assert empty.exit_code == 0 and empty.output == "no sessions yet\n"
    assert json.loads(run(example_home, "sessions", "list", "--json").output) == {"sessions": []}
    assert not (example_home / "journal.db").exists()  # a read never creates the journal
    run(example_home, "tools", "run", "hello_node", "--args", '{"name": "Ada"}')
    run(example_home, "tools", "run", "word_count", "--args", '{}')
    listing = json.loads(run(example_home, "sessions", "list", "--json").output)["sessions"]
    assert [s["calls"] for s in listing] == [1, 1] and all(s["ended"] for s in listing)
    older = run(example_home, "sessions", "show", listing[1]["session_id"]).output
    assert "hello_node" in older and "ok" in older and "Hello, Ada!" in older
    latest = run(example_home, "sessions", "show").output
    assert "word_count" in latest and "rejected" in latest
    unknown = run(example_home, "sessions", "show", "nope")
    assert unknown.exit_code == 2 and 'no session "nope"' in unknown.output


def test_disabled_tools_are_refused_with_the_reason(example_home: Path) -> None:
    (example_home / "config.json").write_text('{"tools": {"disabled": ["hello_node"]}}')
    assert "(disabled)" in run(example_home, "tools", "list").output
    result = run(example_home, "tools", "run", "hello_node", "--args", '{"name": "x"}')
    assert result.exit_code == 1 and "disabled in config.json" in result.stdout


def test_the_installed_command_never_shows_a_traceback_for_a_users_mistake(tmp_path: Path) -> None:
    home = tmp_path / "home"
    python_tool(home, "crash", "raise SystemExit('boom')")
    base = [sys.executable, "-m", "zagent_cli", "--home", str(home)]
    bad = forked.run([*base, "tools", "run", "nope"], stdin=subprocess.DEVNULL, capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown tool" in bad.stderr and "Traceback" not in bad.stderr
    crash = forked.run([*base, "tools", "run", "crash"], stdin=subprocess.DEVNULL, capture_output=True, text=True)
    assert crash.returncode == 1 and "boom" in crash.stdout and "[exit code 1]" in crash.stdout
    (home / "journal.db").unlink()
    (home / "journal.db").write_text("not a database")
    broken = forked.run([*base, "sessions", "list"], capture_output=True, text=True)
    assert broken.returncode == 1 and "cannot open the journal" in broken.stderr
    assert "Traceback" not in broken.stderr


def test_tools_run_prints_notes_as_they_would_be_delivered(example_home: Path) -> None:
    result = run(example_home, "tools", "run", "slow_count", "--args", '{"n": 3, "delay": 0}')
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[:3] == ["[info: 1/3 counted]", "[info: 2/3 counted]", "[info: 3/3 counted]"]
    body = json.loads(run(example_home, "tools", "run", "slow_count", "--args", '{"n": 2, "delay": 0}', "--json").stdout)
    assert body["notes"] == ["1/2 counted", "2/2 counted"]


def test_ctrl_c_during_tools_run_stops_the_tool_and_exits_130(tmp_path: Path) -> None:
    import signal
    import time

    home = tmp_path / "home"
    started = tmp_path / "started"
    python_tool(home, "sleepy", f"import pathlib, time\npathlib.Path({str(started)!r}).touch()\ntime.sleep(30)")
    proc = forked.Popen([sys.executable, "-m", "zagent_cli", "--home", str(home), "tools", "run", "sleepy"],
                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not started.exists():  # the tool runs: Ctrl-C now lands in the call, not in start-up
        assert time.monotonic() < deadline and proc.poll() is None, "the tool never started"
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 130 and "Traceback" not in err and "[stopped;" in err
    shown = forked.run([sys.executable, "-m", "zagent_cli", "--home", str(home), "sessions", "list", "--json"],
                       capture_output=True, text=True)
    assert json.loads(shown.stdout)["sessions"][0]["status"] == "ended"


def test_sessions_show_and_audit_say_what_happened_in_plain_words(example_home: Path, tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": "Counting.", "tool_calls": [{"name": "word_count",
                                                                         "arguments": {"text": "a b"}}]},
                                  {"text": "Done."}]))
    assert run(example_home, "run", "--model", f"scripted:{script}", "count", workspace=tmp_path).exit_code == 0
    shown = run(example_home, "sessions", "show", "--events").output
    assert ", 2 replies in 1 turn, " in shown  # not "1 turns"
    events = shown.split("\nevents:\n")[1].splitlines()
    started = next(i for i, line in enumerate(events) if " session_started" in line)
    # a long body is indented JSON under its event, not one huge line
    assert events[started].endswith(" session_started") and events[started + 1] == "      {"
    body = events[started + 1: events.index("      }", started) + 1]
    assert json.loads("\n".join(body))["origin"] == "run" and len(body) > 10
    assert any(line.endswith(' user_message {"v":1,"text":"count"}') for line in events)  # short: on its line

    python_tool(example_home, "fails", "import sys\nsys.exit(3)")
    assert run(example_home, "tools", "run", "fails").exit_code == 1
    assert "  error exit 3 " in run(example_home, "audit", "--tool", "fails").output


def test_sessions_show_says_a_background_call_started_a_task_rather_than_ok_in_0_ms(example_home: Path) -> None:
    ran = run(example_home, "tools", "run", "slow_report", "--args", '{"topic": "x", "seconds": 1}')
    assert ran.exit_code == 0, ran.output
    shown = run(example_home, "sessions", "show").output
    assert "  <- slow_report: started as task #1;" in shown and "ok, 0 ms" not in shown
    assert "task #1 slow_report: exited, exit 0" in shown


def test_the_command_list_is_each_commands_own_first_sentence() -> None:
    import click

    from zagent_cli.main import COMMANDS

    context = click.Context(cli)
    assert cli.list_commands(context) == sorted(COMMANDS)
    for name, (_, _, summary) in COMMANDS.items():
        command = cli.get_command(context, name)
        assert command is not None and command.name == name
        for limit in (20, 45, 58, 64, 100, 300):  # what `zagent --help` shows at any width
            assert click.Command(name, help=summary).get_short_help_str(limit) == command.get_short_help_str(limit)


#: What neither `zagent --help` nor the import of the CLI loads: the other commands' modules, the
#: engine, the event models and the libraries only some commands use.
_HEAVY = ("zagent_cli.run", "zagent_cli.chat", "zagent_cli.sessions", "zagent_cli.tools", "zagent_cli.doctor",
          "zagent_core.journal.events", "zagent_core.config", "pydantic", "httpx", "structlog", "jsonschema",
          "prompt_toolkit", "re2", "rich", "sqlite3")


def _loaded_by(code: str) -> list[str]:
    """Which of :data:`_HEAVY` a fresh interpreter has loaded after running ``code``."""
    check = f"{code}\nimport sys\nprint('loaded:', *(m for m in {_HEAVY!r} if m in sys.modules))"
    done = subprocess.run([PYTHON, "-c", check], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.rpartition("loaded:")[2].split()


def test_the_cli_and_its_help_load_no_command_and_no_engine() -> None:
    assert _loaded_by("import zagent_cli.main") == []
    help_run = "from zagent_cli.main import cli\ntry:\n    cli(['--help'])\nexcept SystemExit:\n    pass"
    assert _loaded_by(help_run) == []
