"""The fold: a session's state as a fold of its events, one handler per event type.

State is never stored on its own. :func:`apply` is a pure function of the previous
state and one event, so the state kept incrementally by a running session, the state
rebuilt from the whole journal, and a snapshot plus the events after it are equal.

The state (:mod:`zagent_core.journal.views`) holds what resuming a session needs, not its
history: calls that are still open (and background calls whose task runs, for their
notify file), every task, the notes and wake-ups not yet delivered, and counters. A
finished call leaves the state; the journal and its audit views keep it. That keeps a
snapshot, and opening a session from one, the same size whatever the session's length.

Folding is linear: :func:`rebuild` and a live session fold into the state's own
containers in place (:func:`fold`), one dict entry per event, instead of copying every
call at every event. :func:`apply` copies the containers first, for callers that keep
the state they had.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, Literal, TypeVar

from pydantic import BaseModel

from zagent_core.errors import ZagentError
from zagent_core.journal.events import (
    ApprovalDecided,
    ApprovalRequested,
    ChildEnded,
    ChildSpawned,
    ContextCompacted,
    InputAnswered,
    InputRequested,
    ModelReplied,
    NoteReceived,
    NotesDelivered,
    ParentLink,
    ReadEntry,
    ReadStateUpdated,
    RepliedCall,
    SessionEnded,
    SessionForked,
    SessionResumed,
    SessionStarted,
    SkillActivated,
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
    ToolsUnlocked,
    TurnEnded,
    TurnStarted,
    UserMessage,
    WakeAnswered,
    WakeRequested,
)
from zagent_core.journal.protocol import StoredEvent
from zagent_core.journal.views import (
    HELD_NOTES,
    ApprovalView,
    CallView,
    ChildView,
    NoteView,
    QuestionView,
    ResultView,
    SessionState,
    TaskStatus,
    TaskView,
    WakeView,
)

#: Ended tasks kept in the state (for ``terminal`` and ``sessions show``), the latest ones.
MAX_ENDED_TASKS = 20

#: Bump when the fold changes what it computes from the same events: snapshots made by
#: another projection are then ignored (and remade), never trusted.
PROJECTION_VERSION = 6


class InconsistentJournalError(ZagentError, ValueError):
    """An event refers to a call or task the session never had, or a session's versions have a hole."""


class _Folding:
    """A :class:`SessionState`'s fields, typed and writable: what the handlers change.

    It is the state's own storage seen through typed attributes, not a copy (see
    :meth:`over`): a live session folds every event it commits into the state its readers
    hold, and copying the state's fields in and out at each event would cost more than
    most events' handlers. Its annotations are :class:`SessionState`'s, field for field
    (``tests/test_state.py`` holds them to it); ``history`` is how to fold, not a field of
    the state.
    """

    __slots__ = ("history", "__dict__")

    #: Keep closed calls in ``calls`` (and every ended task), for display: see :func:`rebuild`.
    history: bool

    session_id: str
    version: int
    status: Literal["new", "open", "ended"]
    origin: str | None
    workspace: str | None
    started_at: datetime | None
    ended_at: datetime | None
    last_at: datetime | None
    tools: list[ToolOffer]
    warnings: list[str]
    forked_from: str | None
    calls: dict[str, CallView]
    calls_requested: int
    last_call_id: str | None
    tasks_numbered: int
    pending_notes: dict[int, NoteView]
    pending_wakes: dict[str, WakeView]
    notes_not_held: int
    tasks: dict[str, TaskView]
    notes_received: int
    turns: int
    in_turn: bool
    turn_answered: bool
    unanswered_message: bool
    last_turn_end: str | None
    model_replies: int
    replies_since_person: int
    unrequested: dict[str, RepliedCall]
    input_tokens: int
    output_tokens: int
    model: str | None
    model_base_url: str | None
    read_state: dict[str, ReadEntry]
    tool_state: dict[str, dict[str, Any]]
    active_skills: dict[str, str]
    unlocked: list[str]
    questions: dict[str, QuestionView]
    approvals: dict[str, ApprovalView]
    parent: ParentLink | None
    children: dict[str, ChildView]
    context_from: int

    @classmethod
    def over(cls, state: SessionState, *, history: bool) -> _Folding:
        """``state``'s fields to fold into: the one way a frozen state is ever written."""
        folding = cls.__new__(cls)
        folding.__dict__ = state.__dict__
        folding.history = history
        return folding


