"""Sessions as files: one event per line (JSON Lines), schema-versioned, round-tripping exactly.

An export is what a replay test commits as its fixture. Each line holds one event:
``{"session_id", "version", "at", "type", "data"}``, where ``data`` is the event body as
the journal stores it (with its schema version ``v``); global ``seq`` numbers are the
journal's own business and are not exported.

Exports are shared, so an import trusts none of the paths in them: the engine reads
notify files and task folders, and signals the processes a task folder names, by the
paths its events hold. Every such path must be in the recorded session's folder
(``<home>/sessions/<id>/...`` of the home that recorded it) and is moved to the same
place in the importing home's folder for the session; anything else is refused.

Nor does an import trust the sessions its events name: a parent's spawn call drives the
child session it names, so an export could otherwise hand a session of the importing
journal to whoever wrote it. A sub-agent link (``child_spawned``, ``child_ended``, a
sub-agent's ``session_started``) may name a session the journal does not have (the rest of
the tree may be imported after it), or one that names it back, but no other.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any

from zagent_core.errors import ZagentError
from zagent_core.home import Home
from zagent_core.journal.events import (
    OPENERS,
    ChildEnded,
    ChildSpawned,
    Event,
    EventSchemaError,
    Media,
    NewerEventError,
    OutputFile,
    ParentLink,
    SessionForked,
    SessionStarted,
    TaskExited,
    TaskInterrupted,
    TaskKilled,
    TaskStarted,
    ToolCallFinished,
    ToolCallInterrupted,
    ToolCallRequested,
    ToolCallStarted,
    WakeAnswered,
    WakeRequested,
    dump_event,
    load_event,
)
from zagent_core.journal.fold import InconsistentJournalError, rebuild
from zagent_core.journal.protocol import EventLog, StoredEvent
from zagent_core.tools.processes import replacing

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
class ExportDigest:
    """What an export file holds, in short: its session, how many events, and the sha256 of its lines."""

    session_id: str
    events: int
    sha256: str


class _Digester:
    """An :class:`ExportDigest`, fed one line (without its newline) at a time."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.events = 0
        self._hash = hashlib.sha256()

    def add(self, line: str) -> None:
        self._hash.update(line.encode() + b"\n")
        self.events += 1

    def result(self) -> ExportDigest:
        return ExportDigest(self.session_id, self.events, self._hash.hexdigest())


def write_export(path: Path, session_id: str, events: Iterable[StoredEvent]) -> ExportDigest:
    """Write the export of a session's ``events`` to ``path`` (replacing it), whole or not at all,
    and durably: a temporary file beside it, synced, renamed over it, and the folder synced,
    so a power cut right after cannot take the file with it. Returns what was written."""
    digest = _Digester(session_id)
    with replacing(path, durable=True) as handle:
        for line in export_lines(events):
            digest.add(line)
            handle.write(line + "\n")
    folder = os.open(path.parent, os.O_RDONLY)  # the rename itself, durable too
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
    return digest.result()


def check_export(path: Path, expected: ExportDigest) -> None:
    """Read ``path`` back as ``sessions import`` would, and check it holds exactly what was written:
    the same session, as many events, and the same lines once its events are written out again
    (so the file imports to those very events). Raises :class:`ExportError` saying how it differs."""
    with open(path, encoding="utf-8") as handle:
        imported = parse_export(handle, source=str(path))
    digest = _Digester(imported.session_id)
    for line in export_lines(StoredEvent(0, imported.session_id, version, at, event) for version, (event, at)
                             in enumerate(zip(imported.events, imported.times), start=1)):
        digest.add(line)
    found = digest.result()
    if found.session_id != expected.session_id or found.events != expected.events:
        raise ExportError(f"{path} holds {found.events} events of session {found.session_id}, not the "
                          f"{expected.events} of session {expected.session_id} that were written")
    if found.sha256 != expected.sha256:
        raise ExportError(f"{path} holds {found.events} events, but not the ones written (sha256 {found.sha256}, "
                          f"not {expected.sha256})")


@dataclass(frozen=True)
class ImportedSession:
    session_id: str
    events: list[Event]
    times: list[datetime]


class ExportError(ZagentError, ValueError):
    """A file that is not a zagent export, with the line and what is wrong."""


