"""Projections: session state as a fold of its events.

State is never stored on its own. :func:`apply` is a pure function of the previous
state and one event, so the state kept incrementally by a running session, the state
rebuilt from the whole journal, and a snapshot plus the events after it are equal.

The state holds what resuming a session needs, not its history: calls that are still
open (and background calls whose task runs, for their notify file), every task, the
notes and wake-ups not yet delivered, and counters. A finished call leaves the state;
the journal and its audit views keep it. That keeps a snapshot, and opening a session
from one, the same size whatever the session's length.

Folding is linear: :func:`rebuild` and a live session fold into the state's own
containers in place (:func:`fold`), one dict entry per event, instead of copying every
call at every event. :func:`apply` copies the containers first, for callers that keep
the state they had.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from zagent_core.journal.events import (
    ApprovalDecided,
    ApprovalRequested,
    ChildEnded,
    ChildSpawned,
    Coercion,
    InputAnswered,
    InputRequested,
    Media,
    ModelReplied,
    NoteReceived,
    NotesDelivered,
    OutputFile,
    ParentLink,
    ReadEntry,
    ReadStateUpdated,
    RepliedCall,
    SessionEnded,
    SessionForked,
    SessionResumed,
    SessionStarted,
    SpawnStats,
    TaskExited,
    TaskInterrupted,
    TaskKilled,
    TaskStarted,
    ToolCallFinished,
    ToolCallInterrupted,
    ToolCallRejected,
    ToolCallRequested,
    ToolCallStarted,
    ToolOffer,
    ToolStateWritten,
    TurnEnded,
    TurnStarted,
    UserMessage,
    WakeAnswered,
    WakeRequested,
)
from zagent_core.journal.protocol import StoredEvent

CallStatus = Literal["requested", "rejected", "running", "finished", "interrupted"]
TaskStatus = Literal["running", "exited", "killed", "interrupted"]

#: Ended tasks kept in the state (for ``terminal`` and ``sessions show``), the latest ones.
MAX_ENDED_TASKS = 20

#: Bump when the fold changes what it computes from the same events: snapshots made by
#: another projection are then ignored (and remade), never trusted.
PROJECTION_VERSION = 5


class CallView(BaseModel):
    """One open tool call as the journal tells it so far."""

    model_config = ConfigDict(frozen=True)

    call_id: str
    tool: str
    arguments: Any
    status: CallStatus = "requested"
    requested_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    argv: list[str] = Field(default_factory=list)
    coercions: list[Coercion] = Field(default_factory=list)
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
    #: Which run of the call this is: 2 when a resume ran it again after a crash.
    attempt: int = 1
    pid: int | None = None
    output: str | None = None
    is_error: bool | None = None
    exit_code: int | None = None
    timed_out: bool = False
    duration_ms: int | None = None
    files: list[OutputFile] = Field(default_factory=list)


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
    files: list[OutputFile] = Field(default_factory=list)
    media: list[Media] = Field(default_factory=list)


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


class QuestionView(BaseModel):
    """A question an ``ask_user`` call asked that has no answer yet: its call waits on it."""

    model_config = ConfigDict(frozen=True)

    call_id: str
    question: str
    choices: list[str] | None = None
    at: datetime


class ApprovalView(BaseModel):
    """A call that needs a person's approval and has not started: waiting for the decision
    (``approved`` None), or approved and not started yet (a crash came first)."""

    model_config = ConfigDict(frozen=True)

    call_id: str
    tool: str
    arguments: Any
    why: str
    at: datetime
    approved: bool | None = None


class ChildView(BaseModel):
    """A sub-agent this session spawned: running (its spawn call waits on it) or how it ended."""

    model_config = ConfigDict(frozen=True)

    label: str
    session_id: str
    #: The spawn call it answers now (a resumed child answers the call that resumed it).
    call_id: str
    task: str
    subagent_type: str | None = None
    model: str
    status: Literal["running", "completed", "error", "aborted", "timeout"] = "running"
    #: The child's journal version when it was given ``task`` (see ``child_spawned``).
    from_version: int = 0
    text: str = ""
    stats: SpawnStats = SpawnStats()
    spawned_at: datetime


class SessionState(BaseModel):
    """What resuming a session needs, rebuilt from its events.

    Frozen to its users; the fold alone writes it (see :func:`fold`). A live session's
    ``state`` is updated in place as events are committed: keep ``apply``'s result, or a
    ``model_copy(deep=True)``, to hold on to one moment.
    """

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
    #: Open calls (requested or running, and background calls whose task still runs),
    #: in the order they were requested. Finished calls are in the journal, not here.
    calls: dict[str, CallView] = {}
    calls_requested: int = 0
    #: The call requested last (open or not).
    last_call_id: str | None = None
    #: The highest background task number given so far.
    tasks_numbered: int = 0
    #: Notes and wake-ups journaled but not yet taken by a turn, by version / wake id.
    pending_notes: dict[int, NoteView] = {}
    pending_wakes: dict[str, WakeView] = {}
    #: Background tasks by number ("1", "2", ...): the running ones, then the latest
    #: ``MAX_ENDED_TASKS`` that ended, in the order they ended.
    tasks: dict[str, TaskView] = {}
    notes_received: int = 0
    turns: int = 0
    #: A turn began and has not ended: the agent was working (or was cut off doing so).
    in_turn: bool = False
    #: The turn's last model reply asked for no tool, and nothing reached the model since: a
    #: crash before its ``turn_ended`` cut off nothing the model must be asked again about.
    turn_answered: bool = False
    #: A user message no turn has taken up yet (the run stopped between the two).
    unanswered_message: bool = False
    last_turn_end: str | None = None
    model_replies: int = 0
    #: Tool calls of the last model reply that have not been requested yet (cut off before running).
    unrequested: dict[str, RepliedCall] = {}
    input_tokens: int = 0
    output_tokens: int = 0
    #: The model the latest turn asked, and its endpoint (``zagent resume`` asks it again).
    model: str | None = None
    model_base_url: str | None = None
    #: What the model was shown of each file, by path: the read-before-edit gate.
    read_state: dict[str, ReadEntry] = {}
    #: Each tool's durable key/value state, by tool name.
    tool_state: dict[str, dict[str, Any]] = {}
    #: Questions asked (``input_requested``) and not answered yet, by call id, oldest first:
    #: their calls are parked, not cut off.
    questions: dict[str, QuestionView] = {}
    #: Calls that need approval and have not started (``approval_requested``), by call id,
    #: oldest first: parked while undecided, to be started when approved.
    approvals: dict[str, ApprovalView] = {}
    #: Set for a sub-agent: the parent session and the spawn call it answers.
    parent: ParentLink | None = None
    #: The sub-agents this session spawned, by label (``child-1``...), in the order spawned.
    children: dict[str, ChildView] = {}

    @property
    def waiting_approvals(self) -> dict[str, ApprovalView]:
        """The approvals no one has decided yet: their calls are parked, not cut off."""
        return {call_id: a for call_id, a in list(self.approvals.items()) if a.approved is None}

    @property
    def running_children(self) -> list[ChildView]:
        """Children whose spawn call has no result yet: resume drives them on."""
        return [child for child in list(self.children.values()) if child.status == "running"]

    @property
    def running_calls(self) -> list[CallView]:
        """Calls that started and have no result yet (cut off, if the engine is gone)."""
        # list() first: a session's watcher thread may fold an event meanwhile.
        return [call for call in list(self.calls.values()) if call.status == "running"]

    @property
    def running_tasks(self) -> list[TaskView]:
        return [task for task in list(self.tasks.values()) if task.status == "running"]


def status_of(state: SessionState) -> str:
    """``ended``, ``waiting on user`` (a question waits for ``zagent answer``), ``waiting on
    approval`` (a call waits for ``zagent approve`` or ``deny``), ``interrupted`` (cut off
    mid-turn or mid-call), ``waiting on tasks`` or ``idle``.

    Whether a live process drives the session (``running``) is the lease's to say, not the journal's.
    """
    if state.status == "ended":
        return "ended"
    if state.questions:
        return "waiting on user"
    if state.waiting_approvals:
        return "waiting on approval"
    # A question answered (or a call approved) whose turn has not gone on yet (the process
    # died first) is a cut-off turn too: ``zagent resume`` continues it (and starts the call).
    if (state.in_turn or state.unanswered_message or state.running_calls or state.unrequested or state.approvals
            or state.last_turn_end in ("waiting_on_user", "waiting_on_approval")):
        return "interrupted"
    if state.running_tasks:
        return "waiting on tasks"
    return "idle"


class InconsistentJournalError(ValueError):
    """An event refers to a call or task the session never had."""


# -- the fold: one handler per event type ------------------------------------------------

_Handler = TypeVar("_Handler", bound=Callable[..., None])
_HANDLERS: dict[type[BaseModel], Callable[[dict[str, Any], Any, StoredEvent], None]] = {}


def _on(*types: type[BaseModel]) -> Callable[[_Handler], _Handler]:
    """Register the decorated function as the fold's handler of these event types."""
    def register(handler: _Handler) -> _Handler:
        for event_type in types:
            _HANDLERS[event_type] = handler
        return handler
    return register


