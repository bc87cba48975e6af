"""Opening a session reads its latest snapshot and the events after it (issue 9); a
snapshot that cannot be trusted is passed over, never fatal."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import python_tool

from zagent_core import Engine, rebuild
from zagent_core.session import writer as engine_module
from zagent_core.agent.loop import Agent
from zagent_core.journal.protocol import Journal, StoredEvent
from zagent_core.agent.models import ModelReply, ToolCallRequest
from zagent_core.agent.models.scripted import ScriptedModel
from zagent_core.journal.snapshots import projection_tag, to_snapshot

# The store's promises hold for the engine on each of them: run on SQLite and PostgreSQL.
pytestmark = pytest.mark.stores


class CountingJournal:
    """The test's journal (either store), counting the events it reads back."""

    def __init__(self, journal: Journal) -> None:
        self._journal = journal
        self.events_read = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._journal, name)

    def read(self, session_id: str, after_version: int = 0, **filters: Any) -> Iterator[StoredEvent]:
        for stored in self._journal.read(session_id, after_version, **filters):
            self.events_read += 1
            yield stored


def busy_session(engine: Engine, home: Path, calls: int) -> str:
    python_tool(home, "noop", "print('ok')")
    with engine.start_session("test") as session:
        for _ in range(calls):
            session.call("noop", {})
        return session.session_id


def test_a_session_opens_from_its_snapshot_plus_the_events_after_it(
        home_dir: Path, workspace: Path, engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_module, "SNAPSHOT_EVERY", 10)
    python_tool(home_dir, "noop", "print('ok')")
    session = engine.start_session("test")
    for _ in range(12):
        session.call("noop", {})
    session.release()  # stops driving it: a snapshot of the end
    head = engine.journal.head(session.session_id)
    snapshot = engine.journal.load_snapshot(session.session_id, projection_tag())
    assert snapshot is not None and snapshot.version == head and snapshot.status == "idle"
    session.record_user_message("one more event after the snapshot")

    counting = CountingJournal(engine.journal)
    opened = Engine(engine.home, counting, workspace=workspace, config=engine.config).session_state(  # type: ignore[arg-type]
        session.session_id)
    assert counting.events_read == 1  # only the tail
    assert opened == rebuild(engine.journal.read(session.session_id)) == session.state


@pytest.mark.parametrize("damage", ["{not json", json.dumps({"version": "x"}), ""])
def test_a_damaged_snapshot_is_passed_over_and_the_events_give_the_state(
        home_dir: Path, engine: Engine, damage: str) -> None:
    session_id = busy_session(engine, home_dir, 3)
    head = engine.journal.head(session_id)
    engine.journal.save_snapshot(session_id, head + 5, projection_tag(), damage, "idle")
    assert engine.session_state(session_id) == rebuild(engine.journal.read(session_id))


def test_a_snapshot_of_another_version_of_the_projection_is_never_loaded(home_dir: Path, engine: Engine) -> None:
    session_id = busy_session(engine, home_dir, 2)
    full = rebuild(engine.journal.read(session_id))
    lying = to_snapshot(full.model_copy(update={"turns": 99}))
    engine.journal.save_snapshot(session_id, full.version, "session/1/older-code", lying, "idle")
    assert engine.session_state(session_id).turns == full.turns


def test_a_snapshot_claiming_a_version_it_does_not_hold_is_not_trusted(home_dir: Path, engine: Engine) -> None:
    session_id = busy_session(engine, home_dir, 2)
    full = rebuild(engine.journal.read(session_id))
    engine.journal.save_snapshot(session_id, full.version + 1, projection_tag(),
                                 to_snapshot(full.model_copy(update={"turns": 99})), "idle")
    assert engine.session_state(session_id) == full


def test_each_turn_ends_with_a_snapshot_that_sessions_list_reads_its_status_from(
        home_dir: Path, engine: Engine) -> None:
    python_tool(home_dir, "noop", "print('ok')")
    model = ScriptedModel([ModelReply(tool_calls=[ToolCallRequest(id="c1", name="noop", arguments={})],
                                      stop_reason="tool_use"), ModelReply(text="done")])
    session = engine.start_session("run")
    Agent(session, model).run("go")
    session.release()
    snapshot = engine.journal.load_snapshot(session.session_id, projection_tag())
    assert snapshot is not None and snapshot.version == engine.journal.head(session.session_id)
    (summary,) = engine.journal.sessions()
    assert summary.status == "idle" and summary.status_version == snapshot.version


def test_the_state_keeps_the_latest_ended_tasks_so_snapshots_stay_small(tmp_path: Path) -> None:
    from zagent_core import Home
    from zagent_core.journal.events import TaskExited, TaskStarted, ToolCallFinished, ToolCallRequested, ToolCallStarted
    from zagent_core.journal.fold import MAX_ENDED_TASKS
    from zagent_store import MemoryJournal

    (tmp_path / "tools").mkdir()
    engine = Engine(Home(tmp_path), MemoryJournal(), workspace=tmp_path)
    session = engine.start_session("test")
    sizes = []
    for n in range(1, 2 * MAX_ENDED_TASKS + 6):
        call, task = f"c{n}", str(n)
        session._append([
            ToolCallRequested(call_id=call, tool="bg", arguments={}),
            ToolCallStarted(call_id=call, task_id=task, tool="bg", arguments={}, argv=["x"], cwd="/",
                            input_mode="stdin_json", output_mode="text", output_dir="/o", notify_file="/n",
                            timeout_seconds=None, manifest_hash="m", files_hash="f"),
            TaskStarted(task_id=task, call_id=call, tool="bg", pid=1, start_ticks=1, boot_id="b", task_dir="/t"),
            ToolCallFinished(call_id=call, output="started", is_error=False, exit_code=None, duration_ms=0),
            TaskExited(task_id=task, call_id=call, output="x" * 1000, is_error=False, exit_code=0, duration_ms=1),
        ])
        sizes.append(len(to_snapshot(session.state)))
    assert len(session.state.tasks) == MAX_ENDED_TASKS and session.state.tasks_numbered == 2 * MAX_ENDED_TASKS + 5
    assert sizes[-1] < sizes[MAX_ENDED_TASKS + 1] * 1.01  # flat once the window is full
    assert session.state == rebuild(engine.journal.read(session.session_id))
    listing = session.call("terminal", {"action": "list"}).output
    assert listing.splitlines()[-1] == f"({MAX_ENDED_TASKS + 5} older tasks ended earlier; their results were " \
                                       "delivered when they ended)"
    old = session.call("terminal", {"action": "wait", "task": 1})
    assert old.is_error and "task #1 ended earlier in this session" in old.output
    shown = rebuild(engine.journal.read(session.session_id), history=True)
    assert len(shown.tasks) == 2 * MAX_ENDED_TASKS + 5  # sessions show lists them all
