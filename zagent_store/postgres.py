"""The journal on PostgreSQL (psycopg 3): one database for the sessions of many hosts.

The same tables as the SQLite journal (``events``, ``heads``, ``snapshots``, ``leases``)
and the same audit views, so ``zagent audit`` and plain SQL give the same answers on
both. What PostgreSQL changes:

- **The global order.** ``seq`` comes from a one-row counter (``journal_position``) that
  each append updates in its transaction. The row lock that update takes is held until
  the commit, so appends commit in ``seq`` order, one after another: a reader that has
  seen ``seq`` N and asks for ``seq > N`` can never miss an append that was still in
  flight and commits later with a smaller number, which a bare sequence allows (values
  are handed out at insert, commits happen in any order). A rolled-back append gives its
  numbers back, so ``seq`` stays gap-free, as on SQLite. This is eventsourcing's choice
  (its recorder locks the table for the insert) at the grain of one row; the cost is that
  appends of all sessions take turns for the length of one small transaction.
- **Event bodies are ``jsonb``**, so the views and ad-hoc SQL can index and query them.
  PostgreSQL's text cannot hold the character U+0000: a string in an event that has one
  (a tool printing NUL bytes) is stored with U+FFFD in its place.
- **Times** are stored as the same ISO-8601 UTC text SQLite keeps (``at::timestamptz``
  makes a timestamp of one), so the views return identical rows on both.

This module holds the schema and :class:`PostgresJournal`'s own part: the event log, its
snapshots and the session index. The journal inherits who drives a session from
``postgres_leases.py`` and what an operator reads from ``postgres_admin.py``, over the
connection of ``postgres_base.py`` (whose docstring says why it is built so).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Collection, Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from zagent_core.journal.protocol import (
    WORK_EVENTS,
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
from zagent_store.postgres_admin import PostgresAdmin
from zagent_store.postgres_base import dialect, first_line, redacted
from zagent_store.postgres_leases import CHANNEL, PostgresLeases
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
from zagent_store.views import (
    ARTIFACTS,
    DECISIONS,
    INDEXES_3,
    INDEXES_4,
    INDEXES_6,
    NOTES,
    SESSIONS_7,
    TASKS_4,
    TOOL_CALLS_4,
    TOOL_CALLS_10,
)

if TYPE_CHECKING:
    import psycopg

    from zagent_core.journal.events import Event

_VIEWS = {"tool_calls": TOOL_CALLS_4, "tasks": TASKS_4, "notes": NOTES, "artifacts": ARTIFACTS,
          "decisions": DECISIONS, "sessions": SESSIONS_7}
_INDEXES = {**INDEXES_3, **INDEXES_4, **INDEXES_6}

_APPEND_ONLY = """
CREATE FUNCTION zagent_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'zagent: events are append-only'; END $$;
CREATE TRIGGER events_no_update BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION zagent_append_only();
"""


def _schema_1(conn: psycopg.Connection[Any]) -> None:
    """The whole schema of SQLite's migrations 1 to 7, in one step: there is no older PostgreSQL journal."""
    conn.execute("""CREATE TABLE events (
        seq BIGINT PRIMARY KEY,
        session_id TEXT NOT NULL,
        version INTEGER NOT NULL,
        type TEXT NOT NULL,
        at TEXT NOT NULL,
        call_id TEXT,
        task_id TEXT,
        data JSONB NOT NULL,
        UNIQUE (session_id, version))""")
    conn.execute("CREATE TABLE journal_position (one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one), seq BIGINT NOT NULL)")
    conn.execute("INSERT INTO journal_position (seq) VALUES (0)")
    conn.execute(_APPEND_ONLY)
    conn.execute("""CREATE TABLE heads (
        session_id TEXT PRIMARY KEY,
        version INTEGER NOT NULL,
        started_at TEXT NOT NULL,
        last_at TEXT NOT NULL,
        last_seq BIGINT NOT NULL,
        calls INTEGER NOT NULL,
        tasks INTEGER NOT NULL,
        model_replies INTEGER NOT NULL,
        ended BOOLEAN NOT NULL,
        parent_session_id TEXT,
        parent_call_id TEXT,
        label TEXT,
        depth INTEGER NOT NULL DEFAULT 0)""")
    conn.execute("CREATE INDEX heads_parent ON heads (parent_session_id) WHERE parent_session_id IS NOT NULL")
    conn.execute("CREATE INDEX heads_last_seq ON heads (last_seq)")
    conn.execute("""CREATE TABLE snapshots (
        session_id TEXT NOT NULL,
        projection TEXT NOT NULL,
        version INTEGER NOT NULL,
        status TEXT,
        data TEXT NOT NULL,
        PRIMARY KEY (session_id, projection))""")
    conn.execute("""CREATE TABLE leases (
        session_id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        since TEXT NOT NULL,
        expires_at TIMESTAMPTZ)""")
    for name, columns in _INDEXES.items():
        conn.execute(f"CREATE INDEX {name} ON events {dialect(columns)}")
    conn.execute("CREATE INDEX events_tool ON events ((data->>'tool'), at) WHERE type = 'tool_call_requested'")
    conn.execute("CREATE INDEX events_duration ON events (type, ((data->>'duration_ms')::bigint))"
                 " WHERE type = 'tool_call_finished'")
    for name, sql in _VIEWS.items():
        conn.execute(f"CREATE VIEW {name} AS {dialect(sql)}")


