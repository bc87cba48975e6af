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
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from zagent_core.journal.protocol import (
    WORK_EVENTS,
    AdminJournal,
    Claim,
    ConcurrencyError,
    JournalError,
    Lease,
    LeaseHeldError,
    SessionSummary,
    Snapshot,
    StoredEvent,
    canonical_owner,
    parent_columns,
)
from zagent_store import clock
from zagent_store.sql import (
    TOP_LEVEL,
    JournalVersionError,
    format_time,
    parse_time,
    running_owners,
    session_summary,
    stored_events,
    with_decisions,
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
    WANTS_DRIVER,
    audit_query,
)

if TYPE_CHECKING:
    import psycopg

    from zagent_core.journal.events import Event

#: How the JSON fields the views read are typed in PostgreSQL (``->>`` gives text; SQLite's
#: ``json_extract`` gives numbers and 0/1 for booleans, and the views must answer alike).
_TYPED = {"is_error": "::boolean::int", "approved": "::boolean", "exit_code": "::bigint", "duration_ms": "::bigint",
          "pid": "::bigint", "depth": "::int", "wake": "::boolean::int"}

_JSON_EXTRACT = re.compile(r"json_extract\((?:(\w+)\.)?data, '\$\.(\w+)'\)")
_ARRAY_LENGTH = re.compile(r"json_array_length\(json_extract\((?:(\w+)\.)?data, '\$\.(\w+)'\)\)")


def dialect(sql: str) -> str:
    """SQLite's SQL of the views and audit queries, in PostgreSQL's: JSON access and placeholders.

    One spelling of each view, kept in ``views.py``, so the two stores cannot drift apart.
    """
    def field(match: re.Match[str]) -> str:
        alias, key = match.group(1), match.group(2)
        column = f"{alias}.data" if alias else "data"
        cast = _TYPED.get(key)
        return f"(({column}->>'{key}'){cast})" if cast else f"({column}->>'{key}')"

    sql = _ARRAY_LENGTH.sub(lambda m: f"jsonb_array_length({m.group(1) + '.' if m.group(1) else ''}data->'{m.group(2)}')",
                            sql)
    sql = _JSON_EXTRACT.sub(field, sql)
    # SQLite forces a join's order with CROSS JOIN ... ON; PostgreSQL plans it and wants JOIN.
    sql = sql.replace("CROSS JOIN", "JOIN")
    return sql.replace("%", "%%").replace("?", "%s")


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


#: Migration n (1-based) brings a journal from schema n-1 to n. Append only.
MIGRATIONS = [_schema_1, _one_statement_appends]

#: Any number: the advisory lock that makes two processes opening a new journal migrate it once.
_MIGRATION_LOCK = 0x7A6167656E74

_SAVE_SNAPSHOT = (
    "INSERT INTO snapshots (session_id, projection, version, status, data) VALUES (%s, %s, %s, %s, %s)"
    " ON CONFLICT (session_id, projection) DO UPDATE SET version = excluded.version, status = excluded.status,"
    " data = excluded.data WHERE excluded.version >= snapshots.version"
)


@functools.lru_cache(maxsize=None)
def _append_statement(new_session: bool, snapshot: bool, notify: bool) -> str:
    """An append as one statement, its own transaction (autocommit), so one round trip.

    ``positions`` takes the next ``n`` numbers of the global order: the row lock it holds
    until the commit makes appends commit in ``seq`` order. ``head`` moves the session's
    row only from the version the writer expects (or makes it, for a new session); when it
    matches nothing, ``zagent_moved_on`` fails the statement and nothing of it is kept.
    The rows come as one JSON array of ``[type, at, body]``: PostgreSQL splits it, where
    arrays of bodies would be escaped element by element on the client.
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
    told = f", pg_notify('{_CHANNEL}', %(session)s)" if notify else ""  # told at the commit
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


def redacted(url: str) -> str:
    """The URL without its password, for messages."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


