"""The anthropic provider against a real HTTP server on 127.0.0.1 speaking the Messages API."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
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
from zagent_core.config import ModelConfig
from zagent_core.journal.events import Media, ModelReplied, ToolCallFinished
from zagent_core.agent.models import Message, ModelError, ToolCallRequest, ToolSpec, load_model
from zagent_core.agent.models.anthropic import AnthropicModel
from zagent_store import SQLiteJournal

KEY = "sk-ant-test-0123456789"


@dataclass
class Response:
    status: int = 200
    body: Any = None
    #: Server-sent events ``(name, data)`` instead of a JSON body.
    events: list[tuple[str, Any]] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    #: Hang up after this many events, halfway through the next one.
    cut_after: int | None = None


class FakeServer:
    """Answers POST /v1/messages from a queue of responses; records each request's path, JSON and headers."""

    def __init__(self) -> None:
        self.responses: list[Response] = []
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers["Content-Length"])
                server.requests.append(json.loads(self.rfile.read(length)))
                server.headers.append(dict(self.headers))
                server.paths.append(self.path)
                response = server.responses.pop(0)
                self.send_response(response.status)
                for key, value in response.headers.items():
                    self.send_header(key, value)
                if response.events is None:
                    body = response.body if isinstance(response.body, str) else json.dumps(response.body)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body.encode())))
                    self.end_headers()
                    self.wfile.write(body.encode())
                    return
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()  # HTTP/1.0: the stream ends when the connection closes
                for count, (name, data) in enumerate(response.events):
                    event = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
                    if count == response.cut_after:
                        self.wfile.write(event[: len(event) // 2])
                        return
                    self.wfile.write(event)
                    self.wfile.flush()

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)

    def reply(self, body: Any = None, status: int = 200, headers: dict[str, str] | None = None) -> None:
        self.responses.append(Response(status, body, headers=headers or {}))

    def stream(self, events: list[tuple[str, Any]], cut_after: int | None = None) -> None:
        self.responses.append(Response(events=events, cut_after=cut_after))


@pytest.fixture
def server() -> Iterator[FakeServer]:
    fake = FakeServer()
    fake.thread.start()
    yield fake
    fake.httpd.shutdown()


USAGE = {"input_tokens": 11, "output_tokens": 7, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}


def message(text: str = "", calls: list[tuple[str, str, Any]] = (), stop: str = "end_turn",
            usage: dict[str, int] | None = None) -> dict[str, Any]:
    """A Messages API message, as the documentation shows one."""
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in calls]
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test", "content": content,
            "stop_reason": stop, "stop_sequence": None, "usage": usage or USAGE}


def events(pieces: list[str], call: tuple[str, str, list[str]] | None = None, stop: str = "end_turn",
           usage: dict[str, int] | None = None) -> list[tuple[str, Any]]:
    """A streamed message: text in ``pieces``, then a tool call whose input comes in JSON pieces."""
    start = {**message(stop=None, usage={**(usage or USAGE), "output_tokens": 1}), "stop_reason": None}
    out: list[tuple[str, Any]] = [("message_start", {"type": "message_start", "message": start}),
                                  ("ping", {"type": "ping"})]
    out.append(("content_block_start", {"type": "content_block_start", "index": 0,
                                        "content_block": {"type": "text", "text": ""}}))
    out += [("content_block_delta", {"type": "content_block_delta", "index": 0,
                                     "delta": {"type": "text_delta", "text": piece}}) for piece in pieces]
    out.append(("content_block_stop", {"type": "content_block_stop", "index": 0}))
    if call is not None:
        call_id, name, json_pieces = call
        out.append(("content_block_start", {"type": "content_block_start", "index": 1, "content_block": {
            "type": "tool_use", "id": call_id, "name": name, "input": {}}}))
        out += [("content_block_delta", {"type": "content_block_delta", "index": 1,
                                         "delta": {"type": "input_json_delta", "partial_json": piece}})
                for piece in json_pieces]
        out.append(("content_block_stop", {"type": "content_block_stop", "index": 1}))
    out.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                  "usage": {"output_tokens": (usage or USAGE)["output_tokens"]}}))
    out.append(("message_stop", {"type": "message_stop"}))
    return out


