"""What the engine needs from a journal; ``zagent_store`` implements it.

The core never builds SQL: it appends events for a session at the version it expects
to follow, and reads them back in order. Anything that keeps these promises (SQLite,
PostgreSQL, an in-memory list in a test) can carry a session.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from zagent_core.events import Event


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """An event as the journal keeps it: its body plus where and when it was appended.

    A plain dataclass, not a model: one is made per event appended or read, and the
    body it carries is already validated.
    """

    seq: int
    session_id: str
    version: int
    at: datetime
    event: Event

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, as ``zagent sessions show --events --json`` prints it."""
        return {"seq": self.seq, "session_id": self.session_id, "version": self.version,
                "at": self.at.isoformat(), "type": self.event.type, "data": self.event.model_dump(mode="json")}


class SessionSummary(BaseModel):
    """One line of ``zagent sessions list``: counts the journal can give without a projection."""

    model_config = ConfigDict(frozen=True)

    session_id: str
    started_at: datetime
    last_at: datetime
    events: int
    calls: int
    ended: bool


class ConcurrencyError(RuntimeError):
    """Another writer appended to the session since the caller last read it."""

    def __init__(self, session_id: str, expected: int, actual: int) -> None:
        self.session_id = session_id
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"session {session_id} is at version {actual}, not at version {expected} as the append expected "
            "(another writer appended to it, or the caller lost track): read the session again and retry"
        )


class JournalError(RuntimeError):
    """The journal could not be read or written (locked too long, corrupt, disk full).

    Implementations raise this, not their driver's errors, so callers can report it
    without knowing which store is behind the protocol.
    """


@runtime_checkable
class Journal(Protocol):
    """An append-only store of session events."""

    def append(self, session_id: str, events: Sequence[Event], expected_version: int, *,
               at: Sequence[datetime] | None = None) -> list[StoredEvent]:
        """Append ``events`` in one transaction after ``expected_version``.

        ``at`` gives each event its time (imports and forks keep the original ones);
        by default they get the current time. Raises :class:`ConcurrencyError` when the
        session is not at that version, and appends nothing in that case.
        """
        ...

    def read(self, session_id: str, after_version: int = 0) -> Iterator[StoredEvent]:
        """The session's events with a version above ``after_version``, in order."""
        ...

    def has_call(self, session_id: str, call_id: str) -> bool:
        """Whether the session has journaled a ``tool_call_requested`` with this call id."""
        ...

    def sessions(self, limit: int | None = None) -> list[SessionSummary]:
        """Sessions, most recently active first (the ``limit`` most recent, or all)."""
        ...

    def check(self) -> list[str]:
        """Health problems of the store (empty when healthy)."""
        ...

    def close(self) -> None:
        ...
