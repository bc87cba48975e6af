"""The built-in ``grep`` tool: search file contents with a regular expression.

It runs ripgrep when ``rg`` is found (on ``PATH``, or beside the interpreter, where pip
installs it) and a Python search otherwise; both look at the same files (see
``search.py``) in the same order and print the same lines, so a session reads the same
whichever ran. ``ZAGENT_RG`` names the ``rg`` to use, or ``none`` for the Python search.

Output is paged on *lines* (``head_limit``, ``offset``), each line is clipped, and the
whole is byte-capped: ripgrep is line-oriented, so a minified one-line file is one match
line as long as the file, and a line budget alone would hand the model megabytes.
"""

from __future__ import annotations

import bisect
import os
import re
import select
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from zagent_core.builtins import files
from zagent_core.builtins.beneath import FolderMoved, Place
from zagent_core.builtins.search import (
    FILE_TYPES,
    Filters,
    Found,
    GlobError,
    cannot,
    compile_glob,
    existing_path,
    pattern_parameters,
    shown_path,
    sort_key,
    walk,
)
from zagent_core.tools.inprocess import Arguments, Builtin, BuiltinContext
from zagent_core.tools.results import ToolResult
from zagent_core.tools.text import storable

Mode = Literal["files_with_matches", "content", "count"]

NAME = "grep"
DEFAULT_HEAD_LIMIT = 250
#: Characters of one matching line shown; the rest is counted, not shown.
MAX_LINE_CHARS = 500
#: Bytes of a file's start in which a NUL makes it binary (ripgrep's first buffer).
BINARY_SAMPLE = 64 * 1024

DESCRIPTION = (
    "Search file contents with a regular expression (ripgrep syntax), in a folder or one file. "
    "Respects .gitignore and skips hidden files. output_mode: files_with_matches (default: the paths), "
    "content (matching lines, path:line:text, with -A/-B/-C context) or count (path:N). "
    "Filter files with glob (e.g. \"*.py\", \"**/*.{ts,tsx}\") or type (e.g. \"py\"). "
    f"Output is paged: head_limit lines (default {DEFAULT_HEAD_LIMIT}) from offset."
)
PARAMETERS: dict[str, Any] = pattern_parameters(
    "The regular expression to search for.", "The folder or file to search (default: the workspace).", {
        "glob": {"type": "string", "description": "Only files matching this glob (\"*.js\", \"src/**/*.py\"); "
                                                  "\"!x\" excludes. Overrides .gitignore for what it matches."},
        "type": {"type": "string", "enum": sorted(FILE_TYPES), "description": "Only files of this type."},
        "output_mode": {"type": "string", "enum": ["files_with_matches", "content", "count"],
                        "description": "files_with_matches (default), content or count."},
        "-i": {"type": "boolean", "description": "Case-insensitive search."},
        "-n": {"type": "boolean", "description": "Line numbers in content mode (default true)."},
        "-A": {"type": "integer", "minimum": 0, "description": "Lines of context after each match (content mode)."},
        "-B": {"type": "integer", "minimum": 0, "description": "Lines of context before each match (content mode)."},
        "-C": {"type": "integer", "minimum": 0, "description": "Lines of context before and after (content mode)."},
        "multiline": {"type": "boolean", "description": "Let the pattern span lines; . matches a line break too."},
        "head_limit": {"type": "integer", "minimum": 0,
                       "description": f"Output lines to show (default {DEFAULT_HEAD_LIMIT}; 0: no line limit). "
                                      "Context lines and -- separators count."},
        "offset": {"type": "integer", "minimum": 0, "description": "Output lines to skip first, to page on."},
    },
)


class SearchError(ValueError):
    """A search that cannot run; the message is the model's."""


@dataclass(frozen=True)
class Query:
    pattern: str
    #: The folder searched, or the one file.
    root: str
    root_is_file: bool
    #: Where the Python search reads from (see ``beneath.py``): the folder searched, open, or the one
    #: file's folder (and ``name``, its name there). The caller's to close.
    folder: int
    name: str = ""
    mode: Mode = "files_with_matches"
    filters: Filters = Filters()
    ignore_case: bool = False
    multiline: bool = False
    before: int = 0
    after: int = 0


@dataclass(frozen=True)
class Line:
    """A line of content-mode output: a match or context line, or ``number == 0`` for a ``--`` gap."""

    path: str
    number: int
    text: str
    is_match: bool


