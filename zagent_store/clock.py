"""Times as the journals keep them: UTC, to the millisecond (what SQLite's text column holds)."""

from __future__ import annotations

from datetime import datetime, timezone


def stored_time(when: datetime) -> datetime:
    """``when`` as a journal gives it back: cut to the millisecond."""
    return when.replace(microsecond=when.microsecond - when.microsecond % 1000)


def now() -> datetime:
    """The current time, as a journal keeps it."""
    return stored_time(datetime.now(timezone.utc))
