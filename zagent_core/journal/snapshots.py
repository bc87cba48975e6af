"""Snapshots: a session's state stored as a cache, and opening a state from the latest one.

A snapshot is the state's JSON text under the tag of the projection that made it
(:func:`projection_tag`). It is only ever a shortcut: one made by other code, or that
cannot be read, is passed over and the state is folded from the events instead.
"""

from __future__ import annotations

import functools
import hashlib

from pydantic import ValidationError

from zagent_core.journal.fold import PROJECTION_VERSION, rebuild
from zagent_core.journal.protocol import Journal
from zagent_core.journal.views import SessionState


@functools.cache
def projection_tag() -> str:
    """Names this projection in stored snapshots: its version and the shape of its state.

    A snapshot with another tag was made by other code (older, newer, or a changed
    ``SessionState``) and is never loaded.
    """
    import json

    shape = json.dumps(SessionState.model_json_schema(), sort_keys=True)
    return f"session/{PROJECTION_VERSION}/{hashlib.sha256(shape.encode()).hexdigest()[:12]}"


def to_snapshot(state: SessionState) -> str:
    """The state as the JSON text a snapshot stores."""
    return state.model_dump_json()


def from_snapshot(data: str | bytes) -> SessionState | None:
    """The state a snapshot holds, or None when it cannot be read (damaged: fold from the start)."""
    try:
        return SessionState.model_validate_json(data)
    except (ValidationError, ValueError):
        return None


def open_state(journal: Journal, session_id: str) -> SessionState:
    """A session as its latest snapshot and the events after it tell (empty if it has none).

    A snapshot that cannot be read, or that another version of the projection made, is
    passed over with a warning: the events alone always give the state.
    """
    snapshot = journal.load_snapshot(session_id, projection_tag())
    state = from_snapshot(snapshot.data) if snapshot is not None else None
    if snapshot is not None and (state is None or state.version != snapshot.version
                                 or state.session_id != session_id):
        from zagent_core.logs import get_logger  # only now: listing sessions does not pay for structlog

        get_logger(__name__).warning("snapshot_skipped", session=session_id, version=snapshot.version,
                    why="it cannot be read; the session is rebuilt from its events")
        state = None
    return rebuild(journal.read(session_id, after_version=state.version if state else 0), state)
