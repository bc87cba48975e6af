"""Replay a recorded session and say, step by step, what changed.

The model's replies are served from the recording (:class:`ReplayModel`), so the host
(agent loop, validation, scheduling) is driven exactly as it was. Tools are either
served from the recording too (``recorded``: did the host make the same decisions, the
same tool with the same arguments in the same order?) or really run again in a fresh
workspace (``rerun``: do the tools still give the same results?). Differences that
legitimately change between runs (paths of call folders, times, durations, pids, task
numbers) are normalised away; users add their own rules.

A session with sub-agents is replayed as a tree: its spawn calls are served from the
recording, and each child session is replayed in the call's place, against its own
recording, in the same engine and workspace (:class:`_SessionReplay`).

This module is the driver: :func:`replay` (one tree), :func:`replay_sessions` (several,
``zagent replay --all``) and their :class:`ReplayOptions`. What they find is reported in
:mod:`zagent_core.history.replay_report`; the workspace a rerun works in is made by
:mod:`zagent_core.history.replay_workspace`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from zagent_core.agent.compaction import RecordedCompactions
from zagent_core.agent.engine import Engine
from zagent_core.agent.loop import Agent
from zagent_core.agent.models import Message, ModelError, ModelReply, ToolCallRequest, ToolSpec, Usage, request_number
from zagent_core.config import AgentConfig, Config
from zagent_core.history.replay_report import (
    Difference,
    Normaliser,
    ReplayReport,
    ReplayResults,
    Step,
    ToolsMode,
    compare,
)
from zagent_core.history.replay_workspace import (
    changed_since,
    copy_workspace,
    moved,
    replay_folder,
    workspace_names,
)
from zagent_core.home import Home
from zagent_core.ids import new_session_id, new_wake_id
from zagent_core.journal.events import (
    ArtifactRecorded,
    ChildEnded,
    ChildSpawned,
    ContextCompacted,
    Event,
    ModelReplied,
    NoteReceived,
    ParentLink,
    ReadStateUpdated,
    RepliedCall,
    SessionStarted,
    SkillActivated,
    ToolCallFinished,
    ToolCallInterrupted,
    ToolCallRejected,
    ToolCallRequested,
    ToolStateWritten,
    ToolsUnlocked,
    TurnEnded,
    TurnStarted,
    UserMessage,
    WakeRequested,
)
from zagent_core.journal.protocol import Journal, StoredEvent
from zagent_core.session.engine import Session
from zagent_core.tools.clock import recorded_clocks
from zagent_core.tools.results import ToolResult
from zagent_core.tools.validation import validate_arguments

if TYPE_CHECKING:
    from typing_extensions import Unpack

#: What answers a call in a recording.
CallResult = ToolCallFinished | ToolCallRejected | ToolCallInterrupted


class ReplayModel:
    """Serves a recording's model replies, and the summaries of its compactions, in the order
    they were asked for: answer *n* to the request that follows *n - 1* requests."""

    name = "replay"

    def __init__(self, replies: list[ModelReplied | ContextCompacted]) -> None:
        self.replies = [reply if isinstance(reply, ModelReplied) else _summary_reply(reply) for reply in replies]

    def reply(self, messages: list[Message], tools: list[ToolSpec], *,
              on_text: Callable[[str], None] | None = None) -> ModelReply:
        index = request_number(messages)
        if index >= len(self.replies):
            raise ModelError(f"the recording has no model reply #{index + 1}: the host asked the model more "
                             f"often than the recorded session did ({len(self.replies)} replies)")
        recorded = self.replies[index]
        return ModelReply(
            text=recorded.text, stop_reason=recorded.stop_reason, model=recorded.model,
            tool_calls=[ToolCallRequest(id=c.id, name=c.name, arguments=c.arguments) for c in recorded.tool_calls],
            usage=Usage(input_tokens=recorded.input_tokens, output_tokens=recorded.output_tokens,
                        cache_read_tokens=recorded.cache_read_tokens,
                        cache_creation_tokens=recorded.cache_creation_tokens),
        )


def _summary_reply(compacted: ContextCompacted) -> ModelReplied:
    """A compaction's summary as the reply its request got."""
    return ModelReplied(model=compacted.model, text=compacted.summary, stop_reason="end_turn",
                        input_tokens=compacted.input_tokens, output_tokens=compacted.output_tokens,
                        cache_read_tokens=compacted.cache_read_tokens,
                        cache_creation_tokens=compacted.cache_creation_tokens, duration_ms=compacted.duration_ms)