#: What a search yields: a path (files mode), ``(path, count)`` (count mode) or a :class:`Line`.
Item = str | tuple[str, int] | Line


# -- the Python search -----------------------------------------------------------------


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


def _matching_lines(regex: re.Pattern[str], text: str, lines: list[str], multiline: bool) -> list[int]:
    """The (0-based) numbers of the lines a match touches."""
    if not multiline:
        search = regex.search
        return [index for index, line in enumerate(lines) if search(line)]
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
            yield Line(path, number + 1, lines[number], number in is_match)
            shown = number


def _too_long(timeout: float) -> SearchError:
    return SearchError(f"the search took longer than {timeout:g} s and was stopped; search a smaller folder or "
                       "narrow it with glob or type")


def _contents(file: Found) -> bytes | None:
    """The bytes of a regular file the walk found, read from its folder's descriptor (a link or a FIFO
    swapped in for it since is not followed, nor waited on); None when it cannot be read."""
    try:
        fd = os.open(file.name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=file.folder)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        try:
            return handle.read() if stat.S_ISREG(os.fstat(fd).st_mode) else None
        except OSError:
            return None


def python_search(query: Query, timeout: float) -> Iterator[Item]:
    """Search with Python's ``re``: the files of :func:`search.walk`, in its order."""
    regex = compile_pattern(query)
    found = (iter([Found(os.path.basename(query.root), query.folder, query.name)]) if query.root_is_file
             else walk(query.folder, query.root, query.filters))
    deadline = time.monotonic() + timeout
    for file in found:
        if time.monotonic() > deadline:
            raise _too_long(timeout)
        data = _contents(file)
        if not data or b"\0" in data:
            continue
        relative = file.relative
        whole = data.decode("utf-8", errors="replace")
        # Lines end at "\n": the one ending the file does not start an empty line.
        text = whole[:-1] if whole.endswith("\n") else whole
        # One search of the whole text rules out most files; it can match across lines where a
        # line-by-line search does not, so a hit is checked line by line.
        if regex.search(whole if query.multiline else text) is None:
            continue
        lines = text.split("\n")
        if query.mode == "files_with_matches" and not query.multiline:
            if any(regex.search(line) for line in lines):
                yield relative
            continue
        matched = _matching_lines(regex, whole, lines, query.multiline)
        if not matched:
            continue
        if query.mode == "files_with_matches":
            yield relative
            continue
        if query.mode == "count":
            yield relative, len(matched)
        else:
            yield from _with_context(relative, lines, matched, query.before, query.after)


# -- ripgrep ---------------------------------------------------------------------------


def find_rg() -> str | None:
    """The ``rg`` to run: ``ZAGENT_RG``, else on ``PATH``, else beside the interpreter; ``None``: use Python."""
    chosen = os.environ.get("ZAGENT_RG")
    if chosen is not None:
        return None if chosen.lower() in ("", "none") else chosen
    beside = Path(sys.executable).parent / "rg"
    return shutil.which("rg") or (str(beside) if os.access(beside, os.X_OK) else None)


#: Matching files whose lines one ``rg`` run prints, at most (the list is its command line).
FILES_PER_RUN = 500
#: Content of one search sorted in memory, at most; more is read again in order, as far as shown.
#: A call shows 32 KiB by default: past a few times that, reading again in order is the cheaper way.
CONTENT_BUFFER = 256 * 1024


def rg_argv(rg: str, query: Query, mode: Mode, paths: Sequence[str] = ()) -> list[str]:
    """The ripgrep command of ``query`` in ``mode``, over ``paths`` (none: the folder, with all
    threads; else those files in that order, on one thread), with every source of rules but
    ``.gitignore`` turned off, so it looks at the files :func:`search.walk` does."""
    argv = [rg, "--no-config", "--no-ignore-dot", "--no-ignore-global", "--no-ignore-exclude",
            "--no-messages", "--color=never", "--null", "--with-filename"]
    argv.append({"files_with_matches": "--files-with-matches", "count": "--count", "content": "--line-number"}[mode])
    if paths:
        argv.append("--threads=1")
    if mode == "content":
        if query.before or query.after:
            argv += [f"--before-context={query.before}", f"--after-context={query.after}"]
    if query.ignore_case:
        argv.append("--ignore-case")
    if query.multiline:
        argv += ["--multiline", "--multiline-dotall"]
    for glob in query.filters.globs:
        argv.append(f"--glob={glob}")
    if query.filters.file_type is not None:
        name = query.filters.file_type
        argv.append(f"--type-clear={name}")
        argv += [f"--type-add={name}:{glob}" for glob in FILE_TYPES[name]]
        argv.append(f"--type={name}")
    argv += ["--regexp", query.pattern]
    if paths:
        argv += ["--", *paths]
    return argv


