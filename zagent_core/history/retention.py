"""Retention: ended sessions taken out of the journal (``zagent sessions prune``), and the space
they took given back (``zagent journal vacuum``).

What goes is a tree: a top-level session that ended before the cut-off, with every sub-agent
below it. A child goes with its top-level session only, never alone, so no session is left
naming a parent the journal no longer has. A tree stays, reported as skipped with why, when
a live process drives any of its sessions (its lease: a driver that died does not count), or
when one of its sub-agents still waits (on a person, an approval, background tasks, a
wake-up); a top-level session that has not ended stays too (idle, waiting, queued for a
worker: it can still be resumed), and is reported with its status.

With ``keep_exports``, each session of a tree is first written to ``DIR/<id>.jsonl`` (the file
``zagent sessions export`` writes), durably, then read back as ``zagent sessions import`` would
and compared with what was written from the journal: as many events, the same sha256 of their
lines. Only when every file of the tree checks out is the tree deleted; a failed export deletes
nothing of it.

Trees are deleted in transactions of up to :data:`BATCH_EVENTS` events, a tree never split
across two, each session at the version that was checked (and exported): a tree with a
session appended to in between stays, whole (:meth:`AdminJournal.delete_sessions`). Then the
sessions' folders under the home go: call outputs, task folders, scratch.

Bounds: the listing holds one summary per session of the journal; an export, one session's
events at a time; a transaction, :data:`BATCH_EVENTS` events (or one larger tree).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zagent_core.history.exports import SESSION_ID, ExportError, check_export, check_session_id, write_export
from zagent_core.journal.events import EventSchemaError
from zagent_core.journal.protocol import ConcurrencyError, SessionSummary, Vacuumed
from zagent_core.session import leases
from zagent_core.session.status import listed_status

if TYPE_CHECKING:
    from zagent_core.home import Home
    from zagent_core.journal.protocol import AdminJournal, Journal

#: Events deleted per transaction, at most (a tree larger than that goes alone): the deletion holds
#: the journal's write lock (SQLite) or keeps appends waiting (PostgreSQL) while it runs.
BATCH_EVENTS = 10_000

#: What a sub-agent that has not ended still waits for, by its status: its tree stays.
_WAITING = {"waiting on user": "is waiting on a user (zagent answer)",
            "waiting on approval": "is waiting on an approval (zagent approve, zagent deny)",
            "waiting on tasks": "is waiting on its background tasks",
            "wake-up pending": "has a wake-up to be delivered"}


@dataclass(frozen=True)
class PrunedSession:
    """A session taken out of the journal (or that would be, in a dry run)."""

    session_id: str
    #: The session it is a sub-agent of (None: a top-level session).
    parent_session_id: str | None
    events: int
    #: Its last event's time: for the top of a tree, when it ended.
    last_at: datetime
    #: The export written and checked before it was deleted (with ``keep_exports``).
    export: Path | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "parent_session_id": self.parent_session_id, "events": self.events,
                "last_at": self.last_at, "export": str(self.export) if self.export else None}


@dataclass(frozen=True)
class SkippedSession:
    """The top of a tree that stays, and why."""

    session_id: str
    reason: str
    #: Something failed (its export did not check out): not a session that may not go yet.
    failed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "reason": self.reason, "failed": self.failed}


@dataclass(frozen=True)
class PruneReport:
    """What :func:`prune_sessions` took out (would take out, in a dry run) and left."""

    ended_before: datetime
    dry_run: bool
    pruned: tuple[PrunedSession, ...]
    skipped: tuple[SkippedSession, ...]
    #: What could not be cleaned up after a tree was deleted: a session folder left on disk.
    problems: tuple[str, ...] = field(default=())

    @property
    def sessions(self) -> int:
        return len(self.pruned)

    @property
    def events(self) -> int:
        return sum(session.events for session in self.pruned)

    @property
    def failed(self) -> bool:
        """Whether anything failed: an export that did not check out, a folder that could not be removed."""
        return bool(self.problems) or any(skipped.failed for skipped in self.skipped)

    def to_dict(self) -> dict[str, Any]:
        return {"ended_before": self.ended_before, "dry_run": self.dry_run, "sessions": self.sessions,
                "events": self.events, "pruned": [session.to_dict() for session in self.pruned],
                "skipped": [session.to_dict() for session in self.skipped], "problems": list(self.problems)}


class _Kept(Exception):
    """A tree stays (raised while it is being pruned), and why."""

    def __init__(self, reason: str, *, failed: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.failed = failed


def prune_sessions(journal: AdminJournal, ended_before: datetime, *, home: Home | None = None,
                   keep_exports: Path | None = None, dry_run: bool = False) -> PruneReport:
    """Take the sessions that ended before ``ended_before`` (UTC when it has no offset) out of
    ``journal``, each with its sub-agents, as the module docstring says.

    ``home``: the home whose ``sessions/`` folder holds their folders, removed with them
    (none is removed without it). ``keep_exports``: a folder (made if need be) to export each
    session to first. ``dry_run``: decide, and delete nothing (nor export).
    """
    cutoff = ended_before if ended_before.tzinfo else ended_before.replace(tzinfo=timezone.utc)
    if keep_exports is not None and not dry_run:
        keep_exports.mkdir(parents=True, exist_ok=True)
    pruning = _Pruning(journal, home, keep_exports, dry_run)
    for tree in _trees(journal.sessions()):
        if tree[0].last_at < cutoff:
            pruning.add(tree)
    pruning.flush()
    return PruneReport(ended_before=cutoff, dry_run=dry_run, pruned=tuple(pruning.pruned),
                       skipped=tuple(pruning.skipped), problems=tuple(pruning.problems))


class _Pruning:
    """One prune as it goes: each tree checked (and exported) joins a batch, deleted in one
    transaction before it would pass :data:`BATCH_EVENTS` events (and at the end). A
    transaction per tree would pay a commit (an fsync) per tree, and most trees are small:
    the 663 trees bench/prune.py takes out of a 200,000-event journal took 4.8 s so, 1.2-1.7 s in batches."""

    def __init__(self, journal: AdminJournal, home: Home | None, keep_exports: Path | None, dry_run: bool) -> None:
        self.journal = journal
        self.home = home
        self.exports_to = None if dry_run else keep_exports  # a dry run exports nothing
        self.dry_run = dry_run
        self.pruned: list[PrunedSession] = []
        self.skipped: list[SkippedSession] = []
        self.problems: list[str] = []
        self._batch: list[list[PrunedSession]] = []
        self._batched = 0  # events in the batch

    def add(self, tree: list[SessionSummary]) -> None:
        try:
            _check_may_go(self.journal, tree)
            exports = _exported(self.journal, tree, self.exports_to) if self.exports_to is not None else {}
        except _Kept as kept:
            self.skipped.append(SkippedSession(tree[0].session_id, kept.reason, failed=kept.failed))
            return
        listed = [PrunedSession(member.session_id, member.parent_session_id, member.events, member.last_at,
                                exports.get(member.session_id)) for member in tree]
        if self.dry_run:
            self.pruned += listed
            return
        events = sum(session.events for session in listed)
        if self._batch and self._batched + events > BATCH_EVENTS:
            self.flush()
        self._batch.append(listed)
        self._batched += events

    def flush(self) -> None:
        """The batch out of the journal, each session at the version it was checked at; when one was
        written to since, the trees go one by one, so only that one's tree stays."""
        batch, self._batch, self._batched = self._batch, [], 0
        if not batch:
            return
        try:
            self.journal.delete_sessions({session.session_id: session.events for tree in batch for session in tree})
            gone = batch
        except ConcurrencyError:
            gone = [tree for tree in batch if self._delete_alone(tree)]
        for tree in gone:
            self.pruned += tree
            if self.home is not None:
                for session in tree:
                    self.problems += _remove_folder(self.home, session.session_id)

    def _delete_alone(self, tree: list[PrunedSession]) -> bool:
        try:
            self.journal.delete_sessions({session.session_id: session.events for session in tree})
        except ConcurrencyError as exc:
            self.skipped.append(SkippedSession(tree[0].session_id, _moved(exc.session_id, exc.actual, exc.expected)))
            return False
        return True


