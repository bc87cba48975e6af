"""The model side of the agent loop: what a model is asked, what it answers, and providers.

A :class:`Model` gets the conversation so far and the tool specs (name, description,
parameters: exactly what the manifest reference says the model sees) and returns a
:class:`ModelReply`: text and/or tool calls, a stop reason, token usage. Given ``on_text``,
a provider that streams hands it the reply's text as it arrives; the reply itself is
returned (and journaled) only once it is complete. Providers: ``scripted`` (replies from
a JSON file; no key, no network), ``openai`` (any OpenAI-compatible Chat Completions
endpoint) and ``anthropic`` (the Messages API).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from zagent_core.config import ModelConfig
from zagent_core.errors import ZagentError
from zagent_core.journal.events import Media, ModelReplied, RepliedCall
from zagent_core.journal.parts import ThinkingBlock


class ToolSpec(BaseModel):
    """A tool as the model sees it."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    parameters: dict[str, Any]


class ToolCallRequest(BaseModel):
    """One tool call the model asked for."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    #: Usually an object; whatever the model sent, validation says what is wrong with it.
    arguments: Any


class Usage(BaseModel):
    model_config = ConfigDict(frozen=True)

    #: Input tokens not read from the cache nor written to it (OpenAI's ``prompt_tokens`` less its cached ones).
    input_tokens: int = 0
    output_tokens: int = 0
    #: Prompt caching: input tokens read from the cache, and written to it (Anthropic's only).
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0


class ModelReply(BaseModel):
    """What the model answered to one request."""

    model_config = ConfigDict(frozen=True)

    text: str = ""
    #: Anthropic's thinking blocks, in order, as sent: the next requests of the turn send them back unchanged.
    thinking: list[ThinkingBlock] = Field(default_factory=list)
    tool_calls: list[ToolCallRequest] = Field(default_factory=list)
    #: ``end_turn`` (no tool call: the agent is idle), ``tool_use``, ``max_tokens``, ...
    stop_reason: str = "end_turn"
    usage: Usage = Usage()
    model: str = ""

    def journaled(self, duration_ms: int) -> ModelReplied:
        """This reply as the journal keeps it (each call's journal id its own until the session
        gives it a unique one: :meth:`~zagent_core.session.engine.Session.record_reply`)."""
        return ModelReplied(
            model=self.model, text=self.text, thinking=self.thinking, stop_reason=self.stop_reason,
            tool_calls=[RepliedCall(id=call.id, call_id=call.id, name=call.name, arguments=call.arguments)
                        for call in self.tool_calls],
            input_tokens=self.usage.input_tokens, output_tokens=self.usage.output_tokens,
            cache_read_tokens=self.usage.cache_read_tokens, cache_creation_tokens=self.usage.cache_creation_tokens,
            duration_ms=duration_ms)


class Message(BaseModel):
    """One entry of the conversation, provider-neutral."""

    model_config = ConfigDict(frozen=True)

    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    #: assistant messages: the thinking blocks that came before its text, as the provider sent them.
    thinking: list[ThinkingBlock] = Field(default_factory=list)
    #: assistant messages: the calls it made.
    tool_calls: list[ToolCallRequest] = Field(default_factory=list)
    #: tool messages: which call this is the result of.
    tool_call_id: str | None = None
    is_error: bool = False
    #: tool messages: the files the result attached for the model to see (read when sent).
    media: list[Media] = Field(default_factory=list)
    #: A summary (or a note that earlier messages were left out): the model requests of the
    #: session it stands for, so a model that answers by count (scripted, replayed) counts them.
    requests_before: int = 0


def request_number(messages: list[Message]) -> int:
    """How many model requests came before the one ``messages`` make: a scripted or replayed
    model answers it with its answer of that index."""
    # At C speed (map, count): it is asked for each request of a session that only grows.
    roles = list(map(_ROLE, messages))
    return roles.count("assistant") + sum(map(_REQUESTS_BEFORE, messages))


_ROLE = operator.attrgetter("role")
_REQUESTS_BEFORE = operator.attrgetter("requests_before")




class ModelError(ZagentError, RuntimeError):
    """The model could not be asked (network, HTTP error after retries, bad response, script ended)."""


class ContextTooLongError(ModelError):
    """The provider refused the request as longer than the model's context window: one
    compaction and one more try can get past it."""


@runtime_checkable
class Model(Protocol):
    """Anything that answers a conversation."""

    name: str

    def reply(self, messages: list[Message], tools: list[ToolSpec], *,
              on_text: Callable[[str], None] | None = None) -> ModelReply:
        """The next reply to ``messages``; raises :class:`ModelError` when it cannot.

        ``on_text`` is given the reply's text piece by piece as it arrives (all at once
        where the model does not stream)."""
        ...


def load_model(spec: str, config: ModelConfig | None = None) -> Model:
    """A model from ``scripted:PATH``, ``openai:MODEL`` or ``anthropic:MODEL``.

    Raises ValueError saying what to write."""
    kind, _, rest = spec.partition(":")
    if kind == "scripted" and rest:
        from zagent_core.agent.models.scripted import ScriptedModel

        path, _, child = rest.partition("#")
        return ScriptedModel.from_file(path, child)
    if kind == "openai" and rest:
        from zagent_core.agent.models.openai import OpenAIModel

        return OpenAIModel(rest, config=config or ModelConfig())
    if kind == "anthropic" and rest:
        from zagent_core.agent.models.anthropic import AnthropicModel

        return AnthropicModel(rest, config=config or ModelConfig())
    raise ValueError(f'model "{spec}" is not one zagent knows; use scripted:PATH (replies from a JSON file), '
                     "openai:MODEL (an OpenAI-compatible endpoint) or anthropic:MODEL (Anthropic's Messages API)")