def _results(events: Iterable[StoredEvent]) -> dict[str, CallResult]:
    """Each call's result, by call id."""
    return {stored.event.call_id: stored.event for stored in events
            if isinstance(stored.event, (ToolCallFinished, ToolCallRejected, ToolCallInterrupted))}


#: What a call changes besides its result: served with the result, so a replay knows what the live session knew.
Effect = ReadStateUpdated | ToolStateWritten | ArtifactRecorded | SkillActivated | ToolsUnlocked


def _effects(events: Iterable[StoredEvent], workspace_then: str | None, workspace: Path) -> dict[str, list[Effect]]:
    """Each call's staged effects, by call id; read-state paths moved from the recorded
    workspace to the replay's, so the read-before-edit gate finds them there."""
    effects: dict[str, list[Effect]] = {}
    for stored in events:
        event = stored.event
        if isinstance(event, ReadStateUpdated) and workspace_then:
            event = event.model_copy(update={"entries": [
                entry.model_copy(update={"path": moved(entry.path, workspace_then, workspace)})
                for entry in event.entries]})
        if isinstance(event, (ReadStateUpdated, ToolStateWritten, ArtifactRecorded, SkillActivated, ToolsUnlocked)):
            effects.setdefault(event.call_id, []).append(event)
    return effects


def _steps(events: Iterable[StoredEvent]) -> list[Step]:
    events = list(events)
    results = _results(events)
    steps = []
    for stored in events:
        if not isinstance(stored.event, ModelReplied):
            continue
        for call in stored.event.tool_calls:
            step = Step(tool=call.name, arguments=call.arguments)
            match results.get(call.call_id):
                case ToolCallFinished() as result:
                    step = Step(call.name, call.arguments, result.is_error, result.exit_code, result.output)
                case ToolCallRejected(message=message) | ToolCallInterrupted(message=message):
                    step = Step(call.name, call.arguments, True, None, message)
            steps.append(step)
    return steps


# -- replay ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplayOptions:
    """How to replay a session's tree (each session of it alike)."""

    #: ``recorded``: serve the tools' results from the recording (does the host decide the
    #: same?); ``rerun``: run them again in a copy of the workspace (do they give the same results?).
    tools: ToolsMode = "recorded"
    #: With ``rerun``, run again the tools whose manifests say ``replay: unsafe`` too.
    allow_unsafe: bool = False
    #: The user's ``(regex, replacement)`` rules, applied after the built-in ones before outputs are compared.
    normalisers: Sequence[tuple[str, str]] = ()
    #: The user's config, which the replay's engine runs with (its limits, the agent's settings).
    config: Config = field(default_factory=Config)
    #: The folder a rerun copies, when not the recorded workspace (a fixture replayed in
    #: another checkout); paths of either in outputs compare equal.
    workspace: Path | None = None
    #: How long a rerun waits for its background tasks to wake the agent, as they did in the recording.
    wait_seconds: float = 60.0

    def __post_init__(self) -> None:
        if self.tools not in ("recorded", "rerun"):
            raise ValueError(f'tools must be "recorded" or "rerun", not {self.tools!r}')
        # Frozen all the way down whatever a caller hands in: a list of rules, a folder's name as text.
        object.__setattr__(self, "normalisers", tuple(self.normalisers))
        if self.workspace is not None:
            object.__setattr__(self, "workspace", Path(self.workspace))