def _trees(summaries: list[SessionSummary]) -> list[list[SessionSummary]]:
    """Each top-level session (no parent in the journal) with every session below it, the top first;
    the least recently active tree first."""
    by_id = {summary.session_id: summary for summary in summaries}
    below: dict[str, list[SessionSummary]] = {}
    for summary in summaries:
        if summary.parent_session_id in by_id:
            below.setdefault(str(summary.parent_session_id), []).append(summary)
    trees = []
    for top in reversed(summaries):  # sessions() lists the most recently active first
        if top.parent_session_id in by_id:
            continue
        tree, seen = [top], {top.session_id}
        for member in tree:  # grows as it goes: breadth first, each session once (a journal edited into a loop)
            for child in below.get(member.session_id, []):
                if child.session_id not in seen:
                    seen.add(child.session_id)
                    tree.append(child)
        trees.append(tree)
    return trees


def _check_may_go(journal: Journal, tree: list[SessionSummary]) -> None:
    """Raises :class:`_Kept` when the tree must stay: its top has not ended, a live process drives one
    of its sessions, or one of its sub-agents still waits."""
    top = tree[0]
    if not top.ended:
        raise _Kept(f"not ended ({listed_status(journal, top)})")
    for member in tree:
        who = "it" if member is top else f"its sub-agent {member.session_id}"
        driver = leases.holder_alive(journal, member.session_id)
        if driver is not None:
            raise _Kept(f"{who} is driven by {leases.describe(driver.owner)}")
        if not member.ended:
            waits = _WAITING.get(listed_status(journal, member))
            if waits is not None:
                raise _Kept(f"{who} {waits}")