def _one_statement_appends(conn: psycopg.Connection[Any]) -> None:
    """Schema 2: what lets an append be one statement (one round trip) instead of five.

    An append that finds its session moved on must undo the positions it took, so the
    statement fails: this raises ``unique_violation``, as a second writer of the same
    version would get from ``UNIQUE (session_id, version)``.
    """
    conn.execute("""CREATE FUNCTION zagent_moved_on(session TEXT) RETURNS BOOLEAN LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION USING ERRCODE = 'unique_violation',
            MESSAGE = 'zagent: session ' || session || ' is not at the version the append expected'; END $$""")


def _outcome_columns(conn: psycopg.Connection[Any]) -> None:
    """Schema 3: as SQLite's migration 10, ``tool_calls`` says the outcome each call's tool reported."""
    conn.execute(f"CREATE OR REPLACE VIEW tool_calls AS {dialect(TOOL_CALLS_10)}")


#: Migration n (1-based) brings a journal from schema n-1 to n. Append only.
MIGRATIONS = [_schema_1, _one_statement_appends, _outcome_columns]

#: Any number: the advisory lock that makes two processes opening a new journal migrate it once.
_MIGRATION_LOCK = 0x7A6167656E74

_SAVE_SNAPSHOT = (
    "INSERT INTO snapshots (session_id, projection, version, status, data) VALUES (%s, %s, %s, %s, %s)"
    " ON CONFLICT (session_id, projection) DO UPDATE SET version = excluded.version, status = excluded.status,"
    " data = excluded.data WHERE excluded.version >= snapshots.version"
)


#: The NOTIFY channel of changes, for consoles (``zagent_store/changes.py``): every append tells
#: ``"FIRST LAST VERSION SESSION"``, the positions of its first and last events, the session's
#: version after it and its id (only ``"FIRST LAST"`` for an id too long for the payload).
CHANGES_CHANNEL = "zagent_changes"
#: NOTIFY refuses a payload of 8000 bytes or more: a session id longer than this is left out of it
#: (the listener then reads which sessions moved from the journal).
MOST_NOTIFIED_ID = 7900


def notified_id(session_id: str) -> str:
    """The session id as a NOTIFY payload of the work channel: empty when too long for one (a worker
    reads no payload: any notification wakes it)."""
    return session_id if len(session_id.encode()) <= MOST_NOTIFIED_ID else ""


def changed_tail(session_id: str, version: int) -> str:
    """What a change's payload says after its positions: `` VERSION SESSION``, or nothing when that would
    make the payload too long for NOTIFY."""
    tail = f" {version} {session_id}"
    return tail if len(tail.encode()) <= MOST_NOTIFIED_ID else ""


