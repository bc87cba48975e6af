"""The built-in ``read_file`` tool: one file, or several files and ranges, as numbered lines.

Each file read is remembered (its hash, the slice shown) for the read-before-edit gate,
and journaled with the result; a re-read of the same slice of an unchanged file is
answered with a short stub instead of the same text again.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zagent_core.builtins import files
from zagent_core.journal.events import Media
from zagent_core.tools.inprocess import Arguments, Builtin, BuiltinContext
from zagent_core.tools.results import ToolResult, _attachable, _guess_mime

NAME = "read_file"
DESCRIPTION = (
    "Read a text file as numbered lines (like cat -n), or several files and line ranges in one call. "
    f"At most {files.DEFAULT_LINE_LIMIT} lines and {files.READ_BYTE_CAP // 1024} KiB are shown; a footer says how "
    "to read the rest (offset). Binary files are answered with a marker; images are attached for you to see. "
    "Read a file before you edit or overwrite it."
)
#: The largest offset or limit a call may give (larger ones overflow C integers in the slicing).
_MAX_LINES = 2**31 - 1
_RANGE: dict[str, Any] = {
    "offset": {"type": "integer", "minimum": 1, "maximum": _MAX_LINES, "description": "The line to start at (1-based; default 1)."},
    "limit": {"type": "integer", "minimum": 1, "maximum": _MAX_LINES,
              "description": f"How many lines to show at most (default {files.DEFAULT_LINE_LIMIT})."},
}
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": files.PATH_PARAMETER,
        **_RANGE,
        "line_numbers": {"type": "boolean", "description": "Prefix each line with its number (default true)."},
        "files": {
            "type": "array", "minItems": 1, "maxItems": 50,
            "description": "Several files or ranges in one call, instead of path (each with its own offset/limit).",
            "items": {"type": "object", "properties": {"path": files.PATH_PARAMETER, **_RANGE},
                      "required": ["path"], "additionalProperties": False},
        },
    },
    "additionalProperties": False,
}


#: Files up to this size get their lines counted for the footer ("of N"); larger ones are
#: given in MiB: counting 100k lines costs as much as reading them.
_COUNTED_BYTES = 1024 * 1024
#: Files that say they are at most this large are read whole, as a stream (see :class:`_Source`).
_READ_WHOLE_BYTES = 1024 * 1024
#: Lines are skipped (to an ``offset``) this many bytes at a time.
_SKIP_CHUNK = 64 * 1024


@dataclass(frozen=True)
class _Source:
    """A regular file open for reading, read by ranges: a large file is never loaded whole.

    A small one is read whole, as a stream, into ``data``: the size of a file of ``/proc`` or
    ``/sys`` says nothing (0, or 4096, whatever it holds), as the kernel makes it when it is
    read, so it is read to its end (up to :data:`files.WHOLE_FILE_CAP`) and then its hash and
    its slices see the same bytes.
    """

    fd: int
    size: int
    data: bytes | None = None

    @classmethod
    def of(cls, fd: int, size: int, shown: str) -> _Source:
        if size > _READ_WHOLE_BYTES:
            return cls(fd, size)
        data = bytearray()
        while len(data) <= files.WHOLE_FILE_CAP and (chunk := os.read(fd, files.STREAM_CHUNK)):
            data += chunk
        if len(data) > files.WHOLE_FILE_CAP:
            raise files.FileProblem(f"{shown} says it has no size but goes on past {files.WHOLE_FILE_CAP // 2**20} "
                                    "MiB (a file the kernel makes as it is read); look at it with shell (head)")
        return cls(fd, len(data), bytes(data))

    def read(self, start: int, count: int) -> bytes:
        if self.data is not None:
            return self.data[start:start + count]
        return os.pread(self.fd, count, start)

    def chunks(self, start: int = 0) -> Iterator[bytes]:
        while start < self.size and (chunk := self.read(start, files.STREAM_CHUNK)):
            yield chunk
            start += len(chunk)

    def digest(self) -> str:
        """What the read-before-edit gate and a re-read compare: the content hash of a file the
        edit tools may load (``files.WHOLE_FILE_CAP``). A larger one is never hashed (a 20 GiB
        sparse file took 118 s to hash, for an answer its first bytes gave): it is known by its
        inode, size and times, which tell a re-read that it changed, and the gate never reads it."""
        return files.stream_hash(self.hashed())

    def hashed(self) -> Iterable[bytes]:
        """The bytes :meth:`digest` hashes."""
        if self.size <= files.WHOLE_FILE_CAP:
            return self.chunks()
        info = os.fstat(self.fd)
        return (f"{info.st_dev}:{info.st_ino}:{info.st_size}:{info.st_mtime_ns}:{info.st_ctime_ns}".encode(),)


@dataclass
class _Reading:
    """What one call has shown so far (the byte cap is shared by its files)."""

    budget: int = files.READ_BYTE_CAP
    media: list[Media] = field(default_factory=list)


def run(context: BuiltinContext, arguments: Arguments) -> ToolResult:
    """Carry out one validated read_file call."""
    line_numbers = bool(arguments.get("line_numbers", True))
    if "files" in arguments:
        if "path" in arguments:
            return files.error("give either path or files, not both")
        requests = arguments["files"]
    elif "path" in arguments:
        requests = [arguments]
    else:
        return files.error('read_file needs "path" (one file) or "files" (several files or ranges)')
    reading = _Reading()
    sections: list[str] = []
    failed = 0
    for request in requests:
        try:
            text = _read_one(context, reading, request, line_numbers)
        except files.FileProblem as exc:
            text, failed = str(exc), failed + 1
        sections.append(text if "files" not in arguments else f"==> {request['path']} <==\n{text}")
    return ToolResult(output="\n\n".join(sections), is_error=failed == len(requests), media=reading.media)


def _read_one(context: BuiltinContext, reading: _Reading, request: dict[str, Any], line_numbers: bool) -> str:
    shown = request["path"]
    offset = int(request.get("offset", 1))
    limit = int(request.get("limit", files.DEFAULT_LINE_LIMIT))
    with files.located(context, shown, "read") as where, files.open_regular(where, shown, "read") as (fd, size):
        path = where.key
        source = _Source.of(fd, size, shown)
        digest = source.digest()
        before = context.seen(path)
        if (before is not None and not before.elided and before.offset == offset and before.limit == limit
                and before.line_numbers == line_numbers
                and files.same_content(before.hash, digest, source.hashed)):
            return f"{shown}: unchanged since your read at {before.at}; what that read showed is still current"
        output, shown_lines = _render(path, shown, source, offset, limit, line_numbers, context, reading)
    # A read cut by the byte cap is remembered as the lines it showed, so a re-read is not a stub hiding the rest.
    files.remember_read(context, path, digest, offset, shown_lines, line_numbers)
    return output


def _render(path: Path, shown: str, source: _Source, offset: int, limit: int, line_numbers: bool,
            context: BuiltinContext, reading: _Reading) -> tuple[str, int]:
    """The text shown, and the lines the model saw whole (``limit`` unless the byte cap cut the read)."""
    mime = _guess_mime(path)
    size = source.size
    if mime and mime.startswith("image/"):
        attach, why_not = _attachable(mime, size, context.config.capabilities, context.config.limits)
        if attach:
            reading.media.append(Media(path=str(path), mime=mime, size=size))
            return f"[image: {shown} ({size} bytes, {mime}), attached for you to see]", limit
        return f"[image: {shown} ({size} bytes, {mime}); {why_not}]", limit
    if files.looks_binary(source.read(0, files.BINARY_SAMPLE)):
        kind = f", {mime}" if mime and not mime.startswith("text/") else ""
        return f"[binary file: {shown} ({size} bytes{kind}); not shown as text]", limit
    if not size:
        return f"({shown} is empty)", limit
    if reading.budget <= 0:
        raise files.FileProblem(f"not shown: the files before it filled the {files.READ_BYTE_CAP // 1024} KiB cap "
                                "of one read; read it in another call")
    return _slice(source, shown, offset, limit, line_numbers, reading)


def _after_lines(source: _Source, count: int, start: int) -> int:
    """Where the line ``count`` lines after the one at ``start`` begins (the end of the file at most)."""
    while count > 0 and start < source.size:
        # Whole chunks are skipped by counting their newlines in C; the last one line by line.
        chunk = source.read(start, _SKIP_CHUNK)
        if not chunk:
            break
        newlines = chunk.count(b"\n")
        if newlines < count:
            count, start = count - newlines, start + len(chunk)
            continue
        found = -1
        for _ in range(count):
            found = chunk.find(b"\n", found + 1)
        return start + found + 1
    return min(start, source.size) if count == 0 else source.size


def _lines(text: str) -> list[str]:
    """The lines of ``text``, each with its ``\\n`` (the edit tools number lines by ``\\n`` too)."""
    lines = text.split("\n")
    last = lines.pop()
    lines = [line + "\n" for line in lines]
    if last:
        lines.append(last)
    return lines


def _line_count(source: _Source) -> int:
    newlines = sum(chunk.count(b"\n") for chunk in source.chunks())
    return newlines + (source.read(source.size - 1, 1) != b"\n")


def _slice(source: _Source, shown: str, offset: int, limit: int, line_numbers: bool,
           reading: _Reading) -> tuple[str, int]:
    # Only the lines shown are decoded: a read of a large file costs little more than reading it.
    start = _after_lines(source, offset - 1, 0)
    if start >= source.size:
        total = _line_count(source)
        raise files.FileProblem(f"offset {offset} is past the end of {shown}, which has {total} lines; "
                                f"use an offset from 1 to {total}")
    # No more than the cap can be shown: the lines are looked for in a window of that size.
    window = source.read(start, files.READ_BYTE_CAP + 1)
    pieces = window.split(b"\n", limit)
    if len(pieces) > limit:
        window = window[:len(window) - len(pieces[-1])]
    end = start + len(window)
    chosen = _lines(window.decode("utf-8", "replace"))
    body = files.numbered(chosen, offset) if line_numbers else "".join(chosen)
    encoded = body.encode("utf-8")
    last = offset + len(chosen) - 1
    seen = limit
    if len(encoded) > reading.budget:
        body, kept = _cut(chosen, offset, line_numbers, reading.budget)
        reading.budget = 0
        if kept == 0:
            size = _after_lines(source, 1, start) - start
            cap = f"the {files.READ_BYTE_CAP // 1024} KiB cap of one read"
            # Not even one line was seen whole: 0 matches no later read, so none of them is a stub.
            return (f"{body}[line {offset} is {size} bytes and was cut at {cap}; the rest of that line is not "
                    "shown: search it with grep, or cut it with shell]"), 0
        last = offset + kept - 1
        end = _after_lines(source, kept, start)
        more = f" (the {files.READ_BYTE_CAP // 1024} KiB cap of one read was reached)"
        seen = kept
    else:
        reading.budget -= len(encoded)
        more = ""
    body = body[:-1] if body.endswith("\n") else body
    if end >= source.size:
        return body, seen
    return f"{body}\n[lines {offset}-{last} of {_size_of(source)} shown{more}; read on with offset {last + 1}]", seen


def _size_of(source: _Source) -> str:
    """The file's length for a footer: in lines, unless counting them would cost more than the read."""
    if source.size <= _COUNTED_BYTES:
        return str(_line_count(source))
    return f"a {source.size / 2**20:.1f} MiB file"


def _cut(chosen: list[str], offset: int, line_numbers: bool, budget: int) -> tuple[str, int]:
    """The whole lines of ``chosen`` that fit in ``budget`` bytes, and how many; when not even
    the first fits, as much of it as does (and 0)."""
    parts: list[str] = []
    used = 0
    for number, line in enumerate(chosen, start=offset):
        part = f"{number:>6}\t{line}" if line_numbers else line
        size = len(part.encode("utf-8"))
        if used + size > budget:
            break
        parts.append(part)
        used += size
    if parts:
        return "".join(parts), len(parts)
    first = f"{offset:>6}\t{chosen[0]}" if line_numbers else chosen[0]
    return first.encode("utf-8")[:budget].decode("utf-8", "ignore") + "\n", 0


TOOL = Builtin(
    name=NAME, description=DESCRIPTION, parameters=PARAMETERS, run=run,
    concurrency_safe=True,
    # It only reads: after a crash it is run again.
    replay="safe",
)
