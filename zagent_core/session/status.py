"""What ``zagent sessions list`` and ``show`` say of a session's status, without an engine.

Reading commands use these directly, so they import neither the runner nor the tools:
the state (its latest snapshot plus the events after it, see
:func:`zagent_core.journal.snapshots.open_state`) says how the session stands, and the
lease says whether a live process drives the session.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zagent_core.journal.protocol import Journal, SessionSummary
from zagent_core.session import leases

if TYPE_CHECKING:
    from zagent_core.journal.views import SessionState


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
    ``interrupted``, ``queued`` (a message waits for a driver), ``failed`` (the last turn was stopped by an
    error or a limit), ``wake-up
    pending`` (an idle agent has a wake-up to be woken with: what ``zagent resume`` delivers),
    ``waiting on tasks`` or ``idle``."""
    from zagent_core.journal.views import status_of  # the event models: only when a fold is needed

    status = status_of(state)
    if status in ("idle", "waiting on tasks"):
        if turn_failure(state) is not None:
            return "failed"
        if state.pending_wakes:
            return "wake-up pending"
    return status


def session_status(journal: Journal, session_id: str, state: SessionState | None = None) -> str:
    """:func:`status_of_state`, or ``running`` when a live process holds the session's lease."""
    from zagent_core.journal.snapshots import open_state  # the event models: only when a state is opened

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
