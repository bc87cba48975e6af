"""When the conversation is compacted, and what the model is asked for a summary.

A request estimated past ``agent.compact_at`` of the model's window is first made smaller
the cheap way, by clearing the bodies of old tool results (``context_cleared``); if it is
still too large, the model is asked for a summary of the conversation, and what it is
shown from then on starts with it (``context_compacted``). Both are events: a resumed,
replayed or forked session sees exactly what the live one saw. :class:`Budget` decides
by the estimate; a replay decides by its recording (:class:`RecordedCompactions`), so a
replayed session compacts where the recorded one did, whatever its config says.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, Protocol

from zagent_core.agent.conversation import BYTES_PER_TOKEN, SUMMARY_INTRO, Conversation, tokens
from zagent_core.agent.models import Message, Model, ModelError, ToolSpec
from zagent_core.config import ModelConfig
from zagent_core.journal.events import ContextCleared, ContextCompacted, Event, WakeText
from zagent_core.session.crashpoints import crash_point

#: The window of a model no config and no known family gives one.
DEFAULT_CONTEXT_WINDOW = 128_000

#: Known model families' windows, in tokens: matched at the start of the model's name (or a
#: name part, after ``/``, as routers name them), first match wins.
_WINDOWS: tuple[tuple[str, int], ...] = (
    (r"claude-", 200_000),
    (r"gpt-4\.1", 1_047_576),
    (r"gpt-5", 400_000),
    (r"gpt-4o|gpt-4-turbo|o1-mini", 128_000),
    (r"o1|o3|o4-mini", 200_000),
    (r"gpt-4(?!\d)", 8_192),
    (r"gpt-3\.5-turbo", 16_385),
    (r"gemini-(?:1\.5|2)", 1_048_576),
    (r"llama-?3\.[123]|llama-?4|qwen2\.5|qwen3|mistral-large|deepseek", 128_000),
)
_FAMILY = [(re.compile(rf"(?:^|/){pattern}"), window) for pattern, window in _WINDOWS]

#: What the model is asked for when the conversation is compacted. The summary replaces
#: everything before it, so it must carry what the work needs to go on.
COMPACTION_PROMPT = """\
Your conversation so far is about to be replaced by a summary, to make room in your context \
window. Write that summary now. It is all you will see of the conversation from here on, so \
leave out nothing you need to carry on with the work. Reply with the summary only, no tool \
calls, in these sections:

1. Task: what the user asked for, in their own words where it matters, and every later \
request or correction they made.
2. Decisions: what was decided and why, approaches tried and dropped, constraints found.
3. Files and commands: every file read, created or changed (with what changed), and the \
commands and tools that mattered, with their outcome.
4. In progress: the work under way when this summary was asked for, background tasks still \
running, and errors not solved yet.
5. Next: what the user asked last, verbatim, and the next steps to take.
"""


def context_window(spec: str | None, config: ModelConfig) -> int:
    """The window of the model ``spec`` names (``openai:gpt-4o``): ``model.context_window`` when
    set, else its family's, else :data:`DEFAULT_CONTEXT_WINDOW`."""
    if config.context_window is not None:
        return config.context_window
    name = (spec or "").partition(":")[2].lower()
    return next((window for pattern, window in _FAMILY if pattern.search(name)), DEFAULT_CONTEXT_WINDOW)


class Compactions(Protocol):
    """When the agent makes its conversation smaller, before a request."""

    def clear_through(self, conversation: Conversation, estimate: int) -> int | None:
        """The model request whose calls' results, and all before, are to be cleared; None: none."""
        ...

    def summary_due(self, conversation: Conversation, estimate: int) -> bool:
        """Whether the conversation is to be summarised before the next request."""
        ...


@dataclass(frozen=True)
class Budget:
    """Compact past ``threshold`` tokens (0: never), keeping the results of the latest
    ``keep`` requests' calls."""

    threshold: int
    keep: int

    def clear_through(self, conversation: Conversation, estimate: int) -> int | None:
        if not self.threshold or estimate <= self.threshold:
            return None
        through = conversation.requests - self.keep
        if through < 1 or conversation.clearable(through)[0] == 0:
            return None
        return through

    def summary_due(self, conversation: Conversation, estimate: int) -> bool:
        # With no reply since the last summary there is nothing to summarise: the system
        # prompt and the tools alone are too large, or a fresh message is.
        return bool(self.threshold) and estimate > self.threshold and conversation.replies_shown > 0


