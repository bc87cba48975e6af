"""Copy a whole journal into another (``zagent journal copy``): SQLite to PostgreSQL and back.

Everything goes through the :mod:`~zagent_core.journal.protocol` protocols, so any two
journals ``open_journal`` opens can be the source and the target.

- **Order.** Sessions are copied one after another, the least recently active first
  (``sessions()`` reversed), each in version order. The target's global order then lists
  the sessions in the source's order of last activity, which is what ``sessions list``,
  ``sessions show`` without an id, ``run --continue`` and ``resume --last`` go by: the
  copy answers them as the source does. (Copying by first activity would make the last
  session started look the most recently active.) Events of different sessions are not
  interleaved as in the source, so global positions (``seq``) are renumbered; a session's
  own order, versions and times are kept. Interleaving them as the source does would mean
  holding every session's events at once (``read`` gives a whole session), the whole
  journal in memory; one session at a time holds one.
- **Batches.** One append per :data:`BATCH` events at the version the last one left, so
  versions are the source's and a copy of a large session is not one huge transaction.
  The first batch reaches at least to a ``session_forked``: the target, like the source,
  tells a fork from a sub-agent by that event being in the session's first append.
- **Snapshots** are a cache, but ``sessions list`` shows the status stored with the newest
  one (and resume starts from it): the newest snapshot of the projection this zagent
  writes is copied, when it is not newer than the events copied. Those of other
  projections are left (no zagent of this version reads them).
- **Leases** are not copied: a lease belongs to a live process of the source.
- **Refusals**, before anything is written: a target that is the source, and a target that
  holds any of the source's sessions (they are named).
- **Checked event by event**: the events read from the source are hashed as they are
  copied, the target's are read back and hashed, and each session must have the same
  count and hash: sha256 over each event's version, type, time (ISO, UTC, to the
  millisecond) and body (``model_dump(mode="json")``, sorted keys): parsed events, not
  stored text, since PostgreSQL's ``jsonb`` orders keys its own way. PostgreSQL cannot
  store U+0000 and keeps U+FFFD in its place: a session that differs only by that is a
  known difference, reported, not an error.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from zagent_core.journal.protocol import ConcurrencyError, EventLog, Journal, JournalError, StoredEvent
from zagent_store import clock
from zagent_store.postgres import without_nul
from zagent_store.sql import NAMED, named

if TYPE_CHECKING:
    from zagent_core.journal.protocol import Leases, SessionIndex, SessionSummary, SnapshotLog

#: Events per append when writing the target.
BATCH = 1000
#: How the body of an event with U+0000 in it looks in canonical JSON (``ensure_ascii``).
_NUL = "\\u0000"


class CopyError(JournalError):
    """The copy was refused, or the target does not hold what was copied."""


class CopyRefusedError(CopyError):
    """The copy was refused before anything was written: the target is the source, or holds its sessions."""


class TargetHasSessionsError(CopyRefusedError):
    """The target already holds some of the source's sessions: nothing was written."""

    def __init__(self, message: str, sessions: list[str]) -> None:
        super().__init__(message)
        self.sessions = sessions


class CopyMismatchError(CopyError):
    """After copying, some sessions of the target differ from the source's."""

    def __init__(self, message: str, differences: list[str]) -> None:
        super().__init__(message)
        self.differences = differences


@dataclass(frozen=True)
class SessionDigest:
    """A session's events as the check sees them: their count and their hash."""

    session_id: str
    events: int
    #: sha256 of the events, one line each (see :func:`event_line`).
    digest: str
    #: The same with every U+0000 as U+FFFD (what a PostgreSQL journal keeps); ``digest`` if there is none.
    digest_without_nul: str

    @property
    def has_nul(self) -> bool:
        return self.digest != self.digest_without_nul


@dataclass(frozen=True)
class CopyProgress:
    """Where a copy is, for a progress line: given after each append."""

    session_id: str
    sessions_done: int
    sessions: int
    events_done: int
    #: The source's events as its sessions' heads counted them when the copy began.
    events: int


