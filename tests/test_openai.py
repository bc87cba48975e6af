"""The openai provider against a real HTTP server on 127.0.0.1 speaking Chat Completions."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, PYTHON

from zagent_core import Engine, Home
from zagent_core.agent import Agent
from zagent_core.config import Config, ModelConfig
from zagent_core.events import ModelReplied, ToolCallFinished
from zagent_core.models import Message, ModelError, ToolSpec
from zagent_core.models.openai import OpenAIModel
from zagent_store import SQLiteJournal


class FakeServer:
    """Answers POST /v1/chat/completions from a queue of (status, body, headers); records requests."""

    def __init__(self) -> None:
        self.responses: list[tuple[int, Any, dict[str, str]]] = []
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers["Content-Length"])
                server.requests.append(json.loads(self.rfile.read(length)))
                server.headers.append(dict(self.headers))
                status, body, headers = server.responses.pop(0)
                payload = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def reply(self, status: int = 200, body: Any = None, headers: dict[str, str] | None = None) -> None:
        self.responses.append((status, body, headers or {}))


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


def test_an_answer_cut_short_is_retried_and_then_a_clear_error() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:  # promises 1000 bytes, sends 10, hangs up: http.client.IncompleteRead
        for _ in range(2):
            connection, _ = listener.accept()
            with connection:
                connection.recv(65536)
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n{\"choices\"")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    model = OpenAIModel("m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=1, backoff=0.01)
    with pytest.raises(ModelError, match=r"cannot reach .*IncompleteRead.*\(after 2 attempts\)"):
        model.reply([], [])
    thread.join(10)
    listener.close()


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