# -- the handlers: one per event type --------------------------------------------------------

_E = TypeVar("_E", bound=BaseModel)
_Handler = Callable[[_Folding, _E, StoredEvent], None]
_HANDLERS: dict[type[BaseModel], _Handler[Any]] = {}


def _on(event_type: type[_E]) -> Callable[[_Handler[_E]], _Handler[_E]]:
    """Register the decorated function as the fold's handler of ``event_type``."""
    def register(handler: _Handler[_E]) -> _Handler[_E]:
        _HANDLERS[event_type] = handler
        return handler
    return register


_V = TypeVar("_V", bound=BaseModel)
_new = object.__new__
_set = object.__setattr__
#: The views the fold derives from others, and their fields' names: what such a view has set
#: (every field, as one read from a snapshot has), one set shared rather than one made per event.
_ALL_FIELDS: dict[type[BaseModel], set[str]] = {
    cls: set(cls.model_fields) for cls in (CallView, TaskView, ApprovalView, ChildView)}


def _changed(view: _V, changes: dict[str, Any]) -> _V:
    """``view.model_copy(update=changes)`` for the fold's own views, at a fraction of its cost: one
    is made per event, and the values come from events pydantic has already validated."""
    cls = type(view)
    new = _new(cls)
    _set(new, "__dict__", {**view.__dict__, **changes})
    _set(new, "__pydantic_fields_set__", _ALL_FIELDS.get(cls) or view.__pydantic_fields_set__ | changes.keys())
    _set(new, "__pydantic_extra__", None)
    _set(new, "__pydantic_private__", None)
    return new


#: What each new call's view is derived from (validating a view the fold makes from validated
#: events cost twice as much): its list fields are made anew for each, as their factories would.
_REQUESTED = CallView(call_id="", tool="", arguments=None, requested_at=datetime.min)
_CALL_LISTS = tuple(name for name, field in CallView.model_fields.items() if field.default_factory is list)


def _new_call(call_id: str, tool: str, arguments: Any, at: datetime, parent_call_id: str | None = None) -> CallView:
    fields: dict[str, Any] = {name: [] for name in _CALL_LISTS}
    fields.update(call_id=call_id, tool=tool, arguments=arguments, requested_at=at, parent_call_id=parent_call_id)
    return _changed(_REQUESTED, fields)


_RESULT_FIELDS = tuple(ResultView.model_fields)


def _result_of(event: ToolCallFinished | TaskExited | TaskKilled) -> dict[str, Any]:
    """The result fields calls and tasks share (:class:`ResultView`), as ``event`` gives them."""
    fields = event.__dict__
    return {name: fields[name] for name in _RESULT_FIELDS}


def _update_call(f: _Folding, call_id: str, changes: dict[str, Any]) -> None:
    f.calls[call_id] = _changed(f.calls[call_id], changes)


def _closed(f: _Folding, call_id: str) -> CallView | None:
    """A call got its result: it leaves the state, unless its background task still runs (or the
    fold keeps history); returns it then, for the caller to write its result into. Most calls
    leave: their result's fields are not even gathered."""
    call = f.calls.get(call_id)
    if f.questions:
        f.questions.pop(call_id, None)  # a result, whatever it is, ends the wait
    for child in list(f.children.values()) if f.children else ():
        if child.call_id == call_id and child.status == "running":
            # Its call got a result with no outcome of the child (it could not go on): the
            # child no longer runs for it, and `resume` may give it a new task.
            f.children[child.label] = _changed(child, {"status": "aborted"})
    if f.approvals:
        f.approvals.pop(call_id, None)
    if call is None:  # closed already (a result journaled twice, as old journals may hold): nothing is open
        return None
    task = f.tasks.get(call.task_id) if call.task_id is not None else None
    if f.history or (task is not None and task.status == "running"):
        return call
    del f.calls[call_id]
    return None


