"""The built-in ``shell_kill`` tool: stop a background task, the seed's name for ``terminal`` kill."""

from __future__ import annotations

from typing import Any

from zagent_core.builtins import terminal
from zagent_core.builtins.base import Arguments, Builtin, BuiltinContext
from zagent_core.results import ToolResult

#: The parameter naming a task, as the seed's shell_kill and wait_task take it.
TASK_ID: dict[str, Any] = {"type": "integer", "minimum": 1,
                           "description": "The task number (#N) that shell with run_in_background answered."}
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"task_id": TASK_ID},
    "required": ["task_id"],
    "additionalProperties": False,
}


def run(context: BuiltinContext, arguments: Arguments) -> ToolResult:
    """Kill a task at hand with everything it started; answers how it ended and its output."""
    task_id = str(arguments["task_id"])
    found = terminal.task_at_hand(context, task_id)
    if isinstance(found, ToolResult):
        return found
    return terminal.kill(context, task_id)


TOOL = Builtin(
    name="shell_kill",
    description=("Stop a background task (started by shell with run_in_background, or by a background tool) and "
                 "every process it started: SIGTERM, then SIGKILL after a grace period. Answers how it ended "
                 "and its output. A task that already ended is left as it is."),
    parameters=PARAMETERS, run=run,
    # Killing what is dead again changes nothing.
    replay="safe",
)