@dataclass(frozen=True)
class Verification:
    """Two journals' sessions compared: equal, or equal but for U+0000 kept as U+FFFD."""

    sessions: int
    events: int
    #: sha256 over every session's id, count and hash, in session id order.
    digest: str
    #: Sessions whose events differ only by U+0000 in the one being U+FFFD in the other.
    nul_replaced: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class CopyReport:
    """What :func:`copy_journal` copied and checked."""

    source: str
    target: str
    sessions: int
    events: int
    snapshots: int
    #: The hash of the target's copied sessions (that of the source too, unless ``nul_replaced``).
    digest: str
    source_digest: str
    #: Sessions a string of which held U+0000, which is U+FFFD in the target (a known difference).
    nul_replaced: list[str]
    #: Sessions whose lease a live process held while they were copied, with the version copied:
    #: the target has their events up to it, not those appended since.
    driven: dict[str, int]
    copy_seconds: float
    verify_seconds: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"copy_seconds": round(self.copy_seconds, 3),
                               "verify_seconds": round(self.verify_seconds, 3)}


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def event_lines(stored: StoredEvent) -> tuple[bytes, bytes]:
    """The line an event adds to its session's hash, and the line it would add with U+0000 as U+FFFD.

    Tab-separated version, type, time and canonical body: none but the body can hold a tab,
    and the body is last, so two different events never give the same line.
    """
    body = stored.event.model_dump(mode="json")
    text = _canonical(body)
    at = clock.stored_time(stored.at).isoformat()
    line = f"{stored.version}\t{stored.event.type}\t{at}\t{text}\n".encode()
    if _NUL not in text:  # rare: only then is the body walked again (an escaped backslash may be all it is)
        return line, line
    return line, f"{stored.version}\t{stored.event.type}\t{at}\t{_canonical(without_nul(body))}\n".encode()


class _Hasher:
    """A session's digest, fed one event at a time."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.count = 0
        self._exact = hashlib.sha256()
        self._without_nul = hashlib.sha256()

    def add(self, stored: StoredEvent) -> None:
        exact, lenient = event_lines(stored)
        self._exact.update(exact)
        self._without_nul.update(lenient)
        self.count += 1

    def result(self) -> SessionDigest:
        return SessionDigest(self.session_id, self.count, self._exact.hexdigest(), self._without_nul.hexdigest())


def session_digest(session_id: str, events: Iterable[StoredEvent]) -> SessionDigest:
    """The count and hash of a session's events (in version order)."""
    hasher = _Hasher(session_id)
    for stored in events:
        hasher.add(stored)
    return hasher.result()


def total_digest(digests: Iterable[SessionDigest]) -> str:
    """One hash for many sessions: over each one's id, count and hash, in session id order."""
    total = hashlib.sha256()
    for item in sorted(digests, key=lambda d: d.session_id):
        total.update(f"{item.session_id}\t{item.events}\t{item.digest}\n".encode())
    return total.hexdigest()


def location_of(journal: EventLog) -> str:
    """Where a journal is, for messages: a SQLite file's path, a PostgreSQL URL without its password."""
    location = getattr(journal, "location", None)
    if isinstance(location, str):
        return location
    path = getattr(journal, "path", None)
    return str(path) if path is not None else repr(journal)


def same_journal(first: EventLog, second: EventLog) -> bool:
    """Whether two opened journals are one store: the same SQLite file, or the same PostgreSQL database."""
    if first is second:
        return True
    paths = getattr(first, "path", None), getattr(second, "path", None)
    if paths[0] is not None and paths[1] is not None:
        try:
            return os.path.samefile(paths[0], paths[1])
        except OSError:
            return os.path.abspath(paths[0]) == os.path.abspath(paths[1])
    urls = getattr(first, "url", None), getattr(second, "url", None)
    if isinstance(urls[0], str) and isinstance(urls[1], str):
        return _database(urls[0]) == _database(urls[1])
    return False


