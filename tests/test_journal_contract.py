"""One contract, every journal: the promises of ``zagent_core.journal.protocol.Journal``, run
against each implementation (as eventsourcing runs its recorder tests per database)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
from conftest import wait_for

from zagent_core import Engine, Home, Journal, rebuild
from zagent_core.journal.events import (
    ParentLink,
    SessionEnded,
    SessionForked,
    SessionStarted,
    ToolCallRequested,
    UserMessage,
)
from zagent_core.journal.protocol import ConcurrencyError, LeaseHeldError
from zagent_store import MemoryJournal, SQLiteJournal, open_journal


@pytest.fixture(params=["sqlite", "postgres", "memory"])
def journal(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Journal]:
    if request.param == "memory":
        made: Journal = MemoryJournal()
    elif request.param == "postgres":
        made = open_journal(request.getfixturevalue("postgres_url"))
    else:
        made = SQLiteJournal(tmp_path / "journal.db")
    yield made
    made.close()


def started() -> SessionStarted:
    return SessionStarted(origin="test", workspace="/w", zagent_version="0")


def test_it_is_a_journal(journal: Journal) -> None:
    assert isinstance(journal, Journal)


def test_appends_are_numbered_gap_free_and_read_back_in_order(journal: Journal) -> None:
    journal.append("s", [started(), UserMessage(text="a")], 0)
    journal.append("s", [UserMessage(text="b")], 2)
    assert [(e.version, e.event) for e in journal.read("s")] == [
        (1, started()), (2, UserMessage(text="a")), (3, UserMessage(text="b"))]
    assert [e.version for e in journal.read("s", after_version=2)] == [3]
    assert [e.version for e in journal.read_last("s", 2)] == [2, 3]
    assert journal.head("s") == 3 and journal.head("nobody") == 0


def test_an_append_at_a_stale_version_appends_nothing(journal: Journal) -> None:
    journal.append("s", [started()], 0)
    with pytest.raises(ConcurrencyError) as refused:
        journal.append("s", [UserMessage(text="late"), UserMessage(text="later")], 0)
    assert (refused.value.expected, refused.value.actual) == (0, 1)
    assert journal.head("s") == 1


def test_has_call_knows_every_call_the_session_requested(journal: Journal) -> None:
    journal.append("s", [started(), ToolCallRequested(call_id="c1", tool="t", arguments={})], 0)
    assert journal.has_call("s", "c1") and not journal.has_call("s", "c2") and not journal.has_call("x", "c1")


def test_the_newest_snapshot_is_kept_and_lists_its_status(journal: Journal) -> None:
    journal.append("s", [started(), UserMessage(text="a")], 0)
    journal.save_snapshot("s", 2, "p", '{"v": 2}', "idle")
    journal.save_snapshot("s", 1, "p", '{"v": 1}', "interrupted")  # older: changes nothing
    snapshot = journal.load_snapshot("s", "p")
    assert snapshot is not None and (snapshot.version, snapshot.data, snapshot.status) == (2, '{"v": 2}', "idle")
    assert journal.load_snapshot("s", "other projection") is None
    (summary,) = journal.sessions()
    assert (summary.status, summary.status_version, summary.events) == ("idle", 2, 2)


def test_sessions_name_a_sub_agents_parent_and_top_level_leaves_only_sub_agents_out(journal: Journal) -> None:
    link = ParentLink(session_id="p", call_id="call_1", label="child-1", depth=1)
    child = SessionStarted(origin="spawn", workspace="/w", zagent_version="0", parent=link)
    journal.append("p", [started()], 0)
    journal.append("c", [child], 0)
    journal.append("fork", [child, SessionForked(parent_session_id="c", parent_seq=2)], 0)  # made by a person
    journal.append("alone", [child.model_copy(update={"parent": link.model_copy(update={"session_id": "gone"})})], 0)
    journal.append("c", [UserMessage(text="task")], 1)
    summaries = {s.session_id: s for s in journal.sessions()}
    assert (summaries["c"].parent_session_id, summaries["c"].parent_call_id, summaries["c"].label,
            summaries["c"].depth) == ("p", "call_1", "child-1", 1)
    assert (summaries["p"].parent_session_id, summaries["p"].depth) == (None, 0)
    assert (summaries["fork"].parent_session_id, summaries["fork"].label) == (None, None)
    # A child whose parent the journal does not have (imported alone) is listed at the top.
    assert [s.session_id for s in journal.sessions(top_level=True)] == ["alone", "fork", "p"]
    assert [s.session_id for s in journal.sessions(2, top_level=True)] == ["alone", "fork"]


def test_sessions_page_by_keyset_after_a_pages_last_session(journal: Journal) -> None:
    for session_id in ("a", "b", "c", "d"):
        journal.append(session_id, [started()], 0)
    journal.append("b", [UserMessage(text="later")], 1)  # b is now the most recently active
    assert [s.session_id for s in journal.sessions(2)] == ["b", "d"]
    assert [s.session_id for s in journal.sessions(2, after="d")] == ["c", "a"]
    assert [s.session_id for s in journal.sessions(after="a")] == []
    assert [s.session_id for s in journal.sessions(after="unknown")] == []


def test_find_sessions_gives_the_ids_that_are_start_or_end_with_a_part_the_exact_one_first(journal: Journal) -> None:
    for sid in ("20261130-0446-3fa2c1", "20261130-0446", "20261130-0447-aa3fa2", "20261201-0900-3fa2c1", "x%_"):
        journal.append(sid, [started()], 0)
    assert journal.find_sessions("20261130-0446", 10) == ["20261130-0446", "20261130-0446-3fa2c1"]
    assert journal.find_sessions("3fa2c1", 10) == ["20261130-0446-3fa2c1", "20261201-0900-3fa2c1"]
    assert journal.find_sessions("2026", 2) == ["20261130-0446", "20261130-0446-3fa2c1"]
    assert journal.find_sessions("3FA2C1", 10) == []  # ids are compared as they are: no case folding
    assert journal.find_sessions("%", 10) == [] and journal.find_sessions("_", 10) == ["x%_"]  # no wildcards
    assert journal.find_sessions("0446-3f", 10) == []  # the middle of an id names nothing


def test_a_lease_has_one_holder_and_a_dead_one_is_replaced_only_by_name(journal: Journal) -> None:
    me, other = {"pid": 1, "host": "h"}, {"pid": 2, "host": "h"}
    first = journal.acquire_lease("s", me)
    assert journal.acquire_lease("s", me).since == first.since  # re-entrant
    with pytest.raises(LeaseHeldError) as held:
        journal.acquire_lease("s", other)
    assert held.value.holder.owner == me
    with pytest.raises(LeaseHeldError):
        journal.acquire_lease("s", other, replacing={"pid": 3, "host": "h"})  # not the holder: no takeover
    assert journal.acquire_lease("s", other, replacing=me).owner == other
    journal.release_lease("s", me)  # not the holder any more: nothing happens
    assert journal.lease("s") is not None and journal.lease("s").owner == other  # type: ignore[union-attr]
    journal.release_lease("s", other)
    assert journal.lease("s") is None


def test_an_engine_runs_a_session_on_it(journal: Journal, tmp_path: Path) -> None:
    (tmp_path / "home" / "tools").mkdir(parents=True)
    engine = Engine(Home(tmp_path / "home"), journal, workspace=tmp_path)
    with engine.start_session("test") as session:
        result = session.call("terminal", {"action": "list"})
    assert not result.is_error
    assert rebuild(journal.read(session.session_id)) == session.state == engine.session_state(session.session_id)
    assert journal.lease(session.session_id) is None


# -- leases that expire, and claims (workers) ------------------------------------------------

ME = {"host": "h1", "pid": 1}
THEM = {"host": "h2", "pid": 2}


def test_a_lease_taken_for_a_time_expires_unless_renewed_and_only_its_holder_renews_it(journal: Journal) -> None:
    journal.append("s", [started()], 0)
    lease = journal.acquire_lease("s", ME, ttl=60)
    assert lease.expires_at is not None and not lease.expired
    journal.append("t", [started()], 0)
    journal.acquire_lease("t", THEM, ttl=60)
    assert journal.renew_leases(ME, ["s", "t", "nobody"], 60) == {"s"}  # only what ME holds
    journal.acquire_lease("s", ME, ttl=0.01)  # re-entrant: the holder shortens its own lease
    wait_for(lambda: journal.lease("s").expired, "the lease to expire")
    with pytest.raises(LeaseHeldError):  # expired is not released: taking it over is a decision
        journal.acquire_lease("s", THEM, ttl=60)
    taken = journal.acquire_lease("s", THEM, replacing=ME, ttl=60)
    assert taken.owner == THEM and not taken.expired
    assert journal.renew_leases(ME, ["s"], 60) == set()  # the old holder learns it lost the lease


def test_claims_take_the_sessions_that_want_a_driver_and_name_the_expired_holder(journal: Journal) -> None:
    for sid in ("fresh", "idle", "ended", "held", "stale", "excluded"):
        journal.append(sid, [started()], 0)
    journal.save_snapshot("idle", 1, "p", "{}", "idle")  # stopped cleanly with nothing to do
    journal.append("ended", [SessionEnded(reason="completed")], 1)
    journal.acquire_lease("held", THEM, ttl=60)
    journal.acquire_lease("stale", THEM, ttl=0.01)
    wait_for(lambda: journal.lease("stale").expired, "the lease to expire")
    claims = journal.claim_sessions(ME, ttl=60, limit=10, exclude=["excluded"])
    assert {c.session_id: (c.previous.owner if c.previous else None) for c in claims} == {
        "fresh": None, "stale": THEM}
    assert journal.lease("fresh").owner == ME and journal.lease("stale").owner == ME
    assert [c.session_id for c in journal.claim_sessions(THEM, ttl=60, limit=1)] == ["excluded"]  # the rest are held
    journal.append("idle", [UserMessage(text="more")], 1)  # something after the snapshot: work again
    assert [c.session_id for c in journal.claim_sessions(THEM, ttl=60, limit=10)] == ["idle"]


def test_leased_work_lists_the_expiring_leases_on_sessions_that_want_a_driver(journal: Journal) -> None:
    link = ParentLink(session_id="held", call_id="call_1", label="child-1", depth=1)
    for sid in ("idle", "ended", "held", "forever", "stale", "free"):
        journal.append(sid, [started()], 0)
    journal.append("child", [SessionStarted(origin="spawn", workspace="/w", zagent_version="0", parent=link)], 0)
    journal.save_snapshot("idle", 1, "p", "{}", "idle")  # stopped cleanly with nothing to do
    journal.append("ended", [SessionEnded(reason="completed")], 1)
    for sid in ("idle", "ended", "held", "child", "stale"):
        journal.acquire_lease(sid, THEM, ttl=0.01 if sid == "stale" else 60)
    journal.acquire_lease("forever", THEM)  # no expiry: nothing to wait out
    wait_for(lambda: journal.lease("stale").expired, "the lease to expire")
    listed = {lease.session_id: lease for lease in journal.leased_work()}
    assert sorted(listed) == ["held", "stale"]
    assert listed["stale"].expired and not listed["held"].expired and listed["held"].owner == THEM
    assert listed["held"].expires_at == journal.lease("held").expires_at


def test_a_claim_spares_the_expired_leases_of_owners_that_still_run(journal: Journal) -> None:
    late, gone = {"host": "h3", "pid": 3}, THEM
    for sid, owner in (("late", late), ("gone", gone)):
        journal.append(sid, [started()], 0)
        journal.acquire_lease(sid, owner, ttl=0.01)
    wait_for(lambda: journal.lease("late").expired and journal.lease("gone").expired, "the leases to expire")
    told: list[dict[str, object]] = []

    def running(owner: dict[str, object]) -> bool:
        told.append(owner)
        return owner == late

    claims = journal.claim_sessions(ME, ttl=60, limit=10, running=running)
    assert [(c.session_id, c.previous.owner if c.previous else None) for c in claims] == [("gone", gone)]
    assert journal.lease("late").owner == late  # still its: late to renew is not gone
    assert len(told) == 2 and late in told and gone in told  # asked of expired leases' owners only


def test_a_lease_that_expires_while_a_claim_asks_about_owners_is_not_claimed_unasked(journal: Journal) -> None:
    late, gone = {"host": "h3", "pid": 3}, THEM
    journal.append("gone", [started()], 0)
    journal.acquire_lease("gone", gone, ttl=0.01)
    journal.append("late", [started()], 0)
    expires = journal.acquire_lease("late", late, ttl=0.5).expires_at
    assert expires is not None
    wait_for(lambda: journal.lease("gone").expired, "the lease to expire")

    def running(owner: dict[str, object]) -> bool:  # slow to answer: "late" expires meanwhile
        time.sleep(max(0.0, (expires - datetime.now(timezone.utc)).total_seconds() + 0.2))
        return owner == late

    claims = journal.claim_sessions(ME, ttl=60, limit=10, running=running)
    assert [c.session_id for c in claims] == ["gone"] and journal.lease("late").owner == late


def test_a_released_lease_or_an_appended_wake_up_tells_a_waiting_worker(journal: Journal) -> None:
    if isinstance(journal, SQLiteJournal):
        pytest.skip("one file on one host: a SQLite worker polls (wait_for_work returns after its timeout)")
    journal.append("s", [started()], 0)
    journal.acquire_lease("s", ME, ttl=60)
    # The first wait starts listening; what is told from then on is kept until a wait takes it,
    # so the release below reaches the waiter whether or not it is waiting yet.
    assert journal.wait_for_work(0.01) is False
    told: list[bool] = []
    waiter = threading.Thread(target=lambda: told.append(journal.wait_for_work(30)))
    waiter.start()
    journal.release_lease("s", ME)
    waiter.join(60)
    assert told == [True]


def test_a_sub_agent_is_never_claimed_its_parent_drives_it(journal: Journal) -> None:
    link = ParentLink(session_id="p", call_id="call_1", label="child-1", depth=1)
    journal.append("p", [started()], 0)
    journal.append("c", [SessionStarted(origin="spawn", workspace="/w", zagent_version="0", parent=link)], 0)
    assert [c.session_id for c in journal.claim_sessions(ME, ttl=60, limit=10)] == ["p"]
