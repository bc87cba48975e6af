"""The built-in ``list_files`` tool: the entries of one folder.

Every entry is listed, hidden ones too (``.gitignore`` is for searches; a listing shows
what is there), sorted by name, folders marked with a trailing ``/`` and symbolic links
with their target, at most 1000 of them.
"""

from __future__ import annotations

import os
from typing import Any

from zagent_core.builtins.search import cannot, existing_path, listing
from zagent_core.tools.inprocess import Arguments, Builtin, BuiltinContext
from zagent_core.tools.results import ToolResult

NAME = "list_files"
MAX_ENTRIES = 1000
DESCRIPTION = (
    "List the entries of one folder (default: the workspace), sorted by name; folders end with /, "
    f"symbolic links show their target. At most {MAX_ENTRIES} entries. Use glob to find files in a whole tree."
)
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string",
                 "description": "The folder to list, relative to the workspace or absolute (default: .)."},
    },
    "additionalProperties": False,
}


def _entry(folder: int, entry: os.DirEntry[str]) -> str:
    try:
        if entry.is_symlink():
            target = os.readlink(entry.name, dir_fd=folder)
            return f"{entry.name}{'/' if entry.is_dir() else ''} -> {target}"
        return f"{entry.name}/" if entry.is_dir(follow_symlinks=False) else entry.name
    except OSError:
        return entry.name


def run(context: BuiltinContext, arguments: Arguments) -> ToolResult:
    """Carry out one validated list_files call."""
    given = arguments.get("path") or "."
    found = existing_path(context, given)
    if isinstance(found, ToolResult):
        return found
    with found:
        try:
            folder = found.open_folder()
        except NotADirectoryError:
            return ToolResult(output=f"{given} is a file, not a folder; read it with read_file, or list its folder "
                                     f"({os.path.dirname(given) or '.'})", is_error=True)
        except OSError as exc:
            return cannot(given, exc, "listed")
    try:
        # Listed from its descriptor, and its entries looked at while it is open: they ask it again.
        with os.scandir(folder) as scan:
            entries = sorted(scan, key=lambda entry: entry.name)
        if not entries:
            return ToolResult(output=f"{given} is an empty folder", is_error=False)
        return listing(entries, lambda entry: _entry(folder, entry), MAX_ENTRIES,
                       "entries shown; use glob with a pattern to find the others")
    except OSError as exc:
        return cannot(given, exc, "listed")
    finally:
        os.close(folder)


TOOL = Builtin(
    name=NAME, description=DESCRIPTION, parameters=PARAMETERS, run=run,
    # It only reads: calls run side by side, and after a crash it is run again.
    concurrency_safe=True, replay="safe",
)
