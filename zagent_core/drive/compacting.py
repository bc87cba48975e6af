"""``zagent compact``: a session's conversation summarised on request, under its lease."""

from __future__ import annotations

from typing import TYPE_CHECKING

from zagent_core.drive.errors import CompactionError, SessionUnavailableError, WaitsForPersonError
from zagent_core.logs import get_logger

if TYPE_CHECKING:
    from zagent_core.history.telemetry import LiveTrace
    from zagent_core.journal.events import ContextCompacted
    from zagent_core.session.engine import Engine

log = get_logger(__name__)


def compact(engine: Engine, session_id: str, *, model_spec: str | None = None,
            instructions: str | None = None) -> ContextCompacted:
    """Summarise the session's conversation (with ``model_spec``'s model, default the session's
    own) and journal it: the session's model is shown the summary and what follows from then on.

    Takes the session's lease like any driver. Raises :class:`DriveError` when the session
    cannot be driven here or waits for a person, and :class:`CompactionError` when the model
    gives no summary (nothing is journaled then).
    """
    from zagent_core.agent.conversation import OrphanedCallError
    from zagent_core.agent.loop import Agent
    from zagent_core.agent.models import ModelError
    from zagent_core.drive.driving import let_go, refuse_a_waited_child, traced
    from zagent_core.drive.model import choose_model
    from zagent_core.session.engine import SessionEndedError, UnknownSessionError
    from zagent_core.session.leases import SessionBusyError

    try:
        state = engine.session_state(session_id)
        if state.version == 0 or state.status == "ended":
            engine.resume(session_id, state=state)  # refuses it, saying why
        if state.questions or state.waiting_approvals:
            raise WaitsForPersonError(state)
        if state.parent is not None:
            refuse_a_waited_child(engine, state)
        model, spec = choose_model(engine, model_spec, state, "")
        assert model is not None  # choose_model raises when a prompt needs one
        session = engine.resume(session_id, state=state)
    except (UnknownSessionError, SessionEndedError, SessionBusyError) as exc:
        raise SessionUnavailableError(str(exc)) from None
    trace: LiveTrace | None = None
    try:
        trace = traced(engine, session, state.version, lambda why: log.warning("telemetry_unavailable", reason=why))
        return Agent(session, model, spec=spec).compact("manual", instructions=instructions)
    except (ModelError, OrphanedCallError) as exc:
        raise CompactionError(f"session {session_id} was not compacted: {exc}") from None
    finally:
        let_go(session, trace)
