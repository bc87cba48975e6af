"""Anthropic's Messages API (``POST {base_url}/v1/messages``), whole or streamed.

The transport (retries, ``Retry-After``, the key, cleaning what comes back) is
:mod:`zagent_core.agent.models.http`'s. Here: how the Messages API spells a conversation and a
reply. Roles alternate, so a reply's tool results go in one user message of
``tool_result`` blocks (the notes that follow them join it, after the results), and the
files a result attached go inside its ``tool_result``: images (JPEG, PNG, GIF, WebP, up
to 5 MB) as ``image`` blocks, PDFs (up to 32 MB) as ``document`` blocks; other files are
dropped with a line in the result's text saying so. A streamed reply (``stream: true``)
is folded from its events into the message a whole one would have been; a stream that
ends before ``message_stop``, or reports ``overloaded_error`` / ``api_error``, is asked again.

Prompt caching: four ``cache_control`` breakpoints (the API's maximum), on the last tool
definition, the system block, the last block of the previous request's last message
and the last block of this request's last message. The API caches the prefix up to each
breakpoint; tools and system never change within a session and the conversation is only
ever appended to (notes come at its end, the system prompt is never edited), so each
request reads the whole of the previous one from the cache and writes only what is new.
The breakpoint on the previous request's end makes that read certain even when a reply's
results add more blocks than the API looks back over from the last breakpoint.

Extended thinking (``model.thinking``): ``thinking: {type: enabled, budget_tokens}``, with
``max_tokens`` raised above the budget when it is not. A reply's ``thinking`` and
``redacted_thinking`` blocks are journaled as sent and lead its assistant message, unchanged,
in every later request: the API checks their signatures, and requires them on the reply whose
tool calls the request answers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any, ClassVar
from urllib.parse import urlsplit

from zagent_core.agent.models import Message, ModelError, ModelReply, ToolCallRequest, ToolSpec, Usage
from zagent_core.agent.models.http import HTTPModel, StreamCut
from zagent_core.agent.models.media import NOTHING, MediaPolicy, Prepared, prepare_all
from zagent_core.config import ModelConfig, thinking_budget
from zagent_core.journal.parts import ThinkingBlock

DEFAULT_BASE_URL = "https://api.anthropic.com"


def default_max_tokens(model: str) -> int:
    """``max_tokens``, which the Messages API requires, when ``model.max_tokens`` is unset:
    Claude 3 answers at most 4,096 tokens, 3.5 and 3.7 8,192, later models more (16,384 is
    below all of their limits)."""
    if re.search(r"claude-3-(?!5|7)", model):
        return 4096
    return 8192 if re.search(r"claude-3-[57]", model) else 16384

_STOP = {"end_turn": "end_turn", "tool_use": "tool_use", "max_tokens": "max_tokens",
         "stop_sequence": "end_turn", "refusal": "refused"}
#: What a ``tool_result`` carries: images in these formats up to 5 MB as base64 (3.75 MB of
#: file), PDFs up to 20 MB of file; in one request at most 100 images and documents, and 22 MB
#: of files (30 MB as base64: the API refuses requests over 32 MB).
MEDIA = MediaPolicy(provider="anthropic", limits={"image": 5 * 1024 * 1024 * 3 // 4, "pdf": 20 * 1024 * 1024},
                    types={"image": ("image/jpeg", "image/png", "image/gif", "image/webp")},
                    max_files=100, max_bytes=22 * 1024 * 1024)
#: Errors a stream may report midway that asking again can get past.
_PASSING_ERRORS = ("overloaded_error", "api_error")
#: Said instead of nothing: the API refuses empty text blocks and empty messages.
NO_OUTPUT = "(no output)"
_EMPTY = "(empty)"
_CACHE = {"type": "ephemeral"}
_THINKING = ("thinking", "redacted_thinking")
#: What a reply may still say once thinking took its budget, when ``max_tokens`` leaves no room.
ANSWER_ROOM = 4096


def _text(text: str) -> list[dict[str, Any]]:
    """A text block, or none for text that is empty or only white space (the API refuses both)."""
    return [{"type": "text", "text": text}] if text.strip() else []


def _tool_result(message: Message, prepared: Prepared) -> dict[str, Any]:
    text = prepared.text_with_notes(message.content if message.content.strip() else NO_OUTPUT)
    content: str | list[dict[str, Any]] = text
    if prepared.attachments:
        content = [*_text(text), *(
            {"type": "image" if attachment.kind == "image" else "document",
             "source": {"type": "base64", "media_type": attachment.media.mime, "data": attachment.data}}
            for attachment in prepared.attachments)]
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id, "content": content}
    if message.is_error:
        block["is_error"] = True
    return block


def _blocks(message: Message, prepared: Prepared) -> list[dict[str, Any]]:
    if message.role == "tool":
        return [_tool_result(message, prepared)]
    if message.role == "assistant":
        return [*_thinking(message.thinking), *_text(message.content),
                *({"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
                  for call in message.tool_calls)]
    return _text(message.content)


def _thinking(blocks: list[ThinkingBlock]) -> list[dict[str, Any]]:
    """A reply's thinking blocks as the API sent them: it checks each signature (a redacted
    block's data) and refuses a block that changed."""
    return [{"type": "redacted_thinking", "data": block.data} if block.type == "redacted_thinking"
            else {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
            for block in blocks]


def _thought(block: dict[str, Any]) -> ThinkingBlock:
    if block["type"] == "redacted_thinking":
        return ThinkingBlock(type="redacted_thinking", data=block["data"])
    return ThinkingBlock(thinking=block.get("thinking", ""), signature=block.get("signature", ""))


def _wire_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """The conversation (without its system message) as alternating user/assistant
    messages of content blocks: consecutive messages of one role merged, tool results
    as the user's."""
    wire: list[dict[str, Any]] = []
    media = prepare_all(messages, MEDIA)
    ids = _ToolUseIds()
    for index, message in enumerate(messages):
        if message.role == "system":
            continue
        message = ids.spelled(message)
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message, media.get(index, NOTHING))
        if wire and wire[-1]["role"] == role:
            # Thinking may only lead an assistant message: a reply joined to the one before
            # (no user message between them) goes without its own.
            wire[-1]["content"].extend(block for block in blocks if block["type"] not in _THINKING)
        else:
            wire.append({"role": role, "content": blocks})
    for entry in wire:
        entry["content"] = entry["content"] or _text(_EMPTY)
    return wire


