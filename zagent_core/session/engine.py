"""The session engine: commands in, events out.

:class:`Engine` runs tools for the sessions of one home. A :class:`Session` is the only
writer of its events, and a thin facade over parts that only call downward:

- :mod:`~zagent_core.session.writer`: append, fold, listeners, lease, snapshots;
- :mod:`~zagent_core.session.background`: tasks, notes and the watcher;
- :mod:`~zagent_core.session.people`: questions and approvals;
- :mod:`~zagent_core.session.host`: what a tool may ask of its session;
- :mod:`~zagent_core.session.calls`: what may be called, and one ``CallRunner.execute`` for every kind of tool;
- :mod:`~zagent_core.session.turns`: the conversation the agent loop journals;
- :mod:`~zagent_core.session.resume`: settling after a restart.
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

from zagent_core.builtins import registry
from zagent_core.config import CapabilitiesConfig, Config, load_config
from zagent_core.errors import ZagentError
from zagent_core.home import Home
from zagent_core.ids import new_session_id
from zagent_core.journal.events import (
    CallClock,
    ChildSpawned,
    Event,
    ModelReplied,
    ParentLink,
    RepliedCall,
    SessionEnded,
    SessionResumed,
    SessionStarted,
    ToolCallRequested,
)
from zagent_core.journal.fold import rebuild
from zagent_core.journal.protocol import Claim, Journal, JournalError, Lease, StoredEvent
from zagent_core.journal.snapshots import open_state
from zagent_core.journal.views import ApprovalView, CallView, QuestionView, SessionState, TaskView
from zagent_core.logs import get_logger
from zagent_core.problems import Problem
from zagent_core.session import leases
from zagent_core.session.background import Background
from zagent_core.session.calls import CallOutcome, CallRunner
from zagent_core.session.host import CallsStop, SessionHost
from zagent_core.session.people import (
    NoApprovalError,
    NoQuestionError,
    NoSuchChoiceError,
    People,
    chosen,
    why_no_approval,
    why_no_question,
)
from zagent_core.session.resume import Settler
from zagent_core.session.status import session_status
from zagent_core.session.turns import Delivery, Turns
from zagent_core.session.typed import InputTooLargeError
from zagent_core.session.writer import SessionEndedError, Writer
from zagent_core.tools import sandbox
from zagent_core.tools.inprocess import Arguments, Builtin, BuiltinContext
from zagent_core.tools.manifest import Tool, ToolSet, load_tools
from zagent_core.tools.mcp import McpServers
from zagent_core.tools.results import ToolResult
from zagent_core.tools.shown import Shown, problems as shown_problems, refuse_bad_aliases
from zagent_core.tools.skills import load_skills
from zagent_core.tools.toolbox import Toolbox, ToolEntry
from zagent_core.version import zagent_version

# What the session wing offers its callers, wherever in the wing it is defined.
__all__ = [
    "CallOutcome", "ChildDriver", "Delivery", "Engine", "InputTooLargeError", "NoApprovalError", "NoQuestionError",
    "NoSuchChoiceError", "Session", "SessionEndedError", "UnknownSessionError", "chosen", "why_no_approval",
    "why_no_question",
]

log = get_logger(__name__)

_EngineT = TypeVar("_EngineT", bound="Engine")


#: Answers a nested call of a session (its id) in place of running it, or says to run it (None).
NestedServer = Callable[[str, ToolCallRequested], ToolResult | None]


class ChildDriver(Protocol):
    """Runs (or goes on with) the child session of a spawn call; its outcome is the call's result."""

    def __call__(self, parent: Session, context: BuiltinContext, arguments: Arguments) -> ToolResult: ...


class UnknownSessionError(ZagentError, LookupError):
    """No such session in the journal."""