def _end_task(f: _Folding, task_id: str, changes: dict[str, Any]) -> None:
    task = _changed(f.tasks.pop(task_id), changes)
    f.tasks[task_id] = task  # ended tasks follow the running ones, in the order they ended
    if f.history:
        return
    call = f.calls.get(task.call_id)
    if call is not None and call.status not in ("requested", "running"):
        del f.calls[task.call_id]  # its notify file has nothing more to tell
    ended = [other.task_id for other in f.tasks.values() if other.status != "running"]
    for old in ended[:-MAX_ENDED_TASKS]:  # the journal keeps them; the state stays the same size
        del f.tasks[old]


def _task_result(event: TaskExited | TaskKilled, status: TaskStatus, stored: StoredEvent) -> dict[str, Any]:
    return {"status": status, "ended_at": event.ended_at or stored.at, "media": event.media} | _result_of(event)


def _delivered(f: _Folding, notes: list[int], wakes: list[str]) -> None:
    """A turn, or a turn's next request, took these notes and wake-ups to the model, and the
    notes not held (a delivery takes every pending note)."""
    for version in notes:
        f.pending_notes.pop(version, None)
    f.notes_not_held = 0
    for wake_id in wakes:
        f.pending_wakes.pop(wake_id, None)
    f.turn_answered = False


@_on(SessionStarted)
def _session_started(f: _Folding, event: SessionStarted, stored: StoredEvent) -> None:
    f.status = "open"
    f.origin = event.origin
    f.workspace = event.workspace
    f.started_at = stored.at
    f.tools = event.tools
    f.warnings = event.warnings
    f.parent = event.parent


@_on(SessionEnded)
def _session_ended(f: _Folding, event: SessionEnded, stored: StoredEvent) -> None:
    f.status = "ended"
    f.ended_at = stored.at


@_on(SessionResumed)
def _session_resumed(f: _Folding, event: SessionResumed, stored: StoredEvent) -> None:
    f.status = "open"
    f.tools = event.tools
    f.warnings = event.warnings


@_on(SessionForked)
def _session_forked(f: _Folding, event: SessionForked, stored: StoredEvent) -> None:
    f.forked_from = f"{event.parent_session_id}@{event.parent_seq}"
    # A fork is a person's own session, even of a sub-agent's: its own tools, top-level.
    f.parent = None


@_on(ToolCallRequested)
def _call_requested(f: _Folding, event: ToolCallRequested, stored: StoredEvent) -> None:
    f.calls[event.call_id] = _new_call(event.call_id, event.tool, event.arguments, stored.at, event.parent_call_id)
    f.unrequested.pop(event.call_id, None)
    f.calls_requested += 1
    f.last_call_id = event.call_id


@_on(ToolCallRejected)
def _call_rejected(f: _Folding, event: ToolCallRejected, stored: StoredEvent) -> None:
    if (call := _closed(f, event.call_id)) is not None:
        f.calls[event.call_id] = _changed(call, {"status": "rejected", "finished_at": stored.at,
                                                 "output": event.message, "is_error": True})


@_on(ToolCallStarted)
def _call_started(f: _Folding, event: ToolCallStarted, stored: StoredEvent) -> None:
    if event.call_id not in f.calls:  # a cut-off call run again after its interruption closed it
        f.calls[event.call_id] = _new_call(event.call_id, event.tool, event.arguments, stored.at)
    f.approvals.pop(event.call_id, None)  # approved and started: the usual cut-off rules apply now
    _update_call(f, event.call_id, {
        "status": "running", "started_at": stored.at, "argv": event.argv, "arguments": event.arguments,
        "coercions": event.coercions, "output_dir": event.output_dir, "notify_file": event.notify_file,
        "task_id": event.task_id, "cwd": event.cwd, "output_mode": event.output_mode,
        "attach_outputs": event.attach_outputs, "timeout_seconds": event.timeout_seconds,
        "notify_offset": event.notify_offset, "attempt": event.attempt})
    if event.task_id is not None and event.task_id.isdigit():
        f.tasks_numbered = max(f.tasks_numbered, int(event.task_id))


