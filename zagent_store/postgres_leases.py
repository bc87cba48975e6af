"""Who drives a session, in the PostgreSQL journal: the ``leases`` table, shared by many hosts.

One class, :class:`PostgresLeases`, that :class:`~zagent_store.postgres.PostgresJournal` inherits
(see ``postgres_base.py`` for why the journal is made of parts this way). Takers of one
session are serialised by an advisory lock on it, and a released lease is told to waiting
workers on :data:`CHANNEL`, as an append of work is.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

from zagent_core.journal.protocol import Claim, JournalError, Lease, LeaseHeldError, Leases, canonical_owner
from zagent_store import clock
from zagent_store.postgres_base import PostgresBase, dialect, first_line
from zagent_store.sql import format_time, parse_time, running_owners
from zagent_store.views import WANTS_DRIVER

if TYPE_CHECKING:
    import psycopg

#: The NOTIFY channel of work for workers: a released lease, or a wake-up or message appended.
CHANNEL = "zagent_work"
#: A lease's expiry ``%s`` seconds from now, by the server's clock (NULL seconds: no expiry).
_EXPIRES = "clock_timestamp() + make_interval(secs => %s)"
#: A lease's expiry as read, and whether it has passed.
_EXPIRY = "expires_at, coalesce(expires_at < clock_timestamp(), FALSE)"


def _lease_of(session_id: str, row: Sequence[Any]) -> Lease:
    owner, since, expires_at, expired = row
    return Lease(session_id, json.loads(owner), parse_time(since), expires_at=expires_at, expired=bool(expired))


class PostgresLeases(PostgresBase, Leases):
    """The :class:`~zagent_core.journal.protocol.Leases` of a PostgreSQL journal."""

    #: The connection ``wait_for_work`` listens on, made by the first wait.
    _listener: psycopg.Connection[Any] | None = None

    # Expiry is the server's clock, never a host's: the hosts sharing a journal need not agree on the time.

    def acquire_lease(self, session_id: str, owner: dict[str, Any], *,
                      replacing: dict[str, Any] | None = None, ttl: float | None = None) -> Lease:
        wanted = canonical_owner(owner)
        since = clock.now()
        with self._transaction("take a lease in") as conn:
            # Serialises the takers of one session (the row may not exist yet to lock); claims take it too.
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (session_id,))
            row = conn.execute(f"SELECT owner, since, {_EXPIRY} FROM leases WHERE session_id = %s",
                               (session_id,)).fetchone()
            if row is not None and row[0] != wanted and (replacing is None or row[0] != canonical_owner(replacing)):
                raise LeaseHeldError(_lease_of(session_id, row))
            taken = conn.execute(
                f"INSERT INTO leases (session_id, owner, since, expires_at) VALUES (%s, %s, %s, {_EXPIRES})"
                " ON CONFLICT (session_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at,"
                " since = CASE WHEN leases.owner = excluded.owner THEN leases.since ELSE excluded.since END"
                f" RETURNING owner, since, {_EXPIRY}", (session_id, wanted, format_time(since), ttl)).fetchone()
        assert taken is not None
        return _lease_of(session_id, taken)

    def renew_leases(self, owner: dict[str, Any], session_ids: Collection[str], ttl: float) -> set[str]:
        with self._transaction("renew leases in") as conn:
            rows = conn.execute(f"UPDATE leases SET expires_at = {_EXPIRES} WHERE owner = %s AND session_id = ANY(%s)"
                                " RETURNING session_id", (ttl, canonical_owner(owner), list(session_ids))).fetchall()
        return {row[0] for row in rows}

    def claim_sessions(self, owner: dict[str, Any], *, ttl: float, limit: int,
                       exclude: Collection[str] = (),
                       running: Callable[[dict[str, Any]], bool] | None = None) -> list[Claim]:
        wanted = canonical_owner(owner)
        with self._transaction("claim sessions in") as conn:
            # Both statements look at the transaction's start (now()): a lease that expired while
            # ``running`` was asked about its owners is not claimed without being asked about.
            spared = running_owners(conn.execute("SELECT DISTINCT owner FROM leases WHERE expires_at < now()")
                                     .fetchall(), running) if running else []
            # Rows another claimer has locked are skipped, not waited for; the advisory lock
            # skips a session whose lease a driver (zagent resume) is taking this moment.
            rows = conn.execute(
                f"""SELECT h.session_id, l.owner, l.since, {_EXPIRY.replace("expires_at", "l.expires_at")}
                    FROM heads h LEFT JOIN leases l ON l.session_id = h.session_id
                    WHERE NOT h.ended AND (l.session_id IS NULL OR l.expires_at < now())
                      AND {dialect(WANTS_DRIVER)} AND NOT (h.session_id = ANY(%s))
                      AND (l.owner IS NULL OR NOT (l.owner = ANY(%s)))
                      AND pg_try_advisory_xact_lock(hashtext(h.session_id))
                    ORDER BY h.last_seq LIMIT %s FOR UPDATE OF h SKIP LOCKED""",
                (list(exclude), spared, limit)).fetchall()
            claims = []
            for sid, held, since, expires, expired in rows:
                taken = conn.execute(
                    f"INSERT INTO leases (session_id, owner, since, expires_at) VALUES (%s, %s, %s, {_EXPIRES})"
                    " ON CONFLICT (session_id) DO UPDATE SET owner = excluded.owner, since = excluded.since,"
                    " expires_at = excluded.expires_at WHERE leases.expires_at < clock_timestamp()"
                    " RETURNING session_id", (sid, wanted, format_time(clock.now()), ttl)).fetchone()
                if taken is not None:
                    previous = None if held is None else _lease_of(sid, (held, since, expires, expired))
                    claims.append(Claim(sid, previous))
        return claims

    def leased_work(self) -> list[Lease]:
        with self._reported("read") as conn:
            rows = conn.execute(
                f"""SELECT l.session_id, l.owner, l.since, {_EXPIRY.replace("expires_at", "l.expires_at")}
                    FROM leases l JOIN heads h ON h.session_id = l.session_id
                    WHERE l.expires_at IS NOT NULL AND NOT h.ended AND {dialect(WANTS_DRIVER)}
                    ORDER BY h.last_seq""").fetchall()
        return [_lease_of(row[0], row[1:]) for row in rows]

    def wait_for_work(self, timeout: float) -> bool:
        """``LISTEN`` on a connection of its own: a release or a wake-up anywhere wakes the worker at once."""
        try:
            if self._listener is None:
                self._listener = self._psycopg.connect(self.url, autocommit=True, application_name="zagent worker")
                self._listener.execute(f"LISTEN {CHANNEL}")
            for _ in self._listener.notifies(timeout=timeout, stop_after=1):
                return True
        except self._psycopg.Error as exc:
            raise JournalError(f"could not wait for work in the journal {self.location}: {first_line(exc)}") from None
        return False

    def release_lease(self, session_id: str, owner: dict[str, Any]) -> None:
        with self._transaction("release a lease in") as conn:
            released = conn.execute("DELETE FROM leases WHERE session_id = %s AND owner = %s",
                                    (session_id, canonical_owner(owner))).rowcount
            if released:
                # Not the session's id when it is too long for a payload (8000 bytes): workers read none.
                conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, session_id if len(session_id.encode()) <= 7900
                                                         else ""))

    def lease(self, session_id: str) -> Lease | None:
        with self._reported("read") as conn:
            row = conn.execute(f"SELECT owner, since, {_EXPIRY} FROM leases WHERE session_id = %s",
                               (session_id,)).fetchone()
        return None if row is None else _lease_of(session_id, row)

    def close(self) -> None:
        super().close()
        if self._listener is not None:
            self._listener.close()
