"""A session's calls drawn to scale: one bar per call from its start for its duration, calls
that ran at the same time on lanes of their own, in plain SVG (no script draws it).

The bars come from the journal's ``tool_calls`` view (what ``zagent audit`` reads), the
last :data:`MOST_CALLS` calls of the session at most.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from html import escape
from typing import Any

#: The calls a timeline draws at most (the session's latest).
MOST_CALLS = 500
_WIDTH = 900
_LANE = 22
_LABELS = 160


@dataclass(frozen=True)
class Bar:
    call_id: str
    tool: str
    outcome: str
    start: datetime
    end: datetime
    #: A background call: its bar is its task's.
    task: bool


def _moment(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def bars(rows: list[dict[str, Any]], now: datetime) -> list[Bar]:
    """A bar per call of the view's ``rows`` that started (one waiting for approval, or
    refused, never did): a call still running ends ``now``."""
    from zagent_cli.show import call_outcome

    found = []
    for row in rows:
        start = _moment(row["started_at"])
        if start is None:
            continue
        duration = row["duration_ms"]
        end = now if duration is None else start + timedelta(milliseconds=duration)
        found.append(Bar(row["call_id"], row["tool"], call_outcome(row), start, max(end, start),
                         row["task_id"] is not None))
    return sorted(found, key=lambda bar: bar.start)


def lanes(drawn: list[Bar]) -> list[int]:
    """Each bar's lane: the first whose last bar ended before it starts (bars that overlap, calls
    run in parallel, get lanes of their own)."""
    ends: list[datetime] = []
    placed = []
    for bar in drawn:
        lane = next((number for number, end in enumerate(ends) if end <= bar.start), len(ends))
        if lane == len(ends):
            ends.append(bar.end)
        else:
            ends[lane] = bar.end
        placed.append(lane)
    return placed


def timeline_svg(rows: list[dict[str, Any]], now: datetime | None = None) -> str:
    """The SVG of the calls of ``rows``, or an empty string when no call started."""
    drawn = bars(rows, now or datetime.now(timezone.utc))
    if not drawn:
        return ""
    placed = lanes(drawn)
    first = drawn[0].start
    span = max((max(bar.end for bar in drawn) - first).total_seconds(), 0.001)
    scale = (_WIDTH - _LABELS) / span
    height = (max(placed) + 1) * _LANE + 20
    parts = [f'<svg class="timeline" viewBox="0 0 {_WIDTH} {height}" width="100%" role="img" '
             f'aria-label="calls on a time scale, {span:.3f} s in all">']
    for bar, lane in zip(drawn, placed):
        x = _LABELS + (bar.start - first).total_seconds() * scale
        width = max((bar.end - bar.start).total_seconds() * scale, 2)
        y = lane * _LANE + 2
        took = (bar.end - bar.start).total_seconds()
        kind = "task" if bar.task else bar.outcome.partition(" ")[0]
        parts.append(f'<g class="bar {escape(kind)}"><title>{escape(bar.tool)} ({escape(bar.call_id)}): '
                     f'{escape(bar.outcome)}, {took:.3f} s</title>'
                     f'<rect x="{x:.1f}" y="{y}" width="{width:.1f}" height="{_LANE - 6}" rx="3"/>'
                     f'<text x="{max(x - 4, 0):.1f}" y="{y + 12}" text-anchor="end">{escape(bar.tool)}</text></g>')
    parts.append(f'<text class="scale" x="{_LABELS}" y="{height - 4}">0 s</text>'
                 f'<text class="scale" x="{_WIDTH}" y="{height - 4}" text-anchor="end">{span:.3f} s</text></svg>')
    return "".join(parts)
