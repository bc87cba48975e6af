"""The Python search: ``grep``'s search where there is no ripgrep, run in a process of its own.

``python -m zagent_core.builtins.grep_python`` reads a query (JSON) on stdin, and the folder it
searches as a descriptor it was handed (a confined search walks from descriptors, see
``beneath.py``), and writes what it finds on stdout as it finds it, one JSON item a line;
``grep`` runs it as it runs ripgrep, reading until it has what it shows, and kills it at the
timeout. In a process of its own
because Python's ``re`` backtracks, and holds the interpreter's lock while it does: a pattern
like ``^(a+)+$`` against a line of ``a``s would hold the engine (and every thread of it) for
hours, where here it holds a process that is killed.

Memory is bounded whatever the files hold. A file is read 1 MiB at a time
(:data:`READ_BYTES`), each batch of lines searched at once first (most rule themselves out);
a line longer than :data:`LINE_BYTES` (16 MiB) is searched in its first 16 MiB, and with
``multiline`` (where a match may span lines, and ripgrep too reads each file whole) a file
is searched in its first 16 MiB. A file with a NUL byte anywhere is binary and skipped, as
before; what ripgrep would search is searched the same way (``tests/test_builtin_search_property.py``).

This module imports nothing of zagent's but the walk (:mod:`~zagent_core.builtins.search`),
so the process starts in about as long as Python does.
"""

from __future__ import annotations

import bisect
import json
import os
import re
import stat
import sys
from collections import deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import IO, Any, Literal

from zagent_core.builtins.beneath import FolderMoved
from zagent_core.builtins.search import Filters, Found, GlobError, walk

Mode = Literal["files_with_matches", "content", "count"]

#: Bytes read at once, and searched at once before line by line.
READ_BYTES = 1 << 20
#: A longer line is searched in its first this many bytes; with ``multiline``, a longer file.
LINE_BYTES = 16 << 20
#: Characters of one matching line shown; the rest is counted, not shown.
MAX_LINE_CHARS = 500


class SearchError(ValueError):
    """A search that cannot run; the message is the model's."""


@dataclass(frozen=True)
class Query:
    pattern: str
    #: The folder searched, or the one file.
    root: str
    root_is_file: bool
    #: Where the search reads from (see ``beneath.py``): the folder searched, open, or the one
    #: file's folder (and ``name``, its name there). The caller's to close; the search's
    #: process is handed it, under the same number.
    folder: int
    name: str = ""
    mode: Mode = "files_with_matches"
    filters: Filters = Filters()
    ignore_case: bool = False
    multiline: bool = False
    before: int = 0
    after: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> Query:
        fields = json.loads(text)
        filters = fields.pop("filters")
        return cls(**fields, filters=Filters(globs=tuple(filters["globs"]), file_type=filters["file_type"]))


@dataclass(frozen=True)
class Line:
    """A line of content-mode output: a match or context line, or ``number == 0`` for a ``--`` gap."""

    path: str
    number: int
    text: str
    is_match: bool
    #: The whole line's length in characters (less a ``\r`` ending it), when ``text`` holds only its start.
    length: int | None = None


#: What a search yields: a path (files mode), ``(path, count)`` (count mode) or a :class:`Line`.
Item = str | tuple[str, int] | Line


def compile_pattern(query: Query) -> re.Pattern[str]:
    """The query's regular expression, or a :class:`SearchError` that says what is wrong in it."""
    if not query.multiline and ("\n" in query.pattern or "\\n" in query.pattern):
        raise SearchError(f"the pattern {query.pattern!r} matches a line break, and lines are searched one "
                          "by one; set multiline: true to let a match span lines")
    flags = (re.IGNORECASE if query.ignore_case else 0) | re.MULTILINE
    if query.multiline:
        flags |= re.DOTALL
    try:
        return re.compile(query.pattern, flags)
    except re.error as exc:
        where = f" at position {exc.pos}" if exc.pos is not None else ""
        raise SearchError(
            f"the pattern {query.pattern!r} is not a valid regular expression: {exc.msg}{where}") from None
    except (OverflowError, RecursionError):
        raise SearchError(f"the pattern {query.pattern!r} is too large or nested to compile") from None


