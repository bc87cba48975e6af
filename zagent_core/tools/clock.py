"""What a call is told of the time and of its randomness, so that a replay can tell it the same.

Each call runs with ``ZAGENT_NOW`` (when it started: the time its ``tool_call_started`` is
journaled at) and ``ZAGENT_CALL_SEED`` (a digest of its session's id and its own); a built-in
finds both on its context (``context.clock``). ``zagent replay --tools rerun`` tells each call
what its recording was told, so a tool that stamps the time or makes ids from the seed gives
the same result again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import datetime, timezone

from zagent_core.journal.events import CallClock, ToolCallStarted
from zagent_core.journal.protocol import StoredEvent


def call_seed(session_id: str, call_id: str) -> str:
    """``ZAGENT_CALL_SEED`` of a call: the same for the same ids, and unlike any other call's."""
    return hashlib.sha256(f"{session_id}/{call_id}".encode()).hexdigest()[:32]


def stamp(when: datetime) -> str:
    """``when`` as ``ZAGENT_NOW`` says it: ISO 8601 UTC, to the millisecond, with ``Z``."""
    return when.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def fresh_clock(session_id: str, call_id: str) -> tuple[datetime, CallClock]:
    """The clock of a call starting now, and that moment (to the millisecond, as journals keep times)."""
    when = datetime.now(timezone.utc)
    when = when.replace(microsecond=when.microsecond - when.microsecond % 1000)
    return when, CallClock(now=stamp(when), seed=call_seed(session_id, call_id))


def recorded_clocks(events: Iterable[StoredEvent]) -> dict[str, CallClock]:
    """What each call of a recording was told, by call id (the last attempt's, for a call run again)."""
    return {stored.event.call_id: stored.event.clock or CallClock(now=stamp(stored.at),
                                                                  seed=call_seed(stored.session_id,
                                                                                 stored.event.call_id))
            for stored in events if isinstance(stored.event, ToolCallStarted)}
