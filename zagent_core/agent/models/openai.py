"""Any OpenAI-compatible Chat Completions endpoint: OpenAI, Ollama, vLLM, llama.cpp...

The transport (retries, ``Retry-After``, the key, cleaning what comes back) is
:mod:`zagent_core.agent.models.http`'s. Here: how Chat Completions spells a conversation and a
reply, whole or streamed (``stream: true``, its deltas folded into one reply, usage from
``stream_options.include_usage``; a stream that ends before ``[DONE]`` is asked again).

Tool messages of Chat Completions carry text only, so the images a tool result attached
go in a user message right after the reply's tool messages, as ``image_url`` data URLs
(what OpenAI's documentation does for images a tool produced); other kinds are dropped
with a line in the result's text saying so.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, TypeVar
from urllib.parse import urlsplit

from zagent_core.agent.models import Message, ModelReply, ToolCallRequest, ToolSpec, Usage
from zagent_core.agent.models.http import HTTPModel, StreamCut
from zagent_core.agent.models.media import NOTHING, Attachment, MediaPolicy, Prepared, prepare_all
from zagent_core.config import THINKING_BUDGETS, ModelConfig, Thinking, thinking_budget

DEFAULT_BASE_URL = "https://api.openai.com/v1"
T = TypeVar("T")

_STOP = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens", "content_filter": "refused"}
#: What Chat Completions takes in a user message: images in these formats, up to 20 MB each,
#: and in one request at most 50 of them and 30 MB of files (40 MB as base64; the API's cap is 50 MB).
MEDIA = MediaPolicy(provider="openai", limits={"image": 20 * 1024 * 1024},
                    types={"image": ("image/png", "image/jpeg", "image/gif", "image/webp")},
                    max_files=50, max_bytes=30 * 1024 * 1024)


def _wire_messages(messages: list[Message], entry: Callable[[Message, Prepared], T],
                   images: Callable[[list[tuple[Message, Attachment]]], T]) -> list[T]:
    """The conversation as Chat Completions takes it: tool results as ``tool`` messages, their
    images in one ``user`` message after the last tool message of the reply. Each message's own
    entry is ``entry(message, its media as prepared for this request)``, the images message
    ``images(...)``: the entries as dicts (:meth:`OpenAIModel.request`) or as JSON text."""
    wire: list[T] = []
    pending: list[tuple[Message, Attachment]] = []
    media = prepare_all(messages, MEDIA)
    for index, message in enumerate(messages):
        prepared = media.get(index, NOTHING)
        wire.append(entry(message, prepared))
        if message.role == "tool":
            pending += [(message, attachment) for attachment in prepared.attachments]
            if pending and (index + 1 == len(messages) or messages[index + 1].role != "tool"):
                wire.append(images(pending))
                pending = []
    return wire


def _entry(message: Message, prepared: Prepared) -> dict[str, Any]:
    """One message's own entry (its images, if any, go in the message after its reply's results)."""
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id,
                "content": prepared.text_with_notes(message.content)}
    entry: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        entry["content"] = message.content or None
        entry["tool_calls"] = [
            {"id": call.id, "type": "function",
             "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)}}
            for call in message.tool_calls
        ]
    return entry


def _images_message(attached: list[tuple[Message, Attachment]]) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    for message, attachment in attached:
        name = attachment.media.path.rsplit("/", 1)[-1]
        content.append({"type": "text", "text": f"[{name}, attached by the result of tool call {message.tool_call_id}]"})
        content.append({"type": "image_url",
                        "image_url": {"url": f"data:{attachment.media.mime};base64,{attachment.data}"}})
    return {"role": "user", "content": content}


def _arguments(text: Any) -> Any:
    """The model's arguments: a JSON object normally; what it sent otherwise (validation says why)."""
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text) if text.strip() else {}
    except ValueError:
        return text


class _Stream:
    """A streamed completion folded into the message a whole one would have held."""

    def __init__(self, on_text: Callable[[str], None]) -> None:
        self.on_text = on_text
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish: str | None = None
        self.usage: dict[str, Any] = {}
        self.model = ""

    def read(self, events: Iterator[tuple[str, Any]]) -> dict[str, Any]:
        for _, chunk in events:
            if chunk == "[DONE]":
                return self._answer()
            if not isinstance(chunk, dict):
                raise ValueError(f"a stream chunk is not an object: {chunk!r:.80}")
            if chunk.get("error"):  # a server that fails midway (overloaded): asked again
                error = chunk["error"]
                raise StreamCut(f"the stream reported an error: {error.get('message', error) if isinstance(error, dict) else error}")
            self.model = chunk.get("model") or self.model
            self.usage = chunk.get("usage") or self.usage
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta") or {}
                if delta.get("content"):
                    self.text.append(delta["content"])
                    self.on_text(delta["content"])
                for part in delta.get("tool_calls") or []:
                    call = self.calls.setdefault(part.get("index", len(self.calls)),
                                                 {"id": None, "function": {"name": "", "arguments": ""}})
                    call["id"] = part.get("id") or call["id"]
                    function = part.get("function") or {}
                    arguments = function.get("arguments") or ""
                    call["function"]["name"] += function.get("name") or ""
                    call["function"]["arguments"] += (arguments if isinstance(arguments, str)
                                                      else json.dumps(arguments))  # a server that sends an object
                self.finish = choice.get("finish_reason") or self.finish
        if self.finish is not None:  # some servers end a complete stream without [DONE], as the SDK allows
            return self._answer()
        raise StreamCut("the stream ended before [DONE]")

    def _answer(self) -> dict[str, Any]:
        message = {"content": "".join(self.text), "tool_calls": [self.calls[i] for i in sorted(self.calls)]}
        return {"model": self.model, "usage": self.usage,
                "choices": [{"message": message, "finish_reason": self.finish}]}


