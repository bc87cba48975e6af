"""Background tasks against bad timing and hostile tools: a kill right after the start, an
engine that dies while launching, a task folder the tool tampered with."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from conftest import NAMESPACED_PID, python_tool, running

from zagent_core import Engine

from zagent_core.tools import tasks
from zagent_core.tools.runner import ProcessSpec as Invocation
from zagent_core.tools.processes import read_json
from zagent_core.tools.supervisor import EXIT_FILE, SUPERVISOR_FILE

RECORD = f"import os, time\nopen(os.path.join(os.environ['ZAGENT_WORKSPACE'], 'pid'), 'w').write(({NAMESPACED_PID})(os.getpid()))\n"


def test_terminal_kill_right_after_the_start_kills_the_task(home_dir: Path, workspace: Path, engine: Engine) -> None:
    python_tool(home_dir, "sleeper", RECORD + "time.sleep(60)\n", background=True, timeout_seconds=-1)
    with engine.start_session("test") as session:
        session.call("sleeper", {})
        result = session.call("terminal", {"action": "kill", "task": 1})
        task = session.state.tasks["1"]
    assert result.output.startswith("#1 sleeper: killed"), result.output
    assert task.status == "killed"
    pid_file = workspace / "pid"
    assert not pid_file.exists() or not running(pid_file.read_text())


def test_the_supervisor_is_known_as_soon_as_launch_returns(tmp_path: Path, workspace: Path) -> None:
    invocation = Invocation(argv=[sys.executable, "-c", "import time; time.sleep(60)"], cwd=workspace,
                            env={"PATH": os.environ["PATH"]}, stdin=None, timeout=None, env_names=["PATH"])
    proc = tasks.launch(tmp_path, invocation, merge_stderr=True, kill_grace=0.3, tag="ZAGENT_TEST=1")
    who = tasks.identity(tmp_path)
    assert who is not None and who.pid == proc.pid and who.alive()
    assert tasks.stop(tmp_path)  # at once: the stop waits for the supervisor, not the other way round
    assert proc.wait(10) == 0
    record = tasks.exit_record(tmp_path)
    assert record is not None and record["stopped"]


def test_a_supervisor_whose_engine_died_before_sending_the_request_runs_nothing(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "zagent_core.tools.supervisor", str(tmp_path)], stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=30)
    assert proc.returncode == 1 and b"nothing was run" in proc.stderr
    assert sorted(os.listdir(tmp_path)) == []


def test_a_task_records_when_its_tool_really_ended(home_dir: Path, engine: Engine) -> None:
    python_tool(home_dir, "quick", "print('done')\n", background=True)
    before = datetime.now(timezone.utc)
    with engine.start_session("test") as session:
        session.call("quick", {})
        task = session.wait_task("1", 10)
        task_dir = Path(task.task_dir)
        exited = [e.event for e in engine.journal.read(session.session_id) if e.event.type == "task_exited"]
    record = tasks.exit_record(task_dir)
    assert record is not None
    (event,) = exited
    assert event.ended_at == datetime.fromtimestamp(record["ended_at"], timezone.utc)
    assert before < event.ended_at < datetime.now(timezone.utc)


def test_a_killed_task_records_when_it_ended(home_dir: Path, engine: Engine) -> None:
    python_tool(home_dir, "sleeper", "import time\ntime.sleep(60)\n", background=True, timeout_seconds=-1)
    with engine.start_session("test") as session:
        session.call("sleeper", {})
        session.call("terminal", {"action": "kill", "task": 1})
    (killed,) = [e.event for e in engine.journal.read(session.session_id) if e.event.type == "task_killed"]
    assert killed.ended_at is not None and killed.ended_at <= datetime.now(timezone.utc)


def test_a_task_folder_the_tool_tampered_with_never_hangs_nor_breaks_the_watcher(home_dir: Path,
                                                                                engine: Engine) -> None:
    # It plants FIFOs where the engine reads, and a forged record of how it ended.
    code = (
        "import json, os\nfolder = os.path.dirname(os.environ['ZAGENT_NOTIFY_FILE'])\n"
        "for name in ('tool.json', 'stderr.log'):\n"
        "    path = os.path.join(folder, name)\n"
        "    if os.path.exists(path): os.remove(path)\n"
        "    os.mkfifo(path)\n"
        "print('tampered', flush=True)\n"
    )
    python_tool(home_dir, "tamperer", code, background=True)
    with engine.start_session("test") as session:
        session.call("tamperer", {})
        task = session.wait_task("1", 20)
    assert task.status == "exited" and task.output == "tampered"


def test_a_forged_exit_record_gives_a_result_not_a_dead_watcher(tmp_path: Path, engine: Engine) -> None:
    (tmp_path / "output").mkdir()
    (tmp_path / EXIT_FILE).write_text(json.dumps({"pid": "me", "returncode": [1], "duration": "long",
                                                  "start_error": 7, "ended_at": 1e300, "stopped": "yes"}))
    record = tasks.exit_record(tmp_path)
    assert record is not None and tasks.ended_at(record) is None
    limits, caps = engine.config.limits, engine.config.capabilities
    result = tasks.result_of(record, tmp_path, output_mode="text", timeout=None, attach_outputs=False,
                             cwd=tmp_path, caps=caps, limits=limits)
    assert result.output == "(the tool printed nothing)" and result.pid is None
    assert read_json(tmp_path / SUPERVISOR_FILE) is None
