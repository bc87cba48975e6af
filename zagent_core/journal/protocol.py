"""What the core needs from a journal, as narrow protocols; ``zagent_store`` implements them.

The core never builds SQL: it appends events for a session at the version it expects
to follow, and reads them back in order. Anything that keeps these promises (SQLite,
PostgreSQL, an in-memory list in a test) can carry a session.

The protocols stack by capability, as eventsourcing's recorders do (``AggregateRecorder``
< ``ApplicationRecorder`` < ``ProcessRecorder``), and a caller asks for the smallest one
it needs::

    EventLog              a session's events: append, read, read_last, head, has_call
     └ SnapshotLog        + save_snapshot, load_snapshot: a state opens from the newest snapshot
        └ SessionIndex    + sessions, find_sessions: a listing, with the newest snapshot's status; ids by
                          their start or end
    Leases                who drives a session: acquire, renew, release, lease, claim, leased_work,
                          wait_for_work
    Journal               SessionIndex and Leases, + check, close: what the engine asks; every store
     └ AdminJournal       + audit, stats, delete_sessions, vacuum: what an operator reads and the retention
                          it runs; the SQL stores (SQLite, PostgreSQL)
    ChangeFeed            which sessions' heads moved, as they move (position, changes, pushed, close): what
                          a console follows; made for a SQL journal by ``zagent_store.open_changes``

This module also holds what crosses them: the stored forms (:class:`StoredEvent`,
:class:`Snapshot`, :class:`SessionSummary`, :class:`Lease`, :class:`Claim`, :class:`Vacuumed`)
and :class:`Change`, and the errors every store raises instead of its driver's.
"""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict

from zagent_core.errors import ZagentError

_Opened = TypeVar("_Opened", bound="Journal")
_Fed = TypeVar("_Fed", bound="ChangeFeed")

if TYPE_CHECKING:  # building the event models is most of a listing's start-up: only who reads events pays
    from zagent_core.journal.events import Event


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """An event as the journal keeps it: its body plus where and when it was appended.

    A plain dataclass, not a model: one is made per event appended or read, and the
    body it carries is already validated.
    """

    seq: int
    session_id: str
    version: int
    at: datetime
    event: Event

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, as ``zagent sessions show --events --json`` prints it."""
        return {"seq": self.seq, "session_id": self.session_id, "version": self.version,
                "at": self.at.isoformat(), "type": self.event.type, "data": self.event.model_dump(mode="json")}


class SessionSummary(BaseModel):
    """One line of ``zagent sessions list``: counts the journal can give without a projection."""

    model_config = ConfigDict(frozen=True)

    session_id: str
    started_at: datetime
    last_at: datetime
    events: int
    calls: int
    ended: bool
    #: The status stored with the session's newest snapshot (any projection), if any.
    status: str | None = None
    #: The version that snapshot was taken at: events after it are not reflected in ``status``.
    status_version: int | None = None
    #: For a sub-agent: the session that spawned it, its spawn call, its label there
    #: (``child-1``...) and its depth (0: a top-level session; 1: a child of one...).
    parent_session_id: str | None = None
    parent_call_id: str | None = None
    label: str | None = None
    depth: int = 0


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A projection of a session saved at ``version``: a cache, always rebuildable from the events.

    ``data`` is the JSON text the core produced; the journal never parses it.
    ``projection`` tags the code that made it, so a changed projection ignores old ones.
    """

    version: int
    projection: str
    data: str
    status: str | None


@dataclass(frozen=True, slots=True)
class Lease:
    """Who drives a session: ``owner`` is a JSON object (host, boot id, pid, start ticks...).

    A lease taken with a time to live expires unless its holder renews it (heart-beats):
    ``expires_at`` is when, and ``expired`` whether that time had passed when the lease was
    read, by the journal's clock (the database server's, for a journal many hosts share, so
    their clocks need not agree). A lease without one lasts until it is released or its
    holder is found dead on its own host.
    """

    session_id: str
    owner: dict[str, Any]
    since: datetime
    expires_at: datetime | None = None
    expired: bool = False


@dataclass(frozen=True, slots=True)
class Vacuumed:
    """What :meth:`AdminJournal.vacuum` did: the journal's size on disk before and after, in bytes
    (a SQLite file with its write-ahead log; a PostgreSQL journal's tables with their indexes)."""

    before: int
    after: int
    #: Why less space came back than the vacuum freed, when that is known (None: it all did).
    note: str | None = None


