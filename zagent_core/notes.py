"""Notes: lines a running tool appends to its ``ZAGENT_NOTIFY_FILE``.

A plain line is a note; a line that is a JSON object with a string ``text`` is a note
too, and ``"wake": true`` also wakes an idle agent. A line counts only once it ends in
a newline, so a note is never read half-written. Each note is journaled with the file
offset just after it: after a crash, reading resumes there, and every line becomes
exactly one note.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

#: A line longer than this is cut (and marked): a note is a message, not a payload.
MAX_NOTE_BYTES = 8 * 1024
#: At most this much is read per look, so a flood is journaled in bounded batches.
READ_BYTES = 256 * 1024


@dataclass(frozen=True)
class Note:
    text: str
    wake: bool
    #: Byte offset in the notify file just after this note's line.
    offset: int


def parse_line(line: bytes) -> tuple[str, bool] | None:
    """The note in one line (without its newline), or None for a blank line or empty text."""
    text = line.decode("utf-8", "replace").strip()
    wake = False
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if isinstance(value, dict) and isinstance(value.get("text"), str):
            text, wake = value["text"].strip(), value.get("wake") is True
    if not text:
        return None
    encoded = text.encode()
    if len(encoded) > MAX_NOTE_BYTES:
        text = encoded[:MAX_NOTE_BYTES].decode("utf-8", "ignore") + f" [note cut at {MAX_NOTE_BYTES} bytes]"
    return text, wake


def read_notes(path: Path, offset: int) -> list[Note]:
    """The complete lines of ``path`` after ``offset``, as notes (blank lines skipped).

    Reads at most ``READ_BYTES`` at a time: call again until it returns nothing. A line
    longer than a whole read becomes one cut note, and reading goes on after its end.
    """
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            data = handle.read(READ_BYTES)
            if b"\n" not in data and len(data) == READ_BYTES:
                # One line longer than a read: note its start, then find where it ends.
                skipped = offset + len(data)
                while True:
                    more = handle.read(READ_BYTES)
                    end = more.find(b"\n")
                    if end != -1 or not more:
                        break
                    skipped += len(more)
                if end == -1:
                    return []  # not finished yet
                parsed = parse_line(data)
                return [Note(text=parsed[0], wake=parsed[1], offset=skipped + end + 1)] if parsed else []
    except OSError:
        return []
    notes: list[Note] = []
    position = 0
    while (end := data.find(b"\n", position)) != -1:
        parsed = parse_line(data[position:end].rstrip(b"\r"))
        position = end + 1
        # A blank line is no note; the next note's offset moves past it.
        if parsed is not None:
            notes.append(Note(text=parsed[0], wake=parsed[1], offset=offset + position))
    return notes