def _exported(journal: Journal, tree: list[SessionSummary], folder: Path) -> dict[str, Path]:
    """Each session of the tree written to ``folder`` and checked, by id. Raises :class:`_Kept`
    (failed) when one cannot be, or holds other than the events the session was checked with."""
    exports = {}
    for member in tree:
        path = folder / f"{member.session_id}.jsonl"
        try:
            check_session_id(member.session_id)  # it names a file in the folder
            written = write_export(path, member.session_id, journal.read(member.session_id))
            check_export(path, written)
        except (OSError, ExportError, EventSchemaError) as exc:
            who = "its" if member is tree[0] else f"its sub-agent {member.session_id}'s"
            raise _Kept(f"{who} export to {path} failed: {exc}; nothing of the tree was deleted", failed=True) from None
        if written.events != member.events:
            raise _Kept(_moved(member.session_id, written.events, member.events))
        exports[member.session_id] = path
    return exports


def _moved(session_id: str, version: int, checked: int) -> str:
    """Why a tree stays whose session was appended to after its check."""
    return (f"session {session_id} was written to while it was being pruned (version {version}, not {checked}); "
            "nothing of the tree was deleted")


def _remove_folder(home: Home, session_id: str) -> list[str]:
    """The session's folder under the home removed, if it has one; what could not be, said."""
    if not SESSION_ID.fullmatch(session_id):
        return []  # names no folder zagent made (a path would leave sessions/)
    folder = home.session_dir(session_id)
    try:
        if folder.is_symlink():
            folder.unlink()
        elif folder.exists():
            shutil.rmtree(folder)
    except OSError as exc:
        return [f"the folder {folder} of session {session_id} could not be removed: {exc}"]
    return []


def vacuum_journal(journal: AdminJournal) -> Vacuumed:
    """``journal.vacuum()``, told which leases' holders still drive their sessions: a process of
    this host is looked at, another host's lease is alive until it expires (``leases.gone``)."""
    return journal.vacuum(alive=lambda lease: not leases.gone(lease))
