"""Knowing a process again: pid, start time and boot, so a reused pid is never mistaken.

A background task's supervisor is recorded by its identity. After the engine restarts,
the task is re-attached only when a process with that pid exists, started at the same
clock tick, since the same boot; anything else means the task is gone.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, BinaryIO, TextIO

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def boot_id() -> str:
    """This boot's id (Linux); empty where the system does not say."""
    try:
        return _BOOT_ID.read_text().strip()
    except OSError:
        return ""


def pid_namespace() -> int:
    """This process's PID namespace (the inode of ``/proc/self/ns/pid``); 0 where the system does not say.

    A pid means something only in its namespace: another namespace's process is not in this
    one's ``/proc``, or is there under another number."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def stat_fields(pid: int | str) -> list[bytes] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state first), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None


@dataclass(frozen=True)
class ProcessIdentity:
    """Who a process is, beyond its pid.

    A dataclass, not a pydantic model: a background task's supervisor imports this module,
    and pydantic's import was a fifth of its start-up."""

    pid: int
    #: Start time in clock ticks since boot (field 22 of /proc/PID/stat).
    start_ticks: int
    boot_id: str

    @classmethod
    def of(cls, pid: int) -> ProcessIdentity | None:
        fields = stat_fields(pid)
        if fields is None:
            return None
        return cls(pid=pid, start_ticks=int(fields[19]), boot_id=boot_id())

    @classmethod
    def from_record(cls, record: Any) -> ProcessIdentity | None:
        """The identity a task folder's record holds, None if it holds none (the folder is in
        the tool's reach: its files are read as untrusted)."""
        if not isinstance(record, dict):
            return None
        pid, ticks, boot = record.get("pid"), record.get("start_ticks"), record.get("boot_id")
        if not (isinstance(pid, int) and isinstance(ticks, int) and isinstance(boot, str)) \
                or isinstance(pid, bool) or isinstance(ticks, bool):
            return None
        return cls(pid=pid, start_ticks=ticks, boot_id=boot)

    def alive(self) -> bool:
        """The same process is still running (not a zombie, not a reused pid)."""
        fields = stat_fields(self.pid)
        return (
            fields is not None
            and fields[0] != b"Z"
            and int(fields[19]) == self.start_ticks
            and self.boot_id == boot_id()
        )


def write_identity(path: Path, pid: int) -> None:
    """Record who the process ``pid`` is (only its pid where /proc cannot tell more), for
    :meth:`ProcessIdentity.from_record`."""
    who = ProcessIdentity.of(pid)
    write_json(path, asdict(who) if who else {"pid": pid})


@contextlib.contextmanager
def replacing(path: Path, *, durable: bool = False) -> Iterator[TextIO]:
    """A text file to write that takes ``path``'s place when the block ends, and never if it
    raises: readers see the old file or the whole new one, never half of it.

    ``durable`` also survives a power cut (an fsync); without it, a crash of the
    engine alone never loses the file. The temporary file gets a name nobody can
    guess, so a tool cannot plant a FIFO there to hang the writer.
    """
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            yield handle
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_json(path: Path, value: Any, *, durable: bool = False) -> None:
    """``value`` as the JSON file ``path``, replaced whole (see :func:`replacing`)."""
    with replacing(path, durable=durable) as handle:
        json.dump(value, handle)


#: Larger records are no records of ours.
_READ_LIMIT = 1 << 20
#: How files a tool can reach are opened for reading: a FIFO or a device there never blocks the open.
READ_WITHOUT_BLOCKING = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)


def create_fresh(path: Path) -> BinaryIO:
    """A new, empty ``path`` to write, whatever was there (a FIFO a tool planted would block an open).

    Open for reading too: an output file over its limit is cut in place (:mod:`~zagent_core.tools.output_files`).
    """
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_CLOEXEC", 0), 0o644)
    return os.fdopen(fd, "wb")


def open_regular(path: Path) -> BinaryIO | None:
    """``path`` opened for reading if it is a regular file, else None (missing, a FIFO, a device...).

    For files where a tool can reach: a FIFO or a device in their place must not hang
    the reader (it is opened without blocking, then looked at).
    """
    try:
        fd = os.open(path, READ_WITHOUT_BLOCKING)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return os.fdopen(fd, "rb")


def file_sha256(path: Path | str) -> str:
    """The sha256 of the file's bytes, read a MiB at a time (raises OSError when it cannot be read)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_json(path: Path) -> Any | None:
    """The file's JSON, or None when it is missing, unreadable, not a regular file, or huge."""
    handle = open_regular(path)
    if handle is None:
        return None
    try:
        with handle:
            data = handle.read(_READ_LIMIT + 1)
        return json.loads(data) if len(data) <= _READ_LIMIT else None
    except (OSError, ValueError, RecursionError):
        return None
