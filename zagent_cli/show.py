"""How the CLI prints sessions, events and audit rows for a person (``--json`` aside).

Every line goes through :func:`zagent_cli.output.say`: what tools and models wrote is shown,
never sent to the terminal as control sequences. Imported by the commands that read the
journal, so ``zagent --help`` does not load the event models.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterable
from typing import Any

from zagent_core.events import (
    ModelReplied,
    NoteReceived,
    TaskExited,
    TaskInterrupted,
    TaskKilled,
    ToolCallFinished,
    ToolCallInterrupted,
    ToolCallRejected,
    ToolCallRequested,
    TurnEnded,
    TurnStarted,
    UserMessage,
    dump_event,
)
from zagent_core.journal import StoredEvent
from zagent_core.state import CallView, SessionState
from zagent_cli.output import head, plural, say

#: Event bodies up to this long are printed on the event's line by ``sessions show --events``.
_BODY_ON_ONE_LINE = 100


def _arguments(arguments: Any, width: int) -> str:
    return head(json.dumps(arguments, ensure_ascii=False), width)


def event_line(stored: StoredEvent) -> str | None:
    """The line ``zagent run`` prints for an event as it happens, if it prints one."""
    match stored.event:
        case UserMessage(text=text):
            return f"user: {text}"
        case ModelReplied(text=text) if text:
            return f"assistant: {text}"
        case ToolCallRequested(tool=tool, arguments=arguments):
            return f"  -> {tool} {_arguments(arguments, 100)}"
        case ToolCallFinished(is_error=is_error, output=output):
            return f"  <- {'error' if is_error else 'ok'}: {head(output, 100)}"
        case ToolCallRejected(message=message) | ToolCallInterrupted(message=message):
            return f"  <- error: {head(message, 100)}"
        case NoteReceived(text=text):
            return f"  [info: {text}]"
        case TaskExited(task_id=task_id, output=output):
            return f"  task #{task_id} exited: {head(output, 100)}"
        case TaskKilled(task_id=task_id, output=output):
            return f"  task #{task_id} killed: {head(output, 100)}"
        case TaskInterrupted(task_id=task_id, message=message):
            return f"  task #{task_id} interrupted: {head(message, 100)}"
        case TurnStarted(reason="wake"):
            return "(woken)"
        case TurnEnded(reason=reason) if reason != "idle":
            return f"(turn stopped: {reason})"
    return None


def show_event(stored: StoredEvent) -> None:
    """Print the conversation as it happens: what the user, the model and the tools said."""
    line = event_line(stored)
    if line is not None:
        say(line)


def _call_status(call: CallView) -> str:
    if call.status != "finished":
        return call.status
    if call.task_id is not None and not call.is_error:  # its answer took 0 ms; the task line says how it went
        return f"started task #{call.task_id}"
    status = f"{'error' if call.is_error else 'ok'}, {call.duration_ms} ms"
    if call.exit_code is not None:
        status += f", exit {call.exit_code}"
    return status + (", timed out" if call.timed_out else "")


def _print_call(call: CallView) -> None:
    say(f"\n{call.requested_at:%H:%M:%S.%f}"[:-3] + f"  {call.call_id}  {call.tool}  {_arguments(call.arguments, 60)}")
    status = _call_status(call)
    say(f"    {status}: {head(call.output)}" if call.output else f"    {status}")
    for item in call.files:
        say(f"    file: {item.path}")


def _print_header(state: SessionState, status: str) -> None:
    started = f"{state.started_at:%Y-%m-%d %H:%M:%S}Z" if state.started_at else "?"
    say(f"session {state.session_id} ({status}), {state.origin}, started {started}")
    if state.model_replies:
        say(f"model: {plural(state.model_replies, 'reply', 'replies')} in {plural(state.turns, 'turn')}, "
            f"{state.input_tokens} tokens in, {state.output_tokens} out")
    say(f"workspace: {state.workspace}")
    if state.forked_from:
        say(f"forked from: {state.forked_from}")
    say(f"tools offered: {', '.join(t.name for t in state.tools) or 'none'}")
    for warning in state.warnings:
        say(f"warning: {warning}")


def print_session(state: SessionState, status: str, events: Iterable[StoredEvent] | None) -> None:
    """``zagent sessions show``: the header, tasks, pending wake-ups, calls, and the events if asked."""
    _print_header(state, status)
    for task in sorted(state.tasks.values(), key=lambda t: int(t.task_id) if t.task_id.isdigit() else 0):
        ended = f", ended {task.ended_at:%H:%M:%S}Z" if task.ended_at else ""
        code = f", exit {task.exit_code}" if task.exit_code is not None else ""
        say(f"task #{task.task_id} {task.tool}: {task.status}{code}, pid {task.pid}, "
            f"started {task.started_at:%H:%M:%S}Z{ended}")
    for wake in state.pending_wakes.values():
        say(f"pending wake-up: {head(wake.text)}")
    for call in state.calls.values():
        _print_call(call)
    if events is not None:
        say("\nevents:")
        for stored in events:
            say(f"  #{stored.seq} v{stored.version} {stored.at:%H:%M:%S.%f}"[:-3] + f" {stored.event.type}"
                + _event_body(stored))


def _event_body(stored: StoredEvent) -> str:
    """An event's body as stored: on its line when short, else as indented JSON below it."""
    body = dump_event(stored.event)
    if len(body) <= _BODY_ON_ONE_LINE:
        return f" {body}"
    return "\n" + textwrap.indent(json.dumps(json.loads(body), indent=2, ensure_ascii=False), "      ")


def print_audit(rows: list[dict[str, Any]]) -> None:
    """``zagent audit``: two lines per call, the call and the head of its output."""
    if not rows:
        say("no calls match")
    for row in rows:
        took = f"{row['duration_ms']} ms" if row["duration_ms"] is not None else "-"
        outcome = row["status"] if row["status"] != "finished" else ("error" if row["is_error"] else "ok")
        if row["exit_code"] not in (None, 0):
            outcome += f" exit {row['exit_code']}"
        say(f"{row['requested_at']}  {row['session_id']}  {row['tool']:<14} {outcome:<11} {took:>9}  "
            f"{_arguments(row['arguments'], 50)}")
        say(f"    {head(row['output_head'], 110)}")
