"""One driver per session: a lease taken atomically in the journal.

Whatever drives a session (``zagent run``, ``resume``, ``tools run``, an API user) takes
its lease before it appends or settles anything, and lets it go when it stops. A second
driver is refused at once with who holds the lease and since when. A driver that died
(SIGKILL, power cut) leaves its lease behind; the next one checks the holder is really
gone (same host and boot, pid with the same start time) and takes the lease over, and the
takeover is journaled with the resume.

The journal makes taking and taking over one compare-and-set, so two processes that
both find a dead holder cannot both win.
"""

from __future__ import annotations

import os
import socket
from datetime import datetime
from typing import Any

from zagent_core.journal import Journal, Lease, LeaseHeldError
from zagent_core.processes import ProcessIdentity, boot_id


class SessionBusyError(RuntimeError):
    """Another live process drives the session."""

    def __init__(self, session_id: str, holder: Lease) -> None:
        self.session_id = session_id
        self.holder = holder
        super().__init__(f"session {session_id} is being driven by {describe(holder.owner)} since "
                         f"{_when(holder.since)}; wait for it to finish, or stop that process first")


def _when(moment: datetime) -> str:
    return f"{moment:%Y-%m-%d %H:%M:%S}Z"


def describe(owner: dict[str, Any]) -> str:
    """``pid 4242 on host1 (zagent run)``."""
    command = f" ({owner['command']})" if owner.get("command") else ""
    return f"pid {owner.get('pid', '?')} on {owner.get('host', '?')}{command}"


def this_process(command: str) -> dict[str, Any]:
    """The lease owner this process is: host, boot, pid and its start time, and what it runs."""
    me = ProcessIdentity.of(os.getpid())
    return {"host": socket.gethostname(), "boot_id": boot_id(), "pid": os.getpid(),
            "start_ticks": me.start_ticks if me else 0, "command": command}


def is_dead(owner: dict[str, Any]) -> bool:
    """The owner is known to be gone: on this host, from an earlier boot or with no such process.

    An owner on another host (a shared journal) is never declared dead from here.
    """
    if owner.get("host") != socket.gethostname():
        return False
    if owner.get("boot_id") != boot_id():
        return True  # the machine restarted since: every process of that boot is gone
    try:
        them = ProcessIdentity(pid=int(owner["pid"]), start_ticks=int(owner["start_ticks"]),
                               boot_id=str(owner["boot_id"]))
    except (KeyError, TypeError, ValueError):
        return False
    return not them.alive()


def take(journal: Journal, session_id: str, owner: dict[str, Any]) -> Lease | None:
    """Take the session's lease for ``owner``; returns the dead holder taken over, if any.

    Raises :class:`SessionBusyError` when a live process (or one on another host) holds it.
    """
    try:
        journal.acquire_lease(session_id, owner)
        return None
    except LeaseHeldError as held:
        holder = held.holder
    if not is_dead(holder.owner):
        raise SessionBusyError(session_id, holder)
    try:
        journal.acquire_lease(session_id, owner, replacing=holder.owner)
    except LeaseHeldError as raced:  # another process took it over first
        raise SessionBusyError(session_id, raced.holder) from None
    return holder


def holder_alive(journal: Journal, session_id: str) -> Lease | None:
    """The lease of a live driver of the session, or None (no lease, or its holder is dead)."""
    lease = journal.lease(session_id)
    if lease is None or is_dead(lease.owner):
        return None
    return lease