_CONTENT = re.compile(rb"(\d+)([:-])")


def _rg_item(mode: Mode, out: bytes) -> Item | None:
    """One record of ripgrep's output (``--null``: the path ends at a NUL byte)."""
    if mode == "files_with_matches":
        return os.fsdecode(out)
    path, _, rest = out.partition(b"\0")
    if mode == "count":
        return os.fsdecode(path), int(rest)
    number = _CONTENT.match(rest)
    if number is None:
        return None  # a "--" gap (drawn again from the line numbers), or a "binary file" notice
    text = rest[number.end():].decode("utf-8", errors="replace")
    return Line(os.fsdecode(path), int(number.group(1)), text, number.group(2) == b":")


def _rg_records(argv: list[str], cwd: str, separator: bytes, pattern: str, deadline: float,
                timeout: float) -> Generator[bytes, None, None]:
    """Run ripgrep, yielding its records (its output split at ``separator``) as they come
    (closing the iterator stops it)."""
    with tempfile.TemporaryFile() as errors:
        try:
            process = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors)
        except OSError as exc:
            raise SearchError(f"ripgrep ({argv[0]}) could not be started: {exc.strerror or exc}") from None
        stdout = process.stdout
        assert stdout is not None
        try:
            pending = b""
            while True:
                # Waiting on the pipe with a deadline: no timer thread to start for every call.
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not select.select([stdout], [], [], remaining)[0]:
                    raise _too_long(timeout)
                chunk = os.read(stdout.fileno(), 1 << 16)
                if not chunk:
                    break
                records = (pending + chunk).split(separator)
                pending = records.pop()
                yield from records
            if pending:
                yield pending
            if process.wait() == 2:
                errors.seek(0)
                message = errors.read().decode("utf-8", errors="replace").strip()
                if "regex parse error" in message:
                    reason = message.rsplit("error:", 1)[-1].strip()
                    raise SearchError(f"the pattern {pattern!r} is not a valid regular expression for "
                                      f"ripgrep: {reason}")
                if message:
                    raise SearchError(f"ripgrep refused the search: {message.removeprefix('rg: ')}")
        finally:
            if process.poll() is None:
                process.kill()
            stdout.close()
            process.wait()


def _rg_run(argv: list[str], cwd: str, mode: Mode, pattern: str, deadline: float,
            timeout: float) -> Iterator[Item]:
    """Run ripgrep, yielding the items of its output as they come (closing the iterator stops it)."""
    records = _rg_records(argv, cwd, b"\0" if mode == "files_with_matches" else b"\n", pattern, deadline, timeout)
    try:
        for record in records:
            if (item := _rg_item(mode, record)) is not None:
                yield item
    finally:
        records.close()


def _path_of(item: Item) -> str:
    return item if isinstance(item, str) else item[0] if isinstance(item, tuple) else item.path


def _sorted_content(records: Iterator[bytes], budget: int) -> list[bytes] | None:
    """The records of an unordered content run, sorted by file (each file's lines come together and
    in order), or ``None`` when they are more than ``budget`` bytes. Records stay bytes: only
    the lines shown are parsed."""
    by_file: dict[bytes, list[bytes]] = {}
    size = 0
    for record in records:
        size += len(record) + 1
        if size > budget:
            return None
        end = record.find(b"\0")
        if end >= 0:  # not a "--" gap
            by_file.setdefault(record[:end], []).append(record)
    return [record for path in sorted(by_file, key=lambda path: sort_key(os.fsdecode(path)))
            for record in by_file[path]]


