"""Invariants 1 and 4: incremental state == full rebuild == snapshot + later events, and
every wake-up is either pending or delivered by exactly one turn.

A hypothesis state machine appends random, well-formed session histories to a real
SQLite journal, keeping the state incrementally as the engine does, and checks the
three ways of computing it agree after every step.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from zagent_core import SessionState, apply, rebuild
from zagent_core.journal.fold import _Folding
from zagent_core.journal.snapshots import from_snapshot, to_snapshot
from zagent_core.journal.events import (
    ApprovalDecided,
    ApprovalRequested,
    NoteReceived,
    ReadEntry,
    ReadStateUpdated,
    SkillActivated,
    ToolStateWritten,
    ToolsUnlocked,
    SessionEnded,
    TaskExited,
    TaskInterrupted,
    TaskStarted,
    TurnStarted,
    WakeRequested,
    SessionStarted,
    ToolCallFinished,
    ToolCallRejected,
    ToolCallRequested,
    ToolCallStarted,
)
from zagent_store import SQLiteJournal

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5))
arguments = st.dictionaries(st.text(max_size=4), json_scalars, max_size=3)


class SessionHistory(RuleBasedStateMachine):
    @initialize()
    def open_journal(self) -> None:
        self.dir = tempfile.TemporaryDirectory()
        self.journal = SQLiteJournal(Path(self.dir.name) / "journal.db")
        self.session = "s"
        self.state = SessionState()
        self.snapshots: list[SessionState] = []
        self.requested: list[str] = []
        #: Calls waiting for approval, and approved ones not started yet.
        self.asking: list[str] = []
        self.approved: list[str] = []
        self.running: list[str] = []
        self.tasks: list[str] = []
        self.wakes: list[str] = []
        self.delivered: list[str] = []
        self.counter = 0
        #: What the tool state and the read-state map must be, kept by hand.
        self.tool_state: dict[str, dict] = {}
        self.hashes: dict[str, str] = {}
        #: The active skills, by name: the sha256 of the SKILL.md last read.
        self.skills: dict[str, str] = {}
        self.unlocked: list[str] = []
        self._append([SessionStarted(origin="test", workspace="/w", zagent_version="0", warnings=["w"])])

    def teardown(self) -> None:
        self.journal.close()
        self.dir.cleanup()

    def _append(self, events) -> None:
        for stored in self.journal.append(self.session, events, self.state.version):
            self.state = apply(self.state, stored)

    @precondition(lambda self: self.state.status == "open")
    @rule(tool=st.sampled_from(["a", "b"]), args=arguments, batch=st.booleans(), nested=st.booleans())
    def request(self, tool: str, args: dict, batch: bool, nested: bool) -> None:
        self.counter += 1
        call_id = f"c{self.counter}"
        # A nested call is asked for by a running call's tool.
        parent = self.running[-1] if nested and self.running else None
        requested = ToolCallRequested(call_id=call_id, tool=tool, arguments=args, parent_call_id=parent)
        if batch:  # the engine appends a request with its start in one transaction
            self._append([requested, self._started(call_id, tool, args)])
            self.running.append(call_id)
        else:
            self._append([requested])
            self.requested.append(call_id)

    def _started(self, call_id: str, tool: str, args: dict) -> ToolCallStarted:
        return ToolCallStarted(call_id=call_id, tool=tool, arguments=args, argv=[tool], cwd="/", input_mode="env",
                               output_mode="text", output_dir="/o", notify_file="/n", timeout_seconds=1.0,
                               manifest_hash="m", files_hash="f")

    @precondition(lambda self: self.requested)
    @rule(data=st.data(), reject=st.booleans())
    def settle_request(self, data: st.DataObject, reject: bool) -> None:
        call_id = data.draw(st.sampled_from(self.requested))
        self.requested.remove(call_id)
        call = self.state.calls[call_id]
        if reject:
            self._append([ToolCallRejected(call_id=call_id, reason="invalid_arguments", message="no", problems=["p"])])
        else:
            self._append([self._started(call_id, call.tool, call.arguments)])
            self.running.append(call_id)

    @precondition(lambda self: self.state.status == "open")
    @rule(args=arguments)
    def ask_approval(self, args: dict) -> None:
        """A call that needs approval: requested and asked about in one transaction."""
        self.counter += 1
        call_id = f"c{self.counter}"
        self._append([ToolCallRequested(call_id=call_id, tool="ask", arguments=args),
                      ApprovalRequested(call_id=call_id, tool="ask", arguments=args, why="w")])
        self.asking.append(call_id)

    @precondition(lambda self: self.asking)
    @rule(data=st.data(), approved=st.booleans())
    def decide(self, data: st.DataObject, approved: bool) -> None:
        call_id = data.draw(st.sampled_from(self.asking))
        self.asking.remove(call_id)
        decided = ApprovalDecided(call_id=call_id, approved=approved, via="zagent approve")
        if approved:
            self._append([decided])
            self.approved.append(call_id)
        else:  # a denial is the call's result, in the same transaction
            self._append([decided, ToolCallRejected(call_id=call_id, reason="denied", message="no")])

    @precondition(lambda self: self.approved)
    @rule(data=st.data())
    def start_approved(self, data: st.DataObject) -> None:
        call_id = data.draw(st.sampled_from(self.approved))
        self.approved.remove(call_id)
        call = self.state.calls[call_id]
        self._append([self._started(call_id, call.tool, call.arguments)])
        self.running.append(call_id)

    @invariant()
    def approvals_are_the_undecided_and_the_approved_not_started(self) -> None:
        assert sorted(self.state.waiting_approvals) == sorted(self.asking)
        assert sorted(c for c, a in self.state.approvals.items() if a.approved) == sorted(self.approved)

    @precondition(lambda self: self.running)
    @rule(data=st.data(), output=st.text(max_size=20), is_error=st.booleans(),
          exit_code=st.one_of(st.none(), st.integers(-9, 255)))
    def finish(self, data: st.DataObject, output: str, is_error: bool, exit_code: int | None) -> None:
        call_id = data.draw(st.sampled_from(self.running))
        self.running.remove(call_id)
        self._append([ToolCallFinished(call_id=call_id, output=output, is_error=is_error, exit_code=exit_code,
                                       duration_ms=5)])

    @precondition(lambda self: self.running)
    @rule(data=st.data(), writes=st.dictionaries(st.sampled_from(["k1", "k2", "k3"]), st.one_of(st.none(), json_scalars),
                                                 max_size=3),
          reads=st.dictionaries(st.sampled_from(["/w/a", "/w/b"]), st.text("0123456789abcdef", min_size=16,
                                                                           max_size=16), max_size=2),
          skill=st.one_of(st.none(), st.tuples(st.sampled_from(["pdf", "csv"]), st.sampled_from(["ab" * 32, "cd" * 32]))),
          unlocks=st.lists(st.sampled_from(["m__a", "m__b", "m__c"]), max_size=3))
    def finish_with_effects(self, data: st.DataObject, writes: dict, reads: dict,
                            skill: tuple[str, str] | None, unlocks: list[str]) -> None:
        """A call's staged effects, committed with its result in one transaction."""
        call_id = data.draw(st.sampled_from(self.running))
        self.running.remove(call_id)
        tool = self.state.calls[call_id].tool
        events: list = []
        if reads:
            events.append(ReadStateUpdated(call_id=call_id, entries=[
                ReadEntry(path=path, hash=digest, at="2026-12-01T00:00:00.000Z") for path, digest in reads.items()]))
            self.hashes.update(reads)
        if unlocks:
            events.append(ToolsUnlocked(call_id=call_id, tools=unlocks))
            self.unlocked += [name for name in dict.fromkeys(unlocks) if name not in self.unlocked]
        if writes:
            events.append(ToolStateWritten(call_id=call_id, tool=tool, values=writes))
            merged = {**self.tool_state.get(tool, {}), **writes}
            self.tool_state[tool] = {k: v for k, v in merged.items() if v is not None}
        if skill:
            events.append(SkillActivated(call_id=call_id, name=skill[0], sha256=skill[1]))
            self.skills[skill[0]] = skill[1]
        self._append([*events, ToolCallFinished(call_id=call_id, output="ok", is_error=False, exit_code=0,
                                                duration_ms=1)])

    @invariant()
    def tool_state_and_read_state_are_what_the_calls_committed(self) -> None:
        assert self.state.tool_state == self.tool_state
        assert self.state.active_skills == self.skills
        assert {path: entry.hash for path, entry in self.state.read_state.items()} == self.hashes
        assert self.state.unlocked == self.unlocked

    @precondition(lambda self: self.running)
    @rule(data=st.data(), text=st.text(min_size=1, max_size=10), wake=st.booleans())
    def note(self, data: st.DataObject, text: str, wake: bool) -> None:
        call_id = data.draw(st.sampled_from(self.running))
        offset = self.state.calls[call_id].notify_offset + len(text.encode()) + 1
        events = [NoteReceived(call_id=call_id, text=text, wake=wake, offset=offset)]
        if wake:
            self.counter += 1
            events.append(WakeRequested(wake_id=f"w{self.counter}", reason="note", text=text, call_id=call_id))
            self.wakes.append(f"w{self.counter}")
        self._append(events)

    @precondition(lambda self: self.running and self.state.status == "open")
    @rule(data=st.data())
    def start_task(self, data: st.DataObject) -> None:
        call_id = data.draw(st.sampled_from(self.running))
        self.running.remove(call_id)
        task_id = str(len(self.state.tasks) + 1)
        self._append([
            TaskStarted(task_id=task_id, call_id=call_id, tool="bg", pid=1, start_ticks=1, boot_id="b", task_dir="/t"),
            ToolCallFinished(call_id=call_id, output=f"started as task #{task_id}", is_error=False, exit_code=None,
                             duration_ms=0),
        ])
        self.tasks.append(task_id)

    @precondition(lambda self: self.tasks)
    @rule(data=st.data(), interrupted=st.booleans())
    def end_task(self, data: st.DataObject, interrupted: bool) -> None:
        task_id = data.draw(st.sampled_from(self.tasks))
        self.tasks.remove(task_id)
        call_id = self.state.tasks[task_id].call_id
        self.counter += 1
        if interrupted:
            end = TaskInterrupted(task_id=task_id, call_id=call_id, message="gone")
        else:
            end = TaskExited(task_id=task_id, call_id=call_id, output="ok", is_error=False, exit_code=0, duration_ms=1)
        self._append([end, WakeRequested(wake_id=f"w{self.counter}", reason="task_exited", text="ended",
                                         task_id=task_id, call_id=call_id)])
        self.wakes.append(f"w{self.counter}")

    @precondition(lambda self: self.state.status == "open")
    @rule()
    def deliver(self) -> None:
        notes, wakes = list(self.state.pending_notes), list(self.state.pending_wakes)
        if notes or wakes:
            self._append([TurnStarted(notes=notes, wakes=wakes)])
            self.delivered.extend(wakes)

    @precondition(lambda self: self.state.status == "open")
    @rule()
    def snapshot(self) -> None:
        self.snapshots.append(self.state)

    @precondition(lambda self: self.state.status == "open" and not self.running and not self.requested
                  and not self.tasks)
    @rule()
    def end(self) -> None:
        self._append([SessionEnded()])

    @rule()
    def reopen_journal(self) -> None:
        self.journal.close()
        self.journal = SQLiteJournal(Path(self.dir.name) / "journal.db")

    @invariant()
    def incremental_equals_rebuild_equals_snapshot_plus_later(self) -> None:
        full = rebuild(self.journal.read(self.session))
        assert full == self.state
        for snapshot in self.snapshots:
            assert rebuild(self.journal.read(self.session, after_version=snapshot.version), snapshot) == self.state
            stored = from_snapshot(to_snapshot(snapshot))  # as a snapshot row holds it
            assert rebuild(self.journal.read(self.session, after_version=snapshot.version), stored) == self.state

    @invariant()
    def every_wake_is_pending_or_delivered_exactly_once(self) -> None:
        assert len(self.delivered) == len(set(self.delivered))
        assert sorted(self.delivered + list(self.state.pending_wakes)) == sorted(self.wakes)

    @invariant()
    def running_calls_are_the_started_ones_without_a_result(self) -> None:
        assert sorted(c.call_id for c in self.state.running_calls) == sorted(self.running)


