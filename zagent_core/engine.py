"""The session engine: commands in, events out.

A :class:`Session` is the only writer of its events. Each step appends its events in
one transaction at the version the session expects, and keeps its state by applying
them, so the in-memory state is always exactly the journal's. A tool call is journaled
as it happens: ``tool_call_requested`` with ``tool_call_rejected`` or
``tool_call_started`` (committed before the process starts), then
``tool_call_finished``. Nothing a tool does, and no mistake in a call, raises here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any


from zagent_core.config import Config, load_config
from zagent_core.events import (
    Coercion,
    Event,
    NoteReceived,
    RejectReason,
    SessionEnded,
    SessionStarted,
    ToolCallFinished,
    ToolCallRejected,
    ToolCallRequested,
    ToolCallStarted,
    ToolOffer,
    TurnStarted,
    WakeRequested,
)
from zagent_core.home import Home
from zagent_core.ids import new_call_id, new_session_id, new_wake_id
from zagent_core.invocation import CallContext, build_invocation, delivery_problems
from zagent_core.journal import Journal, StoredEvent
from zagent_core.logs import get_logger
from zagent_core.manifest import Tool, ToolSet, load_tools
from zagent_core.problems import Problem, did_you_mean
from zagent_core.results import FULL_OUTPUT_NAME, JSON_STDOUT_LIMIT, CallPaths, ToolResult, build_result
from zagent_core.notes import read_notes
from zagent_core.runner import ProcessSpec, run_process
from zagent_core.state import NoteView, SessionState, WakeView, apply, rebuild
from zagent_core.validation import validate_arguments

log = get_logger(__name__)


def zagent_version() -> str:
    try:
        return version("zagent")
    except PackageNotFoundError:
        return "0+unknown"


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


class SessionEndedError(RuntimeError):
    """A call or an end on a session that already ended."""


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
    ) -> None:
        self.home = home
        self.journal = journal
        self.workspace = Path(workspace or Path.cwd()).resolve()
        self.config_problems: list[Problem] = []
        if config is None:
            config, self.config_problems = load_config(home.config_path)
        self.config = config

    def load_tools(self) -> ToolSet:
        """The tools of the home as they are on disk now."""
        return load_tools(self.home, self.config)

    def start_session(self, origin: str = "api", *, tools: ToolSet | None = None) -> Session:
        """Begin a session: load the tools and journal what is offered and what is broken."""
        tools = tools or self.load_tools()
        session = Session(self, new_session_id(), tools)
        warnings = [str(p) for p in [*self.config_problems, *tools.problems]]
        session._append([
            SessionStarted(
                origin=origin,
                workspace=str(self.workspace),
                zagent_version=zagent_version(),
                tools=[ToolOffer(name=t.name, description=t.description, folder=str(t.folder),
                                 manifest_hash=t.manifest_hash) for t in tools.offered()],
                warnings=warnings,
            )
        ])
        log.info("session_started", session=session.session_id, tools=len(tools.tools), warnings=len(warnings))
        return session

    def session_state(self, session_id: str) -> SessionState:
        """A session rebuilt from its events (empty ``SessionState`` if it has none)."""
        return rebuild(self.journal.read(session_id))


class Session:
    """One session of an :class:`Engine`; use :meth:`Engine.start_session`."""

    def __init__(self, engine: Engine, session_id: str, tools: ToolSet) -> None:
        self.engine = engine
        self.session_id = session_id
        self.tools = tools
        self.state = SessionState()
        # Background watchers append too: one writer at a time keeps versions in order.
        self._lock = threading.RLock()
        self._listeners: list[Callable[[StoredEvent], None]] = []

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.state.status == "open":
            self.end()

    def subscribe(self, listener: Callable[[StoredEvent], None]) -> None:
        """Call ``listener`` with every event this session appends, after it is committed."""
        self._listeners.append(listener)

    def _append(self, events: Sequence[Event]) -> None:
        with self._lock:
            if self.state.status == "ended":
                raise SessionEndedError(f"session {self.session_id} has ended; start a new session")
            stored = self.engine.journal.append(self.session_id, events, self.state.version)
            for item in stored:
                self.state = apply(self.state, item)
        for item in stored:
            for listener in self._listeners:
                listener(item)

    # -- notes and wake-ups ----------------------------------------------------------

    def collect_notes(self, call_id: str) -> int:
        """Journal the complete lines a call's notify file gained since its last note.

        Returns how many notes were added. Safe to call from any thread, any number of
        times: the offset is read and moved under the session's lock.
        """
        with self._lock:
            call = self.state.calls[call_id]
            if call.notify_file is None:
                return 0
            notes = read_notes(Path(call.notify_file), call.notify_offset)
            if not notes:
                return 0
            task_id = None
            events: list[Event] = []
            for note in notes:
                events.append(NoteReceived(call_id=call_id, task_id=task_id, text=note.text, wake=note.wake,
                                           offset=note.offset))
                if note.wake:
                    events.append(WakeRequested(wake_id=new_wake_id(), reason="note", text=note.text,
                                                call_id=call_id, task_id=task_id))
            self._append(events)
            return len(notes)

    def deliver(self) -> Delivery:
        """Take the pending notes and wake-ups for the agent's next request, exactly once."""
        with self._lock:
            notes = list(self.state.pending_notes.values())
            wakes = list(self.state.pending_wakes.values())
            if notes or wakes:
                self._append([TurnStarted(notes=[n.version for n in notes], wakes=[w.wake_id for w in wakes])])
        return Delivery(notes=notes, wakes=wakes)

    def end(self, reason: str = "completed") -> None:
        self._append([SessionEnded(reason=reason)])

    # -- tool calls ------------------------------------------------------------------

    def _refusal(self, name: str) -> tuple[RejectReason, str] | None:
        """Why tool ``name`` cannot run in this session at all, whatever the arguments."""
        tool = self.tools.tools.get(name)
        if tool is None:
            known = [t.name for t in self.tools.offered()]
            listing = f"; available tools: {', '.join(known)}" if known else "; no tools are loaded"
            return "unknown_tool", f'unknown tool "{name}"{did_you_mean(name, known)}{listing}'
        if name in self.tools.disabled:
            return "disabled", f'tool "{name}" is disabled in config.json ("tools": {{"disabled": [...]}}), so it was not run'
        if tool.manifest.permission == "ask":
            return "permission", (
                f'tool "{name}" needs approval before each call ("permission": "ask"), and interactive approval '
                'is not implemented in any interface yet, so it was not run. Set "permission": "allow" in its '
                "manifest to use it, or disable it in config.json."
            )
        if tool.manifest.background:
            return "unsupported", (
                f'tool "{name}" is a background tool ("background": true), and this version of zagent does not '
                "run background tasks yet, so it was not run."
            )
        return None

    def call(self, name: str, arguments: Any, *, call_id: str | None = None) -> ToolResult:
        """Validate, run and journal one call of tool ``name``; returns what the model receives."""
        call_id = call_id or new_call_id()
        requested = ToolCallRequested(call_id=call_id, tool=name, arguments=arguments)
        refusal = self._refusal(name)
        problems: list[str] = []
        if refusal is None:
            tool = self.tools.tools[name]
            validated = validate_arguments(tool.validator, arguments)
            problems = validated.problems or delivery_problems(tool, validated.arguments)
            if not problems:
                return self._run(tool, requested, validated.arguments, validated.coercions)
            refusal = "invalid_arguments", (
                f"{name} was not run: its arguments do not match its parameters.\n" + "\n".join(problems)
            )
        reason, message = refusal
        self._append([requested, ToolCallRejected(call_id=call_id, reason=reason, message=message, problems=problems)])
        return ToolResult(output=message, is_error=True)

    def _run(self, tool: Tool, requested: ToolCallRequested, arguments: dict[str, Any],
             coercions: list[Coercion]) -> ToolResult:
        engine = self.engine
        call_id = requested.call_id
        call_dir = engine.home.call_dir(self.session_id, call_id)
        output_dir = call_dir / "output"
        scratch = engine.home.scratch_dir(self.session_id)
        for folder in (output_dir, scratch):
            folder.mkdir(parents=True, exist_ok=True)
        notify_file = call_dir / "notify"
        notify_file.touch()
        context = CallContext(
            session_id=self.session_id, home=engine.home.root, workspace=engine.workspace, scratch=scratch,
            output_dir=output_dir, notify_file=notify_file, caps=engine.config.capabilities.as_env(),
        )
        limits = engine.config.limits
        invocation = build_invocation(tool, arguments, context, default_timeout=limits.default_timeout_seconds)
        manifest = tool.manifest
        self._append([
            requested,
            ToolCallStarted(
                call_id=call_id, tool=tool.name, arguments=arguments, coercions=coercions, argv=invocation.argv,
                cwd=str(invocation.cwd), input_mode=manifest.input, output_mode=manifest.output,
                output_dir=str(output_dir), notify_file=str(notify_file), env_names=invocation.env_names,
                timeout_seconds=invocation.timeout, manifest_hash=tool.manifest_hash, files_hash=tool.files_hash(),
            ),
        ])
        text_mode = manifest.output == "text"
        log.info("tool_call_started", session=self.session_id, call_id=call_id, tool=tool.name)
        log.debug("tool_call_argv", call_id=call_id, argv=invocation.argv, cwd=str(invocation.cwd))
        def tick() -> bool:
            self.collect_notes(call_id)
            return False

        try:
            outcome = run_process(ProcessSpec(
                argv=invocation.argv, cwd=invocation.cwd, env=invocation.env, stdin=invocation.stdin,
                merge_stderr=text_mode, timeout=invocation.timeout, kill_grace=limits.kill_grace_seconds,
                capture_limit=limits.output_cap_bytes if text_mode else JSON_STDOUT_LIMIT,
                spill_path=call_dir / (FULL_OUTPUT_NAME if text_mode else "stdout.txt"),
                tag=f"ZAGENT_OUTPUT_DIR={output_dir}",
            ), on_tick=tick)
            self.collect_notes(call_id)  # what it wrote last
            result = build_result(
                outcome, output_mode=manifest.output, timeout=invocation.timeout,
                attach_outputs=manifest.attach_outputs, paths=CallPaths(call_dir=call_dir, output_dir=output_dir),
                cwd=invocation.cwd, caps=engine.config.capabilities, limits=limits,
            )
            pid = outcome.pid
        except Exception as exc:  # a bug of ours must not leave the call without a result
            log.exception("tool_call_failed", call_id=call_id, tool=tool.name)
            result = ToolResult(output=f"zagent failed while running the tool: {exc!r}", is_error=True)
            pid = None
        log.info("tool_call_finished", call_id=call_id, is_error=result.is_error, exit_code=result.exit_code,
                 duration_ms=result.duration_ms, timed_out=result.timed_out)
        self._append([
            ToolCallFinished(
                call_id=call_id, output=result.output, is_error=result.is_error, exit_code=result.exit_code,
                pid=pid, duration_ms=result.duration_ms, timed_out=result.timed_out,
                truncated_bytes=result.truncated_bytes, full_output_path=result.full_output_path,
                media=result.media, files=result.files,
            )
        ])
        return result
