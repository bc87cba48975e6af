"""The journal's vocabulary: one pydantic model per event type.

Every event body carries ``v``, its schema version. Readers accept older versions
through :data:`UPCASTERS` and refuse newer ones with a message that says to upgrade,
so a journal written by a newer zagent is never misread by an older one.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Callable, Literal, Union, get_args

from pydantic import (
    Field,
    TypeAdapter,
    ValidationError,
)

from zagent_core.errors import ZagentError
from zagent_core.journal.parts import (
    Body as _Body,
    Coercion,
    DroppedItem,
    Media,
    OutputFile,
    Part as _Part,
    ToolOffer,
    unset as _is_none,
)
from zagent_core.version import zagent_version

# -- session ------------------------------------------------------------------------


class ParentLink(_Part):
    """What makes a session a sub-agent: the spawn call of its parent that it answers."""

    session_id: str
    call_id: str
    #: The parent's name for it (``child-1``, ``child-2``... in the order spawned).
    label: str
    #: 1 for a child of a top-level session, 2 for its children...
    depth: int
    #: The tools it may use (a subagent preset's ``tools``, or the read-only ones), or None: the parent's.
    tools: list[str] | None = None
    subagent_type: str | None = None
    #: Its read-before-edit gate counts its parent's reads (``share_read_state``).
    share_read_state: bool = False


class SessionStarted(_Body):
    type: Literal["session_started"] = "session_started"
    origin: str
    workspace: str
    zagent_version: str
    tools: list[ToolOffer] = []
    #: Manifest and config problems, as shown to the user when the session began.
    warnings: list[str] = []
    #: Set for a sub-agent's session (origin ``spawn``).
    parent: ParentLink | None = None
    #: The MCP client a session of ``zagent mcp serve`` (origin ``mcp``) serves, as its
    #: ``clientInfo`` says: ``{"name": ..., "version": ...}`` and ``"title"`` when it gives one.
    client: dict[str, str] | None = None


class SessionResumed(_Body):
    """The session was picked up again after the engine stopped; what follows settles it."""

    type: Literal["session_resumed"] = "session_resumed"
    zagent_version: str
    tools: list[ToolOffer] = []
    warnings: list[str] = []
    #: The lease owner (host, pid, ...) that died driving the session, when this resume took over from it.
    taken_over_from: dict[str, Any] | None = None


class SessionForked(_Body):
    """This session began as a copy of another's first events (``zagent sessions fork``)."""

    type: Literal["session_forked"] = "session_forked"
    parent_session_id: str
    #: The parent's last event copied (its global ``seq``).
    parent_seq: int


class SessionEnded(_Body):
    type: Literal["session_ended"] = "session_ended"
    reason: str = "completed"


# -- tool calls -----------------------------------------------------------------------

#: ``permission``: an ``ask`` tool, in journals of a zagent that could not ask for approval;
#: ``denied``: a person said no (its :class:`ApprovalDecided` is journaled with it).
RejectReason = Literal["unknown_tool", "disabled", "permission", "invalid_arguments", "limit", "not_offered",
                       "denied", "deferred"]


class ToolCallRequested(_Body):
    type: Literal["tool_call_requested"] = "tool_call_requested"
    call_id: str
    tool: str
    #: The arguments exactly as asked for, before validation or coercion.
    arguments: Any
    #: Set for a nested call: the running call whose tool asked for it (``zagent call``, or a
    #: built-in's ``context.call_tool``). Its result went to that tool, not to the model.
    parent_call_id: str | None = Field(default=None, exclude_if=_is_none)


class ToolCallRejected(_Body):
    type: Literal["tool_call_rejected"] = "tool_call_rejected"
    call_id: str
    reason: RejectReason
    #: The result text the model received.
    message: str
    problems: list[str] = []


class CallClock(_Part):
    """What a call is told of the time and of its randomness: ``ZAGENT_NOW`` and ``ZAGENT_CALL_SEED``."""

    #: When the call started, ISO 8601 UTC to the millisecond: ``2026-12-07T12:12:22.123Z``.
    now: str
    #: 32 hex digits derived from the session's and the call's ids.
    seed: str


