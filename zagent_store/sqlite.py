"""The SQLite journal: one file, WAL mode, one append-only ``events`` table.

Schema and migrations go through sqlite-utils; the append path uses the connection
directly because it runs once per event and sqlite-utils' ``insert()`` triples its cost
(see ``bench/journal_append.py``). The database itself refuses UPDATE and DELETE of an
event and a second event at a session's version, so even a writer that bypasses this
class cannot rewrite history or fork a session.

Since schema 3 an append writes its events, the indexes their types need (partial
indexes: most events touch none but ``(session_id, version)``) and one row of ``heads``
per append, not per event: the session's version, counts and last activity. Updating
that row at the expected version is the optimistic concurrency check, and what makes
``sessions`` and the ``sessions`` view free of a scan of the events.

This module holds the schema and :class:`SQLiteJournal`'s own part: the event log, its
snapshots and the session index. The journal inherits who drives a session from
``sqlite_leases.py`` and what an operator reads from ``sqlite_admin.py``, over the connection
and transaction of ``sqlite_base.py`` (whose docstring says why it is built so).
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Collection, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from zagent_core.journal.protocol import (
    AdminJournal,
    Change,
    ConcurrencyError,
    JournalError,
    SessionSummary,
    Snapshot,
    StoredEvent,
    parent_columns,
)
from zagent_store import clock
from zagent_store.sql import (
    JournalVersionError,
    format_time,
    heads_picked,
    moved,
    moved_sql,
    moved_until,
    paged,
    session_summary,
    stored_events,
)
from zagent_store.sqlite_admin import SQLiteAdmin
from zagent_store.sqlite_base import connect, damage, reported
from zagent_store.sqlite_leases import SQLiteLeases
from zagent_store.views import (
    CALLS_AND_TASKS,
    SESSIONS_7,
    artifacts_view,
    create_audit_views,
    decisions_view,
    lean_audit_schema,
    outcome_columns,
    people_ranges,
    task_outcome_views,
)

if TYPE_CHECKING:
    import sqlite_utils

    from zagent_core.journal.events import Event

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]

_VERSION_CONFLICT = "zagent: version conflict"


def _create_events(db: sqlite_utils.Database) -> None:
    db.table("events").create(
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
    db.table("events").create_index(["session_id", "version"], unique=True, index_name="events_session_version")
    # Ids repeat across sessions (a model numbers its calls), so lookups pair them with the session.
    db.table("events").create_index(["call_id", "session_id"], index_name="events_call_id")
    db.table("events").create_index(["task_id", "session_id"], index_name="events_task_id")
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


#: The event types ``heads`` counts, in the order of its columns ``calls``, ``tasks`` and ``model_replies``.
_COUNTED = ("tool_call_requested", "task_started", "model_replied")

#: The ``heads`` rows of sessions as their events say; ``{where}`` picks the sessions.
_HEAD_OF_EVENTS = """SELECT g.session_id, g.version,
       (SELECT at FROM events f WHERE f.session_id = g.session_id ORDER BY f.version LIMIT 1),
       (SELECT at FROM events f WHERE f.seq = g.last_seq), g.last_seq, g.calls, g.tasks, g.replies, g.ended
FROM (SELECT session_id, max(version) AS version, max(seq) AS last_seq,
             sum(type = 'tool_call_requested') AS calls, sum(type = 'task_started') AS tasks,
             sum(type = 'model_replied') AS replies, max(type = 'session_ended') AS ended
      FROM events {where} GROUP BY session_id) AS g"""
#: Named columns: schema 7 added the parent's, which :data:`_PARENTS_OF_HEADS` fills.
_INSERT_HEADS = ("INSERT INTO heads (session_id, version, started_at, last_at, last_seq, calls, tasks, model_replies,"
                 " ended) " + _HEAD_OF_EVENTS)

#: Fills the parent columns of ``heads`` rows from the sessions' first event (``{where}``: which
#: rows, as ``heads.session_id = ? AND``). Each row looks up its session's first event, so the
#: events are not scanned. A fork of a child (``session_forked``) copies its ``session_started``
#: but is a session of its own, made by a person: it is listed at the top, as any fork.
_PARENTS_OF_HEADS = """UPDATE heads SET (parent_session_id, parent_call_id, label, depth) = (
    SELECT json_extract(e.data, '$.parent.session_id'), json_extract(e.data, '$.parent.call_id'),
           json_extract(e.data, '$.parent.label'), coalesce(json_extract(e.data, '$.parent.depth'), 0)
    FROM events e WHERE e.session_id = heads.session_id AND e.version = 1)
