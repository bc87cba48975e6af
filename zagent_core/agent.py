"""The agent loop: a model decides which tools to call, over a journaled session.

A turn: a user message (or a wake-up) -> model -> tool calls -> results -> model ...
until the model replies with no tool call, and the agent is idle. Every reply is
journaled before its calls run, and the conversation sent to the model is rebuilt from
the journal before every request (:func:`conversation`), which refuses to produce one
with a tool call that has no result: no orphaned call ever reaches a model.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from zagent_core import terminal
from zagent_core.config import AgentConfig
from zagent_core.engine import Session
from zagent_core.events import RepliedCall
from zagent_core.journal import StoredEvent
from zagent_core.logs import get_logger
from zagent_core.models import Message, Model, ModelError, ToolCallRequest, ToolSpec

log = get_logger(__name__)

#: How often an idle agent looks for wake-ups while background tasks run.
WAKE_POLL_SECONDS = 0.1


class OrphanedCallError(RuntimeError):
    """A tool call in the conversation has no result; sending it would make providers fail."""


def conversation(events: Iterable[StoredEvent], system_prompt: str) -> list[Message]:
    """The messages a model is sent, rebuilt from a session's events.

    The system prompt is the one the latest turn journaled (``system_prompt`` is the
    fallback for sessions that journaled none).

    Notes and wake-ups delivered by a turn (or mid-turn) follow as one user message of
    ``[info: ...]`` lines, at the end of the request; they never touch the system prompt.
    """
    events = list(events)
    results: dict[str, tuple[str, bool]] = {}
    note_text: dict[int, str] = {}
    wakes: dict[str, tuple[str, str]] = {}
    for stored in events:
        event = stored.event
        if event.type == "tool_call_finished":
            results[event.call_id] = (event.output, event.is_error)
        elif event.type in ("tool_call_rejected", "tool_call_interrupted"):
            results[event.call_id] = (event.message, True)
        elif event.type == "note_received":
            note_text[stored.version] = event.text
        elif event.type == "wake_requested":
            wakes[event.wake_id] = (event.reason, event.text)
        elif event.type == "turn_started" and event.system_prompt is not None:
            system_prompt = event.system_prompt

    messages = [Message(role="system", content=system_prompt)]
    for stored in events:
        event = stored.event
        if event.type == "user_message":
            messages.append(Message(role="user", content=event.text))
        elif event.type in ("turn_started", "notes_delivered"):
            lines = [f"[info: {note_text[v]}]" for v in event.notes if v in note_text]
            lines += [f"[info: {wakes[w][1]}]" for w in event.wakes if w in wakes and wakes[w][0] != "note"]
            if lines:
                messages.append(Message(role="user", content="\n".join(lines)))
        elif event.type == "model_replied":
            messages.append(Message(role="assistant", content=event.text, tool_calls=[
                ToolCallRequest(id=call.id, name=call.name, arguments=call.arguments) for call in event.tool_calls]))
            for call in event.tool_calls:
                if call.call_id not in results:
                    raise OrphanedCallError(f"tool call {call.call_id} ({call.name}) has no result")
                content, is_error = results[call.call_id]
                messages.append(Message(role="tool", tool_call_id=call.id, content=content, is_error=is_error))
    return messages


@dataclass
class RunResult:
    """How a run ended: the last turn's end reason, and how many model requests it made."""

    reason: str
    requests: int


