"""The built-in ``wait_task`` tool: wait for a background task to end, the seed's name for ``terminal`` wait.

A wait that times out starts with the stable prefix :data:`TIMED_OUT`: the task keeps
running and its wake-up stays pending, so the agent still hears of its end.
"""

from __future__ import annotations

from typing import Any

from zagent_core.builtins import terminal
from zagent_core.builtins.shell_kill import task_parameters
from zagent_core.tools.inprocess import Arguments, Builtin, BuiltinContext
from zagent_core.tools.results import ToolResult

NAME = "wait_task"
DESCRIPTION = (
    "Wait for a background task (started by shell with run_in_background, or by a background tool) "
    "to end, and answer how it ended and its output. If it has not ended by the timeout, it keeps "
    "running and the answer starts with \"wait_task: timed out\"."
)
TIMED_OUT = "wait_task: timed out"
DEFAULT_TIMEOUT_SECONDS = terminal.DEFAULT_WAIT_SECONDS
MAX_TIMEOUT_SECONDS = 600

PARAMETERS: dict[str, Any] = task_parameters({
    "timeout": {"type": "number", "minimum": 0, "maximum": MAX_TIMEOUT_SECONDS,
                "description": f"Seconds to wait at most (default {DEFAULT_TIMEOUT_SECONDS:g}, at most "
                               f"{MAX_TIMEOUT_SECONDS}); the task keeps running if it has not ended by then."},
})


def run(context: BuiltinContext, arguments: Arguments) -> ToolResult:
    """Wait for a task at hand; answers how it ended and its output, or that it still runs."""
    found = terminal.kept_task(context, arguments["task_id"])
    if isinstance(found, ToolResult):
        return found
    task_id = found.task_id
    timeout = float(arguments.get("timeout", DEFAULT_TIMEOUT_SECONDS))
    task = terminal.wait(context, task_id, timeout)
    if task.status == "running":
        return ToolResult(output=f"{TIMED_OUT} after {timeout:g} s; task #{task_id} is still running and you will be "
                          "woken when it ends (terminal read shows its output so far)", is_error=False)
    return terminal.ended(task)


TOOL = Builtin(
    name=NAME, description=DESCRIPTION, parameters=PARAMETERS, run=run,
    # Waiting again after a crash is harmless.
    replay="safe",
)
