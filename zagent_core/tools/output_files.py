"""Output files kept within a size: past ``limits.output_file_bytes``, their start and their end.

What a call keeps of its output on disk (a foreground call's ``full_output.txt``, a task's
``output.log``) is bounded: a tool that prints without end (``yes``) must not fill the
disk. Past the limit a file keeps its first half and its last half, cut in place (no
second copy), and a line between them says how many bytes were dropped there. The start
says what the tool was doing, the end how it ended: the middle of a flood is what goes.
"""

from __future__ import annotations

import os
import stat

#: Bytes moved at once when a file's tail is moved up to its head.
_CHUNK = 1 << 20


def marker(dropped: int, head: int, tail: int) -> bytes:
    """The line between a cut file's head and tail (it starts and ends a line of its own)."""
    return (f"\n[zagent: {dropped} bytes of output were dropped here: this file keeps the first {head} and the last "
            f"{tail} bytes (limits.output_file_bytes)]\n").encode()


def _move(fd: int, source: int, target: int, length: int) -> None:
    """Copy ``length`` bytes of the file from ``source`` to ``target``, the ranges possibly overlapping."""
    ascending = target < source  # as memmove: copy from the side that is not overwritten first
    done = 0
    while done < length:
        size = min(_CHUNK, length - done)
        offset = done if ascending else length - done - size
        os.pwrite(fd, os.pread(fd, size, source + offset), target + offset)
        done += size


def cut_middle(fd: int, limit: int, *, dropped: int = 0, marked: bool) -> int:
    """Keep the first ``limit // 2`` and the last ``limit - limit // 2`` bytes of the file open
    as ``fd`` (for reading and writing), once it is over ``limit``; returns the bytes dropped
    in all (``dropped``: what earlier cuts took). With ``marked``, the line that says so goes
    between them: the file is then complete. A file that was never over ``limit`` is left as it is.
    """
    size = os.fstat(fd).st_size
    dropped += max(0, size - limit)
    if not dropped:
        return 0
    head = limit // 2
    tail = min(limit - head, size - head)
    line = marker(dropped, head, tail) if marked else b""
    _move(fd, size - tail, head + len(line), tail)
    os.pwrite(fd, line, head)
    os.ftruncate(fd, head + len(line) + tail)
    return dropped


def cut_file(path: os.PathLike[str] | str, limit: int) -> int:
    """:func:`cut_middle` a finished output file at ``path``, marked; returns the bytes dropped
    (0 when it is within ``limit``, missing, or not a regular file)."""
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return 0
    try:
        # The task folder is the tool's too: what it put there in the file's place is left alone.
        return cut_middle(fd, limit, marked=True) if stat.S_ISREG(os.fstat(fd).st_mode) else 0
    finally:
        os.close(fd)
