"""The session engine: commands in, events out.

A :class:`Session` is the only writer of its events. Each step appends its events in
one transaction at the version the session expects, and keeps its state by applying
them, so the in-memory state is always exactly the journal's. A tool call is journaled
as it happens: ``tool_call_requested`` with ``tool_call_rejected`` or
``tool_call_started`` (committed before the process starts), then
``tool_call_finished``. A call of a tool that needs approval is journaled with
``approval_requested`` and starts only after ``approval_decided`` says yes. Nothing a
tool does, and no mistake in a call, raises here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import re
import signal
import subprocess
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

from zagent_core.builtins import registry
from zagent_core.config import CapabilitiesConfig, Config, load_config
from zagent_core.home import Home
from zagent_core.ids import new_call_id, new_session_id, new_wake_id
from zagent_core.journal.events import (
    ApprovalDecided,
    ApprovalRequested,
    ChildSpawned,
    Coercion,
    Event,
    InputAnswered,
    InputRequested,
    ModelReplied,
    NoteReceived,
    NotesDelivered,
    ParentLink,
    RejectReason,
    RepliedCall,
    SessionEnded,
    SessionResumed,
    SessionStarted,
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
    dump_event,
)
from zagent_core.journal.fold import fold, rebuild
from zagent_core.journal.protocol import Claim, Journal, JournalError, Lease, StoredEvent
from zagent_core.journal.snapshots import open_state, projection_tag, to_snapshot
from zagent_core.journal.views import (
    ApprovalView,
    CallView,
    NoteView,
    QuestionView,
    SessionState,
    TaskView,
    WakeView,
)
from zagent_core.logs import get_logger
from zagent_core.problems import Problem, did_you_mean
from zagent_core.session import leases
from zagent_core.session.crashpoints import crash_point
from zagent_core.session.status import session_status, status_of_state
from zagent_core.tools import tasks
from zagent_core.tools.credentials import tool_environment
from zagent_core.tools.inprocess import Arguments, Builtin, BuiltinContext, Parked, ToolState
from zagent_core.tools.invocation import CallContext, Invocation, build_invocation, delivery_problems
from zagent_core.tools.manifest import Tool, ToolSet, load_tools
from zagent_core.tools.mcp import McpServers
from zagent_core.tools.notes import STOPPED, read_notes
from zagent_core.tools.processes import ProcessIdentity, write_json
from zagent_core.tools.results import FULL_OUTPUT_NAME, JSON_STDOUT_LIMIT, CallPaths, ToolResult, build_result
from zagent_core.tools.runner import ProcessOutcome, ProcessSpec, run_process
from zagent_core.tools.text import storable, storable_json
from zagent_core.tools.validation import validate_arguments
from zagent_core.version import zagent_version

log = get_logger(__name__)

_EngineT = TypeVar("_EngineT", bound="Engine")

#: A snapshot at least every this many events, besides one at the end of each turn.
SNAPSHOT_EVERY = 1000
#: Call ids name folders: no separators, no leading dot.
CALL_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:~-]{0,127}")
#: How often running background tasks are looked at for notes and their end.
WATCH_SECONDS = 0.1


def offers(tools: ToolSet, builtins: dict[str, Builtin]) -> list[ToolOffer]:
    """What a session offers the model: the loaded tools, then the built-ins."""
    return [ToolOffer(name=t.name, description=t.description, folder=str(t.folder), manifest_hash=t.manifest_hash)
            for t in tools.offered()] + [
        ToolOffer(name=b.name, description=b.description, folder=b.origin, manifest_hash=b.definition_hash,
                  identity=b.identity)
        for b in builtins.values() if b.name not in tools.disabled]


class ChildDriver(Protocol):
    """Runs (or goes on with) the child session of a spawn call; its outcome is the call's result."""

    def __call__(self, parent: Session, context: BuiltinContext, arguments: Arguments) -> ToolResult: ...


@dataclass(frozen=True)
class Delivery:
    """What the agent's next request carries besides the conversation."""

    notes: list[NoteView]
    wakes: list[WakeView]

    def lines(self) -> list[str]:
        """As appended to the request: one ``[info: ...]`` line each, never in the system prompt.

        A wake-up asked for by a note is that note's line; others (a task's exit) add their own.
        """
        return [f"[info: {note.text}]" for note in self.notes] + [
            f"[info: {wake.text}]" for wake in self.wakes if wake.reason != "note"
        ]


def _started_result(task_id: str) -> ToolResult:
    """What a background call answers at once (and, after a crash, what resume answers for it)."""
    return ToolResult(output=f"started as task #{task_id}; its notes reach you as it runs and you are woken with "
                      "its result when it exits (terminal tool: list, read, wait, kill)", is_error=False)


def _task_started(task_id: str, call_id: str, tool: str, who: ProcessIdentity, task_dir: Path) -> TaskStarted:
    return TaskStarted(task_id=task_id, call_id=call_id, tool=tool, pid=who.pid, start_ticks=who.start_ticks,
                       boot_id=who.boot_id, task_dir=str(task_dir))


def _state_written(call_id: str, tool: str, result: ToolResult) -> list[Event]:
    """The tool-state writes a result carries, as the event committed with it."""
    return [ToolStateWritten(call_id=call_id, tool=tool, values=result.state_writes)] if result.state_writes else []


def _journal_call_id(model_id: str, taken: Callable[[str], bool]) -> str:
    """The model's id when it can name a folder and is new in the session; else one derived from it."""
    base = model_id if CALL_ID.fullmatch(model_id) else "call_" + re.sub(r"[^A-Za-z0-9_.:-]", "_", model_id)[:100]
    if not CALL_ID.fullmatch(base):
        base = new_call_id()
    candidate, n = base, 1
    while taken(candidate):  # some servers number calls per reply: call_0 again and again
        n += 1
        candidate = f"{base[:120]}~{n}"
    return candidate


def _unrecordable(requested: ToolCallRequested) -> str | None:
    """Why the arguments cannot be journaled (and so cannot be run), or None."""
    try:
        json.dumps(requested.arguments, allow_nan=False)
        dump_event(requested)
    except (ValueError, RecursionError, TypeError):
        try:
            surrogates = storable_json(requested.arguments) != requested.arguments
        except RecursionError:
            surrogates = False
        if surrogates:
            return ("the arguments hold a lone surrogate (such as \\ud800), which is not valid Unicode; "
                    "send the text as UTF-8")
        return ("the arguments are not plain JSON (NaN or Infinity, or nested too deeply); "
                "send finite numbers and flatter objects")
    return None


