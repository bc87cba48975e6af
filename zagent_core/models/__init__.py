"""The model side of the agent loop: what a model is asked, what it answers, and providers.

A :class:`Model` gets the conversation so far and the tool specs (name, description,
parameters: exactly what the manifest reference says the model sees) and returns a
:class:`ModelReply`: text and/or tool calls, a stop reason, token usage. Providers:
``scripted`` (replies from a JSON file; no key, no network) and ``openai`` (any
OpenAI-compatible Chat Completions endpoint).
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from zagent_core.config import ModelConfig


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

    input_tokens: int = 0
    output_tokens: int = 0


class ModelReply(BaseModel):
    """What the model answered to one request."""

    model_config = ConfigDict(frozen=True)

    text: str = ""
    tool_calls: list[ToolCallRequest] = Field(default_factory=list)
    #: ``end_turn`` (no tool call: the agent is idle), ``tool_use``, ``max_tokens``, ...
    stop_reason: str = "end_turn"
    usage: Usage = Usage()
    model: str = ""


class Message(BaseModel):
    """One entry of the conversation, provider-neutral."""

    model_config = ConfigDict(frozen=True)

    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    #: assistant messages: the calls it made.
    tool_calls: list[ToolCallRequest] = Field(default_factory=list)
    #: tool messages: which call this is the result of.
    tool_call_id: str | None = None
    is_error: bool = False


class ModelError(RuntimeError):
    """The model could not be asked (network, HTTP error after retries, bad response, script ended)."""


@runtime_checkable
class Model(Protocol):
    """Anything that answers a conversation."""

    name: str

    def reply(self, messages: list[Message], tools: list[ToolSpec]) -> ModelReply:
        """The next reply to ``messages``; raises :class:`ModelError` when it cannot."""
        ...


def load_model(spec: str, config: ModelConfig | None = None) -> Model:
    """A model from ``scripted:PATH`` or ``openai:MODEL``. Raises ValueError saying what to write."""
    kind, _, rest = spec.partition(":")
    if kind == "scripted" and rest:
        from zagent_core.models.scripted import ScriptedModel

        path, _, child = rest.partition("#")
        return ScriptedModel.from_file(path, child)
    if kind == "openai" and rest:
        from zagent_core.models.openai import OpenAIModel

        config = config or ModelConfig()
        return OpenAIModel(rest, base_url=config.base_url, api_key_env=config.api_key_env,
                           timeout=config.timeout_seconds, max_retries=config.max_retries)
    raise ValueError(f'model "{spec}" is not one zagent knows; use scripted:PATH (replies from a JSON file) or '
                     "openai:MODEL (an OpenAI-compatible endpoint)")