def parse_export(lines: Iterable[str], source: str = "the file") -> ImportedSession:
    """Read an export back; raises :class:`ExportError` naming the first bad line."""
    session_id: str | None = None
    events: list[Event] = []
    times: list[datetime] = []
    opened_by: str | None = None  # the zagent that last started or resumed the session, as its lines say
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
            if row["type"] in OPENERS and isinstance(row["data"].get("zagent_version"), str):
                opened_by = row["data"]["zagent_version"]
            events.append(load_event(row["type"], row["data"]))
            when = datetime.fromisoformat(row["at"].replace("Z", "+00:00"))
            times.append(when if when.tzinfo else when.replace(tzinfo=timezone.utc))  # zagent's times are UTC
        except NewerEventError as exc:
            raise ExportError(str(exc.located(where, opened_by))) from None
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
    # The fold keeps only open calls, so it cannot tell a result for a call never requested:
    # checked here, where a file from elsewhere comes in.
    requested: set[str] = set()
    for number, event in enumerate(events, start=1):
        call_id = event.__dict__.get("call_id")
        if isinstance(event, ToolCallRequested):
            requested.add(event.call_id)
        elif call_id is not None and call_id not in requested and not isinstance(event, (WakeRequested, WakeAnswered)):
            raise ExportError(f"{source}: event {number} ({event.type}) refers to {call_id!r}, which the session "
                              "never had (no tool_call_requested before it): the file was edited or damaged")
    try:
        rebuild(StoredEvent(0, session_id, n, when, event)
                for n, (event, when) in enumerate(zip(events, times), start=1))
    except InconsistentJournalError as exc:
        raise ExportError(f"{source}: {exc}") from None


#: The fields that name files and folders of the session's own, by event type: what the
#: engine reads (notify files, task folders), signals (the processes a task folder
#: records) or shows as the session's files. Other paths in events (the workspace, a
#: call's ``cwd`` and ``argv``, a tool's folder) say where things were on the recording
#: machine and are kept as they are: nothing is read from them for a recorded call.
SESSION_PATH_FIELDS: dict[type, tuple[str, ...]] = {
    ToolCallStarted: ("output_dir", "notify_file"),
    ToolCallFinished: ("full_output_path", "media", "files"),
    TaskExited: ("full_output_path", "media", "files"),
    TaskKilled: ("full_output_path", "media", "files"),
    TaskStarted: ("task_dir",),
    TaskInterrupted: ("output_path",),
}


class _Relocation:
    """Moves paths from the recording home's session folder to the importing home's.

    A path must read ``ROOT/sessions/ID/REST``: ``ROOT`` the same for the whole export
    (the recording home), ``ID`` the session's own id or, for a fork, that of a session
    it was forked from (a fork's first events are its parent's, paths and all), and
    ``REST`` a relative path without ``.`` or ``..``. It becomes
    ``<home>/sessions/<imported id>/REST``, which must still be in that folder once
    symlinks are followed.
    """

    def __init__(self, home: Home, session_id: str, recorded_ids: set[str]) -> None:
        self.folder = home.session_dir(session_id)
        self.recorded_ids = recorded_ids
        self.root: PurePosixPath | None = None

    def move(self, path: str) -> str:
        """``path`` in the importing home; raises ValueError saying why it cannot be."""
        pure = PurePosixPath(path)
        if not pure.is_absolute() or "\0" in path or any(part in (".", "..") for part in path.split("/")):
            raise ValueError("it is not an absolute path without . and ..")
        parts = pure.parts
        splits = [(PurePosixPath(*parts[:index]), parts[index + 2:]) for index in range(1, len(parts) - 2)
                  if parts[index] == "sessions" and parts[index + 1] in self.recorded_ids]
        chosen = next((split for split in splits if self.root is None or split[0] == self.root), None)
        if chosen is None:
            ids = " or ".join(sorted(self.recorded_ids))
            if self.root is None:
                raise ValueError(f"it is not in the folder of session {ids} (HOME/sessions/{ids}/...)")
            raise ValueError(f"it is not in {self.root}/sessions/{ids}/, where the export's other paths are")
        self.root, rest = chosen
        moved = self.folder.joinpath(*rest)
        if not moved.resolve().is_relative_to(self.folder.resolve()):
            raise ValueError(f"{moved} leads out of {self.folder} through a symbolic link")
        return str(moved)

    def event(self, event: Event) -> Event:
        update: dict[str, Any] = {}
        for name in SESSION_PATH_FIELDS.get(type(event), ()):
            value = getattr(event, name)
            if isinstance(value, str):
                update[name] = self._field(name, value)
            elif isinstance(value, list):
                update[name] = [self._part(name, part) for part in value]
        return event.model_copy(update=update) if update else event

    def _part(self, name: str, part: Media | OutputFile) -> Media | OutputFile:
        return part.model_copy(update={"path": self._field(f"{name} path", part.path)})

    def _field(self, name: str, value: str) -> str:
        try:
            return self.move(value)
        except ValueError as exc:
            raise ValueError(f"{name} {value!r}: {exc}") from None


def relocate(imported: ImportedSession, home: Home, session_id: str) -> list[Event]:
    """The imported events with their session paths moved into ``home``'s folder for
    ``session_id``; raises :class:`ExportError` naming the first event with a path that is
    not in the recorded session's folder."""
    recorded_ids = {imported.session_id, *(e.parent_session_id for e in imported.events
                                          if isinstance(e, SessionForked))}
    relocation = _Relocation(home, session_id, recorded_ids)
    events = []
    for number, event in enumerate(imported.events, start=1):
        try:
            events.append(relocation.event(event))
        except ValueError as exc:
            raise ExportError(f"event {number} ({event.type}): {exc}; an export may only hold paths in its "
                              "session's folder") from None
    return events


