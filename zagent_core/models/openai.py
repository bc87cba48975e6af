"""Any OpenAI-compatible Chat Completions endpoint: OpenAI, Ollama, vLLM, llama.cpp...

Standard library HTTP (no client dependency), a timeout per request, and retries with
backoff on 429 and 5xx (honouring ``Retry-After``) and on connection failures, each one
logged as a warning (the CLI prints it on stderr), so a wait is never silent. Requests say
who sends them (``User-Agent: zagent/VERSION``).

The key is taken from the environment once (:mod:`zagent_core.credentials`), and
everything the server sends back is cleaned before zagent keeps or shows it: a server
that echoes the key gets ``[redacted]`` in the error text and in the reply, and text no
UTF-8 can hold (a lone surrogate from a ``"\\ud800"`` escape) becomes U+FFFD.
"""

from __future__ import annotations

import http.client
import json
import os
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from zagent_core import credentials
from zagent_core.engine import zagent_version
from zagent_core.logs import get_logger
from zagent_core.models import Message, ModelError, ModelReply, ToolCallRequest, ToolSpec, Usage
from zagent_core.text import storable_json

DEFAULT_BASE_URL = "https://api.openai.com/v1"
REDACTED = "[redacted]"
#: How much of an HTTP error's body is read (to redact it whole) and how much is shown.
_ERROR_READ, _ERROR_SHOWN = 65536, 300
log = get_logger(__name__)

_STOP = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens", "content_filter": "refused"}


def _wire_message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        wire["content"] = message.content or None
        wire["tool_calls"] = [
            {"id": call.id, "type": "function",
             "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)}}
            for call in message.tool_calls
        ]
    return wire


def _arguments(text: Any) -> Any:
    """The model's arguments: a JSON object normally; what it sent otherwise (validation says why)."""
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text) if text.strip() else {}
    except ValueError:
        return text


class OpenAIModel:
    """``openai:MODEL``: base URL and key from the arguments, else ``OPENAI_BASE_URL`` and the
    first of the variables ``api_key_env``, ``ZAGENT_API_KEY``, ``OPENAI_API_KEY`` that is set
    (all three are then taken out of the environment: see :mod:`zagent_core.credentials`)."""

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None,
                 api_key_env: str = "OPENAI_API_KEY", timeout: float = 120.0, max_retries: int = 3,
                 backoff: float = 0.5) -> None:
        self.model = model
        self.name = f"openai:{model}"
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        if api_key is None:
            api_key = credentials.take_model_key(api_key_env)
        self.api_key = api_key or ""
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff

    def _clean(self, value: Any) -> Any:
        """A JSON value from the server, fit to journal and show: storable, the key redacted."""
        return credentials.redact(storable_json(value), self.api_key, REDACTED)

    def _error(self, problem: str) -> ModelError:
        return ModelError(self._clean(problem))

    def _not_found_hint(self) -> str:
        """For a 404: the usual cause, a base URL without the ``/v1`` the endpoints live under."""
        if urlsplit(self.base_url).path.rstrip("/").endswith("/v1"):
            return ""
        return (f"; OpenAI-compatible servers usually serve the API under /v1: try the base URL {self.base_url}/v1 "
                "(OPENAI_BASE_URL, or model.base_url in config.json)")

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json", "User-Agent": f"zagent/{zagent_version()}"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        url = f"{self.base_url}/chat/completions"
        problem = ""
        for attempt in range(self.max_retries + 1):
            delay = self.backoff * 2**attempt
            try:
                request = urllib.request.Request(url, data=data, headers=headers, method="POST")
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    return json.loads(response.read())
            except urllib.error.HTTPError as exc:
                detail = self._clean(exc.read(_ERROR_READ).decode("utf-8", "replace"))[:_ERROR_SHOWN]
                problem = f"HTTP {exc.code} from {url}: {detail}"
                if exc.code != 429 and exc.code < 500:
                    raise self._error(problem + (self._not_found_hint() if exc.code == 404 else "")) from None
                retry_after = exc.headers.get("Retry-After") if exc.headers else None
                if retry_after and retry_after.replace(".", "", 1).isdigit():
                    delay = min(float(retry_after), 60.0)
            except (urllib.error.URLError, http.client.HTTPException, TimeoutError, ConnectionError) as exc:
                problem = f"cannot reach {url}: {getattr(exc, 'reason', exc)}"
            except ValueError as exc:
                raise self._error(f"{url} answered with something that is not JSON: {exc}") from None
            if attempt < self.max_retries:
                log.warning("model_request_retrying", problem=self._clean(problem), attempt=attempt + 1,
                            attempts=self.max_retries + 1, retry_in_seconds=delay)
                time.sleep(delay)
        raise self._error(f"{problem} (after {self.max_retries + 1} attempts)")

    def reply(self, messages: list[Message], tools: list[ToolSpec]) -> ModelReply:
        body: dict[str, Any] = {"model": self.model, "messages": [_wire_message(m) for m in messages]}
        if tools:
            body["tools"] = [{"type": "function", "function": spec.model_dump()} for spec in tools]
        answer = self._clean(self._post(body))
        try:
            choice = answer["choices"][0]
            message = choice["message"]
            calls = [
                ToolCallRequest(id=call.get("id") or f"call_{index}", name=call["function"]["name"],
                                arguments=self._clean(_arguments(call["function"].get("arguments"))))
                for index, call in enumerate(message.get("tool_calls") or [])
            ]
            usage = answer.get("usage") or {}
            return ModelReply(
                text=message.get("content") or "",
                tool_calls=calls,
                stop_reason=_STOP.get(choice.get("finish_reason") or "", choice.get("finish_reason") or "end_turn"),
                usage=Usage(input_tokens=usage.get("prompt_tokens") or 0,
                            output_tokens=usage.get("completion_tokens") or 0),
                model=answer.get("model") or self.model,
            )
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
            raise self._error(f"the reply of {self.base_url} is not a chat completion: {exc!r}") from None