TestSessionHistory = SessionHistory.TestCase
TestSessionHistory.settings = settings(max_examples=60, stateful_step_count=25, deadline=None,
                                       suppress_health_check=[HealthCheck.too_slow])


def test_the_fold_writes_every_field_of_the_state_as_the_state_types_it() -> None:
    # The handlers write the state through _Folding's typed attributes, which mypy checks
    # against _Folding's annotations only: they must be SessionState's, field for field.
    folded = {name: kind for name, kind in _Folding.__annotations__.items() if name != "history"}
    assert folded == SessionState.__annotations__


def test_a_state_rebuilt_with_history_keeps_closed_calls_as_more_events_are_folded_onto_it() -> None:
    from datetime import datetime, timezone

    from zagent_core.journal.protocol import StoredEvent

    bodies = [SessionStarted(origin="test", workspace="/w", zagent_version="0"),
              ToolCallRequested(call_id="c1", tool="t", arguments={}),
              ToolCallStarted(call_id="c1", tool="t", arguments={}, argv=["t"], cwd="/", input_mode="env",
                              output_mode="text", output_dir="/o", notify_file="/n", timeout_seconds=1.0),
              ToolCallFinished(call_id="c1", output="one", is_error=False, exit_code=0, duration_ms=1),
              ToolCallRequested(call_id="c2", tool="t", arguments={}),
              ToolCallStarted(call_id="c2", tool="t", arguments={}, argv=["t"], cwd="/", input_mode="env",
                              output_mode="text", output_dir="/o", notify_file="/n", timeout_seconds=1.0),
              ToolCallFinished(call_id="c2", output="two", is_error=False, exit_code=0, duration_ms=1)]
    stored = [StoredEvent(n, "s", n, datetime.now(timezone.utc), body) for n, body in enumerate(bodies, start=1)]
    shown = rebuild(stored[:4], history=True)
    for event in stored[4:6]:
        shown = apply(shown, event)
    shown = rebuild(stored[6:], shown)
    assert [(c.call_id, c.output) for c in shown.calls.values()] == [("c1", "one"), ("c2", "two")]
    assert rebuild(stored).calls == {}  # without history, closed calls leave the state


