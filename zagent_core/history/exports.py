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

A file is imported in bounded memory, however long (:func:`import_file`): it is read and
checked once (each line, and the session they fold into) keeping only the fold, then read
again and appended :data:`IMPORT_BATCH` events at a time, under the session's lease so
that no worker drives it half-written; an import that fails half-way takes out what it wrote.
"""

from __future__ import annotations

import hashlib
import itertools
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
from zagent_core.journal.fold import InconsistentJournalError, fold, rebuild
from zagent_core.journal.protocol import AdminJournal, ConcurrencyError, EventLog, JournalError, StoredEvent
from zagent_core.journal.views import SessionState
from zagent_core.logs import get_logger
from zagent_core.session.leases import take, this_process
from zagent_core.tools.processes import replacing

log = get_logger(__name__)

SESSION_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}")
#: Events per append of an import: what it holds in memory at once (a fork of a sub-agent's
#: session holds more in its first, which must reach its ``session_forked``).
IMPORT_BATCH = 1000


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

    def __init__(self) -> None:
        self.events = 0
        self._hash = hashlib.sha256()

    def add(self, line: str) -> None:
        self._hash.update(line.encode() + b"\n")
        self.events += 1

    def result(self, session_id: str) -> ExportDigest:
        return ExportDigest(session_id, self.events, self._hash.hexdigest())


def write_export(path: Path, session_id: str, events: Iterable[StoredEvent]) -> ExportDigest:
    """Write the export of a session's ``events`` to ``path`` (replacing it), whole or not at all,
    and durably: a temporary file beside it, synced, renamed over it, and the folder synced,
    so a power cut right after cannot take the file with it. Returns what was written."""
    digest = _Digester()
    with replacing(path, durable=True) as handle:
        for line in export_lines(events):
            digest.add(line)
            handle.write(line + "\n")
    folder = os.open(path.parent, os.O_RDONLY)  # the rename itself, durable too
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
    return digest.result(session_id)


def check_export(path: Path, expected: ExportDigest) -> None:
    """Read ``path`` back as ``sessions import`` would, and check it holds exactly what was written:
    the same session, as many events, and the same lines once its events are written out again
    (so the file imports to those very events). Raises :class:`ExportError` saying how it differs.
    Read as it is imported, in bounded memory."""
    export = _Export(str(path))
    digest = _Digester()
    with open(path, encoding="utf-8") as handle:
        for line in export_lines(StoredEvent(0, export.session_id or "", version, at, event) for version, (event, at)
                                 in enumerate(export.checked(handle), start=1)):
            digest.add(line)
    found = digest.result(export.session_id or "")
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


class _Export:
    """Reads an export's lines into events, checking each as it comes (:meth:`checked`), and keeps
    what an import needs of it besides: its session, how many events, and the sessions it was
    forked from. Nothing else is kept: a file of any length is read in bounded memory."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.session_id: str | None = None
        self.events = 0
        #: The sessions its paths may name as their own: its own and those it was forked from.
        self.recorded_ids: set[str] = set()
        #: A sub-agent's fork: the events through its ``session_forked``, which its first append must hold.
        self.first_append = 0
        self._opened_by: str | None = None  # the zagent that last started or resumed the session
        # The fold keeps only open calls, so it cannot tell a result for a call never requested:
        # checked here, where a file from elsewhere comes in.
        self._requested: set[str] = set()
        self._parent: bool = False

    def read(self, lines: Iterable[str]) -> Iterator[tuple[Event, datetime]]:
        """Each event and its time, as its line is read; raises :class:`ExportError` naming the first bad line."""
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            where = f"{self.source}, line {number}"
            try:
                event, when = self._line(line)
            except NewerEventError as exc:
                raise ExportError(str(exc.located(where, self._opened_by))) from None
            except (ValueError, KeyError, TypeError, AttributeError, EventSchemaError) as exc:
                raise ExportError(f"{where}: {exc}") from None
            self._check(event)
            yield event, when
        if self.session_id is None:
            raise ExportError(f"{self.source} holds no events")

    def _line(self, line: str) -> tuple[Event, datetime]:
        row = json.loads(line)
        if not isinstance(row, dict) or not isinstance(row.get("data"), dict):
            raise ValueError('each line must be {"session_id", "version", "at", "type", "data": {...}}')
        if self.session_id is None:
            self.session_id = row["session_id"]
            self.recorded_ids.add(row["session_id"])
        elif row["session_id"] != self.session_id:
            raise ValueError(f'it belongs to session {row["session_id"]}, not {self.session_id}: one session per file')
        if row["version"] != self.events + 1:
            raise ValueError(f'version {row["version"]} where {self.events + 1} was expected')
        if row["type"] in OPENERS and isinstance(row["data"].get("zagent_version"), str):
            self._opened_by = row["data"]["zagent_version"]
        event = load_event(row["type"], row["data"])
        when = datetime.fromisoformat(row["at"].replace("Z", "+00:00"))
        self.events += 1
        return event, when if when.tzinfo else when.replace(tzinfo=timezone.utc)  # zagent's times are UTC

    def _check(self, event: Event) -> None:
        """What a session must hold to fold: a file cannot smuggle in a broken one."""
        number = self.events
        if number == 1:
            check_session_id(self.session_id, self.source)
            if event.type != "session_started":
                raise ExportError(f"{self.source}: the first event is {event.type}, not session_started")
            self._parent = event.__dict__.get("parent") is not None
        call_id = event.__dict__.get("call_id")
        if isinstance(event, ToolCallRequested):
            self._requested.add(event.call_id)
        elif call_id is not None and call_id not in self._requested and not isinstance(event, (WakeRequested,
                                                                                                WakeAnswered)):
            raise ExportError(f"{self.source}: event {number} ({event.type}) refers to {call_id!r}, which the "
                              "session never had (no tool_call_requested before it): the file was edited or damaged")
        if isinstance(event, SessionForked):
            self.recorded_ids.add(event.parent_session_id)
            if self._parent and not self.first_append:
                self.first_append = number

    def checked(self, lines: Iterable[str]) -> Iterator[tuple[Event, datetime]]:
        """As :meth:`read`, the events also folded as they come, into a state that is then dropped."""
        state = SessionState()
        for version, (event, when) in enumerate(self.read(lines), start=1):
            try:
                fold(state, StoredEvent(0, self.session_id or "", version, when, event))
            except InconsistentJournalError as exc:
                raise ExportError(f"{self.source}: {exc}") from None
            yield event, when


