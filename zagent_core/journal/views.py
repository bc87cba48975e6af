"""The views: what a session's state holds, as its fold leaves it.

:class:`SessionState` and the views it is made of (calls, tasks, notes, wake-ups,
questions, approvals, children) are frozen pydantic models: their users read them, the
fold in :mod:`zagent_core.journal.fold` alone makes them, and
:mod:`zagent_core.journal.snapshots` stores them. :func:`status_of` is what the state
alone says of the session.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from zagent_core.journal.events import (
    Coercion,
    Media,
    OutputFile,
    ParentLink,
    ReadEntry,
    RepliedCall,
    SpawnStats,
    ToolOffer,
)

CallStatus = Literal["requested", "rejected", "running", "finished", "interrupted"]
TaskStatus = Literal["running", "exited", "killed", "interrupted"]


class ResultView(BaseModel):
    """What a finished run gave the model, as the state keeps it: the result fields a call
    and a task share (taken from ``events._Result``'s, see ``fold._result_of``). None and
    empty until the run has ended."""

    model_config = ConfigDict(frozen=True)

    output: str | None = None
    is_error: bool | None = None
    exit_code: int | None = None
    timed_out: bool = False
    duration_ms: int | None = None
    files: list[OutputFile] = Field(default_factory=list)


class CallView(ResultView):
    """One open tool call as the journal tells it so far."""

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
    #: Set for a nested call: the call whose tool asked for it.
    parent_call_id: str | None = None


class TaskView(ResultView):
    """One background task as the journal tells it so far."""

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
    media: list[Media] = Field(default_factory=list)


#: Undelivered notes a session holds, at most: a flood of notes must not take the memory
#: of the process that drives it (a million notes took 1.8 GB). One request shows fewer
#: (``limits.notes_bytes_per_request``, 32 KiB, about a thousand); those past it reach the
#: model as a count, and the journal keeps every one.
HELD_NOTES = 2000
#: The origins of sessions whose calls a person (``zagent tools run``) or an MCP client
#: (``zagent mcp serve``) makes: no model is in their loop.
MODELLESS_ORIGINS = ("tools run", "mcp")


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
    # The docstring is part of the projection's tag (snapshots.projection_tag hashes the
    # schema): edited, it makes every stored snapshot a stranger, to be folded again.

    model_config = ConfigDict(frozen=True)

    # Folded with history (rebuild(history=True)): events folded onto it later keep their
    # closed calls too. Not a field: neither in snapshots nor in the projection's tag.
    _history = PrivateAttr(default=False)

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
    #: Notes and wake-ups journaled but not yet taken by a turn, by version / wake id: the
    #: first :data:`HELD_NOTES` notes only.
    pending_notes: dict[int, NoteView] = {}
    pending_wakes: dict[str, WakeView] = {}
    #: Notes journaled past the :data:`HELD_NOTES` that ``pending_notes`` holds, not taken by a
    #: turn yet: counted, not held. The next delivery takes them with the others, as a count.
    notes_not_held: int = 0
    #: Background tasks by number ("1", "2", ...): the running ones, then the latest
    #: ``fold.MAX_ENDED_TASKS`` that ended, in the order they ended.
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
    #: Model replies since a person last gave the session something (a message, an answer, a
    #: decision): what ``agent.max_turns`` bounds under ``zagent worker``, claim after claim.
    replies_since_person: int = 0
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
    #: The skills ``skills_use`` made active, by name: the sha256 of the SKILL.md it read.
    active_skills: dict[str, str] = {}
    #: The deferred tools ``tool_search`` unlocked, in the order it did: requests offer them after
    #: the other tools, in this order (see config.json's ``tools.disclosure``).
    unlocked: list[str] = []
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
    #: The conversation the model is shown starts after this version (the latest
    #: ``context_compacted``'s ``through_version``; 0: from the start).
    context_from: int = 0

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
    mid-turn or mid-call), ``queued`` (a message no turn has taken up yet: ``run --detach``
    left it for a worker), ``waiting on tasks`` or ``idle``.

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
    # So is a turn ended "interrupted" (Ctrl-C, or a resume that settled a crash's turn and
    # died before it went on): taken for idle, a worker never claimed it and its message
    # stayed unanswered.
    if (state.in_turn or state.running_calls or state.unrequested or state.approvals
            or state.last_turn_end in ("waiting_on_user", "waiting_on_approval")
            or (state.last_turn_end or "").startswith("interrupted")):
        return "interrupted"
    # Nothing was cut off: the message waits for a driver (a worker, or resume) to answer it.
    if state.unanswered_message:
        return "queued"
    if state.running_tasks:
        return "waiting on tasks"
    return "idle"
