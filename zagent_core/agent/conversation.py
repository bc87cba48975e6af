"""What a model is shown of a session: its conversation, folded from the journal's events.

The conversation is a projection like the session's state, of fewer events: a user
message, a model reply, a tool result, notes and wake-ups delivered by a turn, and the
two events that change what the model is shown without deleting anything,
``context_cleared`` (old results' bodies replaced by a line) and ``context_compacted``
(everything up to a version replaced by a summary). Because those are events, a
resumed, replayed or forked session shows its model exactly what the live one did.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING

from zagent_core.agent.models import Message, ToolCallRequest
from zagent_core.errors import ZagentError
from zagent_core.journal.events import (
    ContextCleared,
    ContextCompacted,
    Media,
    ModelReplied,
    NoteReceived,
    NotesDelivered,
    RepliedCall,
    ToolCallFinished,
    ToolCallInterrupted,
    ToolCallRejected,
    TurnStarted,
    UserMessage,
    WakeRequested,
)
from zagent_core.journal.views import HELD_NOTES

if TYPE_CHECKING:
    from zagent_core.journal.protocol import StoredEvent

#: What one attached file counts for in an estimate: about what providers bill for an image.
MEDIA_BYTES = 6_400
#: Bytes per token in an estimate where no usage is known (the rule of thumb for English and code).
BYTES_PER_TOKEN = 4
#: What notes and wake-ups one request carries at most, by default (``limits.notes_bytes_per_request``).
NOTES_BYTES_PER_REQUEST = 32 * 1024

SUMMARY_INTRO = ("This session is being continued from an earlier conversation that was compacted to save "
                 "context. A summary of everything before this point:\n\n")


class OrphanedCallError(ZagentError, RuntimeError):
    """A tool call in the conversation has no result; sending it would make providers fail."""


def _size(message: Message) -> int:
    """Bytes a message counts for in an estimate."""
    size = len(message.content.encode())
    for call in message.tool_calls:
        size += len(call.name) + len(json.dumps(call.arguments, ensure_ascii=False).encode())
    return size + MEDIA_BYTES * len(message.media)


def tokens(size: int) -> int:
    """An estimate of the tokens ``size`` bytes make."""
    return -(-size // BYTES_PER_TOKEN)


class Conversation:
    """The messages a model is sent, folded from a session's events as they are committed.

    Linear in the session's length: each event adds to the messages once, and a tool
    result fills the slot its call left after the assistant message, so a request never
    re-reads the journal. The system prompt is the one the latest turn journaled
    (``system_prompt`` is the fallback for sessions that journaled none).

    Notes and wake-ups delivered by a turn (or mid-turn) follow as one user message of
    ``[info: ...]`` lines, at the end of the request, at most ``notes_cap`` bytes of them;
    they never touch the system prompt. As the session's state, it holds the texts of the
    first :data:`~zagent_core.journal.views.HELD_NOTES` undelivered notes only, and counts
    the others: a flood of notes costs it no memory.

    It keeps what an estimate of the request's size needs: the provider's count of the last
    request (its reply's ``input_tokens`` and ``output_tokens``) and the bytes added since,
    or, where no count is known, the bytes of the whole conversation.
    """

    #: The event types a conversation is made of: reading only these skips half a session.
    TYPES = frozenset({"user_message", "model_replied", "tool_call_finished", "tool_call_rejected",
                       "tool_call_interrupted", "note_received", "wake_requested", "turn_started", "notes_delivered",
                       "context_compacted", "context_cleared"})

    def __init__(self, system_prompt: str, events: Iterable[StoredEvent] = (), *, session_id: str = "",
                 notes_cap: int = NOTES_BYTES_PER_REQUEST) -> None:
        self.system_prompt = system_prompt
        self.session_id = session_id
        self.notes_cap = notes_cap
        self._messages: list[Message] = []
        self._system: Message | None = None
        #: Per message: the version of the event it came from, and what it counts for in an estimate.
        self._origins: list[int] = []
        self._sizes: list[int] = []
        #: Where each call's result goes: call id -> index of its tool message.
        self._slots: dict[str, int] = {}
        #: Which model request made each result slot's call (see ``requests``).
        self._made_by: dict[int, int] = {}
        self._unanswered: dict[int, RepliedCall] = {}
        self._note_text: dict[int, str] = {}
        #: Undelivered notes past those ``_note_text`` holds: how many, and their bytes.
        self._notes_not_held = (0, 0)
        self._wakes: dict[str, tuple[str, str]] = {}  # wake id -> (reason, text)
        #: The session's model requests so far: its replies, and the summaries compaction asked for.
        self.requests = 0
        self._counted: int | None = None  # tokens of the last request and its reply, as the provider counted
        self._added = 0  # bytes added since that count
        for stored in events:
            self.add(stored)

    def add(self, stored: StoredEvent) -> None:
        """Take one committed event into account."""
        match stored.event:
            case UserMessage(text=text):
                self._append(Message(role="user", content=text), stored.version)
            case ModelReplied() as reply:
                self._add_reply(reply, stored.version)
            case ToolCallFinished(call_id=call_id, output=output, is_error=is_error, media=media):
                self._answer(call_id, output, is_error, media)
            case ToolCallRejected(call_id=call_id, message=message) | ToolCallInterrupted(
                    call_id=call_id, message=message):
                self._answer(call_id, message, True)
            case NoteReceived(text=text):
                if len(self._note_text) < HELD_NOTES:
                    self._note_text[stored.version] = text
                else:
                    count, size = self._notes_not_held
                    self._notes_not_held = (count + 1, size + len(text.encode()))
            case WakeRequested(wake_id=wake_id, reason=reason, text=text):
                self._wakes[wake_id] = (reason, text)
            case TurnStarted() | NotesDelivered() as delivery:
                self._add_delivery(delivery, stored.version)
            case ContextCleared(through_request=through):
                self.clear(through)
            case ContextCompacted() as compacted:
                self._compact(compacted)
            case _:
                pass

    def _append(self, message: Message, version: int) -> None:
        self._messages.append(message)
        self._origins.append(version)
        size = _size(message)
        self._sizes.append(size)
        self._added += size

    def _add_reply(self, reply: ModelReplied, version: int) -> None:
        """The assistant message, then an empty slot per call for its result to fill."""
        self.requests += 1
        self._append(Message(role="assistant", content=reply.text, thinking=reply.thinking, tool_calls=[
            ToolCallRequest(id=call.id, name=call.name, arguments=call.arguments)
            for call in reply.tool_calls]), version)
        if reply.input_tokens or reply.cache_read_tokens:
            # The provider counted the request (Anthropic's input_tokens leave out what the
            # cache read and wrote); the reply is part of the next one.
            self._counted = (reply.input_tokens + reply.cache_read_tokens + reply.cache_creation_tokens
                             + reply.output_tokens)
            self._added = 0
        for call in reply.tool_calls:
            slot = len(self._messages)
            self._slots[call.call_id] = slot
            self._made_by[slot] = self.requests
            self._unanswered[slot] = call
            self._append(Message(role="tool", tool_call_id=call.id), version)

    def _add_delivery(self, delivery: TurnStarted | NotesDelivered, version: int) -> None:
        """The notes and wake-ups a turn (or a delivery mid-turn) hands the model, as one user
        message of at most ``notes_cap`` bytes: the journal keeps the rest."""
        if isinstance(delivery, TurnStarted) and delivery.system_prompt is not None:
            self.system_prompt = delivery.system_prompt
        texts = [self._note_text.pop(v) for v in delivery.notes if v in self._note_text]
        for wake_id in delivery.wakes:
            wake = self._wakes.pop(wake_id, None)
            # A wake-up a note asked for is that note's line already.
            if wake is not None and wake[0] != "note":
                texts.append(wake[1])
        # A delivery takes every pending note: those not held come as a count.
        (not_held, not_held_bytes), self._notes_not_held = self._notes_not_held, (0, 0)
        lines: list[str] = []
        room = self.notes_cap
        for index, text in enumerate(texts):
            line = f"[info: {text}]"
            size = len(line.encode())
            if size > room:
                not_held += len(texts) - index
                not_held_bytes += sum(len(t.encode()) for t in texts[index:])
                break
            lines.append(line)
            room -= size + 1
        if not_held:
            lines.append(f"[info: {not_held:,} more notes and wake-ups ({not_held_bytes:,} bytes) were left out of "
                         f"this request; `zagent sessions show {self.session_id}` has every one]")
        if lines:
            self._append(Message(role="user", content="\n".join(lines)), version)

    def _answer(self, call_id: str, content: str, is_error: bool, media: list[Media] | None = None) -> None:
        slot = self._slots.get(call_id)
        if slot is None:
            return  # a call no reply made (zagent tools run): not part of the conversation
        self._unanswered.pop(slot, None)
        self._set(slot, self._messages[slot].model_copy(
            update={"content": content, "is_error": is_error, "media": media or []}))

    def _set(self, index: int, message: Message) -> None:
        size = _size(message)
        self._added += size - self._sizes[index]
        self._messages[index], self._sizes[index] = message, size

    def _clearable_slots(self, through_request: int) -> list[int]:
        """The result slots :meth:`clear` clears: answered, not cleared yet, of calls made by a
        request up to ``through_request``."""
        return [slot for slot, request in self._made_by.items()
                if request <= through_request and slot not in self._unanswered
                and not self._messages[slot].content.startswith(_CLEARED)]

    def clearable(self, through_request: int) -> tuple[int, int]:
        """How many results :meth:`clear` would clear, and the bytes of output they hold."""
        slots = self._clearable_slots(through_request)
        return len(slots), sum(len(self._messages[slot].content.encode()) for slot in slots)

    def clear(self, through_request: int) -> None:
        """Replace the result of each call made by a request up to ``through_request`` with a line
        saying how large it was and where to read it (``context_cleared``)."""
        for slot in self._clearable_slots(through_request):
            message = self._messages[slot]
            self._set(slot, message.model_copy(update={"media": [], "content": (
                f"{_CLEARED}: {len(message.content.encode()):,} bytes"
                f"{f' and {len(message.media)} attached files' if message.media else ''}; "
                f"`zagent sessions show {self.session_id}` has it]")}))
        self._counted = None

    def _compact(self, compacted: ContextCompacted) -> None:
        """Everything up to ``through_version`` gives way to the summary; what came after stays."""
        keep = [i for i, origin in enumerate(self._origins) if origin > compacted.through_version]
        moved = {old: new for new, old in enumerate(keep, start=1)}
        summary = Message(role="user", content=SUMMARY_INTRO + compacted.summary, requests_before=compacted.requests)
        self._messages = [summary, *(self._messages[i] for i in keep)]
        self._origins = [compacted.through_version, *(self._origins[i] for i in keep)]
        self._sizes = [_size(summary), *(self._sizes[i] for i in keep)]
        self._slots = {call: moved[slot] for call, slot in self._slots.items() if slot in moved}
        self._made_by = {moved[slot]: request for slot, request in self._made_by.items() if slot in moved}
        self._unanswered = {moved[slot]: call for slot, call in self._unanswered.items() if slot in moved}
        self._note_text = {**compacted.pending_notes, **self._note_text}
        self._wakes = {**{w: (wake.reason, wake.text) for w, wake in compacted.pending_wakes.items()}, **self._wakes}
        self.requests = compacted.requests
        self._counted = None

    @property
    def replies_shown(self) -> int:
        """The model replies the conversation shows whole (not as a summary): 0, and a summary
        would have nothing to summarise."""
        return sum(1 for message in self._messages if message.role == "assistant")

    def pending(self) -> tuple[dict[int, str], dict[str, tuple[str, str]]]:
        """The notes and wake-ups folded and not delivered yet: a compaction carries them."""
        return dict(self._note_text), dict(self._wakes)

    def estimate(self, tools_size: int = 0) -> int:
        """The next request's size in tokens: the provider's count of the last request and its
        reply plus an estimate of what was added since, else bytes / 4 of it all (``tools_size``:
        the bytes of the tool specs, which a provider's count already holds)."""
        if self._counted is not None:
            return self._counted + tokens(self._added)
        return tokens(len(self.system_prompt.encode()) + sum(self._sizes) + tools_size)

    def messages(self) -> list[Message]:
        """The request's messages; refuses to produce one with a tool call that has no result."""
        if self._unanswered:
            call = next(iter(self._unanswered.values()))
            raise OrphanedCallError(f"tool call {call.call_id} ({call.name}) has no result")
        return [self._system_message(), *self._messages]

    def _system_message(self) -> Message:
        """The system prompt as a message: the same one while the prompt is, as every other message
        stays the same object from request to request (providers keep each one's wire form by it)."""
        if self._system is None or self._system.content != self.system_prompt:
            self._system = Message(role="system", content=self.system_prompt)
        return self._system

    def within(self, size: int) -> list[Message]:
        """:meth:`messages`, the oldest left out (whole exchanges, never a call without its
        result) until the rest fits in ``size`` bytes, and the largest results of what is
        left cut if the newest exchange alone does not: what a summary request can send."""
        messages = self.messages()
        total, start = len(messages[0].content.encode()), len(self._messages)
        for index in range(len(self._messages) - 1, -1, -1):
            if total + self._sizes[index] > size and start < len(self._messages):
                break
            total += self._sizes[index]
            if self._messages[index].role != "tool":
                start = index
        kept = self._messages[start:]
        if total > size:
            kept = _cut_results(kept, total - size)
        if start == 0:
            return [messages[0], *kept]
        dropped = self._messages[:start]
        note = Message(role="user", content=f"[{start:,} earlier messages of this conversation were left out: "
                                            "they did not fit in one request]",
                       requests_before=sum(1 for m in dropped if m.role == "assistant")
                       + sum(m.requests_before for m in dropped))
        return [messages[0], note, *kept]


def _cut_results(messages: list[Message], excess: int) -> list[Message]:
    """``messages`` with their largest tool results cut (their start kept) by about ``excess`` bytes."""
    messages = list(messages)
    for index in sorted(range(len(messages)), key=lambda i: -_size(messages[i])):
        message = messages[index]
        if excess <= 0 or message.role != "tool":
            continue
        body = message.content.encode()
        kept = max(0, len(body) - excess)
        cut = message.model_copy(update={"media": [], "content": body[:kept].decode(errors="ignore")
                                         + f"\n[{len(body) - kept:,} more bytes of this result left out of this request]"})
        excess -= _size(message) - _size(cut)
        messages[index] = cut
    return messages


#: How a cleared result begins (:meth:`Conversation.clear`).
_CLEARED = "[output cleared from the conversation to save context"


def conversation(events: Iterable[StoredEvent], system_prompt: str) -> list[Message]:
    """The messages a model is sent, rebuilt from a session's events (see :class:`Conversation`)."""
    return Conversation(system_prompt, events).messages()