class RecordedCompactions:
    """A recording's compactions, where it made them: a replay clears and summarises before
    the same requests, by the recorded rules (its config and the replayed sizes aside)."""

    def __init__(self, recorded: Iterable[Event]) -> None:
        #: Requests made before each -> the clear made then, and whether a summary was asked then.
        self._clears: dict[int, int] = {}
        self._summaries: set[int] = set()
        for event in recorded:
            if isinstance(event, ContextCleared):
                self._clears[event.requests] = event.through_request
            elif isinstance(event, ContextCompacted) and event.trigger != "manual":
                self._summaries.add(event.requests - 1)

    def clear_through(self, conversation: Conversation, estimate: int) -> int | None:
        return self._clears.get(conversation.requests)

    def summary_due(self, conversation: Conversation, estimate: int) -> bool:
        return conversation.requests in self._summaries


def specs_size(specs: list[ToolSpec]) -> int:
    """The bytes the tool specs add to a request."""
    return sum(len(spec.name) + len(spec.description.encode()) + len(json.dumps(spec.parameters)) for spec in specs)


def cleared(conversation: Conversation, through_request: int, tools_size: int) -> ContextCleared:
    """Clear the results of the calls of requests up to ``through_request`` from ``conversation``:
    the event that says so (folding it again changes nothing)."""
    before = conversation.estimate(tools_size)
    results, size = conversation.clearable(through_request)
    conversation.clear(through_request)
    return ContextCleared(through_request=through_request, requests=conversation.requests, results=results,
                          bytes=size, tokens_before=before, tokens_after=conversation.estimate(tools_size))


def summarised(conversation: Conversation, model: Model, specs: list[ToolSpec], *, window: int,
               trigger: Literal["auto", "manual", "too_long"], instructions: str | None,
               through_version: int) -> ContextCompacted:
    """Ask ``model`` for a summary of ``conversation`` (read up to ``through_version``): the
    ``context_compacted`` event to journal.

    The request is the conversation, its oldest exchanges left out when it would not fit in
    ``window``, then :data:`COMPACTION_PROMPT` (and ``instructions``), with the same tools (a
    provider refuses tool results without them, and the prompt cache keeps its prefix).
    Raises :class:`ModelError` when the model cannot be asked or gives no summary.
    """
    tools_size = specs_size(specs)
    before = conversation.estimate(tools_size)
    prompt = COMPACTION_PROMPT + (f"\nAlso: {instructions}\n" if instructions else "")
    room = int(window * BYTES_PER_TOKEN * 0.9) - tools_size - len(prompt.encode())
    request = [*conversation.within(room), Message(role="user", content=prompt)]
    crash_point("before_compaction_request")
    started = time.monotonic()
    reply = model.reply(request, specs)
    summary = reply.text.strip()
    if not summary:
        raise ModelError(f"{model.name} gave no summary (it answered with {len(reply.tool_calls)} tool calls and "
                         "no text): the conversation was not compacted")
    cap = window * BYTES_PER_TOKEN // 10  # a summary larger than this defeats its purpose
    if len(summary.encode()) > cap:
        summary = summary.encode()[:cap].decode(errors="ignore") + "\n[the summary was cut here: too long]"
    notes, wakes = conversation.pending()
    after = tokens(len(conversation.system_prompt.encode()) + len((SUMMARY_INTRO + summary).encode()) + tools_size)
    usage = reply.usage
    return ContextCompacted(
        summary=summary, through_version=through_version, requests=conversation.requests + 1, trigger=trigger,
        model=reply.model or model.name, instructions=instructions, tokens_before=before, tokens_after=after,
        input_tokens=usage.input_tokens, output_tokens=usage.output_tokens, cache_read_tokens=usage.cache_read_tokens,
        cache_creation_tokens=usage.cache_creation_tokens, duration_ms=round((time.monotonic() - started) * 1000),
        pending_notes=notes,
        pending_wakes={wake_id: WakeText(reason=reason, text=text) for wake_id, (reason, text) in wakes.items()})
