"""Opening a session's state, and what ``zagent sessions list`` says of it, without an engine.

Reading commands use these directly, so they import neither the runner nor the tools:
the latest snapshot plus the events after it give the state, and the lease says whether
a live process drives the session.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zagent_core.journal.protocol import Journal, SessionSummary
from zagent_core.session import leases

if TYPE_CHECKING:
    from zagent_core.journal.fold import SessionState

def open_state(journal: Journal, session_id: str) -> SessionState:
    """A session as its latest snapshot and the events after it tell (empty if it has none).

    A snapshot that cannot be read, or that another version of the projection made, is
    passed over with a warning: the events alone always give the state.
    """
    from zagent_core.journal.fold import from_snapshot, projection_tag, rebuild

    snapshot = journal.load_snapshot(session_id, projection_tag())
    state = from_snapshot(snapshot.data) if snapshot is not None else None
    if snapshot is not None and (state is None or state.version != snapshot.version
                                 or state.session_id != session_id):
        from zagent_core.logs import get_logger  # only now: listing sessions does not pay for structlog

        get_logger(__name__).warning("snapshot_skipped", session=session_id, version=snapshot.version,
                    why="it cannot be read; the session is rebuilt from its events")
        state = None
    return rebuild(journal.read(session_id, after_version=state.version if state else 0), state)


def turn_failure(state: SessionState) -> str | None:
    """Why the session's last turn was stopped, when it failed (``model_error: ...``,
    ``max_turns``, ``max_tool_calls``); None when it ended idle, was interrupted (Ctrl-C, a
    crash: ``zagent resume`` goes on from there) or no turn has ended yet."""
    reason = state.last_turn_end
    if reason is None or reason in ("idle", "waiting_on_user", "waiting_on_approval") or reason.startswith("interrupted"):
        return None
    return reason


def status_of_state(state: SessionState) -> str:
    """The status the journal alone gives: ``ended``, ``waiting on user``, ``waiting on approval``,
    ``interrupted``, ``failed`` (the last turn was stopped by an error or a limit), ``wake-up
    pending`` (an idle agent has a wake-up to be woken with: what ``zagent resume`` delivers),
    ``waiting on tasks`` or ``idle``."""
    from zagent_core.journal.fold import status_of  # the event models: only when a fold is needed

    status = status_of(state)
    if status in ("idle", "waiting on tasks"):
        if turn_failure(state) is not None:
            return "failed"
        if state.pending_wakes:
            return "wake-up pending"
    return status


def session_status(journal: Journal, session_id: str, state: SessionState | None = None) -> str:
    """:func:`status_of_state`, or ``running`` when a live process holds the session's lease."""
    state = state or open_state(journal, session_id)
    if state.status != "ended" and leases.holder_alive(journal, session_id) is not None:
        return "running"
    return status_of_state(state)


#: Snapshot statuses that are final: the others (an idle session may have failed or have
#: a wake-up pending, which the stored status does not tell) are looked at in the state.
_SETTLED = {"ended", "interrupted", "waiting on user", "waiting on approval"}


def listed_status(journal: Journal, summary: SessionSummary) -> str:
    """:func:`session_status` for a line of ``journal.sessions()``: the newest snapshot's
    status when the snapshot is of the session's last event and its status is final;
    otherwise from the state (that snapshot, and only the events after it)."""
    if summary.ended:
        return "ended"
    if summary.status in _SETTLED and summary.status_version == summary.events:
        if leases.holder_alive(journal, summary.session_id) is not None:
            return "running"
        return summary.status
    return session_status(journal, summary.session_id)


def first_prompt(journal: Journal, session_id: str) -> str | None:
    """The session's first user message, if it has one. The journal reads every user
    message of the session to give it (a few per session; 56 ms in a session of 200,000
    events, whose rows are all looked at)."""
    from zagent_core.journal.events import UserMessage

    for stored in journal.read(session_id, types=("user_message",)):
        if isinstance(stored.event, UserMessage):
            return stored.event.text
    return None
