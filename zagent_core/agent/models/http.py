"""What the HTTP providers share: where the API is, the key, retries, streams, and cleaning.

Standard library HTTP (no client dependency), a timeout per request, and retries with
backoff on 429 and 5xx (honouring ``Retry-After``), on connection failures and on a
stream cut before its end, each one logged as a warning (the CLI prints it on stderr), so
a wait is never silent. Requests say who sends them (``User-Agent: zagent/VERSION``).

The key is taken from the environment once (:mod:`zagent_core.tools.credentials`), and
everything the server sends back is cleaned before zagent keeps or shows it: a server
that echoes the key gets ``[redacted]`` in the error text and in the reply, and text no
UTF-8 can hold (a lone surrogate from a ``"\\ud800"`` escape) becomes U+FFFD.

A provider (:class:`HTTPModel`'s subclass) only says how its API spells a request and a
reply; :meth:`HTTPModel._send` posts it and hands the response to the provider's reader,
whole (:func:`read_json`) or as server-sent events (:func:`sse_events`).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, TypeVar

from zagent_core.agent.models import ContextTooLongError, Message, ModelError, ModelReply, ToolSpec
from zagent_core.agent.models.endpoint import Endpoint
from zagent_core.config import ModelConfig
from zagent_core.logs import get_logger
from zagent_core.tools import credentials
from zagent_core.tools.text import storable_json
from zagent_core.version import zagent_version

REDACTED = credentials.REDACTED
#: How much of an HTTP error's body is read (to redact it whole) and how much is shown.
_ERROR_READ, _ERROR_SHOWN = 65536, 300
#: How providers say a request is longer than the model's window (OpenAI's error code and
#: message, Anthropic's message, and what OpenAI-compatible servers copy of them).
_TOO_LONG = re.compile(r"context_length_exceeded|prompt is too long|maximum context length", re.I)
#: The longest ``Retry-After`` honoured, in seconds.
_MAX_RETRY_AFTER = 60.0
log = get_logger(__name__)

T = TypeVar("T")

#: What a broken connection looks like while a response is read.
_CUT = (http.client.HTTPException, ConnectionError, TimeoutError, OSError)


class StreamCut(Exception):
    """The response ended (or broke) before the reply was complete: asked again, like a lost connection."""


def read_json(response: http.client.HTTPResponse) -> Any:
    """A whole JSON response; a connection lost while reading it is a :class:`StreamCut`."""
    try:
        body = response.read()
    except _CUT as exc:
        raise StreamCut(f"the connection broke while the reply was read: {exc}") from None
    return json.loads(body)


def sse_events(response: http.client.HTTPResponse) -> Iterator[tuple[str, Any]]:
    """The server-sent events of ``response`` as ``(event name, data)``, data parsed as JSON
    (``[DONE]``, OpenAI's end mark, comes as the text itself).

    Only complete events count: an event is dispatched at its blank line (or, the last one,
    at the end of the stream if its data is whole JSON), so one cut off in the middle is
    never half-read. A connection that breaks is a :class:`StreamCut`.
    """
    name, data = "", list[str]()
    try:
        for raw in response:
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if not line:
                if data:
                    yield name or "message", _data(data)
                name, data = "", list[str]()
            elif not line.startswith(":"):  # a comment (keep-alive) otherwise
                field, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if field == "event":
                    name = value
                elif field == "data":
                    data.append(value)
    except _CUT as exc:
        raise StreamCut(f"the stream broke: {exc}") from None
    if data:  # the last event had no blank line after it: whole if its data parses, else cut off
        try:
            last = _data(data)
        except ValueError:
            raise StreamCut("the stream ended in the middle of an event") from None
        yield name or "message", last


def _data(lines: list[str]) -> Any:
    """An event's data lines as one JSON value (``[DONE]``, OpenAI's end mark, as the text itself)."""
    text = "\n".join(lines)
    return text if text == "[DONE]" else json.loads(text)


def _ignored(text: str) -> None:
    """The streamed text when no one is shown it (the reply is returned whole)."""


class TextRelay:
    """What a provider hands ``on_text`` of a streamed reply: each piece as the journal
    will keep the reply (``clean``: storable text, the key redacted), with a tail that
    could be the start of the key (``secret``) held back until the next piece tells.

    A request asked again after its stream broke off starts the reply over: ``on_text``
    is then called with ``""`` (what it was given of the reply is void) before the new
    attempt's pieces.
    """

    def __init__(self, on_text: Callable[[str], None], clean: Callable[[str], str], secret: str) -> None:
        self._on_text, self._clean, self._secret = on_text, clean, secret
        self._pending = ""  # cleaned text not handed on yet: it may end with the start of the key
        self._given = False  # anything handed on in this attempt
        self._streamed = False  # any piece came in this attempt

    def piece(self, text: str) -> None:
        self._streamed = True
        pending = self._clean(self._pending + text)
        held = next((size for size in range(min(len(self._secret) - 1, len(pending)), 0, -1)
                     if pending.endswith(self._secret[:size])), 0)
        self._pending = pending[len(pending) - held:] if held else ""
        self._give(pending[:len(pending) - held])

    def restart(self) -> None:
        if self._given:
            self._on_text("")
        self._pending, self._given, self._streamed = "", False, False

    def finish(self, text: str) -> None:
        """The reply is complete (``text``: all of it, cleaned): the held-back tail, or, when
        nothing streamed (a server that answered whole), the whole text."""
        self._give(self._pending if self._streamed else text)
        self._pending = ""

    def _give(self, text: str) -> None:
        if text:
            self._given = True
            self._on_text(text)


class HTTPModel:
    """A model behind an HTTP API: base URL, key, timeout, retries and sampling from
    :class:`ModelConfig`, each overridable by an argument (tests and the Python API).

    A provider says where its API is (``path``), how it spells a request
    (:meth:`request`), a whole reply (:meth:`_reply`) and a stream (:meth:`_fold`);
    :meth:`reply` is the same for all: streamed while ``model.stream`` is on (``on_text``,
    if given, sees the text as it arrives), whole otherwise, and whole from a server that
    answers a stream request with a whole reply.
    """

    #: Where requests are posted, after the base URL.
    path: ClassVar[str]

    #: ``openai``, ``anthropic``: the spec's prefix.
    provider: ClassVar[str]
    default_base_url: ClassVar[str]
    #: Where the base URL comes from when neither an argument nor ``model.base_url`` gives it.
    base_url_env: ClassVar[str]
    #: The provider's own key variable, looked at after the configured one and before ``ZAGENT_API_KEY``.
    key_env: ClassVar[str]

    def __init__(self, model: str, *, config: ModelConfig | None = None, base_url: str | None = None,
                 api_key: str | None = None, api_key_env: str | None = None, timeout: float | None = None,
                 max_retries: int | None = None, backoff: float = 0.5) -> None:
        config = config or ModelConfig()
        self.model = model
        self.name = f"{self.provider}:{model}"
        self.config = config
        configured_url, configured_key_env = self._configured(config)
        self.base_url = (base_url or configured_url or os.environ.get(self.base_url_env)
                         or self.default_base_url).rstrip("/")
        self.endpoint = Endpoint.parse(self.base_url)
        if api_key is None:
            api_key = credentials.take_model_key(api_key_env or configured_key_env, self.key_env)
        self.api_key = api_key or ""
        self.timeout = config.timeout_seconds if timeout is None else timeout
        self.max_retries = config.max_retries if max_retries is None else max_retries
        self.backoff = backoff

    def _clean(self, value: Any) -> Any:
        """A JSON value from the server, fit to journal and show: storable, the key redacted."""
        return credentials.redact(storable_json(value), self.api_key, REDACTED)

    def _error(self, problem: str) -> ModelError:
        return ModelError(self._clean(problem))

    @property
    def shown_url(self) -> str:
        """The base URL as it is journaled and shown: no userinfo, no query value."""
        return self.endpoint.shown

    def _clean_echo(self, text: str) -> str:
        """An error body, cleaned: servers echo the request line, so the URL's credentials go too."""
        for secret in self.endpoint.secrets:
            text = text.replace(secret, REDACTED)
        return str(self._clean(text))

    def _configured(self, config: ModelConfig) -> tuple[str | None, str | None]:
        """The provider's base URL and key variable as ``config.json`` gives them (None: unset)."""
        raise NotImplementedError

    def _headers(self) -> dict[str, str]:
        """The provider's own headers (its key, its version)."""
        raise NotImplementedError

    def _basic_auth(self) -> dict[str, str]:
        """The URL's ``user:password@`` as a header (in place of OpenAI's key, if both are given)."""
        return {"Authorization": self.endpoint.authorization} if self.endpoint.authorization else {}

    def request(self, messages: list[Message], tools: list[ToolSpec], *, stream: bool = False) -> dict[str, Any]:
        """The request body for ``messages`` (what a test checks against the documented shape)."""
        raise NotImplementedError

    def encoded(self, messages: list[Message], tools: list[ToolSpec], *, stream: bool = False) -> bytes:
        """:meth:`request`'s body as the JSON bytes sent."""
        return json.dumps(self.request(messages, tools, stream=stream)).encode()

    def _fold(self, events: Iterator[tuple[str, Any]], on_text: Callable[[str], None]) -> Any:
        """A streamed reply folded into the answer a whole one would have been; raises
        :class:`StreamCut` when the stream ends (or reports an error) before the reply is complete."""
        raise NotImplementedError

    def _reply(self, answer: Any) -> ModelReply:
        """The reply in a (cleaned) answer; raises :class:`ModelError` saying what is wrong with it."""
        raise NotImplementedError

    def reply(self, messages: list[Message], tools: list[ToolSpec], *,
              on_text: Callable[[str], None] | None = None) -> ModelReply:
        # Streamed even with no one to show it to: the timeout is then between two pieces,
        # so a long reply is not cut off (and asked again) by it.
        relay = TextRelay(on_text, self._clean, self.api_key) if on_text is not None else None

        def read(response: http.client.HTTPResponse) -> Any:
            if "text/event-stream" in (response.headers.get("Content-Type") or ""):
                return self._fold(sse_events(response), relay.piece if relay is not None else _ignored)
            return read_json(response)

        answer = self._send(self.path, self.encoded(messages, tools, stream=self.config.stream), read, relay)
        reply = self._reply(self._clean(answer))
        if relay is not None:
            relay.finish(reply.text)
        return reply

    def _hint(self, status: int) -> str:
        """What to change, for an HTTP error that will not go away by asking again."""
        return ""

    def _send(self, path: str, data: bytes, read: Callable[[http.client.HTTPResponse], T],
              relay: TextRelay | None = None) -> T:
        """POST ``data`` (a JSON body) to ``path`` and ``read`` the response, retrying what may pass
        (429, 5xx, a lost connection, a stream cut short: ``relay`` is told the reply starts over);
        raises :class:`ModelError` with what failed."""
        headers = {"Content-Type": "application/json", "User-Agent": f"zagent/{zagent_version()}", **self._headers(),
                   **self._basic_auth()}
        url, shown = self.endpoint.at(path), self.endpoint.shown_at(path)
        problem = ""
        for attempt in range(self.max_retries + 1):
            delay = self.backoff * 2**attempt
            try:
                request = urllib.request.Request(url, data=data, headers=headers, method="POST")
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    return read(response)
            except urllib.error.HTTPError as exc:
                try:
                    body_text = self._clean_echo(exc.read(_ERROR_READ).decode("utf-8", "replace"))
                except _CUT as broken:  # the error's own body broke off: the status still says what to do
                    body_text = f"(its body broke off: {broken!r})"
                problem = f"HTTP {exc.code} from {shown}: {body_text[:_ERROR_SHOWN]}"
                if exc.code != 429 and exc.code < 500:
                    if _TOO_LONG.search(body_text):
                        raise ContextTooLongError(self._clean(problem)) from None
                    raise self._error(problem + self._hint(exc.code)) from None
                retry_after = exc.headers.get("Retry-After") if exc.headers else None
                if retry_after and retry_after.replace(".", "", 1).isdigit():
                    delay = min(float(retry_after), _MAX_RETRY_AFTER)
            except StreamCut as exc:
                problem = f"{shown}: {exc}"
                if relay is not None:
                    relay.restart()
            except (urllib.error.URLError, http.client.HTTPException, TimeoutError, ConnectionError) as exc:
                problem = f"cannot reach {shown}: {self._clean_echo(str(getattr(exc, 'reason', exc)))}"
            except ValueError as exc:
                raise self._error(f"{shown} answered with something that is not JSON: {exc}") from None
            if attempt < self.max_retries:
                log.warning("model_request_retrying", problem=self._clean(problem), attempt=attempt + 1,
                            attempts=self.max_retries + 1, retry_in_seconds=delay)
                time.sleep(delay)
        raise self._error(f"{problem} (after {self.max_retries + 1} attempts)")
