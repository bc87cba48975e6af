"""A model whose replies are written down in advance: tests, demos, the embedded default.

The file is a JSON list of replies, one per request, each ``{"text": ..., "tool_calls":
[{"name": ..., "arguments": {...}}]}`` (``id`` optional; ``"thinking": [{"thinking": ...,
"signature": ...}]`` scripts thinking blocks). Reply *n* answers the request
whose conversation already holds *n - 1* assistant messages, so a resumed session picks
up where it stopped, in any process. Asking past the end is an error that says so.

Sub-agents are scripted in the same file: instead of the list, an object
``{"replies": [...], "children": {KEY: SCRIPT, ...}}``, where each SCRIPT is a list or
such an object again (grandchildren). A child ``spawn`` starts reads the script under
its task (the exact text), else under its label (``child-1``...: children are numbered in
the order they are spawned, spawns of one reply in the reply's order), else under ``"*"``. Its spec names the key it took (``scripted:PATH#child-1``, a
grandchild's ``scripted:PATH#child-1/child-2``, keys %-quoted), so a resume reads the same.

A reply may say what it used, ``"usage": {"input_tokens": 1200, "output_tokens": 80,
"cache_read_tokens": 0, "cache_creation_tokens": 0}``, for costs to show exact numbers;
without it the usage is a rough count of characters.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from pydantic import BaseModel, ConfigDict, ValidationError

from zagent_core.agent.models import Message, ModelError, ModelReply, ToolCallRequest, ToolSpec, Usage, request_number
from zagent_core.journal.parts import ThinkingBlock
from zagent_core.tools.text import storable_json


class _ScriptedCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    name: str
    arguments: Any = {}


class _ScriptedReply(BaseModel):
    model_config = ConfigDict(extra="forbid")

    #: Thinking blocks, as Anthropic's replies carry them (``{"thinking": ..., "signature": ...}``).
    thinking: list[ThinkingBlock] = []
    text: str = ""
    tool_calls: list[_ScriptedCall] = []
    #: What the reply reports it used (tokens in, out, cache reads and writes); None: a rough
    #: count from the characters of the request and the reply.
    usage: Usage | None = None


def _node(script: Any, child: str) -> tuple[Any, str]:
    """The part of the script the sub-agent ``child`` names (its keys joined by ``/``), and what to call it."""
    where = "the script"
    for key in [unquote(part) for part in child.split("/") if part]:
        children = script.get("children", {}) if isinstance(script, dict) else {}
        if not isinstance(children, dict) or key not in children:
            raise ValueError(f"{where} has no sub-agent {key!r} under \"children\"")
        script = children[key]
        where = f"the script of sub-agent {key!r}"
    return script, where


def child_key(path: str | Path, child: str, label: str, task: str) -> str:
    """Where a new sub-agent's replies are, under the part ``child`` names: the key (task,
    label or ``*``) to add to ``child``. ValueError says what to add to the script."""
    try:
        script, where = _node(json.loads(Path(path).read_text(encoding="utf-8")), child)
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot use the script {path}: {exc}") from None
    children = script.get("children") if isinstance(script, dict) else None
    for key in (task, label, "*"):
        if isinstance(children, dict) and key in children:
            return quote(key, safe="")
    raise ValueError(f'{where} in {path} has no replies for sub-agent {label}: add "children": {{"{label}": [...]}} '
                     'to it, keyed by the task, the label or "*"')


def _part(script: Any, child: str) -> list[Any]:
    """The replies of the script, or of the sub-agent ``child`` names."""
    script, where = _node(script, child)
    replies = script.get("replies") if isinstance(script, dict) else script
    if not isinstance(replies, list):
        raise ValueError(f'{where} must be a JSON list of replies, or an object with "replies" (a list) and '
                         '"children"')
    return replies


_CONTENT = operator.attrgetter("content")


class ScriptedModel:
    """Serves ``replies`` in order, one per request."""

    def __init__(self, replies: list[ModelReply], name: str = "scripted") -> None:
        self.replies = replies
        self.name = name

    @classmethod
    def from_file(cls, path: str | Path, child: str = "") -> ScriptedModel:
        """Read a script (``child``: the labels down to a sub-agent's part, ``child-1/child-2``);
        raises ValueError naming the file and the problem."""
        path = Path(path)
        try:
            raw = _part(storable_json(json.loads(path.read_text(encoding="utf-8"))), child)
            parsed = [_ScriptedReply.model_validate(item) for item in raw]
        except (OSError, ValueError, ValidationError) as exc:
            raise ValueError(f"cannot use the script {path}: {exc}") from None
        replies = [
            ModelReply(
                text=item.text,
                thinking=item.thinking,
                tool_calls=[ToolCallRequest(id=call.id or f"call_s{turn}_{index}", name=call.name,
                                            arguments=call.arguments)
                            for index, call in enumerate(item.tool_calls)],
                stop_reason="tool_use" if item.tool_calls else "end_turn",
                usage=item.usage or Usage(),
                model=f"scripted:{path.name}{'#' + child if child else ''}",
            )
            for turn, item in enumerate(parsed, start=1)
        ]
        return cls(replies, name=f"scripted:{path}{'#' + child if child else ''}")

    def reply(self, messages: list[Message], tools: list[ToolSpec], *,
              on_text: Callable[[str], None] | None = None) -> ModelReply:
        index = request_number(messages)
        if index >= len(self.replies):
            raise ModelError(f"the script has no reply #{index + 1} (it has {len(self.replies)})")
        reply = self.replies[index]
        scripted_usage = reply.usage != Usage()
        if on_text is not None and reply.text:
            on_text(reply.text)  # the whole text at once: a script has nothing to stream
        if scripted_usage:
            return reply
        # Rough usage, so loops and audits have numbers to show.
        size = sum(map(len, map(_CONTENT, messages)))
        return reply.model_copy(update={"usage": Usage(input_tokens=size // 4, output_tokens=len(reply.text) // 4)})