def parse_export(lines: Iterable[str], source: str = "the file") -> ImportedSession:
    """Read an export back, whole (:func:`import_file` reads one in bounded memory); raises
    :class:`ExportError` naming the first bad line."""
    export = _Export(source)
    events: list[Event] = []
    times: list[datetime] = []
    for event, when in export.checked(lines):
        events.append(event)
        times.append(when)
    assert export.session_id is not None
    return ImportedSession(session_id=export.session_id, events=events, times=times)


def check_session_id(session_id: Any, source: str = "the session id") -> None:
    """Session ids name folders: letters, digits, ``_ - . :`` only, no leading dot."""
    if not isinstance(session_id, str) or not SESSION_ID.fullmatch(session_id):
        raise ExportError(f"{source}: {session_id!r} is not a usable session id (letters, digits, _ - . : only)")


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
        check_session_id(session_id, "the session id")  # it names a folder under the home
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


def _relocated(events: Iterable[tuple[Event, datetime]],
               relocation: _Relocation) -> Iterator[tuple[Event, datetime]]:
    """``events`` with their session paths moved by ``relocation``; raises :class:`ExportError`
    naming the first event with a path that is not in the recorded session's folder."""
    for number, (event, when) in enumerate(events, start=1):
        try:
            moved = relocation.event(event)
        except ValueError as exc:
            raise ExportError(f"event {number} ({event.type}): {exc}; an export may only hold paths in its "
                              "session's folder") from None
        yield moved, when


def relocate(imported: ImportedSession, home: Home, session_id: str) -> list[Event]:
    """The imported events with their session paths moved into ``home``'s folder for
    ``session_id``; raises :class:`ExportError` naming the first event with a path that is
    not in the recorded session's folder."""
    recorded_ids = {imported.session_id, *(e.parent_session_id for e in imported.events
                                          if isinstance(e, SessionForked))}
    relocation = _Relocation(home, session_id, recorded_ids)
    return [event for event, _ in _relocated(zip(imported.events, imported.times), relocation)]