@dataclass(frozen=True, slots=True)
class Claim:
    """A session a worker claimed: its lease is the worker's now; ``previous`` is the expired
    lease it replaced (a driver that stopped heart-beating), None when nobody held it."""

    session_id: str
    previous: Lease | None


@dataclass(frozen=True, slots=True)
class Change:
    """A session's head moved: its last event is now ``version``, at the journal's position ``seq``."""

    session_id: str
    version: int
    seq: int


#: Events after which a session may want a driver (a worker): journals that can tell waiting
#: workers (PostgreSQL's NOTIFY) do so when they append one, or when a lease is released.
WORK_EVENTS = frozenset({"wake_requested", "user_message", "input_answered", "approval_decided"})


def parent_columns(first: Sequence[Event]) -> tuple[str | None, str | None, str | None, int]:
    """``(parent_session_id, parent_call_id, label, depth)`` of a session, from its first append.

    A sub-agent's ``session_started`` names its parent. A fork of one copies that event but
    is a session a person made (its first append ends with ``session_forked``): a top-level one.
    """
    link = first[0].__dict__.get("parent") if first and first[0].type == "session_started" else None
    if link is None or any(event.type == "session_forked" for event in first):
        return None, None, None, 0
    return link.session_id, link.call_id, link.label, link.depth


def canonical_owner(owner: dict[str, Any]) -> str:
    """A lease owner as journals compare and store it: canonical JSON (sorted keys, no spaces)."""
    return json.dumps(owner, sort_keys=True, separators=(",", ":"))


class ConcurrencyError(ZagentError, RuntimeError):
    """Another writer appended to the session since the caller last read it."""

    def __init__(self, session_id: str, expected: int, actual: int) -> None:
        self.session_id = session_id
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"session {session_id} is at version {actual}, not at version {expected} as the append expected "
            "(another writer appended to it, or the caller lost track): read the session again and retry"
        )


class JournalError(ZagentError, RuntimeError):
    """The journal could not be read or written (locked too long, corrupt, disk full).

    Implementations raise this, not their driver's errors, so callers can report it
    without knowing which store is behind the protocol.
    """


class LeaseHeldError(JournalError):
    """Another owner holds the session's lease."""

    def __init__(self, holder: Lease) -> None:
        self.holder = holder
        owner = ", ".join(f"{key} {value}" for key, value in holder.owner.items())
        super().__init__(
            f"session {holder.session_id} is driven by another process ({owner}) since "
            f"{holder.since:%Y-%m-%d %H:%M:%S}Z: wait for it to finish, or stop it"
        )


class JournalBusyError(JournalError):
    """The journal is in use in a way that refuses what was asked: a SQLite file that live
    processes drive sessions of cannot be vacuumed (``sessions`` names them)."""

    def __init__(self, message: str, sessions: list[str]) -> None:
        super().__init__(message)
        self.sessions = sessions


# The methods are abstract so that a store subclassing a protocol (as zagent_store's do) and
# lacking one fails when it is made, not when the method is first called and returns None.
@runtime_checkable
class EventLog(Protocol):
    """A session's events, append-only: what writing and rebuilding a session needs."""

    @abstractmethod
    def append(self, session_id: str, events: Sequence[Event], expected_version: int, *,
               at: Sequence[datetime] | None = None,
               snapshot: tuple[str, str, str | None] | None = None) -> list[StoredEvent]:
        """Append ``events`` in one transaction after ``expected_version``.

        ``at`` gives each event its time (imports and forks keep the original ones);
        by default they get the current time. Raises :class:`ConcurrencyError` when the
        session is not at that version, and appends nothing in that case. The events get
        versions ``expected_version + 1``...: a session's versions never have a gap.

        ``snapshot`` = ``(projection, data, status)`` is saved as by
        :meth:`SnapshotLog.save_snapshot` at the version of the last appended event, in the
        same transaction: both are durable together, or neither is.
        """
        ...

    @abstractmethod
    def read(self, session_id: str, after_version: int = 0, *,
             types: Collection[str] | None = None) -> Iterator[StoredEvent]:
        """The session's events with a version above ``after_version``, in order; only
        those of ``types`` when given (the others are not even parsed)."""
        ...

    @abstractmethod
    def has_call(self, session_id: str, call_id: str) -> bool:
        """Whether the session has journaled a ``tool_call_requested`` with this call id."""
        ...

    @abstractmethod
    def read_last(self, session_id: str, count: int) -> list[StoredEvent]:
        """The session's last ``count`` events (fewer if it has fewer), in version order."""
        ...

    @abstractmethod
    def head(self, session_id: str) -> int:
        """The session's current version: that of its last event, 0 if it has none."""
        ...


