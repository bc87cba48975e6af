"""Ctrl-C in the middle of a note flood (issue 8, item 4): the run stops with exit 130, no
traceback, and the session is closed, whatever append the signal fell into. Ctrl-C during
start-up, and SIGTERM, stop ``tools run`` the same way (issue 12). Calls stopped for a
client's cancel say so, not that zagent was stopped (issue 26)."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import forked
from conftest import NAMESPACED_PID, PYTHON, python_tool, running, wait_for

from zagent_core import Engine, Home
from zagent_store import SQLiteJournal

FLOOD = ("import os\nwith open(os.environ['ZAGENT_NOTIFY_FILE'], 'a') as notes:\n"
         "    for n in range(10**7):\n        notes.write(f'note {n}\\n'); notes.flush()\n")


@pytest.mark.parametrize("notes_first", [50, 400, 2000])
def test_ctrl_c_during_a_note_flood_ends_the_session_cleanly(tmp_path: Path, notes_first: int) -> None:
    home = tmp_path / "home"
    python_tool(home, "flood", FLOOD, timeout_seconds=60)
    proc = forked.Popen([PYTHON, "-m", "zagent_cli", "--home", str(home), "tools", "run", "flood"],
                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while True:  # wait until the flood is being journaled
        assert time.monotonic() < deadline, "the flood was never journaled"
        if (home / "journal.db").exists():
            with SQLiteJournal(home / "journal.db") as journal:
                listed = journal.sessions()
            if listed and listed[0].events > notes_first:
                break
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "ConcurrencyError" not in err
    with SQLiteJournal(home / "journal.db") as journal:
        (summary,) = journal.sessions()
        kinds = [e.event.type for e in journal.read(summary.session_id)]
    assert summary.ended and kinds[-2:] == ["tool_call_interrupted", "session_ended"]


def _zagent_tools_run(home: Path, name: str) -> subprocess.Popen[str]:
    return forked.Popen([PYTHON, "-m", "zagent_cli", "--home", str(home), "tools", "run", name],
                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_ctrl_c_during_start_up_exits_130_without_clicks_aborted(tmp_path: Path) -> None:
    home = tmp_path / "home"
    python_tool(home, "quick", "print('ran')")
    # A FIFO for config.json holds zagent in its start-up (reading the config) until we write:
    # the Ctrl-C lands there every time, not by luck of timing.
    os.mkfifo(home / "config.json")
    proc = _zagent_tools_run(home, "quick")
    deadline = time.monotonic() + 30
    while True:  # opening the FIFO for writing succeeds once zagent has it open for reading
        assert time.monotonic() < deadline and proc.poll() is None, "zagent never read its config"
        try:
            writer = os.open(home / "config.json", os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError as exc:
            assert exc.errno == errno.ENXIO, exc
            time.sleep(0.01)
    try:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        os.close(writer)
    assert proc.returncode == 130, err
    assert "Aborted!" not in err and "Traceback" not in err and "[stopped]" in err
    assert "ran" not in out


def test_sigterm_during_tools_run_stops_the_tool_and_ends_the_session_like_ctrl_c(tmp_path: Path) -> None:
    home = tmp_path / "home"
    started = tmp_path / "started"
    python_tool(home, "sleepy", f"import os, pathlib, time\npathlib.Path({str(started)!r}).write_text(({NAMESPACED_PID})(os.getpid()))\n"
                                "time.sleep(60)")
    proc = _zagent_tools_run(home, "sleepy")
    wait_for(lambda: started.exists() and started.read_text() or proc.poll() is not None, "the tool to start", 30)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "[stopped; the call is journaled in session" in err
    assert not running(started.read_text()), "the tool was left running"
    with SQLiteJournal(home / "journal.db") as journal:
        (summary,) = journal.sessions()
        events = [e.event for e in journal.read(summary.session_id)]
    assert [e.type for e in events[-2:]] == ["tool_call_interrupted", "session_ended"]
    assert events[-1].reason == "interrupted"


def test_calls_stopped_by_a_cancel_say_so_and_those_beside_it_say_which_call_was_cancelled(tmp_path: Path) -> None:
    home = tmp_path / "home"
    python_tool(home, "nap", "import time\ntime.sleep(60)", concurrency_safe=True)
    with SQLiteJournal(home / "journal.db") as journal, Engine(Home(home), journal, workspace=tmp_path) as engine, \
            engine.start_session("test") as session:
        def call(call_id: str) -> None:
            try:
                session.call("nap", {}, call_id=call_id)
            except KeyboardInterrupt:  # the call was stopped: journaled interrupted
                pass

        naps = [threading.Thread(target=call, args=(call_id,)) for call_id in ("call_a", "call_b")]
        for nap in naps:
            nap.start()
        wait_for(lambda: len([e for e in journal.read(session.session_id) if e.event.type == "tool_call_started"]) == 2,
                 "both calls to start", 30)
        session.interrupt_calls.stop("the MCP client cancelled the call", call="call_a")
        for nap in naps:
            nap.join(30)
        said = {e.event.call_id: e.event.message for e in journal.read(session.session_id)
                if e.event.type == "tool_call_interrupted"}
    assert said == {
        "call_a": "the MCP client cancelled the call while the tool ran; its effect may or may not have happened",
        "call_b": "stopped with call call_a (the MCP client cancelled the call) while the tool ran; its effect may "
                  "or may not have happened"}
