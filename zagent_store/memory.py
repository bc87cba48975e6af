"""A journal in memory: the whole :class:`~zagent_core.journal.protocol.Journal` protocol, for tests
and for embedding zagent where nothing may be written to disk.

It keeps the same promises as the SQLite journal within one process (appends at the
expected version or not at all, gap-free versions, one lease holder per session), and
loses everything when the process ends.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from zagent_core.journal.protocol import (
    WORK_EVENTS,
    Claim,
    ConcurrencyError,
    Journal,
    Lease,
    LeaseHeldError,
    SessionSummary,
    Snapshot,
    StoredEvent,
    canonical_owner,
    parent_columns,
)
from zagent_store import clock

if TYPE_CHECKING:
    from zagent_core.journal.events import Event


#: Statuses of a session a clean stop left that want no driver (see ``claim_sessions``).
_NEEDS_NOTHING = ("idle", "failed", "waiting on user", "waiting on approval")


def _same(owner: dict[str, Any], other: dict[str, Any] | None) -> bool:
    return other is not None and canonical_owner(owner) == canonical_owner(other)


class MemoryJournal(Journal):
    """Sessions as lists of events, in this process only."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seq = 0
        self._sessions: dict[str, list[StoredEvent]] = {}
        self._snapshots: dict[tuple[str, str], Snapshot] = {}
        self._leases: dict[str, Lease] = {}
        #: Set when a session may want a driver (a lease released): what ``wait_for_work`` waits on.
        self._work = threading.Event()
        #: Each session's parent, from its first append (as the SQLite journal's head row keeps it).
        self._parents: dict[str, tuple[str | None, str | None, str | None, int]] = {}

    def append(self, session_id: str, events: Sequence[Event], expected_version: int, *,
               at: Sequence[datetime] | None = None,
               snapshot: tuple[str, str, str | None] | None = None) -> list[StoredEvent]:
        times = [clock.stored_time(when) for when in at] if at is not None else [clock.now()] * len(events)
        with self._lock:
            stream = self._sessions.setdefault(session_id, [])
            if len(stream) != expected_version:
                if not stream:
                    del self._sessions[session_id]
                raise ConcurrencyError(session_id, expected_version, len(stream))
            stored = [StoredEvent(self._seq + i, session_id, expected_version + i, times[i - 1], event)
                      for i, event in enumerate(events, start=1)]
            self._seq += len(stored)
            stream.extend(stored)
            if expected_version == 0:
                self._parents[session_id] = parent_columns(events)
            if WORK_EVENTS.intersection(event.type for event in events):
                self._work.set()
            if snapshot is not None and stored:
                projection, data, status = snapshot
                self._snapshots[session_id, projection] = Snapshot(stored[-1].version, projection, data, status)
        return stored

    def read(self, session_id: str, after_version: int = 0, *,
             types: Collection[str] | None = None) -> Iterator[StoredEvent]:
        with self._lock:
            events = self._sessions.get(session_id, [])[after_version:]
        return iter(events if types is None else [e for e in events if e.event.type in types])

    def read_last(self, session_id: str, count: int) -> list[StoredEvent]:
        with self._lock:
            return self._sessions.get(session_id, [])[-count:] if count > 0 else []

    def head(self, session_id: str) -> int:
        with self._lock:
            return len(self._sessions.get(session_id, []))

    def has_call(self, session_id: str, call_id: str) -> bool:
        with self._lock:
            return any(e.event.type == "tool_call_requested" and e.event.__dict__.get("call_id") == call_id
                       for e in self._sessions.get(session_id, []))

    def sessions(self, limit: int | None = None, *, top_level: bool = False,
                 after: str | None = None) -> list[SessionSummary]:
        with self._lock:
            streams = sorted(self._sessions.values(), key=lambda s: s[-1].seq, reverse=True)
            if after is not None:
                cursor = self._sessions.get(after)
                streams = [s for s in streams if cursor is not None and s[-1].seq < cursor[-1].seq]
            newest = {sid: snap for (sid, _), snap in sorted(self._snapshots.items(), key=lambda i: i[1].version)}
            summaries = [self._summary(s, newest.get(s[0].session_id)) for s in streams]
            if top_level:  # a child whose parent this journal does not have counts as top-level
                summaries = [s for s in summaries if s.parent_session_id not in self._sessions]
        return summaries[:limit]

    def find_sessions(self, part: str, limit: int) -> list[str]:
        with self._lock:
            found = sorted(sid for sid in self._sessions if sid.startswith(part) or sid.endswith(part))
        return sorted(found, key=lambda sid: sid != part)[:limit]

    def _summary(self, stream: list[StoredEvent], snapshot: Snapshot | None) -> SessionSummary:
        parent, call, label, depth = self._parents[stream[0].session_id]
        return SessionSummary(
            session_id=stream[0].session_id, started_at=stream[0].at, last_at=stream[-1].at, events=len(stream),
            calls=sum(e.event.type == "tool_call_requested" for e in stream),
            ended=any(e.event.type == "session_ended" for e in stream),
            status=snapshot.status if snapshot else None, status_version=snapshot.version if snapshot else None,
            parent_session_id=parent, parent_call_id=call, label=label, depth=depth)

    def save_snapshot(self, session_id: str, version: int, projection: str, data: str,
                      status: str | None = None) -> None:
        with self._lock:
            kept = self._snapshots.get((session_id, projection))
            if kept is None or kept.version <= version:
                self._snapshots[session_id, projection] = Snapshot(version, projection, data, status)

    def load_snapshot(self, session_id: str, projection: str) -> Snapshot | None:
        with self._lock:
            return self._snapshots.get((session_id, projection))

    def acquire_lease(self, session_id: str, owner: dict[str, Any], *,
                      replacing: dict[str, Any] | None = None, ttl: float | None = None) -> Lease:
        with self._lock:
            now = clock.now()
            expires = now + timedelta(seconds=ttl) if ttl is not None else None
            held = self._leases.get(session_id)
            if held is not None and _same(owner, held.owner):
                lease = self._leases[session_id] = replace(held, expires_at=expires)  # re-entrant: same since
                return lease
            if held is not None and not _same(held.owner, replacing):
                raise LeaseHeldError(self._as_read(held, now))
            lease = self._leases[session_id] = Lease(session_id, dict(owner), now, expires_at=expires)
            return lease

    def renew_leases(self, owner: dict[str, Any], session_ids: Collection[str], ttl: float) -> set[str]:
        with self._lock:
            renewed = {sid for sid in session_ids if (held := self._leases.get(sid)) and _same(owner, held.owner)}
            expires = clock.now() + timedelta(seconds=ttl)
            for sid in renewed:
                self._leases[sid] = replace(self._leases[sid], expires_at=expires)
            return renewed

    def claim_sessions(self, owner: dict[str, Any], *, ttl: float, limit: int,
                       exclude: Collection[str] = (),
                       running: Callable[[dict[str, Any]], bool] | None = None) -> list[Claim]:
        with self._lock:
            now = clock.now()
            claims: list[Claim] = []
            for stream in sorted(self._sessions.values(), key=lambda s: s[-1].seq):
                sid = stream[0].session_id
                held = self._leases.get(sid)
                if len(claims) >= limit or sid in exclude or not self._wants_driver(stream):
                    continue
                if held is not None and (not self._as_read(held, now).expired
                                         or (running is not None and running(held.owner))):
                    continue
                claims.append(Claim(sid, None if held is None else self._as_read(held, now)))
                self._leases[sid] = Lease(sid, dict(owner), now, expires_at=now + timedelta(seconds=ttl))
            self._work.clear()
            return claims

    def _wants_driver(self, stream: list[StoredEvent]) -> bool:
        """No sub-agent (its parent drives it), not ended, and not left by a driver that stopped
        cleanly with nothing to do (its newest snapshot is of its last event and says so)."""
        sid = stream[0].session_id
        if self._parents[sid][0] is not None or any(e.event.type == "session_ended" for e in stream):
            return False
        newest = max((snap for (s, _), snap in self._snapshots.items() if s == sid),
                     key=lambda snap: snap.version, default=None)
        return newest is None or newest.version != len(stream) or newest.status not in _NEEDS_NOTHING

    def leased_work(self) -> list[Lease]:
        with self._lock:
            now = clock.now()
            return [self._as_read(self._leases[stream[0].session_id], now)
                    for stream in sorted(self._sessions.values(), key=lambda s: s[-1].seq)
                    if (held := self._leases.get(stream[0].session_id)) is not None and held.expires_at is not None
                    and self._wants_driver(stream)]

    def wait_for_work(self, timeout: float) -> bool:
        return self._work.wait(timeout)

    @staticmethod
    def _as_read(lease: Lease, now: datetime) -> Lease:
        return replace(lease, expired=lease.expires_at is not None and lease.expires_at < now)

    def release_lease(self, session_id: str, owner: dict[str, Any]) -> None:
        with self._lock:
            held = self._leases.get(session_id)
            if held is not None and _same(owner, held.owner):
                del self._leases[session_id]
                self._work.set()

    def lease(self, session_id: str) -> Lease | None:
        with self._lock:
            held = self._leases.get(session_id)
            return None if held is None else self._as_read(held, clock.now())

    def check(self) -> list[str]:
        return []

    def close(self) -> None:
        pass

    def __enter__(self) -> MemoryJournal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
