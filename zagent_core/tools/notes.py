"""Notes: lines a running tool appends to its ``ZAGENT_NOTIFY_FILE``.

A plain line is a note; a line that is a JSON object with a string ``text`` is a note
too, and ``"wake": true`` also wakes an idle agent. A line counts only once it ends in
a newline, so a note is never read half-written. Each note is journaled with the file
offset just after it: after a crash, reading resumes there, and every line becomes
exactly one note.

The file belongs to the tool, which may be hostile: it is opened without blocking and
read only when it is a regular file (a FIFO or a device would hang or never end), and
a flood is read in bounded batches, each byte once.
"""

from __future__ import annotations

import json
import os
import stat
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from zagent_core.tools.processes import READ_WITHOUT_BLOCKING
from zagent_core.tools.text import storable

#: A line longer than this is cut (and marked): a note is a message, not a payload.
MAX_NOTE_BYTES = 8 * 1024
#: Bytes read at once; also the most of a line read to make its note.
READ_BYTES = 256 * 1024
#: Notes per batch (one journal transaction), so a flood of short lines stays bounded too.
BATCH_NOTES = 2000
#: Bytes one call looks at, at most: blank lines and overlong lines are skipped in steps.
SCAN_BYTES = 16 * READ_BYTES
#: The offset journaled with the note that says a notify file was refused: it is never read again.
STOPPED = -1

_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISDIR, "a folder"), (stat.S_ISSOCK, "a socket"))


@dataclass(frozen=True)
class Note:
    text: str
    wake: bool
    #: Byte offset in the notify file just after this note's line.
    offset: int


@dataclass(frozen=True)
class NotesRead:
    """One batch read from a notify file."""

    notes: list[Note]
    #: The file's size when the first batch of a look was read; pass it back as ``until``.
    until: int = 0
    #: Stopped at a batch's bound before ``until``: read again (the offset moved past what was seen).
    more: bool = False
    #: Why this file is read no further (not a regular file, or past ``max_bytes``): say so once.
    stop: str | None = None


def parse_line(line: bytes) -> tuple[str, bool] | None:
    """The note in one line (without its newline), or None for a blank line or empty text."""
    text = line.decode("utf-8", "replace").strip()  # a "\r" before the newline goes too
    if not text:
        return None
    wake = False
    if text[0] == "{":
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            value = None
        if isinstance(value, dict) and isinstance(value.get("text"), str):
            text, wake = storable(value["text"]).strip(), value.get("wake") is True
            if not text:
                return None
    # A code point is at most 4 bytes: only a long text can be over the limit.
    if len(text) > MAX_NOTE_BYTES // 4 and len(encoded := text.encode()) > MAX_NOTE_BYTES:
        text = encoded[:MAX_NOTE_BYTES].decode("utf-8", "ignore") + f" [note cut at {MAX_NOTE_BYTES} bytes]"
    return text, wake


class _Positions:
    """Where reading really stands, past the last journaled note's offset.

    Blank lines and an unfinished overlong line make no note, so the journaled offset
    does not move past them; without this, every look would scan them again (a tool
    writing blank lines forever would cost quadratic time). A cache: losing it (a
    restart) only costs one more scan.
    """

    _LIMIT = 4096

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: OrderedDict[tuple[str, int, int, int], tuple[int, int]] = OrderedDict()

    def take(self, key: tuple[str, int, int, int]) -> tuple[int, int]:
        """``(line_start, scanned)``: the first byte of the unfinished line, and how far it was searched."""
        with self._lock:
            return self._known.pop(key, (key[3], key[3]))

    def keep(self, key: tuple[str, int, int, int], line_start: int, scanned: int) -> None:
        if (line_start, scanned) == (key[3], key[3]):
            return
        with self._lock:
            self._known[key] = (line_start, scanned)
            while len(self._known) > self._LIMIT:
                self._known.popitem(last=False)


_positions = _Positions()