_V = TypeVar("_V", bound=BaseModel)


def _changed(view: _V, changes: dict[str, Any]) -> _V:
    """``view.model_copy(update=changes)`` for the fold's own views, at half its cost: one
    is made per event, and the values come from events pydantic has already validated."""
    new = object.__new__(type(view))
    fields = view.__dict__.copy()
    fields.update(changes)
    object.__setattr__(new, "__dict__", fields)
    object.__setattr__(new, "__pydantic_fields_set__", view.__pydantic_fields_set__ | changes.keys())
    object.__setattr__(new, "__pydantic_extra__", None)
    object.__setattr__(new, "__pydantic_private__", None)
    return new


def _update_call(s: dict[str, Any], call_id: str, **changes: Any) -> None:
    calls: dict[str, CallView] = s["calls"]
    calls[call_id] = _changed(calls[call_id], changes)


class _History(dict):  # type: ignore[type-arg]
    """The ``calls`` of a state folded with ``history=True``: closed calls stay, for display."""


def _close_call(s: dict[str, Any], call_id: str, **changes: Any) -> None:
    """A call got its result: it leaves the state, unless its background task still runs."""
    calls: dict[str, CallView] = s["calls"]
    call = calls.get(call_id)
    s["questions"].pop(call_id, None)  # a result, whatever it is, ends the wait
    for child in list(s["children"].values()):
        if child.call_id == call_id and child.status == "running":
            # Its call got a result with no outcome of the child (it could not go on): the
            # child no longer runs for it, and `resume` may give it a new task.
            s["children"][child.label] = _changed(child, {"status": "aborted"})
    s["approvals"].pop(call_id, None)
    if call is None:  # closed already (a result journaled twice, as old journals may hold): nothing is open
        return
    task = s["tasks"].get(call.task_id) if call.task_id is not None else None
    if isinstance(calls, _History) or (task is not None and task.status == "running"):
        calls[call_id] = _changed(call, changes)
    else:
        del calls[call_id]