def rg_search(rg: str, query: Query, timeout: float) -> Iterator[Item]:
    """Search with ripgrep, with all its threads, and sort what it found by path. Content that
    would take more than :data:`CONTENT_BUFFER` bytes to sort is read again file after file
    (the matching files, listed and sorted first), as many lines as the caller reads (closing
    the iterator stops ripgrep)."""
    compile_pattern(query)  # one message for a bad pattern, whichever search runs
    deadline = time.monotonic() + timeout
    if query.root_is_file:
        name = os.path.basename(query.root)
        yield from _rg_run(rg_argv(rg, query, query.mode, [name]), os.path.dirname(query.root), query.mode,
                           query.pattern, deadline, timeout)
        return
    if query.mode == "content":
        records = _rg_records(rg_argv(rg, query, "content"), query.root, b"\n", query.pattern, deadline, timeout)
        try:
            ordered = _sorted_content(records, CONTENT_BUFFER)
        finally:
            records.close()
        if ordered is not None:
            for record in ordered:
                if (item := _rg_item("content", record)) is not None:
                    yield item
            return
    listing: Mode = "count" if query.mode == "count" else "files_with_matches"
    found = sorted(_rg_run(rg_argv(rg, query, listing), query.root, listing, query.pattern, deadline, timeout),
                   key=lambda item: sort_key(_path_of(item)))
    if query.mode != "content":
        yield from found
        return
    paths = [_path_of(item) for item in found]
    for start in range(0, len(paths), FILES_PER_RUN):
        batch = paths[start:start + FILES_PER_RUN]
        yield from _rg_run(rg_argv(rg, query, "content", batch), query.root, "content", query.pattern, deadline,
                           timeout)


# -- what the model is shown ------------------------------------------------------------


def _clip(text: str) -> str:
    text = text.rstrip("\r")
    if len(text) <= MAX_LINE_CHARS:
        return text
    return f"{text[:MAX_LINE_CHARS]}… [line clipped: {len(text) - MAX_LINE_CHARS} more characters]"


def output_lines(items: Iterator[Item], shown: str, line_numbers: bool, gaps: bool) -> Iterator[str]:
    """The output lines of a search's items; ``shown`` is how the searched path is written."""

    def name(path: str) -> str:
        # A name that is not UTF-8 (a lone surrogate from os.fsdecode) cannot be journaled.
        return storable(path if shown == "." else f"{shown.rstrip('/')}/{path}")

    previous: Line | None = None
    for item in items:
        if isinstance(item, str):
            yield name(item)
        elif isinstance(item, tuple):
            yield f"{name(item[0])}:{item[1]}"
        else:
            if gaps and previous is not None and (previous.path != item.path or item.number != previous.number + 1):
                yield "--"
            mark = ":" if item.is_match else "-"
            number = f"{item.number}{mark}" if line_numbers else ""
            yield f"{name(item.path)}{mark}{number}{_clip(item.text)}"
            previous = item


def page(lines: Iterator[str], head_limit: int, offset: int, byte_cap: int, empty: str) -> str:
    """Lines ``offset`` to ``offset + head_limit`` (0: no limit) within ``byte_cap`` bytes, with a
    footer that says how to read on."""
    kept: list[str] = []
    size = 0
    position = 0
    for line in lines:
        if position < offset:
            position += 1
            continue
        if head_limit and len(kept) >= head_limit:
            return "\n".join(kept) + f"\n[more results: call again with offset={offset + len(kept)}]"
        size += len(line.encode("utf-8", errors="replace")) + 1
        if size > byte_cap and kept:
            return "\n".join(kept) + (f"\n[output capped at {byte_cap} bytes: call again with offset="
                                      f"{offset + len(kept)}, or narrow the search]")
        kept.append(line)
        position += 1
    if not kept:
        return f"no more results past offset {offset} ({position} in all)" if offset and position else empty
    return "\n".join(kept)


def _folder(root: Place, given: str) -> int | ToolResult:
    """Where the search reads: the folder ``root`` is, opened (the caller closes it), or its own folder
    (held by ``root``) when it is one text file; or the error result that says why it cannot be searched."""
    try:
        if stat.S_ISDIR(root.lstat().st_mode):
            return root.open_folder()
        # A FIFO or a device is refused, never waited on nor searched without end.
        with files.open_regular(root, given, "read") as (fd, _):
            if b"\0" in os.pread(fd, BINARY_SAMPLE, 0):
                return ToolResult(output=f"{given} is a binary file; grep searches text files", is_error=False)
    except files.FileProblem as exc:
        return ToolResult(output=str(exc), is_error=True)
    except OSError as exc:
        return cannot(given, exc, "read")
    return root.folder