def _refusal(path: Path, mode: int) -> str:
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    return f"the notify file {path} is {kind}, not a regular file: its notes are not read any more"


def read_notes(path: Path, offset: int, *, until: int | None = None, max_bytes: int | None = None,
               max_notes: int = BATCH_NOTES) -> NotesRead:
    """The next notes of ``path`` after ``offset`` (blank lines skipped), at most ``max_notes``.

    Only lines that end before ``until`` (the file's size at the first read of a look)
    are read, so a look always ends however fast the tool writes, and none past
    ``max_bytes``, so a flood costs a bounded amount. A line longer than a read becomes
    one cut note, and reading goes on after its end. A missing file has no notes yet;
    anything but a regular file is refused (``stop`` says what it is).
    """
    try:
        before = os.stat(path)  # refuse a FIFO before opening it: opening one may block or wake its writer
    except (OSError, ValueError):
        return NotesRead([], until or 0)
    if not stat.S_ISREG(before.st_mode):
        return NotesRead([], until or 0, stop=_refusal(path, before.st_mode))
    try:
        fd = os.open(path, READ_WITHOUT_BLOCKING)
    except OSError:
        return NotesRead([], until or 0)
    try:
        found = os.fstat(fd)  # what was opened, should the name have been swapped since
        if not stat.S_ISREG(found.st_mode):
            return NotesRead([], until or 0, stop=_refusal(path, found.st_mode))
        limit = min(found.st_size, until if until is not None else found.st_size,
                    max_bytes if max_bytes is not None else found.st_size)
        key = (str(path), found.st_dev, found.st_ino, offset)
        line_start, scanned = _positions.take(key)
        notes, line_start, scanned = _scan_notes(fd, limit, line_start, scanned, max_notes)
    except OSError:
        return NotesRead([], until or 0)
    finally:
        os.close(fd)
    # The caller journals these notes and comes back with the last one's offset.
    _positions.keep((key[0], key[1], key[2], notes[-1].offset if notes else offset), line_start, scanned)
    if scanned >= limit and max_bytes is not None and found.st_size > max_bytes and limit == max_bytes:
        return NotesRead(notes, limit, stop=(f"the notify file {path} passed {max_bytes} bytes (limits.notify_max_bytes): "
                                             "the notes after that are not read"))
    return NotesRead(notes, limit, more=scanned < limit)


def _scan_notes(fd: int, limit: int, line_start: int, scanned: int, max_notes: int) -> tuple[list[Note], int, int]:
    """The notes of the whole lines from ``line_start`` (searched for ends from ``scanned``) to ``limit``.

    Returns them with the new ``(line_start, scanned)``: where the next unfinished line
    starts, and how far it was searched.
    """
    notes: list[Note] = []
    budget = SCAN_BYTES
    while scanned < limit and budget > 0 and len(notes) < max_notes:
        data = os.pread(fd, min(READ_BYTES, limit - scanned), scanned)
        if not data:
            break
        budget -= len(data)
        last = data.rfind(b"\n")
        if last == -1:
            scanned += len(data)  # the line goes on past this read
            continue
        position = 0
        if line_start < scanned:  # the line began in an earlier read: its start, from the file
            position = data.find(b"\n") + 1
            parsed = parse_line(os.pread(fd, min(scanned + position - 1 - line_start, READ_BYTES), line_start))
            line_start = scanned + position
            if parsed is not None:
                notes.append(Note(text=parsed[0], wake=parsed[1], offset=line_start))
        else:
            position = line_start - scanned
        for line in data[position:last].split(b"\n") if position <= last else ():
            if len(notes) >= max_notes:
                break
            line_start += len(line) + 1
            parsed = parse_line(line)
            if parsed is not None:
                notes.append(Note(text=parsed[0], wake=parsed[1], offset=line_start))
        scanned = line_start if len(notes) >= max_notes else scanned + len(data)
    return notes, line_start, scanned