def _example_tool(home: Path, name: str) -> None:
    shutil.copytree(EXAMPLES / "tools" / name, home / "tools" / name)
    manifest = home / "tools" / name / f"{name}.json"
    manifest.write_text(manifest.read_text().replace('"python"', json.dumps(PYTHON)))


def _events(journal_path: Path) -> list[Any]:
    with SQLiteJournal(journal_path) as journal:
        (summary,) = journal.sessions()
        return [stored.event for stored in journal.read(summary.session_id)]


def _without_cache_marks(value: Any) -> Any:
    if isinstance(value, list):
        return [_without_cache_marks(item) for item in value]
    if isinstance(value, dict):
        return {key: _without_cache_marks(item) for key, item in value.items() if key != "cache_control"}
    return value


def _cache_marks(body: dict[str, Any]) -> int:
    return json.dumps(body).count('"cache_control"')


def test_a_session_with_tool_calls_over_the_wire(server: FakeServer, tmp_path: Path) -> None:
    home = tmp_path / "home"
    _example_tool(home, "word_count")
    server.reply(message("", [("toolu_1", "word_count", {"text": "b a b", "top": 0})], "tool_use"))
    server.reply(message("Retrying.", [("toolu_2", "word_count", {"text": "b a b", "top": 1})], "tool_use"))
    server.reply(message("Three words; b twice."))
    with SQLiteJournal(home / "journal.db") as journal:
        engine = Engine(Home(home), journal, workspace=tmp_path)
        with engine.start_session("run") as session:
            agent = Agent(session, AnthropicModel("claude-test", base_url=server.url, api_key=KEY))
            result = agent.run("count the words in 'b a b'")
    assert result.reason == "idle" and result.requests == 3
    assert server.paths == ["/v1/messages"] * 3
    assert server.headers[0]["X-Api-Key"] == KEY and server.headers[0]["Anthropic-Version"] == "2023-06-01"
    first, second, third = server.requests
    assert first["model"] == "claude-test" and first["max_tokens"] == 16384 and first["stream"] is True
    assert first["system"] == [{"type": "text", "text": agent.config.system_prompt,
                                "cache_control": {"type": "ephemeral"}}]
    (word_count,) = [tool for tool in first["tools"] if tool["name"] == "word_count"]
    assert set(word_count) <= {"name", "description", "input_schema", "cache_control"}
    assert word_count["input_schema"]["required"] == ["text"]
    assert first["messages"] == [{"role": "user", "content": [{"type": "text", "text": "count the words in 'b a b'",
                                                               "cache_control": {"type": "ephemeral"}}]}]
    # the model's mistake came back as an error tool_result, tied to its tool_use id
    assert second["messages"][1] == {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "word_count", "input": {"text": "b a b", "top": 0}}]}
    assert second["messages"][2] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True, "cache_control": {"type": "ephemeral"},
         "content": 'word_count was not run: its arguments do not match its parameters.\n'
                    'argument "top": must be >= 1 (got 0)'}]}
    assert [block["type"] for block in third["messages"][3]["content"]] == ["text", "tool_use"]
    (answer,) = third["messages"][4]["content"]
    assert answer["tool_use_id"] == "toolu_2" and answer["content"].startswith("3 words") and "is_error" not in answer
    for request in server.requests:
        roles = [entry["role"] for entry in request["messages"]]
        assert roles == ["user", "assistant"] * (len(roles) // 2) + ["user"]
    assert session.state.input_tokens == 33 and session.state.output_tokens == 21


def test_an_image_a_tool_made_reaches_the_model_inside_its_tool_result(server: FakeServer, tmp_path: Path) -> None:
    home = tmp_path / "home"
    python_tool(home, "painter", PNG_WRITER, attach_outputs=True)
    server.reply(message("", [("toolu_p", "painter", {})], "tool_use"))
    server.reply(message("A green dot."))
    with SQLiteJournal(home / "journal.db") as journal:
        engine = Engine(Home(home), journal, workspace=tmp_path)
        with engine.start_session("run") as session:
            Agent(session, AnthropicModel("m", base_url=server.url)).run("draw a chart")
    (result,) = server.requests[1]["messages"][-1]["content"]
    assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_p"
    text, image = result["content"]
    assert text["type"] == "text" and text["text"].startswith("drew a chart")
    assert image["type"] == "image" and image["source"]["type"] == "base64"
    assert image["source"]["media_type"] == "image/png"
    assert base64.b64decode(image["source"]["data"]) == tiny_png()
    (finished,) = [e for e in _events(home / "journal.db") if isinstance(e, ToolCallFinished)]
    (media,) = finished.media
    assert media.model_dump() == {"path": media.path, "mime": "image/png", "size": len(tiny_png()),
                                  "sha256": hashlib.sha256(tiny_png()).hexdigest()}
    assert Path(media.path).read_bytes() == tiny_png()
    stored = (home / "journal.db").read_bytes()
    assert image["source"]["data"].encode() not in stored and tiny_png() not in stored


def _media(path: Path, mime: str, data: bytes | None = None) -> Media:
    data = path.read_bytes() if data is None else data
    return Media(path=str(path), mime=mime, size=len(data), sha256=hashlib.sha256(data).hexdigest())


def test_a_pdf_goes_as_a_document_and_what_cannot_go_is_explained_in_the_result(
        server: FakeServer, tmp_path: Path) -> None:
    (tmp_path / "report.pdf").write_bytes(b"%PDF-1.4\n%%EOF\n")
    (tmp_path / "scan.bmp").write_bytes(b"BM" + bytes(60))
    (tmp_path / "changed.png").write_bytes(tiny_png())
    changed = _media(tmp_path / "changed.png", "image/png")
    (tmp_path / "changed.png").write_bytes(tiny_png() + b"more")
    gone = _media(tmp_path / "report.pdf", "image/png", b"was here")
    gone = gone.model_copy(update={"path": str(tmp_path / "gone.png")})
    conversation = [
        Message(role="user", content="look"),
        Message(role="assistant", tool_calls=[ToolCallRequest(id="t1", name="view", arguments={}),
                                              ToolCallRequest(id="t2", name="view", arguments={})]),
        Message(role="tool", tool_call_id="t1", content="one report",
                media=[_media(tmp_path / "report.pdf", "application/pdf")]),
        Message(role="tool", tool_call_id="t2", content="three pictures",
                media=[_media(tmp_path / "scan.bmp", "image/bmp"), changed, gone]),
        Message(role="user", content="[info: a note]"),
    ]
    server.reply(message("seen"))
    assert AnthropicModel("m", base_url=server.url).reply(conversation, []).text == "seen"
    (sent,) = server.requests
    pdf, pictures, note = sent["messages"][-1]["content"]
    assert pdf["content"] == [{"type": "text", "text": "one report"},
                              {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                                              "data": base64.b64encode(b"%PDF-1.4\n%%EOF\n").decode()}}]
    assert isinstance(pictures["content"], str)  # nothing attached: the text alone
    lines = pictures["content"].splitlines()
    assert lines[0] == "three pictures" and len(lines) == 4
    assert lines[1] == ("[scan.bmp (image/bmp, 62 bytes) not sent: anthropic takes image files as image/jpeg, "
                        "image/png, image/gif, image/webp only]")
    assert "changed.png" in lines[2] and "changed since the call made it" in lines[2]
    assert "gone.png" in lines[3] and "no longer at" in lines[3]
    assert note == {"type": "text", "text": "[info: a note]", "cache_control": {"type": "ephemeral"}}