class PostgresJournal(AdminJournal):
    """The journal in a PostgreSQL database, shared by every host that has its URL.

    One connection per journal object, used under a lock (the engine's threads take
    turns, as on SQLite). Every append commits durably (``synchronous_commit`` as the
    server has it, ``on`` by default) before it returns.
    """

    def __init__(self, url: str, *, connect_timeout: float = 10.0) -> None:
        try:
            import psycopg
        except ImportError:
            raise JournalError("the journal is on PostgreSQL and psycopg is not installed: "
                               "pip install 'zagent[postgres]'") from None
        self.url = url
        self.read_only = False
        self._psycopg = psycopg
        self._lock = threading.Lock()
        #: The connection ``wait_for_work`` listens on, made by the first wait.
        self._listener: psycopg.Connection[Any] | None = None
        try:
            self._conn: psycopg.Connection[Any] = psycopg.connect(
                url, autocommit=True, connect_timeout=max(1, int(connect_timeout)),
                application_name="zagent")
        except psycopg.Error as exc:
            raise JournalError(f"cannot open the journal {redacted(url)}: {_first_line(exc)}") from None
        try:
            self._migrate()
        except BaseException:
            self._conn.close()
            raise

    def __repr__(self) -> str:
        return f"PostgresJournal({redacted(self.url)!r})"

    @property
    def location(self) -> str:
        """Where the journal is, for messages: the URL without its password."""
        return redacted(self.url)

    @contextlib.contextmanager
    def _reported(self, doing: str) -> Iterator[psycopg.Connection[Any]]:
        """The connection, under the lock; the driver's errors leave as :class:`JournalError`."""
        with self._lock:
            try:
                yield self._conn
            except self._psycopg.Error as exc:
                if isinstance(exc, self._psycopg.errors.UniqueViolation):
                    raise
                raise JournalError(f"could not {doing} the journal {self.location}: {_first_line(exc)}") from None

    @contextlib.contextmanager
    def _transaction(self, doing: str) -> Iterator[psycopg.Connection[Any]]:
        with self._reported(doing) as conn, conn.transaction():
            yield conn

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

    # -- the Journal protocol -------------------------------------------------------

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
        statement = _append_statement(expected_version == 0, snapshot is not None, notify)
        projection, snapshot_data, status = snapshot if snapshot is not None else (None, None, None)
        try:
            with self._reported("append to") as conn:
                row = conn.execute(statement, {
                    "n": count, "session": session_id, "expected": expected_version, "version": version,
                    "first_at": stamps[0], "last_at": stamps[-1], "ended": "session_ended" in kinds,
                    "calls": kinds.count("tool_call_requested"), "tasks": kinds.count("task_started"),
                    "replies": kinds.count("model_replied"), "parent": parent, "parent_call": parent_call,
                    "label": label, "depth": depth, "rows": rows, "projection": projection,
                    "snapshot": snapshot_data, "status": status}).fetchone()
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
        sql, params = _READ + " AND version > %s", [session_id, after_version]
        if types is not None:
            sql += " AND type = ANY(%s)"
            params.append(list(types))
        with self._reported("read") as conn:
            rows = conn.execute(sql + " ORDER BY version", params).fetchall()
        return stored_events(session_id, rows)

    def read_last(self, session_id: str, count: int) -> list[StoredEvent]:
        with self._reported("read") as conn:
            rows = conn.execute(_READ + " ORDER BY version DESC LIMIT %s", (session_id, max(count, 0))).fetchall()
        return list(stored_events(session_id, rows[::-1]))

    def has_call(self, session_id: str, call_id: str) -> bool:
        with self._reported("read") as conn:
            return conn.execute(
                "SELECT 1 FROM events WHERE session_id = %s AND call_id = %s AND type = 'tool_call_requested' LIMIT 1",
                (session_id, call_id)).fetchone() is not None

    def sessions(self, limit: int | None = None, *, top_level: bool = False) -> list[SessionSummary]:
        picked = f"SELECT * FROM heads h WHERE {TOP_LEVEL}" if top_level else "SELECT * FROM heads"
        with self._reported("read") as conn:
            rows = conn.execute(
                f"""SELECT h.session_id, h.started_at, h.last_at, h.version, h.calls, h.ended, s.status, s.version,
                          h.parent_session_id, h.parent_call_id, h.label, h.depth
                   FROM ({picked} ORDER BY last_seq DESC LIMIT %s) AS h
                   LEFT JOIN LATERAL (SELECT status, version FROM snapshots WHERE session_id = h.session_id
                                      ORDER BY version DESC LIMIT 1) s ON TRUE
                   ORDER BY h.last_seq DESC""",
                (limit,),
            ).fetchall()
        return [session_summary(row) for row in rows]

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

    # -- leases ---------------------------------------------------------------------

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

    def wait_for_work(self, timeout: float) -> bool:
        """``LISTEN`` on a connection of its own: a release or a wake-up anywhere wakes the worker at once."""
        try:
            if self._listener is None:
                self._listener = self._psycopg.connect(self.url, autocommit=True, application_name="zagent worker")
                self._listener.execute(f"LISTEN {_CHANNEL}")
            for _ in self._listener.notifies(timeout=timeout, stop_after=1):
                return True
        except self._psycopg.Error as exc:
            raise JournalError(f"could not wait for work in the journal {self.location}: {_first_line(exc)}") from None
        return False

    def release_lease(self, session_id: str, owner: dict[str, Any]) -> None:
        with self._transaction("release a lease in") as conn:
            released = conn.execute("DELETE FROM leases WHERE session_id = %s AND owner = %s",
                                    (session_id, canonical_owner(owner))).rowcount
            if released:
                conn.execute("SELECT pg_notify(%s, %s)", (_CHANNEL, session_id))

    def lease(self, session_id: str) -> Lease | None:
        with self._reported("read") as conn:
            row = conn.execute(f"SELECT owner, since, {_EXPIRY} FROM leases WHERE session_id = %s",
                               (session_id,)).fetchone()
        return None if row is None else _lease_of(session_id, row)

    # -- audit and health -------------------------------------------------------------

    def audit(self, **filters: Any) -> list[dict[str, Any]]:
        """As :meth:`SQLiteJournal.audit`: rows of ``tool_calls``, each with its ``asked`` decision or None."""
        sql, params = audit_query(**filters)
        with self._reported("read") as conn:
            cursor = conn.execute(dialect(sql), params)
            names = [column.name for column in cursor.description or ()]
            rows = [dict(zip(names, row)) for row in cursor.fetchall()]
            cursor = conn.execute("SELECT * FROM decisions WHERE session_id = ANY(%s)",
                                  (sorted({row["session_id"] for row in rows}),))
            names = [column.name for column in cursor.description or ()]
            asked = {(row[0], row[1]): dict(zip(names, row)) for row in cursor.fetchall()}
        return with_decisions(rows, asked)

    def check(self) -> list[str]:
        """Gaps in versions, heads behind their events, and bodies that do not load."""
        from zagent_core.journal.events import EventSchemaError, load_event_json

        try:
            with self._reported("check") as conn:
                gaps = conn.execute("SELECT session_id FROM events GROUP BY session_id"
                                    " HAVING count(*) != max(version) LIMIT 20").fetchall()
                behind = conn.execute(
                    """SELECT e.session_id FROM (SELECT session_id, max(version) AS version FROM events
                                                 GROUP BY session_id) AS e
                       LEFT JOIN heads h ON h.session_id = e.session_id
                       WHERE h.version IS DISTINCT FROM e.version LIMIT 20""").fetchall()
                bodies = conn.execute("SELECT seq, type, data::text FROM events ORDER BY seq").fetchall()
        except JournalError as exc:
            return [str(exc)]
        problems = [f"session {sid} has a gap in its versions (events were written around zagent)" for (sid,) in gaps]
        problems += [f"session {sid}: its row in heads is behind its events (events were written around zagent)"
                     for (sid,) in behind]
        for seq, type_, data in bodies:
            try:
                load_event_json(type_, data)
            except EventSchemaError as exc:
                problems.append(f"event #{seq}: {exc}")
            if len(problems) >= 20:
                break
        return problems

    def stats(self) -> dict[str, int]:
        """Counts for ``zagent doctor``: events, sessions, schema version."""
        with self._reported("read") as conn:
            row = conn.execute("SELECT (SELECT seq FROM journal_position), (SELECT count(*) FROM heads),"
                               " (SELECT version FROM zagent_schema)").fetchone()
        assert row is not None
        return {"events": int(row[0]), "sessions": int(row[1]), "schema_version": int(row[2])}

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            if self._listener is not None:
                self._listener.close()

    def __enter__(self) -> PostgresJournal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: The NOTIFY channel of work for workers: a released lease, or a wake-up or message appended.
_CHANNEL = "zagent_work"
#: A lease's expiry ``%s`` seconds from now, by the server's clock (NULL seconds: no expiry).
_EXPIRES = "clock_timestamp() + make_interval(secs => %s)"
#: A lease's expiry as read, and whether it has passed.
_EXPIRY = "expires_at, coalesce(expires_at < clock_timestamp(), FALSE)"


def _lease_of(session_id: str, row: Sequence[Any]) -> Lease:
    owner, since, expires_at, expired = row
    return Lease(session_id, json.loads(owner), parse_time(since), expires_at=expires_at, expired=bool(expired))


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