class ReplayOptionFields(TypedDict, total=False):
    """The fields of :class:`ReplayOptions`, as keywords of :func:`replay`."""

    tools: ToolsMode
    allow_unsafe: bool
    normalisers: Sequence[tuple[str, str]]
    config: Config
    workspace: Path | None
    wait_seconds: float


def replay(journal: Journal, session_id: str, home: Home, into: Journal, options: ReplayOptions | None = None, *,
           workdir: Path | None = None, **fields: Unpack[ReplayOptionFields]) -> ReplayReport:
    """Drive session ``session_id`` of ``journal`` again, and its tree: each sub-agent's
    session is replayed too, against its own recording, with the same options; the
    report's :attr:`~ReplayReport.children` say how they did. The replay is journaled
    into ``into``.

    ``options`` say how (:class:`ReplayOptions`); their fields may be given as keywords
    instead: ``replay(..., tools="rerun")`` is ``replay(..., ReplayOptions(tools="rerun"))``.
    ``home`` provides the tools (as they are now: that is what a regression test checks).
    ``workdir`` holds the replay's scratch home and, for ``rerun``, the fresh copy of the
    workspace (by default a :func:`replay_folder` of ``home``, removed after).
    """
    if options is not None and fields:
        raise TypeError("give replay() its options, or their fields as keywords, not both")
    options = ReplayOptions(**fields) if options is None else options
    recorded = list(journal.read(session_id))
    if not recorded:
        raise LookupError(f'no session "{session_id}" to replay')
    with _folder(home, workdir) as folder:
        return _replay(journal, recorded, home, into, options, folder)


def replay_sessions(journal: Journal, session_ids: Iterable[str] | None, home: Home,
                    into: Callable[[Path], contextlib.AbstractContextManager[Journal]],
                    options: ReplayOptions | None = None, *, workdir: Path | None = None,
                    on_report: Callable[[int, int, ReplayReport], None] | None = None) -> ReplayResults:
    """Replay the tree of each session of ``session_ids`` in turn, with the same ``options``;
    ``None`` replays every tree of ``journal``, oldest first (``zagent replay --all``): each
    session but the sub-agents, replayed in their parents' trees.

    Each replay gets a folder of its own, ``replay-1``, ``replay-2``... in ``workdir`` (by
    default a :func:`replay_folder` of ``home``, removed after), and is journaled into
    ``into(folder)``. ``on_report(number, count, report)`` hears of each as it ends.
    """
    # The journal lists its sessions newest first.
    ids = tree_roots(journal, [s.session_id for s in journal.sessions()][::-1]) if session_ids is None \
        else list(session_ids)
    options = ReplayOptions() if options is None else options
    reports = []
    with _folder(home, workdir) as folder:
        for number, session_id in enumerate(ids, start=1):
            own = folder / f"replay-{number}"
            own.mkdir(parents=True)
            with into(own) as replayed_into:
                reports.append(replay(journal, session_id, home, replayed_into, options, workdir=own))
            if on_report is not None:
                on_report(number, len(ids), reports[-1])
    return ReplayResults(reports)


def _folder(home: Home, workdir: Path | None) -> contextlib.AbstractContextManager[Path]:
    """``workdir``, or a :func:`replay_folder` of ``home`` when none is given."""
    return replay_folder(home) if workdir is None else contextlib.nullcontext(workdir)


def tree_roots(journal: Journal, session_ids: Iterable[str]) -> list[str]:
    """The sessions of ``session_ids`` that are not replayed as part of another's tree: all
    but the sub-agents whose parent session is in ``journal`` (``replay --all``)."""
    roots = []
    for session_id in session_ids:
        started = next(iter(journal.read(session_id, types=("session_started",))), None)
        parent = started.event.parent if started is not None and isinstance(started.event, SessionStarted) else None
        if parent is None or journal.head(parent.session_id) == 0:
            roots.append(session_id)
    return roots


