"""A session's trace, built from its journal events: the one mapping that live export and
``zagent sessions trace`` share, so a trace looks the same whichever way it was sent.

A session is an ``invoke_agent`` span; its turns, its model requests (``chat``) and its tool
calls (``execute_tool``) nest below it as they happened, and a sub-agent's session nests under
the spawn call that started it. Names and attributes follow OpenTelemetry's GenAI semantic
conventions. Span and trace ids are hashes of the session and event ids, so the same events
always give the same trace: exporting a session twice, or live and then again, sends the same ids.

The mapping needs no OpenTelemetry package: it makes plain :class:`Span` records, which
:mod:`zagent_core.history.telemetry` hands to an exporter. What it holds is the spans still
open (a session, its current turn, its running calls), never a session's whole history.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from zagent_core.journal.events import (
    ChildSpawned,
    ContextCompacted,
    ModelReplied,
    SessionResumed,
    SessionStarted,
    ToolCallFinished,
    ToolCallInterrupted,
    ToolCallRejected,
    ToolCallRequested,
    ToolCallStarted,
    TurnEnded,
    TurnStarted,
    UserMessage,
)

if TYPE_CHECKING:
    from zagent_core.journal.protocol import Journal, StoredEvent

#: What an attribute may hold (OpenTelemetry's ``AttributeValue``, less the lists zagent never sends but one).
Attribute = str | int | float | bool | tuple[str, ...]


@dataclass(frozen=True)
class Span:
    """One finished span, as an exporter sends it."""

    name: str
    trace_id: int
    span_id: int
    #: None for the root of the trace.
    parent_id: int | None
    start: datetime
    end: datetime
    attributes: Mapping[str, Attribute]
    #: Why it failed (a tool's error, a rejected or interrupted call), or None.
    error: str | None = None


def _id(bits: int, *parts: str) -> int:
    """A stable id from ``parts``; never 0, which OpenTelemetry takes for "no id"."""
    digest = hashlib.sha256("\x00".join(parts).encode()).digest()
    return int.from_bytes(digest[: bits // 8], "big") or 1


def trace_id_of(root_session_id: str) -> int:
    """The trace of a top-level session and every sub-agent below it."""
    return _id(128, "trace", root_session_id)


def span_id_of(session_id: str, *key: str) -> int:
    """A span of ``session_id``: ``()`` the session's own, ``("call", CALL_ID)`` a tool call's,
    ``("turn", VERSION)`` a turn's, ``("chat", VERSION)`` a model request's."""
    return _id(64, "span", session_id, *key)


@dataclass
class _Open:
    """A span begun but not yet ended."""

    name: str
    span_id: int
    parent_id: int | None
    start: datetime
    attributes: dict[str, Attribute]
    error: str | None = None

    def ended(self, trace_id: int, end: datetime) -> Span:
        return Span(self.name, trace_id, self.span_id, self.parent_id, self.start, max(end, self.start),
                    dict(self.attributes), self.error)


@dataclass
class _SessionSpans:
    """What is open in one session of the trace."""

    session: _Open
    last_at: datetime
    turn: _Open | None = None
    calls: dict[str, _Open] = field(default_factory=dict)
    #: The person's latest message, for the next turn's input (only with ``capture_content``).
    message: str | None = None

    def parent(self) -> int:
        return (self.turn or self.session).span_id


#: The characters of one content attribute (``capture_content``): a tool's output or a long reply is
#: cut there, behind a marker, so that one span cannot outgrow the collector's request limit.
CONTENT_CHARS = 16 * 1024


def _content(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    if len(text) <= CONTENT_CHARS:
        return text
    return f"{text[:CONTENT_CHARS]}... [{len(text) - CONTENT_CHARS} more characters in the journal]"


class TraceBuilder:
    """Turns journal events into spans: :meth:`feed` each event of the trace's sessions in
    their order (a session's events in version order; sessions may interleave), and it returns
    the spans each one ends; :meth:`close` ends what is still open at the last time seen."""

    def __init__(self, root_session_id: str, *, capture_content: bool = False) -> None:
        self.trace_id = trace_id_of(root_session_id)
        #: Arguments, outputs, messages and replies go into the spans only when set.
        self.capture_content = capture_content
        self._sessions: dict[str, _SessionSpans] = {}

    def feed(self, stored: StoredEvent) -> list[Span]:
        """The spans that ``stored`` ends (none, mostly)."""
        spans = self._session(stored)
        spans.last_at = stored.at
        match stored.event:
            case UserMessage(text=text):
                spans.message = text
            case TurnStarted() | TurnEnded():
                return self._turn(spans, stored)
            case ModelReplied() | ContextCompacted() as reply:
                return [self._chat(spans, stored, reply)]
            case ToolCallRequested(call_id=call_id, tool=tool, arguments=arguments):
                attributes: dict[str, Attribute] = {
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool, "gen_ai.tool.call.id": call_id,
                    "gen_ai.conversation.id": stored.session_id}
                if self.capture_content:
                    attributes["gen_ai.tool.call.arguments"] = _content(arguments)
                spans.calls[call_id] = _Open(f"execute_tool {tool}", span_id_of(stored.session_id, "call", call_id),
                                             spans.parent(), stored.at, attributes)
            case ToolCallStarted(call_id=call_id, attempt=attempt) if call_id in spans.calls:
                spans.calls[call_id].attributes["zagent.tool.attempt"] = attempt
            case ChildSpawned(call_id=call_id, child_session_id=child, label=label) if call_id in spans.calls:
                spans.calls[call_id].attributes.update({"zagent.child.session_id": child, "zagent.child.label": label})
            case ToolCallFinished() | ToolCallRejected() | ToolCallInterrupted() as done if done.call_id in spans.calls:
                return [self._call_ended(spans.calls.pop(done.call_id), stored)]
        return []

    def _turn(self, spans: _SessionSpans, stored: StoredEvent) -> list[Span]:
        """A turn begins (ending the one before, if its end was not journaled) or ends."""
        if isinstance(stored.event, TurnEnded) and spans.turn is not None:
            spans.turn.attributes["zagent.turn.end_reason"] = stored.event.reason
        ended = self._end_turn(spans, stored.at)
        if isinstance(stored.event, TurnStarted):
            session_id = stored.session_id
            attributes: dict[str, Attribute] = {"zagent.turn.reason": stored.event.reason,
                                                "gen_ai.conversation.id": session_id}
            spans.turn = _Open("turn", span_id_of(session_id, "turn", str(stored.version)), spans.session.span_id,
                               stored.at, attributes)
            if stored.event.model:
                spans.turn.attributes["gen_ai.request.model"] = stored.event.model
            if self.capture_content and spans.message is not None:
                spans.turn.attributes["gen_ai.input.messages"] = _content(
                    [{"role": "user", "parts": [{"type": "text", "content": spans.message}]}])
            spans.message = None
        return ended

    def _call_ended(self, call: _Open, stored: StoredEvent) -> Span:
        match stored.event:
            case ToolCallFinished() as finished:
                if finished.exit_code is not None:
                    call.attributes["zagent.tool.exit_code"] = finished.exit_code
                if finished.is_error:
                    call.error = "the tool reported an error" + (" (timed out)" if finished.timed_out else "")
                if finished.outcome is not None:  # what the tool says it came to (its reason is no content)
                    call.attributes["zagent.tool.outcome"] = finished.outcome.status
                    if finished.outcome.reason:
                        call.attributes["zagent.tool.outcome_reason"] = finished.outcome.reason
                    if finished.outcome.status == "failure":
                        call.error = call.error or finished.outcome.reason or "the tool reported a failure"
                if self.capture_content:
                    call.attributes["gen_ai.tool.call.result"] = _content(finished.output)
            case ToolCallRejected(message=message) | ToolCallInterrupted(message=message):
                call.error = message
                call.attributes["zagent.tool.outcome"] = stored.event.type.removeprefix("tool_call_")
        return call.ended(self.trace_id, stored.at)

    def close(self, *, unfinished: bool = True) -> list[Span]:
        """End every span still open (running calls, a turn, each session) at the last time its
        session was seen; the builder is empty after. ``unfinished`` False: only the sessions' own
        spans (a live drive leaves a turn or call still open to the drive that journals its end)."""
        ended: list[Span] = []
        for spans in self._sessions.values():
            if unfinished:
                ended += [call.ended(self.trace_id, spans.last_at) for call in spans.calls.values()]
                ended += self._end_turn(spans, spans.last_at)
            ended.append(spans.session.ended(self.trace_id, spans.last_at))
        self._sessions.clear()
        return ended

    def _session(self, stored: StoredEvent) -> _SessionSpans:
        spans = self._sessions.get(stored.session_id)
        if spans is None:
            session_id = stored.session_id
            link = stored.event.parent if isinstance(stored.event, SessionStarted) else None
            attributes: dict[str, Attribute] = {"gen_ai.operation.name": "invoke_agent",
                                                "gen_ai.conversation.id": session_id,
                                                "gen_ai.agent.name": link.label if link else "zagent"}
            if isinstance(stored.event, SessionStarted):
                attributes["zagent.session.origin"] = stored.event.origin
            if link is not None:
                attributes["zagent.parent.session_id"] = link.session_id
            parent = span_id_of(link.session_id, "call", link.call_id) if link else None
            opened = _Open(f"invoke_agent {attributes['gen_ai.agent.name']}", span_id_of(session_id), parent,
                           stored.at, attributes)
            spans = self._sessions[session_id] = _SessionSpans(opened, stored.at)
        return spans

    def _end_turn(self, spans: _SessionSpans, at: datetime) -> list[Span]:
        turn, spans.turn = spans.turn, None
        return [] if turn is None else [turn.ended(self.trace_id, at)]

    def _chat(self, spans: _SessionSpans, stored: StoredEvent, reply: ModelReplied | ContextCompacted) -> Span:
        """A model request: it ends when its reply was journaled, and began ``duration_ms`` before."""
        attributes: dict[str, Attribute] = {
            "gen_ai.operation.name": "chat", "gen_ai.request.model": reply.model,
            "gen_ai.usage.input_tokens": reply.input_tokens, "gen_ai.usage.output_tokens": reply.output_tokens,
            "gen_ai.usage.cache_read.input_tokens": reply.cache_read_tokens,
            "gen_ai.usage.cache_creation.input_tokens": reply.cache_creation_tokens,
            "gen_ai.conversation.id": stored.session_id}
        if isinstance(reply, ModelReplied):
            attributes["gen_ai.response.finish_reasons"] = (reply.stop_reason,)
            if self.capture_content:
                parts: list[dict[str, Any]] = [{"type": "text", "content": reply.text}] if reply.text else []
                parts += [{"type": "tool_call", "id": call.call_id, "name": call.name, "arguments": call.arguments}
                          for call in reply.tool_calls]
                attributes["gen_ai.output.messages"] = _content([{"role": "assistant", "parts": parts}])
        else:
            attributes["zagent.compaction.trigger"] = reply.trigger
            if self.capture_content:
                attributes["gen_ai.output.messages"] = _content(
                    [{"role": "assistant", "parts": [{"type": "text", "content": reply.summary}]}])
        opened = _Open(f"chat {reply.model}", span_id_of(stored.session_id, "chat", str(stored.version)),
                       spans.parent(), stored.at - timedelta(milliseconds=reply.duration_ms), attributes)
        return opened.ended(self.trace_id, stored.at)


def trace_root(journal: Journal, session_id: str) -> str:
    """The top-level session above ``session_id`` (itself, for a top-level one): whose trace it is in."""
    seen = {session_id}
    while (parent := _parent(journal, session_id)) is not None and parent not in seen:
        session_id = parent
        seen.add(session_id)
    return session_id


def _parent(journal: Journal, session_id: str) -> str | None:
    first = next(iter(journal.read(session_id, types=("session_started",))), None)
    link = first.event.parent if first is not None and isinstance(first.event, SessionStarted) else None
    return link.session_id if link else None


def unsent_after(journal: Journal, session_id: str, before: int) -> int:
    """The journal position (``seq``) after which the drive that appends the session's version
    ``before + 1`` on sends the spans its events end, its sub-agents' too: where that drive began;
    or, when it took the session over from a driver that died (SIGKILL, a lost host:
    :attr:`SessionResumed.taken_over_from`), where that dead drive began, and the drives it had
    taken over from in turn: the spans they ended may have died in their queue. A span is made
    from the journal alone, so the ones they did send go out again the same, ids and all."""
    anchor = 0  # where the latest run of drives, each taken over from the one before, began
    for stored in journal.read(session_id, types=("session_started", "session_resumed")):
        taken_over = isinstance(stored.event, SessionResumed) and stored.event.taken_over_from is not None
        if stored.version > before:
            return (anchor if taken_over and anchor else stored.seq) - 1
        if not taken_over:
            anchor = stored.seq
    # A drive that began with no event of its own: after its session's version ``before``.
    return max((stored.seq for stored in journal.read(session_id, after_version=max(before - 1, 0))
                if stored.version == before), default=0)


def session_spans(journal: Journal, session_id: str, *, capture_content: bool = False) -> Iterator[Span]:
    """The spans of a session and every sub-agent below it, from their journaled events and
    times, in the trace of its top-level session (the ids live export gave them)."""
    builder = TraceBuilder(trace_root(journal, session_id), capture_content=capture_content)
    pending, queued = [session_id], {session_id}
    while pending:
        for stored in journal.read(pending.pop()):
            yield from builder.feed(stored)
            if isinstance(stored.event, ChildSpawned) and stored.event.child_session_id not in queued:
                queued.add(stored.event.child_session_id)
                pending.append(stored.event.child_session_id)
    yield from builder.close()
