"""Background tasks: supervisor, notes, exit records, timeouts, the terminal tool."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from conftest import NAMESPACED_PID, python_tool, running, wait_for

from zagent_core import Engine
from zagent_core.tools.processes import read_json

# The store's promises hold for the engine on each of them: run on SQLite and PostgreSQL.
pytestmark = pytest.mark.stores

NOTE = "import os\ndef note(line):\n    with open(os.environ['ZAGENT_NOTIFY_FILE'], 'a') as f:\n        f.write(line + '\\n')\n"
RECORD = (
    "import os, subprocess, sys, time\n"
    "def record(pid):\n"
    "    with open(os.path.join(os.environ['ZAGENT_WORKSPACE'], 'pids'), 'a') as f:\n"
    f"        f.write(({NAMESPACED_PID})(pid) + '\\n')\n"
    "record(os.getpid())\n"
)


def pids(workspace: Path) -> list[str]:
    """What the tool recorded (``conftest.host_pid`` finds them)."""
    path = workspace / "pids"
    return path.read_text().split() if path.exists() else []


def types(engine: Engine, session_id: str) -> list[str]:
    return [e.event.type for e in engine.journal.read(session_id)]


def test_a_background_call_returns_at_once_and_wakes_the_agent_with_its_result(home_dir: Path,
                                                                                engine: Engine) -> None:
    code = NOTE + "import time\nfor i in range(3):\n    note(f'{i + 1}/3'); time.sleep(0.15)\nprint('all done')\n"
    python_tool(home_dir, "slow", code, background=True)
    with engine.start_session("test") as session:
        started = time.monotonic()
        result = session.call("slow", {})
        assert time.monotonic() - started < 1.0
        assert result.output.startswith("started as task #1")
        assert not result.is_error
        task = session.wait_task("1", 10)
        delivery = session.deliver()
    assert task.status == "exited" and task.exit_code == 0 and task.output == "all done"
    assert delivery.lines() == ["[info: 1/3]", "[info: 2/3]", "[info: 3/3]", "[info: task #1 (slow) finished:\nall done]"]
    events = [e.event for e in engine.journal.read(session.session_id)]
    assert [e.type for e in events].count("task_exited") == 1
    notes = [e for e in events if e.type == "note_received"]
    assert {n.task_id for n in notes} == {"1"}
    # the call's own result came before any note: the agent carried on
    order = [e.type for e in events]
    assert order.index("tool_call_finished") < order.index("note_received") < order.index("task_exited")
    assert engine.session_state(session.session_id) == session.state


def test_tasks_are_numbered_per_session_and_listed(home_dir: Path, engine: Engine) -> None:
    python_tool(home_dir, "nap", "import time\ntime.sleep(0.2)\nprint('rested')\n", background=True)
    with engine.start_session("test") as session:
        assert session.call("nap", {}).output.startswith("started as task #1")
        assert session.call("nap", {}).output.startswith("started as task #2")
        listing = session.call("terminal", {"action": "list"}).output
        assert "#1 nap: running" in listing and "#2 nap: running" in listing
        session.wait_task("1", 5), session.wait_task("2", 5)
        assert session.call("terminal", {"action": "list"}).output.count("exited with code 0") == 2
    with engine.start_session("test") as other:
        assert other.call("nap", {}).output.startswith("started as task #1")


def test_a_json_background_tool_reports_its_files(home_dir: Path, engine: Engine) -> None:
    code = ("import json, os\n"
            "open(os.path.join(os.environ['ZAGENT_OUTPUT_DIR'], 'report.md'), 'w').write('# hi')\n"
            "print(json.dumps({'output': 'report written'}))\n")
    python_tool(home_dir, "reporter", code, background=True, output="json")
    with engine.start_session("test") as session:
        session.call("reporter", {})
        task = session.wait_task("1", 10)
    assert task.output.startswith("report written\nFiles:\n- ")
    assert "report.md (text/markdown, 4 bytes)" in task.output


def test_a_background_timeout_kills_the_whole_tree_and_tells_the_agent(home_dir: Path, workspace: Path,
                                                                      engine: Engine) -> None:
    code = RECORD + (
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "record(child.pid)\nprint('working', flush=True)\ntime.sleep(60)\n"
    )
    python_tool(home_dir, "stuck", code, background=True, timeout_seconds=0.5)
    with engine.start_session("test") as session:
        session.call("stuck", {})
        task = session.wait_task("1", 10)
        wakes = session.deliver().wakes
    assert task.status == "exited" and task.timed_out and task.is_error
    assert "timed out after 0.5 s" in task.output and "working" in task.output
    assert wakes[0].text.startswith("task #1 (stuck) timed out:")
    assert len(pids(workspace)) == 2 and not any(running(pid) for pid in pids(workspace))


def test_terminal_kill_stops_a_tool_that_ignores_sigterm_and_its_children(home_dir: Path, workspace: Path,
                                                                         engine: Engine) -> None:
    code = RECORD + (
        "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "record(child.pid)\nprint('up', flush=True)\ntime.sleep(60)\n"
    )
    python_tool(home_dir, "stubborn", code, background=True, timeout_seconds=-1)
    with engine.start_session("test") as session:
        session.call("stubborn", {})
        wait_for(lambda: len(pids(workspace)) == 2)
        result = session.call("terminal", {"action": "kill", "task": 1})
        wakes = session.deliver().wakes
    assert result.output.startswith("#1 stubborn: killed")
    assert session.state.tasks["1"].status == "killed"
    assert wakes == []  # the kill's own result told the agent
    assert not any(running(pid) for pid in pids(workspace))


def test_terminal_read_and_wait(home_dir: Path, engine: Engine) -> None:
    code = "import time\nprint('a' * 10, flush=True)\ntime.sleep(0.6)\nprint('b' * 10, flush=True)\n"
    python_tool(home_dir, "two_parts", code, background=True)
    with engine.start_session("test") as session:
        session.call("two_parts", {})
        wait_for(lambda: "aaaa" in session.call("terminal", {"action": "read", "task": 1}).output)
        early = session.call("terminal", {"action": "wait", "task": 1, "timeout_seconds": 0.1})
        assert early.output == "task #1 is still running"
        done = session.call("terminal", {"action": "wait", "task": 1, "timeout_seconds": 10})
        assert done.output.startswith("#1 two_parts: exited with code 0")
        whole = session.call("terminal", {"action": "read", "task": 1, "offset": 0}).output
        assert whole == f"{'a' * 10}\n{'b' * 10}\n\n[bytes 0-22 of 22]"
        rest = session.call("terminal", {"action": "read", "task": 1, "offset": 11}).output
        assert rest.startswith("b" * 10)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"action": "read", "task": 9}, "there is no task #9 (tasks: none)"),
        ({"action": "kill"}, '"kill" needs "task": the task number'),
        ({"action": "stop", "task": 1}, 'argument "action": must be one of "list", "read", "wait", "kill"'),
        ({"action": "list", "tsk": 1}, 'unknown argument "tsk" (allowed: action, offset, task, timeout_seconds)'),
    ],
)
def test_terminal_mistakes_get_clear_messages(engine: Engine, arguments: dict, message: str) -> None:
    with engine.start_session("test") as session:
        result = session.call("terminal", arguments)
    assert result.is_error and message in result.output


def test_ending_a_session_stops_its_running_tasks(home_dir: Path, workspace: Path, engine: Engine) -> None:
    python_tool(home_dir, "forever", RECORD + "time.sleep(60)\n", background=True, timeout_seconds=-1)
    session = engine.start_session("test")
    session.call("forever", {})
    wait_for(lambda: len(pids(workspace)) == 1)
    session.end()
    assert session.state.tasks["1"].status == "killed"
    assert types(engine, session.session_id)[-2:] == ["task_killed", "session_ended"]
    assert not running(pids(workspace)[0])


def test_a_supervisor_that_dies_is_reported_as_interrupted_and_its_tool_stopped(home_dir: Path, workspace: Path,
                                                                               engine: Engine) -> None:
    python_tool(home_dir, "orphan", RECORD + "time.sleep(60)\n", background=True, timeout_seconds=-1)
    with engine.start_session("test") as session:
        session.call("orphan", {})
        wait_for(lambda: len(pids(workspace)) == 1)
        os.kill(session.state.tasks["1"].pid, signal.SIGKILL)
        task = session.wait_task("1", 5)
        wakes = session.deliver().wakes
    assert task.status == "interrupted"
    assert "its supervisor stopped without recording" in wakes[0].text and "output.log" in wakes[0].text
    wait_for(lambda: not running(pids(workspace)[0]))


def test_the_tool_environment_never_touches_the_task_folder(home_dir: Path, engine: Engine,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    python_tool(home_dir, "quiet", "print('ok')\n", background=True, env={"TOOL_TOKEN": "s3cr3t-value"})
    with engine.start_session("test") as session:
        session.call("quiet", {})
        task = session.wait_task("1", 10)
    for path in Path(task.task_dir).rglob("*"):
        if path.is_file():
            assert b"s3cr3t-value" not in path.read_bytes(), path
    record = read_json(Path(task.task_dir) / "exit.json")
    assert record["returncode"] == 0 and json.dumps(record).find("TOOL_TOKEN") == -1


def test_a_wait_that_returns_the_result_answers_the_wake_up(home_dir: Path, engine: Engine) -> None:
    python_tool(home_dir, "quick", "print('quick result')", background=True)
    with engine.start_session("test") as session:
        session.call("quick", {})
        result = session.call("terminal", {"action": "wait", "task": 1, "timeout_seconds": 10})
        assert result.output.endswith("quick result")
        assert session.state.pending_wakes == {}  # not told twice
        assert session.deliver().wakes == []


def test_a_setsid_grandchild_of_a_background_task_is_stopped_with_it(home_dir: Path, workspace: Path,
                                                                    engine: Engine) -> None:
    code = RECORD + (
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True,\n"
        "                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "record(child.pid)\nprint('left a daemon')\n"
    )
    python_tool(home_dir, "daemonizer", code, background=True)
    with engine.start_session("test") as session:
        session.call("daemonizer", {})
        task = session.wait_task("1", 10)
    assert task.output == "left a daemon"
    wait_for(lambda: not any(running(pid) for pid in pids(workspace)))


def test_a_task_supervisor_starts_without_pydantic_structlog_or_the_config() -> None:
    # Every background task starts one: their imports were 160 ms of each task's start.
    import subprocess
    import sys

    heavy = ("pydantic", "structlog", "zagent_core.config", "jsonschema", "httpx")
    shown = subprocess.run([sys.executable, "-c", "import sys, zagent_core.tools.supervisor;"
                            f" print(sorted(m for m in {heavy!r} if m in sys.modules))"],
                           capture_output=True, text=True, check=True).stdout
    assert shown.strip() == "[]"


def test_a_task_folders_identity_record_is_read_as_untrusted(tmp_path: Path) -> None:
    from zagent_core.tools import tasks
    from zagent_core.tools.processes import ProcessIdentity, write_identity, write_json

    me = ProcessIdentity.of(os.getpid())
    assert me is not None
    write_identity(tmp_path / tasks.SUPERVISOR_FILE, os.getpid())
    assert tasks.identity(tmp_path) == me
    for record in ({"pid": "1", "start_ticks": 2, "boot_id": "b"}, {"pid": True, "start_ticks": 2, "boot_id": "b"},
                   {"pid": 1}, [1, 2, "b"], None):
        write_json(tmp_path / tasks.SUPERVISOR_FILE, record)
        assert tasks.identity(tmp_path) is None, record
