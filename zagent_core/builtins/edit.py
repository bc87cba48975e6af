"""The built-in ``edit`` tool: replace one exact string of a file (or every occurrence).

Claude Code's ``Edit``: ``old_string`` must be found, and be unique unless
``replace_all``; when it is not found, the closest lines are shown so the model can
correct it without reading the file again.
"""

from __future__ import annotations

from typing import Any

from zagent_core.builtins import files
from zagent_core.tools.inprocess import Arguments, Builtin, BuiltinContext
from zagent_core.tools.results import ToolResult

NAME = "edit"
DESCRIPTION = (
    "Replace old_string with new_string in a file. old_string must match the file exactly (whitespace and "
    "indentation included) and occur once, unless replace_all is true. Read the file with read_file first."
)
PARAMETERS: dict[str, Any] = files.change_parameters({
    "old_string": {"type": "string", "description": "The exact text to replace."},
    "new_string": {"type": "string", "description": "The text to put in its place (different from old_string)."},
}, {
    "replace_all": {"type": "boolean", "description": "Replace every occurrence (default false: exactly one)."},
})


def run(context: BuiltinContext, arguments: Arguments) -> ToolResult:
    """Carry out one validated edit call."""
    shown = arguments["path"]
    try:
        files.check_strings(arguments["old_string"], arguments["new_string"])
        with files.located(context, shown, "edited") as where:
            text = files.load_for_edit(context, where, shown)
            changed, count = files.replace(text, arguments["old_string"], arguments["new_string"],
                                           bool(arguments.get("replace_all", False)), shown)
            files.write_text_checked(context, where, shown, changed.encode("utf-8"))
    except files.FileProblem as exc:
        return files.error(str(exc))
    return ToolResult(output=f"Edited {shown}: {count} replacement{'s' if count != 1 else ''}", is_error=False)


TOOL = Builtin(
    name=NAME, description=DESCRIPTION, parameters=PARAMETERS, run=run,
    # It changes a file: a barrier, and after a crash the model is told it was interrupted.
    concurrency_safe=False, replay="unsafe",
)