class Engine:
    """Runs tools for sessions of one home, journaling every step.

    The journal is given, not opened here: ``zagent_core`` defines what a journal must
    do and ``zagent_store`` provides one (``SQLiteJournal(home.journal_path)``).
    """

    def __init__(
        self,
        home: Home,
        journal: Journal,
        *,
        workspace: str | Path | None = None,
        config: Config | None = None,
        command: str = "",
        children: ChildDriver | None = None,
        mcp_servers: Collection[str] | None = None,
    ) -> None:
        self.home = home
        #: Drives the sub-agents of spawn calls; given by the wing that has an agent loop
        #: (:class:`zagent_core.agent.engine.Engine`), so sessions never import the agent.
        self.children = children
        #: What drives sessions through this engine (``run``, ``tools run``...), as leases name it.
        self.command = command
        self.journal = journal
        self.workspace = Path(workspace or Path.cwd()).resolve()
        self.config_problems: list[Problem] = []
        if config is None:
            config, self.config_problems = load_config(home.config_path)
        self.config = config
        #: The names and descriptions config.json gives the tools, as the model sees them.
        self.shown = Shown(config)
        #: The home's skills, read once: what the skill tools offer stays the same bytes on every request.
        self.skills = load_skills(home)
        #: The built-in tools this config turns on (the skill tools when the home has skills); the MCP
        #: servers' tools join them when first needed (:meth:`load_tools`), their servers started then
        #: and stopped by :meth:`close`.
        self.builtins, builtin_problems = registry.enabled(config, self.skills)
        self.config_problems += [*builtin_problems, *self.skills.problems]
        #: ``mcp_servers`` names the servers of config.json this engine may start (default: all):
        #: ``zagent tools run fs__read_file`` starts ``fs`` alone, a built-in none.
        self.mcp = McpServers(config, self.workspace, home, names=mcp_servers) if config.mcp.servers else None
        if self.mcp is not None:  # at the latest when the interpreter exits: no server outlives us
            weakref.finalize(self, self.mcp.close)
        #: Sub-agents running at once, in this process (``spawn.max_concurrent``).
        self.child_slots = threading.Semaphore(config.spawn.max_concurrent)
        #: Renews the leases of the sessions this engine drives.
        self.heartbeat = leases.Heartbeat(journal, config.journal.lease_seconds)
        #: Answers a nested call in place of running it (None: run it): a replay serves the
        #: nested calls it must not run again from its recording (:mod:`zagent_core.history.replay`).
        self.nested_server: NestedServer | None = None

    def served_nested(self, session_id: str, requested: ToolCallRequested) -> ToolResult | None:
        """The result :attr:`nested_server` serves a nested call of session ``session_id`` with, or None: run it."""
        return self.nested_server(session_id, requested) if self.nested_server is not None else None

    def toolbox(self, tools: ToolSet) -> Toolbox:
        """Every tool of this engine by name, of every kind: ``tools`` (the home's) and the built-ins."""
        return Toolbox(tools, self.builtins)

    def load_tools(self) -> ToolSet:
        """The tools of the home as they are on disk now (no folder may take a built-in's name),
        with what is wrong with the MCP servers (whose tools are listed, the first time, now)."""
        mcp_problems = self._mcp_tools()
        toolset = load_tools(self.home, self.config, reserved=registry.names() | self.builtins.keys())
        return dataclasses.replace(toolset, problems=[*mcp_problems, *toolset.problems]) if mcp_problems else toolset

    def _mcp_tools(self) -> list[Problem]:
        """Add the MCP servers' tools to the built-ins (starting the servers the first time)."""
        if self.mcp is None:
            return []
        found, problems = self.mcp.tools()
        self.builtins.update(found)
        return problems

    def _tool_names(self, tools: ToolSet) -> set[str]:
        """The names of every tool a session of ``tools`` knows, offered or not."""
        return tools.tools.keys() | self.builtins.keys()

    def _refuse_bad_aliases(self, tools: ToolSet) -> None:
        """Raise :class:`~zagent_core.tools.shown.AliasError` when ``tools.aliases`` is wrong: the
        model would be offered a name it cannot use, or one name for two tools."""
        refuse_bad_aliases(self.config, self._tool_names(tools))

    def _warnings(self, tools: ToolSet) -> list[str]:
        """What a session is told as it starts or resumes: what is wrong with the config and the
        tools, and that there is no sandbox where there is none."""
        named = shown_problems(self.config, self._tool_names(tools))
        return [str(p) for p in [*self.config_problems, *named, *tools.problems, *sandbox.problems()]]

    def close(self) -> None:
        """Stop the MCP servers this engine started (the journal is the caller's to close)."""
        if self.mcp is not None:
            self.mcp.close()

    def __enter__(self: _EngineT) -> _EngineT:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def start_session(self, origin: str = "api", *, tools: ToolSet | None = None, session_id: str | None = None,
                      parent: ParentLink | None = None, client: dict[str, str] | None = None) -> Session:
        """Begin a session, driven by this process: load the tools, journal what is offered and what is broken.

        ``parent`` makes it a sub-agent (``spawn`` does that, with the id its parent journaled);
        ``client`` names the MCP client it serves (``zagent mcp serve``).
        """
        if tools is None:
            tools = self.load_tools()
        else:
            self._mcp_tools()
        self._refuse_bad_aliases(tools)
        session = Session(self, session_id or new_session_id(), tools)
        session.take_lease()
        try:
            warnings = self._warnings(tools)
            session._append([
                SessionStarted(
                    origin=origin,
                    workspace=str(self.workspace),
                    zagent_version=zagent_version(),
                    tools=self.toolbox(tools).offers(),
                    warnings=warnings,
                    parent=parent,
                    client=client,
                )
            ])
            log.info("session_started", session=session.session_id, tools=len(tools.tools), warnings=len(warnings))
        except BaseException as exc:
            # A Ctrl-C landing here, before the caller's `with` holds the session: settled as that
            # block would settle it (ended), or, started or not, its lease let go.
            if session.state.version:
                session.__exit__(type(exc), exc, exc.__traceback__)
            else:
                session.release()
            raise
        return session

    def resume(self, session_id: str, *, listener: Callable[[StoredEvent], None] | None = None,
               state: SessionState | None = None, claim: Claim | None = None) -> Session:
        """Pick up a session after the engine stopped, and settle everything it left open.

        The session's lease is taken first (:class:`~zagent_core.session.leases.SessionBusyError`
        if a live process drives it; a dead driver's lease is taken over, and the resume
        journals whose). Then every call cut off gets a result (run again when its tool is
        ``replay: safe``, else reported interrupted), every background task is re-attached,
        finished from its exit record, or reported interrupted, unread notify-file lines
        become notes, and wake-ups not yet delivered stay pending for :meth:`Session.deliver`.
        ``listener`` is subscribed first, so it sees what resume decides (and what its sub-agents do). ``state``, if the
        caller has read it already, saves reading it again. ``claim``: the session's lease was
        taken by :meth:`Journal.claim_sessions` for this engine's owner (a worker), replacing
        the expired lease it names, if any (the resume journals that takeover).
        """
        state = state or self.session_state(session_id)
        if state.version == 0:
            raise UnknownSessionError(f'no session "{session_id}" in the journal')
        if state.status == "ended":
            raise SessionEndedError(f"session {session_id} has ended; it has nothing to resume")
        tools = self.load_tools()
        self._refuse_bad_aliases(tools)
        session = Session(self, session_id, tools, state)
        previous = session.take_lease() or (claim.previous if claim else None)
        try:
            # What was appended before the lease was ours (a driver that just stopped).
            session.state = rebuild(self.journal.read(session_id, after_version=state.version), state)
            if listener is not None:  # sees what resume settles, too
                session.subscribe(listener, descendants=True)
            warnings = self._warnings(tools)
            session._append([SessionResumed(zagent_version=zagent_version(), tools=self.toolbox(tools).offers(),
                                            warnings=warnings,
                                            taken_over_from=previous.owner if previous else None)])
            session.settle()
        except BaseException:
            session.release()
            raise
        log.info("session_resumed", session=session_id, pending_wakes=len(session.state.pending_wakes))
        return session

    def status(self, session_id: str, state: SessionState | None = None) -> str:
        """``ended``, ``running`` (a live process drives it), ``waiting on user``, ``interrupted``
        (cut off mid-turn or mid-call), ``queued`` (a message waits for a driver), ``waiting on tasks``, or
        ``idle`` (see :mod:`zagent_core.session.status`)."""
        return session_status(self.journal, session_id, state)

    def session_state(self, session_id: str) -> SessionState:
        """A session as its latest snapshot and the events after it tell (empty if it has none)."""
        return open_state(self.journal, session_id)