def check_links(journal: EventLog, events: Iterable[Event], session_id: str) -> None:
    """Refuse (:class:`ExportError`) an import, as ``session_id``, whose sub-agent links name a
    session of ``journal`` that does not name it back: its parent's spawn call would drive it."""
    for number, event in enumerate(events, start=1):
        problem = _link_problem(journal, session_id, event)
        if problem is not None:
            raise ExportError(f"event {number} ({event.type}): {problem}; an import may only refer to sessions "
                              "inside it, or to the sessions of its own tree")


def _link_problem(journal: EventLog, session_id: str, event: Event) -> str | None:
    """Why ``event``, of a session imported as ``session_id``, links to a session of ``journal`` it may not."""
    if isinstance(event, (ChildSpawned, ChildEnded)):
        return _child_problem(journal, session_id, event.child_session_id, event.label)
    if isinstance(event, SessionStarted) and event.parent is not None:
        return _parent_problem(journal, session_id, event.parent)
    return None


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


def _write(journal: AdminJournal, session_id: str, events: Iterator[tuple[Event, datetime]], first: int) -> None:
    """Append ``events`` as the new session ``session_id``: ``first`` of them, then
    :data:`IMPORT_BATCH` at a time, under the session's lease (no worker drives it half-written).
    All of them or none: what was written before a failure is taken out again."""
    if head := journal.head(session_id):
        raise ConcurrencyError(session_id, 0, head)
    owner = this_process("sessions import")
    take(journal, session_id, owner)
    written = 0
    try:
        size = max(first, 1)
        while batch := list(itertools.islice(events, size)):
            journal.append(session_id, [event for event, _ in batch], written, at=[when for _, when in batch])
            written, size = written + len(batch), IMPORT_BATCH
    except BaseException:
        if written:
            try:
                journal.delete_sessions({session_id: written})
            except JournalError as exc:  # the import's own failure is the one to tell
                log.warning("import_not_undone", session=session_id, events=written, error=str(exc))
        raise
    finally:
        journal.release_lease(session_id, owner)


def import_session(journal: AdminJournal, imported: ImportedSession, *, home: Home,
                   as_id: str | None = None) -> str:
    """Write a session read whole (:func:`parse_export`) into ``journal``, the journal of ``home``
    (under ``as_id`` if given), in one append; returns its id.

    The session's paths are moved into ``home`` (:func:`relocate`); an export with a path
    outside its session's folder, or a sub-agent link to a session of the journal that does
    not link back (:func:`check_links`), is refused (:class:`ExportError`). Refuses
    (ConcurrencyError) a session id the journal already has, so nothing is mixed.
    """
    session_id = as_id or imported.session_id
    events = relocate(imported, home, session_id)
    check_links(journal, imported.events, session_id)
    _write(journal, session_id, zip(events, imported.times), len(events))
    return session_id


def import_file(journal: AdminJournal, path: Path, *, home: Home, as_id: str | None = None) -> str:
    """``zagent sessions import``: as :func:`import_session`, the export at ``path`` read twice
    instead of held: once to check it all (nothing is written for a file with a bad line, that
    does not fold into a session, or whose links :func:`check_links` refuses), then to append
    it :data:`IMPORT_BATCH` events at a time. Memory stays bounded however long the file;
    raises :class:`ExportError` (and ``UnicodeDecodeError`` for a file that is not UTF-8)."""
    export = _Export(str(path))
    with open(path, encoding="utf-8") as handle:
        events = (event for event, _ in export.checked(handle))
        first = next(events)  # its line names the session
        assert export.session_id is not None
        check_links(journal, itertools.chain([first], events), as_id or export.session_id)
    session_id = as_id or export.session_id
    relocation = _Relocation(home, session_id, export.recorded_ids)
    with open(path, encoding="utf-8") as handle:
        _write(journal, session_id, _relocated(_Export(str(path)).read(handle), relocation),
               max(IMPORT_BATCH, export.first_append))
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