class ToolCallStarted(_Body):
    """Committed before the process starts, so a crash mid-call is always visible."""

    type: Literal["tool_call_started"] = "tool_call_started"
    call_id: str
    #: Set when the tool runs as a background task (its number in the session).
    task_id: str | None = None
    tool: str
    arguments: dict[str, Any]
    coercions: list[Coercion] = []
    #: Array items left out of ``arguments`` (the model's result says so in one line).
    dropped: list[DroppedItem] = []
    argv: list[str]
    cwd: str
    input_mode: str
    output_mode: str
    attach_outputs: bool = False
    #: Folders and files of the call; a built-in that runs no process has none.
    output_dir: str | None = None
    notify_file: str | None = None
    #: Where reading the notify file starts: after the lines of an earlier, cut-off attempt.
    notify_offset: int = 0
    #: 1, or 2 when a resume runs a replay-safe call again after a crash cut it off (never a third time).
    attempt: int = 1
    #: Names only: environment values never enter the journal.
    env_names: list[str] = []
    timeout_seconds: float | None
    manifest_hash: str = ""
    files_hash: str = ""
    #: What ran, for a tool that is not a folder (``builtin:read_file``), and its version
    #: (zagent's, for a built-in): an audit or a replay tells what ran without a folder.
    identity: str | None = None
    tool_version: str | None = None
    #: What the call was told when it is not what its event says (its ``at``, and the seed of its
    #: session's and its own id): a replay tells a call what its recording was told.
    clock: CallClock | None = Field(default=None, exclude_if=_is_none)


class Outcome(_Part):
    """What a tool says its call came to, beside its text (the seed's ``reportOutcome``):
    what ``zagent audit --outcome`` filters on."""

    status: Literal["success", "failure", "partial"]
    #: Why, in a sentence (at most 1000 characters; a longer one is cut).
    reason: str = ""


class _Result(_Body):
    """What a tool run produced, as the model received it: shared by calls and tasks."""

    #: The result text the model received.
    output: str
    is_error: bool
    exit_code: int | None
    pid: int | None = None
    duration_ms: int
    timed_out: bool = False
    truncated_bytes: int = 0
    full_output_path: str | None = None
    media: list[Media] = []
    files: list[OutputFile] = []
    #: The result as data (a JSON tool's ``structured``, an MCP tool's ``structuredContent``), matching
    #: the tool's ``output_schema`` when it has one: for programs, not the model (``mcp serve`` passes it on).
    structured: Any = Field(default=None, exclude_if=_is_none)
    outcome: Outcome | None = Field(default=None, exclude_if=_is_none)


class ToolCallFinished(_Result):
    type: Literal["tool_call_finished"] = "tool_call_finished"
    call_id: str


class ToolCallInterrupted(_Body):
    """The engine stopped while the call ran; its effect may or may not have happened."""

    type: Literal["tool_call_interrupted"] = "tool_call_interrupted"
    call_id: str
    #: The result text the model received.
    message: str


# -- background tasks ---------------------------------------------------------------------


class TaskStarted(_Body):
    """A background task's supervisor runs; ``pid`` plus start time and boot identify it."""

    type: Literal["task_started"] = "task_started"
    task_id: str
    call_id: str
    tool: str
    pid: int
    start_ticks: int
    boot_id: str
    task_dir: str


class TaskExited(_Result):
    type: Literal["task_exited"] = "task_exited"
    task_id: str
    call_id: str
    ended_at: datetime | None = None  # when the tool ended (its supervisor's record), not when this was journaled


class TaskKilled(_Result):
    """Stopped on request (the terminal tool's kill), whole tree."""

    type: Literal["task_killed"] = "task_killed"
    task_id: str
    call_id: str
    ended_at: datetime | None = None  # when the tool ended (its supervisor's record), not when this was journaled


class TaskInterrupted(_Body):
    """The task died with the engine, or its supervisor vanished without an exit record."""

    type: Literal["task_interrupted"] = "task_interrupted"
    task_id: str
    call_id: str
    message: str
    output_path: str | None = None


# -- notes and wake-ups ----------------------------------------------------------------


class NoteReceived(_Body):
    """One line of a notify file, journaled with the offset after it."""

    type: Literal["note_received"] = "note_received"
    #: The call whose notify file it came from (a background task's call too).
    call_id: str
    task_id: str | None = None
    text: str
    wake: bool = False
    #: Byte offset in the notify file just after this note's line: where reading resumes.
    offset: int