def _end_task(s: dict[str, Any], task_id: str, **changes: Any) -> None:
    tasks: dict[str, TaskView] = s["tasks"]
    task = _changed(tasks.pop(task_id), changes)
    tasks[task_id] = task  # ended tasks follow the running ones, in the order they ended
    if isinstance(s["calls"], _History):
        return
    call = s["calls"].get(task.call_id)
    if call is not None and call.status not in ("requested", "running"):
        del s["calls"][task.call_id]  # its notify file has nothing more to tell
    ended = [other.task_id for other in tasks.values() if other.status != "running"]
    for old in ended[:-MAX_ENDED_TASKS]:  # the journal keeps them; the state stays the same size
        del tasks[old]


@_on(SessionStarted)
def _session_started(s: dict[str, Any], event: SessionStarted, stored: StoredEvent) -> None:
    s.update(status="open", origin=event.origin, workspace=event.workspace, started_at=stored.at,
             tools=event.tools, warnings=event.warnings, parent=event.parent)


@_on(SessionEnded)
def _session_ended(s: dict[str, Any], event: SessionEnded, stored: StoredEvent) -> None:
    s.update(status="ended", ended_at=stored.at)


@_on(SessionResumed)
def _session_resumed(s: dict[str, Any], event: SessionResumed, stored: StoredEvent) -> None:
    s.update(status="open", tools=event.tools, warnings=event.warnings)