class _ToolUseIds:
    """Tool call ids as the Messages API takes them (``^[a-zA-Z0-9_-]+$``, unique in the
    conversation), whoever made them: a session begun with another provider may have ids
    such as ``functions.ls:0``, or the same ``call_0`` in every reply. Each reply's calls get
    their spelling in turn, and the results after that reply answer with the same."""

    def __init__(self) -> None:
        self._used: set[str] = set()
        self._latest: dict[str, str] = {}  # the latest reply's ids, as sent

    def spelled(self, message: Message) -> Message:
        if message.role == "assistant" and message.tool_calls:
            self._latest = {}
            calls = []
            for call in message.tool_calls:
                wire = base = re.sub(r"[^a-zA-Z0-9_-]", "_", call.id) or "call"
                number = 1
                while wire in self._used:
                    number += 1
                    wire = f"{base}_{number}"
                self._used.add(wire)
                self._latest[call.id] = wire
                calls.append(call if wire == call.id else call.model_copy(update={"id": wire}))
            # Ids already as the API takes them (its own are) leave the message as it is: no copy
            # per message and request.
            if all(new is old for new, old in zip(calls, message.tool_calls)):
                return message
            return message.model_copy(update={"tool_calls": calls})
        answered = self._latest.get(message.tool_call_id or "") if message.role == "tool" else None
        if answered is not None and answered != message.tool_call_id:
            return message.model_copy(update={"tool_call_id": answered})
        return message


def _mark_cached(wire: list[dict[str, Any]]) -> None:
    """Breakpoints on the last block of the last message and of the previous request's
    last message (the user message before the last reply)."""
    for entry in wire[-1:] + wire[-3:-2]:
        entry["content"][-1] = {**entry["content"][-1], "cache_control": _CACHE}


