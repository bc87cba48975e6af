"""The built-in ``read_file`` tool: one file, or several files and ranges, as numbered lines.

Each file read is remembered (its hash, the slice shown) for the read-before-edit gate,
and journaled with the result; a re-read of the same slice of an unchanged file is
answered with a short stub instead of the same text again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zagent_core.builtins import files
from zagent_core.builtins.base import Arguments, Builtin, BuiltinContext
from zagent_core.events import Media
from zagent_core.results import ToolResult, _attachable, _guess_mime

NAME = "read_file"
DESCRIPTION = (
    "Read a text file as numbered lines (like cat -n), or several files and line ranges in one call. "
    f"At most {files.DEFAULT_LINE_LIMIT} lines and {files.READ_BYTE_CAP // 1024} KiB are shown; a footer says how "
    "to read the rest (offset). Binary files are answered with a marker; images are attached for you to see. "
    "Read a file before you edit or overwrite it."
)
_RANGE: dict[str, Any] = {
    "offset": {"type": "integer", "minimum": 1, "description": "The line to start at (1-based; default 1)."},
    "limit": {"type": "integer", "minimum": 1,
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
#: Lines are skipped (to an ``offset``) this many bytes at a time.
_SKIP_CHUNK = 64 * 1024


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
    path = files.target(context, shown)
    data = files.read_bytes(path, shown)
    offset = int(request.get("offset", 1))
    limit = int(request.get("limit", files.DEFAULT_LINE_LIMIT))
    before = context.seen(path)
    if (before is not None and not before.elided and before.offset == offset and before.limit == limit
            and before.line_numbers == line_numbers and before.hash == files.content_hash(data)):
        return f"{shown}: unchanged since your read at {before.at}; what that read showed is still current"
    output = _render(path, shown, data, offset, limit, line_numbers, context, reading)
    files.remember_read(context, path, data, offset, limit, line_numbers)
    return output


def _render(path: Path, shown: str, data: bytes, offset: int, limit: int, line_numbers: bool,
            context: BuiltinContext, reading: _Reading) -> str:
    mime = _guess_mime(path)
    if mime and mime.startswith("image/"):
        attach, why_not = _attachable(mime, len(data), context.config.capabilities, context.config.limits)
        if attach:
            reading.media.append(Media(path=str(path), mime=mime, size=len(data)))
            return f"[image: {shown} ({len(data)} bytes, {mime}), attached for you to see]"
        return f"[image: {shown} ({len(data)} bytes, {mime}); {why_not}]"
    if files.looks_binary(data):
        kind = f", {mime}" if mime and not mime.startswith("text/") else ""
        return f"[binary file: {shown} ({len(data)} bytes{kind}); not shown as text]"
    if not data:
        return f"({shown} is empty)"
    if reading.budget <= 0:
        raise files.FileProblem(f"not shown: the files before it filled the {files.READ_BYTE_CAP // 1024} KiB cap "
                                "of one read; read it in another call")
    return _slice(data, shown, offset, limit, line_numbers, reading)


def _after_lines(data: bytes, count: int, start: int) -> int:
    """Where the line ``count`` lines after the one at ``start`` begins (the end of ``data`` at most)."""
    while count > 0 and start < len(data):
        # Whole chunks are skipped by counting their newlines in C; the last one line by line.
        chunk_end = min(start + _SKIP_CHUNK, len(data))
        newlines = data.count(b"\n", start, chunk_end)
        if newlines < count and chunk_end < len(data):
            count, start = count - newlines, chunk_end
            continue
        for _ in range(count):
            found = data.find(b"\n", start)
            if found < 0:
                return len(data)
            start = found + 1
        return start
    return start if count == 0 else len(data)


def _lines(text: str) -> list[str]:
    """The lines of ``text``, each with its ``\\n`` (the edit tools number lines by ``\\n`` too)."""
    lines = text.split("\n")
    last = lines.pop()
    lines = [line + "\n" for line in lines]
    if last:
        lines.append(last)
    return lines


def _line_count(data: bytes) -> int:
    return data.count(b"\n") + (not data.endswith(b"\n"))


def _slice(data: bytes, shown: str, offset: int, limit: int, line_numbers: bool, reading: _Reading) -> str:
    # Only the lines shown are decoded: a read of a large file costs little more than reading it.
    start = _after_lines(data, offset - 1, 0)
    if start >= len(data):
        total = _line_count(data)
        raise files.FileProblem(f"offset {offset} is past the end of {shown}, which has {total} lines; "
                                f"use an offset from 1 to {total}")
    # No more than the cap can be shown: the lines are looked for in a window of that size.
    window = data[start:start + files.READ_BYTE_CAP + 1]
    pieces = window.split(b"\n", limit)
    if len(pieces) > limit:
        window = window[:len(window) - len(pieces[-1])]
    end = start + len(window)
    chosen = _lines(window.decode("utf-8", "replace"))
    body = files.numbered(chosen, offset) if line_numbers else "".join(chosen)
    encoded = body.encode("utf-8")
    last = offset + len(chosen) - 1
    if len(encoded) > reading.budget:
        body, kept = _cut(chosen, offset, line_numbers, reading.budget)
        reading.budget = 0
        if kept == 0:
            newline = data.find(b"\n", start)
            size = (newline + 1 if newline >= 0 else len(data)) - start
            cap = f"the {files.READ_BYTE_CAP // 1024} KiB cap of one read"
            return (f"{body}[line {offset} is {size} bytes and was cut at {cap}; the rest of that line is not "
                    "shown: search it with grep, or cut it with shell]")
        last = offset + kept - 1
        end = _after_lines(data, kept, start)
        more = f" (the {files.READ_BYTE_CAP // 1024} KiB cap of one read was reached)"
    else:
        reading.budget -= len(encoded)
        more = ""
    body = body[:-1] if body.endswith("\n") else body
    if end >= len(data):
        return body
    return f"{body}\n[lines {offset}-{last} of {_size_of(data)} shown{more}; read on with offset {last + 1}]"


def _size_of(data: bytes) -> str:
    """The file's length for a footer: in lines, unless counting them would cost more than the read."""
    if len(data) <= _COUNTED_BYTES:
        return str(_line_count(data))
    return f"a {len(data) / 2**20:.1f} MiB file"


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