def _calls(session_id: str, outputs: list[str], background: bool) -> list:
    """A well-formed session: its calls one after the other, each with a note; the last one's task
    started (and left running) when ``background``."""
    bodies: list = [SessionStarted(origin="test", workspace="/w", zagent_version="0")]
    for n, output in enumerate(outputs):
        call_id = f"{session_id}-c{n}"
        bodies += [ToolCallRequested(call_id=call_id, tool="t", arguments={"n": n}),
                   ToolCallStarted(call_id=call_id, tool="t", arguments={"n": n}, argv=["t"], cwd="/",
                                   input_mode="env", output_mode="text", output_dir="/o", notify_file="/n",
                                   timeout_seconds=1.0, task_id=str(n + 1) if background else None),
                   NoteReceived(call_id=call_id, text=output, offset=n + 1)]
        if background:
            bodies.append(TaskStarted(task_id=str(n + 1), call_id=call_id, tool="t", pid=10 + n, start_ticks=1,
                                      boot_id="b", task_dir="/t"))
        bodies.append(ToolCallFinished(call_id=call_id, output=output, is_error=False, exit_code=0, duration_ms=1))
        if background and n + 1 < len(outputs):
            bodies.append(TaskExited(task_id=str(n + 1), call_id=call_id, output=output, is_error=False, exit_code=0,
                                     duration_ms=1))
    return bodies