def _line(path: str, number: int, text: str, is_match: bool) -> Line:
    """A line as it is sent: its start only when it is longer than is ever shown."""
    if len(text) <= MAX_LINE_CHARS + 1:
        return Line(path, number, text, is_match)
    return Line(path, number, text[:MAX_LINE_CHARS + 1], is_match, len(text.rstrip("\r")))


def _matching_lines(regex: re.Pattern[str], text: str, lines: list[str]) -> list[int]:
    """The (0-based) numbers of the lines a multiline match touches."""
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    # A match may take the last line's "\n", but one that starts after it (an empty match at the
    # very end) is on no line.
    end = starts[-1] + len(lines[-1])
    touched: set[int] = set()
    for match in regex.finditer(text):
        if match.start() > end:
            break
        first = bisect.bisect_right(starts, match.start()) - 1
        last = bisect.bisect_right(starts, max(match.end() - 1, match.start())) - 1
        touched.update(range(first, min(last, len(lines) - 1) + 1))
    return sorted(touched)


def _with_context(path: str, lines: list[str], matched: list[int], before: int, after: int) -> Iterator[Line]:
    shown = -1
    is_match = set(matched)
    for index in matched:
        start = max(index - before, shown + 1)
        for number in range(start, min(index + after, len(lines) - 1) + 1):
            if number <= shown:
                continue
            yield _line(path, number + 1, lines[number], number in is_match)
            shown = number


def _multiline(regex: re.Pattern[str], query: Query, relative: str, data: bytes) -> Iterator[Item]:
    """The items of one file (its first :data:`LINE_BYTES`) searched whole: a match may span lines."""
    whole = data.decode("utf-8", errors="replace")
    # Lines end at "\n": the one ending the file does not start an empty line.
    text = whole[:-1] if whole.endswith("\n") else whole
    if regex.search(whole) is None:
        return
    lines = text.split("\n")
    matched = _matching_lines(regex, whole, lines)
    if not matched:
        return
    if query.mode == "files_with_matches":
        yield relative
    elif query.mode == "count":
        yield relative, len(matched)
    else:
        yield from _with_context(relative, lines, matched, query.before, query.after)


class _Lines:
    """Searches one file line by line, a batch of lines at a time, keeping only what context needs."""

    def __init__(self, regex: re.Pattern[str], query: Query, relative: str) -> None:
        self.regex, self.query, self.relative = regex, query, relative
        self.number = 0
        self.count = 0
        #: The lines before the next one, as many as ``-B`` may show (their starts only).
        self.before: deque[Line] = deque(maxlen=query.before)
        #: Lines after the last match still to show as its context.
        self.after = 0
        self.done = False

    def feed(self, block: str) -> Iterator[Item]:
        """The items of the next lines of the file (``block``: whole lines, ``\\n`` between them)."""
        if not self.after and self.regex.search(block) is None:
            # One search of the batch rules out most of them (it may match across its lines
            # where a line alone does not: those are searched line by line).
            self.number += block.count("\n") + 1
            if self.query.before:
                kept = block.rsplit("\n", self.query.before)[-self.query.before:]
                self.before.extend(_line(self.relative, self.number - len(kept) + offset + 1, line, False)
                                   for offset, line in enumerate(kept))
            return
        for line in block.split("\n"):
            self.number += 1
            yield from self._one(line)
            if self.done:
                return

    def _one(self, line: str) -> Iterator[Item]:
        matched = self.regex.search(line) is not None
        if self.query.mode == "files_with_matches":
            if matched:
                self.done = True
                yield self.relative
            return
        if self.query.mode == "count":
            self.count += matched
            return
        shown = _line(self.relative, self.number, line, matched)
        if matched:
            yield from self.before
            self.before.clear()
            yield shown
            self.after = self.query.after
        elif self.after:
            self.after -= 1
            yield shown
        elif self.query.before:
            self.before.append(shown)

    def end(self) -> Iterator[Item]:
        if self.query.mode == "count" and self.count:
            yield self.relative, self.count


