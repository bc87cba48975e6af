"""The built-in ``shell_kill`` tool: stop a background task, the seed's name for ``terminal`` kill."""

from __future__ import annotations

from typing import Any

from zagent_core.builtins import terminal
from zagent_core.tools.inprocess import Arguments, Builtin, BuiltinContext
from zagent_core.tools.results import ToolResult

NAME = "shell_kill"
DESCRIPTION = (
    "Stop a background task (started by shell with run_in_background, or by a background tool) and "
    "every process it started: SIGTERM, then SIGKILL after a grace period. Answers how it ended "
    "and its output. A task that already ended is left as it is."
)
#: The parameter naming a task, as the seed's shell_kill and wait_task take it.
_TASK_ID: dict[str, Any] = {"type": "integer", "minimum": 1,
                            "description": "The task number (#N) that shell with run_in_background answered."}


def task_parameters(others: dict[str, Any]) -> dict[str, Any]:
    """The JSON schema of shell_kill's and wait_task's arguments: ``task_id`` (required), then ``others``."""
    return {"type": "object", "properties": {"task_id": _TASK_ID, **others}, "required": ["task_id"],
            "additionalProperties": False}


PARAMETERS: dict[str, Any] = task_parameters({})


def run(context: BuiltinContext, arguments: Arguments) -> ToolResult:
    """Kill a task at hand with everything it started; answers how it ended and its output."""
    task = terminal.kept_task(context, arguments["task_id"])
    return task if isinstance(task, ToolResult) else terminal.kill(context, task.task_id)


TOOL = Builtin(
    name=NAME, description=DESCRIPTION, parameters=PARAMETERS, run=run,
    # Killing what is dead again changes nothing.
    replay="safe",
)