def _database(url: str) -> tuple[str, ...]:
    """The server and database a libpq URL names (not the user or options: they do not make another database)."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        info = conninfo_to_dict(url)
    except Exception:  # noqa: BLE001 - a URL libpq cannot parse was refused when it was opened; compare as text
        return (url,)
    host = str(info.get("host") or info.get("hostaddr") or "localhost")
    if host in ("127.0.0.1", "::1"):
        host = "localhost"
    return host, str(info.get("port") or "5432"), str(info.get("dbname") or info.get("user") or "")


def _ordered(summaries: list[SessionSummary]) -> list[SessionSummary]:
    """The least recently active first: ``sessions()`` lists the most recently active first."""
    return summaries[::-1]


def _refuse_overlap(source: EventLog, target: SessionIndex, ids: list[str]) -> None:
    held = {summary.session_id for summary in target.sessions()}
    overlap = [sid for sid in ids if sid in held]
    if not overlap:
        return
    raise TargetHasSessionsError(
        f"{location_of(target)} already holds {len(overlap)} of the {len(ids)} sessions of {location_of(source)} "
        f"({named(overlap)}); nothing was copied: copy into a new, empty journal (a new SQLite file, or a new "
        "PostgreSQL database: createdb NAME)", overlap)


def _batches(events: list[StoredEvent], size: int) -> Iterator[list[StoredEvent]]:
    """``events`` in appends of ``size``, the first one up to the session's ``session_forked`` if it has one."""
    first = size
    for index, stored in enumerate(events):  # a fork's first append: the events it copied, then this one
        if stored.event.type == "session_forked":
            first = max(size, index + 1)
            break
    start = 0
    while start < len(events):
        end = first if start == 0 else start + size
        yield events[start:end]
        start = end


def _copy_session(source: EventLog, target: EventLog, session_id: str, batch: int,
                  appended: Callable[[int], None]) -> SessionDigest:
    events = list(source.read(session_id))
    hasher = _Hasher(session_id)
    for chunk in _batches(events, batch):
        for stored in chunk:
            hasher.add(stored)
        try:
            target.append(session_id, [stored.event for stored in chunk], chunk[0].version - 1,
                          at=[stored.at for stored in chunk])
        except ConcurrencyError:
            raise CopyError(f"session {session_id} was written in {location_of(target)} by another process while "
                            "it was copied there: copy into a journal nothing else writes to") from None
        appended(len(chunk))
    return hasher.result()


def _copy_snapshot(source: SnapshotLog, target: SnapshotLog, session_id: str, version: int) -> bool:
    from zagent_core.journal.snapshots import projection_tag

    snapshot = source.load_snapshot(session_id, projection_tag())
    if snapshot is None or snapshot.version > version:  # newer than what was copied: of events the target lacks
        return False
    target.save_snapshot(session_id, snapshot.version, snapshot.projection, snapshot.data, snapshot.status)
    return True


def leased(journal: Leases, session_id: str) -> bool:
    """Whether a lease on the session has not expired: a driver may still append to it."""
    lease = journal.lease(session_id)
    return lease is not None and not lease.expired


def copy_journal(source: Journal, target: SessionIndex, *, progress: Callable[[CopyProgress], None] | None = None,
                 batch: int = BATCH, is_driven: Callable[[Journal, str], bool] = leased) -> CopyReport:
    """Copy every session of ``source`` into ``target``, then check the target event by event.

    Raises :class:`CopyRefusedError` (nothing written) when ``target`` is ``source`` or
    holds any of its sessions, :class:`CopyMismatchError` when the check finds a session
    that differs (naming it), and :class:`CopyError` when another process writes one of
    the sessions into ``target`` while it is copied. ``progress`` is called after each append.
    ``is_driven`` tells a session that a process drives while it is copied; the store knows
    leases, not processes, so a driver that can tell a dead holder (the core's leases) is given.
    """
    if same_journal(source, target):
        raise CopyRefusedError(f"{location_of(source)} is both the source and the target: "
                               "name another journal to copy to")
    started = time.monotonic()
    summaries = _ordered(source.sessions())
    ids = [summary.session_id for summary in summaries]
    _refuse_overlap(source, target, ids)
    total = sum(summary.events for summary in summaries)
    done = 0
    digests: list[SessionDigest] = []
    driven: dict[str, int] = {}
    snapshots = 0
    for number, session_id in enumerate(ids, start=1):
        live = is_driven(source, session_id)

        def appended(count: int, session_id: str = session_id, number: int = number) -> None:
            nonlocal done
            done += count
            if progress is not None:
                progress(CopyProgress(session_id, number - 1, len(ids), done, total))

        copied = _copy_session(source, target, session_id, batch, appended)
        digests.append(copied)
        if live:
            driven[session_id] = copied.events
        # A snapshot of a session whose U+0000 became U+FFFD would hold what its events no longer do.
        if copied.events and not (copied.has_nul and not _keeps_nul(target)):
            snapshots += _copy_snapshot(source, target, session_id, copied.events)
        if progress is not None:
            progress(CopyProgress(session_id, number, len(ids), done, total))
    copied_at = time.monotonic()
    check = compare(digests, journal_digests(target, ids), source=location_of(source), target=location_of(target),
                    explain=_explainer(source, target))
    return CopyReport(
        source=location_of(source), target=location_of(target), sessions=len(digests),
        events=sum(d.events for d in digests), snapshots=snapshots, digest=check.digest,
        source_digest=total_digest(digests), nul_replaced=check.nul_replaced, driven=driven,
        copy_seconds=copied_at - started,
        verify_seconds=time.monotonic() - copied_at)