def _replay_config(config: Config, recorded: list[StoredEvent], replies: int) -> AgentConfig:
    """The user's agent config, with room for the recorded number of requests and the recorded system prompt."""
    prompt = next((e.event.system_prompt for e in recorded
                   if isinstance(e.event, TurnStarted) and e.event.system_prompt is not None), None)
    return AgentConfig.model_validate({**config.agent.model_dump(), "max_turns": max(replies + 1, 1),
                                       **({"system_prompt": prompt} if prompt is not None else {})})


@dataclass(frozen=True)
class _Tree:
    """What the sessions of one replayed tree share, as the live tree did: one engine (so one
    workspace and one journal), the recording they are read from, the options."""

    source: Journal
    engine: Engine
    options: ReplayOptions
    #: The recorded workspace, whose paths in recorded effects move to the replay's.
    workspace_then: str | None
    normalise: Normaliser
    #: How each session of the tree answers its calls, by the replay's session id.
    calls: dict[str, _Calls] = field(default_factory=dict)

    def serve_nested(self, session_id: str, requested: ToolCallRequested) -> ToolResult | None:
        """The engine's :attr:`~zagent_core.session.engine.Engine.nested_server`: a nested call
        that a tool run again asks for is served or run again as a call of the model's would be."""
        calls = self.calls.get(session_id)
        return calls.serve_nested(requested) if calls is not None else None


def _replay(source: Journal, recorded: list[StoredEvent], home: Home, into: Journal, options: ReplayOptions,
            workdir: Path) -> ReplayReport:
    """Replay the tree of the session ``recorded`` (its events), in the folder ``workdir``."""
    started = recorded[0].event
    workspace_then = started.workspace if isinstance(started, SessionStarted) else None
    scratch_home = _scratch_home(home, workdir)
    source_workspace = options.workspace or (Path(workspace_then) if workspace_then else None)
    # Tools that rerun need the workspace; so do MCP servers, which start in it even when their
    # results are served (a git server's --repository . needs the repository).
    copied = options.tools == "rerun" or any(s.command for s in options.config.mcp.servers.values())
    workspace, copy_note = copy_workspace(source_workspace if copied else None,
                                          "given" if options.workspace else "recorded", workdir, home)
    normalise = Normaliser(options.normalisers, workspaces=workspace_names(workspace_then, options.workspace,
                                                                           workspace))
    with Engine(scratch_home, into, workspace=workspace, config=options.config) as engine:  # stops its MCP servers
        tree = _Tree(source, engine, options, workspace_then, normalise)
        engine.nested_server = tree.serve_nested
        # A sub-agent replayed alone keeps what it was given (its depth, its tools): its parent is not replayed.
        root = _SessionReplay(tree, recorded, parent=started.parent if isinstance(started, SessionStarted) else None,
                              notes=[copy_note] if copy_note else [])
        root.notes += _servers_down(engine)
        return root.finish()


def _servers_down(engine: Engine) -> list[str]:
    """A note for each MCP server that did not start in the replay: its tools were not offered,
    so its calls cannot be checked or run, and why (which ends with its stderr)."""
    servers = engine.mcp.servers.values() if engine.mcp is not None else ()
    return [f"{server.label} did not start in the replay, so its tools were not offered: {server.down}"
            for server in servers if server.down is not None]


def _scratch_home(home: Home, workdir: Path) -> Home:
    """The replay's own home in ``workdir``: nothing of ``home`` but its tools and skills (as they are now)."""
    scratch = Home(workdir / "home")
    scratch.root.mkdir(parents=True, exist_ok=True)
    for theirs, ours in ((home.tools_dir, scratch.tools_dir), (home.skills_dir, scratch.skills_dir)):
        if theirs.is_dir() and not ours.exists():
            ours.symlink_to(theirs, target_is_directory=True)
    return scratch