def _query(context: BuiltinContext, arguments: Arguments, root: Place, folder: int) -> tuple[Query, str] | ToolResult:
    """The search ``arguments`` ask for and how its path is shown, or the error result that says what is wrong."""
    root_is_file = folder == root.folder
    globs = (arguments["glob"],) if arguments.get("glob") else ()
    try:
        for glob in globs:
            compile_glob(glob.removeprefix("!"))  # told the same way whichever search runs
    except GlobError as exc:
        return ToolResult(output=str(exc), is_error=True)
    mode: Mode = arguments.get("output_mode") or "files_with_matches"
    context_lines: int = arguments.get("-C", 0)
    query = Query(
        pattern=arguments["pattern"], root=str(root.key), root_is_file=root_is_file, folder=folder, name=root.name,
        mode=mode,
        filters=Filters(globs=globs, file_type=arguments.get("type")),
        ignore_case=bool(arguments.get("-i", False)), multiline=bool(arguments.get("multiline", False)),
        before=int(arguments.get("-B", context_lines)) if mode == "content" else 0,
        after=int(arguments.get("-A", context_lines)) if mode == "content" else 0,
    )
    return query, shown_path(context.workspace, str(root.key.parent if root_is_file else root.key))


def _lines_per_file(lines: Iterator[Item]) -> Iterator[Item]:
    """Content items as ``(path, matching lines)``, for files in the order they come."""
    path, count = None, 0
    for item in lines:
        assert isinstance(item, Line)
        if item.path != path:
            if path is not None:
                yield path, count
            path, count = item.path, 0
        count += 1
    if path is not None:
        yield path, count


def search(query: Query, rg: str | None, timeout: float) -> Iterator[Item]:
    """The items of ``query``, from ripgrep when ``rg`` is given, else from the Python search."""
    if rg is None:
        return python_search(query, timeout)
    if query.mode == "count" and query.multiline:
        # ripgrep's multiline --count counts matches, not lines, for a pattern that can match a
        # line break; counting the lines it prints keeps "count" one meaning in both searches.
        return _lines_per_file(rg_search(rg, replace(query, mode="content", before=0, after=0), timeout))
    return rg_search(rg, query, timeout)


def run(context: BuiltinContext, arguments: Arguments) -> ToolResult:
    """Carry out one validated grep call."""
    given = arguments.get("path") or "."
    root = existing_path(context, given)
    if isinstance(root, ToolResult):
        return root
    with root:
        folder = _folder(root, given)
        if isinstance(folder, ToolResult):
            return folder
        try:
            built = _query(context, arguments, root, folder)
            return built if isinstance(built, ToolResult) else _searched(context, arguments, *built)
        finally:
            if folder != root.folder:
                os.close(folder)


def _searched(context: BuiltinContext, arguments: Arguments, query: Query, shown: str) -> ToolResult:
    """What the model is shown of ``query``'s search."""
    empty = "No files found" if query.mode == "files_with_matches" else "No matches found"
    # ripgrep walks the tree by its paths' names, which a process of the workspace can swap for links
    # while it runs: a confined search walks it from descriptors, in Python (see beneath.py).
    rg = None if context.config.builtins.confine_to_workspace else find_rg()
    items = search(query, rg, context.config.limits.default_timeout_seconds)
    lines = output_lines(items, shown, line_numbers=arguments.get("-n", True), gaps=bool(query.before or query.after))
    try:
        text = page(lines, arguments.get("head_limit", DEFAULT_HEAD_LIMIT), arguments.get("offset", 0),
                    max(context.config.limits.output_cap_bytes - 256, 256), empty)
    except (SearchError, GlobError) as exc:
        return ToolResult(output=str(exc), is_error=True)
    except FolderMoved as exc:
        return ToolResult(output=f"the search stopped: {exc.filename}: {exc.strerror}; search again", is_error=True)
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            close()
    return ToolResult(output=text, is_error=False)


TOOL = Builtin(
    name=NAME, description=DESCRIPTION, parameters=PARAMETERS, run=run,
    # It only reads: calls run side by side, and after a crash it is run again.
    concurrency_safe=True, replay="safe",
)
