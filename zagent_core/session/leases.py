"""One driver per session: a lease taken atomically in the journal.

Whatever drives a session (``zagent run``, ``resume``, ``tools run``, an API user) takes
its lease before it appends or settles anything, and lets it go when it stops. A second
driver is refused at once with who holds the lease and since when. A driver that died
(SIGKILL, power cut) leaves its lease behind; the next one checks the holder is really
gone (same host and boot, pid with the same start time) and takes the lease over, and the
takeover is journaled with the resume. A pid is only checked from the holder's own PID
namespace: from another one (a container, ``unshare --pid``) the holder cannot be seen,
so it is taken to be alive until its lease expires, as a holder on another host is.

The journal makes taking and taking over one compare-and-set, so two processes that
both find a dead holder cannot both win.

A journal many hosts share (PostgreSQL) cannot check a process on another host. So a
lease is taken for a time (``journal.lease_seconds``) and renewed by a heartbeat while
its session is driven; a lease its holder stopped renewing has expired, and whoever
finds it so takes it over, wherever the holder ran. On the holder's own host the process
itself is the better witness: a holder that still runs (pid and start time) keeps its
sessions however late its heartbeat (a loaded machine, a stalled disk), and one that is
gone loses them at once.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from datetime import datetime
from typing import Any

from zagent_core.errors import ZagentError
from zagent_core.journal.protocol import Journal, JournalError, Lease, LeaseHeldError, canonical_owner
from zagent_core.tools.processes import ProcessIdentity, boot_id, pid_namespace


class SessionBusyError(ZagentError, RuntimeError):
    """Another live process drives the session."""

    def __init__(self, session_id: str, holder: Lease) -> None:
        self.session_id = session_id
        self.holder = holder
        super().__init__(f"session {session_id} is being driven by {describe(holder.owner)} since "
                         f"{_when(holder.since)}; wait for it to finish, or stop that process first")


def _when(moment: datetime) -> str:
    return f"{moment:%Y-%m-%d %H:%M:%S}Z"


def describe(owner: dict[str, Any]) -> str:
    """``pid 4242 on host1 (zagent run)``, and ``in another PID namespace`` when its pid is not one of ours."""
    command = f" ({owner['command']})" if owner.get("command") else ""
    elsewhere = " in another PID namespace" if not _our_namespace(owner) else ""
    return f"pid {owner.get('pid', '?')} on {owner.get('host', '?')}{command}{elsewhere}"


def this_process(command: str) -> dict[str, Any]:
    """The lease owner this process is: host, boot, PID namespace, pid and its start time, and what it runs."""
    me = ProcessIdentity.of(os.getpid())
    return {"host": socket.gethostname(), "boot_id": boot_id(), "pid_ns": pid_namespace(), "pid": os.getpid(),
            "start_ticks": me.start_ticks if me else 0, "command": command}


def _our_namespace(owner: dict[str, Any]) -> bool:
    # An owner an older zagent wrote says no namespace: it is taken to be ours, as it always was.
    return owner.get("pid_ns", pid_namespace()) == pid_namespace()


def _process(owner: dict[str, Any]) -> ProcessIdentity | None:
    """The process an owner of this host, boot and PID namespace names, or None (another host, boot or
    namespace, or no owner zagent wrote)."""
    if owner.get("host") != socket.gethostname() or owner.get("boot_id") != boot_id() or not _our_namespace(owner):
        return None
    try:
        return ProcessIdentity(pid=int(owner["pid"]), start_ticks=int(owner["start_ticks"]),
                               boot_id=str(owner["boot_id"]))
    except (KeyError, TypeError, ValueError):
        return None


def is_dead(owner: dict[str, Any]) -> bool:
    """The owner is known to be gone: on this host, from an earlier boot or with no such process.

    An owner on another host (a shared journal), or in another PID namespace of this host, is never
    declared dead from here.
    """
    if owner.get("host") != socket.gethostname():
        return False
    if owner.get("boot_id") != boot_id():
        return True  # the machine restarted since: every process of that boot is gone
    them = _process(owner)
    return them is not None and not them.alive()


def running_here(owner: dict[str, Any]) -> bool:
    """The owner is a process of this host that still runs: late to renew its lease, not gone."""
    them = _process(owner)
    return them is not None and them.alive()


def gone(lease: Lease) -> bool:
    """The lease's holder drives the session no more: it is dead, or it stopped heart-beating and
    is no process of this host that still runs."""
    return is_dead(lease.owner) or (lease.expired and not running_here(lease.owner))


def take(journal: Journal, session_id: str, owner: dict[str, Any], ttl: float | None = None) -> Lease | None:
    """Take the session's lease for ``owner`` (for ``ttl`` seconds, renewed by a :class:`Heartbeat`);
    returns the holder taken over (dead, or its lease expired), if any.

    Raises :class:`SessionBusyError` when a live process (or one on another host whose
    lease has not expired) holds it.
    """
    try:
        journal.acquire_lease(session_id, owner, ttl=ttl)
        return None
    except LeaseHeldError as held:
        holder = held.holder
    if not gone(holder):
        raise SessionBusyError(session_id, holder)
    try:
        journal.acquire_lease(session_id, owner, replacing=holder.owner, ttl=ttl)
    except LeaseHeldError as raced:  # another process took it over first
        raise SessionBusyError(session_id, raced.holder) from None
    return holder


def holder_alive(journal: Journal, session_id: str) -> Lease | None:
    """The lease of a live driver of the session, or None (no lease, or its holder is gone)."""
    lease = journal.lease(session_id)
    if lease is None or gone(lease):
        return None
    return lease


def is_driven(journal: Journal, session_id: str) -> bool:
    """Whether a live driver holds the session's lease (what ``zagent journal copy`` asks)."""
    return holder_alive(journal, session_id) is not None