class _SessionReplay:
    """One session of the tree, replayed: started when it is first needed (a sub-agent: at
    its parent's spawn call, with the id the parent journals), played one run at a time (a
    sub-agent given a new task with ``resume`` plays its next run at that spawn call), then
    compared with its recording."""

    def __init__(self, tree: _Tree, recorded: list[StoredEvent], *, parent: ParentLink | None,
                 label: str | None = None, session_id: str | None = None, runs: int = 1,
                 notes: Sequence[str] = ()) -> None:
        self.tree = tree
        self.recorded = recorded
        self.label = label
        self.error: str | None = None
        options = tree.options
        workspace = tree.engine.workspace
        changed = changed_since(recorded, tree.workspace_then, workspace) if options.tools == "rerun" else None
        #: What the reader should know of this session's replay before its calls' notes.
        self.notes = [*notes, *([changed] if changed else [])]
        replies = [e.event for e in recorded if isinstance(e.event, ModelReplied | ContextCompacted)]
        self.session = tree.engine.start_session(f"replay of {recorded[0].session_id} (tools {options.tools})",
                                                 session_id=session_id, parent=parent)
        self.calls = _Calls(self, _results(recorded), _effects(recorded, tree.workspace_then, workspace))
        tree.calls[self.session.session_id] = self.calls
        self.agent = Agent(self.session, ReplayModel(replies), _replay_config(options.config, recorded, len(replies)),
                           run_call=self.calls.run, compactions=RecordedCompactions(e.event for e in recorded))
        # A sub-agent's runs begin with the task its parent gave it (a user message); each
        # spawn call plays one, the last one plays the rest.
        starts = [stored.version for stored in recorded if isinstance(stored.event, UserMessage)][1:runs]
        self._bounds = [0, *starts, recorded[-1].version + 1]
        self._played = 0

    def play(self) -> None:
        """Play the next run of the recording (nothing once all are played)."""
        if self._played + 1 >= len(self._bounds):
            return
        first, end = self._bounds[self._played], self._bounds[self._played + 1]
        self._played += 1
        try:
            _drive(self.agent, self.session, [s for s in self.recorded if first <= s.version < end], self.recorded,
                   self.tree.options)
        except ModelError as exc:
            self.error = self.error or str(exc)

    def finish(self) -> ReplayReport:
        """Play what is left, end the replayed session, finish its sub-agents; the report."""
        self._play_the_rest()
        children = self.calls.finish_children()
        options = self.tree.options
        session_id = self.session.session_id
        expected = _steps(self.recorded)
        actual = _steps(self.tree.engine.journal.read(session_id))
        return ReplayReport(
            session_id=self.recorded[0].session_id, tools=options.tools, expected=expected, actual=actual,
            differences=self.calls.decisions + compare(expected, actual, options.tools, self.tree.normalise),
            not_rerun=self.calls.not_rerun, rerun=self.calls.rerun, error=self._error(),
            replay_session_id=session_id, notes=self.notes + self.calls.notes, label=self.label,
            spawns=self.calls.spawns, children=children)

    def _play_the_rest(self) -> None:
        """Play the runs not played yet, then end the replayed session (its tasks killed), whatever happens."""
        session = self.session
        try:
            while self._played + 1 < len(self._bounds):
                self.play()
        finally:
            for task in session.state.running_tasks:
                session.kill_task(task.task_id)
            if session.state.status == "open":
                session.end()

    def _error(self) -> str | None:
        """What went wrong: the model's error, else a last turn that ended otherwise than the recorded one."""
        recorded_end = next((e.event.reason for e in reversed(self.recorded) if isinstance(e.event, TurnEnded)), None)
        ended = self.session.state.last_turn_end
        if self.error is None and ended not in (None, "idle", recorded_end):
            return f"the replayed turn ended with {ended}, the recorded one with {recorded_end}"
        return self.error


