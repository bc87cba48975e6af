"""The built-in ``write_file`` tool: a whole file, written atomically.

Overwriting an existing file goes through the read-before-edit gate; a new file needs
no read. The three answers let the model tell a no-op from a change without reading back.
"""

from __future__ import annotations

from typing import Any

from zagent_core.builtins import files
from zagent_core.tools.inprocess import Arguments, Builtin, BuiltinContext
from zagent_core.tools.results import ToolResult

NAME = "write_file"
DESCRIPTION = (
    "Write a whole file (created with its folders if missing, replaced otherwise), atomically: a crash leaves "
    "the old content or the new, never half. Overwriting an existing file needs a read_file of it first. "
    "To change part of a file, prefer edit."
)
PARAMETERS: dict[str, Any] = files.change_parameters(
    {"content": {"type": "string", "description": "The file's whole new content."}},
)


def run(context: BuiltinContext, arguments: Arguments) -> ToolResult:
    """Carry out one validated write_file call."""
    shown = arguments["path"]
    data = arguments["content"].encode("utf-8")
    try:
        with files.located(context, shown, "written", make_folders=True) as where:
            try:
                current: bytes | None = files.read_bytes(where, shown)
            except files.FileProblem:
                if where.exists():
                    raise
                current = None
            if current == data:
                files.remember_write(context, where.key, data)
                return ToolResult(output=f"No change needed: {shown} already at target state ({len(data)} bytes)",
                                  is_error=False)
            if current is not None:
                files.gate(context, where.key, shown, current)
            written = files.write_text_checked(context, where, shown, data)
    except files.FileProblem as exc:
        return files.error(str(exc))
    verb = "Created" if written.created else "Updated"
    return ToolResult(output=f"{verb} {shown} ({written.size} bytes)", is_error=False)


TOOL = Builtin(
    name=NAME, description=DESCRIPTION, parameters=PARAMETERS, run=run,
    # It changes a file: a barrier, and after a crash the model is told it was interrupted.
    concurrency_safe=False, replay="unsafe",
)