@_on(SessionForked)
def _session_forked(s: dict[str, Any], event: SessionForked, stored: StoredEvent) -> None:
    s["forked_from"] = f"{event.parent_session_id}@{event.parent_seq}"
    # A fork is a person's own session, even of a sub-agent's: its own tools, top-level.
    s["parent"] = None


@_on(ToolCallRequested)
def _call_requested(s: dict[str, Any], event: ToolCallRequested, stored: StoredEvent) -> None:
    s["calls"][event.call_id] = CallView(call_id=event.call_id, tool=event.tool, arguments=event.arguments,
                                         requested_at=stored.at)
    s["unrequested"].pop(event.call_id, None)
    s["calls_requested"] += 1
    s["last_call_id"] = event.call_id


@_on(ToolCallRejected)
def _call_rejected(s: dict[str, Any], event: ToolCallRejected, stored: StoredEvent) -> None:
    _close_call(s, event.call_id, status="rejected", finished_at=stored.at, output=event.message, is_error=True)


@_on(ToolCallStarted)
def _call_started(s: dict[str, Any], event: ToolCallStarted, stored: StoredEvent) -> None:
    calls: dict[str, CallView] = s["calls"]
    if event.call_id not in calls:  # a cut-off call run again after its interruption closed it
        calls[event.call_id] = CallView(call_id=event.call_id, tool=event.tool, arguments=event.arguments,
                                        requested_at=stored.at)
    s["approvals"].pop(event.call_id, None)  # approved and started: the usual cut-off rules apply now
    _update_call(s, event.call_id, status="running", started_at=stored.at, argv=event.argv,
                 arguments=event.arguments, coercions=event.coercions, output_dir=event.output_dir,
                 notify_file=event.notify_file, task_id=event.task_id, cwd=event.cwd,
                 output_mode=event.output_mode, attach_outputs=event.attach_outputs,
                 timeout_seconds=event.timeout_seconds, notify_offset=event.notify_offset, attempt=event.attempt)
    if event.task_id is not None and event.task_id.isdigit():
        s["tasks_numbered"] = max(s["tasks_numbered"], int(event.task_id))


@_on(ToolCallFinished)
def _call_finished(s: dict[str, Any], event: ToolCallFinished, stored: StoredEvent) -> None:
    _close_call(s, event.call_id, status="finished", finished_at=stored.at, pid=event.pid, output=event.output,
                is_error=event.is_error, exit_code=event.exit_code, timed_out=event.timed_out,
                duration_ms=event.duration_ms, files=event.files)


@_on(ToolCallInterrupted)
def _call_interrupted(s: dict[str, Any], event: ToolCallInterrupted, stored: StoredEvent) -> None:
    _close_call(s, event.call_id, status="interrupted", finished_at=stored.at, output=event.message, is_error=True)


@_on(TaskStarted)
def _task_started(s: dict[str, Any], event: TaskStarted, stored: StoredEvent) -> None:
    s["tasks"][event.task_id] = TaskView(
        task_id=event.task_id, call_id=event.call_id, tool=event.tool, pid=event.pid,
        start_ticks=event.start_ticks, boot_id=event.boot_id, task_dir=event.task_dir, started_at=stored.at)


@_on(TaskExited, TaskKilled)
def _task_ended(s: dict[str, Any], event: TaskExited | TaskKilled, stored: StoredEvent) -> None:
    _end_task(s, event.task_id, status="exited" if isinstance(event, TaskExited) else "killed",
              ended_at=event.ended_at or stored.at, output=event.output,
              is_error=event.is_error, exit_code=event.exit_code, timed_out=event.timed_out,
              duration_ms=event.duration_ms, files=event.files, media=event.media)