class _Calls:
    """How the replay of one session answers each call: run it again, or serve the recorded
    result (a spawn call: with its sub-agent replayed in its place)."""

    def __init__(self, owner: _SessionReplay, results: dict[str, CallResult], effects: dict[str, list[Effect]]) -> None:
        self.owner = owner
        self.session = owner.session
        self.into = owner.tree.engine.journal
        self.results = results
        self.effects = effects
        self.tools = owner.tree.options.tools
        self.allow_unsafe = owner.tree.options.allow_unsafe
        self.decisions: list[Difference] = []
        #: Calls served from the recording in rerun mode (replay: unsafe, no allow_unsafe).
        self.not_rerun: list[str] = []
        #: How many calls ran again.
        self.rerun = 0
        #: How many spawn calls were served with their sub-agent replayed.
        self.spawns = 0
        self.notes: list[str] = []
        recorded = owner.recorded
        #: The recorded sub-agent runs, by spawn call; and how each ended.
        self.spawned = {s.event.call_id: s.event for s in recorded if isinstance(s.event, ChildSpawned)}
        #: The recorded nested calls, by the call whose tool asked for them, in order.
        self.nested: dict[str, list[ToolCallRequested]] = {}
        for stored in recorded:
            if isinstance(stored.event, ToolCallRequested) and stored.event.parent_call_id is not None:
                self.nested.setdefault(stored.event.parent_call_id, []).append(stored.event)
        self.ended = {s.event.call_id: s.event for s in recorded if isinstance(s.event, ChildEnded)}
        #: What each call was told of the time and its seed: a call run again is told the same.
        self.clocks = recorded_clocks(recorded)
        #: The sub-agents' replays, and their sessions' ids, by recorded session id, in the order first spawned.
        self.children: dict[str, _SessionReplay] = {}
        self.ids: dict[str, str] = {}
        self._lock = threading.Lock()

    def run(self, call: RepliedCall) -> None:
        if self._reruns(call.name, call.call_id):
            self.session.call(call.name, call.arguments, call_id=call.call_id, clock=self.clocks.get(call.call_id))
        else:
            self.serve(call)

    def _reruns(self, name: str, call_id: str) -> bool:
        """Whether a call of ``name`` runs again (counted), or is served from the recording (an
        unsafe one, in rerun mode, noted as not run again)."""
        if self.tools == "recorded" or self.session.served_in_replay(name):
            return False
        if self.session.replay_policy(name) == "unsafe" and not self.allow_unsafe:
            self.not_rerun.append(f"{name} ({call_id})")
            return False
        with self._lock:  # nested calls of calls that run side by side count too
            self.rerun += 1
        return True

    def serve_nested(self, requested: ToolCallRequested) -> ToolResult | None:
        """A nested call that a tool run again asks for: None to run it again too, or its
        recorded result (served and returned to the tool) when a call of the model's would be served."""
        if self._reruns(requested.tool, requested.call_id):
            return None
        result = self.results.get(requested.call_id) or self._no_result(requested.call_id)
        self.session.record([requested, *self._nested_served(requested.call_id),
                             *self.effects.get(requested.call_id, []), result])
        if isinstance(result, ToolCallFinished):
            return ToolResult(output=result.output, is_error=result.is_error)
        return ToolResult(output=result.message, is_error=True)

    def serve(self, call: RepliedCall) -> None:
        """Answer a call with the recorded result, without running anything; but check that
        validation still decides the same (refused then, refused now)."""
        result = self.results.get(call.call_id)
        validator = self.session.validator_of(call.name)
        step = sum(1 for e in self.into.read(self.session.session_id)
                   if isinstance(e.event, ToolCallRequested) and e.event.parent_call_id is None)
        unknown_then = isinstance(result, ToolCallRejected) and result.reason == "unknown_tool"
        if validator is None and not unknown_then:
            self.decisions.append(Difference(step, "tool", f"{call.name} (offered)",
                                             f"{call.name} (no such tool now)"))
        if validator is not None and result is not None and not isinstance(result, ToolCallInterrupted):
            refused_then = isinstance(result, ToolCallRejected) and result.reason == "invalid_arguments"
            refused_now = not validate_arguments(validator, call.arguments).ok
            if refused_then != refused_now:
                self.decisions.append(Difference(step, "validation", "refused" if refused_then else "accepted",
                                                 "refused" if refused_now else "accepted"))
        requested = ToolCallRequested(call_id=call.call_id, tool=call.name, arguments=call.arguments)
        result = result or self._no_result(call.call_id)
        spawned = self.spawned.get(call.call_id)
        if spawned is None:
            self.session.record([requested, *self._nested_served(call.call_id), *self.effects.get(call.call_id, []),
                                 result])
        else:
            self._serve_spawn(requested, spawned, result)

    @staticmethod
    def _no_result(call_id: str) -> ToolCallRejected:
        """What a call the recording holds no result of is served with."""
        return ToolCallRejected(call_id=call_id, reason="invalid_arguments",
                                message=f"replay: the recording has no result for call {call_id}")

    def _nested_served(self, parent_call_id: str) -> list[Event]:
        """The nested calls a served call's tool made, served as it is: their requests, theirs,
        their effects and their results, as the recording holds them."""
        events: list[Event] = []
        for nested in self.nested.get(parent_call_id, []):
            result = self.results.get(nested.call_id) or self._no_result(nested.call_id)
            events += [nested, *self._nested_served(nested.call_id), *self.effects.get(nested.call_id, []), result]
        return events

    def _serve_spawn(self, requested: ToolCallRequested, spawned: ChildSpawned, result: CallResult) -> None:
        """Serve a spawn call, its sub-agent replayed in the call's place (its next run)."""
        replayed_id = self._replayed_id(spawned)
        # As the live parent did: child_spawned before the sub-agent's session exists,
        # child_ended with the call's result; both name the replayed session, as the served
        # output does.
        moved: list[Event] = [event.model_copy(update={"child_session_id": replayed_id})
                              for event in (spawned, self.ended.get(requested.call_id)) if event is not None]
        # A resumed child was told its task after its journal's version then: the replayed one's.
        journal = self.session.engine.journal
        told_from = journal.head(replayed_id) if spawned.resumed and replayed_id != spawned.child_session_id else 0
        self.session.record([requested, moved[0].model_copy(update={"from_version": told_from})])
        child = self._child(spawned)
        if child is not None:
            with self._lock:  # spawn calls of one reply are served side by side
                self.spawns += 1
            child.play()
        if isinstance(result, ToolCallFinished):
            result = result.model_copy(update={"output": result.output.replace(spawned.child_session_id, replayed_id)})
        self.session.record([*moved[1:], result])

    def _replayed_id(self, spawned: ChildSpawned) -> str:
        """The id of the replay of the sub-agent a recorded spawn ran: a new one the first
        time; the recorded one when the recording does not hold its session (it is not replayed)."""
        recorded_id = spawned.child_session_id
        with self._lock:
            if recorded_id not in self.ids:
                if self.owner.tree.source.head(recorded_id) == 0:
                    self.notes.append(f"{spawned.label}'s session {recorded_id} is not in the recording (an export "
                                      "holds one session; a crash can come before a child's session starts): its "
                                      "spawn calls were served, the sub-agent was not replayed")
                    self.ids[recorded_id] = recorded_id
                else:
                    self.ids[recorded_id] = new_session_id()
            return self.ids[recorded_id]

    def _child(self, spawned: ChildSpawned) -> _SessionReplay | None:
        """The replay of the sub-agent a recorded spawn ran, started at its first spawn (None:
        not in the recording)."""
        recorded_id = spawned.child_session_id
        with self._lock:
            replayed_id = self.ids[recorded_id]
            if recorded_id not in self.children and replayed_id != recorded_id:
                self.children[recorded_id] = self._start_child(spawned, replayed_id)
            return self.children.get(recorded_id)

    def _start_child(self, spawned: ChildSpawned, replayed_id: str) -> _SessionReplay:
        """The sub-agent's session, replayed with what its parent gave it (its depth, its tools)."""
        recorded = list(self.owner.tree.source.read(spawned.child_session_id))
        started = recorded[0].event
        link = started.parent if isinstance(started, SessionStarted) else None
        if link is None:
            link = ParentLink(session_id="", call_id=spawned.call_id, label=spawned.label, depth=self.session.depth + 1)
        runs = sum(1 for event in self.spawned.values() if event.child_session_id == spawned.child_session_id)
        return _SessionReplay(self.owner.tree, recorded,
                              parent=link.model_copy(update={"session_id": self.session.session_id}),
                              label=spawned.label, session_id=replayed_id, runs=runs)

    def finish_children(self) -> list[ReplayReport]:
        """Each recorded sub-agent's report: those the replay did not spawn (its parent's
        decisions changed) are replayed now, whole, so every session of the tree is checked."""
        for spawned in self.spawned.values():
            self._replayed_id(spawned)
            self._child(spawned)
        return [child.finish() for child in self.children.values()]


