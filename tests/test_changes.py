"""The change feed (``zagent_store/changes.py``): which sessions' heads moved, on SQLite (polled) and
PostgreSQL (NOTIFY, polled while its connection is down). What ``zagent ui`` follows live."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from zagent_core.journal.events import UserMessage
from zagent_core.journal.protocol import AdminJournal, Change, ChangeFeed
from zagent_store import SQLiteJournal, open_journal
from zagent_store.changes import open_changes
from zagent_store.postgres import PostgresJournal

pytestmark = pytest.mark.stores


@pytest.fixture
def opened(journal_url: str) -> Iterator[tuple[AdminJournal, AdminJournal]]:
    """The journal twice: one connection that writes, one the feed reads (as a console's)."""
    with open_journal(journal_url) as writer, open_journal(journal_url) as reader:
        yield writer, reader


def said(message: str) -> list[UserMessage]:
    return [UserMessage(text=message)]


def until_moved(feed: ChangeFeed, after: int, seconds: float = 20.0) -> tuple[list[Change], int]:
    """The feed's next changes past ``after`` (it blocks until some come: no sleeping here)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        moved, position = feed.changes(after, deadline - time.monotonic())
        if moved:
            return moved, position
        after = position
    raise AssertionError(f"no change past position {after} in {seconds} s")


def test_the_feed_gives_each_session_that_moved_once_with_its_newest_version(
        opened: tuple[AdminJournal, AdminJournal]) -> None:
    writer, reader = opened
    with open_changes(reader) as feed:
        start = feed.position()
        writer.append("a", said("one"), 0)
        writer.append("b", said("two"), 0)
        writer.append("a", said("three") + said("four"), 1)
        moved: dict[str, Change] = {}
        position = start
        while set(moved) != {"a", "b"} or moved["a"].version != 3:
            changes, position = until_moved(feed, position)
            moved.update((change.session_id, change) for change in changes)
        assert moved["a"] == Change("a", 3, start + 4) and moved["b"] == Change("b", 1, start + 2)
        assert position == feed.position() == start + 4


def test_a_session_id_too_long_for_a_notify_payload_is_still_told(
        opened: tuple[AdminJournal, AdminJournal]) -> None:
    writer, reader = opened
    long_id = "s" + "é" * 4000  # 8001 bytes: past NOTIFY's 8000
    with open_changes(reader) as feed:
        start = feed.position()
        writer.append(long_id, said("hi"), 0)
        changes, _ = until_moved(feed, start)
    assert changes == [Change(long_id, 1, start + 1)]


def test_a_polled_feed_reads_the_journal_at_most_once_an_interval(tmp_path: Path, store: str) -> None:
    if store != "sqlite":
        pytest.skip("the polled feed is SQLite's")
    with SQLiteJournal(tmp_path / "journal.db") as writer, SQLiteJournal(tmp_path / "journal.db") as reader, \
            open_changes(reader, poll_seconds=0.25) as feed:
        position = feed.position()
        started = time.monotonic()
        for version in range(3):
            writer.append("a", said(f"step {version}"), version)
            changes, position = until_moved(feed, position)
            assert changes == [Change("a", version + 1, position)]
        assert time.monotonic() - started >= 0.5  # three reads, an interval apart: never back to back


@pytest.fixture
def pg_journals(store: str, postgres_url: str) -> Iterator[tuple[PostgresJournal, PostgresJournal]]:
    if store != "postgres":
        pytest.skip("NOTIFY is PostgreSQL's")
    with PostgresJournal(postgres_url) as writer, PostgresJournal(postgres_url) as reader:
        yield writer, reader


#: Longer than any test: a change that comes was told (NOTIFY), not polled.
NEVER = 3600.0


def test_on_postgresql_a_change_is_told_by_notify_not_polled(
        pg_journals: tuple[PostgresJournal, PostgresJournal]) -> None:
    writer, reader = pg_journals
    with open_changes(reader, poll_seconds=NEVER) as feed:
        position = feed.position()
        feed.changes(position, 0)  # it listens from now on
        assert feed.pushed
        writer.append("a", said("hi"), 0)
        started = time.monotonic()
        changes, _ = until_moved(feed, position)
        assert changes == [Change("a", 1, position + 1)] and time.monotonic() - started < 10


def test_on_postgresql_a_dropped_listening_connection_is_replaced_and_nothing_is_missed(
        pg_journals: tuple[PostgresJournal, PostgresJournal], postgres_url: str) -> None:
    import psycopg

    writer, reader = pg_journals
    with open_changes(reader, poll_seconds=NEVER) as feed:
        position = feed.position()
        feed.changes(position, 0)
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            (killed,) = admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                                      " WHERE application_name = 'zagent changes'").fetchall()
        assert killed == (True,)
        writer.append("a", said("while nobody listened"), 0)  # its NOTIFY reaches no one
        changes, position = until_moved(feed, position)
        assert changes == [Change("a", 1, position)]  # read from the journal: its notification was lost
        writer.append("a", said("told again"), 1)
        changes, _ = until_moved(feed, position)  # polls are an hour apart: this one was told
        assert changes == [Change("a", 2, position + 1)] and feed.pushed


def test_no_append_is_passed_over_while_another_process_appends(journal_url: str) -> None:
    """Each session appended once, as fast as a writer can, while the feed polls as fast as it can: an append
    that commits between the feed's reads of the last position and of the events must still be seen."""
    import threading

    from zagent_store.changes import PolledChanges

    count = 300
    with open_journal(journal_url) as writer, open_journal(journal_url) as reader:
        feed = PolledChanges(reader, poll_seconds=0.001)  # type: ignore[arg-type]
        position = feed.position()

        def append() -> None:
            for number in range(count):
                writer.append(f"s{number}", said("once"), 0)

        appending = threading.Thread(target=append)
        appending.start()
        seen: set[str] = set()
        try:
            while len(seen) < count:
                changes, position = until_moved(feed, position)
                seen.update(change.session_id for change in changes)
        finally:
            appending.join()
        assert seen == {f"s{number}" for number in range(count)}
