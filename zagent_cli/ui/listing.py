"""The console's list of sessions: a page at a time, by keyset, filtered by status and words.

A page is read from the journal's index of sessions (``journal.sessions(after=...)``), never
the whole list; a status and a search are looked at session by session, so a filter that
matches few sessions looks at :data:`SCAN_LIMIT` sessions at most for a page, and the page
then says where to go on from.

A row's cost is its session's model replies priced by the catalog (config.json's ``models``,
read for each page, so edited prices show at once). Their tokens are tallied by model once
and kept (:class:`Tallies`, the :data:`MOST_TALLIES` sessions shown last): a page shown again
reads only the events appended since, and nothing for a session that did not move.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

from zagent_core.history.costs import UsageTally, tally_usage

if TYPE_CHECKING:
    from zagent_core.config import CatalogModel
    from zagent_core.history.costs import Spend
    from zagent_core.journal.protocol import Journal, SessionSummary

#: Sessions on a page of the list.
PAGE_SIZE = 50
#: At most this many sessions are looked at for one page when a filter skips sessions.
SCAN_LIMIT = 1000
#: The statuses a person filters by (``zagent sessions list`` says the same words).
STATUSES = ("running", "waiting on user", "waiting on approval", "queued", "failed", "idle", "waiting on tasks",
            "wake-up pending", "interrupted", "ended")
#: Sessions whose tokens by model the list keeps tallied (a few hundred bytes each).
MOST_TALLIES = 10_000


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
    #: Its own replies' tokens and cost; None when config.json prices no model (then every cost is unknown).
    spend: Spend | None = None


@dataclass(frozen=True)
class Page:
    rows: list[Row]
    #: The cursor of the next page (the last session looked at), None on the last page.
    next_after: str | None
    #: Sessions looked at to fill the page.
    scanned: int


class Tallies:
    """Sessions' tokens by model as last read, :data:`MOST_TALLIES` at most (the least recently
    shown go first), each carried on from where it was read (pages are drawn in threads at once)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: By session: its head when read, and its tally then.
        self._kept: OrderedDict[str, tuple[int, UsageTally]] = OrderedDict()

    def of(self, journal: Journal, session_id: str, head: int) -> UsageTally:
        """The session's tally at version ``head`` (its last): what was kept, and the events appended since."""
        with self._lock:
            seen, kept = self._kept.get(session_id, (0, UsageTally()))
        if seen != head:
            # A head behind the kept one: the session was pruned and another imported under its id.
            tally = tally_usage(journal, session_id, kept if seen < head else UsageTally())
        else:
            tally = kept
        with self._lock:
            self._kept[session_id] = (head, tally)
            self._kept.move_to_end(session_id)
            while len(self._kept) > MOST_TALLIES:
                self._kept.popitem(last=False)
        return tally


@dataclass(frozen=True)
class Pricing:
    """What a page's costs are priced by (the catalog's prices by model), and the tallies kept."""

    prices: dict[str, CatalogModel]
    tallies: Tallies

    def spend(self, journal: Journal, session_id: str, head: int) -> Spend:
        """The session's own replies' tokens and cost."""
        return self.tallies.of(journal, session_id, head).spend(self.prices)


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
                  after: str | None = None, pricing: Pricing | None = None) -> Page:
    """The top-level sessions after the session ``after`` (most recently active first) that
    have ``status`` and whose id or first prompt holds ``search``: up to :data:`PAGE_SIZE`,
    with their costs by ``pricing`` (none without it)."""
    rows: list[Row] = []
    scanned = 0
    cursor = after
    while True:
        summaries = journal.sessions(PAGE_SIZE, top_level=True, after=cursor)
        for number, summary in enumerate(summaries, start=1):
            scanned += 1
            cursor = summary.session_id
            row = _row(journal, summary)
            if _matches(row, status, search):  # only a row shown is priced
                spend = pricing.spend(journal, summary.session_id, summary.events) if pricing else None
                rows.append(replace(row, spend=spend))
            if len(rows) == PAGE_SIZE or scanned == SCAN_LIMIT:
                # Stopped within the journal's sessions: the next page goes on after this one.
                last = len(summaries) < PAGE_SIZE and number == len(summaries)
                return Page(rows, None if last else cursor, scanned)
        if len(summaries) < PAGE_SIZE:  # the oldest session was looked at
            return Page(rows, None, scanned)