def _tool_input(block: dict[str, Any], partial_json: str) -> Any:
    """A streamed tool call's input: its JSON pieces parsed, as sent if they are not JSON
    (validation says what is wrong), the start block's ``input`` if none came."""
    if not partial_json.strip():
        return block.get("input", {})
    try:
        return json.loads(partial_json)
    except ValueError:
        return partial_json


class _Stream:
    """A streamed reply folded into the message a whole one would have been."""

    def __init__(self, on_text: Callable[[str], None]) -> None:
        self.on_text = on_text
        self.message: dict[str, Any] = {}
        self.blocks: dict[int, dict[str, Any]] = {}
        self.partial_json: dict[int, list[str]] = {}

    def read(self, events: Iterator[tuple[str, Any]]) -> dict[str, Any]:
        for name, data in events:
            if not isinstance(data, dict):
                raise TypeError(f"the data of a {name} event is not an object: {data!r:.80}")
            kind = data.get("type", name)
            if kind == "message_start":
                self.message = dict(data["message"])
                self.message["usage"] = dict(self.message.get("usage") or {})
            elif kind == "content_block_start":
                self.blocks[data["index"]] = dict(data["content_block"])
            elif kind == "content_block_delta":
                self._delta(data["index"], data["delta"])
            elif kind == "content_block_stop":
                self._stop(data["index"])
            elif kind == "message_delta":
                self.message.update({key: value for key, value in (data.get("delta") or {}).items()
                                     if value is not None})
                self.message["usage"].update({key: value for key, value in (data.get("usage") or {}).items()
                                              if value is not None})
            elif kind == "message_stop":
                return {**self.message, "content": [self.blocks[i] for i in sorted(self.blocks)]}
            elif kind == "error":
                error = data.get("error") or {}
                if error.get("type") in _PASSING_ERRORS:
                    raise StreamCut(f"the stream reported {error.get('type')}: {error.get('message', '')}")
                raise _StreamError(f"{error.get('type', 'error')}: {error.get('message', data)}")
            # ping, and event types added later: nothing to fold
        raise StreamCut("the stream ended before message_stop")

    def _delta(self, index: int, delta: dict[str, Any]) -> None:
        block = self.blocks[index]
        if delta.get("type") == "text_delta":
            block["text"] = block.get("text", "") + delta["text"]
            self.on_text(delta["text"])
        elif delta.get("type") == "input_json_delta":
            self.partial_json.setdefault(index, []).append(delta["partial_json"])
        elif delta.get("type") == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + delta["thinking"]
        elif delta.get("type") == "signature_delta":
            block["signature"] = block.get("signature", "") + delta["signature"]

    def _stop(self, index: int) -> None:
        block = self.blocks[index]
        if block.get("type") == "tool_use":
            block["input"] = _tool_input(block, "".join(self.partial_json.pop(index, [])))


class _StreamError(Exception):
    """The stream reported an error that asking again will not get past."""


#: Where config.json keeps anthropic:'s own settings (its base URL, the variable of its key).
_SETTINGS = "model.anthropic"