@functools.lru_cache(maxsize=None)
def _append_statement(new_session: bool, snapshot: bool, notify: bool, changes: bool = True) -> str:
    """An append as one statement, its own transaction (autocommit), so one round trip.

    ``positions`` takes the next ``n`` numbers of the global order: the row lock it holds
    until the commit makes appends commit in ``seq`` order. ``head`` moves the session's
    row only from the version the writer expects (or makes it, for a new session); when it
    matches nothing, ``zagent_moved_on`` fails the statement and nothing of it is kept.
    The rows come as one JSON array of ``[type, at, body]``: PostgreSQL splits it, where
    arrays of bodies would be escaped element by element on the client. ``changes``: the
    append is told on :data:`CHANGES_CHANNEL`, in its transaction (NOTIFY is sent at the
    commit, and not at all on a rollback).
    """
    if new_session:
        head = ("INSERT INTO heads (session_id, version, started_at, last_at, last_seq, calls, tasks, model_replies,"
                " ended, parent_session_id, parent_call_id, label, depth)"
                " SELECT %(session)s, %(version)s, %(first_at)s, %(last_at)s, seq, %(calls)s, %(tasks)s, %(replies)s,"
                " %(ended)s, %(parent)s, %(parent_call)s, %(label)s, %(depth)s FROM positions"
                " ON CONFLICT (session_id) DO NOTHING RETURNING version")
    else:
        head = ("UPDATE heads SET version = %(version)s, last_at = %(last_at)s,"
                " last_seq = (SELECT seq FROM positions), calls = calls + %(calls)s, tasks = tasks + %(tasks)s,"
                " model_replies = model_replies + %(replies)s, ended = ended OR %(ended)s"
                " WHERE session_id = %(session)s AND version = %(expected)s RETURNING version")
    kept = (", kept AS (INSERT INTO snapshots (session_id, projection, version, status, data)"
            " VALUES (%(session)s, %(projection)s, %(version)s, %(status)s, %(snapshot)s)"
            " ON CONFLICT (session_id, projection) DO UPDATE SET version = excluded.version,"
            " status = excluded.status, data = excluded.data WHERE excluded.version >= snapshots.version)"
            if snapshot else "")
    told = f", pg_notify('{CHANNEL}', %(work)s)" if notify else ""  # told at the commit
    if changes:  # the positions are this statement's, so a listener knows if it missed one (a gap)
        told += f", pg_notify('{CHANGES_CHANNEL}', (seq - %(n)s + 1)::text || ' ' || seq::text || %(tail)s)"
    return (
        "WITH positions AS (UPDATE journal_position SET seq = seq + %(n)s RETURNING seq),"
        f" head AS ({head}),"
        " added AS (INSERT INTO events (seq, session_id, version, type, at, call_id, task_id, data)"
        " SELECT p.seq - %(n)s + r.ord, %(session)s, %(expected)s + r.ord, r.item->>0, r.item->>1,"
        " r.item->2->>'call_id', r.item->2->>'task_id', r.item->2"
        " FROM positions p, jsonb_array_elements(%(rows)s::jsonb) WITH ORDINALITY AS r(item, ord))"
        f"{kept}"
        # CASE, not AND: only CASE promises PostgreSQL evaluates the call only when its condition holds.
        " SELECT seq, CASE WHEN NOT EXISTS (SELECT FROM head) THEN zagent_moved_on(%(session)s) END"
        f"{told} FROM positions"
    )
_READ = "SELECT seq, version, type, at, data::text FROM events WHERE session_id = %s"

_NUL = "\\u0000"