@_on(ToolCallFinished)
def _call_finished(f: _Folding, event: ToolCallFinished, stored: StoredEvent) -> None:
    if (call := _closed(f, event.call_id)) is not None:
        f.calls[event.call_id] = _changed(call, {"status": "finished", "finished_at": stored.at, "pid": event.pid}
                                          | _result_of(event))


@_on(ToolCallInterrupted)
def _call_interrupted(f: _Folding, event: ToolCallInterrupted, stored: StoredEvent) -> None:
    if (call := _closed(f, event.call_id)) is not None:
        f.calls[event.call_id] = _changed(call, {"status": "interrupted", "finished_at": stored.at,
                                                 "output": event.message, "is_error": True})


@_on(TaskStarted)
def _task_started(f: _Folding, event: TaskStarted, stored: StoredEvent) -> None:
    f.tasks[event.task_id] = TaskView(
        task_id=event.task_id, call_id=event.call_id, tool=event.tool, pid=event.pid,
        start_ticks=event.start_ticks, boot_id=event.boot_id, task_dir=event.task_dir, started_at=stored.at)


@_on(TaskExited)
def _task_exited(f: _Folding, event: TaskExited, stored: StoredEvent) -> None:
    _end_task(f, event.task_id, _task_result(event, "exited", stored))


@_on(TaskKilled)
def _task_killed(f: _Folding, event: TaskKilled, stored: StoredEvent) -> None:
    _end_task(f, event.task_id, _task_result(event, "killed", stored))


@_on(TaskInterrupted)
def _task_interrupted(f: _Folding, event: TaskInterrupted, stored: StoredEvent) -> None:
    _end_task(f, event.task_id, {"status": "interrupted", "ended_at": stored.at, "output": event.message,
                                 "is_error": True})


@_on(NoteReceived)
def _note_received(f: _Folding, event: NoteReceived, stored: StoredEvent) -> None:
    if event.call_id in f.calls:  # a closed call's last lines (a replay re-creates them) move nothing
        _update_call(f, event.call_id, {"notify_offset": event.offset})
    if len(f.pending_notes) < HELD_NOTES:
        f.pending_notes[stored.version] = NoteView(
            version=stored.version, call_id=event.call_id, task_id=event.task_id, text=event.text, wake=event.wake,
            at=stored.at)
    else:
        f.notes_not_held += 1
    f.notes_received += 1


@_on(WakeRequested)
def _wake_requested(f: _Folding, event: WakeRequested, stored: StoredEvent) -> None:
    f.pending_wakes[event.wake_id] = WakeView(wake_id=event.wake_id, reason=event.reason, text=event.text,
                                              call_id=event.call_id, task_id=event.task_id, at=stored.at)


@_on(TurnStarted)
def _turn_started(f: _Folding, event: TurnStarted, stored: StoredEvent) -> None:
    _delivered(f, event.notes, event.wakes)
    f.turns += 1
    f.in_turn = event.reason != "delivery"
    f.unanswered_message = False
    if event.model is not None:
        f.model = event.model
        f.model_base_url = event.model_base_url


@_on(NotesDelivered)
def _notes_delivered(f: _Folding, event: NotesDelivered, stored: StoredEvent) -> None:
    _delivered(f, event.notes, event.wakes)


@_on(UserMessage)
def _user_message(f: _Folding, event: UserMessage, stored: StoredEvent) -> None:
    f.unanswered_message = True
    f.replies_since_person = 0
    if event.model is not None:  # the model asked for it: the endpoint is the driver's config's
        f.model = event.model
        f.model_base_url = None


