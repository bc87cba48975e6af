"""The conversation, as the agent loop journals it: turns, replies, user messages, deliveries.

A model's reply is journaled before any of its calls runs, each call given an id no call
of the session has yet; what the next request carries besides the conversation (notes,
wake-ups) is taken exactly once, by :meth:`Turns.deliver`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from zagent_core.config import LimitsConfig
from zagent_core.journal.events import (
    ChildSpawned,
    Event,
    ModelReplied,
    NotesDelivered,
    RepliedCall,
    ToolCallInterrupted,
    ToolCallRejected,
    ToolCallRequested,
    TurnEnded,
    TurnStarted,
    UserMessage,
)
from zagent_core.journal.views import NoteView, WakeView
from zagent_core.session.calls import CallRunner, journal_call_id
from zagent_core.session.typed import typed
from zagent_core.session.writer import Writer


@dataclass(frozen=True)
class Delivery:
    """What the agent's next request carries besides the conversation."""

    notes: list[NoteView]
    wakes: list[WakeView]

    def lines(self) -> list[str]:
        """As appended to the request: one ``[info: ...]`` line each, never in the system prompt.

        A wake-up asked for by a note is that note's line; others (a task's exit) add their own.
        """
        return [f"[info: {note.text}]" for note in self.notes] + [
            f"[info: {wake.text}]" for wake in self.wakes if wake.reason != "note"
        ]


class Turns:
    """Journals the conversation of one session."""

    def __init__(self, writer: Writer, calls: CallRunner, calls_stopped: Callable[[], bool],
                 limits: LimitsConfig) -> None:
        self._writer = writer
        self._calls = calls
        #: ``user_message_bytes``: a message over it is refused, never journaled.
        self._limits = limits
        #: Whether the running calls are being stopped (Ctrl-C): a spawn waiting its turn stops too.
        self._calls_stopped = calls_stopped
        #: The calls of the model's latest reply, in its order (this process's; see :meth:`add_child`).
        self._reply: list[RepliedCall] = []

    def deliver(self, turn: Literal["user", "wake", "resume"] | None, *, system_prompt: str | None,
                model: str | None, model_base_url: str | None) -> Delivery:
        """Take the pending notes and wake-ups for the agent's next request, exactly once (see :meth:`Session.deliver`)."""
        writer = self._writer
        with writer.lock:
            notes = list(writer.state.pending_notes.values())
            wakes = list(writer.state.pending_wakes.values())
            note_versions, wake_ids = [n.version for n in notes], [w.wake_id for w in wakes]
            if turn is not None:
                writer.append([TurnStarted(reason=turn, system_prompt=system_prompt, model=model,
                                           model_base_url=model_base_url, notes=note_versions, wakes=wake_ids)])
            elif notes or wakes:
                writer.append([NotesDelivered(notes=note_versions, wakes=wake_ids)])
        return Delivery(notes=notes, wakes=wakes)

    def record(self, events: Sequence[Event]) -> None:
        self._writer.append(events)

    def record_user_message(self, text: str, model: str | None = None) -> None:
        """Journal a person's message (:class:`~zagent_core.session.typed.InputTooLargeError` over its
        cap), with the model it asks for, if any."""
        self._writer.append([UserMessage(text=typed(text, "message", self._limits), model=model)])

    def record_reply(self, reply: ModelReplied) -> list[RepliedCall]:
        """Journal a model reply before any of its calls runs; returns its calls with journal ids."""
        writer = self._writer
        with writer.lock:
            taken = set(writer.state.unrequested)
            calls = []
            for call in reply.tool_calls:
                call_id = journal_call_id(call.id, lambda c: c in taken or writer.has_call(c))
                taken.add(call_id)
                calls.append(call.model_copy(update={"call_id": call_id}))
            writer.append([reply.model_copy(update={"tool_calls": calls})])
            self._reply = calls
        return calls

    def end_turn(self, reason: str) -> None:
        self._writer.append([TurnEnded(reason=reason)])
        self._writer.snapshot()  # a resume, or `sessions list`, starts from the end of the last turn

    def refuse(self, call: RepliedCall, message: str) -> None:
        """Give a call of a reply a result without running it (a limit was reached)."""
        self._writer.append([ToolCallRequested(call_id=call.call_id, tool=call.name, arguments=call.arguments),
                             ToolCallRejected(call_id=call.call_id, reason="limit", message=message)])

    def settle_unrequested(self, why: str) -> None:
        """Calls a reply asked for that never ran get a result saying so; those of a tool that continues are
        only requested: they go on later."""
        writer = self._writer
        for call in list(writer.state.unrequested.values()):
            requested = ToolCallRequested(call_id=call.call_id, tool=call.name, arguments=call.arguments)
            if self._calls.continues(call.name):
                writer.append([requested])
            else:
                writer.append([requested, ToolCallInterrupted(call_id=call.call_id,
                                                              message=f"{call.name} was not run: {why}")])

    def await_turn(self, call_id: str, tool: str) -> None:
        """Wait until each call of ``tool`` before ``call_id`` in the model's latest reply has
        spawned its child or has its result: calls of one reply running side by side then take
        their labels in the reply's order (so the scripts keyed by them do not depend on which
        thread ran first), and wait for a slot in that order too. A call that is not of the
        latest reply (``zagent tools run``, a resume) has no order to keep.

        Waited for before a slot is: a later call holding a slot while it waits for an earlier
        one, which waits for a slot, would wait forever.
        """
        earlier: list[str] = []
        for call in self._reply:
            if call.call_id == call_id:
                break
            if call.name == tool:
                earlier.append(call.call_id)
        else:
            return
        writer = self._writer
        with writer.lock:
            while not all(self._spawned_or_done(other) for other in earlier):
                if self._calls_stopped():
                    raise KeyboardInterrupt  # the run is being stopped while this spawn waited its turn
                writer.appended.wait(0.1)

    def add_child(self, spawned: Callable[[str], ChildSpawned]) -> ChildSpawned:
        """Name the next sub-agent (``child-N``) and journal ``spawned(label)``, in one step."""
        writer = self._writer
        with writer.lock:
            event = spawned(f"child-{len(writer.state.children) + 1}")
            writer.append([event])
            return event

    def _spawned_or_done(self, call_id: str) -> bool:
        state = self._writer.state
        if call_id not in state.unrequested and call_id not in state.calls:
            return True  # it has its result
        return any(child.call_id == call_id for child in state.children.values())