class Agent:
    """Drives one session with one model. ``on_event`` sees every event as it is committed."""

    def __init__(self, session: Session, model: Model, config: AgentConfig | None = None, *,
                 run_call: Callable[[RepliedCall], None] | None = None) -> None:
        self.session = session
        self.model = model
        self.config = config or session.engine.config.agent
        self.requests = 0
        self._seen: list[StoredEvent] = []
        #: How a tool call is carried out: really (the default), or served from a recording.
        self.run_call = run_call or (lambda call: session.call(call.name, call.arguments, call_id=call.call_id))

    def _events(self) -> list[StoredEvent]:
        """The session's events so far: only the new ones are read (and parsed) each time."""
        after = self._seen[-1].version if self._seen else 0
        self._seen.extend(self.session.engine.journal.read(self.session.session_id, after_version=after))
        return self._seen

    def tool_specs(self) -> list[ToolSpec]:
        """What the model is told about the tools: name, description, parameters."""
        specs = [ToolSpec(name=t.name, description=t.description, parameters=t.manifest.parameters)
                 for t in self.session.tools.offered()]
        return specs + [ToolSpec(name=terminal.NAME, description=terminal.DESCRIPTION, parameters=terminal.PARAMETERS)]

    def _concurrency_safe(self, call: RepliedCall) -> bool:
        if call.name == terminal.NAME:
            return isinstance(call.arguments, dict) and call.arguments.get("action") in terminal.READ_ONLY
        tool = self.session.tools.tools.get(call.name)
        return tool is not None and tool.manifest.concurrency_safe

    def _run_calls(self, calls: list[RepliedCall]) -> None:
        """Run a reply's calls: together when every one is concurrency-safe, else in order."""
        if len(calls) > 1 and all(self._concurrency_safe(c) for c in calls):
            with ThreadPoolExecutor(max_workers=min(len(calls), 8)) as pool:
                list(pool.map(self.run_call, calls))
        else:
            for call in calls:
                self.run_call(call)

    def turn(self, prompt: str | None, *, resumed: bool = False, max_requests: int | None = None,
             stop_reason: str = "interrupted") -> str:
        """One turn, from a user message (or, with None, a wake-up) until the agent is idle.

        ``resumed`` continues a turn a crash cut off (resume closed it as interrupted).
        ``max_requests`` ends the turn with ``stop_reason`` after that many model requests
        (a replay stops where the recorded turn stopped).
        Returns why the turn ended: ``idle``, ``max_turns``, ``max_tool_calls`` or
        ``model_error: ...``.
        """
        session = self.session
        if prompt is not None:
            session.record_user_message(prompt)
        session.deliver(turn="user" if prompt is not None else "resume" if resumed else "wake",
                        system_prompt=self.config.system_prompt)
        calls_this_turn = 0
        specs = self.tool_specs()
        while True:
            if self.requests >= self.config.max_turns:
                return self._end("max_turns")
            if max_requests is not None and max_requests <= 0:
                return self._end(stop_reason)
            if max_requests is not None:
                max_requests -= 1
            messages = conversation(self._events(), self.config.system_prompt)
            started = time.monotonic()
            try:
                reply = self.model.reply(messages, specs)
            except ModelError as exc:
                return self._end(f"model_error: {exc}")
            self.requests += 1
            calls = session.record_reply(reply, round((time.monotonic() - started) * 1000))
            if not calls:
                return self._end("idle")
            if calls_this_turn + len(calls) > self.config.max_tool_calls_per_turn:
                for call in calls:
                    session.refuse(call, f"not run: this turn reached its limit of "
                                         f"{self.config.max_tool_calls_per_turn} tool calls")
                return self._end("max_tool_calls")
            calls_this_turn += len(calls)
            self._run_calls(calls)
            session.deliver()  # notes that came in while the tools ran

    def _end(self, reason: str) -> str:
        self.session.end_turn(reason)
        log.info("turn_ended", session=self.session.session_id, reason=reason)
        return reason

    def run(self, prompt: str | None, *, wait_minutes: float | None = None,
            on_idle: Callable[[], None] | None = None) -> RunResult:
        """A turn for ``prompt``, then more turns as wake-ups arrive, while background tasks run.

        Stays up to ``wait_minutes`` (default ``agent.max_background_wait_minutes``) for
        background tasks; returns when the agent is idle with nothing left to wait for,
        at that limit (the session stays resumable), or when a turn stops for a limit.
        """
        wait = self.config.max_background_wait_minutes if wait_minutes is None else wait_minutes
        try:
            return self._run(prompt, wait, on_idle)
        except KeyboardInterrupt:
            # Ctrl-C: the running tool was stopped and journaled as interrupted; calls of the
            # reply that had not run yet, and the turn, are closed too, so resume finds it clean.
            if self.session.state.in_turn:
                self.session.settle_unrequested("the run was stopped (Ctrl-C) before it ran")
                self._end("interrupted")
            raise

    def _run(self, prompt: str | None, wait: float, on_idle: Callable[[], None] | None) -> RunResult:
        state = self.session.state
        # A turn a crash cut off (resume ended it as "interrupted"), or one the model failed
        # (its endpoint was down), goes on: the model has not answered its last results.
        cut_off = prompt is None and (state.last_turn_end or "").startswith(("interrupted", "model_error"))
        if prompt is not None or cut_off or state.pending_wakes:
            reason = self.turn(prompt, resumed=cut_off)
        else:
            reason = "idle"
        deadline = time.monotonic() + wait * 60
        while reason == "idle":
            if self.session.state.pending_wakes:
                reason = self.turn(None)
                continue
            running = self.session.state.running_tasks
            if not running or time.monotonic() >= deadline:
                break
            if on_idle is not None:
                on_idle()
            for task in running:
                self.session.poll_task(task.task_id)
            time.sleep(WAKE_POLL_SECONDS)
        return RunResult(reason=reason, requests=self.requests)