@runtime_checkable
class SnapshotLog(EventLog, Protocol):
    """An event log that keeps snapshots: a state opens from the newest one and the events after it."""

    @abstractmethod
    def save_snapshot(self, session_id: str, version: int, projection: str, data: str,
                      status: str | None = None) -> None:
        """Keep ``data`` as the session's ``projection`` at ``version``.

        Only the newest snapshot per session and projection is kept: saving an older
        version than the one stored does nothing. A snapshot is a cache: it may be lost
        (a recovered journal has none) and is never needed to read the events.
        """
        ...

    @abstractmethod
    def load_snapshot(self, session_id: str, projection: str) -> Snapshot | None:
        """The newest snapshot of ``projection`` for the session, or None."""
        ...


@runtime_checkable
class SessionIndex(SnapshotLog, Protocol):
    """A snapshot log that lists its sessions without reading their events."""

    @abstractmethod
    def sessions(self, limit: int | None = None, *, top_level: bool = False,
                 after: str | None = None) -> list[SessionSummary]:
        """Sessions, most recently active first (the ``limit`` most recent, or all).

        Counts and the parent come without reading the sessions' events; ``status`` is that
        of the newest snapshot (None when the session has none). ``top_level``: only the
        sessions that are no sub-agent's, and the sub-agents whose parent the journal does
        not have (a child imported alone). ``after``: only those less recently active than
        that session (a page's last), so a listing pages by keyset, never by offset.
        """
        ...

    @abstractmethod
    def find_sessions(self, part: str, limit: int) -> list[str]:
        """The ids of sessions, sub-agents too, that are ``part``, start with it or end with it
        (what a person types for an id: its start, or its random end), at most ``limit``: the
        one that is ``part`` first, then in id order. Read from the index of sessions, never
        from their events."""
        ...


@runtime_checkable
class Leases(Protocol):
    """Who drives a session: one lease holder per session, taken and given up atomically."""

    @abstractmethod
    def acquire_lease(self, session_id: str, owner: dict[str, Any], *,
                      replacing: dict[str, Any] | None = None, ttl: float | None = None) -> Lease:
        """Take the session's lease, atomically (compare and set).

        Succeeds when nobody holds it, when ``owner`` already does (re-entrant: the
        lease keeps its ``since``), or when it is held by ``replacing`` (a takeover of an
        owner known to be dead, or whose lease expired). Otherwise raises
        :class:`LeaseHeldError` naming the holder. Owners are compared as canonical JSON
        (key order does not matter). ``ttl``: the lease expires that many seconds from
        now unless renewed (None: it does not expire).
        """
        ...

    @abstractmethod
    def renew_leases(self, owner: dict[str, Any], session_ids: Collection[str], ttl: float) -> set[str]:
        """Push the expiry of ``owner``'s leases on ``session_ids`` ``ttl`` seconds from now, in one
        transaction (a heartbeat); returns the sessions renewed: one missing is no longer
        ``owner``'s (its lease expired and another driver took it over)."""
        ...

    @abstractmethod
    def claim_sessions(self, owner: dict[str, Any], *, ttl: float, limit: int,
                       exclude: Collection[str] = (),
                       running: Callable[[dict[str, Any]], bool] | None = None) -> list[Claim]:
        """Take the leases of up to ``limit`` sessions that want a driver, for ``owner``, atomically.

        A session wants one when it is no sub-agent (its parent drives those), has not
        ended, nobody holds its lease or the lease expired, and its newest snapshot is not of its last event with a status that needs
        nothing (``idle``, ``waiting on user``, ``waiting on approval``): a driver that
        stopped cleanly snapshots what it left; anything after that, or a driver that died,
        leaves work. Least recently active first; sessions another claimer is taking at the
        same moment are skipped, not waited for. ``exclude``: sessions not to claim.
        ``running``: told the owner of each expired lease, says whether that owner is known to
        run still (a process of this host: slow to renew, not gone); its leases are not claimed.
        """
        ...

    @abstractmethod
    def leased_work(self) -> list[Lease]:
        """The leases that expire held on sessions that want a driver (as :meth:`claim_sessions`
        says, their lease aside), least recently active first, each read with ``expired`` by the
        journal's clock: what a claim takes once they expired, unless their holders renew them
        (``zagent worker --until-idle`` waits out a dead worker's)."""
        ...

    @abstractmethod
    def wait_for_work(self, timeout: float) -> bool:
        """Block until a session may want a driver (a lease was released, a wake-up or message
        appended), or ``timeout`` seconds pass; True when told of work. A journal that cannot
        be told (one file on one host) returns after the timeout: the caller polls."""
        ...

    @abstractmethod
    def release_lease(self, session_id: str, owner: dict[str, Any]) -> None:
        """Give the lease up if ``owner`` holds it; otherwise do nothing."""
        ...

    @abstractmethod
    def lease(self, session_id: str) -> Lease | None:
        """Who holds the session's lease, if anyone."""
        ...


