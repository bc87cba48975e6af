"""Whether a SQLite journal's write-ahead log vanished: what ``zagent doctor`` looks at before it
opens the journal (opening it makes a new, empty log, and the signs are gone).

A journal in WAL mode commits into ``journal.db-wal`` and copies the log into the file at
checkpoints. Delete the log under a running driver and the driver goes on committing into
a file no other process can see: other commands fail with "disk I/O error", and the
driver's events reach ``journal.db`` only if it closes the journal normally (its last
checkpoint reads its own open copy); killed, it loses them. Two signs tell it, on Linux:
a process that holds the deleted log open (``/proc/PID/fd``), or, once none does, the
log's shared-memory index (``journal.db-shm``) left without its log, which SQLite never
leaves behind itself but for a kill in the moment it closes the journal.
"""

from __future__ import annotations

import os
from pathlib import Path


def vanished_wal(journal: Path) -> str | None:
    """What is wrong with ``journal``'s write-ahead log, seen from outside; None when nothing is."""
    real = Path(os.path.realpath(journal))
    wal, shm = Path(f"{real}-wal"), Path(f"{real}-shm")
    if wal.exists():
        return None
    holders = _holding(f"{wal} (deleted)")
    if holders:
        pids = ", ".join(map(str, holders))
        return (f"its write-ahead log {wal.name} was deleted while process {pids} had it open: what that process "
                f"appends now is in a file no other process sees (other commands fail with a disk I/O error). Let "
                f"it end normally, which copies its log into {real.name}; killed, it loses what it appended since "
                "its last checkpoint")
    if shm.exists():
        return (f"{shm.name} is there without {wal.name}: the write-ahead log was deleted while the journal was "
                "open, and what it held since the last checkpoint is lost (unless its last process was killed just "
                "as it closed the journal); the sessions' events after that are missing")
    return None


def _holding(target: str) -> list[int]:
    """The processes (of those this one may look at) with a descriptor open on ``target``."""
    try:
        pids = sorted(int(name) for name in os.listdir("/proc") if name.isdigit())
    except OSError:  # no /proc: not Linux
        return []
    found = []
    for pid in pids:
        try:
            descriptors = os.listdir(f"/proc/{pid}/fd")
        except OSError:  # gone, or someone else's
            continue
        for fd in descriptors:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    found.append(pid)
                    break
            except OSError:
                continue
    return found
