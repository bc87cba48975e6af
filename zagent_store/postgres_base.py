"""What every part of :class:`~zagent_store.postgres.PostgresJournal` shares: the connection under
its lock, the driver's errors as :class:`~zagent_core.journal.protocol.JournalError`, and SQLite's
SQL of the views and queries in PostgreSQL's dialect.

``PostgresJournal`` is built from one class per capability of the journal protocols
(``postgres_leases.py``: who drives a session; ``postgres_admin.py``: audit, counts and health;
``postgres.py``: the event log, its snapshots and the session index), each a subclass of
:class:`PostgresBase`, and combined by inheritance, as eventsourcing combines its recorders
(a process recorder is a subclass of its tracking and application recorders, all over one
recorder base). Inheritance rather than parts that each hold the connection: every part
uses the same connection and lock, and ``SQLiteJournal`` is made the same way, so the two
stores' parts answer each other module for module.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from zagent_core.journal.protocol import JournalError

if TYPE_CHECKING:
    import psycopg

#: How the JSON fields the views read are typed in PostgreSQL (``->>`` gives text; SQLite's
#: ``json_extract`` gives numbers and 0/1 for booleans, and the views must answer alike).
_TYPED = {"is_error": "::boolean::int", "approved": "::boolean", "exit_code": "::bigint", "duration_ms": "::bigint",
          "pid": "::bigint", "depth": "::int", "wake": "::boolean::int"}

_JSON_EXTRACT = re.compile(r"json_extract\((?:(\w+)\.)?data, '\$\.(\w+)(?:\.(\w+))?'\)")
_ARRAY_LENGTH = re.compile(r"json_array_length\(json_extract\((?:(\w+)\.)?data, '\$\.(\w+)'\)\)")


def dialect(sql: str) -> str:
    """SQLite's SQL of the views and audit queries, in PostgreSQL's: JSON access and placeholders.

    One spelling of each view, kept in ``views.py``, so the two stores cannot drift apart.
    """
    def field(match: re.Match[str]) -> str:
        alias, key, inner = match.group(1), match.group(2), match.group(3)
        column = f"{alias}.data" if alias else "data"
        if inner:  # a field of an object field: '$.outcome.status'
            return f"({column}->'{key}'->>'{inner}')"
        cast = _TYPED.get(key)
        return f"(({column}->>'{key}'){cast})" if cast else f"({column}->>'{key}')"

    sql = _ARRAY_LENGTH.sub(lambda m: f"jsonb_array_length({m.group(1) + '.' if m.group(1) else ''}data->'{m.group(2)}')",
                            sql)
    sql = _JSON_EXTRACT.sub(field, sql)
    # SQLite forces a join's order with CROSS JOIN ... ON; PostgreSQL plans it and wants JOIN.
    sql = sql.replace("CROSS JOIN", "JOIN")
    return sql.replace("%", "%%").replace("?", "%s")


def redacted(url: str) -> str:
    """The URL without its password, for messages."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


def first_line(exc: BaseException) -> str:
    """The first line of a driver's error: PostgreSQL's others (detail, hint, context) do not help a reader here."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


class PostgresBase:
    """The database as every part of the journal uses it: one connection, in autocommit, used under a
    lock (the engine's threads take turns, as on SQLite)."""

    def __init__(self, url: str, conn: psycopg.Connection[Any]) -> None:
        import psycopg  # already imported by who connected: the module, kept for its error classes

        self.url = url
        self.read_only = False
        self._psycopg = psycopg
        self._lock = threading.Lock()
        self._conn = conn

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
                raise JournalError(f"could not {doing} the journal {self.location}: {first_line(exc)}") from None

    @contextlib.contextmanager
    def _transaction(self, doing: str) -> Iterator[psycopg.Connection[Any]]:
        with self._reported(doing) as conn, conn.transaction():
            yield conn

    def _opened_by(self, session_id: str, version: int) -> str | None:
        """The zagent that last started or resumed the session, as of its event ``version``, as the
        event's raw body says (it may be of a schema this zagent cannot load); None if none says."""
        from zagent_core.journal.events import OPENERS

        with self._reported("read") as conn:
            row = conn.execute("SELECT data->>'zagent_version' FROM events WHERE session_id = %s AND version <= %s"
                               " AND type = ANY(%s) ORDER BY version DESC LIMIT 1",
                               (session_id, version, list(OPENERS))).fetchone()
        return row[0] if row is not None and isinstance(row[0], str) else None

    def close(self) -> None:
        with self._lock:
            self._conn.close()