class WakeRequested(_Body):
    """Something the idle agent must be woken for; delivered once, by a ``turn_started``."""

    type: Literal["wake_requested"] = "wake_requested"
    wake_id: str
    reason: Literal["note", "task_exited", "task_interrupted"]
    #: What the agent is told.
    text: str
    call_id: str | None = None
    task_id: str | None = None


class _Delivery(_Body):
    #: Versions of the ``note_received`` events delivered.
    notes: list[int] = []
    #: Ids of the ``wake_requested`` events delivered.
    wakes: list[str] = []


class TurnStarted(_Delivery):
    """A turn begins (a user message, or a wake-up) and takes the pending notes and wake-ups."""

    type: Literal["turn_started"] = "turn_started"
    reason: Literal["user", "wake", "resume", "delivery"] = "delivery"
    #: The system prompt this turn's requests carry, so a later rebuild (or replay)
    #: sends exactly what was sent, whatever the config says by then.
    system_prompt: str | None = None
    #: The model spec this turn asks (``openai:gpt-4o``) and its endpoint, so ``zagent
    #: resume`` needs nothing retyped. Never a key.
    model: str | None = None
    model_base_url: str | None = None


class NotesDelivered(_Delivery):
    """Mid-turn: notes that arrived while tools ran, appended to the next model request."""

    type: Literal["notes_delivered"] = "notes_delivered"


class WakeAnswered(_Body):
    """Wake-ups the agent already got another way (a terminal wait or kill returned the
    task's result): taken off the pending list without being shown again."""

    type: Literal["wake_answered"] = "wake_answered"
    wakes: list[str]
    call_id: str


class TurnEnded(_Body):
    type: Literal["turn_ended"] = "turn_ended"
    #: ``idle`` (the model replied without a tool call), ``waiting_on_user`` (a question
    #: parked the session), ``waiting_on_approval`` (a call waits for a person's approval),
    #: or why the turn was stopped.
    reason: str


class InputRequested(_Body):
    """An ``ask_user`` call asked a person: the call stays open, without a result, until
    :class:`InputAnswered` (the session is parked, ``waiting on user``)."""

    type: Literal["input_requested"] = "input_requested"
    call_id: str
    question: str
    choices: list[str] | None = None


class InputAnswered(_Body):
    """A person's answer to a question; journaled with the call's ``tool_call_finished``."""

    type: Literal["input_answered"] = "input_answered"
    call_id: str
    answer: str
    #: Where it was answered: ``terminal`` (the run asked there) or ``zagent answer``.
    via: str


class ApprovalRequested(_Body):
    """A call of a tool that needs approval (``"permission": "ask"``) was asked about;
    journaled with its ``tool_call_requested``. The call stays open, without a start, until
    :class:`ApprovalDecided` (the session is parked, ``waiting on approval``)."""

    type: Literal["approval_requested"] = "approval_requested"
    call_id: str
    tool: str
    #: The arguments as the call asked (what the person approves).
    arguments: Any
    #: Why the call needs approval: ``its manifest says "permission": "ask"``.
    why: str


class ApprovalDecided(_Body):
    """A decision on an :class:`ApprovalRequested`, taken once. Approved, the call runs
    (``tool_call_started`` follows; a resume starts it if a crash came first); denied, it
    is journaled with the call's ``tool_call_rejected`` (reason ``denied``)."""

    type: Literal["approval_decided"] = "approval_decided"
    call_id: str
    approved: bool
    #: Who decided: ``terminal`` (asked there), ``zagent approve``, ``zagent deny``, or
    #: ``config`` (``approvals.allow`` in config.json names the tool).
    via: str
    #: Why, as the person (or config) said; a denial's reason is in the call's result.
    reason: str = ""


class SpawnStats(_Part):
    """What a child's run took: its own model requests, the tokens of its whole subtree."""

    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    duration_ms: int = 0