def test_no_empty_text_block_is_ever_sent() -> None:
    model = AnthropicModel("m", base_url="http://127.0.0.1:9")
    body = model.request([Message(role="system", content=""), Message(role="user", content="go"),
                          Message(role="assistant", tool_calls=[ToolCallRequest(id="t", name="x", arguments={})]),
                          Message(role="tool", tool_call_id="t", content=""),
                          Message(role="assistant", content=""), Message(role="user", content="")], [])
    assert "system" not in body and "tools" not in body
    assert body["messages"][2]["content"][0]["content"] == "(no output)"
    assert [entry["role"] for entry in body["messages"]] == ["user", "assistant", "user", "assistant", "user"]
    texts = [block["text"] for entry in body["messages"] for block in entry["content"] if block["type"] == "text"]
    assert texts and all(texts)


def test_a_streamed_reply_arrives_piece_by_piece_and_is_returned_whole(server: FakeServer) -> None:
    usage = {"input_tokens": 5, "output_tokens": 9, "cache_read_input_tokens": 120, "cache_creation_input_tokens": 30}
    server.stream(events(["Let me ", "look."], ("toolu_s", "read_file", ['{"pa', 'th": "a.', 'txt"}']), "tool_use",
                         usage))
    pieces: list[str] = []
    model = AnthropicModel("m", base_url=server.url)
    reply = model.reply([Message(role="user", content="read a.txt")], [], on_text=pieces.append)
    assert server.requests[0]["stream"] is True
    assert pieces == ["Let me ", "look."] and reply.text == "Let me look."
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [("toolu_s", "read_file", {"path": "a.txt"})]
    assert reply.stop_reason == "tool_use" and reply.model == "claude-test"
    assert reply.usage.model_dump() == {"input_tokens": 5, "output_tokens": 9, "cache_read_tokens": 120,
                                        "cache_creation_tokens": 30}


