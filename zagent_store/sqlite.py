"""The SQLite journal: one file, WAL mode, one append-only ``events`` table.

Schema and migrations go through sqlite-utils; the append path uses the connection
directly because it runs once per event and sqlite-utils' ``insert()`` triples its cost
(see ``bench/journal_append.py``). The database itself enforces what the design
promises, so even a writer that bypasses this class cannot break it: triggers refuse
UPDATE and DELETE, and refuse a version that does not follow the session's last one.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal


from zagent_core.events import Event, dump_event, load_event

if TYPE_CHECKING:
    import sqlite_utils
from zagent_core.journal import ConcurrencyError, JournalError, SessionSummary, StoredEvent
from zagent_store.views import audit_query, create_audit_views

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]

_VERSION_CONFLICT = "zagent: version conflict"


def _create_events(db: sqlite_utils.Database) -> None:
    db["events"].create(
        {
            "seq": int,
            "session_id": str,
            "version": int,
            "type": str,
            "at": str,
            "call_id": str,
            "task_id": str,
            "data": str,
        },
        pk="seq",
        not_null={"session_id", "version", "type", "at", "data"},
    )
    db["events"].create_index(["session_id", "version"], unique=True, index_name="events_session_version")
    # Ids repeat across sessions (a model numbers its calls), so lookups pair them with the session.
    db["events"].create_index(["call_id", "session_id"], index_name="events_call_id")
    db["events"].create_index(["task_id", "session_id"], index_name="events_task_id")
    db.execute(
        f"""CREATE TRIGGER events_version_follows BEFORE INSERT ON events
        WHEN NEW.version != 1 + coalesce(
            (SELECT max(version) FROM events WHERE session_id = NEW.session_id), 0)
        BEGIN SELECT RAISE(ABORT, '{_VERSION_CONFLICT}'); END"""
    )
    for verb in ("UPDATE", "DELETE"):
        db.execute(
            f"""CREATE TRIGGER events_no_{verb.lower()} BEFORE {verb} ON events
            BEGIN SELECT RAISE(ABORT, 'zagent: events are append-only'); END"""
        )


#: Migration n (1-based) brings a journal from ``user_version`` n-1 to n. Append only.
MIGRATIONS: list[Callable[[sqlite_utils.Database], None]] = [_create_events, create_audit_views]


_INSERT = "INSERT INTO events (session_id, version, type, at, call_id, task_id, data) VALUES (?, ?, ?, ?, ?, ?, ?)"


def _format_time(when: datetime) -> str:
    """``2026-11-30T04:46:00.123Z``: sortable as text, readable in any SQLite client."""
    return when.astimezone(timezone.utc).isoformat(timespec="milliseconds")[:-6] + "Z"


def _parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@contextlib.contextmanager
def _reported(path: Path, doing: str) -> Iterator[None]:
    try:
        yield
    except sqlite3.Error as exc:
        raise JournalError(f"could not {doing} the journal {path}: {exc}") from exc


class JournalVersionError(RuntimeError):
    """The journal file was made by a newer zagent."""


class SQLiteJournal:
    """The embedded journal, in one SQLite file (``<home>/journal.db`` by default).

    ``synchronous="NORMAL"`` (the default) loses nothing when the engine is killed,
    only on a power cut or an OS crash; ``"FULL"`` also survives those, at the cost
    of an fsync per append.
    """

    def __init__(self, path: str | Path, *, synchronous: Synchronous = "NORMAL", busy_timeout_ms: int = 5000) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={synchronous}")
            self._conn = conn
            self._lock = threading.Lock()
            self._migrate()
        except sqlite3.Error as exc:
            conn.close()
            raise JournalError(f"cannot open the journal {self.path}: {exc}") from exc
        except BaseException:
            conn.close()
            raise

    @functools.cached_property
    def db(self) -> sqlite_utils.Database:
        """The journal as a sqlite-utils Database, for schema work and ad-hoc queries.

        Imported on first use: sqlite-utils' import (numpy, where installed) would
        otherwise add tens of milliseconds to every command.
        """
        import sqlite_utils

        return sqlite_utils.Database(self._conn)

    # -- schema -----------------------------------------------------------------

    def _migrate(self) -> None:
        if self._conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS):
            return  # the common case: no write lock just to open
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                current = self._conn.execute("PRAGMA user_version").fetchone()[0]
                if current > len(MIGRATIONS):
                    raise JournalVersionError(
                        f"{self.path} has journal schema {current}, this zagent knows up to {len(MIGRATIONS)}: "
                        "upgrade zagent to open it"
                    )
                for number in range(current, len(MIGRATIONS)):
                    MIGRATIONS[number](self.db)
                self._conn.execute(f"PRAGMA user_version={len(MIGRATIONS)}")
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    # -- the Journal protocol -------------------------------------------------------

    def append(self, session_id: str, events: Sequence[Event], expected_version: int, *,
               at: Sequence[datetime] | None = None) -> list[StoredEvent]:
        if at is None:
            now = datetime.now(timezone.utc)
            now = now.replace(microsecond=now.microsecond - now.microsecond % 1000)  # as stored: milliseconds
            times = [now] * len(events)
            stamps = [_format_time(now)] * len(events)
        else:  # imports and forks keep the times the events had (to the millisecond, as stored)
            times = [when.replace(microsecond=when.microsecond - when.microsecond % 1000) for when in at]
            stamps = [_format_time(when) for when in times]
        # event.__dict__ rather than getattr: a missing attribute costs pydantic an exception.
        rows = [
            (session_id, expected_version + offset, event.type, stamps[offset - 1], event.__dict__.get("call_id"),
             event.__dict__.get("task_id"), dump_event(event))
            for offset, event in enumerate(events, start=1)
        ]
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                if len(rows) == 1:
                    first = conn.execute(_INSERT, rows[0]).lastrowid
                else:
                    # The write lock is held: the rows get the next seqs, in order.
                    first = conn.execute("SELECT coalesce(max(seq), 0) + 1 FROM events").fetchone()[0]
                    conn.executemany(_INSERT, rows)
                conn.execute("COMMIT")
            except sqlite3.IntegrityError as exc:
                conn.execute("ROLLBACK")
                if _VERSION_CONFLICT in str(exc) or "UNIQUE" in str(exc):
                    raise ConcurrencyError(session_id, expected_version, self._version(session_id)) from None
                raise
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise JournalError(f"could not append to the journal {self.path}: {exc}") from exc
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        return [
            StoredEvent(first + i, session_id, expected_version + i + 1, times[i], event)
            for i, event in enumerate(events)
        ]

    def _version(self, session_id: str) -> int:
        row = self._conn.execute("SELECT max(version) FROM events WHERE session_id = ?", (session_id,)).fetchone()
        return row[0] or 0

    def read(self, session_id: str, after_version: int = 0) -> Iterator[StoredEvent]:
        with self._lock, _reported(self.path, "read"):
            rows = self._conn.execute(
                "SELECT seq, version, type, at, data FROM events"
                " WHERE session_id = ? AND version > ? ORDER BY version",
                (session_id, after_version),
            ).fetchall()
        for seq, version, type_, at, data in rows:
            yield StoredEvent(seq, session_id, version, _parse_time(at), load_event(type_, json.loads(data)))

    def has_call(self, session_id: str, call_id: str) -> bool:
        with self._lock, _reported(self.path, "read"):
            return self._conn.execute(
                "SELECT 1 FROM events WHERE call_id = ? AND session_id = ? AND type = 'tool_call_requested' LIMIT 1",
                (call_id, session_id)).fetchone() is not None

    def sessions(self, limit: int | None = None) -> list[SessionSummary]:
        # The most recent sessions first (a walk of the session index), then a few index
        # lookups each: fast on a journal of millions of events.
        with self._lock, _reported(self.path, "read"):
            if limit is not None:
                # Newest events first until enough sessions are seen: stops early.
                recent: dict[str, int] = {}
                for session_id, seq in self._conn.execute("SELECT session_id, seq FROM events ORDER BY seq DESC"):
                    if len(recent) >= limit:
                        break
                    recent.setdefault(session_id, seq)
                wanted = list(recent)
            rows = self._conn.execute(
                """WITH recent AS (
                       SELECT session_id, max(seq) AS last_seq FROM events
                       WHERE ? OR session_id IN (SELECT value FROM json_each(?))
                       GROUP BY session_id ORDER BY last_seq DESC)
                   SELECT r.session_id,
                          (SELECT at FROM events WHERE session_id = r.session_id AND version = 1),
                          (SELECT at FROM events WHERE seq = r.last_seq),
                          (SELECT max(version) FROM events WHERE session_id = r.session_id),
                          (SELECT count(*) FROM events WHERE session_id = r.session_id
                                                         AND type = 'tool_call_requested'),
                          EXISTS (SELECT 1 FROM events WHERE session_id = r.session_id AND type = 'session_ended')
                   FROM recent r ORDER BY r.last_seq DESC""",
                (limit is None, json.dumps(wanted if limit is not None else [])),
            ).fetchall()
        return [
            SessionSummary(
                session_id=sid,
                started_at=_parse_time(first),
                last_at=_parse_time(last),
                events=count,
                calls=calls,
                ended=bool(ended),
            )
            for sid, first, last, count, calls, ended in rows
        ]

    def audit(self, **filters: Any) -> list[dict[str, Any]]:
        """Rows of the ``tool_calls`` view matching ``zagent audit``'s filters (see :func:`audit_query`)."""
        sql, params = audit_query(**filters)
        with self._lock, _reported(self.path, "read"):
            cursor = self._conn.execute(sql, params)
            names = [column[0] for column in cursor.description]
            rows = [dict(zip(names, row)) for row in cursor.fetchall()]
        for row in rows:
            if isinstance(row.get("arguments"), str):
                with contextlib.suppress(ValueError):
                    row["arguments"] = json.loads(row["arguments"])
        return rows

    def check(self) -> list[str]:
        with self._lock:
            try:
                problems = [row[0] for row in self._conn.execute("PRAGMA integrity_check") if row[0] != "ok"]
                mode = self._conn.execute("PRAGMA journal_mode").fetchone()[0]
            except sqlite3.Error as exc:
                return [f"cannot be checked: {exc}"]
        if mode.lower() != "wal":
            problems.append(f"journal_mode is {mode}, expected wal")
        return problems

    def stats(self) -> dict[str, int]:
        """Counts for ``zagent doctor``: events, sessions, schema version."""
        with self._lock:
            events, sessions = self._conn.execute(
                "SELECT count(*), count(DISTINCT session_id) FROM events"
            ).fetchone()
            schema = self._conn.execute("PRAGMA user_version").fetchone()[0]
        return {"events": events, "sessions": sessions, "schema_version": schema}

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> SQLiteJournal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