@_on(TaskInterrupted)
def _task_interrupted(s: dict[str, Any], event: TaskInterrupted, stored: StoredEvent) -> None:
    _end_task(s, event.task_id, status="interrupted", ended_at=stored.at, output=event.message, is_error=True)


@_on(NoteReceived)
def _note_received(s: dict[str, Any], event: NoteReceived, stored: StoredEvent) -> None:
    if event.call_id in s["calls"]:  # a closed call's last lines (a replay re-creates them) move nothing
        _update_call(s, event.call_id, notify_offset=event.offset)
    s["pending_notes"][stored.version] = NoteView(
        version=stored.version, call_id=event.call_id, task_id=event.task_id, text=event.text, wake=event.wake,
        at=stored.at)
    s["notes_received"] += 1


@_on(WakeRequested)
def _wake_requested(s: dict[str, Any], event: WakeRequested, stored: StoredEvent) -> None:
    s["pending_wakes"][event.wake_id] = WakeView(wake_id=event.wake_id, reason=event.reason, text=event.text,
                                                 call_id=event.call_id, task_id=event.task_id, at=stored.at)


@_on(TurnStarted, NotesDelivered)
def _delivered(s: dict[str, Any], event: TurnStarted | NotesDelivered, stored: StoredEvent) -> None:
    for version in event.notes:
        s["pending_notes"].pop(version, None)
    for wake_id in event.wakes:
        s["pending_wakes"].pop(wake_id, None)
    s["turn_answered"] = False
    if isinstance(event, TurnStarted):
        s["turns"] += 1
        s["in_turn"] = event.reason != "delivery"
        s["unanswered_message"] = False
        if event.model is not None:
            s.update(model=event.model, model_base_url=event.model_base_url)


@_on(UserMessage)
def _user_message(s: dict[str, Any], event: UserMessage, stored: StoredEvent) -> None:
    s["unanswered_message"] = True


@_on(WakeAnswered)
def _wakes_answered(s: dict[str, Any], event: WakeAnswered, stored: StoredEvent) -> None:
    for wake_id in event.wakes:
        s["pending_wakes"].pop(wake_id, None)


@_on(TurnEnded)
def _turn_ended(s: dict[str, Any], event: TurnEnded, stored: StoredEvent) -> None:
    s.update(in_turn=False, last_turn_end=event.reason)


@_on(ModelReplied)
def _model_replied(s: dict[str, Any], event: ModelReplied, stored: StoredEvent) -> None:
    s["model_replies"] += 1
    s["turn_answered"] = not event.tool_calls
    s["unrequested"].update((call.call_id, call) for call in event.tool_calls)
    s["input_tokens"] += event.input_tokens
    s["output_tokens"] += event.output_tokens


@_on(ReadStateUpdated)
def _read_state_updated(s: dict[str, Any], event: ReadStateUpdated, stored: StoredEvent) -> None:
    for entry in event.entries:
        s["read_state"][entry.path] = entry


@_on(ToolStateWritten)
def _tool_state_written(s: dict[str, Any], event: ToolStateWritten, stored: StoredEvent) -> None:
    # A new dict, never an edit of the old one: a state kept by apply's caller shares it.
    values = {**s["tool_state"].get(event.tool, {}), **event.values}
    s["tool_state"][event.tool] = {key: value for key, value in values.items() if value is not None}


@_on(InputRequested)
def _input_requested(s: dict[str, Any], event: InputRequested, stored: StoredEvent) -> None:
    s["questions"][event.call_id] = QuestionView(call_id=event.call_id, question=event.question,
                                                 choices=event.choices, at=stored.at)


@_on(InputAnswered)
def _input_answered(s: dict[str, Any], event: InputAnswered, stored: StoredEvent) -> None:
    s["questions"].pop(event.call_id, None)


@_on(ApprovalRequested)
def _approval_requested(s: dict[str, Any], event: ApprovalRequested, stored: StoredEvent) -> None:
    s["approvals"][event.call_id] = ApprovalView(call_id=event.call_id, tool=event.tool, arguments=event.arguments,
                                                 why=event.why, at=stored.at)