def without_nul(value: Any) -> Any:
    """``value`` (JSON data) as PostgreSQL can keep it: U+0000 in any string as U+FFFD."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {without_nul(key): without_nul(item) for key, item in value.items()}
    if isinstance(value, list):
        return [without_nul(item) for item in value]
    return value


def _body(event: Event) -> str:
    """The event's JSON as ``jsonb`` takes it: U+0000, which PostgreSQL's text cannot hold, as U+FFFD."""
    from zagent_core.journal.events import dump_event

    text = dump_event(event)
    if _NUL in text:  # rare: only then is the body parsed again (an escaped backslash may be all it is)
        text = json.dumps(without_nul(json.loads(text)), ensure_ascii=False, separators=(",", ":"))
    return text


class PostgresJournal(PostgresLeases, PostgresAdmin, AdminJournal):
    """The journal in a PostgreSQL database, shared by every host that has its URL.

    One connection per journal object, used under a lock (the engine's threads take
    turns, as on SQLite). Every append commits durably (``synchronous_commit`` as the
    server has it, ``on`` by default) before it returns.
    """

    #: Appends NOTIFY their change on :data:`CHANGES_CHANNEL` (what ``zagent ui`` follows live).
    #: ``bench/journal_notify.py`` turns it off on one side to measure what it costs an append.
    tell_changes = True

    def __init__(self, url: str, *, connect_timeout: float = 10.0) -> None:
        try:
            import psycopg
        except ImportError:
            from zagent_core.version import install_command

            raise JournalError("the journal is on PostgreSQL and psycopg is not installed: "
                               f"{install_command('postgres')}") from None
        try:
            conn: psycopg.Connection[Any] = psycopg.connect(
                url, autocommit=True, connect_timeout=max(1, int(connect_timeout)),
                application_name="zagent")
        except psycopg.Error as exc:
            raise JournalError(f"cannot open the journal {redacted(url)}: {first_line(exc)}") from None
        super().__init__(url, conn)
        try:
            self._migrate()
        except BaseException:
            self._conn.close()
            raise

    def __repr__(self) -> str:
        return f"PostgresJournal({redacted(self.url)!r})"

    # -- schema -----------------------------------------------------------------

    def _schema_version(self, conn: psycopg.Connection[Any]) -> int:
        if conn.execute("SELECT to_regclass('zagent_schema')").fetchone() == (None,):
            return 0
        row = conn.execute("SELECT version FROM zagent_schema").fetchone()
        return int(row[0]) if row else 0

    def _migrate(self) -> None:
        with self._reported("open") as conn:
            if self._schema_version(conn) == len(MIGRATIONS):
                return
        with self._transaction("migrate") as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            current = self._schema_version(conn)
            if current > len(MIGRATIONS):
                raise JournalVersionError(f"{self.location} has journal schema {current}, this zagent knows up to "
                                          f"{len(MIGRATIONS)}: upgrade zagent to open it")
            if current == 0:
                conn.execute("CREATE TABLE zagent_schema (version INTEGER NOT NULL)")
                conn.execute("INSERT INTO zagent_schema VALUES (0)")
            for number in range(current, len(MIGRATIONS)):
                MIGRATIONS[number](conn)
            conn.execute("UPDATE zagent_schema SET version = %s", (len(MIGRATIONS),))

    # -- the event log and the session index ---------------------------------------

    def append(self, session_id: str, events: Sequence[Event], expected_version: int, *,
               at: Sequence[datetime] | None = None,
               snapshot: tuple[str, str, str | None] | None = None) -> list[StoredEvent]:
        if not events:
            return []
        if at is None:
            moment = clock.now()
            times = [moment] * len(events)
            stamps = [format_time(moment)] * len(events)
        else:
            times = [clock.stored_time(when) for when in at]
            stamps = [format_time(when) for when in times]
        count = len(events)
        version = expected_version + count
        kinds: list[str] = [event.type for event in events]
        parent, parent_call, label, depth = parent_columns(events) if expected_version == 0 else (None, None, None, 0)
        # Types are names and times ISO text: neither needs escaping in the JSON.
        rows = "[" + ",".join(f'["{kind}","{stamp}",{_body(event)}]'
                              for kind, stamp, event in zip(kinds, stamps, events)) + "]"
        notify = bool(WORK_EVENTS.intersection(kinds))
        statement = _append_statement(expected_version == 0, snapshot is not None, notify, self.tell_changes)
        projection, snapshot_data, status = snapshot if snapshot is not None else (None, None, None)
        try:
            with self._reported("append to") as conn:
                row = conn.execute(statement, {
                    "n": count, "session": session_id, "expected": expected_version, "version": version,
                    "first_at": stamps[0], "last_at": stamps[-1], "ended": "session_ended" in kinds,
                    "calls": kinds.count("tool_call_requested"), "tasks": kinds.count("task_started"),
                    "replies": kinds.count("model_replied"), "parent": parent, "parent_call": parent_call,
                    "label": label, "depth": depth, "rows": rows, "projection": projection,
                    "snapshot": snapshot_data, "status": status,
                    "tail": changed_tail(session_id, version), "work": notified_id(session_id)}).fetchone()
        except self._psycopg.errors.UniqueViolation:
            raise ConcurrencyError(session_id, expected_version, self.head(session_id)) from None
        assert row is not None
        first = row[0] - count + 1
        return [StoredEvent(first + i, session_id, expected_version + i + 1, times[i], event)
                for i, event in enumerate(events)]

    def head(self, session_id: str) -> int:
        with self._reported("read") as conn:
            row = conn.execute("SELECT max(version) FROM events WHERE session_id = %s", (session_id,)).fetchone()
        return int(row[0] or 0) if row else 0

    def read(self, session_id: str, after_version: int = 0, *,
             types: Collection[str] | None = None) -> Iterator[StoredEvent]:
        sql, kinds = _READ + " AND version > %s", [] if types is None else [list(types)]
        if types is not None:
            sql += " AND type = ANY(%s)"
        with self._reported("read") as conn:  # what there is as it is asked for, no more
            row = conn.execute("SELECT max(version) FROM events WHERE session_id = %s", (session_id,)).fetchone()
        until = row[0] if row is not None and row[0] is not None else 0

        def fetch(after: int, limit: int) -> list[tuple[Any, ...]]:
            with self._reported("read") as conn:
                return conn.execute(sql + " AND version <= %s ORDER BY version LIMIT %s",
                                    [session_id, after, *kinds, until, limit]).fetchall()

        return stored_events(session_id, paged(fetch, after_version), self._opened_by)

    def read_last(self, session_id: str, count: int) -> list[StoredEvent]:
        with self._reported("read") as conn:
            rows = conn.execute(_READ + " ORDER BY version DESC LIMIT %s", (session_id, max(count, 0))).fetchall()
        return list(stored_events(session_id, rows[::-1], self._opened_by))

    def has_call(self, session_id: str, call_id: str) -> bool:
        with self._reported("read") as conn:
            return conn.execute(
                "SELECT 1 FROM events WHERE session_id = %s AND call_id = %s AND type = 'tool_call_requested' LIMIT 1",
                (session_id, call_id)).fetchone() is not None

    def sessions(self, limit: int | None = None, *, top_level: bool = False,
                 after: str | None = None) -> list[SessionSummary]:
        picked = "SELECT * FROM heads h WHERE " + heads_picked(top_level, after, "%s")
        with self._reported("read") as conn:
            rows = conn.execute(
                f"""SELECT h.session_id, h.started_at, h.last_at, h.version, h.calls, h.ended, s.status, s.version,
                          h.parent_session_id, h.parent_call_id, h.label, h.depth
                   FROM ({picked} ORDER BY last_seq DESC LIMIT %s) AS h
                   LEFT JOIN LATERAL (SELECT status, version FROM snapshots WHERE session_id = h.session_id
                                      ORDER BY version DESC LIMIT 1) s ON TRUE
                   ORDER BY h.last_seq DESC""",
                (*([] if after is None else [after]), limit),
            ).fetchall()
        return [session_summary(row) for row in rows]

    # -- the change feed (zagent_store/changes.py: NOTIFY, and these while it is down) -------

    def position(self) -> int:
        """The journal's position now: the ``seq`` of its last event (0 when it has none)."""
        with self._reported("read") as conn:
            row = conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()
        return int(row[0]) if row else 0

    def moved_since(self, after: int) -> tuple[list[Change], int]:
        """The sessions whose head moved past position ``after`` (a bounded step: see ``sql.moved_until``).
        Appends commit in ``seq`` order (the module's docstring), so none below a position seen is
        still to come."""
        until = moved_until(self.position(), after)
        with self._reported("read") as conn:
            rows = conn.execute(moved_sql("%s"), (after, until)).fetchall() if until > after else []
        return moved(rows), until

    def find_sessions(self, part: str, limit: int) -> list[str]:
        with self._reported("read") as conn:
            rows = conn.execute(
                "SELECT session_id FROM heads WHERE left(session_id, %(n)s) = %(part)s OR right(session_id, %(n)s) = %(part)s"
                " ORDER BY session_id <> %(part)s, session_id LIMIT %(limit)s",
                {"n": len(part), "part": part, "limit": limit}).fetchall()
        return [row[0] for row in rows]

    # -- snapshots ------------------------------------------------------------------

    def save_snapshot(self, session_id: str, version: int, projection: str, data: str,
                      status: str | None = None) -> None:
        with self._transaction("save a snapshot in") as conn:
            conn.execute(_SAVE_SNAPSHOT, (session_id, projection, version, status, data))

    def load_snapshot(self, session_id: str, projection: str) -> Snapshot | None:
        with self._reported("read") as conn:
            row = conn.execute("SELECT version, data, status FROM snapshots WHERE session_id = %s AND projection = %s",
                               (session_id, projection)).fetchone()
        return None if row is None else Snapshot(version=row[0], projection=projection, data=row[1], status=row[2])

    def __enter__(self) -> PostgresJournal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
