"""Opening a session's state, and what ``zagent sessions list`` says of it, without an engine.

Reading commands use these directly, so they import neither the runner nor the tools:
the latest snapshot plus the events after it give the state, and the lease says whether
a live process drives the session.
"""

from __future__ import annotations

from zagent_core import leases
from zagent_core.journal import Journal, SessionSummary
from zagent_core.logs import get_logger
from zagent_core.state import SessionState, from_snapshot, projection_tag, rebuild, status_of

log = get_logger(__name__)


def open_state(journal: Journal, session_id: str) -> SessionState:
    """A session as its latest snapshot and the events after it tell (empty if it has none).

    A snapshot that cannot be read, or that another version of the projection made, is
    passed over with a warning: the events alone always give the state.
    """
    snapshot = journal.load_snapshot(session_id, projection_tag())
    state = from_snapshot(snapshot.data) if snapshot is not None else None
    if snapshot is not None and (state is None or state.version != snapshot.version
                                 or state.session_id != session_id):
        log.warning("snapshot_skipped", session=session_id, version=snapshot.version,
                    why="it cannot be read; the session is rebuilt from its events")
        state = None
    return rebuild(journal.read(session_id, after_version=state.version if state else 0), state)


def session_status(journal: Journal, session_id: str, state: SessionState | None = None) -> str:
    """``ended``, ``running`` (a live process holds its lease), ``interrupted`` (cut off
    mid-turn or mid-call), ``waiting on tasks``, or ``idle``."""
    state = state or open_state(journal, session_id)
    if state.status != "ended" and leases.holder_alive(journal, session_id) is not None:
        return "running"
    return status_of(state)


def listed_status(journal: Journal, summary: SessionSummary) -> str:
    """:func:`session_status` for a line of ``journal.sessions()``: from the newest snapshot
    when it is of the session's last event, so listing sessions folds nothing."""
    if summary.ended:
        return "ended"
    if summary.status is not None and summary.status_version == summary.events:
        if leases.holder_alive(journal, summary.session_id) is not None:
            return "running"
        return summary.status
    return session_status(journal, summary.session_id)
