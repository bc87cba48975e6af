"""What the two SQL journals (SQLite and PostgreSQL) share beyond the views' SQL (``views.py``):
times as stored text, reading event rows and head rows back, the audit rows' JSON columns,
and the error for a journal a newer zagent made.

Both stores keep the same tables, so a row means the same on both; keeping its reading
here is what stops them from drifting apart.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, timezone
from typing import Any

from zagent_core.journal.protocol import Change, JournalError, SessionSummary, StoredEvent

#: A ``heads h`` row of a top-level session: no parent, or one this journal does not have (a child
#: imported alone), which would otherwise be listed nowhere.
TOP_LEVEL = ("(h.parent_session_id IS NULL"
             " OR NOT EXISTS (SELECT 1 FROM heads p WHERE p.session_id = h.parent_session_id))")


def heads_picked(top_level: bool, after: str | None, placeholder: str) -> str:
    """The condition on ``heads h`` of ``sessions(top_level=, after=)``: ``after`` is the keyset
    cursor, a session id given as the one parameter ``placeholder`` (an unknown id picks none)."""
    conditions = [TOP_LEVEL] if top_level else []
    if after is not None:
        conditions.append(f"h.last_seq < (SELECT last_seq FROM heads WHERE session_id = {placeholder})")
    return " AND ".join(conditions) or "TRUE"


#: Events one look at the change feed reads past its position, at most: a flood of appends
#: (an import) is taken in bounded steps, each step a range of the primary key.
MOVED_WINDOW = 10_000


def moved_sql(placeholder: str) -> str:
    """The sessions whose events are in the position range ``(after, until]`` (two parameters), each with its
    newest version and position there, oldest first: a range scan of ``seq``, the primary key, so no index of
    the heads is needed and the cost is that of the events appended since, not of the journal's size."""
    return ("SELECT session_id, max(version), max(seq) FROM events"
            f" WHERE seq > {placeholder} AND seq <= {placeholder} GROUP BY session_id ORDER BY max(seq)")


def moved_until(top: int, after: int) -> int:
    """Where ``moved_since`` reads to, the journal's last position being ``top`` (read first: an append that
    commits between the two reads must not be passed over unseen). At most the window past ``after``; ``top``
    when it is below ``after``: the newest events were deleted (pruned), and on SQLite the next append may
    take their numbers again."""
    return top if top <= after else min(top, after + MOVED_WINDOW)


def moved(rows: Sequence[tuple[Any, ...]]) -> list[Change]:
    """The changes of ``rows`` of :func:`moved_sql`."""
    return [Change(sid, int(version), int(seq)) for sid, version, seq in rows]


#: Sessions named in a message; the rest are counted.
NAMED = 5


def named(ids: list[str]) -> str:
    """``a, b, c, d, e and 3 more``: the first few of many ids, and a count of the rest."""
    return ", ".join(ids[:NAMED]) + (f" and {len(ids) - NAMED} more" if len(ids) > NAMED else "")


class JournalVersionError(JournalError):
    """The journal was made by a newer zagent."""


def format_time(when: datetime) -> str:
    """``2026-11-30T04:46:00.123Z``: sortable as text, readable in any SQL client."""
    return when.astimezone(timezone.utc).isoformat(timespec="milliseconds")[:-6] + "Z"


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


#: Event rows one read fetches at a time: a session of a million events is never held whole.
READ_PAGE = 1000


def paged(fetch: Callable[[int, int], Sequence[tuple[Any, ...]]], after_version: int) -> Iterator[tuple[Any, ...]]:
    """The ``(seq, version, ...)`` rows ``fetch(after_version, limit)`` gives, page after page
    (each fetch is its own query: the store's lock is not held while the rows are used). The
    first page is read at once, so a read that cannot be made fails where it is asked for."""
    rows = fetch(after_version, READ_PAGE)

    def rest(rows: Sequence[tuple[Any, ...]]) -> Iterator[tuple[Any, ...]]:
        while True:
            yield from rows
            if len(rows) < READ_PAGE:
                return
            rows = fetch(rows[-1][1], READ_PAGE)

    return rest(rows)


def stored_events(session_id: str, rows: Iterable[tuple[Any, ...]],
                  opened_by: Callable[[str, int], str | None]) -> Iterator[StoredEvent]:
    """``(seq, version, type, at, data)`` rows of a session as :class:`StoredEvent` s, parsed lazily
    (what both stores read; a body that does not load is named by its seq and version, and one
    that a newer zagent wrote by the zagent that ``opened_by(session_id, version)`` names)."""
    from zagent_core.journal.events import EventSchemaError, NewerEventError, load_event_json

    last: tuple[str, datetime] | None = None  # the events of one append share their time: parse it once
    for seq, version, type_, at, data in rows:
        try:
            event = load_event_json(type_, data)
        except NewerEventError as exc:
            raise exc.located(event_place(seq, session_id, version), opened_by(session_id, version)) from None
        except EventSchemaError as exc:
            raise EventSchemaError(f"{event_place(seq, session_id, version)}: {exc}") from None
        if last is None or last[0] != at:
            last = (at, parse_time(at))
        yield StoredEvent(seq, session_id, version, last[1], event)


def event_place(seq: int, session_id: str, version: int) -> str:
    """How an error names an event of the journal."""
    return f"event #{seq} (version {version} of session {session_id})"


def session_summary(row: Sequence[Any]) -> SessionSummary:
    """A line of ``sessions()`` from a ``heads`` row joined with its newest snapshot: ``(session_id,
    started_at, last_at, version, calls, ended, status, status_version, parent_session_id,
    parent_call_id, label, depth)``."""
    (sid, first, last, count, calls, ended, status, status_version, parent, parent_call, label, depth) = row
    return SessionSummary(
        session_id=sid, started_at=parse_time(first), last_at=parse_time(last), events=count,
        calls=calls, ended=bool(ended), status=status, status_version=status_version,
        parent_session_id=parent, parent_call_id=parent_call, label=label, depth=depth,
    )


def running_owners(rows: Sequence[tuple[str]], running: Callable[[dict[str, Any]], bool]) -> list[str]:
    """Of the owners (canonical JSON) of expired leases, the ones ``running`` says still run."""
    return [owner for (owner,) in rows if running(json.loads(owner))]


def _json_column(row: dict[str, Any], key: str) -> None:
    """A column that holds JSON text, as the value it stands for."""
    if isinstance(row.get(key), str):
        with contextlib.suppress(ValueError):
            row[key] = json.loads(row[key])


def with_decisions(rows: list[dict[str, Any]], asked: dict[tuple[str, str], dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of the ``tool_calls`` view as ``audit()`` gives them: ``arguments`` parsed, and each with
    ``asked``, its row of the ``decisions`` view (keyed by session and call) or None."""
    for row in rows:
        _json_column(row, "arguments")
        decision = row["asked"] = asked.get((row["session_id"], row["call_id"]))
        if decision is not None:
            _json_column(decision, "choices")
            if decision["kind"] == "approval":  # what was asked is the call's arguments
                _json_column(decision, "asked")
    return rows