WHERE {where} EXISTS (SELECT 1 FROM events e WHERE e.session_id = heads.session_id AND e.version = 1
                      AND e.type = 'session_started' AND json_extract(e.data, '$.parent') IS NOT NULL)
  AND NOT EXISTS (SELECT 1 FROM events f WHERE f.session_id = heads.session_id AND f.type = 'session_forked')"""


def _lean_hot_path(db: sqlite_utils.Database) -> None:
    """Migration 3: heads instead of a per-event trigger, partial audit indexes, snapshots, leases."""
    # The trigger looked up the session's last version for every inserted row; the
    # append now checks the version once per transaction, on the session's head row.
    db.execute("DROP TRIGGER events_version_follows")
    db.execute(
        """CREATE TABLE heads (
            session_id TEXT PRIMARY KEY,
            version INTEGER NOT NULL,
            started_at TEXT NOT NULL,
            last_at TEXT NOT NULL,
            last_seq INTEGER NOT NULL,
            calls INTEGER NOT NULL,
            tasks INTEGER NOT NULL,
            model_replies INTEGER NOT NULL,
            ended INTEGER NOT NULL
        ) WITHOUT ROWID"""
    )
    db.execute(_INSERT_HEADS.format(where=""))
    db.execute(
        """CREATE TABLE snapshots (
            session_id TEXT NOT NULL,
            projection TEXT NOT NULL,
            version INTEGER NOT NULL,
            status TEXT,
            data TEXT NOT NULL,
            PRIMARY KEY (session_id, projection)
        ) WITHOUT ROWID"""
    )
    db.execute(
        """CREATE TABLE leases (
            session_id TEXT PRIMARY KEY,
            owner TEXT NOT NULL,
            since TEXT NOT NULL
        ) WITHOUT ROWID"""
    )
    lean_audit_schema(db)


def _session_tree(db: sqlite_utils.Database) -> None:
    """Migration 7: each session's parent in ``heads`` (a sub-agent's, from its ``session_started``),
    so listings tell the top-level sessions from the children without reading events."""
    for column in ("parent_session_id TEXT", "parent_call_id TEXT", "label TEXT", "depth INTEGER NOT NULL DEFAULT 0"):
        db.execute(f"ALTER TABLE heads ADD COLUMN {column}")
    db.execute(_PARENTS_OF_HEADS.format(where=""))
    # Only children are indexed: a top-level session's row costs nothing more.
    db.execute("CREATE INDEX heads_parent ON heads (parent_session_id) WHERE parent_session_id IS NOT NULL")
    db.create_view("sessions", SESSIONS_7, replace=True)


def _expiring_leases(db: sqlite_utils.Database) -> None:
    """Migration 8: leases that expire unless their holder renews them (workers take over a
    driver that stopped heart-beating). A lease of an older zagent has none: it never expires."""
    db.execute("ALTER TABLE leases ADD COLUMN expires_at TEXT")


def _heads_by_activity(db: sqlite_utils.Database) -> None:
    """Migration 11: the head rows in order of last activity, as listings page through them
    (newest first) and workers claim them (oldest first): the first page of a million sessions
    took 4 s as a scan and sort of every head, and takes about 1 ms down this index
    (bench/sessions_list.py). PostgreSQL's schema had it from the start."""
    db.execute("CREATE INDEX heads_last_seq ON heads (last_seq)")


#: Migration n (1-based) brings a journal from ``user_version`` n-1 to n. Append only.
MIGRATIONS: list[Callable[[sqlite_utils.Database], None]] = [_create_events, create_audit_views, _lean_hot_path,
                                                              task_outcome_views, artifacts_view, decisions_view,
                                                              _session_tree, _expiring_leases, people_ranges,
                                                              outcome_columns, _heads_by_activity]

#: The oldest schema this zagent reads without migrating it (what a read-only open can do): the
#: migrations since changed only indexes and the views' spelling, not what reading relies on.
READ_AS_IS = 8

