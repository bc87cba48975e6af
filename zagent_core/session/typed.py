"""What a person gives a session, bounded: a user message, an answer, the reason of a decision.

Each has its cap in ``limits`` (config.json). Over it the text is refused whole, before any
of it is journaled, with a message that says its size, the cap and what to do. A refusal
loses nothing (the person still has the text); a cut would change what they said without
their knowing. What machines produce (a sub-agent's reply, an MCP server's tool list) is cut
instead, with a marker, where it enters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from zagent_core.config import LimitsConfig
from zagent_core.errors import ZagentError
from zagent_core.tools.text import storable

#: What a person gives: a user message, an answer to ``ask_user``, the reason of a decision.
Kind = Literal["message", "answer", "reason"]


@dataclass(frozen=True)
class _Bound:
    noun: str
    #: The field of :class:`LimitsConfig` that holds its cap.
    setting: str
    #: What to do instead, for a text that is too long.
    instead: str


_BOUNDS: dict[Kind, _Bound] = {
    "message": _Bound("the message", "user_message_bytes",
                      "Put the text in a file in the workspace and tell the agent to read it (read_file pages it)"),
    "answer": _Bound("the answer", "answer_bytes",
                     "Put the text in a file in the workspace and answer with its path (the agent can read it)"),
    "reason": _Bound("the reason", "denial_reason_bytes",
                     "Give a shorter reason, or put the text in a file in the workspace and name it in the reason"),
}


class InputTooLargeError(ZagentError, ValueError):
    """Text a person gave is over its cap in ``limits``; the message says by how much and what to do."""


def cap_of(kind: Kind, limits: LimitsConfig) -> int:
    """The cap, in bytes of UTF-8, of a text of ``kind``."""
    return int(getattr(limits, _BOUNDS[kind].setting))


def too_large(kind: Kind, limits: LimitsConfig, size: int | None = None) -> InputTooLargeError:
    """The refusal of a text of ``kind`` over its cap: ``size`` bytes, or (None) more than the
    cap, for a stream that is not read past it."""
    bound, cap = _BOUNDS[kind], cap_of(kind, limits)
    said = f"more than {cap:,}" if size is None else f"{size:,}"
    return InputTooLargeError(
        f"{bound.noun} is {said} bytes, over limits.{bound.setting} ({cap:,} bytes); it was not journaled. "
        f"{bound.instead}, or raise limits.{bound.setting} in config.json")


def typed(text: str, kind: Kind, limits: LimitsConfig) -> str:
    """``text`` made storable, as a session journals it; :class:`InputTooLargeError` when it is
    over the cap of its ``kind``."""
    text = storable(text)
    size = len(text.encode("utf-8"))
    if size > cap_of(kind, limits):
        raise too_large(kind, limits, size)
    return text
