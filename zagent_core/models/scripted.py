"""A model whose replies are written down in advance: tests, demos, the embedded default.

The file is a JSON list of replies, one per request, each ``{"text": ..., "tool_calls":
[{"name": ..., "arguments": {...}}]}`` (``id`` optional). Reply *n* answers the request
whose conversation already holds *n - 1* assistant messages, so a resumed session picks
up where it stopped, in any process. Asking past the end is an error that says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from zagent_core.models import Message, ModelError, ModelReply, ToolCallRequest, ToolSpec, Usage
from zagent_core.text import storable_json


class _ScriptedCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    name: str
    arguments: Any = {}


class _ScriptedReply(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = ""
    tool_calls: list[_ScriptedCall] = []


class ScriptedModel:
    """Serves ``replies`` in order, one per request."""

    def __init__(self, replies: list[ModelReply], name: str = "scripted") -> None:
        self.replies = replies
        self.name = name

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedModel:
        """Read a script; raises ValueError naming the file and the problem."""
        path = Path(path)
        try:
            raw = storable_json(json.loads(path.read_text(encoding="utf-8")))
            if not isinstance(raw, list):
                raise ValueError("it must be a JSON list of replies")
            parsed = [_ScriptedReply.model_validate(item) for item in raw]
        except (OSError, ValueError, ValidationError) as exc:
            raise ValueError(f"cannot use the script {path}: {exc}") from None
        replies = [
            ModelReply(
                text=item.text,
                tool_calls=[ToolCallRequest(id=call.id or f"call_s{turn}_{index}", name=call.name,
                                            arguments=call.arguments)
                            for index, call in enumerate(item.tool_calls)],
                stop_reason="tool_use" if item.tool_calls else "end_turn",
                usage=Usage(),
                model=f"scripted:{path.name}",
            )
            for turn, item in enumerate(parsed, start=1)
        ]
        return cls(replies, name=f"scripted:{path}")

    def reply(self, messages: list[Message], tools: list[ToolSpec]) -> ModelReply:
        index = sum(1 for message in messages if message.role == "assistant")
        if index >= len(self.replies):
            raise ModelError(f"the script has no reply #{index + 1} (it has {len(self.replies)})")
        reply = self.replies[index]
        # Rough usage, so loops and audits have numbers to show.
        size = sum(len(m.content) for m in messages)
        return reply.model_copy(update={"usage": Usage(input_tokens=size // 4, output_tokens=len(reply.text) // 4)})
