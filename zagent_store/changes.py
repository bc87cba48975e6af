"""The change feed of a SQL journal: which sessions' heads moved, as they move (what ``zagent ui`` follows).

Two feeds keep :class:`~zagent_core.journal.protocol.ChangeFeed`'s promise:

- :class:`PolledChanges` (SQLite, which cannot tell another process anything) reads the events past
  the last position seen, every ``poll_seconds``: one query for every page a console follows, and a
  range of the primary key, so its cost is that of the events appended since, not of the journal.
- :class:`NotifiedChanges` (PostgreSQL) listens on one connection of its own to the NOTIFY every
  append sends in its transaction (``postgres.CHANGES_CHANNEL``). A payload carries the positions
  of the append's events, so a gap (a notification lost with a dropped connection) is seen and
  read from the journal instead. When the connection drops (a restart, ``pg_terminate_backend``)
  the feed polls as :class:`PolledChanges` does and tries to listen again every
  :data:`RECONNECT_SECONDS`; once it listens again it reads what it missed from the journal.

A feed is used by one thread (the console's): none of its methods may be called from two at once.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, Protocol

from zagent_core.journal.protocol import AdminJournal, Change, ChangeFeed, JournalError

if TYPE_CHECKING:
    import psycopg

    from zagent_store.postgres import PostgresJournal

#: How often a polled feed reads the journal (and a PostgreSQL one while it cannot listen).
POLL_SECONDS = 0.5
#: While its listening connection is down, a PostgreSQL feed tries to listen again this often.
RECONNECT_SECONDS = 1.0
#: A quiet listening connection is checked (``SELECT 1``) this often, so one that died without
#: a word (a network cut) is found and replaced.
CHECK_SECONDS = 15.0
#: Notifications taken in one batch at most; the rest wait for the next call.
MOST_NOTIFIES = 1000


class _Heads(Protocol):
    """What a polled feed reads: the SQL journals' ``position`` and ``moved_since``."""

    def position(self) -> int: ...

    def moved_since(self, after: int) -> tuple[list[Change], int]: ...


class PolledChanges(ChangeFeed):
    """A journal's changes read every ``poll_seconds`` (at most one read per interval, however many ask)."""

    def __init__(self, journal: _Heads, poll_seconds: float = POLL_SECONDS) -> None:
        self._journal = journal
        self.poll_seconds = poll_seconds
        self._last = float("-inf")
        self._closed = threading.Event()

    @property
    def pushed(self) -> bool:
        return False

    def position(self) -> int:
        return self._journal.position()

    def changes(self, after: int, timeout: float) -> tuple[list[Change], int]:
        deadline = time.monotonic() + timeout
        while not self._closed.is_set():
            now = time.monotonic()
            due = self._last + self.poll_seconds
            if now < due:  # read at most once an interval, even when each read finds changes
                if now >= deadline:
                    break
                self._closed.wait(min(due, deadline) - now)
                continue
            self._last = now
            moved, position = self._journal.moved_since(after)
            if moved or position != after or now >= deadline:
                return moved, position
        return [], after

    def close(self) -> None:
        self._closed.set()


class NotifiedChanges(ChangeFeed):
    """A PostgreSQL journal's changes, told by NOTIFY on a connection of its own; polled while it is down."""

    def __init__(self, journal: PostgresJournal, poll_seconds: float = POLL_SECONDS) -> None:
        self._journal = journal
        self._polled = PolledChanges(journal, poll_seconds)
        self._conn: psycopg.Connection[Any] | None = None
        self._next_try = 0.0
        self._quiet_since = time.monotonic()
        #: The newest position a notification told: while the caller is below it (a batch read from the
        #: journal stopped at its window), the journal is read first.
        self._told_to = 0

    @property
    def pushed(self) -> bool:
        return self._conn is not None

    def position(self) -> int:
        return self._journal.position()

    def _listen(self) -> bool:
        """Open the listening connection (at most once a :data:`RECONNECT_SECONDS`); whether it listens."""
        import psycopg

        from zagent_store.postgres import CHANGES_CHANNEL

        if time.monotonic() < self._next_try:
            return False
        self._next_try = time.monotonic() + RECONNECT_SECONDS
        try:
            # Keepalives: a connection the network dropped without a word is found in under a minute.
            self._conn = psycopg.connect(self._journal.url, autocommit=True, connect_timeout=5,
                                         application_name="zagent changes", keepalives=1, keepalives_idle=20,
                                         keepalives_interval=5, keepalives_count=3)
            self._conn.execute(f"LISTEN {CHANGES_CHANNEL}")
        except psycopg.Error:
            self._drop()
            return False
        self._quiet_since = time.monotonic()
        return True

    def _drop(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # noqa: BLE001 - closing a connection that already failed: nothing more to lose
                pass
        self._conn = None

    def changes(self, after: int, timeout: float) -> tuple[list[Change], int]:
        import psycopg

        if after < self._told_to:
            return self._journal.moved_since(after)
        if self._conn is None:
            if not self._listen():
                # Down: poll, but come back in time to try listening again.
                return self._polled.changes(after, min(timeout, max(0.0, self._next_try - time.monotonic())))
            # Listening again: what was appended while nobody listened is read from the journal; the
            # notifications of those appends that come now are below the position and ignored.
            moved, position = self._journal.moved_since(after)
            if moved or position != after:
                return moved, position
        try:
            return self._told(after, timeout)
        except psycopg.Error:
            self._drop()
            return [], after

    def _told(self, after: int, timeout: float) -> tuple[list[Change], int]:
        assert self._conn is not None
        first = list(self._conn.notifies(timeout=timeout, stop_after=1))
        if not first:
            if time.monotonic() - self._quiet_since >= CHECK_SECONDS:
                self._quiet_since = time.monotonic()
                self._conn.execute("SELECT 1")  # a dead connection raises here
            return [], after
        self._quiet_since = time.monotonic()
        told = first + list(self._conn.notifies(timeout=0, stop_after=MOST_NOTIFIES))
        newest: dict[str, Change] = {}
        position = after
        for notify in told:
            parts = notify.payload.split(" ", 3)
            first_seq, last_seq = int(parts[0]), int(parts[1])
            self._told_to = max(self._told_to, last_seq)
            if last_seq <= position:
                continue  # read from the journal already
            if first_seq > position + 1 or len(parts) < 4:
                # A gap (a notification lost) or an id too long to be told: the journal says the rest.
                moved, read_to = self._journal.moved_since(position)
                newest.update((change.session_id, change) for change in moved)
                position = read_to
                continue
            change = Change(parts[3], int(parts[2]), last_seq)
            newest.pop(change.session_id, None)  # kept in the order of their newest change
            newest[change.session_id] = change
            position = last_seq
        return list(newest.values()), position

    def close(self) -> None:
        self._polled.close()
        self._drop()


def open_changes(journal: AdminJournal, *, poll_seconds: float = POLL_SECONDS) -> ChangeFeed:
    """The change feed of ``journal``: told by NOTIFY on PostgreSQL, polled every ``poll_seconds`` on SQLite
    (and on PostgreSQL while it cannot listen)."""
    from zagent_store.postgres import PostgresJournal
    from zagent_store.sqlite import SQLiteJournal

    if isinstance(journal, PostgresJournal):
        return NotifiedChanges(journal, poll_seconds)
    if isinstance(journal, SQLiteJournal):
        return PolledChanges(journal, poll_seconds)
    raise JournalError(f"{type(journal).__name__} has no change feed: it is not a SQL journal")