@given(sessions=st.lists(st.tuples(st.lists(st.text(max_size=3), max_size=4), st.booleans()), min_size=1,
                         max_size=4),
       order=st.lists(st.integers(0, 3), max_size=80), history=st.booleans())
@settings(max_examples=60, deadline=None)
def test_rebuilding_every_session_in_one_pass_over_the_table_is_rebuilding_each(
        sessions: list[tuple[list[str], bool]], order: list[int], history: bool) -> None:
    from datetime import datetime, timedelta, timezone

    from zagent_core.journal.fold import rebuild_all
    from zagent_core.journal.protocol import StoredEvent

    pending = {f"s{i}": _calls(f"s{i}", outputs, background) for i, (outputs, background) in enumerate(sessions)}
    ids = list(pending)
    # The journal's table order: the sessions' events interleaved as ``order`` says, then the rest in turn.
    picks = [ids[i % len(ids)] for i in order] + [sid for sid in ids for _ in pending[sid]]
    versions = dict.fromkeys(ids, 0)
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    table: list[StoredEvent] = []
    for sid in picks:
        if versions[sid] < len(pending[sid]):
            versions[sid] += 1
            seq = len(table) + 1
            table.append(StoredEvent(seq, sid, versions[sid], start + timedelta(seconds=seq),
                                     pending[sid][versions[sid] - 1]))
    states = rebuild_all(table, history=history)
    assert states == {sid: rebuild([s for s in table if s.session_id == sid], history=history) for sid in ids}
    assert all(state._history == history for state in states.values())