def _keeps_nul(journal: EventLog) -> bool:
    """Whether the journal stores U+0000 as it is (PostgreSQL's text cannot hold it)."""
    return getattr(journal, "url", None) is None


def journal_digests(journal: SessionIndex, session_ids: Collection[str] | None = None) -> list[SessionDigest]:
    """The digest of each of ``session_ids`` (all the journal's sessions by default) as the journal has it."""
    if session_ids is None:
        session_ids = [summary.session_id for summary in journal.sessions()]
    return [session_digest(sid, journal.read(sid)) for sid in session_ids]


def compare(expected: Iterable[SessionDigest], actual: Iterable[SessionDigest], *, source: str = "the source",
            target: str = "the target", explain: Callable[[str], str] | None = None) -> Verification:
    """Check that each session of ``expected`` has the same count and hash in ``actual``.

    Raises :class:`CopyMismatchError` naming the sessions that differ (missing, another
    count, other events: ``explain(session_id)`` says which, when given); a session that
    differs only by U+0000 in one being U+FFFD in the other is listed in ``nul_replaced``.
    """
    found = {d.session_id: d for d in actual}
    differences: list[str] = []
    nul_replaced: list[str] = []
    checked: list[SessionDigest] = []
    for want in expected:
        have = found.get(want.session_id)
        if have is None or have.events == 0:
            differences.append(f"session {want.session_id}: {want.events} events in {source}, none in {target}")
        elif have.events != want.events:
            differences.append(f"session {want.session_id}: {want.events} events in {source}, "
                               f"{have.events} in {target}")
        elif have.digest != want.digest:
            if have.digest_without_nul != want.digest_without_nul:
                detail = explain(want.session_id) if explain is not None else "not the same ones"
                differences.append(f"session {want.session_id}: {want.events} events on both sides, but {detail}")
            else:
                nul_replaced.append(want.session_id)
        if have is not None:
            checked.append(have)
    if differences:
        raise CopyMismatchError(
            f"{target} does not hold what {source} does: {len(differences)} session(s) differ: "
            + "; ".join(differences[:NAMED]) + (f"; and {len(differences) - NAMED} more" if len(differences) > NAMED
                                                 else ""), differences)
    return Verification(sessions=len(checked), events=sum(d.events for d in checked), digest=total_digest(checked),
                        nul_replaced=nul_replaced)


def verify(source: SessionIndex, target: SessionIndex, session_ids: Collection[str] | None = None) -> Verification:
    """Check that ``target`` holds each session of ``source`` (or ``session_ids``) event for event."""
    if session_ids is None:
        session_ids = [summary.session_id for summary in source.sessions()]
    return compare(journal_digests(source, session_ids), journal_digests(target, session_ids),
                   source=location_of(source), target=location_of(target), explain=_explainer(source, target))


def _explainer(source: EventLog, target: EventLog) -> Callable[[str], str]:
    """Says which event of a session differs first between two journals (read again: differences are rare)."""
    def explain(session_id: str) -> str:
        for ours, theirs in zip(source.read(session_id), target.read(session_id)):
            if set(event_lines(ours)).isdisjoint(event_lines(theirs)):
                if ours.event.type != theirs.event.type:
                    what = f"its type: {ours.event.type} in one, {theirs.event.type} in the other"
                elif clock.stored_time(ours.at) != clock.stored_time(theirs.at):
                    what = f"its time: {ours.at.isoformat()} in one, {theirs.at.isoformat()} in the other"
                else:
                    what = "its body"
                return f"version {ours.version} differs ({what})"
        return "not the same events"
    return explain