def _drive(agent: Agent, session: Session, turns: list[StoredEvent], recorded: list[StoredEvent],
           options: ReplayOptions) -> None:
    """Play the recording's turns in ``turns`` (a part of ``recorded``): its user messages,
    and its wake-ups (real ones when tools rerun; re-created from the recording when they
    are served)."""
    by_version = {stored.version: stored.event for stored in recorded}
    budgets = _turn_budgets(recorded)
    last_user: str | None = None
    for stored in turns:
        budget, ended = budgets.get(stored.version, (None, "interrupted"))
        match stored.event:
            case UserMessage(text=text):
                last_user = text
            case TurnStarted(reason="user"):
                agent.turn(last_user, max_requests=budget, stop_reason=ended)
            case ContextCompacted(trigger="manual", instructions=instructions):
                agent.compact("manual", instructions=instructions)
            case TurnStarted(reason="wake" | "resume" as reason) as turn:
                if options.tools == "rerun" and turn.wakes:
                    _wait_for_wakes(session, options.wait_seconds)
                else:
                    _recreate_delivery(session, turn, by_version)
                agent.turn(None, resumed=reason == "resume", max_requests=budget, stop_reason=ended)


def _wait_for_wakes(session: Session, wait: float) -> None:
    """Until the rerun tasks wake the agent (or ``wait`` seconds pass)."""
    deadline = time.monotonic() + wait
    while not session.state.pending_wakes and time.monotonic() < deadline:
        for task in session.state.running_tasks:
            session.poll_task(task.task_id)
        time.sleep(0.05)


