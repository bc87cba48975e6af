"""Driving a session: start or resume it, give it the decision it waits for, run the agent.

``run``, ``resume``, ``answer``, ``approve`` and ``deny`` are each one :class:`DriveRequest`
given to :func:`drive`; ``run --detach`` is :func:`submit`. What a session refuses is a
:class:`~zagent_core.drive.errors.DriveError`; what a person watching sees goes to the
:class:`~zagent_core.drive.display.Display` they give.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from zagent_core.drive.display import Display
from zagent_core.drive.errors import (
    DecisionRefusedError,
    NothingToContinueError,
    SessionUnavailableError,
    Stopped,
    WaitedChildError,
    WaitsForPersonError,
)

if TYPE_CHECKING:
    from zagent_core.agent.models import Model
    from zagent_core.config import LimitsConfig
    from zagent_core.history.telemetry import LiveTrace
    from zagent_core.journal.protocol import Journal, StoredEvent
    from zagent_core.journal.views import SessionState
    from zagent_core.session.engine import Engine, Session

#: Why a drive stopped that is no failure: the agent is done, or it asked a person.
_FINE = ("idle", "ended", "waiting_on_user", "waiting_on_approval")


@dataclass(frozen=True)
class Decision:
    """What ``answer``, ``approve`` and ``deny`` give a parked session before it goes on."""

    #: What it decides: a question's answer, or an approval.
    kind: Literal["answer", "approval"]
    call_id: str | None
    give: Callable[[Session], object]
    #: What the person wrote with it (the answer, a decision's reason), checked against its
    #: cap before the session is opened; ``give`` journals it.
    text: str = ""
    #: An answer that is a number picks the question's choice of that number (``give`` passes
    #: ``numbered`` to :meth:`Session.answer`); one past the choices is refused before the session is opened.
    numbered: bool = False

    def refusal(self, journal: Journal, state: SessionState) -> str | None:
        """Why nothing waits for this decision (checked before the session is resumed), or None.
        A number no choice has raises :class:`NoSuchChoiceError` here, before anything is journaled."""
        from zagent_core.session.engine import chosen, why_no_approval, why_no_question

        waiting, why = ((state.questions, why_no_question) if self.kind == "answer"
                        else (state.waiting_approvals, why_no_approval))
        if not waiting or (self.call_id is not None and self.call_id not in waiting):
            return why(journal, state.session_id, self.call_id)
        if self.numbered and (self.call_id is not None or len(waiting) == 1):  # several, none named: give says so
            chosen(self.text, state.questions[self.call_id or next(iter(waiting))].choices)
        return None


def answering(text: str, call_id: str | None, *, numbered: bool, via: str = "zagent answer") -> Decision:
    """``zagent answer`` (and the console's answer form, ``via`` ``zagent ui``): ``text`` answers
    the question (``numbered``: a number picks the question's choice of that number)."""
    return Decision("answer", call_id, lambda session: session.answer(text, call_id, numbered=numbered, via=via),
                    text, numbered=numbered)


def approving(call_id: str | None, *, via: str = "zagent approve") -> Decision:
    """``zagent approve`` (and the console's Approve button): the call runs, then the session goes on."""
    return Decision("approval", call_id, lambda session: session.approve(call_id, via=via))


def denying(call_id: str | None, reason: str, *, via: str = "zagent deny") -> Decision:
    """``zagent deny`` (and the console's Deny button): the call is not run; the model is told ``reason``."""
    return Decision("approval", call_id, lambda session: session.deny(call_id, reason=reason, via=via), reason)


@dataclass(frozen=True)
class DriveRequest:
    """One drive: a new session (no ``session_id``) or a resumed one, with a prompt or none."""

    session_id: str | None = None
    prompt: str | None = None
    #: The model's spec; None: the session's own, else config's.
    model_spec: str | None = None
    decision: Decision | None = None

    def check_bounds(self, limits: LimitsConfig) -> None:
        """Refuse a prompt, answer or reason over its cap (:class:`InputTooLargeError`) before
        anything is journaled: the session is neither started nor resumed for it."""
        from zagent_core.session.typed import typed

        if self.prompt is not None:
            typed(self.prompt, "message", limits)
        if self.decision is not None:
            typed(self.decision.text, "answer" if self.decision.kind == "answer" else "reason", limits)


class Tally:
    """What a drive's turns made, counted from the events the session appends: the last reply,
    the turns, and the tokens (the sub-agents' within input and output)."""

    def __init__(self) -> None:
        self.reply: str | None = None
        self.turns = 0
        self.tokens = dict.fromkeys(("input", "output", "cache_read", "cache_creation"), 0)

    def event(self, stored: StoredEvent) -> None:
        from zagent_core.journal.events import ChildEnded, ContextCompacted, ModelReplied, TurnStarted

        match stored.event:
            case TurnStarted(reason=reason) if reason != "delivery":
                self.turns += 1
            case ModelReplied(text=text) as used:
                self.reply = text
                self._add(used.input_tokens, used.output_tokens, used.cache_read_tokens, used.cache_creation_tokens)
            case ContextCompacted() as used:  # the summary's own request
                self._add(used.input_tokens, used.output_tokens, used.cache_read_tokens, used.cache_creation_tokens)
            case ChildEnded(stats=stats):  # the sub-agent's whole subtree: its own requests are in its session
                self._add(stats.input_tokens, stats.output_tokens, 0, 0)

    def _add(self, *counts: int) -> None:
        for kind, count in zip(self.tokens, counts):
            self.tokens[kind] += count


@dataclass(frozen=True)
class DriveOutcome:
    """How a drive stopped. The session has been let go."""

    session: Session
    #: The agent's reason (``idle``, ``waiting_on_user``, ``limit: ...``), or ``ended`` for a
    #: session no model drives.
    reason: str
    requests: int
    #: What its turns made (:class:`Tally`): the last reply's text (None: the model was not asked), the turns, tokens.
    tally: Tally

    @property
    def fine(self) -> bool:
        """Whether the drive stopped as it should: a person asked is no failure."""
        return self.reason in _FINE


def drive(engine: Engine, request: DriveRequest, display: Display | None = None) -> DriveOutcome:
    """Open or resume the session (refused as :class:`DriveError` says, or, before anything is
    journaled, :class:`InputTooLargeError` for a text over its cap), give it the decision it
    waits for, run the agent (or settle it, without a model), and let it go.

    Raises :class:`Stopped` on Ctrl-C (or SIGTERM made one): the session is let go, resumable.
    """
    display = display or Display()
    request.check_bounds(engine.config.limits)
    state = _checked_state(engine, request)
    model, spec = _model(engine, request, state)
    session = _opened(engine, request, state, display)
    tally = Tally()
    session.subscribe(tally.event)
    display.attach(session)
    trace: LiveTrace | None = None
    try:
        trace = display_traced(engine, session, state.version if state else 0, display)
        if request.decision is not None:
            _give(session, request.decision)
        if model is None:
            from zagent_core.drive.settle import settle_without_model

            reason, requests = settle_without_model(session, display), 0
        else:
            from zagent_core.agent.loop import Agent

            display.status(f"session {session.session_id}, model {model.name}")
            result = Agent(session, model, spec=spec, on_text=display.text).run(request.prompt)
            reason, requests = result.reason, result.requests
    except KeyboardInterrupt:
        raise Stopped(session.session_id, resumable=True) from None
    finally:
        let_go(session, trace)
    return DriveOutcome(session, reason, requests, tally)


def _checked_state(engine: Engine, request: DriveRequest) -> SessionState | None:
    """The resumed session's state, once the request is one its rules allow."""
    if request.session_id is None:
        return None
    state = engine.session_state(request.session_id)
    decision = request.decision
    if decision is not None and state.version and state.status != "ended":
        refusal = decision.refusal(engine.journal, state)
        if refusal is not None:
            raise DecisionRefusedError(refusal)
    if (state.questions or state.waiting_approvals) and decision is None and request.prompt is not None:
        raise WaitsForPersonError(state)
    if state.parent is not None:
        refuse_a_waited_child(engine, state)
    return state


def _model(engine: Engine, request: DriveRequest, state: SessionState | None) -> tuple[Model | None, str]:
    from zagent_core.drive.model import choose_model

    return choose_model(engine, request.model_spec, state, request.prompt)


def _opened(engine: Engine, request: DriveRequest, state: SessionState | None, display: Display) -> Session:
    """The session started (its problems shown first) or resumed, its events shown as they come."""
    from zagent_core.session.engine import SessionEndedError, UnknownSessionError
    from zagent_core.session.leases import SessionBusyError

    try:
        if request.session_id is None:
            for problem in engine.config_problems + engine.load_tools().problems:
                display.problem(problem)
            session = engine.start_session(origin="run")
            if display.events is not None:
                session.subscribe(display.events, descendants=True)
            return session
        display.status(f"resuming {request.session_id}")
        return engine.resume(request.session_id, listener=display.events, state=state)
    except (UnknownSessionError, SessionEndedError, SessionBusyError) as exc:
        raise SessionUnavailableError(str(exc)) from None


def display_traced(engine: Engine, session: Session, before: int, display: Display) -> LiveTrace | None:
    """:func:`traced`, a warning shown on ``display`` as a problem of config.json."""
    from zagent_core.problems import Problem

    return traced(engine, session, before,
                  lambda why: display.problem(Problem(source="config.json", message=why, severity="warning")))


def traced(engine: Engine, session: Session, before: int, warn: Callable[[str], None]) -> LiveTrace | None:
    """The session's spans sent as it runs (its sub-agents' too), when telemetry is configured
    (docs/telemetry.md): what it journaled up to version ``before`` was sent by the drive that
    journaled it (unless that drive died: see :class:`LiveTrace`). Without the ``otel`` extra,
    ``warn`` is told how to install it. Every driver calls this once it holds the session, and
    :func:`let_go` (or :meth:`LiveTrace.close`, then the session's own ending) when it is done."""
    from zagent_core.history.telemetry import TelemetryUnavailableError, live_trace

    try:
        trace = live_trace(engine.journal, engine.config.telemetry, session.session_id, before)
    except TelemetryUnavailableError as exc:
        warn(str(exc))
        return None
    if trace is not None:
        session.subscribe(trace.event, descendants=True)
    return trace


def let_go(session: Session, trace: LiveTrace | None) -> None:
    """Close the session's live trace (if any), then let the session go: a driver killed while its
    trace flushes still holds the lease, so the drive that takes it over sends those spans again."""
    try:
        if trace is not None:
            trace.close()
    finally:
        session.release()


def _give(session: Session, decision: Decision) -> None:
    from zagent_core.session.engine import NoApprovalError, NoQuestionError

    try:
        decision.give(session)
    except (NoQuestionError, NoApprovalError) as exc:
        raise DecisionRefusedError(str(exc)) from None


def refuse_a_waited_child(engine: Engine, state: SessionState) -> None:
    """A sub-agent its parent's spawn call waits on is driven by that call: driven elsewhere,
    the parent would take whatever it answered there for its outcome (:class:`WaitedChildError`)."""
    assert state.parent is not None
    link = state.parent
    child = engine.session_state(link.session_id).children.get(link.label)
    if child is not None and child.session_id == state.session_id and child.status == "running":
        raise WaitedChildError(
            f"session {state.session_id} is {link.label} of session {link.session_id}, whose spawn call "
            f"{child.call_id} waits on it; resume the parent, which goes on with it: zagent resume {link.session_id}")


def latest_open_session(journal: Journal) -> str:
    """The most recently active top-level session that has not ended (what ``-c``/``--last``
    continue; a sub-agent is never ended, and is driven by its parent)."""
    for limit in (20, None):
        found = next((s.session_id for s in journal.sessions(limit, top_level=True) if not s.ended), None)
        if found is not None:
            return found
    raise NothingToContinueError("no session to continue: every session of the journal has ended "
                                 "(`zagent sessions list` shows them); start one with zagent run PROMPT")


def submit(engine: Engine, session_id: str | None, prompt: str, model_spec: str | None = None) -> str:
    """The message journaled in a new (or the given) session, left to the workers: its id.
    ``model_spec`` is checked (:class:`NoModelError`) and journaled with the message, for the
    worker to answer it with (a script's path made absolute, as for a turn)."""
    from zagent_core.drive.model import choose_model
    from zagent_core.session.engine import SessionEndedError, UnknownSessionError
    from zagent_core.session.leases import SessionBusyError

    DriveRequest(session_id, prompt).check_bounds(engine.config.limits)
    spec = None if model_spec is None else choose_model(engine, model_spec, None, prompt)[1]
    try:
        session = engine.start_session(origin="run") if session_id is None else engine.resume(session_id)
    except (UnknownSessionError, SessionEndedError, SessionBusyError) as exc:
        raise SessionUnavailableError(str(exc)) from None
    try:
        session.record_user_message(prompt, model=spec)
    finally:
        session.release()
    return session.session_id