class AnthropicModel(HTTPModel):
    """``anthropic:MODEL``: base URL and key from the arguments, else ``model.anthropic.base_url`` /
    ``ANTHROPIC_BASE_URL`` (without ``/v1``, as Anthropic's SDKs take it) and the first of
    the variables ``model.anthropic.api_key_env``, ``ANTHROPIC_API_KEY``, ``ZAGENT_API_KEY`` that is set."""

    provider: ClassVar[str] = "anthropic"
    path: ClassVar[str] = "/v1/messages"
    default_base_url: ClassVar[str] = DEFAULT_BASE_URL
    base_url_env: ClassVar[str] = "ANTHROPIC_BASE_URL"
    key_env: ClassVar[str] = "ANTHROPIC_API_KEY"

    def _configured(self, config: ModelConfig) -> tuple[str | None, str | None]:
        return config.anthropic.base_url, config.anthropic.api_key_env

    def _headers(self) -> dict[str, str]:
        headers = {"anthropic-version": self.config.anthropic.version}
        if self.api_key:
            headers["x-api-key"] = self.api_key
        return headers

    def _hint(self, status: int) -> str:
        """What to change, naming the settings anthropic: reads (``model.anthropic.*``, not ``openai:``'s ``model.*``)."""
        if status == 401:
            return (f"; the key was refused: set ANTHROPIC_API_KEY (or the variable {_SETTINGS}.api_key_env in "
                    "config.json names)" if self.api_key else
                    f"; no key was sent: set ANTHROPIC_API_KEY (or name the variable that holds it in "
                    f"{_SETTINGS}.api_key_env in config.json)")
        if status != 404:
            return ""
        if urlsplit(self.endpoint.base).path.rstrip("/").endswith("/v1"):
            return (f"; requests go to the base URL + /v1/messages: try the base URL {self.endpoint.base[:-3]} "
                    f"(ANTHROPIC_BASE_URL, or {_SETTINGS}.base_url in config.json)")
        return f'; check the model name ("{self.model}" in anthropic:MODEL)'

    def request(self, messages: list[Message], tools: list[ToolSpec], *, stream: bool = False) -> dict[str, Any]:
        """The request body for ``messages`` (what a test checks against the documented shape)."""
        body: dict[str, Any] = {"model": self.model, "max_tokens": self.config.max_tokens or default_max_tokens(self.model)}
        budget = thinking_budget(self.config.thinking)
        if budget:
            # The API asks for 1,024 <= budget_tokens < max_tokens: room for the answer is made.
            body["thinking"] = {"type": "enabled", "budget_tokens": budget}
            if body["max_tokens"] <= budget:
                body["max_tokens"] = budget + ANSWER_ROOM
        system = "\n".join(message.content for message in messages if message.role == "system")
        if system:
            body["system"] = [{"type": "text", "text": system, "cache_control": _CACHE}]
        if tools:
            body["tools"] = [{"name": spec.name, "description": spec.description, "input_schema": spec.parameters}
                             for spec in tools]
            body["tools"][-1]["cache_control"] = _CACHE
        wire = _wire_messages(messages)
        _mark_cached(wire)
        body["messages"] = wire
        if self.config.temperature is not None:
            if self.config.temperature > 1:
                raise ModelError(f"model.temperature is {self.config.temperature} in config.json; the Messages API "
                                 "takes 0 to 1: set it within that")
            if budget:
                raise ModelError(f"model.temperature is {self.config.temperature} and model.thinking is "
                                 f"{self.config.thinking!r} in config.json; the Messages API takes no temperature "
                                 "with thinking: remove one of them")
            body["temperature"] = self.config.temperature
        if stream:
            body["stream"] = True
        return body

    def _fold(self, events: Iterator[tuple[str, Any]], on_text: Callable[[str], None]) -> Any:
        try:
            return _Stream(on_text).read(events)
        except _StreamError as exc:
            raise self._error(f"{self.shown_url} reported an error midway through the reply: {exc}") from None
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise self._error(f"the reply of {self.shown_url} is not a Messages API event stream: {exc!r}") from None

    def _reply(self, answer: Any) -> ModelReply:
        try:
            if answer.get("type") == "error":
                raise ValueError(f"it is an error: {answer.get('error')}")
            content = answer["content"]
            if not isinstance(content, list):
                raise TypeError(f"its content is not a list of blocks: {content!r:.80}")
            calls = [ToolCallRequest(id=block["id"], name=block["name"], arguments=block.get("input", {}))
                     for block in content if block["type"] == "tool_use"]
            usage = answer.get("usage") or {}
            stop = answer.get("stop_reason") or "end_turn"
            return ModelReply(
                text="".join(block["text"] for block in content if block["type"] == "text"),
                thinking=[_thought(block) for block in content if block["type"] in _THINKING],
                tool_calls=calls,
                stop_reason=_STOP.get(stop, stop),
                usage=Usage(input_tokens=usage.get("input_tokens") or 0,
                            output_tokens=usage.get("output_tokens") or 0,
                            cache_read_tokens=usage.get("cache_read_input_tokens") or 0,
                            cache_creation_tokens=usage.get("cache_creation_input_tokens") or 0),
                model=answer.get("model") or self.model,
            )
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
            raise self._error(f"the reply of {self.shown_url} is not a Messages API message: {exc!r}") from None
