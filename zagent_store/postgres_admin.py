"""What an operator reads of a PostgreSQL journal and the retention it runs: ``zagent audit``'s rows,
``zagent doctor``'s counts, the health check, and taking sessions out and vacuuming their tables
(``zagent sessions prune``, ``zagent journal vacuum``).

One class, :class:`PostgresAdmin`, that :class:`~zagent_store.postgres.PostgresJournal` inherits
(see ``postgres_base.py`` for why the journal is made of parts this way). The same views
and answers as ``sqlite_admin.py``'s, the views' SQL translated by :func:`dialect`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from zagent_core.journal.protocol import ConcurrencyError, JournalError, Lease, Vacuumed
from zagent_store.postgres_base import PostgresBase, dialect
from zagent_store.sql import event_place, with_decisions
from zagent_store.views import audit_query

#: What ``vacuum`` vacuums: the journal's tables (``journal_position`` is one row, rewritten by every append).
_TABLES = ("events", "heads", "snapshots", "leases", "journal_position")
_SIZE = "SELECT sum(pg_total_relation_size(name::regclass)) FROM unnest(%s::text[]) AS name"


class PostgresAdmin(PostgresBase):
    """``audit``, ``stats``, ``delete_sessions`` and ``vacuum`` of a PostgreSQL journal
    (:class:`~zagent_core.journal.protocol.AdminJournal`'s own methods), and the health check
    every :class:`~zagent_core.journal.protocol.Journal` has."""

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
        from zagent_core.journal.events import EventSchemaError, NewerEventError, load_event_json

        try:
            with self._reported("check") as conn:
                gaps = conn.execute("SELECT session_id FROM events GROUP BY session_id"
                                    " HAVING count(*) != max(version) LIMIT 20").fetchall()
                behind = conn.execute(
                    """SELECT e.session_id FROM (SELECT session_id, max(version) AS version FROM events
                                                 GROUP BY session_id) AS e
                       LEFT JOIN heads h ON h.session_id = e.session_id
                       WHERE h.version IS DISTINCT FROM e.version LIMIT 20""").fetchall()
                bodies = conn.execute("SELECT seq, session_id, version, type, data::text FROM events ORDER BY seq"
                                      ).fetchall()
        except JournalError as exc:
            return [str(exc)]
        problems = [f"session {sid} has a gap in its versions (events were written around zagent)" for (sid,) in gaps]
        problems += [f"session {sid}: its row in heads is behind its events (events were written around zagent)"
                     for (sid,) in behind]
        for seq, sid, version, type_, data in bodies:
            try:
                load_event_json(type_, data)
            except NewerEventError as exc:
                problems.append(str(exc.located(event_place(seq, sid, version), self._opened_by(sid, version))))
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

    def delete_sessions(self, versions: Mapping[str, int]) -> int:
        """As :meth:`AdminJournal.delete_sessions`. The trigger that refuses a DELETE of an event is
        disabled and enabled again inside the one transaction; the catalog change commits with
        the deletion, so no other transaction sees the table without it. ``ALTER TABLE`` holds a
        lock that makes appends wait for the transaction (readers do not), and needs the table's
        owner: the role that made the journal."""
        if not versions:
            return 0
        with self._transaction("prune sessions from") as conn:
            ids = list(versions)
            # The heads' rows, locked: an append of one of these sessions waits, then finds it gone.
            conn.execute("SELECT 1 FROM heads WHERE session_id = ANY(%s) FOR UPDATE", (ids,))
            found = dict(conn.execute("SELECT session_id, max(version) FROM events WHERE session_id = ANY(%s)"
                                      " GROUP BY session_id", (ids,)).fetchall())
            for session_id, version in versions.items():
                if found.get(session_id, 0) != version:
                    raise ConcurrencyError(session_id, version, found.get(session_id, 0))
            conn.execute("ALTER TABLE events DISABLE TRIGGER events_no_update")
            deleted = conn.execute("DELETE FROM events WHERE session_id = ANY(%s)", (ids,)).rowcount
            conn.execute("ALTER TABLE events ENABLE TRIGGER events_no_update")
            for table in ("heads", "snapshots", "leases"):
                conn.execute(f"DELETE FROM {table} WHERE session_id = ANY(%s)", (ids,))
        return int(deleted)

    def vacuum(self, *, alive: Callable[[Lease], bool] | None = None) -> Vacuumed:
        """As :meth:`AdminJournal.vacuum`: ``VACUUM (ANALYZE)`` of the journal's tables, beside the
        sessions being driven (``alive`` is not asked). It marks the space of deleted rows for
        reuse by new ones; little goes back to the operating system (only empty pages at a
        table's end): ``VACUUM FULL`` would, but locks the tables while it rewrites them."""
        with self._reported("vacuum") as conn:
            before = conn.execute(_SIZE, (list(_TABLES),)).fetchone()
            conn.execute(f"VACUUM (ANALYZE) {', '.join(_TABLES)}")
            after = conn.execute(_SIZE, (list(_TABLES),)).fetchone()
        assert before is not None and after is not None
        return Vacuumed(before=int(before[0]), after=int(after[0]),
                        note="PostgreSQL keeps the space freed for the journal's next rows (VACUUM FULL would give it "
                             "back to the system, locking the tables while it runs)")
