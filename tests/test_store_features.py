"""The journal's newer promises: typed reads, tail reads, snapshots, status without a fold, leases."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zagent_core.journal.events import (
    EVENT_TYPES,
    EventSchemaError,
    NoteReceived,
    SessionEnded,
    SessionStarted,
    ToolCallRequested,
    dump_event,
    load_event,
    load_event_json,
)
from zagent_core.journal.protocol import ConcurrencyError, Journal, LeaseHeldError, Snapshot
from zagent_store import SQLiteJournal
from zagent_store.views import CALLS_AND_TASKS, TASK_ENDS, people_9


def started() -> SessionStarted:
    return SessionStarted(origin="test", workspace="/w", zagent_version="0")


def request(n: int) -> ToolCallRequested:
    return ToolCallRequested(call_id=f"c{n}", tool="t", arguments={"n": n})


# -- typed reads ------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=200, deadline=None)
@given(text=st.text(), arguments=json_values, offset=st.integers(min_value=0))
def test_a_typed_read_of_a_stored_body_equals_the_old_two_step_load(text: str, arguments: object,
                                                                       offset: int) -> None:
    for event in (NoteReceived(call_id="c", text=text, offset=offset),
                  ToolCallRequested(call_id="c", tool=text, arguments=arguments)):
        body = dump_event(event)
        assert load_event_json(event.type, body) == load_event(event.type, json.loads(body)) == event
        assert load_event_json(event.type, body.encode()) == event


@settings(max_examples=200, deadline=None)
@given(body=st.one_of(st.text(), json_values.map(json.dumps),
                      st.dictionaries(st.sampled_from(["v", "call_id", "tool", "arguments", "x"]), json_values)
                      .map(lambda d: json.dumps(d, separators=(",", ":")))))
def test_a_bad_body_gets_the_same_answer_as_the_old_load(body: str) -> None:
    try:
        expected: object = load_event("tool_call_requested", json.loads(body))
    except (ValueError, AttributeError, RecursionError, EventSchemaError) as exc:
        expected = type(exc)
    try:
        got: object = load_event_json("tool_call_requested", body)
    except EventSchemaError as exc:
        got = type(exc)
    if isinstance(expected, type) and not issubclass(expected, EventSchemaError):
        expected = EventSchemaError  # not JSON, or not an object: now a clear EventSchemaError
    assert got == expected


def test_a_body_of_an_older_schema_version_is_upcast(monkeypatch: pytest.MonkeyPatch) -> None:
    from zagent_core.journal import events
    monkeypatch.setattr(events.SessionEnded, "SCHEMA_VERSION", 2)
    monkeypatch.setattr(events, "_FAST", events._fast_paths())
    monkeypatch.setitem(events.UPCASTERS, ("session_ended", 1), lambda d: {**d, "reason": d["reason"].upper()})
    assert load_event_json("session_ended", '{"v":1,"reason":"done"}').reason == "DONE"
    assert load_event_json("session_ended", '{"v":2,"reason":"done"}').reason == "done"
    with pytest.raises(EventSchemaError, match="schema version 3, this zagent reads up to 2"):
        load_event_json("session_ended", '{"v":3,"reason":"done"}')


def test_reading_a_damaged_body_names_the_event(journal: SQLiteJournal) -> None:
    journal.append("s", [started(), request(1)], 0)
    with sqlite3.connect(journal.path) as raw:
        raw.execute("DROP TRIGGER events_no_update")
        raw.execute("UPDATE events SET data = '{\"v\":1,\"call_id\":5}' WHERE seq = 2")
    with pytest.raises(EventSchemaError, match=r"event #2 \(version 2 of session s\): .*does not match its schema"):
        list(journal.read("s"))


# -- tail and head ------------------------------------------------------------------------


def test_read_last_gives_the_tail_in_order_and_head_the_version(journal: SQLiteJournal) -> None:
    assert journal.head("s") == 0 and journal.read_last("s", 3) == []
    journal.append("s", [started(), *(request(n) for n in range(1, 6))], 0)
    journal.append("other", [started()], 0)
    assert [e.version for e in journal.read_last("s", 3)] == [4, 5, 6]
    assert [e.version for e in journal.read_last("s", 100)] == [1, 2, 3, 4, 5, 6]
    assert journal.read_last("s", 0) == []
    assert journal.read_last("s", 2) == list(journal.read("s", after_version=4))
    assert journal.head("s") == 6 and journal.head("other") == 1


# -- snapshots ----------------------------------------------------------------------------


def test_a_snapshot_is_kept_per_projection_and_only_the_newest(journal: SQLiteJournal) -> None:
    assert isinstance(journal, Journal)
    journal.append("s", [started(), request(1), request(2)], 0)
    assert journal.load_snapshot("s", "state/1") is None
    journal.save_snapshot("s", 2, "state/1", '{"calls": 1}', "idle")
    journal.save_snapshot("s", 3, "state/1", '{"calls": 2}', "running")
    journal.save_snapshot("s", 1, "state/1", '{"calls": 0}')  # older: ignored
    journal.save_snapshot("s", 1, "state/2", "{}")
    assert journal.load_snapshot("s", "state/1") == Snapshot(3, "state/1", '{"calls": 2}', "running")
    assert journal.load_snapshot("s", "state/2") == Snapshot(1, "state/2", "{}", None)
    assert journal.load_snapshot("other", "state/1") is None


def test_a_snapshot_given_with_an_append_is_at_its_last_event_and_shares_its_fate(journal: SQLiteJournal) -> None:
    journal.append("s", [started()], 0)
    journal.append("s", [request(1), request(2)], 1, snapshot=("state/1", '{"n": 2}', "waiting"))
    assert journal.load_snapshot("s", "state/1") == Snapshot(3, "state/1", '{"n": 2}', "waiting")
    with pytest.raises(ConcurrencyError):
        journal.append("s", [request(3)], 1, snapshot=("state/1", '{"n": 9}', "lost"))
    assert journal.load_snapshot("s", "state/1") == Snapshot(3, "state/1", '{"n": 2}', "waiting")


# -- sessions: counts and status without reading the events -----------------------------


def test_sessions_carry_the_newest_snapshot_status(journal: SQLiteJournal) -> None:
    journal.append("a", [started(), request(1)], 0, snapshot=("state/1", "{}", "running"))
    journal.append("b", [started()], 0)
    journal.append("a", [SessionEnded()], 2)
    journal.save_snapshot("a", 3, "other/1", "{}", "ended")
    summaries = {s.session_id: s for s in journal.sessions()}
    assert (summaries["a"].status, summaries["a"].status_version, summaries["a"].calls) == ("ended", 3, 1)
    assert (summaries["b"].status, summaries["b"].status_version) == (None, None)
    assert [s.session_id for s in journal.sessions(1)] == ["a"]
    view = dict(journal.db.execute("SELECT session_id, status FROM sessions").fetchall())
    assert view == {"a": "ended", "b": "open"}
    journal.save_snapshot("b", 1, "state/1", "{}", "waiting on tasks")
    assert dict(journal.db.execute("SELECT session_id, status FROM sessions").fetchall())["b"] == "waiting on tasks"


def test_sessions_counts_match_the_events_after_many_appends(journal: SQLiteJournal) -> None:
    journal.append("s", [started()], 0)
    for n in range(1, 30):
        journal.append("s", [request(n)], n)
    (summary,) = journal.sessions()
    assert (summary.events, summary.calls, summary.ended) == (30, 29, False)
    events = list(journal.read("s"))
    assert (summary.started_at, summary.last_at) == (events[0].at, events[-1].at)



@pytest.mark.parametrize(("condition", "types"), [
    (CALLS_AND_TASKS, {"task_exited", "task_interrupted", "task_killed", "task_started", "tool_call_finished",
                       "tool_call_interrupted", "tool_call_rejected", "tool_call_requested", "tool_call_started"}),
    (TASK_ENDS, {"task_exited", "task_interrupted", "task_killed"}),
    (people_9(""), {"approval_decided", "approval_requested", "input_answered", "input_requested"}),
])
def test_each_range_of_types_a_partial_index_is_on_holds_exactly_its_types(condition: str, types: set[str]) -> None:
    # Ranges cost an append less than IN lists; a new event type sorting inside one would join its index.
    conn = sqlite3.connect(":memory:")
    held = {kind for kind in EVENT_TYPES if conn.execute(f"SELECT {condition} FROM (SELECT ? AS type)", (kind,)).fetchone()[0]}
    assert held == types


# -- leases ---------------------------------------------------------------------------------

ME = {"host": "h", "boot_id": "b", "pid": 10, "start_ticks": 5}
OTHER = {"host": "h", "boot_id": "b", "pid": 11, "start_ticks": 7}


def test_a_lease_is_taken_once_reentered_by_its_owner_and_refused_to_others(journal: SQLiteJournal) -> None:
    assert journal.lease("s") is None
    first = journal.acquire_lease("s", ME)
    again = journal.acquire_lease("s", dict(reversed(list(ME.items()))))  # key order does not matter
    assert again.since == first.since and journal.lease("s") == first
    with pytest.raises(LeaseHeldError, match=r"session s is driven by another process \(boot_id b, host h, "
                                             r"pid 10, start_ticks 5\) since \d{4}-") as held:
        journal.acquire_lease("s", OTHER)
    assert held.value.holder == first
    journal.release_lease("s", OTHER)  # not the holder: nothing happens
    assert journal.lease("s") == first
    journal.release_lease("s", ME)
    assert journal.lease("s") is None
    assert journal.acquire_lease("s", OTHER).owner == OTHER


def test_a_dead_owner_s_lease_is_taken_over_only_by_naming_it(journal: SQLiteJournal) -> None:
    journal.acquire_lease("s", ME)
    with pytest.raises(LeaseHeldError):
        journal.acquire_lease("s", OTHER, replacing={**ME, "pid": 99})
    taken = journal.acquire_lease("s", OTHER, replacing=ME)
    assert journal.lease("s") == taken and taken.owner == OTHER


def test_of_many_processes_racing_for_a_lease_exactly_one_wins(home_dir: Path) -> None:
    path = home_dir / "journal.db"
    SQLiteJournal(path).close()
    wins: list[int] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def contender(n: int) -> None:
        with SQLiteJournal(path) as journal:  # a connection each, as separate processes have
            barrier.wait(timeout=10)
            try:
                journal.acquire_lease("s", {"pid": n})
                wins.append(n)
            except LeaseHeldError:
                pass
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

    threads = [threading.Thread(target=contender, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == [] and len(wins) == 1
    with SQLiteJournal(path) as journal:
        lease = journal.lease("s")
        assert lease is not None and lease.owner == {"pid": wins[0]}