_INSERT = "INSERT INTO events (session_id, version, type, at, call_id, task_id, data) VALUES (?, ?, ?, ?, ?, ?, ?)"
_NEW_HEAD = (
    "INSERT INTO heads (session_id, version, started_at, last_at, last_seq, calls, tasks, model_replies, ended,"
    " parent_session_id, parent_call_id, label, depth)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_MOVE_HEAD = (
    "UPDATE heads SET version = ?, last_at = ?, last_seq = ?, calls = calls + ?,"
    " tasks = tasks + ?, model_replies = model_replies + ?, ended = ended OR ?"
    " WHERE session_id = ? AND version = ?"
)
_SAVE_SNAPSHOT = (
    "INSERT INTO snapshots (session_id, projection, version, status, data) VALUES (?, ?, ?, ?, ?)"
    " ON CONFLICT (session_id, projection) DO UPDATE SET version = excluded.version, status = excluded.status,"
    " data = excluded.data WHERE excluded.version >= snapshots.version"
)
_READ = "SELECT seq, version, type, at, data FROM events WHERE session_id = ?"


@functools.cache
def _dump_event() -> Callable[[Event], str]:
    """``dump_event``, imported by who writes events, not by who lists sessions (once: an import
    statement in ``append`` cost a microsecond per call)."""
    from zagent_core.journal.events import dump_event

    return dump_event


class _Conflict(Exception):
    """The session is not at the version an append expected (raised inside its transaction)."""


