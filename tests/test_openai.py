"""The openai provider against a real HTTP server on 127.0.0.1 speaking Chat Completions."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, PYTHON, python_tool
from test_calls import PNG_WRITER, tiny_png

from zagent_core import Engine, Home
from zagent_core.agent.loop import Agent
from zagent_core.config import CapabilitiesConfig, Config, ModelConfig
from zagent_core.journal.events import ModelReplied, ToolCallFinished, dump_event
from zagent_core.agent.models import Message, ModelError, ToolSpec, load_model
from zagent_core.agent.models.openai import OpenAIModel
from zagent_store import SQLiteJournal


@dataclass
class Queued:
    """One answer of the fake server: a whole body, or a stream of server-sent events
    (``events``: each a JSON value or ``"[DONE]"``), cut by closing the connection after
    ``cut_after`` events if given. ``gate``: ``(n, event)``, event ``n`` is sent once ``event``
    is set (what a test saw of the events before it); ``opened`` records that it was."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    events: list[Any] | None = None
    cut_after: int | None = None
    gate: tuple[int, threading.Event] | None = None
    opened: bool = False


class FakeServer:
    """Answers POST /v1/chat/completions from a queue of answers; records requests, headers and paths."""

    def __init__(self) -> None:
        self.responses: list[Queued] = []
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # streams go chunked, as OpenAI sends them

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                self.close_connection = True
                length = int(self.headers["Content-Length"])
                server.requests.append(json.loads(self.rfile.read(length)))
                server.headers.append(dict(self.headers))
                server.paths.append(self.path)
                queued = server.responses.pop(0)
                if queued.events is not None:
                    self._stream(queued)
                    return
                body = queued.body
                payload = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(queued.status)
                for key, value in queued.headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _stream(self, queued: Queued) -> None:
                self.send_response(queued.status)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                assert queued.events is not None
                for number, event in enumerate(queued.events):
                    if number == queued.cut_after:
                        return  # hang up in the middle: no [DONE], no last chunk
                    if queued.gate is not None and queued.gate[0] == number:
                        queued.opened = queued.gate[1].wait(30)
                    data = event if event == "[DONE]" else json.dumps(event)
                    line = f"data: {data}\n\n".encode()
                    # each event in two HTTP chunks: the client must join lines across them
                    for part in (line[: len(line) // 2], line[len(line) // 2:]):
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        # A short poll: shutdown() at the test's end waits for one.
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)

    def reply(self, status: int = 200, body: Any = None, headers: dict[str, str] | None = None) -> None:
        self.responses.append(Queued(status, body, headers or {}))

    def stream(self, events: list[Any], *, cut_after: int | None = None,
               gate: tuple[int, threading.Event] | None = None) -> Queued:
        self.responses.append(Queued(events=events, cut_after=cut_after, gate=gate))
        return self.responses[-1]


def completion(content: str | None = None, calls: list[tuple[str, str, str]] = (), finish: str = "stop") -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [{"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                                 for i, n, a in calls]
    return {"id": "x", "model": "test-model", "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7}}


@pytest.fixture
def server() -> Iterator[FakeServer]:
    fake = FakeServer()
    fake.thread.start()
    yield fake
    fake.httpd.shutdown()


def test_a_session_with_tool_calls_over_the_wire(server: FakeServer, tmp_path: Path) -> None:
    home = tmp_path / "home"
    shutil.copytree(EXAMPLES / "tools" / "word_count", home / "tools" / "word_count")
    manifest = home / "tools" / "word_count" / "word_count.json"
    manifest.write_text(manifest.read_text().replace('"python"', json.dumps(PYTHON)))
    server.reply(body=completion(None, [("call_a1", "word_count", '{"text": "b a b", "top": 0}')], "tool_calls"))
    server.reply(body=completion("Retrying.", [("call_a2", "word_count", '{"text": "b a b", "top": 1}')],
                                 "tool_calls"))
    server.reply(body=completion("Three words; b twice."))
    with SQLiteJournal(home / "journal.db") as journal:
        engine = Engine(Home(home), journal, workspace=tmp_path)
        session = engine.start_session("run")
        model = OpenAIModel("test-model", base_url=server.url, api_key="sk-test")
        result = Agent(session, model).run("count the words in 'b a b'")
    assert result.reason == "idle" and result.requests == 3
    first, second, third = server.requests
    assert first["model"] == "test-model"
    assert first["tools"][0]["function"]["name"] == "word_count"
    assert first["tools"][0]["function"]["parameters"]["required"] == ["text"]
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert server.headers[0]["Authorization"] == "Bearer sk-test"
    # the model's mistake came back as the tool result, tied to its call id
    tool_message = second["messages"][-1]
    assert tool_message == {"role": "tool", "tool_call_id": "call_a1",
                            "content": 'word_count was not run: its arguments do not match its parameters.\n'
                                       'argument "top": must be >= 1 (got 0)'}
    assert second["messages"][-2]["tool_calls"][0]["function"]["arguments"] == '{"text": "b a b", "top": 0}'
    assert third["messages"][-1]["content"].startswith("3 words")
    assert session.state.input_tokens == 33 and session.state.output_tokens == 21
    for body in server.requests:
        assert_chat_request(body)


def test_429_and_5xx_are_retried_honouring_retry_after(server: FakeServer) -> None:
    server.reply(429, {"error": "slow down"}, {"Retry-After": "0"})
    server.reply(503, "busy")
    server.reply(body=completion("fine"))
    model = OpenAIModel("m", base_url=server.url, api_key="", backoff=0.01)
    reply = model.reply([Message(role="user", content="hi")], [])
    assert reply.text == "fine" and reply.stop_reason == "end_turn" and len(server.requests) == 3
    assert "Authorization" not in server.headers[0]


def test_errors_that_retrying_cannot_fix_are_reported(server: FakeServer) -> None:
    server.reply(401, {"error": {"message": "bad key"}})
    with pytest.raises(ModelError, match="HTTP 401 .*bad key"):
        OpenAIModel("m", base_url=server.url, backoff=0.01).reply([Message(role="user", content="hi")], [])
    for _ in range(3):
        server.reply(500, "down")
    with pytest.raises(ModelError, match=r"HTTP 500 .*\(after 3 attempts\)"):
        OpenAIModel("m", base_url=server.url, backoff=0.01, max_retries=2).reply([], [])
    server.reply(200, "<html>not json</html>")
    with pytest.raises(ModelError, match="not JSON"):
        OpenAIModel("m", base_url=server.url).reply([], [])
    server.reply(200, {"choices": []})
    with pytest.raises(ModelError, match="not a chat completion"):
        OpenAIModel("m", base_url=server.url).reply([], [])


def test_an_unreachable_endpoint_is_a_clear_error() -> None:
    with pytest.raises(ModelError, match="cannot reach http://127.0.0.1:9/v1/chat/completions"):
        OpenAIModel("m", base_url="http://127.0.0.1:9/v1", max_retries=1, backoff=0.01).reply([], [])


def test_arguments_that_are_not_json_reach_validation_as_sent(server: FakeServer, tmp_path: Path) -> None:
    server.reply(body=completion(None, [("c1", "terminal", "{action: list")], "tool_calls"))
    server.reply(body=completion("ok"))
    with SQLiteJournal(tmp_path / "journal.db") as journal:
        engine = Engine(Home(tmp_path), journal, workspace=tmp_path, config=Config(model=ModelConfig()))
        session = engine.start_session("run")
        Agent(session, OpenAIModel("m", base_url=server.url)).run("list tasks")
    result = server.requests[1]["messages"][-1]["content"]
    assert "the arguments must be a JSON object, got string" in result


def test_the_tool_specs_are_what_the_seed_says_the_model_sees(server: FakeServer) -> None:
    server.reply(body=completion("hi"))
    spec = ToolSpec(name="t", description="does t", parameters={"type": "object", "properties": {}})
    OpenAIModel("m", base_url=server.url).reply([Message(role="user", content="x")], [spec])
    assert server.requests[0]["tools"] == [{"type": "function", "function": {
        "name": "t", "description": "does t", "parameters": {"type": "object", "properties": {}}}}]


def test_a_background_report_wakes_the_idle_agent_over_the_wire(server: FakeServer, tmp_path: Path) -> None:
    home = tmp_path / "home"
    shutil.copytree(EXAMPLES / "tools" / "slow_report", home / "tools" / "slow_report")
    manifest = home / "tools" / "slow_report" / "slow_report.json"
    manifest.write_text(manifest.read_text().replace('"python"', json.dumps(PYTHON)))
    server.reply(body=completion(None, [("r1", "slow_report", '{"topic": "wire", "seconds": 1}')], "tool_calls"))
    server.reply(body=completion("Started; I will report back."))
    server.reply(body=completion("The report is ready."))
    with SQLiteJournal(home / "journal.db") as journal:
        engine = Engine(Home(home), journal, workspace=tmp_path)
        session = engine.start_session("run")
        result = Agent(session, OpenAIModel("m", base_url=server.url)).run("report on wire", wait_minutes=1)
    assert result.reason == "idle" and len(server.requests) == 3
    for body in server.requests:
        assert_chat_request(body)
    woken = server.requests[2]["messages"]
    assert woken[-2] == {"role": "assistant", "content": "Started; I will report back."}
    assert woken[-1]["role"] == "user"
    assert woken[-1]["content"].splitlines()[:2] == ["[info: wire: 1/1 s of work done]",
                                                      "[info: task #1 (slow_report) finished:"]


def test_a_key_the_server_echoes_is_redacted_from_errors_and_replies(server: FakeServer) -> None:
    key = "sk-echo-0123456789"
    model = OpenAIModel("m", base_url=server.url, api_key=key, backoff=0.01, max_retries=1)
    server.reply(400, "x" * 280 + f" your key {key} is not valid here")
    with pytest.raises(ModelError) as refused:
        model.reply([], [])
    assert key not in str(refused.value) and key[:10] not in str(refused.value)
    for _ in range(2):
        server.reply(503, {"error": f"overloaded, {key}"})
    with pytest.raises(ModelError, match=r"overloaded, \[redacted\].*after 2 attempts") as busy:
        model.reply([], [])
    assert key not in str(busy.value)
    server.reply(body=completion(f"it is {key}", [("c1", "t", json.dumps({"path": f"/k/{key}"}))], "tool_calls"))
    reply = model.reply([], [])
    assert reply.text == "it is [redacted]" and reply.tool_calls[0].arguments == {"path": "/k/[redacted]"}


def _echo_tool(home: Path) -> None:
    tool = home / "tools" / "echo_stdin"
    shutil.copytree(EXAMPLES / "tools" / "echo_stdin", tool)
    manifest = tool / "echo_stdin.json"
    manifest.write_text(manifest.read_text().replace('"python"', json.dumps(PYTHON)))


@pytest.mark.parametrize("provider", ["openai", "scripted"])
def test_a_reply_with_a_lone_surrogate_is_journaled_as_u_fffd(server: FakeServer, tmp_path: Path,
                                                             provider: str) -> None:
    home = tmp_path / "home"
    _echo_tool(home)
    # Valid JSON that Python decodes to lone surrogates, in the text and in the arguments.
    arguments = json.dumps('{"name": "a\\ud800b"}')
    server.reply(body='{"model": "m", "choices": [{"message": {"content": "x\\ud800y", "tool_calls": '
                      '[{"id": "c\\ud800", "function": {"name": "echo_stdin", "arguments": ' + arguments + '}}]}, '
                      '"finish_reason": "tool_calls"}]}')
    server.reply(body=completion("done \ud800"))
    script = tmp_path / "script.json"
    script.write_text('[{"text": "x\\ud800y", "tool_calls": [{"name": "echo_stdin", '
                      '"arguments": {"name": "a\\ud800b"}}]}, {"text": "done \\udfff"}]')
    spec = "openai:m" if provider == "openai" else f"scripted:{script}"
    done = subprocess.run([PYTHON, "-m", "zagent_cli", "--home", str(home), "run", "--model", spec, "go"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={**os.environ, "OPENAI_BASE_URL": server.url})
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    with SQLiteJournal(home / "journal.db") as journal:
        (summary,) = journal.sessions()
        events = [stored.event for stored in journal.read(summary.session_id)]
    first, last = [e for e in events if isinstance(e, ModelReplied)]
    assert first.text == "x\ufffdy" and first.tool_calls[0].arguments == {"name": "a\ufffdb"}
    assert last.text == "done \ufffd"
    assert any(isinstance(e, ToolCallFinished) and "a\ufffdb" in e.output for e in events)


def _read_request(connection: socket.socket) -> None:
    received = b""
    while b"\r\n\r\n" not in received:
        received += connection.recv(65536)
    head, _, body = received.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length"))
    while len(body) < length:
        body += connection.recv(65536)


def test_an_answer_cut_short_is_retried_and_then_a_clear_error() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:  # promises 1000 bytes, sends 10, hangs up: http.client.IncompleteRead
        for _ in range(2):
            connection, _ = listener.accept()
            with connection:
                _read_request(connection)  # all of it: unread bytes would make the close a reset
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n{\"choices\"")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    model = OpenAIModel("m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=1, backoff=0.01)
    with pytest.raises(ModelError, match=r"broke while the reply was read: IncompleteRead.*\(after 2 attempts\)"):
        model.reply([], [])
    thread.join(10)
    listener.close()


def test_ctrl_c_abandons_a_request_in_flight_at_once_as_models_md_says(tmp_path: Path) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    asked, let_go = threading.Event(), threading.Event()

    def serve() -> None:  # reads the request and never answers
        connection, _ = listener.accept()
        with connection:
            _read_request(connection)
            asked.set()
            let_go.wait(60)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    home = tmp_path / "home"
    proc = subprocess.Popen([PYTHON, "-m", "zagent_cli", "--home", str(home), "run", "--model", "openai:m", "go"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OPENAI_BASE_URL": f"http://127.0.0.1:{listener.getsockname()[1]}/v1"})
    try:
        assert asked.wait(60), "the request never came"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=10)  # the server would hold it for 60 s
    finally:
        let_go.set()
        thread.join(10)
        listener.close()
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert "(turn stopped: interrupted)" in out and "[stopped; resume with: zagent resume " in err
    with SQLiteJournal(home / "journal.db") as journal:
        (summary,) = journal.sessions()
        kinds = [e.event.type for e in journal.read(summary.session_id)]
    assert "model_replied" not in kinds and kinds[-1] == "turn_ended"


def _zagent_run(home: Path, base_url: str, *, max_retries: int = 3) -> subprocess.CompletedProcess[str]:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.json").write_text(json.dumps({"model": {"max_retries": max_retries}}))
    return subprocess.run([PYTHON, "-m", "zagent_cli", "--home", str(home), "run", "--model", "openai:m", "go"],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "OPENAI_BASE_URL": base_url})


def test_a_404_from_a_base_url_without_v1_says_to_add_it_and_the_error_is_printed_once(
        server: FakeServer, tmp_path: Path) -> None:
    server.reply(404, {"error": "no such route"})
    root = server.url.removesuffix("/v1")
    done = _zagent_run(tmp_path / "home", root)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    shown = done.stdout + done.stderr
    assert f"try the base URL {root}/v1 (OPENAI_BASE_URL, or model.base_url in config.json)" in shown
    assert shown.count("HTTP 404") == 1, shown
    assert "[model_error after 0 model requests; session " in done.stderr
    server.reply(404, {"error": "no such model"})
    with pytest.raises(ModelError) as raised:  # with /v1 the 404 is about something else: no hint
        OpenAIModel("m", base_url=server.url).reply([], [])
    assert "/v1" not in str(raised.value).split(": ", 1)[1]


def test_requests_say_they_come_from_zagent_and_its_version(server: FakeServer) -> None:
    from importlib.metadata import version

    server.reply(body=completion("hi"))
    OpenAIModel("m", base_url=server.url).reply([Message(role="user", content="hi")], [])
    assert server.headers[0]["User-Agent"] == f"zagent/{version('zagent')}"


def test_a_refused_connection_says_it_is_retrying_once_per_attempt(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = _zagent_run(tmp_path / "home", f"http://127.0.0.1:{port}/v1", max_retries=1)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    retries = [line for line in done.stderr.splitlines() if "model_request_retrying" in line]
    assert len(retries) == 1 and "Connection refused" in retries[0] and "attempt=1 attempts=2" in retries[0], done.stderr
    assert (done.stdout + done.stderr).count("(after 2 attempts)") == 1


# -- the request as Chat Completions documents it --------------------------------------------

_PART_KEYS = {"text": {"type", "text"}, "image_url": {"type", "image_url"}}


def assert_chat_request(body: dict[str, Any]) -> None:
    """``body`` is a Chat Completions request as OpenAI documents it (POST /v1/chat/completions):
    system/user/assistant/tool messages; an assistant's ``tool_calls`` (id, ``function``, the
    arguments as a JSON string) answered, each, by the ``tool`` messages right after it, tied by
    ``tool_call_id`` and holding text; a user message's content a string or text and
    ``image_url`` parts."""
    assert set(body) <= {"model", "messages", "tools", "temperature", "max_tokens", "stream", "stream_options"}
    assert isinstance(body["model"], str) and body["messages"], body
    if "stream" in body:
        assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    for tool in body.get("tools", []):
        assert tool["type"] == "function" and set(tool["function"]) == {"name", "description", "parameters"}
    unanswered: list[str] = []  # the calls of the last assistant message without a tool message yet
    for number, message in enumerate(body["messages"]):
        role, content = message["role"], message.get("content")
        assert role == "tool" or not unanswered, f"message {number} ({role}) comes before the results of {unanswered}"
        if role == "system":
            assert set(message) == {"role", "content"} and isinstance(content, str)
        elif role == "user":
            assert set(message) == {"role", "content"}
            if not isinstance(content, str):
                assert content and all(set(part) == _PART_KEYS[part["type"]] for part in content), content
                for part in content:
                    if part["type"] == "image_url":
                        assert set(part["image_url"]) <= {"url", "detail"}
                        assert part["image_url"]["url"].startswith("data:image/")
                    else:
                        assert isinstance(part["text"], str)
        elif role == "assistant":
            assert set(message) <= {"role", "content", "tool_calls"}
            assert isinstance(content, str) or (content is None and message.get("tool_calls"))
            for call in message.get("tool_calls", []):
                assert set(call) == {"id", "type", "function"} and call["type"] == "function"
                assert set(call["function"]) == {"name", "arguments"}
                assert isinstance(call["function"]["arguments"], str)
                json.loads(call["function"]["arguments"])
                unanswered.append(call["id"])
        else:
            assert role == "tool" and set(message) == {"role", "tool_call_id", "content"}, message
            assert isinstance(content, str)
            assert message["tool_call_id"] in unanswered, f"tool message {number} answers no call before it"
            unanswered.remove(message["tool_call_id"])
    assert not unanswered, f"the request ends before the results of {unanswered}"


# -- streamed replies ------------------------------------------------------------------------


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **fields: Any) -> dict[str, Any]:
    """One ``chat.completion.chunk`` as OpenAI streams it (``usage`` null until the last one)."""
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {"id": "s", "object": "chat.completion.chunk", "model": "test-model", "choices": choices,
            "usage": None, **fields}


def text_stream(*pieces: str, finish: str = "stop") -> list[Any]:
    return [chunk({"role": "assistant", "content": ""}), *(chunk({"content": piece}) for piece in pieces),
            chunk({}, finish), USAGE, "[DONE]"]


USAGE = chunk(usage={"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18})


def call_delta(index: int, arguments: str, call_id: str | None = None, name: str | None = None) -> dict[str, Any]:
    part: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if call_id is not None:
        part.update(id=call_id, type="function")
        part["function"]["name"] = name
    return chunk({"tool_calls": [part]})


def _model(server: FakeServer, **config: Any) -> OpenAIModel:
    return OpenAIModel("test-model", base_url=server.url, api_key="sk-test", backoff=0.01,
                       config=ModelConfig(**config))


def test_a_streamed_reply_gives_its_text_as_it_arrives_and_is_the_reply_a_whole_one_is(server: FakeServer) -> None:
    count, echo = '{"text": "b a b", "top": 1}', '{"name": "x"}'
    server.stream([
        chunk({"role": "assistant", "content": None}),
        chunk({"content": "Let me "}), chunk({"content": "count "}), chunk({"content": "the words."}),
        call_delta(0, "", "call_s0", "word_count"), call_delta(0, '{"text": '), call_delta(0, '"b a b", '),
        call_delta(1, '{"name"', "call_s1", "echo_stdin"), call_delta(0, '"top": 1}'), call_delta(1, ': "x"}'),
        chunk({}, "tool_calls"), USAGE, "[DONE]",
    ])
    server.reply(body=completion("Let me count the words.", [("call_s0", "word_count", count),
                                                             ("call_s1", "echo_stdin", echo)], "tool_calls"))
    model, pieces = _model(server), list[str]()
    conversation = [Message(role="user", content="count the words in 'b a b'")]
    streamed = model.reply(conversation, [], on_text=pieces.append)
    whole = model.reply(conversation, [])
    assert pieces == ["Let me ", "count ", "the words."]
    assert streamed == whole
    assert [(c.id, c.name, c.arguments) for c in streamed.tool_calls] == [
        ("call_s0", "word_count", {"text": "b a b", "top": 1}), ("call_s1", "echo_stdin", {"name": "x"})]
    assert streamed.stop_reason == "tool_use" and (streamed.usage.input_tokens, streamed.usage.output_tokens) == (11, 7)
    asked, plain = server.requests
    assert asked["stream"] is True and asked["stream_options"] == {"include_usage": True}
    assert plain == asked  # no on_text: streamed all the same (the timeout is then between pieces)
    assert_chat_request(asked)


def _session(home: Path, tmp_path: Path, journal: SQLiteJournal, config: Config | None = None):
    return Engine(Home(home), journal, workspace=tmp_path, config=config).start_session("run")


def test_a_stream_cut_before_done_is_asked_again_and_journaled_once(server: FakeServer, tmp_path: Path) -> None:
    events = text_stream("Hel", "lo ", "world")
    server.stream(events, cut_after=2)  # the role and "Hel", then the connection closes
    server.stream(events)
    pieces: list[str] = []
    with SQLiteJournal(tmp_path / "journal.db") as journal:
        session = _session(tmp_path / "home", tmp_path, journal)
        result = Agent(session, _model(server), on_text=pieces.append).run("hi")
        replies = [s.event for s in journal.read(session.session_id) if isinstance(s.event, ModelReplied)]
    assert result.reason == "idle" and result.requests == 1
    first, second = server.requests
    assert first == second and first["stream"] is True
    assert_chat_request(first)
    (reply,) = replies
    assert reply.text == "Hello world" and reply.stop_reason == "end_turn"
    assert (reply.input_tokens, reply.output_tokens) == (11, 7)
    # The pieces of the answer that came whole; those of the cut one came before them.
    assert pieces[-3:] == ["Hel", "lo ", "world"]


def test_a_stream_cut_every_time_is_a_clear_error(server: FakeServer) -> None:
    for _ in range(2):
        server.stream(text_stream("never ", "done"), cut_after=3)
    with pytest.raises(ModelError, match=r"the stream .*\(after 2 attempts\)"):
        _model(server, max_retries=1).reply([Message(role="user", content="hi")], [], on_text=lambda _: None)
    server.stream(text_stream("no end mark")[:-1])  # every chunk but [DONE]: cut all the same
    server.stream(text_stream("no end mark"))
    assert _model(server).reply([Message(role="user", content="hi")], [], on_text=lambda _: None).text == "no end mark"


def test_with_stream_off_no_stream_is_asked_for_and_on_text_gets_the_whole_text(server: FakeServer) -> None:
    server.reply(body=completion("all at once"))
    pieces: list[str] = []
    reply = _model(server, stream=False).reply([Message(role="user", content="hi")], [], on_text=pieces.append)
    assert reply.text == "all at once" and pieces == ["all at once"]
    (asked,) = server.requests
    assert "stream" not in asked and "stream_options" not in asked
    assert_chat_request(asked)


# -- media a tool attached -------------------------------------------------------------------

PDF = b"%PDF-1.4\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n"
PDF_WRITER = f"""
import os
with open(os.path.join(os.environ["ZAGENT_OUTPUT_DIR"], "report.pdf"), "wb") as f:
    f.write({PDF!r})
print("wrote the report")
"""


def _images(message: dict[str, Any]) -> list[bytes]:
    urls = [part["image_url"]["url"] for part in message["content"] if part["type"] == "image_url"]
    assert all(url.startswith("data:image/png;base64,") for url in urls), urls
    return [base64.b64decode(url.split(",", 1)[1], validate=True) for url in urls]


def test_an_image_a_tool_attached_follows_the_replys_tool_messages_as_a_user_message(
        server: FakeServer, tmp_path: Path) -> None:
    home = tmp_path / "home"
    python_tool(home, "painter", PNG_WRITER, attach_outputs=True)
    python_tool(home, "noter", "print('noted')")
    server.reply(body=completion(None, [("p1", "painter", "{}"), ("n1", "noter", "{}")], "tool_calls"))
    server.reply(body=completion("A green pixel."))
    with SQLiteJournal(home / "journal.db") as journal:
        session = _session(home, tmp_path, journal)
        Agent(session, _model(server)).run("draw")
        (painted, _) = [s.event for s in journal.read(session.session_id) if isinstance(s.event, ToolCallFinished)]
        stored = {s.event.call_id: dump_event(s.event) for s in journal.read(session.session_id)
                  if isinstance(s.event, ToolCallFinished)}
    assert_chat_request(server.requests[1])
    *_, asked, painter, noter, images = server.requests[1]["messages"]
    assert [c["id"] for c in asked["tool_calls"]] == ["p1", "n1"]
    assert (painter["tool_call_id"], noter["tool_call_id"]) == ("p1", "n1")
    assert painter["content"].startswith("drew a chart") and "chart.png (image/png" in painter["content"]
    assert noter["content"] == "noted"
    assert images["role"] == "user"
    assert images["content"][0] == {"type": "text", "text": "[chart.png, attached by the result of tool call p1]"}
    assert _images(images) == [tiny_png()]
    # the journal keeps a reference to the file, never its bytes
    (media,) = painted.media
    assert (Path(media.path).name, media.mime, media.size) == ("chart.png", "image/png", len(tiny_png()))
    assert media.sha256 == hashlib.sha256(tiny_png()).hexdigest()
    assert set(json.loads(stored[painted.call_id])["media"][0]) == {"path", "mime", "size", "sha256"}
    encoded = base64.b64encode(tiny_png())
    assert encoded not in (home / "journal.db").read_bytes()


def test_a_pdf_is_not_sent_and_its_result_says_why_while_its_text_and_images_arrive(
        server: FakeServer, tmp_path: Path) -> None:
    home = tmp_path / "home"
    python_tool(home, "reporter", PDF_WRITER + PNG_WRITER, attach_outputs=True)
    server.reply(body=completion(None, [("r1", "reporter", "{}")], "tool_calls"))
    server.reply(body=completion("Read it."))
    config = Config(capabilities=CapabilitiesConfig(pdf=True, vision=True))  # attached, as for a model that reads PDFs
    with SQLiteJournal(home / "journal.db") as journal:
        session = _session(home, tmp_path, journal, config)
        assert Agent(session, _model(server)).run("report").reason == "idle"
        (finished,) = [s.event for s in journal.read(session.session_id) if isinstance(s.event, ToolCallFinished)]
    assert sorted(m.mime for m in finished.media) == ["application/pdf", "image/png"]
    assert_chat_request(server.requests[1])
    *_, result, images = server.requests[1]["messages"]
    lines = result["content"].splitlines()
    assert lines[0] == "wrote the report" and "drew a chart" in lines
    assert lines[-1] == f"[report.pdf (application/pdf, {len(PDF)} bytes) not sent: openai takes no pdf files]"
    assert result["content"].startswith(finished.output)  # the result itself, then the line
    assert _images(images) == [tiny_png()]


def test_a_resumed_conversation_sends_the_file_again_and_says_so_when_it_changed_or_is_gone(
        server: FakeServer, tmp_path: Path) -> None:
    home = tmp_path / "home"
    python_tool(home, "painter", PNG_WRITER, attach_outputs=True)
    server.reply(body=completion(None, [("p1", "painter", "{}")], "tool_calls"))
    server.reply(body=completion("A green pixel."))
    with SQLiteJournal(home / "journal.db") as journal:
        engine = Engine(Home(home), journal, workspace=tmp_path)
        session = engine.start_session("run")
        Agent(session, _model(server)).run("draw")
        session.release()
        (media,) = next(s.event for s in journal.read(session.session_id)
                        if isinstance(s.event, ToolCallFinished)).media
        chart = Path(media.path)

        def again() -> list[dict[str, Any]]:
            server.reply(body=completion("Still there."))
            resumed = engine.resume(session.session_id)
            try:
                assert Agent(resumed, _model(server)).run("and now?").reason == "idle"
            finally:
                resumed.release()
            assert_chat_request(server.requests[-1])
            return server.requests[-1]["messages"]

        first = again()
        chart.write_bytes(tiny_png()[:-1] + b"!")
        changed = again()
        chart.unlink()
        gone = again()
    sent = server.requests[1]["messages"]
    assert first[: len(sent)] == sent  # the same tool message, and the same image read again
    assert _images(sent[-1]) == [tiny_png()]
    for messages, why in ((changed, f"the file at {chart} changed since the call made it"),
                          (gone, f"the file is no longer at {chart}")):
        tool = next(m for m in messages if m["role"] == "tool")
        assert tool["content"].splitlines()[-1] == f"[chart.png (image/png, {len(tiny_png())} bytes) not sent: {why}]"
        after = messages[messages.index(tool) + 1]
        assert after == {"role": "assistant", "content": "A green pixel."}  # no image message


# -- sampling from config.json ---------------------------------------------------------------


def test_temperature_and_max_tokens_from_the_config_are_sent_and_absent_when_unset(server: FakeServer) -> None:
    configured = ModelConfig.model_validate({"base_url": server.url, "temperature": 0.2, "max_tokens": 256})
    for _ in range(3):
        server.reply(body=completion("ok"))
    load_model("openai:m", configured).reply([Message(role="user", content="hi")], [])
    load_model("openai:m", ModelConfig(base_url=server.url, temperature=0)).reply(
        [Message(role="user", content="hi")], [])
    load_model("openai:m", ModelConfig(base_url=server.url)).reply([Message(role="user", content="hi")], [])
    sampled, zero, plain = server.requests
    assert (sampled["temperature"], sampled["max_tokens"]) == (0.2, 256)
    assert zero["temperature"] == 0 and "max_tokens" not in zero  # 0 is a temperature, not "unset"
    assert "temperature" not in plain and "max_tokens" not in plain
    for body in server.requests:
        assert_chat_request(body)


def test_the_body_sent_is_the_request_serialised_whole_though_each_message_is_serialised_once(
        tmp_path: Path) -> None:
    from zagent_core.agent.models import ToolCallRequest
    from zagent_core.journal.events import Media

    image = tmp_path / "chart.png"
    image.write_bytes(tiny_png())
    media = Media(path=str(image), mime="image/png", size=len(tiny_png()),
                  sha256=hashlib.sha256(tiny_png()).hexdigest())
    model = OpenAIModel("gpt-4o", base_url="http://127.0.0.1:9/v1", api_key="k", config=ModelConfig(temperature=0.5))
    tools = [ToolSpec(name="t", description='takes "messages": []', parameters={
        "type": "object", "properties": {"messages": {"type": "array", "default": []}}})]
    conversation = [Message(role="system", content="be brief"), Message(role="user", content='say "messages": []')]
    for turn in range(3):
        conversation += [
            Message(role="assistant", content="", tool_calls=[
                ToolCallRequest(id=f"c{turn}", name="t", arguments={"messages": [], "é": turn})]),
            Message(role="tool", tool_call_id=f"c{turn}", content=f"out {turn}", media=[media] if turn == 1 else []),
            Message(role="user", content=f"[info: note {turn}]")]
        for stream in (False, True):
            body = model.encoded(conversation, tools, stream=stream)
            assert body == json.dumps(model.request(conversation, tools, stream=stream)).encode()
        assert all(known[0] in conversation for known in model._known.values())
    # A message sent before is not serialised again; one with files is, for its files are read again.
    first = conversation[1]
    assert model._known[id(first)][0] is first
    image.write_bytes(b"changed")
    assert b"changed since the call made it" in model.encoded(conversation, tools)
    assert model.encoded(conversation[:2], tools) == json.dumps(model.request(conversation[:2], tools)).encode()
    assert set(model._known) == {id(conversation[0]), id(conversation[1])}
