"""A model's thinking, as a reply carries it: part of ``model_replied``, sent back unchanged."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class ThinkingBlock(BaseModel):
    """A reply's thinking block as Anthropic sent it: the API checks the ``signature`` (a
    ``redacted_thinking`` block's ``data``) when the block is sent back, so neither is ever edited."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: Literal["thinking", "redacted_thinking"] = "thinking"
    thinking: str = ""
    signature: str = ""
    #: ``redacted_thinking``: the thought, encrypted (opaque).
    data: str = ""

    def readable(self) -> str:
        """The thought as a person is shown it: its text, or ``(redacted)``."""
        return self.thinking.strip() if self.type == "thinking" else "(redacted)"
