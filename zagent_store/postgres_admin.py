"""What an operator reads of a PostgreSQL journal: ``zagent audit``'s rows, ``zagent doctor``'s counts, and the health check.

One class, :class:`PostgresAdmin`, that :class:`~zagent_store.postgres.PostgresJournal` inherits
(see ``postgres_base.py`` for why the journal is made of parts this way). The same views
and answers as ``sqlite_admin.py``'s, the views' SQL translated by :func:`dialect`.
"""

from __future__ import annotations

from typing import Any

from zagent_core.journal.protocol import JournalError
from zagent_store.postgres_base import PostgresBase, dialect
from zagent_store.sql import with_decisions
from zagent_store.views import audit_query


class PostgresAdmin(PostgresBase):
    """``audit``, ``stats`` and ``check`` of a PostgreSQL journal (:class:`~zagent_core.journal.protocol.AdminJournal`'s
    own methods, and the health check every :class:`~zagent_core.journal.protocol.Journal` has)."""

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
        """Counts for ``zagent doctor``: events, sessions, schema version. A session's version is its
        count of events, so the heads sum them without a scan of the events (the global position
        counts pruned sessions' events too)."""
        with self._reported("read") as conn:
            row = conn.execute("SELECT (SELECT coalesce(sum(version), 0) FROM heads), (SELECT count(*) FROM heads),"
                               " (SELECT version FROM zagent_schema)").fetchone()
        assert row is not None
        return {"events": int(row[0]), "sessions": int(row[1]), "schema_version": int(row[2])}
