"""The agent loop: a model decides which tools to call, over a journaled session.

A turn: a user message (or a wake-up) -> model -> tool calls -> results -> model ...
until the model replies with no tool call, and the agent is idle. Every reply is
journaled before its calls run, and the conversation sent to the model is rebuilt from
the journal as events are committed (:class:`Conversation`), which refuses to produce a
request with a tool call that has no result: no orphaned call ever reaches a model.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

from zagent_core.agent.compaction import Budget, Compactions, cleared, context_window, specs_size, summarised
from zagent_core.agent.conversation import (
    Conversation,
)
from zagent_core.agent.models import ContextTooLongError, Message, Model, ModelError, ModelReply, ToolSpec
from zagent_core.config import AgentConfig
from zagent_core.journal.events import ContextCompacted, RepliedCall
from zagent_core.journal.views import CallView
from zagent_core.logs import get_logger
from zagent_core.session.crashpoints import crash_point
from zagent_core.session.engine import Session
from zagent_core.tools.disclosure import disclosed
from zagent_core.tools.model_catalog import model_settings

log = get_logger(__name__)

#: A call to run: from a model reply, or one a crash cut off that goes on (:meth:`Session.continue_call`).
_Call = RepliedCall | CallView

#: How often an idle agent looks for wake-ups while background tasks run.
WAKE_POLL_SECONDS = 0.1


@dataclass
class RunResult:
    """How a run ended: the last turn's end reason, and how many model requests it made."""

    reason: str
    requests: int


