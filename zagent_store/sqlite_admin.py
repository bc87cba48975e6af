"""What an operator reads of a SQLite journal and the retention it runs: ``zagent audit``'s rows,
``zagent doctor``'s counts, the health check, and taking sessions out and giving their space back
(``zagent sessions prune``, ``zagent journal vacuum``).

One class, :class:`SQLiteAdmin`, that :class:`~zagent_store.sqlite.SQLiteJournal` inherits (see
``sqlite_base.py`` for why the journal is made of parts this way). None of it is on the
engine's path: it reads whole views and tables, and writes only when an operator prunes.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from zagent_core.journal.protocol import ConcurrencyError, JournalBusyError, Lease, Vacuumed
from zagent_store import clock
from zagent_store.sql import event_place, format_time, named, with_decisions
from zagent_store.sqlite_base import DAMAGED, SQLiteBase, reported
from zagent_store.sqlite_leases import lease_of
from zagent_store.views import audit_query


def _size(path: Path) -> int:
    """The bytes a journal file takes with its write-ahead log."""
    return sum(part.stat().st_size for part in (path, Path(f"{path}-wal")) if part.exists())


class SQLiteAdmin(SQLiteBase):
    """``audit``, ``stats``, ``delete_sessions`` and ``vacuum`` of a SQLite journal
    (:class:`~zagent_core.journal.protocol.AdminJournal`'s own methods), and the health check
    every :class:`~zagent_core.journal.protocol.Journal` has."""

    def audit(self, **filters: Any) -> list[dict[str, Any]]:
        """Rows of the ``tool_calls`` view matching ``zagent audit``'s filters (see :func:`audit_query`),
        each with ``asked``: its row of the ``decisions`` view (who was asked what, and the
        answer), or None when no person was asked about the call."""
        sql, params = audit_query(**filters)
        with self._lock, reported(self.path, "read"):
            cursor = self._conn.execute(sql, params)
            names = [column[0] for column in cursor.description]
            rows = [dict(zip(names, row)) for row in cursor.fetchall()]
            # Few calls ask a person: one look at the sessions listed finds them all.
            sessions = json.dumps(sorted({row["session_id"] for row in rows}))
            cursor = self._conn.execute("SELECT * FROM decisions WHERE session_id IN (SELECT value FROM json_each(?))",
                                        [sessions])
            names = [column[0] for column in cursor.description]
            asked = {(row[0], row[1]): dict(zip(names, row)) for row in cursor.fetchall()}
        return with_decisions(rows, asked)

    def check(self) -> list[str]:
        """SQLite's integrity check, WAL mode, gaps in versions, and every body that does not load."""
        try:
            with self._lock:
                problems = [row[0] for row in self._conn.execute("PRAGMA integrity_check") if row[0] != "ok"]
                mode = self._conn.execute("PRAGMA journal_mode").fetchone()[0]
                gaps = self._conn.execute(
                    "SELECT session_id FROM events GROUP BY session_id HAVING count(*) != max(version) LIMIT 20"
                ).fetchall()
                behind = self._conn.execute(
                    """SELECT e.session_id FROM (SELECT session_id, max(version) AS version FROM events
                                                 GROUP BY session_id) AS e
                       LEFT JOIN heads h ON h.session_id = e.session_id
                       WHERE h.version IS NOT e.version LIMIT 20"""
                ).fetchall()
            if mode.lower() != "wal" and not self.read_only:  # read as immutable, a WAL journal says "delete"
                problems.append(f"journal_mode is {mode}, expected wal")
            problems += [f"session {sid} has a gap in its versions (events were written around zagent)"
                         for (sid,) in gaps]
            problems += [f"session {sid}: its row in heads is behind its events (events were written around "
                         "zagent), so sessions list shows it as it was; SQLiteJournal.rebuild_heads() fixes it"
                         for (sid,) in behind]
            problems += self._unreadable_bodies()
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            return [f"cannot be checked ({exc}): " + DAMAGED.format(path=self.path)]
        return problems

    def _unreadable_bodies(self, most: int = 20) -> list[str]:
        """Events whose body is not JSON, or does not load as its type, by seq."""
        found: list[str] = []
        damaged = False
        from zagent_core.journal.events import EventSchemaError, NewerEventError, load_event_json

        with self._lock:
            # Bytes, not text: a body that is not UTF-8 must be named, not stop the check.
            rows = self._conn.execute("SELECT seq, CAST(session_id AS BLOB), version, CAST(type AS BLOB),"
                                      " json_valid(data), CAST(data AS BLOB) FROM events ORDER BY seq")
            for seq, session_id, version, type_, valid, data in rows:
                kind = type_.decode(errors="replace")
                if not valid:
                    damaged = True
                    found.append(f"event #{seq} ({kind}) has a body that is not valid JSON")
                else:
                    try:
                        load_event_json(kind, data)
                    except NewerEventError as exc:
                        sid = session_id.decode(errors="replace")
                        found.append(str(exc.located(event_place(seq, sid, version),
                                                     self._last_opener(sid, version))))
                    except EventSchemaError as exc:
                        damaged = True
                        found.append(f"event #{seq}: {exc}")
                if len(found) >= most:
                    found.append(f"(stopped after {most} unreadable events)")
                    break
        if damaged:  # a newer zagent's events are not damage: recovering would leave them out
            found.append(DAMAGED.format(path=self.path))
        return found

    def stats(self) -> dict[str, int]:
        """Counts for ``zagent doctor``: events, sessions, schema version."""
        with self._lock, reported(self.path, "read"):
            events, sessions = self._conn.execute(
                "SELECT count(*), count(DISTINCT session_id) FROM events"
            ).fetchone()
            schema = self._conn.execute("PRAGMA user_version").fetchone()[0]
        return {"events": events, "sessions": sessions, "schema_version": schema}

    def delete_sessions(self, versions: Mapping[str, int]) -> int:
        """As :meth:`AdminJournal.delete_sessions`. The trigger that refuses a DELETE of an event is
        dropped and made again from its own stored text inside the one write transaction: other
        connections never see the journal without it (they see the transaction's end, when it is
        back), and a crash rolls the drop back with the rest."""
        if not versions:
            return 0
        with self._transaction("prune sessions from") as conn:
            for session_id, version in versions.items():
                actual = self._version(conn, session_id)
                if actual != version:
                    raise ConcurrencyError(session_id, version, actual)
            guard = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'trigger'"
                                 " AND name = 'events_no_delete'").fetchone()
            if guard is not None:
                conn.execute("DROP TRIGGER events_no_delete")
            deleted = 0
            for session_id in versions:
                deleted += conn.execute("DELETE FROM events WHERE session_id = ?", (session_id,)).rowcount
                for table in ("heads", "snapshots", "leases"):
                    conn.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,))
            if guard is not None:
                conn.execute(guard[0])
        return deleted

    def vacuum(self, *, alive: Callable[[Lease], bool] | None = None) -> Vacuumed:
        """As :meth:`AdminJournal.vacuum`: ``VACUUM``, then a checkpoint that empties the write-ahead
        log into the file and truncates both. Without ``alive``, a lease that has not expired counts
        as driven. A connection still reading the old pages keeps the log until it lets go: the
        file shrinks at the next checkpoint then, and the note says so."""
        with self._lock, reported(self.path, "read"):
            rows = self._conn.execute("SELECT session_id, owner, since, expires_at FROM leases").fetchall()
        now = format_time(clock.now())
        held = [lease_of(sid, (owner, since, expires), now) for sid, owner, since, expires in rows]
        driven = sorted(lease.session_id for lease in held if (alive(lease) if alive else not lease.expired))
        if driven:
            raise JournalBusyError(
                f"cannot vacuum {self.path}: live processes drive {len(driven)} of its sessions ({named(driven)}); "
                "VACUUM rewrites the whole file and holds its write lock until it is done, which would stall them: "
                "run it when no session is driven (`zagent sessions list` shows them as running)", driven)
        before = _size(self.path)
        # A raw writer that holds the file past the busy timeout is said as such ("try again").
        with self._lock, self._writer, reported(self.path, "vacuum"):
            self._conn.execute("VACUUM")
            busy = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        note = ("another connection still reads the old pages: the file shrinks at the next checkpoint, once it "
                "lets go" if busy else None)
        return Vacuumed(before=before, after=_size(self.path), note=note)