_DEFERRED = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def _interrupts_deferred() -> Iterator[None]:
    """Ctrl-C (and the CLI's SIGTERM) wait until the block is done.

    A KeyboardInterrupt between an append's commit and its fold would leave the session's
    state behind its journal, and every later append would fail. Python runs signal
    handlers in the main thread only, whichever thread the signal reached, so there the
    handlers are swapped for one that only remembers; the real one runs when the block
    ends. (Blocking the signal would not do: the kernel hands it to another thread.)
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[tuple[int, Any]] = []
    previous = {number: signal.signal(number, lambda n, frame: caught.append((n, frame))) for number in _DEFERRED}
    try:
        yield
    finally:
        for number, handler in previous.items():
            if handler is not None:  # None: set outside Python, and so not ours to restore
                signal.signal(number, handler)
        for received, frame in caught[:1]:
            original = previous[signal.Signals(received)]
            if callable(original):
                original(received, frame)
            elif original == signal.SIG_DFL:
                signal.raise_signal(received)


def why_no_question(journal: Journal, session_id: str, call_id: str | None) -> str:
    """Why an answer finds nothing to answer (the journal is read: only on this error)."""
    answers = [stored.event for stored in journal.read(session_id, types=("input_answered",))
               if isinstance(stored.event, InputAnswered) and call_id in (None, stored.event.call_id)]
    if answers:
        answered = answers[-1]
        return (f"the question of call {answered.call_id} in session {session_id} was already answered "
                f"({answered.via}: {answered.answer!r}); an answer is taken once, so nothing was changed")
    which = f"no question of call {call_id}" if call_id else "no question"
    return f"session {session_id} has {which} waiting for an answer; nothing was changed"


def why_no_approval(journal: Journal, session_id: str, call_id: str | None) -> str:
    """Why a decision finds no call waiting for one (the journal is read: only on this error)."""
    decisions = [stored.event for stored in journal.read(session_id, types=("approval_decided",))
                 if isinstance(stored.event, ApprovalDecided) and call_id in (None, stored.event.call_id)]
    if decisions:
        decided = decisions[-1]
        how = "approved" if decided.approved else "denied"
        because = f": {decided.reason!r}" if decided.reason else ""
        return (f"call {decided.call_id} in session {session_id} was already {how} ({decided.via}{because}); "
                "a decision is taken once, so nothing was changed")
    which = f"no call {call_id}" if call_id else "no call"
    return f"session {session_id} has {which} waiting for approval; nothing was changed"


#: Why a call of an ``ask`` tool waits for a person, as ``approval_requested`` says.
ASK_WHY = 'its manifest says "permission": "ask"'


def denial_message(tool: str, via: str, reason: str) -> str:
    """The result a denied call gives the model: what was not run, by whom, and why."""
    because = f": {reason}" if reason.strip() else "; no reason was given"
    return f"{tool} was not run: the user denied this call ({via}){because}. Do not call it again the same way."


class SessionEndedError(RuntimeError):
    """A call or an end on a session that already ended."""


class UnknownSessionError(LookupError):
    """No such session in the journal."""


class NoQuestionError(LookupError):
    """An answer for a session (or call) with no question waiting; the message says which."""


class NoApprovalError(LookupError):
    """A decision for a session (or call) with no call waiting for approval; the message says which."""


_Waiting = TypeVar("_Waiting")


def _the_one_waiting(waiting: dict[str, _Waiting], call_id: str | None, error: type[LookupError],
                     several: str) -> _Waiting | None:
    """What waits for call ``call_id``, or the one thing waiting when it is None (None: nothing
    such waits). Several waiting and none named: ``error``, ``several`` (its ``{n}`` the count)
    followed by their call ids."""
    if call_id is None and len(waiting) > 1:
        raise error(several.replace("{n}", str(len(waiting))) + ", ".join(waiting))
    call_id = call_id or next(iter(waiting), None)
    return waiting.get(call_id) if call_id else None


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
        #: The built-in tools this config turns on; the MCP servers' tools join them when first
        #: needed (:meth:`load_tools`), their servers started then and stopped by :meth:`close`.
        self.builtins, builtin_problems = registry.enabled(config)
        self.config_problems += builtin_problems
        self.mcp = McpServers(config, self.workspace) if config.mcp.servers else None
        if self.mcp is not None:  # at the latest when the interpreter exits: no server outlives us
            weakref.finalize(self, self.mcp.close)
        #: Sub-agents running at once, in this process (``spawn.max_concurrent``).
        self.child_slots = threading.Semaphore(config.spawn.max_concurrent)
        #: Renews the leases of the sessions this engine drives.
        self.heartbeat = leases.Heartbeat(journal, config.journal.lease_seconds)

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
        session = Session(self, session_id or new_session_id(), tools)
        session.hold()
        warnings = [str(p) for p in [*self.config_problems, *tools.problems]]
        session._append([
            SessionStarted(
                origin=origin,
                workspace=str(self.workspace),
                zagent_version=zagent_version(),
                tools=offers(tools, self.builtins),
                warnings=warnings,
                parent=parent,
                client=client,
            )
        ])
        log.info("session_started", session=session.session_id, tools=len(tools.tools), warnings=len(warnings))
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
        ``listener`` is subscribed first, so it sees what resume decides. ``state``, if the
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
        session = Session(self, session_id, tools, state)
        previous = session.hold() or (claim.previous if claim else None)
        try:
            # What was appended before the lease was ours (a driver that just stopped).
            session.state = rebuild(self.journal.read(session_id, after_version=state.version), state)
            if listener is not None:  # sees what resume settles, too
                session.subscribe(listener)
            warnings = [str(p) for p in [*self.config_problems, *tools.problems]]
            session._append([SessionResumed(zagent_version=zagent_version(), tools=offers(tools, self.builtins),
                                            warnings=warnings,
                                            taken_over_from=previous.owner if previous else None)])
            session._settle()
        except BaseException:
            session.release()
            raise
        log.info("session_resumed", session=session_id, pending_wakes=len(session.state.pending_wakes))
        return session

    def status(self, session_id: str, state: SessionState | None = None) -> str:
        """``ended``, ``running`` (a live process drives it), ``waiting on user``, ``interrupted``
        (cut off mid-turn or mid-call), ``waiting on tasks``, or ``idle`` (see :mod:`zagent_core.session.status`)."""
        return session_status(self.journal, session_id, state)

    def session_state(self, session_id: str) -> SessionState:
        """A session as its latest snapshot and the events after it tell (empty if it has none)."""
        return open_state(self.journal, session_id)


class Session:
    """One session of an :class:`Engine`; use :meth:`Engine.start_session`."""

    def __init__(self, engine: Engine, session_id: str, tools: ToolSet, state: SessionState | None = None) -> None:
        self.engine = engine
        self.session_id = session_id
        self.tools = tools
        self.state = state or SessionState()
        # Background watchers append too: one writer at a time keeps versions in order.
        self._lock = threading.RLock()
        #: Notified after each append: what a call waits on in :meth:`add_child`.
        self._appended = threading.Condition(self._lock)
        #: The calls of the model's latest reply, in its order (this process's; see :meth:`add_child`).
        self._reply: list[RepliedCall] = []
        self._listeners: list[Callable[[StoredEvent], None]] = []
        self._supervisors: dict[str, subprocess.Popen[bytes]] = {}
        #: Set, running foreground calls stop their process trees and are journaled interrupted
        #: (Ctrl-C reaches the main thread only: the agent sets this for calls running beside each other).
        self.interrupt_calls = threading.Event()
        self._watcher: threading.Thread | None = None
        #: Who drives the session (this process), as its lease in the journal says.
        self.owner = leases.this_process(f"zagent {engine.command}" if engine.command else "zagent")
        self._snapshot_version = self.state.version
        #: How to ask a person now (``zagent run`` on a terminal): question, choices -> answer.
        #: None: an ``ask_user`` call parks the session until ``zagent answer``.
        self.ask_terminal: Callable[[str, list[str] | None], str] | None = None
        #: How to ask a person for approval now: the call -> (approved, reason); may raise
        #: :class:`Parked`. None: a call that needs approval parks until ``zagent approve``/``deny``.
        self.approve_terminal: Callable[[ApprovalView], tuple[bool, str]] | None = None

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

    def subscribe(self, listener: Callable[[StoredEvent], None]) -> None:
        """Call ``listener`` with every event this session appends, after it is committed."""
        self._listeners.append(listener)

    def _append(self, events: Sequence[Event]) -> None:
        with self._lock:
            if self.state.status == "ended":
                raise SessionEndedError(f"session {self.session_id} has ended; start a new session")
            if self.session_id in self.engine.heartbeat.lost:
                raise leases.LeaseLostError(self.session_id)
            with _interrupts_deferred():  # committed and folded, or neither: never one without the other
                stored = self.engine.journal.append(self.session_id, events, self.state.version)
                for item in stored:
                    fold(self.state, item)
            self._appended.notify_all()
            # A snapshot costs as much as the state is big: taken no more often than that, a
            # flood of pending notes stays linear.
            if self.state.version - self._snapshot_version >= max(SNAPSHOT_EVERY, len(self.state.pending_notes)):
                self.snapshot()
        for item in stored:
            for listener in self._listeners:
                try:
                    listener(item)
                except Exception:  # noqa: BLE001 - an observer's bug must not undo a committed step
                    log.error("listener_failed", exc_info=True, session=self.session_id, event_type=item.event.type)

    def snapshot(self) -> None:
        """Store the state as a snapshot, so opening the session reads only what follows.

        A snapshot is a cache: failing to write one is logged, never raised.
        """
        with self._lock:
            self._snapshot_version = self.state.version
            try:
                self.engine.journal.save_snapshot(self.session_id, self.state.version, projection_tag(),
                                                  to_snapshot(self.state), status_of_state(self.state))
            except JournalError as exc:
                log.warning("snapshot_failed", error=str(exc), session=self.session_id)

    def hold(self) -> Lease | None:
        """Take the session's lease (see :func:`leases.take`) and keep it renewed until :meth:`release`."""
        self.engine.heartbeat.before_take(self.session_id)
        previous = leases.take(self.engine.journal, self.session_id, self.owner, self.engine.heartbeat.ttl)
        self.engine.heartbeat.hold(self.session_id, self.owner)
        return previous

    def release(self) -> None:
        """Stop driving the session: snapshot it and let go of its lease (the session stays open)."""
        self.engine.heartbeat.drop(self.session_id)
        if self.session_id in self.engine.heartbeat.lost:
            return  # another driver may have it: nothing of it is this process's to write (the heartbeat lets go)
        if self.state.version > self._snapshot_version:
            self.snapshot()
        self.engine.heartbeat.release(self.session_id, self.owner)

    # -- notes and wake-ups ----------------------------------------------------------

    def collect_notes(self, call_id: str) -> int:
        """Journal the complete lines a call's notify file gained since its last note.

        Returns how many notes were added. Safe to call from any thread, any number of
        times: the offset is read and moved under the session's lock. One look reads only
        what the file held when it began, so it ends however fast the tool writes.
        """
        added = 0
        with self._lock:
            call = self.state.calls.get(call_id)
            if call is None or call.notify_file is None or call.notify_offset == STOPPED:
                return 0  # closed (its last lines were read before its result), or reading was stopped
            until = None
            while True:  # one transaction per batch, so a flood is journaled in bounded steps
                batch = read_notes(Path(call.notify_file), self.state.calls[call_id].notify_offset, until=until,
                                   max_bytes=self.engine.config.limits.notify_max_bytes)
                until = batch.until
                events: list[Event] = []
                for note in batch.notes:
                    events.append(NoteReceived(call_id=call_id, task_id=call.task_id, text=note.text,
                                               wake=note.wake, offset=note.offset))
                    if note.wake:
                        events.append(WakeRequested(wake_id=new_wake_id(), reason="note", text=note.text,
                                                    call_id=call_id, task_id=call.task_id))
                if batch.stop is not None:  # said once: the offset it is journaled with ends reading
                    events.append(NoteReceived(call_id=call_id, task_id=call.task_id, text=batch.stop,
                                               wake=False, offset=STOPPED))
                if events:
                    crash_point("before_note_journaled")
                    self._append(events)
                    added += len(batch.notes)
                if not batch.more:
                    return added

    def outlook(self) -> tuple[bool, list[TaskView]]:
        """Whether a wake-up is pending, and the tasks still running, in one consistent look.

        Under the session's lock: a task's end and its wake-up are folded in one step, so
        an idle agent never sees the task gone and its wake-up not there yet.
        """
        with self._lock:
            return bool(self.state.pending_wakes), self.state.running_tasks

    def answer_wakes(self, task_id: str) -> None:
        """Take a task's pending wake-ups off the list: the agent got its end another way."""
        with self._lock:
            wakes = [w.wake_id for w in self.state.pending_wakes.values()
                     if w.task_id == task_id and w.reason != "note"]
            if wakes:
                call_id = self.state.last_call_id or ""
                self._append([WakeAnswered(wakes=wakes, call_id=call_id)])

    def deliver(self, turn: Literal["user", "wake", "resume"] | None = None, *,
                system_prompt: str | None = None, model: str | None = None,
                model_base_url: str | None = None) -> Delivery:
        """Take the pending notes and wake-ups for the agent's next request, exactly once.

        With ``turn``, this begins a turn (``turn_started``, journaled even when nothing
        is pending); without, it is a delivery in the middle of one (journaled only when
        something was pending).
        """
        with self._lock:
            notes = list(self.state.pending_notes.values())
            wakes = list(self.state.pending_wakes.values())
            note_versions, wake_ids = [n.version for n in notes], [w.wake_id for w in wakes]
            if turn is not None:
                self._append([TurnStarted(reason=turn, system_prompt=system_prompt, model=model,
                                          model_base_url=model_base_url, notes=note_versions, wakes=wake_ids)])
            elif notes or wakes:
                self._append([NotesDelivered(notes=note_versions, wakes=wake_ids)])
        return Delivery(notes=notes, wakes=wakes)

    def end(self, reason: str = "completed") -> None:
        """End the session; background tasks still running are stopped first (and journaled)."""
        for task in self.state.running_tasks:
            self.kill_task(task.task_id)
        self._append([SessionEnded(reason=reason)])
        self.release()

    # -- tool calls ------------------------------------------------------------------

    def _refusal(self, name: str) -> tuple[RejectReason, str] | None:
        """Why tool ``name`` cannot run in this session at all, whatever the arguments."""
        tool = self.tools.tools.get(name)
        builtins = self.engine.builtins
        if tool is None and name not in builtins:
            known = [t.name for t in self.tools.offered()] + [b for b in builtins if b not in self.tools.disabled]
            listing = f"; available tools: {', '.join(known)}" if known else "; no tools are loaded"
            return "unknown_tool", f'unknown tool "{name}"{did_you_mean(name, known)}{listing}'
        if name in self.tools.disabled:
            return "disabled", f'tool "{name}" is disabled in config.json ("tools": {{"disabled": [...]}}), so it was not run'
        if not self.offers(name):
            offered = [t.name for t in self.offered_tools()] + [b.name for b in self.offered_builtins()]
            return "not_offered", (f'tool "{name}" is not offered to this sub-agent, so it was not run; its tools: '
                                   f"{', '.join(offered) or 'none'}")
        return None

    def needs_approval(self, name: str) -> bool:
        """Whether a person decides each call of ``name`` (its manifest says ``"permission": "ask"``
        and config.json's ``approvals.allow`` does not name it)."""
        tool = self.tools.tools.get(name)
        return (tool is not None and tool.manifest.permission == "ask"
                and name not in self.engine.config.approvals.allow)

    def served_in_replay(self, name: str) -> bool:
        """Whether a replay serves every call of ``name`` from the recording, whatever ``--tools``
        says: a person is not asked again, a sub-agent is replayed against its own recording."""
        builtin = self.engine.builtins.get(name)
        return (builtin is not None and builtin.served_in_replay) or self.needs_approval(name)

    def concurrency_safe(self, name: str, arguments: Any) -> bool:
        """Whether a call may run beside other concurrency-safe calls (unknown tools: no)."""
        builtin = self.engine.builtins.get(name)
        if builtin is not None:
            return builtin.is_concurrency_safe(arguments)
        tool = self.tools.tools.get(name)
        # A person answers one approval at a time: such a call runs alone.
        return tool is not None and tool.manifest.concurrency_safe and not self.needs_approval(name)

    def validator_of(self, name: str) -> Any | None:
        """The JSON Schema validator of tool ``name``'s parameters, or None if there is no such tool."""
        builtin, tool = self.engine.builtins.get(name), self.tools.tools.get(name)
        if builtin is not None:
            return builtin.validator
        return tool.validator if tool is not None else None

    def replay_policy(self, name: str) -> Literal["safe", "unsafe"] | None:
        """What may be done again with a call of ``name``: ``safe`` (it only reads), ``unsafe``, or None (no such tool)."""
        builtin, tool = self.engine.builtins.get(name), self.tools.tools.get(name)
        if builtin is not None:
            return builtin.replay
        return tool.manifest.replay if tool is not None else None

    @property
    def capabilities(self) -> CapabilitiesConfig:
        """What the model of the session's latest turn can take (``config.json`` first): which
        media a call attaches, and ``ZAGENT_CAPS``."""
        return self.engine.config.capabilities.for_model(self.state.model)

    @property
    def depth(self) -> int:
        """0 for a top-level session, 1 for its sub-agents, 2 for theirs..."""
        return self.state.parent.depth if self.state.parent is not None else 0

    def offers(self, name: str) -> bool:
        """Whether this session may use tool ``name`` at all: a sub-agent only has what its parent gave it."""
        builtin = self.engine.builtins.get(name)
        if builtin is not None and not builtin.offered(self.engine.config, self.depth):
            return False
        if self.depth > 0 and self.needs_approval(name):
            return False  # no person is in a sub-agent's loop: only tools approvals.allow pre-approves
        parent = self.state.parent
        return parent is None or parent.tools is None or name in parent.tools

    def offered_tools(self) -> list[Tool]:
        """The folder tools the model is told about."""
        return [tool for tool in self.tools.offered() if self.offers(tool.name)]

    def offered_builtins(self) -> list[Builtin]:
        """The built-in tools the model is told about."""
        return [b for b in self.engine.builtins.values() if b.name not in self.tools.disabled and self.offers(b.name)]

    def call(self, name: str, arguments: Any, *, call_id: str | None = None) -> ToolResult:
        """Validate, run and journal one call of tool ``name``; returns what the model receives."""
        call_id = call_id or new_call_id()
        if not CALL_ID.fullmatch(call_id):
            raise ValueError(f"call id {call_id!r} must be 1-128 letters, digits, '_', '-', '.', ':' or '~' "
                             "(it names the call's folder)")
        if self.has_call(call_id):
            raise ValueError(f"call id {call_id!r} is already used in session {self.session_id}")
        requested = ToolCallRequested(call_id=call_id, tool=name, arguments=arguments)
        unrecordable = _unrecordable(requested)
        if unrecordable:
            # Journal what can be journaled, and tell the model why nothing ran.
            requested = requested.model_copy(update={"arguments": f"<not recorded: {unrecordable}>"})
            message = f"{name} was not run: {unrecordable}"
            self._append([requested, ToolCallRejected(call_id=call_id, reason="invalid_arguments", message=message,
                                                      problems=[unrecordable])])
            return ToolResult(output=message, is_error=True)
        return self._checked_run(requested)

    def _checked_run(self, requested: ToolCallRequested, *, journaled: bool = False) -> ToolResult:
        """Validate a call and run it, or journal why not. ``journaled``: its request is in the
        journal already, because a person approved it (with its approval: it runs now) or it
        was cut off and goes on (:meth:`go_on`); it is validated against the tool as it is now."""
        name, arguments = requested.tool, requested.arguments
        refusal = self._refusal(name)
        problems: list[str] = []
        if refusal is not None:
            reason, message = refusal
        else:
            builtin = self.engine.builtins.get(name)
            tool = self.tools.tools.get(name)
            validator = self.validator_of(name)
            assert validator is not None  # not refused: the tool exists
            validated = validate_arguments(validator, arguments)
            problems = validated.problems or (delivery_problems(tool, validated.arguments) if tool else [])
            if not problems:
                if builtin is not None:
                    return self._run_builtin(builtin, requested, validated.arguments, validated.coercions,
                                             again=journaled)
                assert tool is not None
                if not journaled and tool.manifest.permission == "ask":
                    return self._ask_approval(requested)
                return self._run(tool, requested, validated.arguments, validated.coercions, again=journaled)
            reason = "invalid_arguments"
            message = f"{name} was not run: its arguments do not match its parameters.\n" + "\n".join(problems)
        self._append([*([] if journaled else [requested]),
                      ToolCallRejected(call_id=requested.call_id, reason=reason, message=message, problems=problems)])
        return ToolResult(output=message, is_error=True)

    # -- approval of calls (tools whose manifest says "permission": "ask") ----------------

    def _ask_approval(self, requested: ToolCallRequested) -> ToolResult:
        """Journal the call and that it needs approval (one step), then take the decision:
        config.json's, the terminal's, or none yet (the call parks for :meth:`approve`/:meth:`deny`)."""
        call_id, name = requested.call_id, requested.tool
        asked = ApprovalRequested(call_id=call_id, tool=name, arguments=requested.arguments, why=ASK_WHY)
        crash_point("before_approval_requested")
        if not self.needs_approval(name):  # pre-approved: the audit still says why it ran
            self._append([requested, asked, ApprovalDecided(
                call_id=call_id, approved=True, via="config",
                reason=f'config.json "approvals": {{"allow": [...]}} names {name}')])
            crash_point("after_approval_decided")
            return self._checked_run(requested, journaled=True)
        self._append([requested, asked])
        crash_point("after_approval_requested")
        if self.approve_terminal is not None:
            try:
                approved, reason = self.approve_terminal(self.state.approvals[call_id])
            except Parked:
                pass  # no one at the terminal after all: the call waits as below
            else:
                return self._decide(call_id, approved, reason, via="terminal")
        log.info("tool_call_parked", session=self.session_id, call_id=call_id, tool=name)
        return ToolResult(output=f"waiting for approval (zagent approve {self.session_id} {call_id})", is_error=False)

    def approve(self, call_id: str | None = None, *, reason: str = "", via: str = "zagent approve") -> ToolResult:
        """Approve a waiting call, once, and run it here; returns its result.

        ``call_id`` may be left out when one call waits. :class:`NoApprovalError` says why
        nothing was decided (none waits, it was decided already, several wait).
        """
        return self._decide(call_id, True, reason, via=via)

    def deny(self, call_id: str | None = None, *, reason: str = "", via: str = "zagent deny") -> ToolResult:
        """Deny a waiting call, once: the decision and the call's result (the denial and its
        ``reason``, for the model) in one transaction. See :meth:`approve`."""
        return self._decide(call_id, False, reason, via=via)

    def _decide(self, call_id: str | None, approved: bool, reason: str, *, via: str) -> ToolResult:
        with self._lock:  # decided once: the check and the decision in one step
            approval = _the_one_waiting(self.state.waiting_approvals, call_id, NoApprovalError,
                                        f"session {self.session_id} waits on {{n}} approvals; name the call to decide: ")
            if approval is None:
                raise NoApprovalError(why_no_approval(self.engine.journal, self.session_id, call_id))
            reason = storable(reason)
            decided = ApprovalDecided(call_id=approval.call_id, approved=approved, via=via, reason=reason)
            crash_point("before_approval_decided")
            if approved:
                self._append([decided])
            else:
                message = denial_message(approval.tool, via, reason)
                self._append([decided, ToolCallRejected(call_id=approval.call_id, reason="denied", message=message)])
        crash_point("after_approval_decided")
        return self._run_approved(approval) if approved else ToolResult(output=message, is_error=True)

    def _run_approved(self, approval: ApprovalView) -> ToolResult:
        """Start an approved call (it never started: a crash may have come between)."""
        return self._checked_run(ToolCallRequested(call_id=approval.call_id, tool=approval.tool,
                                                   arguments=approval.arguments), journaled=True)

    def _call_folders(self, call_id: str) -> tuple[Path, Path, Path]:
        """The call's folder, its ``output/`` and its (empty) notify file, made."""
        call_dir = self.engine.home.call_dir(self.session_id, call_id)
        output_dir = call_dir / "output"
        output_dir.mkdir(parents=True, exist_ok=True)
        notify_file = call_dir / "notify"
        notify_file.touch()
        return call_dir, output_dir, notify_file

    def _run_builtin(self, builtin: Builtin, requested: ToolCallRequested, arguments: dict[str, Any],
                     coercions: list[Coercion], *, again: bool = False, notify_offset: int = 0,
                     attempt: int = 1) -> ToolResult:
        """Run a validated call of a built-in; what it staged is committed with its result.

        ``again``: the call was journaled before (a crash cut it off); one that had started
        already and :attr:`~Builtin.continues` goes on without being started again.
        """
        engine = self.engine
        call_id = requested.call_id
        folders = self._call_folders(call_id) if builtin.runs_process(arguments) else None
        going_on = again and builtin.continues and call_id in self.state.calls and \
            self.state.calls[call_id].status == "running"
        with self._lock:  # the task number is taken and journaled in one step
            task_id = str(self.state.tasks_numbered + 1) if builtin.background(arguments) else None
            self._append([] if going_on else [
                *([] if again else [requested]),
                ToolCallStarted(
                    call_id=call_id, task_id=task_id, tool=builtin.name, arguments=arguments, coercions=coercions,
                    argv=[], cwd=str(engine.workspace), input_mode="builtin", output_mode="text",
                    output_dir=str(folders[1]) if folders else None, notify_file=str(folders[2]) if folders else None,
                    notify_offset=notify_offset, attempt=attempt, timeout_seconds=None, identity=builtin.identity,
                    tool_version=builtin.version or zagent_version(), manifest_hash=builtin.definition_hash,
                ),
            ])
            context = BuiltinContext(
                session_id=self.session_id, call_id=call_id, tool=builtin.name, workspace=engine.workspace,
                config=engine.config, host=self, origin=self.state.origin, read_state=self.state.read_state,
                state=ToolState(self.state.tool_state.get(builtin.name, {})),
                call_dir=folders[0] if folders else None, task_id=task_id,
            )
        log.info("tool_call_started", session=self.session_id, call_id=call_id, tool=builtin.name, task_id=task_id)
        crash_point("after_tool_call_started")
        started = time.monotonic()
        try:
            result = builtin.run(context, arguments)
        except JournalError:
            raise
        except Parked as parked:  # no result yet: the answer brings it (see answer)
            log.info("tool_call_parked", session=self.session_id, call_id=call_id, tool=builtin.name)
            return ToolResult(output=str(parked), is_error=False)
        except Exception as exc:  # a bug of ours must not leave the call without a result
            log.error("tool_call_failed", exc_info=True, call_id=call_id, tool=builtin.name)
            result = ToolResult(output=f"zagent failed while running {builtin.name}: {exc!r}", is_error=True)
        except BaseException:
            if not builtin.continues:  # one that continues stays open, to go on when driven again
                self._stopped(call_id)
            raise
        # What a built-in says may quote what it found on disk (a file name that is not UTF-8).
        result = result.model_copy(update={"output": storable(result.output),
                                           "duration_ms": result.duration_ms
                                           or round((time.monotonic() - started) * 1000)})
        log.info("tool_call_finished", call_id=call_id, is_error=result.is_error, duration_ms=result.duration_ms)
        crash_point("before_tool_call_finished")
        try:
            finished = [*context.effects(), ToolCallFinished(call_id=call_id, **result.event_fields())]
            self._append(finished)
        except (ValueError, TypeError) as exc:  # what it staged cannot be journaled: a bug of the built-in
            log.error("tool_call_unrecordable", exc_info=True, call_id=call_id, tool=builtin.name)
            result = ToolResult(output=f"zagent could not record what {builtin.name} returned: {exc}", is_error=True,
                                duration_ms=result.duration_ms)
            self._append([ToolCallFinished(call_id=call_id, **result.event_fields())])
        if task_id is not None and task_id in self.state.tasks:
            crash_point("after_task_started")
            self._watch()
        return result

    def _stopped(self, call_id: str) -> None:
        """Ctrl-C or SystemExit while a call ran: the tool was stopped with us; say so."""
        with contextlib.suppress(Exception):
            self._append([ToolCallInterrupted(
                call_id=call_id, message="zagent was stopped while the tool ran; its effect may or may not "
                "have happened")])

    def calls_stopped(self) -> bool:
        """:class:`~zagent_core.tools.inprocess.Host`: whether the running calls are being stopped."""
        return self.interrupt_calls.is_set()

    def _process(self, call_id: str, call_dir: Path, spec: ProcessSpec) -> ProcessOutcome:
        """Run a call's process, journaling its notes as it runs and recording who it is."""
        def tick() -> bool:
            self.collect_notes(call_id)
            return self.interrupt_calls.is_set()

        def started(pid: int) -> None:
            # Who the tool is, so a resume after a crash can stop it if it still runs.
            who = ProcessIdentity.of(pid)
            write_json(call_dir / tasks.TOOL_FILE, who.model_dump() if who else {"pid": pid})

        outcome = run_process(spec, on_tick=tick, on_start=started)
        self.collect_notes(call_id)  # what it wrote last
        if outcome.stopped and self.interrupt_calls.is_set():
            raise KeyboardInterrupt  # as in the main thread: the call is journaled interrupted
        return outcome

    def _call_context(self, call_dir: Path, state_file: Path | None = None) -> CallContext:
        """Where a call's process runs and what it is told (the session's scratch folder made)."""
        engine = self.engine
        scratch = engine.home.scratch_dir(self.session_id)
        scratch.mkdir(parents=True, exist_ok=True)
        return CallContext(
            session_id=self.session_id, home=engine.home.root, workspace=engine.workspace, scratch=scratch,
            output_dir=call_dir / "output", notify_file=call_dir / "notify", caps=self.capabilities.as_env(),
            state_file=state_file,
        )

    def _call_environment(self, context: BuiltinContext) -> tuple[dict[str, str], list[str]]:
        """A built-in's process environment (the engine's, less its credentials), and the names it added."""
        assert context.call_dir is not None
        added = self._call_context(context.call_dir).variables(context.tool)
        # PWD is where the process runs (the workspace, links resolved), so paths the model
        # copies from `pwd` are the ones the read-before-edit gate knows.
        return tool_environment() | added | {"PWD": str(context.workspace)}, sorted(added)

    def run_call_process(self, context: BuiltinContext, argv: list[str], *, timeout: float | None,
                         capture_limit: int) -> ProcessOutcome:
        """:class:`~zagent_core.tools.inprocess.Host`: a built-in's foreground process."""
        assert context.call_dir is not None, f"{context.tool} runs a process: its runs_process must say so"
        env, _ = self._call_environment(context)
        return self._process(context.call_id, context.call_dir, ProcessSpec(
            argv=argv, cwd=context.workspace, env=env, stdin=None, merge_stderr=True, timeout=timeout,
            kill_grace=self.engine.config.limits.kill_grace_seconds, capture_limit=capture_limit,
            spill_path=context.call_dir / FULL_OUTPUT_NAME, tag=f"ZAGENT_OUTPUT_DIR={context.call_dir / 'output'}",
        ))

    def start_call_task(self, context: BuiltinContext, argv: list[str], *, timeout: float | None) -> ToolResult:
        """:class:`~zagent_core.tools.inprocess.Host`: a built-in's background task."""
        assert context.call_dir is not None and context.task_id is not None, (
            f"{context.tool} starts a task: its runs_process and background must say so")
        env, names = self._call_environment(context)
        invocation = Invocation(argv=argv, cwd=context.workspace, env=env, stdin=None, timeout=timeout,
                                env_names=names)
        result, started = self._launch(context.tool, context.call_id, context.task_id, context.call_dir, invocation,
                                       text_mode=True, tag=f"ZAGENT_OUTPUT_DIR={context.call_dir / 'output'}")
        if started is not None:
            context.staged.append(started)
        return result

    def spawn(self, context: BuiltinContext, arguments: Arguments) -> ToolResult:
        """:class:`~zagent_core.tools.inprocess.Host`: a sub-agent, driven to its end by the engine's
        child driver (see :mod:`zagent_core.agent.children`)."""
        if self.engine.children is None:
            return ToolResult(output="spawn refused: this engine was made without a driver of sub-agents "
                                     "(use zagent_core.Engine, or give Engine(children=...))", is_error=True)
        return self.engine.children(self, context, arguments)

    def await_turn(self, call_id: str, tool: str) -> None:
        """Wait until each call of ``tool`` before ``call_id`` in the model's latest reply has
        spawned its child or has its result: calls of one reply running side by side then take
        their labels in the reply's order (so the scripts keyed by them do not depend on which
        thread ran first), and wait for a slot in that order too. A call that is not of the
        latest reply (``zagent tools run``, a resume) has no order to keep.

        Waited for before a slot is: a later call holding a slot while it waits for an earlier
        one, which waits for a slot, would wait forever.
        """
        earlier: list[str] = []
        for call in self._reply:
            if call.call_id == call_id:
                break
            if call.name == tool:
                earlier.append(call.call_id)
        else:
            return
        with self._lock:
            while not all(self._spawned_or_done(other) for other in earlier):
                if self.interrupt_calls.is_set():
                    raise KeyboardInterrupt  # the run is being stopped while this spawn waited its turn
                self._appended.wait(0.1)

    def add_child(self, spawned: Callable[[str], ChildSpawned]) -> ChildSpawned:
        """Name the next sub-agent (``child-N``) and journal ``spawned(label)``, in one step
        (calls running side by side never take the same label; see :meth:`await_turn`)."""
        with self._lock:
            event = spawned(f"child-{len(self.state.children) + 1}")
            self._append([event])
            return event

    def _spawned_or_done(self, call_id: str) -> bool:
        if call_id not in self.state.unrequested and call_id not in self.state.calls:
            return True  # it has its result
        return any(child.call_id == call_id for child in self.state.children.values())

    def ask_user(self, context: BuiltinContext, question: str, choices: list[str] | None) -> str:
        """:class:`~zagent_core.tools.inprocess.Host`: journal the question, then ask it on the
        terminal, or park the call (:class:`Parked`) for :meth:`answer`."""
        self._append([InputRequested(call_id=context.call_id, question=storable(question), choices=choices)])
        crash_point("after_input_requested")
        if self.ask_terminal is None:
            raise Parked(f"waiting for the user's answer (zagent answer {self.session_id} TEXT)")
        answer = storable(self.ask_terminal(question, choices))
        context.staged.append(InputAnswered(call_id=context.call_id, answer=answer, via="terminal"))
        return answer

    def answer(self, text: str, call_id: str | None = None, *, via: str = "zagent answer") -> QuestionView:
        """Answer a waiting question: the answer and its call's result in one transaction, once.

        ``call_id`` may be left out when one question waits. :class:`NoQuestionError` says
        why nothing was answered (none waits, it was answered already, several wait).
        """
        with self._lock:
            question = _the_one_waiting(self.state.questions, call_id, NoQuestionError,
                                        f"session {self.session_id} waits on {{n}} questions; name the one to answer "
                                        "with --call: ")
            if question is None:
                raise NoQuestionError(why_no_question(self.engine.journal, self.session_id, call_id))
            answer = storable(text)
            crash_point("before_input_answered")
            self._append([InputAnswered(call_id=question.call_id, answer=answer, via=via),
                          ToolCallFinished(call_id=question.call_id,
                                           **ToolResult(output=answer, is_error=False).event_fields())])
        crash_point("after_input_answered")
        return question

    def tasks_at_hand(self) -> tuple[list[TaskView], int]:
        """:class:`~zagent_core.tools.inprocess.Host`: the tasks kept at hand, and how many were numbered."""
        with self._lock:
            return list(self.state.tasks.values()), self.state.tasks_numbered

    def _run(self, tool: Tool, requested: ToolCallRequested, arguments: dict[str, Any],
             coercions: list[Coercion], *, again: bool = False, notify_offset: int = 0,
             attempt: int = 1) -> ToolResult:
        """Run a validated call; ``again`` re-runs one a crash cut off (its request is journaled).

        ``notify_offset``: where the cut-off attempt's journaled notes end in the call's
        notify file, which the new attempt appends to.
        """
        engine = self.engine
        call_id = requested.call_id
        call_dir, output_dir, notify_file = self._call_folders(call_id)
        state_file = call_dir / "state.json"
        write_json(state_file, self.state.tool_state.get(tool.name, {}))
        context = self._call_context(call_dir, state_file)
        limits = engine.config.limits
        invocation = build_invocation(tool, arguments, context, default_timeout=limits.default_timeout_seconds)
        manifest = tool.manifest
        with self._lock:  # the task number is taken and journaled in one step
            task_id = str(self.state.tasks_numbered + 1) if manifest.background else None
            self._append([
                *([] if again else [requested]),
                ToolCallStarted(
                    call_id=call_id, task_id=task_id, tool=tool.name, arguments=arguments, coercions=coercions,
                    argv=invocation.argv, cwd=str(invocation.cwd), input_mode=manifest.input,
                    output_mode=manifest.output, attach_outputs=manifest.attach_outputs, output_dir=str(output_dir),
                    notify_file=str(notify_file), notify_offset=notify_offset, attempt=attempt,
                    env_names=invocation.env_names,
                    timeout_seconds=invocation.timeout, manifest_hash=tool.manifest_hash,
                    files_hash=tool.files_hash(),
                ),
            ])
        log.info("tool_call_started", session=self.session_id, call_id=call_id, tool=tool.name, task_id=task_id)
        log.debug("tool_call_argv", call_id=call_id, argv=invocation.argv, cwd=str(invocation.cwd))
        crash_point("after_tool_call_started")
        tag = f"ZAGENT_OUTPUT_DIR={output_dir}"
        text_mode = manifest.output == "text"
        if task_id is not None:
            return self._start_task(tool.name, call_id, task_id, call_dir, invocation, text_mode, tag)
        try:
            outcome = self._process(call_id, call_dir, ProcessSpec(
                argv=invocation.argv, cwd=invocation.cwd, env=invocation.env, stdin=invocation.stdin,
                merge_stderr=text_mode, timeout=invocation.timeout, kill_grace=limits.kill_grace_seconds,
                capture_limit=limits.output_cap_bytes if text_mode else JSON_STDOUT_LIMIT,
                spill_path=call_dir / (FULL_OUTPUT_NAME if text_mode else "stdout.txt"), tag=tag,
            ))
            result = build_result(
                outcome, output_mode=manifest.output, timeout=invocation.timeout,
                attach_outputs=manifest.attach_outputs, paths=CallPaths(call_dir=call_dir, output_dir=output_dir),
                cwd=invocation.cwd, caps=self.capabilities, limits=limits,
            )
        except JournalError:
            raise  # the journal itself failed (disk full): no result can be recorded; the caller says so
        except Exception as exc:  # a bug of ours must not leave the call without a result
            log.error("tool_call_failed", exc_info=True, call_id=call_id, tool=tool.name)
            result = ToolResult(output=f"zagent failed while running the tool: {exc!r}", is_error=True)
        except BaseException:  # Ctrl-C, SystemExit: the tool was stopped with us; say so
            self._stopped(call_id)
            raise
        log.info("tool_call_finished", call_id=call_id, is_error=result.is_error, exit_code=result.exit_code,
                 duration_ms=result.duration_ms, timed_out=result.timed_out)
        crash_point("before_tool_call_finished")
        self._append([*_state_written(call_id, tool.name, result), ToolCallFinished(call_id=call_id,
                                                                                     **result.event_fields())])
        return result

    # -- the conversation (the agent loop journals through these) --------------------

    def has_call(self, call_id: str) -> bool:
        """Whether the session has requested a call with this id (open or closed)."""
        # Finished calls are not in the state: the journal knows every id the session used.
        return call_id in self.state.calls or self.engine.journal.has_call(self.session_id, call_id)

    def record(self, events: Sequence[Event]) -> None:
        """Journal events as given: what a replay serves from a recording (a call's recorded
        request, effects and result; a recorded turn's notes and wake-ups)."""
        self._append(events)

    def record_user_message(self, text: str) -> None:
        self._append([UserMessage(text=text)])

    def record_reply(self, reply: ModelReplied) -> list[RepliedCall]:
        """Journal a model reply before any of its calls runs; returns its calls with journal ids.

        Each call's ``call_id`` becomes one no call of this session has yet (a model may reuse ids).
        """
        with self._lock:
            taken = set(self.state.unrequested)
            calls = []
            for call in reply.tool_calls:
                call_id = _journal_call_id(call.id, lambda c: c in taken or self.has_call(c))
                taken.add(call_id)
                calls.append(call.model_copy(update={"call_id": call_id}))
            self._append([reply.model_copy(update={"tool_calls": calls})])
            self._reply = calls
        return calls

    def end_turn(self, reason: str) -> None:
        self._append([TurnEnded(reason=reason)])
        self.snapshot()  # a resume, or `sessions list`, starts from the end of the last turn

    def refuse(self, call: RepliedCall, message: str) -> None:
        """Give a call of a reply a result without running it (a limit was reached)."""
        self._append([ToolCallRequested(call_id=call.call_id, tool=call.name, arguments=call.arguments),
                      ToolCallRejected(call_id=call.call_id, reason="limit", message=message)])

    def settle_unrequested(self, why: str) -> None:
        """Calls a reply asked for that never ran (the engine stopped first) get a result saying so;
        those of a built-in that :attr:`~Builtin.continues` are only requested: they go on later."""
        for call in list(self.state.unrequested.values()):
            requested = ToolCallRequested(call_id=call.call_id, tool=call.name, arguments=call.arguments)
            if self._continues(call.name):
                self._append([requested])
            else:
                self._append([requested, ToolCallInterrupted(call_id=call.call_id,
                                                             message=f"{call.name} was not run: {why}")])

    # -- resume ------------------------------------------------------------------------

    def _settle(self) -> None:
        """After a restart: give every open call a result and every running task an owner."""
        self.settle_unrequested("zagent stopped before it ran")
        if self.state.in_turn:
            # A turn cut off after the model's final answer is over: asking again would answer twice.
            # Any other is continued by the agent in a new turn.
            self.end_turn("idle" if self.state.turn_answered else "interrupted")
        continuing = {call.call_id for call in self.continuing_calls()}
        for call in list(self.state.calls.values()):
            if (call.call_id in self.state.questions or call.call_id in self.state.waiting_approvals
                    or call.call_id in continuing):
                continue  # parked (its answer or decision gives it its result), or it goes on when driven (go_on)
            approval = self.state.approvals.get(call.call_id)
            if approval is not None:  # approved, and the crash came before it started: it never ran
                self._run_approved(approval)
                continue
            if call.status in ("requested", "running") and call.task_id is None:
                self._settle_call(call)
            elif call.status == "running":
                self._settle_task_start(call)
        for call in list(self.state.calls.values()):
            if call.notify_file is not None:
                self.collect_notes(call.call_id)  # lines written while no engine was reading
        for task in self.state.running_tasks:
            self.poll_task(task.task_id)
        if self.state.running_tasks:
            self._watch()

    def continuing_calls(self) -> list[CallView]:
        """Calls cut off that go on where they were, not settled (a ``spawn`` waiting on its child)."""
        return [call for call in list(self.state.calls.values())
                if call.status in ("requested", "running") and call.task_id is None and self._continues(call.tool)]

    def _continues(self, name: str) -> bool:
        builtin = self.engine.builtins.get(name)
        return builtin is not None and builtin.continues

    def go_on(self, call: CallView) -> ToolResult:
        """Carry on with a call of :meth:`continuing_calls`: it gets its real result (or, if the
        config changed under it, a preset gone, the refusal any call would get)."""
        return self._checked_run(ToolCallRequested(call_id=call.call_id, tool=call.tool, arguments=call.arguments),
                                 journaled=True)

    def _settle_call(self, call: CallView) -> None:
        """A foreground call the crash cut off: run it again if that is safe, else say so."""
        if call.notify_file is not None:
            tasks.stop(Path(call.notify_file).parent, wait=True)  # its tool, if it outlived us
            self.collect_notes(call.call_id)  # then every line it wrote
        requested = ToolCallRequested(call_id=call.call_id, tool=call.tool, arguments=call.arguments)
        # Run again once: a call that a crash cut off twice may be what brings the engine down.
        rerun = self._rerun_of(call.tool) if call.attempt < 2 else None
        if rerun is not None and isinstance(call.arguments, dict):
            validator, run = rerun
            validated = validate_arguments(validator, call.arguments)
            if validated.ok:
                offset = self.state.calls[call.call_id].notify_offset
                if call.status == "running":  # the attempt that was cut off gets its own end
                    self._append([ToolCallInterrupted(call_id=call.call_id, message=(
                        f"zagent stopped while {call.tool} was running; it is replay-safe, so it runs again"))])
                run(requested, validated.arguments, validated.coercions, again=True, notify_offset=offset,
                    attempt=call.attempt + 1 if call.status == "running" else call.attempt)
                return
        when = f"at {call.started_at:%H:%M:%S}Z" if call.started_at else "before it started"
        again = (" It had already been run again once after a crash, so it was not run a third time."
                 if call.attempt > 1 else "")
        self._append([ToolCallInterrupted(call_id=call.call_id, message=(
            f"zagent stopped while {call.tool} was running (started {when}); the call was cut off and its "
            f"effect may or may not have happened. Check before calling it again.{again}"))])

    def _rerun_of(self, name: str) -> tuple[Any, Callable[..., ToolResult]] | None:
        """For a replay-safe tool: its validator, and how to run a call of it again."""
        if self.replay_policy(name) != "safe":
            return None
        builtin = self.engine.builtins.get(name)
        run = functools.partial(self._run_builtin, builtin) if builtin else functools.partial(self._run,
                                                                                            self.tools.tools[name])
        return self.validator_of(name), run

    def _settle_task_start(self, call: CallView) -> None:
        """A background call whose start was cut off: find its supervisor, if it ever ran."""
        assert call.task_id is not None and call.notify_file is not None
        task_dir = Path(call.notify_file).parent
        events: list[Event] = []
        if call.task_id not in self.state.tasks:
            who = tasks.identity(task_dir)
            if who is None:
                self._append([ToolCallInterrupted(call_id=call.call_id, message=(
                    f"zagent stopped while starting {call.tool} in the background; the task never started"))])
                return
            events.append(_task_started(call.task_id, call.call_id, call.tool, who, task_dir))
        self._append([*events, ToolCallFinished(call_id=call.call_id, **_started_result(call.task_id).event_fields())])

    # -- background tasks ------------------------------------------------------------

    def _launch(self, tool: str, call_id: str, task_id: str, task_dir: Path, invocation: Invocation, *,
                text_mode: bool, tag: str) -> tuple[ToolResult, TaskStarted | None]:
        """Start a task's supervisor; returns the call's result and the ``task_started`` to journal with it."""
        try:
            proc = tasks.launch(task_dir, invocation, merge_stderr=text_mode,
                                kill_grace=self.engine.config.limits.kill_grace_seconds, tag=tag)
        except OSError as exc:
            return ToolResult(output=f"could not start the background task: {exc}", is_error=True), None
        self._supervisors[task_id] = proc
        who = ProcessIdentity.of(proc.pid) or ProcessIdentity(pid=proc.pid, start_ticks=0, boot_id="")
        return _started_result(task_id), _task_started(task_id, call_id, tool, who, task_dir)

    def _start_task(self, tool: str, call_id: str, task_id: str, task_dir: Path, invocation: Invocation,
                    text_mode: bool, tag: str) -> ToolResult:
        result, started = self._launch(tool, call_id, task_id, task_dir, invocation, text_mode=text_mode, tag=tag)
        self._append([*([started] if started else []), ToolCallFinished(call_id=call_id, **result.event_fields())])
        if started is not None:
            crash_point("after_task_started")
            self._watch()
        return result

    def poll_task(self, task_id: str) -> TaskView:
        """Journal what a running task did since the last look: notes, and its end."""
        with self._lock:
            task = self.state.tasks[task_id]
            if task.status != "running":
                return task
            self.collect_notes(task.call_id)
            supervisor = self._supervisors.get(task_id)
            if supervisor is not None:
                supervisor.poll()  # reap it if it is done
            task_dir = Path(task.task_dir)
            record = tasks.exit_record(task_dir)
            if record is None:
                if ProcessIdentity(pid=task.pid, start_ticks=task.start_ticks, boot_id=task.boot_id).alive():
                    return task
                record = tasks.exit_record(task_dir)  # it may have written it just before it went
            if record is None:
                self._interrupt_task(task, "its supervisor stopped without recording how the tool ended")
            else:
                self.collect_notes(task.call_id)  # the lines it wrote last
                self._finish_task(task, record)
            return self.state.tasks[task_id]

    def _finish_task(self, task: TaskView, record: dict[str, Any]) -> None:
        call = self.state.calls[task.call_id]
        result = tasks.result_of(
            record, Path(task.task_dir), output_mode=call.output_mode or "text", timeout=call.timeout_seconds,
            attach_outputs=call.attach_outputs, cwd=Path(call.cwd or self.engine.workspace),
            caps=self.capabilities, limits=self.engine.config.limits,
        )
        fields = result.event_fields() | {"ended_at": tasks.ended_at(record)}
        written = _state_written(task.call_id, task.tool, result)
        if record.get("stopped"):
            # The kill was asked for (terminal, or the session ending): its answer says so.
            self._append([*written, TaskKilled(task_id=task.task_id, call_id=task.call_id, **fields)])
            return
        ended = "timed out" if result.timed_out else "failed" if result.is_error else "finished"
        log.info("task_ended", session=self.session_id, task_id=task.task_id, how=ended, exit_code=result.exit_code)
        self._append([
            *written,
            TaskExited(task_id=task.task_id, call_id=task.call_id, **fields),
            WakeRequested(wake_id=new_wake_id(), reason="task_exited", call_id=task.call_id, task_id=task.task_id,
                          text=f"task #{task.task_id} ({task.tool}) {ended}:\n{result.output}"),
        ])
        crash_point("with_wake_pending")

    def _interrupt_task(self, task: TaskView, why: str) -> None:
        tasks.stop(Path(task.task_dir))  # whatever of it still runs without its supervisor
        output = Path(task.task_dir) / tasks.OUTPUT_FILE
        message = f"task #{task.task_id} ({task.tool}) was interrupted: {why}. Its output so far is in {output}."
        self._append([
            TaskInterrupted(task_id=task.task_id, call_id=task.call_id, message=message, output_path=str(output)),
            WakeRequested(wake_id=new_wake_id(), reason="task_interrupted", call_id=task.call_id,
                          task_id=task.task_id, text=message),
        ])

    def wait_task(self, task_id: str, timeout: float | None) -> TaskView:
        """Block until the task ends or ``timeout`` seconds pass; returns its view."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            task = self.poll_task(task_id)
            if task.status != "running" or (deadline is not None and time.monotonic() >= deadline):
                return task
            time.sleep(WATCH_SECONDS / 2)

    def kill_task(self, task_id: str) -> TaskView:
        """Stop a task's whole tree; returns its view once its end is journaled."""
        task = self.poll_task(task_id)
        if task.status != "running":
            return task
        tasks.stop(Path(task.task_dir), supervisor=ProcessIdentity(pid=task.pid, start_ticks=task.start_ticks,
                                                                    boot_id=task.boot_id))
        task = self.wait_task(task_id, self.engine.config.limits.kill_grace_seconds + 5)
        if task.status == "running":
            with self._lock:
                self._interrupt_task(task, "it did not stop when asked")
            task = self.state.tasks[task_id]
        return task

    def _watch(self) -> None:
        """Make sure a thread is following the running tasks."""
        with self._lock:
            if self._watcher is None:
                self._watcher = threading.Thread(target=self._watch_loop, daemon=True,
                                                 name=f"zagent-tasks-{self.session_id}")
                self._watcher.start()

    def _watch_loop(self) -> None:
        try:
            while True:
                with self._lock:
                    running = [t.task_id for t in self.state.running_tasks]
                    if not running or self.state.status == "ended":
                        self._watcher = None
                        return
                for task_id in running:
                    self.poll_task(task_id)
                time.sleep(WATCH_SECONDS)
        except Exception as exc:  # noqa: BLE001 - the journal failed: the session can no longer record
            if isinstance(exc, JournalError):  # away, or closed: its message says it all
                log.error("task_watch_failed", error=str(exc), session=self.session_id)
            else:  # a bug of ours: its traceback
                log.error("task_watch_failed", exc_info=True, session=self.session_id)
            with self._lock:
                self._watcher = None