class SQLiteJournal(SQLiteLeases, SQLiteAdmin, AdminJournal):
    """The embedded journal, in one SQLite file (``<home>/journal.db`` by default).

    ``synchronous="FULL"`` (the default) makes every append durable before it returns,
    through a power cut or an OS crash too (one fsync per append). ``"NORMAL"`` is
    cheaper and still loses nothing when the engine is killed, but a power cut can roll
    back the last appends, after a tool they announced has started.
    """

    def __init__(self, path: str | Path, *, synchronous: Synchronous = "FULL", busy_timeout_ms: int = 5000,
                 read_only: bool = False) -> None:
        path = Path(path)
        try:
            if not read_only:
                path.parent.mkdir(parents=True, exist_ok=True)
            conn = connect(path, read_only=read_only, busy_timeout_ms=busy_timeout_ms, synchronous=synchronous)
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            raise damage(path, "open", exc) from exc
        try:
            super().__init__(path, conn, read_only=read_only)
            self._migrate()
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            conn.close()
            raise damage(path, "open", exc) from exc
        except BaseException:
            conn.close()
            raise

    # -- schema -----------------------------------------------------------------

    def _migrate(self) -> None:
        current = self._conn.execute("PRAGMA user_version").fetchone()[0]
        if current == len(MIGRATIONS):
            return  # the common case: no write lock just to open
        if self.read_only and READ_AS_IS <= current < len(MIGRATIONS):
            return
        if self.read_only and current < len(MIGRATIONS):
            raise JournalError(f"{self.path} has journal schema {current} and this zagent writes {len(MIGRATIONS)}: "
                               "run a command that writes (zagent doctor) where the home is writable to upgrade it")
        with self._transaction("migrate") as conn:
            current = conn.execute("PRAGMA user_version").fetchone()[0]
            if current > len(MIGRATIONS):
                raise JournalVersionError(
                    f"{self.path} has journal schema {current}, this zagent knows up to {len(MIGRATIONS)}: "
                    "upgrade zagent to open it"
                )
            for number in range(current, len(MIGRATIONS)):
                MIGRATIONS[number](self.db)
            conn.execute(f"PRAGMA user_version={len(MIGRATIONS)}")

    # -- the event log and the session index ---------------------------------------

    def append(self, session_id: str, events: Sequence[Event], expected_version: int, *,
               at: Sequence[datetime] | None = None,
               snapshot: tuple[str, str, str | None] | None = None) -> list[StoredEvent]:
        if not events:
            return []
        dump_event = _dump_event()
        if at is None:
            moment = clock.now()
            times = [moment] * len(events)
            stamps = [format_time(moment)] * len(events)
        else:  # imports and forks keep the times the events had (to the millisecond, as stored)
            times = [clock.stored_time(when) for when in at]
            stamps = [format_time(when) for when in times]
        # event.__dict__ rather than getattr: a missing attribute costs pydantic an exception.
        rows = [
            (session_id, version, event.type, stamp, event.__dict__.get("call_id"), event.__dict__.get("task_id"),
             dump_event(event))
            for version, event, stamp in zip(range(expected_version + 1, expected_version + len(events) + 1),
                                             events, stamps)
        ]
        version = expected_version + len(rows)
        kinds: list[str] = [row[2] for row in rows]
        calls, tasks, replies = [kinds.count(kind) for kind in _COUNTED]
        ended = "session_ended" in kinds
        try:
            with self._transaction("append to") as conn:
                if len(rows) > 1:  # executemany sets no lastrowid: the last row goes alone, and gives its seq
                    conn.executemany(_INSERT, rows[:-1])
                seq = conn.execute(_INSERT, rows[-1]).lastrowid
                if expected_version == 0:
                    conn.execute(_NEW_HEAD, (session_id, version, stamps[0], stamps[-1], seq, calls, tasks, replies,
                                             ended, *parent_columns(events)))
                elif conn.execute(_MOVE_HEAD, (version, stamps[-1], seq, calls, tasks, replies, ended, session_id,
                                               expected_version)).rowcount != 1:
                    self._repair_head(conn, session_id, version)
                if snapshot is not None:
                    conn.execute(_SAVE_SNAPSHOT, (session_id, snapshot[0], version, snapshot[2], snapshot[1]))
        except (sqlite3.IntegrityError, _Conflict):  # a unique violation: the version is taken
            raise ConcurrencyError(session_id, expected_version, self.head(session_id)) from None
        assert seq is not None
        first = seq - len(rows) + 1  # the write lock was held: the rows got consecutive seqs
        return [
            StoredEvent(first + i, session_id, expected_version + i + 1, times[i], event)
            for i, event in enumerate(events)
        ]

    @staticmethod
    def _repair_head(conn: sqlite3.Connection, session_id: str, version: int) -> None:
        """The head row did not match: a conflict, unless the row is missing or stale.

        Events are the truth and the head a cache of them: a session written by a raw
        ``INSERT`` has no (or an old) head row. If the session's events, the ones just
        inserted included, are exactly versions 1 to ``version``, the head is rebuilt
        from them; otherwise the append is a conflict, and the rollback takes the
        inserted rows back.
        """
        present = conn.execute("SELECT count(*), max(version) FROM events WHERE session_id = ?",
                               (session_id,)).fetchone()
        if present != (version, version):
            raise _Conflict
        conn.execute("DELETE FROM heads WHERE session_id = ?", (session_id,))
        conn.execute(_INSERT_HEADS.format(where="WHERE session_id = ?"), (session_id,))
        conn.execute(_PARENTS_OF_HEADS.format(where="heads.session_id = ? AND"), (session_id,))

    def head(self, session_id: str) -> int:
        with self._lock, reported(self.path, "read"):
            return self._version(self._conn, session_id)

    def read(self, session_id: str, after_version: int = 0, *,
             types: Collection[str] | None = None) -> Iterator[StoredEvent]:
        sql, kinds = _READ + " AND version > ?", list(types or ())
        if types is not None:
            sql += f" AND type IN ({', '.join('?' * len(kinds))})"
        with self._lock, reported(self.path, "read"):  # what there is as it is asked for, no more
            until = self._conn.execute("SELECT max(version) FROM events WHERE session_id = ?",
                                       (session_id,)).fetchone()[0] or 0

        def fetch(after: int, limit: int) -> list[tuple[Any, ...]]:
            with self._lock, reported(self.path, "read"):
                return self._conn.execute(sql + " AND version <= ? ORDER BY version LIMIT ?",
                                          [session_id, after, *kinds, until, limit]).fetchall()

        return stored_events(session_id, paged(fetch, after_version), self._opened_by)

    def read_last(self, session_id: str, count: int) -> list[StoredEvent]:
        with self._lock, reported(self.path, "read"):
            rows = self._conn.execute(_READ + " ORDER BY version DESC LIMIT ?", (session_id, max(count, 0))).fetchall()
        return list(stored_events(session_id, rows[::-1], self._opened_by))

    def has_call(self, session_id: str, call_id: str) -> bool:
        with self._lock, reported(self.path, "read"):
            return self._conn.execute(
                # The range term lets SQLite use the partial index of call and task events.
                f"SELECT 1 FROM events WHERE session_id = ? AND call_id = ? AND {CALLS_AND_TASKS}"
                " AND type = 'tool_call_requested' LIMIT 1",
                (session_id, call_id)).fetchone() is not None

    def sessions(self, limit: int | None = None, *, top_level: bool = False,
                 after: str | None = None) -> list[SessionSummary]:
        # The head rows hold the counts and the parent; only the newest snapshot of each is looked up.
        picked = "SELECT * FROM heads h WHERE " + heads_picked(top_level, after, "?")
        with self._lock, reported(self.path, "read"):
            rows = self._conn.execute(
                f"""SELECT h.session_id, h.started_at, h.last_at, h.version, h.calls, h.ended, s.status, s.version,
                          h.parent_session_id, h.parent_call_id, h.label, h.depth
                   FROM ({picked} ORDER BY last_seq DESC LIMIT ?) AS h
                   LEFT JOIN snapshots s ON s.session_id = h.session_id AND s.version = (
                       SELECT max(version) FROM snapshots WHERE session_id = h.session_id)
                   ORDER BY h.last_seq DESC""",
                (*([] if after is None else [after]), -1 if limit is None else limit),
            ).fetchall()
        summaries: dict[str, SessionSummary] = {}
        for row in rows:  # a session whose snapshots of two projections share the newest version joins twice
            summaries.setdefault(row[0], session_summary(row))
        return list(summaries.values())

    # -- the change feed (zagent_store/changes.py polls these) ---------------------------

    def position(self) -> int:
        """The journal's position now: the ``seq`` of its last event (0 when it has none)."""
        with self._lock, reported(self.path, "read"):
            return int(self._conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0])

    def moved_since(self, after: int) -> tuple[list[Change], int]:
        """The sessions whose head moved past position ``after`` (a bounded step: see ``sql.moved_until``)."""
        until = moved_until(self.position(), after)
        with self._lock, reported(self.path, "read"):
            rows = self._conn.execute(moved_sql("?"), (after, until)).fetchall() if until > after else []
        return moved(rows), until

    def find_sessions(self, part: str, limit: int) -> list[str]:
        # A scan of the head rows (one per session, never the events); substr counts characters, as len() does.
        with self._lock, reported(self.path, "read"):
            rows = self._conn.execute(
                "SELECT session_id FROM heads WHERE substr(session_id, 1, ?1) = ?2 OR substr(session_id, -?1) = ?2"
                " ORDER BY session_id <> ?2, session_id LIMIT ?3", (len(part), part, limit)).fetchall()
        return [row[0] for row in rows]

    # -- snapshots ------------------------------------------------------------------

    def save_snapshot(self, session_id: str, version: int, projection: str, data: str,
                      status: str | None = None) -> None:
        with self._transaction("save a snapshot in") as conn:
            conn.execute(_SAVE_SNAPSHOT, (session_id, projection, version, status, data))

    def load_snapshot(self, session_id: str, projection: str) -> Snapshot | None:
        with self._lock, reported(self.path, "read"):
            row = self._conn.execute(
                "SELECT version, data, status FROM snapshots WHERE session_id = ? AND projection = ?",
                (session_id, projection),
            ).fetchone()
        return None if row is None else Snapshot(version=row[0], projection=projection, data=row[1], status=row[2])

    def rebuild_heads(self) -> int:
        """Rebuild every session's head row from its events; returns the number of sessions.

        Appends keep the rows; only a journal filled around zagent (a bulk load with
        plain ``INSERT``s, as ``bench/journal_scale.py`` does) needs this once, after.
        """
        with self._transaction("rebuild the heads of") as conn:
            conn.execute("DELETE FROM heads")
            conn.execute(_INSERT_HEADS.format(where=""))
            conn.execute(_PARENTS_OF_HEADS.format(where=""))
            return int(conn.execute("SELECT count(*) FROM heads").fetchone()[0])

    def __enter__(self) -> SQLiteJournal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