@_on(WakeAnswered)
def _wakes_answered(f: _Folding, event: WakeAnswered, stored: StoredEvent) -> None:
    for wake_id in event.wakes:
        f.pending_wakes.pop(wake_id, None)


@_on(TurnEnded)
def _turn_ended(f: _Folding, event: TurnEnded, stored: StoredEvent) -> None:
    f.in_turn = False
    f.last_turn_end = event.reason


@_on(ModelReplied)
def _model_replied(f: _Folding, event: ModelReplied, stored: StoredEvent) -> None:
    f.model_replies += 1
    f.replies_since_person += 1
    f.turn_answered = not event.tool_calls
    f.unrequested.update((call.call_id, call) for call in event.tool_calls)
    f.input_tokens += event.input_tokens
    f.output_tokens += event.output_tokens


@_on(ReadStateUpdated)
def _read_state_updated(f: _Folding, event: ReadStateUpdated, stored: StoredEvent) -> None:
    for entry in event.entries:
        f.read_state[entry.path] = entry


@_on(ToolStateWritten)
def _tool_state_written(f: _Folding, event: ToolStateWritten, stored: StoredEvent) -> None:
    # A new dict, never an edit of the old one: a state kept by apply's caller shares it.
    values = {**f.tool_state.get(event.tool, {}), **event.values}
    f.tool_state[event.tool] = {key: value for key, value in values.items() if value is not None}


@_on(SkillActivated)
def _skill_activated(f: _Folding, event: SkillActivated, stored: StoredEvent) -> None:
    f.active_skills[event.name] = event.sha256
@_on(ToolsUnlocked)
def _tools_unlocked(f: _Folding, event: ToolsUnlocked, stored: StoredEvent) -> None:
    # A new list, never an edit of the old one: a state kept by apply's caller shares it (a
    # session unlocks a few tools, at most every deferred one, so the copy stays small).
    f.unlocked = [*f.unlocked, *(name for name in dict.fromkeys(event.tools) if name not in f.unlocked)]


@_on(InputRequested)
def _input_requested(f: _Folding, event: InputRequested, stored: StoredEvent) -> None:
    f.questions[event.call_id] = QuestionView(call_id=event.call_id, question=event.question,
                                              choices=event.choices, at=stored.at)


@_on(InputAnswered)
def _input_answered(f: _Folding, event: InputAnswered, stored: StoredEvent) -> None:
    f.questions.pop(event.call_id, None)
    f.replies_since_person = 0


@_on(ApprovalRequested)
def _approval_requested(f: _Folding, event: ApprovalRequested, stored: StoredEvent) -> None:
    f.approvals[event.call_id] = ApprovalView(call_id=event.call_id, tool=event.tool, arguments=event.arguments,
                                              why=event.why, at=stored.at)


@_on(ApprovalDecided)
def _approval_decided(f: _Folding, event: ApprovalDecided, stored: StoredEvent) -> None:
    if event.via != "config":  # approvals.allow decides without a person
        f.replies_since_person = 0
    if event.call_id in f.approvals:  # a denial's rejection, in the same step, closes it
        f.approvals[event.call_id] = _changed(f.approvals[event.call_id], {"approved": event.approved})


@_on(ChildSpawned)
def _child_spawned(f: _Folding, event: ChildSpawned, stored: StoredEvent) -> None:
    f.children.pop(event.label, None)  # a resumed child moves to the end, as the latest spawned
    f.children[event.label] = ChildView(label=event.label, session_id=event.child_session_id, call_id=event.call_id,
                                        task=event.task, subagent_type=event.subagent_type, model=event.model,
                                        from_version=event.from_version, spawned_at=stored.at)


@_on(ChildEnded)
def _child_ended(f: _Folding, event: ChildEnded, stored: StoredEvent) -> None:
    f.children[event.label] = _changed(f.children[event.label], {"status": event.status, "text": event.text,
                                                                 "stats": event.stats})


@_on(ContextCompacted)
def _context_compacted(f: _Folding, event: ContextCompacted, stored: StoredEvent) -> None:
    f.context_from = event.through_version