class ChildSpawned(_Body):
    """A ``spawn`` call gave its task to a child session: journaled before the child's
    session exists, so a crash in between starts that very session, never a second one."""

    type: Literal["child_spawned"] = "child_spawned"
    call_id: str
    label: str
    child_session_id: str
    task: str
    subagent_type: str | None = None
    #: The model spec the child runs with.
    model: str
    #: A stopped child given a new task (``spawn``'s ``resume``), not a new one.
    resumed: bool = False
    #: The child's journal version when it was given the task (0: a new child): the task
    #: was delivered if a ``user_message`` follows it.
    from_version: int = 0
    #: What it was given, so a resume after a crash drives it as it was spawned: its system
    #: prompt (None: the default) and the tools it may use (None: its parent's).
    system_prompt: str | None = None
    tools: list[str] | None = None
    #: It shares its parent's read-state: what the parent read counts for its edits, and its reads are journaled
    #: in the parent (``read_state_updated`` of the spawn call, with ``child_ended``).
    share_read_state: bool = False


class ChildEnded(_Body):
    """How a child's run ended; journaled with its ``spawn`` call's result."""

    type: Literal["child_ended"] = "child_ended"
    call_id: str
    label: str
    child_session_id: str
    status: Literal["completed", "error", "aborted", "timeout"]
    #: The child's final reply (what ``status`` completed with), or why it did not complete.
    text: str
    stats: SpawnStats


# -- what tools know (staged by a call, committed with its result) --------------------


class ReadEntry(_Part):
    """What the model was shown of one file: the read-before-edit gate's entry.

    Kept per session, keyed by ``path`` (absolute, ``.`` and ``..`` folded, symlinks not
    resolved), as a projection of ``read_state_updated`` events.
    """

    path: str
    #: 64-bit hash of the file's whole content when it was read or written: ``xxh3:`` and 16 hex digits
    #: (XXH3-64); older journals hold the first 16 hex digits of SHA-256, still compared as such.
    hash: str
    #: The slice shown: first line (1-based) and how many lines at most (None: to the end).
    offset: int = 1
    limit: int | None = None
    line_numbers: bool = True
    #: When the model saw it (UTC ISO 8601).
    at: str
    #: The model's view no longer shows these bytes (a write changed them): a re-read is never answered "unchanged".
    elided: bool = False
    #: Edits refused in a row because the file changed since it was read.
    stale_rejections: int = 0


class ReadStateUpdated(_Body):
    type: Literal["read_state_updated"] = "read_state_updated"
    call_id: str
    entries: list[ReadEntry]


class ToolStateWritten(_Body):
    """Writes a call staged in its tool's durable key/value state (``None`` removes a key)."""

    type: Literal["tool_state_written"] = "tool_state_written"
    call_id: str
    tool: str
    values: dict[str, Any]


class ToolsUnlocked(_Body):
    """Deferred tools (config.json's ``tools.disclosure: "lazy"``) a ``tool_search`` call found, by
    their own names, in the order found: from the next request on they are offered after the
    other tools, in the order they were unlocked."""

    type: Literal["tools_unlocked"] = "tools_unlocked"
    call_id: str
    tools: list[str]


class ArtifactRecorded(_Body):
    """Something a session produced that outlives it: a pull request, branch, commit, file."""

    type: Literal["artifact_recorded"] = "artifact_recorded"
    call_id: str
    kind: Literal["pull_request", "branch", "commit", "file", "custom"]
    title: str
    url: str | None = None
    path: str | None = None
    ref: str | None = None
    description: str | None = None


class SkillActivated(_Body):
    """A skill of the home's ``skills/`` made active by ``skills_use``: its resources may be read and
    its scripts run from then on, after a resume too."""

    type: Literal["skill_activated"] = "skill_activated"
    call_id: str
    name: str
    #: The sha256 of the SKILL.md the call read: an audit or a replay can tell it changed since.
    sha256: str


# -- the conversation -------------------------------------------------------------------


class UserMessage(_Body):
    type: Literal["user_message"] = "user_message"
    text: str
    #: The model a person asked to answer it with (``run --detach --model``; what a worker uses).
    model: str | None = Field(default=None, exclude_if=_is_none)


class RepliedCall(_Part):
    """A tool call in a model's reply; ``call_id`` is the journal's name for it."""

    id: str
    call_id: str
    name: str
    arguments: Any


