"""Resume: what a crash leaves open is settled, once, with the right words for the model."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from conftest import python_tool
from crashcheck import crash, resume_and_check

from zagent_core import Engine
from zagent_core.session.engine import SessionEndedError, UnknownSessionError
from zagent_core.journal.events import TaskStarted, ToolCallRequested, ToolCallStarted
from zagent_core.tools.processes import ProcessIdentity
from zagent_store import SQLiteJournal

# The store's promises hold for the engine on each of them: run on SQLite and PostgreSQL.
pytestmark = pytest.mark.stores


def events_of(home: Path, session_id: str) -> list:
    with SQLiteJournal(home / "journal.db") as journal:
        return [e.event for e in journal.read(session_id)]


def test_a_background_start_cut_off_before_launch_is_reported_as_never_started(tmp_path: Path) -> None:
    home, workspace = tmp_path / "home", tmp_path / "ws"
    workspace.mkdir()
    outcome = crash(home, workspace, point="after_tool_call_started")
    resume_and_check(home, workspace, outcome)
    interrupted = [e for e in events_of(home, outcome.session_id) if e.type == "tool_call_interrupted"]
    assert "the task never started" in interrupted[0].message


def test_a_foreground_call_cut_off_is_interrupted_with_a_warning_about_its_effect(tmp_path: Path) -> None:
    home, workspace = tmp_path / "home", tmp_path / "ws"
    workspace.mkdir()
    outcome = crash(home, workspace, point="before_tool_call_finished")
    resume_and_check(home, workspace, outcome)
    interrupted = [e for e in events_of(home, outcome.session_id) if e.type == "tool_call_interrupted"]
    assert "fg_notes" in interrupted[0].message and "may or may not have happened" in interrupted[0].message


def test_a_task_that_exited_while_the_engine_was_down_wakes_the_agent_on_resume(tmp_path: Path) -> None:
    home, workspace = tmp_path / "home", tmp_path / "ws"
    workspace.mkdir()
    outcome = crash(home, workspace, point="after_task_started")
    exit_files = list((home / "sessions" / outcome.session_id / "calls").glob("*/exit.json"))
    deadline = time.monotonic() + 10
    while not exit_files and time.monotonic() < deadline:  # the supervisor outlives the engine
        time.sleep(0.05)
        exit_files = list((home / "sessions" / outcome.session_id / "calls").glob("*/exit.json"))
    assert exit_files, "the task should finish on its own"
    resume_and_check(home, workspace, outcome)
    events = events_of(home, outcome.session_id)
    exited = [e for e in events if e.type == "task_exited"]
    assert exited[0].output == "bg done"
    wakes = [e for e in events if e.type == "wake_requested" and e.reason == "task_exited"]
    assert wakes and events.index(wakes[0]) > [e.type for e in events].index("session_resumed")


def test_a_replay_safe_call_cut_off_runs_again(home_dir: Path, engine: Engine) -> None:
    python_tool(home_dir, "lookup", "print('looked up')", replay="safe")
    session = engine.start_session("test")
    # What a crash after tool_call_started leaves: the call has started and has no end.
    session._append([
        ToolCallRequested(call_id="call_1", tool="lookup", arguments={}),
        ToolCallStarted(call_id="call_1", tool="lookup", arguments={}, argv=["x"], cwd="/", input_mode="stdin_json",
                        output_mode="text", output_dir=str(home_dir), notify_file=str(home_dir / "no-notify"),
                        timeout_seconds=5, manifest_hash="m", files_hash="f"),
    ])
    resumed = engine.resume(session.session_id)
    assert resumed.state.calls == {}  # settled: a finished call leaves the resume state
    events = [stored.event for stored in engine.journal.read(session.session_id)]
    assert [e.type for e in events][-3:] == ["tool_call_interrupted", "tool_call_started", "tool_call_finished"]
    assert events[-1].output == "looked up"


def test_a_reused_pid_is_not_mistaken_for_the_task(home_dir: Path, engine: Engine, tmp_path: Path) -> None:
    python_tool(home_dir, "bg", "print('x')", background=True)
    session = engine.start_session("test")
    me = ProcessIdentity.of(os.getpid())
    assert me is not None and me.alive()
    task_dir = tmp_path / "task"
    task_dir.mkdir()
    session._append([
        ToolCallRequested(call_id="call_1", tool="bg", arguments={}),
        ToolCallStarted(call_id="call_1", task_id="1", tool="bg", arguments={}, argv=["x"], cwd="/",
                        input_mode="stdin_json", output_mode="text", output_dir=str(task_dir / "output"),
                        notify_file=str(task_dir / "notify"), timeout_seconds=5, manifest_hash="m", files_hash="f"),
        # This process's pid, but another start time: a pid the kernel gave to someone else.
        TaskStarted(task_id="1", call_id="call_1", tool="bg", pid=me.pid, start_ticks=me.start_ticks + 1,
                    boot_id=me.boot_id, task_dir=str(task_dir)),
    ])
    resumed = engine.resume(session.session_id)
    assert resumed.state.tasks["1"].status == "interrupted"
    finished = [e.event for e in engine.journal.read(session.session_id, types=["tool_call_finished"])]
    assert [e.call_id for e in finished] == ["call_1"]  # its "started as task #1" answer
    assert resumed.state.calls == {}  # and, its task over, the call has nothing left open
    assert [w.reason for w in resumed.deliver().wakes] == ["task_interrupted"]
    assert resumed.deliver().wakes == []  # exactly once


def test_resume_refuses_unknown_and_ended_sessions(engine: Engine) -> None:
    with pytest.raises(UnknownSessionError):
        engine.resume("no-such-session")
    with engine.start_session("test") as session:
        pass
    with pytest.raises(SessionEndedError):
        engine.resume(session.session_id)
