"""Sessions as files: one event per line (JSON Lines), schema-versioned, round-tripping exactly.

An export is what a replay test commits as its fixture. Each line holds one event:
``{"session_id", "version", "at", "type", "data"}``, where ``data`` is the event body as
the journal stores it (with its schema version ``v``); global ``seq`` numbers are the
journal's own business and are not exported.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from zagent_core.events import Event, EventSchemaError, SessionForked, TaskInterrupted, dump_event, load_event
from zagent_core.journal import Journal, StoredEvent
from zagent_core.state import InconsistentJournalError, rebuild

SESSION_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}")


def export_lines(events: Iterable[StoredEvent]) -> Iterator[str]:
    """One JSON line per event, in order."""
    for stored in events:
        yield json.dumps({
            "session_id": stored.session_id,
            "version": stored.version,
            "at": stored.at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "type": stored.event.type,
            "data": json.loads(dump_event(stored.event)),
        }, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class ImportedSession:
    session_id: str
    events: list[Event]
    times: list[datetime]


class ExportError(ValueError):
    """A file that is not a zagent export, with the line and what is wrong."""


def parse_export(lines: Iterable[str], source: str = "the file") -> ImportedSession:
    """Read an export back; raises :class:`ExportError` naming the first bad line."""
    session_id: str | None = None
    events: list[Event] = []
    times: list[datetime] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source}, line {number}"
        try:
            row = json.loads(line)
            if not isinstance(row, dict) or not isinstance(row.get("data"), dict):
                raise ValueError('each line must be {"session_id", "version", "at", "type", "data": {...}}')
            if session_id is None:
                session_id = row["session_id"]
            elif row["session_id"] != session_id:
                raise ValueError(f'it belongs to session {row["session_id"]}, not {session_id}: one session per file')
            if row["version"] != len(events) + 1:
                raise ValueError(f'version {row["version"]} where {len(events) + 1} was expected')
            events.append(load_event(row["type"], row["data"]))
            when = datetime.fromisoformat(row["at"].replace("Z", "+00:00"))
            times.append(when if when.tzinfo else when.replace(tzinfo=timezone.utc))  # zagent's times are UTC
        except (ValueError, KeyError, TypeError, AttributeError, EventSchemaError) as exc:
            raise ExportError(f"{where}: {exc}") from None
    if session_id is None:
        raise ExportError(f"{source} holds no events")
    check_session_id(session_id, source)
    _check_consistent(session_id, events, times, source)
    return ImportedSession(session_id=session_id, events=events, times=times)


def check_session_id(session_id: Any, source: str = "the session id") -> None:
    """Session ids name folders: letters, digits, ``_ - . :`` only, no leading dot."""
    if not isinstance(session_id, str) or not SESSION_ID.fullmatch(session_id):
        raise ExportError(f"{source}: {session_id!r} is not a usable session id (letters, digits, _ - . : only)")


def _check_consistent(session_id: str, events: list[Event], times: list[datetime], source: str) -> None:
    """The events must fold into a session: a file cannot smuggle in a broken one."""
    if events[0].type != "session_started":
        raise ExportError(f"{source}: the first event is {events[0].type}, not session_started")
    try:
        rebuild(StoredEvent(0, session_id, n, when, event)
                for n, (event, when) in enumerate(zip(events, times), start=1))
    except InconsistentJournalError as exc:
        raise ExportError(f"{source}: {exc}") from None


def import_session(journal: Journal, imported: ImportedSession, *, as_id: str | None = None) -> str:
    """Write an imported session into ``journal`` (under ``as_id`` if given); returns its id.

    Refuses (ConcurrencyError) a session id the journal already has, so nothing is mixed.
    """
    session_id = as_id or imported.session_id
    check_session_id(session_id, "the session id")  # it names a folder under the home
    journal.append(session_id, imported.events, 0, at=imported.times)
    return session_id


def fork_session(journal: Journal, session_id: str, at_seq: int, new_id: str) -> str:
    """A new session made of ``session_id``'s events up to global position ``at_seq``.

    The copy ends with ``session_forked``, which keeps the parent link; resume it to go
    on from there (with another prompt, another model).
    """
    prefix = [stored for stored in journal.read(session_id)
              if stored.seq <= at_seq and stored.event.type != "session_ended"]  # a fork goes on
    if not prefix:
        raise ValueError(f"session {session_id} has no event at or before #{at_seq}")
    state = rebuild(prefix)
    # Tasks still running at the fork point belong to the parent: the fork must not
    # watch, reap or kill them.
    closing = [TaskInterrupted(task_id=t.task_id, call_id=t.call_id,
                               message=f"task #{t.task_id} ({t.tool}) stays with session {session_id}, "
                                       "which this session was forked from")
               for t in state.running_tasks]
    link = SessionForked(parent_session_id=session_id, parent_seq=prefix[-1].seq)
    now = datetime.now(timezone.utc)
    # One transaction: a crash never leaves a copy without its parent link.
    journal.append(new_id, [*(s.event for s in prefix), *closing, link], 0,
                   at=[*(s.at for s in prefix), *([now] * (len(closing) + 1))])
    return new_id