class Session:
    """One session of an :class:`Engine`; use :meth:`Engine.start_session`.

    A facade: each method is carried out by one of the session's parts (see the module's docstring).
    """

    def __init__(self, engine: Engine, session_id: str, tools: ToolSet, state: SessionState | None = None) -> None:
        self.engine = engine
        self.session_id = session_id
        self.tools = tools
        config = engine.config
        owner = leases.this_process(f"zagent {engine.command}" if engine.command else "zagent")
        self._writer = Writer(engine.journal, engine.heartbeat, session_id, owner, state or SessionState())
        self._background = Background(self._writer, config, engine.workspace, tools)
        self._people = People(self._writer, lambda name: name in config.approvals.allow, config.limits)
        self._host = SessionHost(self._writer, self._background, self._people, home=engine.home, config=config,
                                 spawner=self.spawn, caller=lambda *nested: self._calls.nested(*nested))
        self._calls = CallRunner(self._writer, engine.toolbox(tools), self._host, self._people, self._background,
                                 config=config, workspace=engine.workspace, shown=engine.shown, served=engine.served_nested)
        self._turns = Turns(self._writer, self._calls, self._host.calls_stopped, config.limits)
        self._settler = Settler(self._writer, self._calls, self._background, self._turns)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if self.state.status != "open":
            return
        if exc_type is None and (self.state.questions or self.state.waiting_approvals):
            self.release()  # parked: `zagent answer`/`approve`/`deny` (or Session's) go on with it
            return
        if exc_type is None:
            self.end()
            return
        if issubclass(exc_type, JournalError):
            return  # ending would fail the same way (disk full, damaged file): resume settles it
        if self.continuing_calls():
            self.release()  # a spawn stopped with its child (Ctrl-C): resume goes on with both
            return
        try:
            self.end(reason=f"failed: {exc_type.__name__}")
        except Exception:  # noqa: BLE001 - keep the original error; resume settles the session
            log.error("session_end_failed", exc_info=True, session=self.session_id)

    # -- what the parts share ----------------------------------------------------------

    @property
    def state(self) -> SessionState:
        """The session as its journal tells it, kept by folding each append."""
        return self._writer.state

    @state.setter
    def state(self, state: SessionState) -> None:
        self._writer.state = state

    @property
    def owner(self) -> dict[str, Any]:
        """Who drives the session (this process), as its lease in the journal says."""
        return self._writer.owner

    @property
    def interrupt_calls(self) -> CallsStop:
        """Set, running calls stop (see :attr:`SessionHost.interrupt_calls`); :meth:`CallsStop.stop` says why."""
        return self._host.interrupt_calls

    def follow(self, parent: Session, *, share_read_state: bool) -> None:
        """Run as ``parent``'s sub-agent (see :meth:`SessionHost.follow`)."""
        self._host.follow(parent._host, share_read_state=share_read_state)

    @property
    def ask_terminal(self) -> Callable[[str, list[str] | None], str] | None:
        """How to ask a person now (see :attr:`People.ask_terminal`); None: questions park."""
        return self._people.ask_terminal

    @ask_terminal.setter
    def ask_terminal(self, ask: Callable[[str, list[str] | None], str] | None) -> None:
        self._people.ask_terminal = ask

    @property
    def approve_terminal(self) -> Callable[[ApprovalView], tuple[bool, str]] | None:
        """How to ask a person for approval now (see :attr:`People.approve_terminal`); None: calls park."""
        return self._people.approve_terminal

    @approve_terminal.setter
    def approve_terminal(self, approve: Callable[[ApprovalView], tuple[bool, str]] | None) -> None:
        self._people.approve_terminal = approve

    @property
    def capabilities(self) -> CapabilitiesConfig:
        """What the model of the session's latest turn can take: media a call attaches, ``ZAGENT_CAPS``."""
        return self._background.capabilities()

    @property
    def depth(self) -> int:
        """0 for a top-level session, 1 for its sub-agents, 2 for theirs..."""
        return self._calls.depth

    @property
    def toolbox(self) -> Toolbox:
        """The session's tools of every kind, by name."""
        return self._calls.toolbox

    # -- writer ------------------------------------------------------------------------

    def subscribe(self, listener: Callable[[StoredEvent], None], *, descendants: bool = False) -> None:
        """Call ``listener`` with every event this session (``descendants``: and its sub-agents) appends, once committed."""
        self._writer.subscribe(listener, descendants=descendants)

    def _append(self, events: Sequence[Event]) -> None:
        self._writer.append(events)

    def snapshot(self) -> None:
        """Store the state as a snapshot (a cache: failing to write one is logged, never raised)."""
        self._writer.snapshot()

    def take_lease(self) -> Lease | None:
        """Take the session's lease and keep it renewed until :meth:`release`; returns the one it replaced."""
        return self._writer.take_lease()

    def release(self) -> None:
        """Stop driving the session: snapshot it and let go of its lease (the session stays open)."""
        self._writer.release()

    def has_call(self, call_id: str) -> bool:
        """Whether the session has requested a call with this id (open or closed)."""
        return self._writer.has_call(call_id)

    def end(self, reason: str = "completed") -> None:
        """End the session; background tasks still running are stopped first (and journaled)."""
        for task in self.state.running_tasks:
            self.kill_task(task.task_id)
        self._append([SessionEnded(reason=reason)])
        self.release()

    # -- background --------------------------------------------------------------------

    def collect_notes(self, call_id: str) -> int:
        """Journal the complete lines a call's notify file gained since its last note; returns how many."""
        return self._background.collect_notes(call_id)

    def outlook(self) -> tuple[bool, list[TaskView]]:
        """Whether a wake-up is pending, and the tasks still running, in one consistent look."""
        return self._background.wakes_and_running()

    def answer_wakes(self, task_id: str) -> None:
        """Take a task's pending wake-ups off the list: the agent got its end another way."""
        self._background.answer_wakes(task_id)

    def poll_task(self, task_id: str) -> TaskView:
        """Journal what a running task did since the last look: notes, and its end."""
        return self._background.poll_task(task_id)

    def wait_task(self, task_id: str, timeout: float | None) -> TaskView:
        """Block until the task ends or ``timeout`` seconds pass; returns its view."""
        return self._background.wait_task(task_id, timeout)

    def kill_task(self, task_id: str) -> TaskView:
        """Stop a task's whole tree; returns its view once its end is journaled."""
        return self._background.kill_task(task_id)

    def kept_tasks(self) -> tuple[list[TaskView], int]:
        """The tasks kept (running, then the latest ended), and how many were numbered."""
        return self._background.kept_tasks()

    # -- calls -------------------------------------------------------------------------

    def call(self, name: str, arguments: Any, *, call_id: str | None = None, clock: CallClock | None = None) -> CallOutcome:
        """Validate, run and journal one call of tool ``name`` (told ``clock``, a replay's, instead of its own)."""
        return self._calls.call(name, arguments, call_id, clock=clock)

    def needs_approval(self, name: str) -> bool:
        """Whether a person decides each call of ``name`` (``"permission": "ask"``, not in ``approvals.allow``)."""
        return self._calls.needs_approval(name)

    def served_in_replay(self, name: str) -> bool:
        """Whether a replay serves every call of ``name`` from the recording, whatever ``--tools`` says."""
        return self._calls.served_in_replay(name)

    def concurrency_safe(self, name: str, arguments: Any) -> bool:
        """Whether a call may run beside other concurrency-safe calls (unknown tools: no)."""
        return self._calls.concurrency_safe(name, arguments)

    def validator_of(self, name: str) -> Any | None:
        """The JSON Schema validator of tool ``name``'s parameters, or None if there is no such tool."""
        return self._calls.validator_of(name)

    def replay_policy(self, name: str) -> Literal["safe", "unsafe"] | None:
        """What may be done again with a call of ``name``: ``safe`` (it only reads), ``unsafe``, or None (no such tool)."""
        return self._calls.replay_policy(name)

    def offers(self, name: str) -> bool:
        """Whether this session may use tool ``name`` at all: a sub-agent only has what its parent gave it."""
        return self._calls.offers(name)

    def offered(self) -> list[ToolEntry]:
        """The tools the model is told about, of every kind: the folder tools, then the built-ins."""
        return self._calls.offered()

    def offered_tools(self) -> list[Tool]:
        """The folder tools the model is told about."""
        return [tool for tool in self.tools.offered() if self.offers(tool.name)]

    def offered_builtins(self) -> list[Builtin]:
        """The built-in tools the model is told about."""
        return [b for b in self.engine.builtins.values() if b.name not in self.tools.disabled and self.offers(b.name)]

    # -- people ------------------------------------------------------------------------

    def approve(self, call_id: str | None = None, *, reason: str = "", via: str = "zagent approve") -> ToolResult:
        """Approve a waiting call, once, and run it here; returns its result (see :meth:`People.decide`)."""
        approval, _ = self._people.decide(call_id, True, reason, via=via)
        return self._settler.run_approved(approval)

    def deny(self, call_id: str | None = None, *, reason: str = "", via: str = "zagent deny") -> ToolResult:
        """Deny a waiting call, once: the decision and the call's result (the denial and its
        ``reason``, for the model) in one transaction. See :meth:`approve`; a ``reason`` over
        ``limits.denial_reason_bytes`` is refused (:class:`InputTooLargeError`), nothing decided."""
        _, denied = self._people.decide(call_id, False, reason, via=via)
        assert denied is not None
        return denied

    def answer(self, text: str, call_id: str | None = None, *, via: str = "zagent answer",
               numbered: bool = False) -> QuestionView:
        """Answer a waiting question: the answer and its call's result in one transaction, once
        (:class:`NoQuestionError` if none waits, it was answered already, or several wait and none is named;
        :class:`InputTooLargeError` if ``text`` is over ``limits.answer_bytes``). ``numbered``: a number
        answers with the question's choice of that number (:class:`NoSuchChoiceError` past them)."""
        return self._people.answer(text, call_id, via, numbered=numbered)

    # -- the host (what a tool may ask: zagent_core.session.host) ----------------------

    def spawn(self, context: BuiltinContext, arguments: Arguments) -> ToolResult:
        """A spawn call's sub-agent, driven to its end by the engine's child driver (:mod:`zagent_core.agent.children`)."""
        if self.engine.children is None:
            return ToolResult(output="spawn refused: this engine was made without a driver of sub-agents "
                                     "(use zagent_core.Engine, or give Engine(children=...))", is_error=True)
        return self.engine.children(self, context, arguments)

    # -- the conversation (the agent loop journals through these) ----------------------

    def deliver(self, turn: Literal["user", "wake", "resume"] | None = None, *,
                system_prompt: str | None = None, model: str | None = None,
                model_base_url: str | None = None) -> Delivery:
        """Take the pending notes and wake-ups for the agent's next request, exactly once. With
        ``turn``, this begins a turn (journaled even when nothing is pending)."""
        return self._turns.deliver(turn, system_prompt=system_prompt, model=model, model_base_url=model_base_url)

    def record(self, events: Sequence[Event]) -> None:
        """Journal events as given: what a replay serves from a recording (a call's recorded
        request, effects and result; a recorded turn's notes and wake-ups)."""
        self._turns.record(events)

    def record_user_message(self, text: str, *, model: str | None = None) -> None:
        """Journal a person's message; over ``limits.user_message_bytes`` it is refused
        (:class:`InputTooLargeError`) and nothing is journaled. ``model``: the spec it asks to be
        answered with (the session's model from then on, as a turn's would be)."""
        self._turns.record_user_message(text, model)

    def record_reply(self, reply: ModelReplied) -> list[RepliedCall]:
        """Journal a model reply before any of its calls runs, its calls by the tools' own names
        (never an alias, see :mod:`zagent_core.tools.shown`); returns its calls with ids new in the session."""
        return self._turns.record_reply(self.engine.shown.canonical_reply(reply))

    def end_turn(self, reason: str) -> None:
        self._turns.end_turn(reason)

    def refuse(self, call: RepliedCall, message: str) -> None:
        """Give a call of a reply a result without running it (a limit was reached)."""
        self._turns.refuse(call, message)

    def settle_unrequested(self, why: str) -> None:
        """Calls a reply asked for that never ran (the engine stopped first) get a result saying so;
        those of a tool that :attr:`~zagent_core.tools.toolbox.ToolEntry.continues` are only requested."""
        self._turns.settle_unrequested(why)

    def await_turn(self, call_id: str, tool: str) -> None:
        """Wait until each call of ``tool`` before ``call_id`` in the model's latest reply has
        spawned its child or has its result (see :meth:`Turns.await_turn`)."""
        self._turns.await_turn(call_id, tool)

    def add_child(self, spawned: Callable[[str], ChildSpawned]) -> ChildSpawned:
        """Name the next sub-agent (``child-N``) and journal ``spawned(label)``, in one step
        (calls running side by side never take the same label; see :meth:`await_turn`)."""
        return self._turns.add_child(spawned)

    # -- resume ------------------------------------------------------------------------

    def settle(self) -> None:
        """After a restart: give every open call a result and every running task an owner
        (see :mod:`zagent_core.session.resume`)."""
        self._settler.settle()

    def continuing_calls(self) -> list[CallView]:
        """Calls cut off that go on where they were, not settled (a ``spawn`` waiting on its child)."""
        return self._settler.continuing_calls()

    def continue_call(self, call: CallView) -> CallOutcome:
        """Carry on with a call of :meth:`continuing_calls`: it gets its real result (or, if the
        config changed under it, a preset gone, the refusal any call would get)."""
        return self._settler.continue_call(call)
