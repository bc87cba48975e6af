"""The console's list of sessions: a page at a time, by keyset, filtered by status and words.

A page is read from the journal's index of sessions (``journal.sessions(after=...)``), never
the whole list; a status and a search are looked at session by session, so a filter that
matches few sessions looks at :data:`SCAN_LIMIT` sessions at most for a page, and the page
then says where to go on from.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zagent_core.journal.protocol import Journal, SessionSummary

#: Sessions on a page of the list.
PAGE_SIZE = 50
#: At most this many sessions are looked at for one page when a filter skips sessions.
SCAN_LIMIT = 1000
#: The statuses a person filters by (``zagent sessions list`` says the same words).
STATUSES = ("running", "waiting on user", "waiting on approval", "queued", "failed", "idle", "waiting on tasks",
            "wake-up pending", "interrupted", "ended")


@dataclass(frozen=True)
class Row:
    """A line of the list."""

    session_id: str
    status: str
    first_prompt: str | None
    model: str | None
    tokens: int
    last_at: datetime
    children: int


@dataclass(frozen=True)
class Page:
    rows: list[Row]
    #: The cursor of the next page (the last session looked at), None on the last page.
    next_after: str | None
    #: Sessions looked at to fill the page.
    scanned: int


def _row(journal: Journal, summary: SessionSummary) -> Row:
    from zagent_core.journal.snapshots import open_state
    from zagent_core.session.status import first_prompt, listed_status

    state = open_state(journal, summary.session_id)  # the newest snapshot and the events after it
    return Row(summary.session_id, listed_status(journal, summary), first_prompt(journal, summary.session_id),
               state.model, state.input_tokens + state.output_tokens, summary.last_at, len(state.children))


def _matches(row: Row, status: str | None, search: str) -> bool:
    if status and row.status != status:
        return False
    words = search.casefold()
    return not words or words in row.session_id.casefold() or words in (row.first_prompt or "").casefold()


def sessions_page(journal: Journal, *, status: str | None = None, search: str = "",
                  after: str | None = None) -> Page:
    """The top-level sessions after the session ``after`` (most recently active first) that
    have ``status`` and whose id or first prompt holds ``search``: up to :data:`PAGE_SIZE`."""
    rows: list[Row] = []
    scanned = 0
    cursor = after
    while True:
        summaries = journal.sessions(PAGE_SIZE, top_level=True, after=cursor)
        for number, summary in enumerate(summaries, start=1):
            scanned += 1
            cursor = summary.session_id
            row = _row(journal, summary)
            if _matches(row, status, search):
                rows.append(row)
            if len(rows) == PAGE_SIZE or scanned == SCAN_LIMIT:
                # Stopped within the journal's sessions: the next page goes on after this one.
                last = len(summaries) < PAGE_SIZE and number == len(summaries)
                return Page(rows, None if last else cursor, scanned)
        if len(summaries) < PAGE_SIZE:  # the oldest session was looked at
            return Page(rows, None, scanned)
