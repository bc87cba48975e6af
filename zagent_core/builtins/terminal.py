"""The built-in ``terminal`` tool: list, read, wait for and kill background tasks.

It has no input channel on purpose: a task's stdin is closed once its arguments are
delivered, so a task cannot be sent further input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zagent_core.journal.fold import MAX_ENDED_TASKS
from zagent_core.journal.views import TaskView
from zagent_core.tools import tasks
from zagent_core.tools.inprocess import Arguments, Builtin, BuiltinContext
from zagent_core.tools.results import ToolResult

NAME = "terminal"
DESCRIPTION = (
    "Manage background tasks started by tools that run in the background: list them, read a task's "
    "output, wait for a task to end, or kill one (with everything it started). Tasks cannot be sent input."
)
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": ["list", "read", "wait", "kill"],
                   "description": "list: every task and its state; read: a task's output; "
                                  "wait: until a task ends; kill: stop a task."},
        "task": {"type": "integer", "minimum": 1, "description": "The task number (#N). Needed for read, wait, kill."},
        "offset": {"type": "integer", "minimum": 0,
                   "description": "read: the byte offset to read from; without it, the end of the output."},
        "timeout_seconds": {"type": "number", "minimum": 0, "maximum": 600,
                            "description": "wait: how long to wait at most (default 30)."},
    },
    "required": ["action"],
    "additionalProperties": False,
}
#: Actions that only look: they may run in parallel with other concurrency-safe calls.
READ_ONLY = frozenset({"list", "read"})
DEFAULT_WAIT_SECONDS = 30.0


def describe(task: TaskView) -> str:
    """One line on a task: number, tool, and whether it runs or how it ended."""
    if task.status == "running":
        return f"#{task.task_id} {task.tool}: running since {task.started_at:%H:%M:%S}Z"
    how = {"exited": "exited", "killed": "killed", "interrupted": "interrupted"}[task.status]
    if task.status == "exited" and task.timed_out:
        how = "timed out"
    elif task.status == "exited" and task.exit_code is not None:
        how = f"exited with code {task.exit_code}"
    took = f" after {task.duration_ms / 1000:.1f} s" if task.duration_ms is not None else ""
    return f"#{task.task_id} {task.tool}: {how}{took}"


def ended(task: TaskView) -> ToolResult:
    """A task's end as a result: how it ended, then its output."""
    return ToolResult(output=f"{describe(task)}\n{task.output or ''}".rstrip(), is_error=bool(task.is_error))


def kept_task(context: BuiltinContext, number: int | str) -> TaskView | ToolResult:
    """The task numbered ``number`` (a call's argument) if the session keeps it at hand, else the error result
    saying why."""
    task_id = str(number)
    tasks_kept, numbered = context.host.kept_tasks()
    for task in tasks_kept:
        if task.task_id == task_id:
            return task
    if task_id.isdigit() and 1 <= int(task_id) <= numbered:
        return ToolResult(output=f"task #{task_id} ended earlier in this session and its result was delivered "
                          f"then; only the latest {MAX_ENDED_TASKS} ended tasks are kept at hand", is_error=True)
    known = ", ".join(f"#{t.task_id}" for t in _in_order(tasks_kept)) or "none"
    return ToolResult(output=f"there is no task #{task_id} (tasks: {known})", is_error=True)


def _in_order(tasks_kept: list[TaskView]) -> list[TaskView]:
    return sorted(tasks_kept, key=lambda t: int(t.task_id) if t.task_id.isdigit() else 0)


def wait(context: BuiltinContext, task_id: str, timeout: float) -> TaskView:
    """Wait for a task at most ``timeout`` seconds; an end seen here is answered (no wake-up repeats it)."""
    task = context.host.wait_task(task_id, timeout)
    if task.status != "running":
        context.host.answer_wakes(task_id)
    return task


def kill(context: BuiltinContext, task_id: str) -> ToolResult:
    """Kill a task and everything it started; the result tells its end (no wake-up repeats it)."""
    task = context.host.kill_task(task_id)
    context.host.answer_wakes(task_id)
    return ended(task)


def run(context: BuiltinContext, arguments: Arguments) -> ToolResult:
    """Carry out one validated terminal call."""
    action = arguments["action"]
    if action == "list":
        tasks_kept, numbered = context.host.kept_tasks()
        if not tasks_kept:
            return ToolResult(output="no background tasks in this session", is_error=False)
        lines = [describe(t) for t in _in_order(tasks_kept)]
        older = numbered - len(tasks_kept)
        if older > 0:
            lines.append(f"({older} older tasks ended earlier; their results were delivered when they ended)")
        return ToolResult(output="\n".join(lines), is_error=False)
    if "task" not in arguments:
        return ToolResult(output=f'"{action}" needs "task": the task number', is_error=True)
    found = kept_task(context, arguments["task"])
    if isinstance(found, ToolResult):
        return found
    task_id = found.task_id
    if action == "read":
        limit = context.config.limits.output_cap_bytes
        data, start, size = tasks.read_output(Path(found.task_dir), arguments.get("offset"), limit)
        end = start + len(data)
        text = data.decode("utf-8", "replace")
        more = f"; read on with offset {end}" if end < size else ""
        return ToolResult(output=f"{text}\n[bytes {start}-{end} of {size}{more}]", is_error=False)
    if action == "kill":
        return kill(context, task_id)
    task = wait(context, task_id, float(arguments.get("timeout_seconds", DEFAULT_WAIT_SECONDS)))
    if task.status == "running":
        return ToolResult(output=f"task #{task_id} is still running", is_error=False)
    return ended(task)


TOOL = Builtin(
    name=NAME, description=DESCRIPTION, parameters=PARAMETERS, run=run,
    concurrency_safe=lambda arguments: arguments.get("action") in READ_ONLY,
    # Harmless to run again after a crash: it reads, waits, or kills what is dead.
    replay="safe",
)
