"""Copy what can still be read of a damaged journal into a new one (``zagent journal recover``).

The source is never written: it is copied (with its WAL, so committed appends not yet
checkpointed are kept) into a temporary folder and read from there, row by row past any
page SQLite cannot read. Every event that reads and loads is kept with its session id,
version and time; a session keeps the run of versions 1, 2, 3... up to its first
missing or unreadable event (an event after a hole could not be folded into a state).
Snapshots and leases are not copied: both are rebuilt or retaken as needed.

A list of tables whose text is damaged (a definition that does not parse, or is not
UTF-8) makes SQLite refuse the whole file; it is read past with ``PRAGMA writable_schema``,
which skips such a definition, and when the skipped one is the ``events`` table's own, it
is written again in the copy, as every journal has it: its rows are on pages of their own.
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from zagent_core.journal.events import Event, EventSchemaError, load_event_json
from zagent_core.journal.protocol import JournalError

#: The ``events`` table as every schema has had it (``sqlite.py``'s ``_create_events``): the
#: definition a damaged one is replaced with, in the copy, so that its rows can be read.
_EVENTS_TABLE = ('CREATE TABLE "events" ("seq" INTEGER PRIMARY KEY, "session_id" TEXT NOT NULL, '
                 '"version" INTEGER NOT NULL, "type" TEXT NOT NULL, "at" TEXT NOT NULL, "call_id" TEXT, '
                 '"task_id" TEXT, "data" TEXT NOT NULL)')
#: Events appended per transaction when writing the new journal.
_CHUNK = 1000
#: Rows probed one by one past a damaged page before giving up on the rest of the table.
_MAX_PROBE = 100_000


class RecoverError(JournalError):
    """The source cannot be recovered from at all (not a journal, or its schema is unreadable)."""


@dataclass(frozen=True)
class RecoverReport:
    """What ``recover_journal`` copied, and what it left behind and why."""

    sessions: int
    events: int
    #: Rows of the source's ``events`` table that could not be read or loaded.
    unreadable: int
    #: Readable events left out because an earlier version of their session is missing.
    after_gaps: int
    #: One line per problem, naming the event (by its seq in the source) or the session.
    skipped: list[str] = field(default_factory=list)


@dataclass
class _Session:
    first_seq: int
    events: dict[int, tuple[datetime, Event]] = field(default_factory=dict)


def recover_journal(source: Path, target: Path) -> RecoverReport:
    """Copy every readable event of the journal ``source`` into a new journal ``target``."""
    from zagent_store.sqlite import SQLiteJournal

    if target.exists():
        raise RecoverError(f"{target} already exists: name a new file for the recovered journal")
    if not source.is_file():
        raise RecoverError(f"{source} is not a file")
    skipped: list[str] = []
    with tempfile.TemporaryDirectory(prefix="zagent-recover-") as tmp:
        copy = Path(tmp) / "source.db"
        shutil.copyfile(source, copy)
        wal = source.with_name(source.name + "-wal")
        if wal.exists():
            shutil.copyfile(wal, copy.with_name(copy.name + "-wal"))
        with contextlib.closing(_open(copy, source, skipped)) as conn:
            sessions, unreadable = _read_sessions(conn, skipped)
    kept, after_gaps = 0, 0
    target.parent.mkdir(parents=True, exist_ok=True)
    with SQLiteJournal(target) as journal:
        for session_id, session in sorted(sessions.items(), key=lambda item: item[1].first_seq):
            prefix = 0
            while prefix + 1 in session.events:
                prefix += 1
            if prefix < len(session.events):
                dropped = len(session.events) - prefix
                after_gaps += dropped
                skipped.append(f"session {session_id}: kept versions 1-{prefix}, left out {dropped} later "
                               f"event(s) because version {prefix + 1} is missing or unreadable")
            for start in range(1, prefix + 1, _CHUNK):
                versions = range(start, min(start + _CHUNK, prefix + 1))
                journal.append(session_id, [session.events[v][1] for v in versions], start - 1,
                               at=[session.events[v][0] for v in versions])
            kept += prefix
    return RecoverReport(sessions=sum(1 for s in sessions.values() if 1 in s.events), events=kept,
                         unreadable=unreadable, after_gaps=after_gaps, skipped=skipped)


def _connect(copy: Path, *, past_damage: bool = False) -> sqlite3.Connection:
    conn = sqlite3.connect(copy, isolation_level=None)
    conn.text_factory = bytes  # damaged text must not stop the reading: each row is decoded on its own
    if past_damage:
        # SQLite then skips a definition that does not parse (or decode) instead of refusing the
        # whole file: the tables whose own definition reads can still be read.
        conn.execute("PRAGMA writable_schema = ON")
    return conn


def _open(copy: Path, source: Path, skipped: list[str]) -> sqlite3.Connection:
    conn = _connect(copy)
    try:
        found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'events'").fetchone()
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:  # the error names the undecodable definition
        conn.close()
        skipped.append(f"the list of tables is damaged ({_said(exc)}): read past it with PRAGMA writable_schema")
        return _open_past_damage(copy, source, skipped)
    if found is None:
        conn.close()
        raise RecoverError(f"{source} is a SQLite database but not a zagent journal (it has no events table)")
    return conn


def _open_past_damage(copy: Path, source: Path, skipped: list[str]) -> sqlite3.Connection:
    """The copy opened with its damaged definitions skipped; if the damaged one is the events
    table's own, it is written again (in the copy) as every journal has it, where its rows are."""
    conn = _connect(copy, past_damage=True)
    try:
        try:
            conn.execute("SELECT 1 FROM events LIMIT 1").fetchall()
            return conn
        except sqlite3.OperationalError:  # "no such table": the definition skipped was events'
            pass
        rewritten = conn.execute("UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND name = 'events' "
                                 "AND rootpage > 0", (_EVENTS_TABLE,)).rowcount
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        conn.close()
        raise RecoverError(f"{source} cannot be read as a SQLite database ({_said(exc)}): it is not a journal, "
                           "or its first page (the list of tables) is destroyed; nothing can be recovered") from None
    conn.close()
    if not rewritten:
        raise RecoverError(f"{source}: its list of tables is damaged and names no events table; "
                           "nothing can be recovered")
    skipped.append("the events table's definition is unreadable: its rows are read as every zagent journal "
                   "lays them out")
    return _connect(copy, past_damage=True)