def reasoning_effort(thinking: Thinking) -> str | None:
    """Chat Completions' ``reasoning_effort`` for ``model.thinking``: a level as it is, a budget
    as the highest level whose budget it reaches (``low`` at least); None for ``off``: not sent."""
    budget = thinking_budget(thinking)
    if not budget:
        return None
    return max((level for level, tokens in THINKING_BUDGETS.items() if tokens and tokens <= budget),
               key=THINKING_BUDGETS.__getitem__, default="low")


class OpenAIModel(HTTPModel):
    """``openai:MODEL``: base URL and key from the arguments, else ``model.base_url`` /
    ``OPENAI_BASE_URL`` and the first of the variables ``model.api_key_env``,
    ``OPENAI_API_KEY``, ``ZAGENT_API_KEY`` that is set (every key variable is then taken out
    of the environment: see :mod:`zagent_core.tools.credentials`)."""

    provider: ClassVar[str] = "openai"
    path: ClassVar[str] = "/chat/completions"
    default_base_url: ClassVar[str] = DEFAULT_BASE_URL
    base_url_env: ClassVar[str] = "OPENAI_BASE_URL"
    key_env: ClassVar[str] = "OPENAI_API_KEY"

    def _configured(self, config: ModelConfig) -> tuple[str | None, str | None]:
        return config.base_url, config.api_key_env

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def _hint(self, status: int) -> str:
        """For a 404: the usual cause, a base URL without the ``/v1`` the endpoints live under."""
        if status != 404 or urlsplit(self.endpoint.base).path.rstrip("/").endswith("/v1"):
            return ""
        return (f"; OpenAI-compatible servers usually serve the API under /v1: try the base URL {self.endpoint.base}/v1 "
                "(OPENAI_BASE_URL, or model.base_url in config.json)")

    def __init__(self, model: str, **options: Any) -> None:
        super().__init__(model, **options)
        #: Each message's entry as JSON text, by the message's id (the message is kept with it, so
        #: the id is not another's): a conversation only grows, so a request serialises what is new.
        self._known: dict[int, tuple[Message, str]] = {}

    def request(self, messages: list[Message], tools: list[ToolSpec], *, stream: bool = False) -> dict[str, Any]:
        """The request body for ``messages`` (what a test checks against the documented shape)."""
        return self._request(_wire_messages(messages, _entry, _images_message), tools, stream)

    def encoded(self, messages: list[Message], tools: list[ToolSpec], *, stream: bool = False) -> bytes:
        """:meth:`request`'s body as JSON, the same bytes, with the entries of the messages sent
        before taken as they were serialised then (a message with files is made again: its files
        are read for each request)."""
        seen: dict[int, tuple[Message, str]] = {}

        def entry(message: Message, prepared: Prepared) -> str:
            if message.media:
                return json.dumps(_entry(message, prepared))
            known = self._known.get(id(message))
            if known is None or known[0] is not message:
                known = (message, json.dumps(_entry(message, prepared)))
            seen[id(message)] = known
            return known[1]

        parts = _wire_messages(messages, entry, lambda pending: json.dumps(_images_message(pending)))
        self._known = seen  # the messages no longer sent (compacted, cleared) are let go
        head = json.dumps(self._request([], tools, stream))
        # "messages" is the body's second key, after the model's name (a string, whose quotes are
        # escaped): the first '"messages": []' is the key's own.
        return head.replace('"messages": []', '"messages": [' + ", ".join(parts) + "]", 1).encode()

    def _request(self, wire: list[Any], tools: list[ToolSpec], stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": wire}
        if tools:
            body["tools"] = [{"type": "function", "function": spec.model_dump()} for spec in tools]
        if self.config.temperature is not None:
            body["temperature"] = self.config.temperature
        if self.config.max_tokens is not None:
            body["max_tokens"] = self.config.max_tokens
        effort = reasoning_effort(self.config.thinking)
        if effort is not None:
            body["reasoning_effort"] = effort
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    def _fold(self, events: Iterator[tuple[str, Any]], on_text: Callable[[str], None]) -> Any:
        try:
            return _Stream(on_text).read(events)
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise self._error(f"the stream of {self.shown_url} is not a chat completion's: {exc!r}") from None

    def _reply(self, answer: Any) -> ModelReply:
        try:
            choice = answer["choices"][0]
            message = choice["message"]
            calls = [
                ToolCallRequest(id=call.get("id") or f"call_{index}", name=call["function"]["name"],
                                arguments=self._clean(_arguments(call["function"].get("arguments"))))
                for index, call in enumerate(message.get("tool_calls") or [])
            ]
            usage = answer.get("usage") or {}
            # OpenAI counts cached input within prompt_tokens; zagent counts it apart, as Anthropic does.
            cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
            return ModelReply(
                text=message.get("content") or "",
                tool_calls=calls,
                stop_reason=_STOP.get(choice.get("finish_reason") or "", choice.get("finish_reason") or "end_turn"),
                usage=Usage(input_tokens=(usage.get("prompt_tokens") or 0) - cached, cache_read_tokens=cached,
                            output_tokens=usage.get("completion_tokens") or 0),
                model=answer.get("model") or self.model,
            )
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
            raise self._error(f"the reply of {self.shown_url} is not a chat completion: {exc!r}") from None