class ModelReplied(_Body):
    """Journaled before any of its tool calls runs, so a replay can serve it back."""

    type: Literal["model_replied"] = "model_replied"
    model: str
    text: str = ""
    tool_calls: list[RepliedCall] = []
    stop_reason: str
    input_tokens: int = 0
    output_tokens: int = 0
    #: Prompt caching: input tokens read from the provider's cache, and written to it.
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    duration_ms: int = 0


class WakeText(_Part):
    """A wake-up's text, as a compaction carries it past its summary."""

    reason: str
    text: str


class ContextCompacted(_Body):
    """From here on the model is shown the system prompt, this summary (in a user message) and
    the conversation's events after ``through_version``. Nothing is deleted: the journal keeps
    every event, and ``sessions show`` marks the spot."""

    type: Literal["context_compacted"] = "context_compacted"
    summary: str
    #: The last event the summary covers.
    through_version: int
    #: The session's model requests so far, this summary's included: a scripted or replayed
    #: model answers request *n* with its *n*-th answer, whatever the conversation still shows.
    requests: int
    #: ``auto`` (the estimate passed ``agent.compact_at``), ``manual`` (``zagent compact``) or
    #: ``too_long`` (the provider refused the request as too long).
    trigger: Literal["auto", "manual", "too_long"]
    #: The model that wrote the summary, and what a person asked of it (``--instructions``).
    model: str
    instructions: str | None = None
    #: The request's estimated size, in tokens, before and after.
    tokens_before: int
    tokens_after: int
    #: The summary request's own usage, for costs.
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    duration_ms: int = 0
    #: Notes (by version) and wake-ups (by id) journaled before ``through_version`` that no
    #: turn had delivered yet: a later turn still delivers them, though their events are
    #: before what the model is shown.
    pending_notes: dict[int, str] = {}
    pending_wakes: dict[str, WakeText] = {}


class ContextCleared(_Body):
    """Old tool results leave what the model is shown: the result of each call made by the
    session's model requests up to ``through_request`` is replaced by a line saying how large
    it was and where to read it. The calls, their arguments and the journal stay whole."""

    type: Literal["context_cleared"] = "context_cleared"
    through_request: int
    #: The session's model requests when it was cleared.
    requests: int
    #: Results cleared, and the bytes of output they held.
    results: int
    bytes: int
    tokens_before: int
    tokens_after: int


Event = Annotated[
    Union[
        SessionStarted,
        SessionEnded,
        ToolCallRequested,
        ToolCallRejected,
        ToolCallStarted,
        ToolCallFinished,
        NoteReceived,
        WakeRequested,
        TurnStarted,
        ToolCallInterrupted,
        TaskStarted,
        TaskExited,
        TaskKilled,
        TaskInterrupted,
        SessionResumed,
        NotesDelivered,
        TurnEnded,
        UserMessage,
        ModelReplied,
        WakeAnswered,
        SessionForked,
        ReadStateUpdated,
        ToolStateWritten,
        ArtifactRecorded,
        SkillActivated,
        InputRequested,
        InputAnswered,
        ApprovalRequested,
        ApprovalDecided,
        ChildSpawned,
        ChildEnded,
        ContextCompacted,
        ContextCleared,
        ToolsUnlocked,
    ],
    Field(discriminator="type"),
]

#: ``type`` -> model, derived from the union above (the one list to extend).
EVENT_TYPES: dict[str, type[_Body]] = {
    cls.model_fields["type"].default: cls for cls in get_args(get_args(Event)[0])
}

_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)

#: ``(type, version) -> function`` turning a body of that version into the next one.
UPCASTERS: dict[tuple[str, int], Callable[[dict[str, Any]], dict[str, Any]]] = {}


class EventSchemaError(ZagentError, ValueError):
    """An event in the journal that this version of zagent cannot read."""


#: The events whose body names the zagent that wrote them (``zagent_version``): each start and
#: resume of a session, so the newest one before an event names the zagent that last drove it.
OPENERS = ("session_started", "session_resumed")


