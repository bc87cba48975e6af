"""Projections: session state as a fold of its events.

State is never stored on its own. :func:`apply` is a pure function of the previous
state and one event, so the state kept incrementally by a running session, the state
rebuilt from the whole journal, and a snapshot plus the events after it are equal.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from zagent_core.events import (
    Coercion,
    Media,
    ModelReplied,
    NoteReceived,
    NotesDelivered,
    SessionResumed,
    TaskExited,
    TaskInterrupted,
    TaskKilled,
    TaskStarted,
    OutputFile,
    RepliedCall,
    SessionEnded,
    SessionForked,
    SessionStarted,
    ToolCallFinished,
    ToolCallInterrupted,
    ToolCallRejected,
    ToolCallRequested,
    ToolCallStarted,
    ToolOffer,
    TurnEnded,
    TurnStarted,
    WakeAnswered,
    WakeRequested,
)
from zagent_core.journal import StoredEvent

CallStatus = Literal["requested", "rejected", "running", "finished", "interrupted"]
TaskStatus = Literal["running", "exited", "killed", "interrupted"]


class CallView(BaseModel):
    """One tool call as the journal tells it so far."""

    model_config = ConfigDict(frozen=True)

    call_id: str
    tool: str
    arguments: Any
    status: CallStatus = "requested"
    requested_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    argv: list[str] = []
    coercions: list[Coercion] = []
    output_dir: str | None = None
    notify_file: str | None = None
    #: The background task this call started, if it is a background call.
    task_id: str | None = None
    cwd: str | None = None
    output_mode: str | None = None
    attach_outputs: bool = False
    timeout_seconds: float | None = None
    #: Where reading the notify file resumes: the offset after the last journaled note.
    notify_offset: int = 0
    pid: int | None = None
    output: str | None = None
    is_error: bool | None = None
    exit_code: int | None = None
    timed_out: bool = False
    duration_ms: int | None = None
    files: list[OutputFile] = []


class TaskView(BaseModel):
    """One background task as the journal tells it so far."""

    model_config = ConfigDict(frozen=True)

    task_id: str
    call_id: str
    tool: str
    status: TaskStatus = "running"
    pid: int
    start_ticks: int
    boot_id: str
    task_dir: str
    started_at: datetime
    ended_at: datetime | None = None
    output: str | None = None
    is_error: bool | None = None
    exit_code: int | None = None
    timed_out: bool = False
    duration_ms: int | None = None
    files: list[OutputFile] = []
    media: list[Media] = []


class NoteView(BaseModel):
    """A note not yet delivered to the agent."""

    model_config = ConfigDict(frozen=True)

    version: int
    call_id: str
    task_id: str | None
    text: str
    wake: bool
    at: datetime


class WakeView(BaseModel):
    """A wake-up not yet delivered to the agent."""

    model_config = ConfigDict(frozen=True)

    wake_id: str
    reason: str
    text: str
    call_id: str | None
    task_id: str | None
    at: datetime


class SessionState(BaseModel):
    """Everything known about one session, rebuilt from its events."""

    model_config = ConfigDict(frozen=True)

    session_id: str = ""
    version: int = 0
    status: Literal["new", "open", "ended"] = "new"
    origin: str | None = None
    workspace: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    last_at: datetime | None = None
    tools: list[ToolOffer] = []
    warnings: list[str] = []
    #: ``PARENT@SEQ`` when the session is a fork.
    forked_from: str | None = None
    #: In the order they were requested.
    calls: dict[str, CallView] = {}
    #: Notes and wake-ups journaled but not yet taken by a turn, by version / wake id.
    pending_notes: dict[int, NoteView] = {}
    pending_wakes: dict[str, WakeView] = {}
    #: Background tasks by number ("1", "2", ...).
    tasks: dict[str, TaskView] = {}
    notes_received: int = 0
    turns: int = 0
    #: A turn began and has not ended: the agent was working (or was cut off doing so).
    in_turn: bool = False
    last_turn_end: str | None = None
    model_replies: int = 0
    #: Tool calls of the last model reply that have not been requested yet (cut off before running).
    unrequested: dict[str, RepliedCall] = {}
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def running_calls(self) -> list[CallView]:
        """Calls that started and have no result yet (cut off, if the engine is gone)."""
        return [call for call in self.calls.values() if call.status == "running"]

    @property
    def running_tasks(self) -> list[TaskView]:
        return [task for task in self.tasks.values() if task.status == "running"]


def _with_call(state: SessionState, call: CallView, **changes: Any) -> dict[str, CallView]:
    return {**state.calls, call.call_id: call.model_copy(update=changes)}


class InconsistentJournalError(ValueError):
    """An event refers to a call or task the session never had."""


def apply(state: SessionState, stored: StoredEvent) -> SessionState:
    """The state after ``stored``; ``state`` is not modified."""
    try:
        return _apply(state, stored)
    except KeyError as missing:
        raise InconsistentJournalError(
            f"event #{stored.seq} ({stored.event.type}) of session {stored.session_id} refers to {missing}, which "
            "the session never had: the journal was edited or damaged") from None


def _apply(state: SessionState, stored: StoredEvent) -> SessionState:
    event = stored.event
    common: dict[str, Any] = {"session_id": stored.session_id, "version": stored.version, "last_at": stored.at}
    if isinstance(event, SessionStarted):
        common.update(status="open", origin=event.origin, workspace=event.workspace, started_at=stored.at,
                      tools=event.tools, warnings=event.warnings)
    elif isinstance(event, SessionEnded):
        common.update(status="ended", ended_at=stored.at)
    elif isinstance(event, ToolCallRequested):
        call = CallView(call_id=event.call_id, tool=event.tool, arguments=event.arguments, requested_at=stored.at)
        common["calls"] = {**state.calls, event.call_id: call}
        if event.call_id in state.unrequested:
            common["unrequested"] = {k: v for k, v in state.unrequested.items() if k != event.call_id}
    elif isinstance(event, ToolCallRejected):
        call = state.calls[event.call_id]
        common["calls"] = _with_call(state, call, status="rejected", finished_at=stored.at, output=event.message,
                                     is_error=True)
    elif isinstance(event, ToolCallStarted):
        call = state.calls[event.call_id]
        common["calls"] = _with_call(state, call, status="running", started_at=stored.at, argv=event.argv,
                                     arguments=event.arguments, coercions=event.coercions,
                                     output_dir=event.output_dir, notify_file=event.notify_file,
                                     task_id=event.task_id, cwd=event.cwd, output_mode=event.output_mode,
                                     attach_outputs=event.attach_outputs, timeout_seconds=event.timeout_seconds)
    elif isinstance(event, ToolCallFinished):
        call = state.calls[event.call_id]
        common["calls"] = _with_call(state, call, status="finished", finished_at=stored.at, pid=event.pid,
                                     output=event.output, is_error=event.is_error, exit_code=event.exit_code,
                                     timed_out=event.timed_out, duration_ms=event.duration_ms, files=event.files)
    elif isinstance(event, ToolCallInterrupted):
        common["calls"] = _with_call(state, state.calls[event.call_id], status="interrupted",
                                     finished_at=stored.at, output=event.message, is_error=True)
    elif isinstance(event, SessionForked):
        common["forked_from"] = f"{event.parent_session_id}@{event.parent_seq}"
    elif isinstance(event, SessionResumed):
        common.update(status="open", tools=event.tools, warnings=event.warnings)
    elif isinstance(event, TaskStarted):
        task = TaskView(task_id=event.task_id, call_id=event.call_id, tool=event.tool, pid=event.pid,
                        start_ticks=event.start_ticks, boot_id=event.boot_id, task_dir=event.task_dir,
                        started_at=stored.at)
        common["tasks"] = {**state.tasks, event.task_id: task}
    elif isinstance(event, (TaskExited, TaskKilled)):
        task = state.tasks[event.task_id].model_copy(update={
            "status": "exited" if isinstance(event, TaskExited) else "killed", "ended_at": stored.at,
            "output": event.output, "is_error": event.is_error, "exit_code": event.exit_code,
            "timed_out": event.timed_out, "duration_ms": event.duration_ms, "files": event.files,
            "media": event.media})
        common["tasks"] = {**state.tasks, event.task_id: task}
    elif isinstance(event, TaskInterrupted):
        task = state.tasks[event.task_id].model_copy(update={
            "status": "interrupted", "ended_at": stored.at, "output": event.message, "is_error": True})
        common["tasks"] = {**state.tasks, event.task_id: task}
    elif isinstance(event, NoteReceived):
        common["calls"] = _with_call(state, state.calls[event.call_id], notify_offset=event.offset)
        note = NoteView(version=stored.version, call_id=event.call_id, task_id=event.task_id, text=event.text,
                        wake=event.wake, at=stored.at)
        common.update(pending_notes={**state.pending_notes, stored.version: note},
                      notes_received=state.notes_received + 1)
    elif isinstance(event, WakeRequested):
        wake = WakeView(wake_id=event.wake_id, reason=event.reason, text=event.text, call_id=event.call_id,
                        task_id=event.task_id, at=stored.at)
        common["pending_wakes"] = {**state.pending_wakes, event.wake_id: wake}
    elif isinstance(event, (TurnStarted, NotesDelivered)):
        delivered_notes, delivered_wakes = set(event.notes), set(event.wakes)
        common.update(
            pending_notes={v: n for v, n in state.pending_notes.items() if v not in delivered_notes},
            pending_wakes={w: x for w, x in state.pending_wakes.items() if w not in delivered_wakes},
        )
        if isinstance(event, TurnStarted):
            common.update(turns=state.turns + 1, in_turn=event.reason != "delivery")
    elif isinstance(event, WakeAnswered):
        answered = set(event.wakes)
        common["pending_wakes"] = {w: x for w, x in state.pending_wakes.items() if w not in answered}
    elif isinstance(event, TurnEnded):
        common.update(in_turn=False, last_turn_end=event.reason)
    elif isinstance(event, ModelReplied):
        common.update(model_replies=state.model_replies + 1,
                      unrequested={**state.unrequested, **{c.call_id: c for c in event.tool_calls}},
                      input_tokens=state.input_tokens + event.input_tokens,
                      output_tokens=state.output_tokens + event.output_tokens)
    return state.model_copy(update=common)


def rebuild(events: Iterable[StoredEvent], state: SessionState | None = None) -> SessionState:
    """Fold ``events`` onto ``state`` (a snapshot) or onto an empty session."""
    state = state or SessionState()
    for stored in events:
        state = apply(state, stored)
    return state