def check_links(journal: EventLog, imported: ImportedSession, session_id: str) -> None:
    """Refuse (:class:`ExportError`) an import, as ``session_id``, whose sub-agent links name a
    session of ``journal`` that does not name it back: its parent's spawn call would drive it."""
    for number, event in enumerate(imported.events, start=1):
        if isinstance(event, (ChildSpawned, ChildEnded)):
            problem = _child_problem(journal, session_id, event.child_session_id, event.label)
        elif isinstance(event, SessionStarted) and event.parent is not None:
            problem = _parent_problem(journal, session_id, event.parent)
        else:
            continue
        if problem is not None:
            raise ExportError(f"event {number} ({event.type}): {problem}; an import may only refer to sessions "
                              "inside it, or to the sessions of its own tree")


def _child_problem(journal: EventLog, session_id: str, child_id: str, label: str) -> str | None:
    """Why the journal's session ``child_id`` is not ``session_id``'s sub-agent ``label``, if it is not."""
    if child_id == session_id:
        return f"it names the session itself as its sub-agent {label}"
    started = next(iter(journal.read(child_id, types=("session_started",))), None)
    if started is None:
        return None  # not in the journal: its export, imported later, must name this session as its parent
    link = started.event.parent if isinstance(started.event, SessionStarted) else None
    if link is not None and (link.session_id, link.label) == (session_id, label):
        return None
    what = "no sub-agent" if link is None else f"{link.label} of session {link.session_id}"
    return f"its sub-agent {label} is session {child_id}, which in this journal is {what}"


def _parent_problem(journal: EventLog, session_id: str, link: ParentLink) -> str | None:
    """Why the journal's session ``link.session_id`` does not have ``session_id`` for its sub-agent, if it does not."""
    if link.session_id == session_id:
        return "it names the session itself as its parent"
    spawned = [stored.event for stored in journal.read(link.session_id, types=("child_spawned",))
               if isinstance(stored.event, ChildSpawned) and stored.event.label == link.label]
    if not spawned and journal.head(link.session_id) == 0:
        return None  # not in the journal: its export, imported later, must name this session as its sub-agent
    if spawned and all(event.child_session_id == session_id for event in spawned):
        return None
    theirs = f"session {spawned[0].child_session_id}" if spawned else "no such sub-agent"
    return f"it is {link.label} of session {link.session_id}, whose {link.label} in this journal is {theirs}"


def import_session(journal: EventLog, imported: ImportedSession, *, home: Home, as_id: str | None = None) -> str:
    """Write an imported session into ``journal``, the journal of ``home`` (under ``as_id``
    if given); returns its id.

    The session's paths are moved into ``home`` (:func:`relocate`); an export with a path
    outside its session's folder, or a sub-agent link to a session of the journal that does
    not link back (:func:`check_links`), is refused (:class:`ExportError`). Refuses
    (ConcurrencyError) a session id the journal already has, so nothing is mixed.
    """
    session_id = as_id or imported.session_id
    check_session_id(session_id, "the session id")  # it names a folder under the home
    events = relocate(imported, home, session_id)
    check_links(journal, imported, session_id)
    journal.append(session_id, events, 0, at=imported.times)
    return session_id


def fork_session(journal: EventLog, session_id: str, at_seq: int, new_id: str) -> str:
    """A new session made of ``session_id``'s events up to global position ``at_seq``.

    The copy ends with ``session_forked``, which keeps the parent link; resume it to go
    on from there (with another prompt, another model).
    """
    prefix = [stored for stored in journal.read(session_id)
              if stored.seq <= at_seq and stored.event.type != "session_ended"]  # a fork goes on
    if not prefix:
        raise ValueError(f"session {session_id} has no event at or before #{at_seq}")
    state = rebuild(prefix)
    # Calls and tasks still running at the fork point belong to the parent: the fork
    # must not watch, reap or kill them (its calls' folders are the parent's).
    closing: list[Event] = [
        ToolCallInterrupted(call_id=c.call_id, message=f"{c.tool} was running in session {session_id} when this "
                                                       "session was forked from it; the call stays with that session")
        for c in state.calls.values() if c.status == "running"]
    closing += [TaskInterrupted(task_id=t.task_id, call_id=t.call_id,
                                message=f"task #{t.task_id} ({t.tool}) stays with session {session_id}, "
                                        "which this session was forked from")
                for t in state.running_tasks]
    link = SessionForked(parent_session_id=session_id, parent_seq=prefix[-1].seq)
    now = datetime.now(timezone.utc)
    # One transaction: a crash never leaves a copy without its parent link.
    journal.append(new_id, [*(s.event for s in prefix), *closing, link], 0,
                   at=[*(s.at for s in prefix), *([now] * (len(closing) + 1))])
    return new_id
