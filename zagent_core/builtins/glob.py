"""The built-in ``glob`` tool: the files of a tree whose path matches a glob pattern.

Files only (folders are walked, not listed), hidden and ``.gitignore``d ones skipped as
``grep`` skips them, sorted by path, at most 1000 (counted after folders are left out).
A pattern may start with ``../`` or be absolute: the workspace is not a boundary unless
``builtins.confine_to_workspace`` says so.
"""

from __future__ import annotations

import os
from typing import Any

from zagent_core.builtins import beneath
from zagent_core.builtins.beneath import FolderMoved
from zagent_core.builtins.search import (
    Found,
    GlobError,
    cannot,
    compile_glob,
    describe_missing,
    has_glob_chars,
    iso_time,
    listing,
    pattern_parameters,
    shown_path,
    walk,
)
from zagent_core.tools.inprocess import Arguments, Builtin, BuiltinContext, PathRefused
from zagent_core.tools.results import ToolResult

NAME = "glob"
MAX_FILES = 1000
DESCRIPTION = (
    "Find files by path pattern: * and ? within a name, ** across folders, [abc] and {a,b} "
    "(\"**/*.py\", \"src/**/test_*.{ts,tsx}\"). Skips hidden and .gitignored files. Rows: path, size in bytes "
    f"and modification time (UTC), tab-separated, sorted by path; metadata: false for paths only. At most {MAX_FILES}."
)
PARAMETERS: dict[str, Any] = pattern_parameters(
    "The glob pattern, relative to path.", "The folder to search from (default: the workspace).",
    {"metadata": {"type": "boolean", "description": "Show size and modification time (default true)."}},
)


def split_pattern(pattern: str) -> tuple[str, str]:
    """``pattern`` as the folder its literal leading components name, and the glob under it."""
    parts = pattern.split("/")
    literal = 0
    while literal < len(parts) - 1 and not has_glob_chars(parts[literal]) and "\\" not in parts[literal]:
        literal += 1
    base = "/".join(parts[:literal])
    if pattern.startswith("/") and not base:
        base = "/"
    return base, "/".join(parts[literal:])


def _row(relative: str, info: os.stat_result | None, shown: str, metadata: bool) -> str:
    path = relative if shown == "." else f"{shown.rstrip('/')}/{relative}"
    if not metadata:
        return path
    if info is None:
        return f"{path}\t?\t?"
    return f"{path}\t{info.st_size}\t{iso_time(info.st_mtime)}"


def _status(found: Found) -> os.stat_result | None:
    try:
        return os.stat(found.name, dir_fd=found.folder, follow_symlinks=False)
    except OSError:
        return None


def _matches(folder: int, base: str, rest: str, metadata: bool) -> list[tuple[str, os.stat_result | None]]:
    """The files under ``folder`` whose path matches glob ``rest``; the status of the ones shown, taken as
    they are found (from their folder's descriptor)."""
    regex = compile_glob(rest)
    depth = None if "**" in rest else rest.count("/") + 1
    found: list[tuple[str, os.stat_result | None]] = []
    for file in walk(folder, base, max_depth=depth):
        if regex.fullmatch(file.relative):
            found.append((file.relative, _status(file) if metadata and len(found) < MAX_FILES else None))
    return found


def run(context: BuiltinContext, arguments: Arguments) -> ToolResult:
    """Carry out one validated glob call."""
    pattern: str = arguments["pattern"]
    given = arguments.get("path") or "."
    literal, rest = split_pattern(pattern)
    where = os.path.join(given, literal) if literal and given != "." else literal or given
    try:
        compile_glob(pattern)  # a mistake is told about where it is in the pattern as written
        compile_glob(rest)
        base = beneath.place(context, where)
    except (PathRefused, GlobError) as exc:
        return ToolResult(output=str(exc), is_error=True)
    except FileNotFoundError:
        return _missing(context, given, where, literal)
    except OSError as exc:
        return cannot(where, exc, "searched")
    with base:
        if not base.exists():
            return _missing(context, given, where, literal)
        try:
            folder = base.open_folder()
        except NotADirectoryError:
            return ToolResult(output=f"{where} is a file, not a folder: glob searches from a folder; give its "
                                     "folder as path", is_error=True)
        except OSError as exc:
            return cannot(where, exc, "searched")
    metadata = arguments.get("metadata", True)
    try:
        found = _matches(folder, str(base.key), rest, metadata)
    except FolderMoved as exc:
        return ToolResult(output=f"the search stopped: {exc.filename}: {exc.strerror}; search again", is_error=True)
    finally:
        os.close(folder)
    if not found:
        return ToolResult(output="No files found", is_error=False)
    shown = shown_path(context.workspace, str(base.key))
    return listing(found, lambda item: _row(*item, shown, metadata), MAX_FILES,
                   "files shown; narrow the pattern or the path")


def _missing(context: BuiltinContext, given: str, where: str, literal: str) -> ToolResult:
    if literal:
        return ToolResult(output=f"No files found (the folder {where} does not exist)", is_error=False)
    return ToolResult(output=describe_missing(given, context.resolve(where)), is_error=True)


TOOL = Builtin(
    name=NAME, description=DESCRIPTION, parameters=PARAMETERS, run=run,
    # It only reads: calls run side by side, and after a crash it is run again.
    concurrency_safe=True, replay="safe",
)
