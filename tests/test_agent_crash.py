"""A real SIGKILL of `zagent run` mid-turn, then `zagent resume`: the task gets finished.

Checks the design's invariants on the journal afterwards, and that resume never sent the
model a conversation with an unanswered tool call (it would have failed, as providers
answer HTTP 400 to that).
"""

from __future__ import annotations

import json
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import forked
from conftest import EXAMPLES, PYTHON
from crashcheck import check_invariants

from zagent_store import SQLiteJournal

SCRIPT = [
    {"text": "Counting first.", "tool_calls": [{"name": "slow_count", "arguments": {"n": 4, "delay": 0.15}}]},
    {"text": "Now the report.", "tool_calls": [{"name": "slow_report", "arguments": {"topic": "crash", "seconds": 1}}]},
    {"text": "Words too.", "tool_calls": [{"name": "word_count", "arguments": {"text": "a b a"}}]},
    {"text": "Waiting for the report."},
    {"text": "All done."},
    {"text": "(spare reply, in case a kill made the agent ask once more)"},
]


def prepare(tmp_path: Path) -> tuple[Path, Path]:
    home = tmp_path / "home"
    shutil.copytree(EXAMPLES / "tools", home / "tools")
    for manifest in (home / "tools").glob("*/*.json"):
        data = json.loads(manifest.read_text())
        if data["command"][0] == "python":
            data["command"][0] = PYTHON
            manifest.write_text(json.dumps(data))
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    return home, script


def zagent(home: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "zagent_cli", "--home", str(home), *args]


@pytest.mark.parametrize("seed", range(6))
def test_sigkill_mid_run_then_resume_finishes_the_task(tmp_path: Path, seed: int) -> None:
    home, script = prepare(tmp_path)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    run = forked.Popen(zagent(home, "--workspace", str(workspace), "run", "--model", f"scripted:{script}", "go"),
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert run.stderr is not None
    first = run.stderr.readline()
    session_id = first.split()[1].rstrip(",")
    time.sleep(random.Random(seed).uniform(0.1, 2.5))
    run.send_signal(signal.SIGKILL)
    run.wait()

    resumed = forked.run(zagent(home, "--workspace", str(workspace), "resume", session_id, "--model",
                                    f"scripted:{script}"), capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert "Traceback" not in resumed.stderr
    listing = forked.run(zagent(home, "sessions", "list", "--json"), capture_output=True, text=True)
    (summary,) = json.loads(listing.stdout)["sessions"]
    assert summary["status"] == "idle"
    with SQLiteJournal(home / "journal.db") as journal:
        events = list(journal.read(session_id))
    check_invariants(events)
    # Where the kill fell decides which reply the script serves last (a task that ended during
    # the resumed turn reaches the model in it, not in a wake-up turn of its own), so what is
    # checked is the outcome: every task ended, its wake-up delivered once (check_invariants),
    # and the agent idle after the last reply (the run may also have finished before the kill).
    last_turn = [e.event for e in events if e.event.type in ("turn_ended", "model_replied")][-2:]
    assert [e.type for e in last_turn] == ["model_replied", "turn_ended"] and last_turn[1].reason == "idle"
    assert not last_turn[0].tool_calls
    turns = [e.event for e in events if e.event.type in ("turn_started", "turn_ended")]
    assert all(a.type != b.type for a, b in zip(turns, turns[1:])), "turns must alternate start/end"


def test_ctrl_c_stops_the_run_cleanly_and_resume_continues(tmp_path: Path) -> None:
    home, script = prepare(tmp_path)
    run = forked.Popen(zagent(home, "run", "--model", f"scripted:{script}", "go"), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    assert run.stderr is not None and run.stdout is not None
    session_id = run.stderr.readline().split()[1].rstrip(",")
    while "-> slow_count" not in run.stdout.readline():
        pass
    time.sleep(0.2)  # slow_count is running
    run.send_signal(signal.SIGINT)
    out, err = run.communicate(timeout=30)
    assert run.returncode == 130 and f"resume with: zagent resume {session_id}" in err
    assert "Traceback" not in err
    with SQLiteJournal(home / "journal.db") as journal:
        events = [e.event for e in journal.read(session_id)]
    assert [e.type for e in events[-2:]] == ["tool_call_interrupted", "turn_ended"]
    assert events[-1].reason == "interrupted" and "zagent was stopped while the tool ran" in events[-2].message
    resumed = forked.run(zagent(home, "resume", session_id, "--model", f"scripted:{script}"),
                         capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
