"""The built-in ``multi_edit`` tool: several replacements in one file, in order.

Each edit applies to the text the previous applied edit left. A failed edit is reported
against that edit only and the others still run; the file is written iff at least one
applied. The result reports every edit's outcome in the seed's format::

    Edited <path>: applied N of M edits (R replacements).
    edit #2 failed: old_string not found in <path>. ...
    <edit_outcomes>
    #1 applied
    #2 failed: old_string not found in <path>
    </edit_outcomes>

(the outcomes block only when an edit failed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from zagent_core.builtins import files
from zagent_core.tools.inprocess import Arguments, Builtin, BuiltinContext
from zagent_core.tools.results import ToolResult

NAME = "multi_edit"
DESCRIPTION = (
    "Apply several edits to one file in order, each to the result of the previous one (each edit is "
    "old_string/new_string/replace_all, as for edit). An edit that fails is reported and skipped; the file is "
    "written if at least one edit applied. Read the file with read_file first."
)
_EDIT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "old_string": {"type": "string", "description": "The exact text to replace."},
        "new_string": {"type": "string", "description": "The text to put in its place."},
        "replace_all": {"type": "boolean", "description": "Replace every occurrence (default false: exactly one)."},
    },
    "required": ["old_string", "new_string"],
    "additionalProperties": False,
}
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": files.PATH_PARAMETER,
        "edits": {"type": "array", "minItems": 1, "items": _EDIT, "description": "The edits, applied in order."},
    },
    "required": ["path", "edits"],
    "additionalProperties": False,
}
_FIRST_CLAUSE = re.compile(r"[.;] ")


def _short(message: str) -> str:
    """A failure's first clause, for the outcomes block."""
    return _FIRST_CLAUSE.split(message.split("\n", 1)[0], maxsplit=1)[0].rstrip(".")


@dataclass
class _Tally:
    """What the edits did: how many applied, their replacements, and each one's outcome."""

    applied: int = 0
    replacements: int = 0
    outcomes: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


def _apply(text: str, edits: list[dict[str, Any]], shown: str, tally: _Tally) -> str:
    """``text`` with the edits applied in order, each to what the one before left (a failed one is skipped)."""
    for number, edit in enumerate(edits, start=1):
        try:
            text, count = files.replace(text, edit["old_string"], edit["new_string"],
                                        bool(edit.get("replace_all", False)), shown)
        except files.FileProblem as exc:
            tally.failures.append(f"edit #{number} failed: {exc}")
            tally.outcomes.append(f"#{number} failed: {_short(str(exc))}")
            continue
        tally.applied += 1
        tally.replacements += count
        tally.outcomes.append(f"#{number} applied")
    return text


def run(context: BuiltinContext, arguments: Arguments) -> ToolResult:
    """Carry out one validated multi_edit call."""
    shown = arguments["path"]
    edits = arguments["edits"]
    tally = _Tally()
    try:
        with files.located(context, shown, "edited") as where:
            text = _apply(files.load_for_edit(context, where, shown), edits, shown, tally)
            if tally.applied:
                files.write_text_checked(context, where, shown, text.encode("utf-8"))
    except files.FileProblem as exc:
        return files.error(str(exc))
    applied, replacements, outcomes, failures = tally.applied, tally.replacements, tally.outcomes, tally.failures
    if applied:
        head = f"Edited {shown}: applied {applied} of {len(edits)} edits ({replacements} replacement{'s' if replacements != 1 else ''})."
    else:
        head = f"No change to {shown}: applied 0 of {len(edits)} edits."
    if not failures:
        return ToolResult(output=head, is_error=False)
    block = "\n".join(["<edit_outcomes>", *outcomes, "</edit_outcomes>"])
    return ToolResult(output="\n".join([head, *failures, block]), is_error=not applied)


TOOL = Builtin(
    name=NAME, description=DESCRIPTION, parameters=PARAMETERS, run=run,
    # It changes a file: a barrier, and after a crash the model is told it was interrupted.
    concurrency_safe=False, replay="unsafe",
)