@_on(ApprovalDecided)
def _approval_decided(s: dict[str, Any], event: ApprovalDecided, stored: StoredEvent) -> None:
    approvals: dict[str, ApprovalView] = s["approvals"]
    if event.call_id in approvals:  # a denial's rejection, in the same step, closes it
        approvals[event.call_id] = _changed(approvals[event.call_id], {"approved": event.approved})


@_on(ChildSpawned)
def _child_spawned(s: dict[str, Any], event: ChildSpawned, stored: StoredEvent) -> None:
    children: dict[str, ChildView] = s["children"]
    children.pop(event.label, None)  # a resumed child moves to the end, as the latest spawned
    children[event.label] = ChildView(label=event.label, session_id=event.child_session_id, call_id=event.call_id,
                                      task=event.task, subagent_type=event.subagent_type, model=event.model,
                                      from_version=event.from_version, spawned_at=stored.at)


@_on(ChildEnded)
def _child_ended(s: dict[str, Any], event: ChildEnded, stored: StoredEvent) -> None:
    children: dict[str, ChildView] = s["children"]
    children[event.label] = _changed(children[event.label], {"status": event.status, "text": event.text,
                                                             "stats": event.stats})


def fold(state: SessionState, stored: StoredEvent) -> None:
    """Apply ``stored`` to ``state`` in place: O(1) per event, whatever the session's length.

    Only the fold's owner (a live session, :func:`rebuild`) may call this; everyone
    else uses :func:`apply`.
    """
    fields = state.__dict__  # the frozen model's own storage: written here and nowhere else
    handler = _HANDLERS.get(type(stored.event))
    try:
        if handler is not None:
            handler(fields, stored.event, stored)
    except KeyError as missing:
        raise InconsistentJournalError(
            f"event #{stored.seq} ({stored.event.type}) of session {stored.session_id} refers to {missing}, which "
            "the session never had: the journal was edited or damaged") from None
    fields.update(session_id=stored.session_id, version=stored.version, last_at=stored.at)


_CONTAINERS = ("calls", "pending_notes", "pending_wakes", "tasks", "unrequested", "read_state", "tool_state",
               "questions", "approvals", "children")


def _own_copy(state: SessionState) -> SessionState:
    """A copy whose containers are its own, so folding into it leaves ``state`` as it was."""
    return state.model_copy(update={name: type(getattr(state, name))(getattr(state, name)) for name in _CONTAINERS})


def apply(state: SessionState, stored: StoredEvent) -> SessionState:
    """The state after ``stored``; ``state`` is not modified."""
    after = _own_copy(state)
    fold(after, stored)
    return after


def rebuild(events: Iterable[StoredEvent], state: SessionState | None = None, *,
            history: bool = False) -> SessionState:
    """Fold ``events`` onto ``state`` (a snapshot, which is left as it was) or onto an empty session.

    ``history=True`` keeps every call, closed ones too, in ``calls`` (what
    ``zagent sessions show`` lists); such a state is for display, not for snapshots.
    """
    if state is not None:
        state = _own_copy(state)
    else:
        state = SessionState.model_construct(calls=_History()) if history else SessionState()
    for stored in events:
        fold(state, stored)
    return state


# -- snapshots -----------------------------------------------------------------------------


@functools.cache
def projection_tag() -> str:
    """Names this projection in stored snapshots: its version and the shape of its state.

    A snapshot with another tag was made by other code (older, newer, or a changed
    ``SessionState``) and is never loaded.
    """
    import json

    shape = json.dumps(SessionState.model_json_schema(), sort_keys=True)
    return f"session/{PROJECTION_VERSION}/{hashlib.sha256(shape.encode()).hexdigest()[:12]}"


def to_snapshot(state: SessionState) -> str:
    """The state as the JSON text a snapshot stores."""
    return state.model_dump_json()


def from_snapshot(data: str | bytes) -> SessionState | None:
    """The state a snapshot holds, or None when it cannot be read (damaged: fold from the start)."""
    try:
        return SessionState.model_validate_json(data)
    except (ValidationError, ValueError):
        return None

