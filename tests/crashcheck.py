"""Kill a crash-driver session, resume it, and check the design's invariants on its journal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import forked
from crash_driver import engine_for, install_tools, journal_of

from zagent_core.tools.notes import parse_line

DRIVER = Path(__file__).with_name("crash_driver.py")


@dataclass
class Outcome:
    session_id: str
    acknowledged: list[int]
    finished: bool  # the driver got to DONE before the kill


def crash(home: Path, workspace: Path, *, after: float | None = None, point: str | None = None) -> Outcome:
    """Run the driver and SIGKILL it ``after`` seconds (or let it kill itself at ``point``)."""
    install_tools(home)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(DRIVER.parent), os.environ.get("PYTHONPATH", "")])}
    if point:
        env["ZAGENT_CRASH_AT"] = point
    proc = forked.Popen([sys.executable, str(DRIVER), str(home), str(workspace)], stdout=subprocess.PIPE, text=True,
                        env=env)
    assert proc.stdout is not None
    first = proc.stdout.readline().split()
    assert first and first[0] == "SESSION", first
    if after is not None:
        time.sleep(after)
        proc.send_signal(signal.SIGKILL)
    out, _ = proc.communicate(timeout=60)
    acknowledged, finished = parse_output(out)
    return Outcome(session_id=first[1], acknowledged=acknowledged, finished=finished)


def parse_output(out: str) -> tuple[list[int], bool]:
    """The driver's acknowledged seqs and whether it printed DONE, from what it printed.

    A kill can land in the middle of a line (``SEQ 1`` of ``SEQ 12``): only lines that
    reached their newline were printed whole; what follows the last newline is dropped.
    """
    lines = out.split("\n")[:-1]
    return [int(line.split()[1]) for line in lines if line.startswith("SEQ ")], "DONE" in lines


def resume_and_check(home: Path, workspace: Path, outcome: Outcome) -> dict[str, int]:
    """Resume, let every task end, deliver, end; then assert the invariants. Returns counts."""
    with journal_of(home) as journal:
        assert journal.check() == []
        stored_seqs = {e.seq for e in journal.read(outcome.session_id)}
        assert set(outcome.acknowledged) <= stored_seqs, "an acknowledged event was lost"
        engine = engine_for(home, workspace, journal)
        session = engine.resume(outcome.session_id)
        for task in session.state.running_tasks:
            assert session.wait_task(task.task_id, 20).status != "running"
        session.deliver()
        session.end()
        events = list(journal.read(outcome.session_id))
        assert engine.session_state(outcome.session_id) == session.state
    return check_invariants(events)


def check_invariants(events: list) -> dict[str, int]:
    versions = [e.version for e in events]
    assert versions == list(range(1, len(versions) + 1)), "versions are not gap-free"

    # 2. every started attempt of a call ends exactly once; every task ends exactly once
    open_attempt: dict[str, bool] = {}
    ended: Counter[str] = Counter()
    for stored in events:
        event = stored.event
        if event.type == "tool_call_requested":
            open_attempt[event.call_id] = False
        elif event.type == "tool_call_started":
            assert not open_attempt[event.call_id], f"{event.call_id} started twice without an end"
            open_attempt[event.call_id] = True
        elif event.type in ("tool_call_finished", "tool_call_interrupted", "tool_call_rejected"):
            if not open_attempt[event.call_id]:
                assert ended[event.call_id] == 0, f"{event.call_id} ended twice"
            open_attempt[event.call_id] = False
            ended[event.call_id] += 1
    assert not any(open_attempt.values()), "a started call has no end"
    assert all(ended[call] >= 1 for call in open_attempt), "a requested call has no result"
    task_starts = Counter(e.event.task_id for e in events if e.event.type == "task_started")
    task_ends = Counter(e.event.task_id for e in events
                        if e.event.type in ("task_exited", "task_killed", "task_interrupted"))
    assert task_starts == task_ends and set(task_ends.values()) <= {1}, (task_starts, task_ends)

    # 3. every complete line of every notify file is exactly one note, in order
    notify = {e.event.call_id: e.event.notify_file for e in events
              if e.event.type == "tool_call_started" and e.event.notify_file is not None}
    notes: dict[str, list[str]] = {call: [] for call in notify}
    for stored in events:
        if stored.event.type == "note_received":
            notes[stored.event.call_id].append(stored.event.text)
    lines_total = 0
    for call, path in notify.items():
        data = Path(path).read_bytes()
        complete = data[: data.rfind(b"\n") + 1].split(b"\n")[:-1] if b"\n" in data else []
        expected = [parsed[0] for line in complete if (parsed := parse_line(line)) is not None]
        assert notes[call] == expected, (call, notes[call], expected)
        lines_total += len(expected)

    # 4. every wake-up is delivered exactly once
    wakes = [e.event.wake_id for e in events if e.event.type == "wake_requested"]
    # (a wake answered by a terminal wait/kill result reached the agent that way)
    delivered = Counter(w for e in events if e.event.type in ("turn_started", "notes_delivered", "wake_answered")
                        for w in e.event.wakes)
    assert sorted(delivered) == sorted(wakes) and set(delivered.values()) <= {1}, (wakes, delivered)
    return {"events": len(events), "calls": len(open_attempt), "tasks": len(task_starts), "notes": lines_total,
            "wakes": len(wakes),
            "interrupted": sum(1 for e in events if e.event.type in ("tool_call_interrupted", "task_interrupted"))}