# -- folding -----------------------------------------------------------------------------------


def _fold(f: _Folding, stored: StoredEvent) -> None:
    _fold_events((stored,), lambda session_id: f)


def _fold_events(events: Iterable[StoredEvent], folding_of: Callable[[str], _Folding]) -> None:
    """Fold each of ``events`` into its session's :class:`_Folding` (``folding_of(session_id)``,
    asked once per session), in one loop: the per-event work is what a long rebuild pays most for."""
    handlers = _HANDLERS
    foldings: dict[str, _Folding] = {}
    for stored in events:
        f = foldings.get(stored.session_id)
        if f is None:
            f = foldings[stored.session_id] = folding_of(stored.session_id)
        if stored.version != f.version + 1:
            raise _hole(stored, f.version)
        handler = handlers.get(type(stored.event))
        if handler is not None:
            try:
                handler(f, stored.event, stored)
            except KeyError as missing:
                raise InconsistentJournalError(
                    f"event #{stored.seq} ({stored.event.type}) of session {stored.session_id} refers to {missing}, "
                    "which the session never had: the journal was edited or damaged") from None
        f.session_id = stored.session_id
        f.version = stored.version
        f.last_at = stored.at


def _hole(stored: StoredEvent, version: int) -> InconsistentJournalError:
    # What the missing events said (a call finished, a task ended) is unknown, and a session
    # driven from here would contradict them (a finished call reported not run).
    return InconsistentJournalError(
        f"session {stored.session_id} is damaged: its version {stored.version} follows version {version} "
        f"(events were deleted or written around zagent), so it cannot be shown or driven; "
        "`zagent journal recover JOURNAL NEW_FILE` copies each session up to its first gap into a new journal")


def fold(state: SessionState, stored: StoredEvent) -> None:
    """Apply ``stored`` to ``state`` in place: O(1) per event, whatever the session's length.

    Only the fold's owner (a live session, :func:`rebuild`) may call this; everyone
    else uses :func:`apply`.
    """
    _fold(_Folding.over(state, history=state._history), stored)


_CONTAINERS = ("calls", "pending_notes", "pending_wakes", "tasks", "unrequested", "read_state", "tool_state",
               "active_skills", "questions", "approvals", "children")


def _own_copy(state: SessionState) -> SessionState:
    """A copy whose containers are its own, so folding into it leaves ``state`` as it was."""
    return state.model_copy(update={name: dict(getattr(state, name)) for name in _CONTAINERS})


def apply(state: SessionState, stored: StoredEvent) -> SessionState:
    """The state after ``stored``; ``state`` is not modified."""
    after = _own_copy(state)
    fold(after, stored)
    return after


def rebuild(events: Iterable[StoredEvent], state: SessionState | None = None, *,
            history: bool = False) -> SessionState:
    """Fold ``events`` onto ``state`` (a snapshot, which is left as it was) or onto an empty session.

    ``history=True`` keeps every call, closed ones too, in ``calls`` (what
    ``zagent sessions show`` lists), and so does every later fold onto that state (a state
    rebuilt with history stays one); such a state is for display, not for snapshots.
    """
    state = _own_copy(state) if state is not None else SessionState()
    state._history = history = history or state._history
    folding = _Folding.over(state, history=history)
    _fold_events(events, lambda session_id: folding)
    return state


def rebuild_all(events: Iterable[StoredEvent], *, history: bool = False) -> dict[str, SessionState]:
    """Every session's state, folded in one pass over ``events`` of many sessions, in the order
    the journal holds them (by ``seq``: each session's events in its version order).

    A table scan reads each page of the journal once, where reading session after session
    jumps about the file; each event goes to its session's own state as it comes.
    """
    states: dict[str, SessionState] = {}

    def new_session(session_id: str) -> _Folding:
        state = states[session_id] = SessionState()
        state._history = history
        return _Folding.over(state, history=history)

    _fold_events(events, new_session)
    return states