class NewerEventError(EventSchemaError):
    """An event of a type, or of a schema version, that this zagent does not know: a newer one wrote it.

    ``problem`` says what is unknown; :meth:`located` adds where the event is and which zagent
    last drove its session, when the journal tells (``zagent_version`` of the newest of its
    :data:`OPENERS`).
    """

    def __init__(self, problem: str, *, where: str = "", opened_by: str | None = None) -> None:
        self.problem = problem
        mine = zagent_version()
        # The last opener may not be the writer (a detached message is journaled without a resume),
        # so it is named as what it is; and this zagent itself cannot have written what it cannot read.
        last = f" (the session was last started or resumed by zagent {opened_by})" if (
            opened_by and opened_by != mine) else ""
        located = f"{where}: {problem}" if where else problem
        super().__init__(f"{located}: it was written by a zagent newer than {mine}{last}; upgrade zagent to read "
                         "this journal")

    def located(self, where: str, opened_by: str | None) -> NewerEventError:
        """The same refusal, of the event at ``where`` (``event #70 (...)``) in a session last opened by ``opened_by``."""
        return NewerEventError(self.problem, where=where, opened_by=opened_by)


def dump_event(event: Event) -> str:
    """The JSON body stored in the journal's ``data`` column (``type`` has its own column)."""
    # The serializer itself: model_dump_json's keyword handling costs a third of the time.
    return event.__pydantic_serializer__.to_json(event, exclude=_NOT_STORED).decode()


_NOT_STORED = {"type"}


def load_event(type_: str, data: dict[str, Any]) -> Event:
    """Rebuild an event from its journal row, upcasting bodies written by older versions."""
    cls = EVENT_TYPES.get(type_)
    if cls is None:
        raise NewerEventError(f'unknown event type "{type_}"')
    version = data.get("v", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise EventSchemaError(f'event "{type_}" has no valid schema version (v={version!r}); the journal is damaged')
    if version > cls.SCHEMA_VERSION:
        raise NewerEventError(f'event "{type_}" has schema version {version}, this zagent reads up to '
                              f"{cls.SCHEMA_VERSION}")
    while version < cls.SCHEMA_VERSION:
        data = UPCASTERS[(type_, version)](data)
        version += 1
        data["v"] = version
    try:
        return _ADAPTER.validate_python({**data, "type": type_})
    except ValidationError as exc:
        raise EventSchemaError(f'event "{type_}" does not match its schema: {exc.errors()[0]["msg"]}') from exc


def load_event_json(type_: str, text: str | bytes) -> Event:
    """:func:`load_event` of a stored JSON body, validated by pydantic-core straight from the text.

    A body of the current schema version (the one ``dump_event`` writes, ``v`` first) is
    validated in one pass; anything else (an older version to upcast, a damaged body)
    goes through :func:`load_event`, which gives the same errors as ever.
    """
    fast = _FAST.get(type_)
    if fast is not None and text.startswith(fast[0] if isinstance(text, str) else fast[1]):  # type: ignore[arg-type]
        try:
            event = fast[2](text)  # the class's validator itself: model_validate_json adds a call layer
        except ValueError:
            pass  # load_event says what is wrong, as it always has
        else:
            if event.v == fast[3]:  # a repeated "v" key could say otherwise
                return event  # type: ignore[no-any-return]
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise EventSchemaError(f'event "{type_}" is not valid JSON ({exc}); the journal is damaged') from None
    if not isinstance(data, dict):
        raise EventSchemaError(f'event "{type_}" is not a JSON object; the journal is damaged')
    return load_event(type_, data)


def _fast_paths() -> dict[str, tuple[tuple[str, ...], tuple[bytes, ...], Callable[[str | bytes], Any], int]]:
    """Per type: how a body of the current version starts (as ``dump_event`` writes it, and
    as PostgreSQL's ``jsonb`` gives it back), as text and as bytes, the validator that reads
    it, and that version."""
    paths: dict[str, tuple[tuple[str, ...], tuple[bytes, ...], Callable[[str | bytes], Any], int]] = {}
    for name, cls in EVENT_TYPES.items():
        prefixes = (f'{{"v":{cls.SCHEMA_VERSION},', f'{{"v": {cls.SCHEMA_VERSION}, ')
        paths[name] = (prefixes, tuple(prefix.encode() for prefix in prefixes),
                       cls.__pydantic_validator__.validate_json, cls.SCHEMA_VERSION)
    return paths


_FAST = _fast_paths()