class Agent:
    """Drives one session with one model."""

    def __init__(self, session: Session, model: Model, config: AgentConfig | None = None, *,
                 run_call: Callable[[RepliedCall], None] | None = None, spec: str | None = None,
                 deadline: float | None = None, on_text: Callable[[str], None] | None = None,
                 compactions: Compactions | None = None) -> None:
        self.session = session
        self.model = model
        #: Given each reply's text as it arrives (``zagent run`` prints it), before the reply is journaled.
        self.on_text = on_text
        #: ``time.monotonic()`` past which the run stops (``timeout``), looked at between steps: a sub-agent's limit.
        self.deadline = deadline
        #: How the model was asked for (``openai:gpt-4o``), journaled with each turn for ``resume``.
        self.spec = spec
        self.config = config or session.engine.config.agent
        self.requests = 0
        engine_config = session.engine.config
        #: The model's window, in tokens: what ``compact_at`` is a fraction of.
        self.window = context_window(spec or model.name, model_settings(engine_config, spec or model.name))
        #: When the conversation is made smaller: by its estimated size (or, replayed, as recorded).
        self.compactions: Compactions = compactions or Budget(int(self.window * self.config.compact_at),
                                                               self.config.keep_results_of_requests)
        self._conversation = Conversation(self.config.system_prompt, session_id=session.session_id,
                                          notes_cap=engine_config.limits.notes_bytes_per_request)
        # A compacted session's conversation starts at its summary: what came before is not read.
        self._read_to = session.state.context_from
        #: How a tool call is carried out: really (the default), or served from a recording.
        self.run_call = run_call or (lambda call: session.call(call.name, call.arguments, call_id=call.call_id))

    def _read(self) -> Conversation:
        """The conversation, with what was committed since it was last read."""
        journal = self.session.engine.journal
        for stored in journal.read(self.session.session_id, after_version=self._read_to, types=Conversation.TYPES):
            self._conversation.add(stored)
            self._read_to = stored.version
        return self._conversation

    def _messages(self, specs: list[ToolSpec]) -> list[Message]:
        """The next request's messages: the conversation so far, plus what was committed since,
        made smaller first when the compactions say so, with only the media the model of this
        turn can take (a session may change models)."""
        from zagent_core.agent.models.media import within_capabilities

        conversation = self._read()
        tools_size = specs_size(specs)
        estimate = conversation.estimate(tools_size)
        through = self.compactions.clear_through(conversation, estimate)
        if through is not None:
            event = cleared(conversation, through, tools_size)
            self.session.record([event])
            estimate = event.tokens_after
        if self.compactions.summary_due(conversation, estimate):
            try:
                self.compact("auto", specs=specs)
            except ModelError as exc:  # the request may still fit: the provider says if not
                log.warning("compaction_failed", session=self.session.session_id, problem=str(exc))
        return within_capabilities(self._read().messages(), self.session.capabilities)

    def compact(self, trigger: Literal["auto", "manual", "too_long"] = "manual", *, instructions: str | None = None,
                model: Model | None = None, specs: list[ToolSpec] | None = None) -> ContextCompacted:
        """Ask ``model`` (default: the agent's) for a summary of the conversation, and journal it
        as ``context_compacted``: from then on the model is shown the summary and what follows
        (see :func:`~zagent_core.agent.compaction.summarised`).

        Raises :class:`ModelError` when the model cannot be asked or gives no summary, and
        :class:`OrphanedCallError` while a call waits for its result: nothing is journaled then.
        """
        event = summarised(self._read(), model or self.model, self.tool_specs() if specs is None else specs,
                           window=self.window, trigger=trigger, instructions=instructions,
                           through_version=self._read_to)
        self.session.record([event])
        crash_point("after_context_compacted")
        log.info("context_compacted", session=self.session.session_id, trigger=trigger,
                 tokens_before=event.tokens_before, tokens_after=event.tokens_after)
        self._read()
        return event

    def tool_specs(self) -> list[ToolSpec]:
        """What the model is told about the tools: name, description, parameters (the name and
        description config.json's ``tools.aliases`` and ``tools.descriptions`` give them), deferred
        tools left out but for those unlocked, which come last (see :func:`~zagent_core.tools.disclosure.disclosed`)."""
        shown = self.session.engine.shown
        return [ToolSpec(name=shown.name(t.name), description=shown.description(t.name, t.description),
                         parameters=t.parameters)
                for t in disclosed(self.session.offered(), self.session.engine.config, self.session.state.unlocked)]

    def _run_calls(self, calls: Sequence[_Call], run: Callable[[Any], Any] | None = None) -> None:
        """Run a reply's calls in the order asked, with concurrency-safe ones together.

        Consecutive concurrency-safe calls run as a fleet (``agent.max_concurrent_tools``
        at most); any other call is a barrier: it waits for the fleet to finish, runs
        alone, then the next calls go on. The model gets the results in its own order.
        """
        run_one: Callable[[Any], Any] = run or self.run_call
        fleet: list[_Call] = []

        def drain() -> None:
            if len(fleet) > 1:
                with ThreadPoolExecutor(max_workers=min(len(fleet), self.config.max_concurrent_tools)) as pool:
                    futures = [pool.submit(run_one, call) for call in fleet]
                    try:
                        for future in futures:
                            future.result()
                    except KeyboardInterrupt:
                        # Ctrl-C reached this thread only: stop the calls running beside it, and
                        # the ones not started yet (the turn's end settles them). A sub-agent's
                        # calls share the signal: only who raised it lowers it.
                        stop = self.session.interrupt_calls
                        raised = not stop.is_set()
                        stop.set()
                        try:
                            pool.shutdown(wait=True, cancel_futures=True)
                        finally:
                            if raised:
                                stop.clear()
                        raise
            elif fleet:
                run_one(fleet[0])
            fleet.clear()

        for call in calls:
            name, arguments = (call.name, call.arguments) if isinstance(call, RepliedCall) else (call.tool,
                                                                                              call.arguments)
            if self.session.concurrency_safe(name, arguments):
                fleet.append(call)
            else:
                drain()
                run_one(call)
        drain()

    def turn(self, prompt: str | None, *, resumed: bool = False, max_requests: int | None = None,
             stop_reason: str = "interrupted") -> str:
        """One turn, from a user message (or, with None, a wake-up) until the agent is idle.

        ``resumed`` continues a turn a crash cut off (resume closed it as interrupted).
        ``max_requests`` ends the turn with ``stop_reason`` after that many model requests
        (a replay stops where the recorded turn stopped).
        Returns why the turn ended: ``idle``, ``waiting_on_user`` (an ``ask_user`` call
        waits for its answer), ``waiting_on_approval`` (a call waits for a person's
        approval), ``max_turns``, ``max_tool_calls`` or ``model_error: ...``.
        """
        session = self.session
        if prompt is not None:
            session.record_user_message(prompt)
        session.deliver(turn="user" if prompt is not None else "resume" if resumed else "wake",
                        system_prompt=self.config.system_prompt, model=self.spec,
                        model_base_url=getattr(self.model, "shown_url", None) if self.spec else None)
        calls_this_turn = 0
        specs = self.tool_specs()
        while True:
            limit = self._limit_reached(max_requests, stop_reason)
            if limit is not None:
                return self._end(limit)
            if max_requests is not None:
                max_requests -= 1
            started = time.monotonic()
            try:
                reply = self._ask(specs)
            except ModelError as exc:
                return self._end(f"model_error: {exc}")
            self.requests += 1
            calls = session.record_reply(reply.journaled(round((time.monotonic() - started) * 1000)))
            if not calls:
                return self._end("idle")
            if calls_this_turn + len(calls) > self.config.max_tool_calls_per_turn:
                for call in calls:
                    session.refuse(call, f"not run: this turn reached its limit of "
                                         f"{self.config.max_tool_calls_per_turn} tool calls")
                return self._end("max_tool_calls")
            calls_this_turn += len(calls)
            unlocked = len(session.state.unlocked)
            self._run_calls(calls)
            if len(session.state.unlocked) != unlocked:  # tool_search unlocked tools: the next request sends them
                specs = self.tool_specs()
            parked = self._parked()
            if parked is not None:
                return self._end(parked)
            session.deliver()  # notes that came in while the tools ran

    def _ask(self, specs: list[ToolSpec]) -> ModelReply:
        """The model's reply to the next request; a request the provider refuses as too long
        is compacted and asked once more, never more."""
        try:
            return self._reply(self._messages(specs), specs)
        except ContextTooLongError:
            self.compact("too_long", specs=specs)
            return self._reply(self._messages(specs), specs)

    def _reply(self, messages: list[Message], specs: list[ToolSpec]) -> ModelReply:
        messages = self._aliased(messages)
        if self.on_text is None:
            return self.model.reply(messages, specs)
        return self.model.reply(messages, specs, on_text=self.on_text)

    def _aliased(self, messages: list[Message]) -> list[Message]:
        """The messages with the calls of earlier replies by the names the model is offered: the
        journal keeps each tool's own name, the model must see the name it may call."""
        shown = self.session.engine.shown
        if not shown.aliases:
            return messages
        return [message.model_copy(update={"tool_calls": [
            call.model_copy(update={"name": shown.name(call.name)}) for call in message.tool_calls]})
            if message.tool_calls else message for message in messages]

    def _limit_reached(self, max_requests: int | None, stop_reason: str) -> str | None:
        """Why the turn ends before its next model request, if a limit says so."""
        if self.session.interrupt_calls.is_set():
            raise KeyboardInterrupt  # the tree is being stopped (Ctrl-C reached another thread)
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return "timeout"
        if self.requests >= self.config.max_turns:
            return "max_turns"
        if max_requests is not None and max_requests <= 0:
            return stop_reason
        return None

    def _parked(self) -> str | None:
        """Why nothing can go to the model until a person acts, if that is so."""
        if self.session.state.questions:  # a call has no result until a person answers
            return "waiting_on_user"
        if self.session.state.waiting_approvals:
            return "waiting_on_approval"
        return None

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
        # Calls a crash or Ctrl-C cut off that go on where they were (a spawn's child) get
        # their real results first: the model must not see them before, and a question
        # waiting beside them does not hold them back.
        self._run_calls(self.session.continuing_calls(), self.session.continue_call)
        parked = self._parked()  # nothing can go to the model before a person acts
        if parked is not None:
            return RunResult(reason=parked, requests=0)
        reason = self._first_turn(prompt)
        deadline = time.monotonic() + wait * 60
        if self.deadline is not None:
            deadline = min(deadline, self.deadline)
        while reason == "idle":
            if self.session.interrupt_calls.is_set():
                raise KeyboardInterrupt  # a sub-agent waiting on its tasks, while its tree is stopped
            woken, running = self.session.outlook()
            if woken:
                reason = self.turn(None)
                continue
            if not running:
                break
            if time.monotonic() >= deadline:
                if self.deadline is not None and deadline == self.deadline:
                    reason = "timeout"  # a sub-agent's tasks outlived its time: it did not finish
                break
            if on_idle is not None:
                on_idle()
            for task in running:
                self.session.poll_task(task.task_id)
            time.sleep(WAKE_POLL_SECONDS)
        return RunResult(reason=reason, requests=self.requests)

    def _first_turn(self, prompt: str | None) -> str:
        """How the run's first turn ended, when something calls for one; ``idle`` when nothing does."""
        state = self.session.state
        # A turn a crash cut off (resume ended it as "interrupted"), one the model failed
        # (its endpoint was down), or one a question parked (now answered) goes on: the
        # model has not seen its last results. So does a message the run stopped before
        # its turn began.
        cut_off = prompt is None and (state.unanswered_message or (state.last_turn_end or "").startswith(
            ("interrupted", "model_error", "waiting_on_user", "waiting_on_approval")))
        if prompt is not None or cut_off or state.pending_wakes:
            return self.turn(prompt, resumed=cut_off)
        return "idle"