def _turn_budgets(recorded: list[StoredEvent]) -> dict[int, tuple[int | None, str]]:
    """For each recorded turn (by its turn_started version): how many model replies it got
    and how it ended. A turn a crash or an error cut short stops there in the replay too;
    one that ended idle is left to end by itself."""
    budgets: dict[int, tuple[int | None, str]] = {}
    current: int | None = None
    replies = 0
    for stored in recorded:
        match stored.event:
            case TurnStarted(reason=reason) if reason != "delivery":
                if current is not None:  # cut off with no turn_ended (the recording stopped)
                    budgets[current] = (replies, "interrupted")
                current, replies = stored.version, 0
            case ModelReplied() if current is not None:
                replies += 1
            case TurnEnded(reason=reason) if current is not None:
                budgets[current] = (None if reason == "idle" else replies, reason)
                current = None
    if current is not None:
        budgets[current] = (replies, "interrupted")
    return budgets


def _recreate_delivery(session: Session, turn: TurnStarted, by_version: dict[int, Event]) -> None:
    """Put what the recorded turn delivered (its notes and wake-ups) in front of the agent again."""
    events: list[Event] = []
    for version in turn.notes:
        note = by_version.get(version)
        if isinstance(note, NoteReceived) and session.has_call(note.call_id):
            events.append(note)
    for event in by_version.values():
        if isinstance(event, WakeRequested) and event.wake_id in turn.wakes and event.reason != "note":
            events.append(event.model_copy(update={"wake_id": new_wake_id()}))
    if events:
        session.record(events)