def test_without_streaming_on_text_gets_the_whole_text_at_once(server: FakeServer) -> None:
    server.reply(message("all of it"))
    pieces: list[str] = []
    model = AnthropicModel("m", config=ModelConfig(stream=False, temperature=0.2, max_tokens=100),
                           base_url=server.url)
    assert model.reply([Message(role="user", content="hi")], [], on_text=pieces.append).text == "all of it"
    assert pieces == ["all of it"]
    assert "stream" not in server.requests[0]
    assert server.requests[0]["temperature"] == 0.2 and server.requests[0]["max_tokens"] == 100


def test_a_stream_cut_midway_is_asked_again_and_the_reply_journaled_once(server: FakeServer, tmp_path: Path) -> None:
    server.stream(events(["Hel", "lo"]), cut_after=4)
    server.stream(events(["Hel", "lo", "!"]))
    pieces: list[str] = []
    with SQLiteJournal(tmp_path / "journal.db") as journal:
        engine = Engine(Home(tmp_path), journal, workspace=tmp_path)
        model = AnthropicModel("m", base_url=server.url, backoff=0.01)
        with engine.start_session("run") as session:
            result = Agent(session, model, on_text=pieces.append).run("greet")
    assert result.reason == "idle" and len(server.requests) == 2
    assert server.requests[0] == server.requests[1]
    (replied,) = [e for e in _events(tmp_path / "journal.db") if isinstance(e, ModelReplied)]
    assert replied.text == "Hello!"
    # the reply starts over ("": what came of it is void), and the one asked again arrives whole
    assert pieces == ["Hel", "", "Hel", "lo", "!"]


def test_an_overloaded_error_midway_is_retried_and_other_stream_errors_are_not(server: FakeServer) -> None:
    overloaded = ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    server.stream(events(["par"])[:4] + [overloaded])
    server.stream(events(["whole"]))
    model = AnthropicModel("m", base_url=server.url, backoff=0.01)
    assert model.reply([Message(role="user", content="hi")], [], on_text=lambda piece: None).text == "whole"
    assert len(server.requests) == 2
    invalid = ("error", {"type": "error", "error": {"type": "invalid_request_error", "message": "bad thing"}})
    server.stream(events(["x"])[:3] + [invalid])
    with pytest.raises(ModelError, match="invalid_request_error: bad thing"):
        model.reply([Message(role="user", content="hi")], [], on_text=lambda piece: None)
    assert len(server.requests) == 3