@runtime_checkable
class Journal(SessionIndex, Leases, Protocol):
    """An append-only store of session events: everything the engine asks of one."""

    @abstractmethod
    def check(self) -> list[str]:
        """Health problems of the store (empty when healthy), each naming what is affected."""
        ...

    @abstractmethod
    def close(self) -> None:
        ...

    def __enter__(self: _Opened) -> _Opened:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@runtime_checkable
class AdminJournal(Journal, Protocol):
    """A journal with the audit views and counts an operator reads (``zagent audit``, ``zagent doctor``)."""

    @abstractmethod
    def audit(self, **filters: Any) -> list[dict[str, Any]]:
        """Rows of the ``tool_calls`` view matching ``zagent audit``'s filters, each with ``asked``:
        its row of the ``decisions`` view (who was asked what, and the answer), or None."""
        ...

    @abstractmethod
    def stats(self) -> dict[str, int]:
        """Counts for ``zagent doctor``: ``events``, ``sessions``, ``schema_version``."""
        ...

    @abstractmethod
    def delete_sessions(self, versions: Mapping[str, int]) -> int:
        """Take the sessions of ``versions`` out of the journal, all in one transaction: their events,
        head rows, snapshots and leases. Returns how many events were deleted.

        The one deletion the journal allows (``zagent sessions prune``): the guard that refuses
        to delete an event is lifted for this transaction only, and is back when it commits or
        rolls back, so every other writer still finds events append-only. Each session is
        deleted only at the version given (that of its last event when the caller decided it
        may go): one appended to since raises :class:`ConcurrencyError` and nothing is deleted.
        Whether a session may go (ended, driven by nobody) is the caller's to decide.
        """
        ...

    @abstractmethod
    def vacuum(self, *, alive: Callable[[Lease], bool] | None = None) -> Vacuumed:
        """Give the space of deleted rows back: SQLite's ``VACUUM`` rewrites the file, PostgreSQL's
        ``VACUUM (ANALYZE)`` of the journal's tables marks it for reuse (and refreshes the planner's
        statistics). ``alive`` says whether a lease's holder still drives its session: a SQLite
        file being driven is refused (:class:`JournalBusyError`), as VACUUM holds its write lock
        for as long as it takes to rewrite the file; PostgreSQL vacuums beside its writers.
        """
        ...


@runtime_checkable
class ChangeFeed(Protocol):
    """Which sessions' heads move, as they move: what the web console follows (one feed per console).

    A position is the journal's global order (``seq``): the feed gives every session whose
    last event is past a position, so a reader that lost track (a dropped connection, a
    slow page) catches up from the last position it saw, never from a replay of events.
    """

    @abstractmethod
    def position(self) -> int:
        """The journal's position now: that of its last event (0 when it has none)."""
        ...

    @abstractmethod
    def changes(self, after: int, timeout: float) -> tuple[list[Change], int]:
        """Block until some session's head is past position ``after``, or ``timeout`` seconds pass.

        Returns the sessions that moved (each once, with its newest version, oldest first; a
        bounded batch: ask again from the position returned for the rest) and the position to
        ask after next. A journal that cannot be told polls its heads; one that can
        (PostgreSQL's LISTEN/NOTIFY) polls only while its listening connection is down.
        """
        ...

    @property
    @abstractmethod
    def pushed(self) -> bool:
        """Whether changes are told as they commit now (NOTIFY), rather than polled."""
        ...

    @abstractmethod
    def close(self) -> None:
        ...

    def __enter__(self: _Fed) -> _Fed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