def _said(exc: BaseException) -> str:
    """An error of SQLite's in words (one about text that does not decode says only that)."""
    return "a definition that is not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else str(exc)


def _read_sessions(conn: sqlite3.Connection, skipped: list[str]) -> tuple[dict[str, _Session], int]:
    sessions: dict[str, _Session] = {}
    unreadable = 0
    for seq, row in _rows(conn):
        if row is None:
            unreadable += 1
            skipped.append(f"event #{seq}: its page cannot be read")
            continue
        try:
            session_id, version, type_, at, data = row
            if not isinstance(version, int):
                raise ValueError(f"version {version!r} is not a number")
            when = datetime.fromisoformat(at.decode().replace("Z", "+00:00"))
            event = load_event_json(type_.decode(), data.decode() if isinstance(data, bytes) else str(data))
            sid = session_id.decode()
        except (ValueError, AttributeError, EventSchemaError) as exc:  # UnicodeDecodeError is a ValueError
            unreadable += 1
            skipped.append(f"event #{seq}: {exc}")
            continue
        session = sessions.setdefault(sid, _Session(first_seq=seq))
        session.events[version] = (when, event)
    return sessions, unreadable


def _rows(conn: sqlite3.Connection) -> Iterator[tuple[int, tuple | None]]:
    """``(seq, row)`` for every row of ``events``, ``row`` None where SQLite cannot read it.

    A scan stops at the first damaged page; the rows after it are then probed one seq at
    a time until one reads, and the scan resumes from there.
    """
    query = "SELECT seq, session_id, version, type, at, data FROM events WHERE seq > ? ORDER BY seq"
    try:
        highest = conn.execute("SELECT max(seq) FROM events").fetchone()[0] or 0
    except sqlite3.DatabaseError:
        highest = None
    last = 0
    while True:
        try:
            for seq, *row in conn.execute(query, (last,)):
                last = seq
                yield seq, tuple(row)
            return
        except sqlite3.DatabaseError:
            pass
        probe = last + 1
        while True:
            if (highest is not None and probe > highest) or probe - last > _MAX_PROBE:
                return
            try:
                found = conn.execute(query.replace("seq > ?", "seq = ?"), (probe,)).fetchone()
            except sqlite3.DatabaseError:
                yield probe, None
            else:
                if found is not None:
                    yield probe, tuple(found[1:])
                    last = probe  # the scan resumes after the row that reads
                    break
            probe += 1