def test_429_and_529_are_retried_and_a_400_is_a_clear_error(server: FakeServer) -> None:
    server.reply({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}, 429,
                 {"Retry-After": "0"})
    server.reply({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, 529)
    server.reply(message("fine"))
    model = AnthropicModel("m", base_url=server.url, api_key=KEY, backoff=0.01)
    reply = model.reply([Message(role="user", content="hi")], [])
    assert reply.text == "fine" and reply.stop_reason == "end_turn" and len(server.requests) == 3
    server.reply({"type": "error", "error": {"type": "invalid_request_error",
                                             "message": f"messages.0: text content blocks must be non-empty ({KEY})"}},
                 400)
    with pytest.raises(ModelError, match="HTTP 400 .*text content blocks must be non-empty") as refused:
        model.reply([Message(role="user", content="hi")], [])
    assert len(server.requests) == 4
    assert KEY not in str(refused.value) and "[redacted]" in str(refused.value)
    server.reply(message(f"your key is {KEY}", [("t", "x", {"path": f"/k/{KEY}"})], "tool_use"))
    echoed = model.reply([Message(role="user", content="hi")], [])
    assert echoed.text == "your key is [redacted]" and echoed.tool_calls[0].arguments == {"path": "/k/[redacted]"}


def test_a_malformed_reply_and_a_wrong_key_say_what_is_wrong(server: FakeServer) -> None:
    model = AnthropicModel("m", base_url=server.url, api_key=KEY)
    server.reply({"type": "message", "content": "not blocks"})
    with pytest.raises(ModelError, match="is not a Messages API message"):
        model.reply([Message(role="user", content="hi")], [])
    server.reply({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}, 401)
    with pytest.raises(ModelError, match="HTTP 401 .*invalid x-api-key.*ANTHROPIC_API_KEY"):
        model.reply([Message(role="user", content="hi")], [])
    server.reply({"type": "error", "error": {"type": "not_found_error", "message": "Not Found"}}, 404)
    with pytest.raises(ModelError, match=f"try the base URL {server.url} "):
        AnthropicModel("m", base_url=server.url + "/v1").reply([Message(role="user", content="hi")], [])
    assert server.paths[-1] == "/v1/v1/messages"


@pytest.mark.parametrize(("stop", "mapped"), [("end_turn", "end_turn"), ("stop_sequence", "end_turn"),
                                              ("max_tokens", "max_tokens"), ("refusal", "refused"),
                                              ("pause_turn", "pause_turn")])
def test_stop_reasons_are_mapped(server: FakeServer, stop: str, mapped: str) -> None:
    server.reply(message("x", stop=stop))
    reply = AnthropicModel("m", base_url=server.url).reply([Message(role="user", content="hi")], [])
    assert reply.stop_reason == mapped


NOTER = """
import os
with open(os.environ["ZAGENT_NOTIFY_FILE"], "a") as notes:
    notes.write("halfway there\\n")
print("noted")
"""


def test_the_cached_prefix_stays_valid_across_the_requests_of_a_session(server: FakeServer, tmp_path: Path) -> None:
    home = tmp_path / "home"
    python_tool(home, "noter", NOTER)
    _example_tool(home, "word_count")
    cached = {"input_tokens": 3, "output_tokens": 5, "cache_read_input_tokens": 2048,
              "cache_creation_input_tokens": 96}
    server.reply(message("", [("toolu_n", "noter", {})], "tool_use"))
    server.reply(message("Counting.", [("toolu_w", "word_count", {"text": "a b"})], "tool_use"))
    server.reply(message("Two words.", usage=cached))
    with SQLiteJournal(home / "journal.db") as journal:
        engine = Engine(Home(home), journal, workspace=tmp_path)
        with engine.start_session("run") as session:
            Agent(session, AnthropicModel("m", base_url=server.url)).run("note, then count")
    first, second, third = server.requests
    assert first["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert [tool for tool in first["tools"][:-1] if "cache_control" in tool] == []
    assert first["system"][0]["cache_control"] == {"type": "ephemeral"}
    # the note came after the tool result, in the same user message, and carries the moving mark
    assert second["messages"][-1]["content"][-1] == {"type": "text", "text": "[info: halfway there]",
                                                     "cache_control": {"type": "ephemeral"}}
    assert second["messages"][-1]["content"][0]["tool_use_id"] == "toolu_n"
    for earlier, later in [(first, second), (second, third)]:
        assert _cache_marks(later) <= 4
        assert json.dumps(earlier["system"]) == json.dumps(later["system"])
        assert json.dumps(earlier["tools"]) == json.dumps(later["tools"])
        # what the earlier request ended with is marked again: the later one reads it from the cache
        assert later["messages"][len(earlier["messages"]) - 1] == earlier["messages"][-1]
        prefix = _without_cache_marks(earlier["messages"])
        assert _without_cache_marks(later["messages"])[:len(prefix)] == prefix
    replied = [e for e in _events(home / "journal.db") if isinstance(e, ModelReplied)]
    assert [(e.cache_read_tokens, e.cache_creation_tokens) for e in replied] == [(0, 0), (0, 0), (2048, 96)]


def test_load_model_knows_anthropic() -> None:
    model = load_model("anthropic:claude-x", ModelConfig(base_url="http://127.0.0.1:9"))
    assert isinstance(model, AnthropicModel) and model.name == "anthropic:claude-x"
    with pytest.raises(ValueError, match="anthropic:MODEL"):
        load_model("anthropic:")


def test_zagent_run_reads_anthropic_base_url_and_key_and_never_journals_the_key(
        server: FakeServer, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.json").write_text(json.dumps({"model": {"max_retries": 0}}))
    server.reply(message(f"Hello from the wire; you sent {KEY}."))
    env = {name: value for name, value in os.environ.items()
           if name not in ("ZAGENT_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL")}
    done = subprocess.run([PYTHON, "-m", "zagent_cli", "--home", str(home), "run", "--model", "anthropic:m", "go"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={**env, "ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": KEY})
    assert done.returncode == 0, done.stderr
    assert "Hello from the wire; you sent [redacted]." in done.stdout
    assert server.paths == ["/v1/messages"] and server.headers[0]["X-Api-Key"] == KEY
    (replied,) = [e for e in _events(home / "journal.db") if isinstance(e, ModelReplied)]
    assert replied.model == "claude-test" and replied.text.endswith("[redacted].")
    for path in home.rglob("journal.db*"):
        assert KEY.encode() not in path.read_bytes()
    assert KEY not in done.stdout + done.stderr


def test_zagent_run_hints_name_the_model_anthropic_settings(server: FakeServer, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {name: value for name, value in os.environ.items()
           if name not in ("ZAGENT_API_KEY", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")}

    def run_with(anthropic: dict[str, str]) -> str:
        (home / "config.json").write_text(json.dumps({"model": {"max_retries": 0, "anthropic": anthropic}}))
        done = subprocess.run([PYTHON, "-m", "zagent_cli", "--home", str(home), "run", "--model", "anthropic:m", "go"],
                              capture_output=True, text=True, timeout=60, cwd=tmp_path, env={**env, "MY_KEY": KEY})
        assert done.returncode == 1, done.stdout + done.stderr
        return done.stdout + done.stderr

    server.reply({"type": "error", "error": {"type": "not_found_error", "message": "Not Found"}}, 404)
    said = run_with({"base_url": server.url + "/v1", "api_key_env": "MY_KEY"})
    assert f"try the base URL {server.url} (ANTHROPIC_BASE_URL, or model.anthropic.base_url in config.json)" in said
    server.reply({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}, 401)
    said = run_with({"base_url": server.url, "api_key_env": "MY_KEY"})
    assert "set ANTHROPIC_API_KEY (or the variable model.anthropic.api_key_env in config.json names)" in said
    server.reply({"type": "error", "error": {"type": "authentication_error", "message": "x-api-key required"}}, 401)
    said = run_with({"base_url": server.url})
    assert "no key was sent: set ANTHROPIC_API_KEY (or name the variable that holds it in " \
           "model.anthropic.api_key_env in config.json)" in said