#: How a file a walk found is opened: a link swapped in since is not followed, a FIFO not waited on.
_OPEN = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC


def _has_nul(handle: IO[bytes]) -> bool:
    """Whether the rest of the file holds a NUL byte (read a batch at a time; the position is kept)."""
    start = handle.tell()
    try:
        while chunk := handle.read(READ_BYTES):
            if b"\0" in chunk:
                return True
        return False
    finally:
        handle.seek(start)


def _batches(handle: IO[bytes], first: bytes) -> Iterator[str]:
    """The file's lines (``first`` its start), decoded, in blocks of whole lines of about
    :data:`READ_BYTES`, ``\\n`` between them; a line longer than :data:`LINE_BYTES` is cut there."""
    pending = b""  # the start of the line the next chunk goes on with
    skipping = False  # in the rest of a line that was cut
    chunk = first
    while chunk:
        newline = chunk.find(b"\n")
        if skipping:
            skipping = newline == -1
            chunk = chunk[newline + 1:] if newline != -1 else b""
        elif len(pending) + (len(chunk) if newline == -1 else newline) > LINE_BYTES:
            yield (pending + chunk)[:LINE_BYTES].decode("utf-8", errors="replace")
            pending, skipping = b"", True
            continue  # this chunk again, from where the cut line ends
        else:
            buffer = pending + chunk
            last = buffer.rfind(b"\n")
            if last != -1:
                yield buffer[:last].decode("utf-8", errors="replace")
            pending, chunk = buffer[last + 1:], b""
        chunk = chunk or handle.read(READ_BYTES)
    if pending:
        yield pending.decode("utf-8", errors="replace")


def _search_file(regex: re.Pattern[str], query: Query, file: Found) -> Iterator[Item]:
    """The items of a file the walk found, read from its folder's descriptor (a link or a FIFO
    swapped in for it since is not followed, nor waited on)."""
    try:
        fd = os.open(file.name, _OPEN, dir_fd=file.folder)
    except OSError:
        return
    with os.fdopen(fd, "rb") as handle:
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return
            first = handle.read(READ_BYTES)
            if not first or b"\0" in first or (len(first) == READ_BYTES and _has_nul(handle)):
                return
            if query.multiline:
                yield from _multiline(regex, query, file.relative, first + handle.read(LINE_BYTES - len(first)))
                return
            lines = _Lines(regex, query, file.relative)
            for batch in _batches(handle, first):
                yield from lines.feed(batch)
                if lines.done:
                    return
            yield from lines.end()
        except OSError:
            return


def search(query: Query) -> Iterator[Item]:
    """The items of ``query``: the files of :func:`search.walk`, in its order."""
    regex = compile_pattern(query)
    found = (iter([Found(os.path.basename(query.root), query.folder, query.name)]) if query.root_is_file
             else walk(query.folder, query.root, query.filters))
    for file in found:
        yield from _search_file(regex, query, file)


def encode(item: Item) -> str:
    """One item as the line this process writes (a name that is not UTF-8 keeps its lone surrogate)."""
    if isinstance(item, Line):
        return json.dumps([item.path, item.number, item.text, item.is_match, item.length])
    return json.dumps(list(item) if isinstance(item, tuple) else item)


def decode(record: bytes) -> Item:
    """The item a line this process wrote stands for; raises :class:`SearchError` for the error it reports."""
    value: Any = json.loads(record)
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        raise SearchError(value["error"])
    if len(value) == 2:
        return value[0], value[1]
    return Line(*value)


def main() -> None:
    query = Query.from_json(sys.stdin.buffer.read())
    out = sys.stdout
    try:
        for item in search(query):
            out.write(encode(item) + "\n")
    except (SearchError, GlobError) as exc:
        out.write(json.dumps({"error": str(exc)}) + "\n")
    except FolderMoved as exc:
        out.write(json.dumps({"error": f"the search stopped: {exc.filename}: {exc.strerror}; search again"}) + "\n")
    except BrokenPipeError:  # grep has what it shows, and closed the pipe
        os._exit(0)
    out.flush()


if __name__ == "__main__":
    main()