class LeaseLostError(JournalError):
    """This process's lease on a session expired and another driver took the session over."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id} was taken over by another driver after this process stopped "
                         "renewing its lease (it was stopped or cut off from the journal for longer than "
                         "journal.lease_seconds); nothing more is written to it from here")


def _log() -> Any:
    from zagent_core.logs import get_logger  # on first use: a lease's check alone needs no logging set up

    return get_logger(__name__)


#: How long a release that keeps failing is tried again, in lease times: past that the
#: journal is taken to be gone for good (closed), and the lease is left to this process's exit.
RELEASE_TRIES_TTLS = 10


class Heartbeat:
    """Renews the leases this process holds, every third of their time to live, on one thread.

    A lease that could not be renewed (it expired, and a driver on another host took the
    session over: this process was cut off from the journal, or stopped, for longer than
    the lease lasts) is reported through ``lost`` and renewed no more; the session's next
    append would conflict anyway, since the new driver appends at its own version. A lease
    that names this process but is no more driven (its release failed, or its renewals did
    for longer than it lasts) is released at the next beats: left behind, it would keep
    every driver of this host off the session while this process runs.
    """

    def __init__(self, journal: Journal, ttl: float) -> None:
        self.journal = journal
        self.ttl = ttl
        self._held: dict[str, dict[str, Any]] = {}
        #: Sessions whose lease was taken over while this process thought it held it.
        self.lost: set[str] = set()
        #: Since when renewing a session's lease has failed (the journal unreachable, or closed).
        self._failing: dict[str, float] = {}
        #: Leases to release at a later beat: their owners, and until when to try.
        self._releasing: dict[str, tuple[dict[str, Any], float]] = {}
        #: Guards the above; held throughout a late release, so that no take of its session slips in.
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def hold(self, session_id: str, owner: dict[str, Any]) -> None:
        with self._changed:
            self._held[session_id] = owner
            self._failing.pop(session_id, None)
            self.lost.discard(session_id)
            self._start()

    def drop(self, session_id: str) -> None:
        with self._changed:
            self._held.pop(session_id, None)
            self._failing.pop(session_id, None)

    def before_take(self, session_id: str) -> None:
        """Call before taking the session's lease: a late release of it then cannot undo the take
        (it has run already, or it never will)."""
        with self._changed:
            self._releasing.pop(session_id, None)

    def release(self, session_id: str, owner: dict[str, Any]) -> None:
        """Stop renewing the session's lease and release it: now, or at the next beats if the
        journal is away."""
        self.drop(session_id)
        try:
            self.journal.release_lease(session_id, owner)
        except JournalError as exc:
            _log().warning("lease_release_failed", error=str(exc), session=session_id,
                           then="tried again at the next heartbeats")
            self._release_later(session_id, owner)

    def _release_later(self, session_id: str, owner: dict[str, Any]) -> None:
        with self._changed:
            if session_id not in self._held:  # held again meanwhile: it is not to be let go
                self._releasing[session_id] = (owner, time.monotonic() + RELEASE_TRIES_TTLS * self.ttl)
                self._start()

    def _start(self) -> None:
        if self._thread is None:  # under self._changed
            self._thread = threading.Thread(target=self._run, name="zagent-heartbeat", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait(self.ttl / 3)
                if not self._held and not self._releasing:  # nothing to do: the next hold starts a thread again
                    self._thread = None
                    return
                held = dict(self._held)
            self._renew(held)
            self._release_pending()

    def _renew(self, held: dict[str, dict[str, Any]]) -> None:
        owners: dict[str, tuple[dict[str, Any], list[str]]] = {}
        for session_id, owner in held.items():
            owners.setdefault(canonical_owner(owner), (owner, []))[1].append(session_id)
        # One write per owner and beat, however many sessions it drives: a heartbeat that
        # queued for the journal's write lock once per session could miss its own expiry.
        for owner, session_ids in owners.values():
            failed = False
            try:
                renewed = self.journal.renew_leases(owner, session_ids, self.ttl)
                for session_id in session_ids:
                    self._failing.pop(session_id, None)
            except Exception as exc:  # noqa: BLE001 - the journal is away for now: try again next beat
                # Its message, not a traceback: nothing here is a bug to debug.
                _log().warning("lease_renew_failed", error=str(exc), sessions=len(session_ids))
                failed, now = True, time.monotonic()
                # Failing for longer than the lease lasts, it has expired: as good as lost.
                renewed = {sid for sid in session_ids if now - self._failing.setdefault(sid, now) < self.ttl}
            for session_id in set(session_ids) - set(renewed):
                with self._changed:
                    if self._held.get(session_id) is not held[session_id]:
                        continue  # let go of meanwhile: released, not lost
                    del self._held[session_id]
                    self.lost.add(session_id)
                if failed:  # the row may still name this process: it goes once the journal is back
                    self._release_later(session_id, owner)
                _log().error("lease_lost", session=session_id,
                             why="its lease could not be renewed before it expired, and another driver may have "
                                 "taken the session over")

    def _release_pending(self) -> None:
        with self._changed:  # held throughout: see before_take
            for session_id, (owner, until) in list(self._releasing.items()):
                try:
                    self.journal.release_lease(session_id, owner)
                except Exception as exc:  # noqa: BLE001 - still away: the next beat tries again
                    if time.monotonic() < until:
                        continue
                    _log().error("lease_release_abandoned", error=str(exc), session=session_id,
                                 why="the journal refused it for too long; the session stays this process's "
                                     "until it exits")
                del self._releasing[session_id]
