"""Who drives a session, in the SQLite journal: the ``leases`` table, under the file's write lock.

One class, :class:`SQLiteLeases`, that :class:`~zagent_store.sqlite.SQLiteJournal` inherits
(see ``sqlite_base.py`` for why the journal is made of parts this way). Every lease write is
one transaction on the file, whose write lock is what keeps two takers or claimers apart;
one file on one host has no way to tell a waiting worker, so :meth:`SQLiteLeases.wait_for_work`
only sleeps.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection
from dataclasses import replace
from datetime import timedelta
from typing import Any

from zagent_core.journal.protocol import Claim, Lease, LeaseHeldError, Leases, canonical_owner
from zagent_store import clock
from zagent_store.sql import format_time, parse_time, running_owners
from zagent_store.sqlite_base import SQLiteBase, reported
from zagent_store.views import WANTS_DRIVER


def lease_of(session_id: str, row: tuple[str, str, str | None], now: str) -> Lease:
    """A ``(owner, since, expires_at)`` row of ``leases`` as read at ``now`` (stored time text)."""
    owner, since, expires = row
    return Lease(session_id, json.loads(owner), parse_time(since),
                 expires_at=parse_time(expires) if expires else None,
                 expired=expires is not None and expires < now)


class SQLiteLeases(SQLiteBase, Leases):
    """The :class:`~zagent_core.journal.protocol.Leases` of a SQLite journal."""

    def acquire_lease(self, session_id: str, owner: dict[str, Any], *,
                      replacing: dict[str, Any] | None = None, ttl: float | None = None) -> Lease:
        wanted = canonical_owner(owner)
        with self._transaction("take a lease in") as conn:
            # The time once the write lock is ours: waiting for it must not shorten the lease.
            since = clock.now()
            expires = format_time(since + timedelta(seconds=ttl)) if ttl is not None else None
            row = conn.execute("SELECT owner, since, expires_at FROM leases WHERE session_id = ?",
                               (session_id,)).fetchone()
            if row is not None and row[0] == wanted:
                conn.execute("UPDATE leases SET expires_at = ? WHERE session_id = ?", (expires, session_id))
                return replace(lease_of(session_id, row, format_time(since)),
                               expires_at=parse_time(expires) if expires else None, expired=False)
            if row is not None and (replacing is None or row[0] != canonical_owner(replacing)):
                raise LeaseHeldError(lease_of(session_id, row, format_time(since)))
            conn.execute("INSERT OR REPLACE INTO leases (session_id, owner, since, expires_at) VALUES (?, ?, ?, ?)",
                         (session_id, wanted, format_time(since), expires))
        return Lease(session_id, owner, since, expires_at=parse_time(expires) if expires else None)

    def renew_leases(self, owner: dict[str, Any], session_ids: Collection[str], ttl: float) -> set[str]:
        with self._transaction("renew leases in") as conn:
            expires = format_time(clock.now() + timedelta(seconds=ttl))
            rows = conn.execute("UPDATE leases SET expires_at = ? WHERE owner = ?"
                                " AND session_id IN (SELECT value FROM json_each(?)) RETURNING session_id",
                                (expires, canonical_owner(owner), json.dumps(list(session_ids)))).fetchall()
        return {row[0] for row in rows}

    def claim_sessions(self, owner: dict[str, Any], *, ttl: float, limit: int,
                       exclude: Collection[str] = (),
                       running: Callable[[dict[str, Any]], bool] | None = None) -> list[Claim]:
        # One write transaction: the file's lock is what keeps two claimers apart here.
        with self._transaction("claim sessions in") as conn:
            now = clock.now()
            stamp, expires = format_time(now), format_time(now + timedelta(seconds=ttl))
            spared = running_owners(conn.execute("SELECT DISTINCT owner FROM leases WHERE expires_at < ?",
                                                  (stamp,)).fetchall(), running) if running else []
            rows = conn.execute(
                f"""SELECT h.session_id, l.owner, l.since, l.expires_at FROM heads h
                    LEFT JOIN leases l ON l.session_id = h.session_id
                    WHERE NOT h.ended AND (l.session_id IS NULL OR l.expires_at < ?) AND {WANTS_DRIVER}
                      AND h.session_id NOT IN (SELECT value FROM json_each(?))
                      AND (l.owner IS NULL OR l.owner NOT IN (SELECT value FROM json_each(?)))
                    ORDER BY h.last_seq LIMIT ?""",
                (stamp, json.dumps(list(exclude)), json.dumps(spared), limit)).fetchall()
            conn.executemany("INSERT OR REPLACE INTO leases (session_id, owner, since, expires_at) VALUES (?, ?, ?, ?)",
                             [(row[0], canonical_owner(owner), stamp, expires) for row in rows])
        return [Claim(sid, None if held is None else lease_of(sid, (held, since, until), stamp))
                for sid, held, since, until in rows]

    def leased_work(self) -> list[Lease]:
        with self._lock, reported(self.path, "read"):
            now = format_time(clock.now())
            rows = self._conn.execute(
                f"""SELECT l.session_id, l.owner, l.since, l.expires_at FROM leases l
                    JOIN heads h ON h.session_id = l.session_id
                    WHERE l.expires_at IS NOT NULL AND NOT h.ended AND {WANTS_DRIVER} ORDER BY h.last_seq""").fetchall()
        return [lease_of(sid, (owner, since, expires), now) for sid, owner, since, expires in rows]

    def wait_for_work(self, timeout: float) -> bool:
        time.sleep(timeout)  # one file on one host: nobody to be told by; the worker polls
        return False

    def release_lease(self, session_id: str, owner: dict[str, Any]) -> None:
        with self._transaction("release a lease in") as conn:
            conn.execute("DELETE FROM leases WHERE session_id = ? AND owner = ?", (session_id, canonical_owner(owner)))

    def lease(self, session_id: str) -> Lease | None:
        with self._lock, reported(self.path, "read"):
            row = self._conn.execute("SELECT owner, since, expires_at FROM leases WHERE session_id = ?",
                                     (session_id,)).fetchone()
        return None if row is None else lease_of(session_id, row, format_time(clock.now()))
