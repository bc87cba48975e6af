"""What a review of the providers found, each a behaviour a user hit or would hit: a session
that could never make another request (whitespace blocks, foreign tool ids, too much media,
media for a model that cannot take it), a key sent to the wrong provider, and answers the
transport did not survive (an error body that breaks off, a stream without its end mark)."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_anthropic import FakeServer as MessagesServer
from test_anthropic import message
from test_openai import FakeServer as ChatServer
from test_openai import chunk, completion

from zagent_core.tools import credentials
from zagent_core.config import CapabilitiesConfig, ModelConfig
from zagent_core.journal.events import Media
from zagent_core.agent.models import Message, ModelError, ToolCallRequest
from zagent_core.agent.models.anthropic import AnthropicModel, default_max_tokens
from zagent_core.agent.models.media import MediaPolicy, prepare_all, within_capabilities
from zagent_core.agent.models.openai import OpenAIModel


@pytest.fixture
def messages_server() -> Iterator[MessagesServer]:
    fake = MessagesServer()
    fake.thread.start()
    yield fake
    fake.httpd.shutdown()


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    fake = ChatServer()
    fake.thread.start()
    yield fake
    fake.httpd.shutdown()


def png(path: Path, size: int) -> Media:
    path.write_bytes(b"\x89PNG" + b"\0" * (size - 4))
    return Media(path=str(path), mime="image/png", size=size)


def test_white_space_alone_is_never_sent_to_anthropic_as_a_text_block() -> None:
    model = AnthropicModel("claude-sonnet-4-5", api_key="")
    body = model.request([
        Message(role="system", content="be brief"), Message(role="user", content="look"),
        Message(role="assistant", content="\n\n", tool_calls=[ToolCallRequest(id="t1", name="ls", arguments={})]),
        Message(role="tool", tool_call_id="t1", content="\n"), Message(role="user", content="   "),
    ], [])
    blocks = [block for entry in body["messages"] for block in entry["content"]]
    assert all(block.get("text", "x").strip() for block in blocks), blocks
    assert [block["type"] for block in body["messages"][1]["content"]] == ["tool_use"]
    assert body["messages"][2]["content"][0]["content"] == "(no output)"


def test_tool_ids_another_provider_made_are_spelled_as_anthropic_takes_them_and_paired() -> None:
    calls = [ToolCallRequest(id="functions.ls:0", name="ls", arguments={})]
    conversation = [Message(role="user", content="go")]
    for turn in range(2):  # the same id in every reply, as some servers give them
        conversation += [Message(role="assistant", content="", tool_calls=calls),
                         Message(role="tool", tool_call_id="functions.ls:0", content=f"result {turn}")]
    body = AnthropicModel("claude-sonnet-4-5", api_key="").request(conversation, [])
    uses = [b["id"] for entry in body["messages"] for b in entry["content"] if b["type"] == "tool_use"]
    answers = [b["tool_use_id"] for entry in body["messages"] for b in entry["content"] if b["type"] == "tool_result"]
    assert uses == answers == ["functions_ls_0", "functions_ls_0_2"]


def test_a_request_carries_the_newest_media_within_the_providers_budget(tmp_path: Path) -> None:
    policy = MediaPolicy(provider="p", limits={"image": 100}, types={}, max_files=2, max_bytes=1000)
    conversation = [Message(role="tool", tool_call_id=f"c{i}", content=f"shot {i}", media=[png(tmp_path / f"{i}.png", 50)])
                    for i in range(3)]
    prepared = prepare_all(conversation, policy)
    assert [len(prepared[i].attachments) for i in range(3)] == [0, 1, 1]
    assert "0.png (image/png, 50 bytes) not sent again: this request already carries the 2 newest files" in \
        prepared[0].notes[0]


def test_an_image_over_anthropics_limit_once_in_base64_is_not_sent(tmp_path: Path) -> None:
    big = png(tmp_path / "big.png", 4 * 1024 * 1024)  # 4 MB of file is 5.3 MB as base64: over the API's 5 MB
    body = AnthropicModel("claude-sonnet-4-5", api_key="").request(
        [Message(role="user", content="draw"),
         Message(role="assistant", content="", tool_calls=[ToolCallRequest(id="t1", name="draw", arguments={})]),
         Message(role="tool", tool_call_id="t1", content="drew it", media=[big])], [])
    result = body["messages"][-1]["content"][0]
    assert result["content"].startswith("drew it\n[big.png (image/png, 4194304 bytes) not sent: over the 3932160-byte")


def test_media_the_model_of_the_turn_cannot_take_is_not_sent_even_if_an_earlier_model_could(tmp_path: Path) -> None:
    shot = png(tmp_path / "shot.png", 64)
    conversation = [Message(role="tool", tool_call_id="c1", content="a screenshot", media=[shot])]
    text_only = CapabilitiesConfig().for_model("openai:llama3.1")
    (sent,) = within_capabilities(conversation, text_only)
    assert sent.media == [] and sent.content == ("a screenshot\n[shot.png (image/png, 64 bytes) not sent: the model "
                                                 "cannot take vision (vision=false)]")
    assert within_capabilities(conversation, CapabilitiesConfig().for_model("openai:gpt-4o")) == conversation


def test_each_provider_takes_its_own_key_first(monkeypatch: pytest.MonkeyPatch,
                                               messages_server: MessagesServer) -> None:
    monkeypatch.setattr(credentials, "_taken", {})
    monkeypatch.setattr(credentials, "_forbid_inspection", lambda: None)
    for name, value in (("OPENAI_API_KEY", "sk-openai"), ("ANTHROPIC_API_KEY", "sk-ant"), ("ZAGENT_API_KEY", "sk-z")):
        monkeypatch.setenv(name, value)
    messages_server.reply(message("hi"))
    config = ModelConfig(base_url="http://127.0.0.1:9/v1", stream=False)  # openai:'s settings, not anthropic:'s
    AnthropicModel("claude-sonnet-4-5", config=config, base_url=messages_server.url).reply(
        [Message(role="user", content="hi")], [])
    assert {k.lower(): v for k, v in messages_server.headers[0].items()}["x-api-key"] == "sk-ant"
    assert OpenAIModel("m", config=config).api_key == "sk-openai"
    assert AnthropicModel("claude-sonnet-4-5", config=config).base_url == "https://api.anthropic.com"
    assert "OPENAI_API_KEY" not in os.environ and "ANTHROPIC_API_KEY" not in os.environ


def test_an_error_whose_body_breaks_off_is_retried_and_then_a_clear_error() -> None:
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:  # a 529 whose chunked body promises 16 bytes and hangs up after 4
        for _ in range(2):
            connection, _ = listener.accept()
            with connection:
                connection.recv(65536)
                connection.sendall(b"HTTP/1.1 529 Overloaded\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nover")
                connection.shutdown(socket.SHUT_WR)
                connection.recv(65536)  # until the client closes: no reset

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    model = OpenAIModel("m", base_url=f"http://127.0.0.1:{listener.getsockname()[1]}/v1", api_key="",
                        max_retries=1, backoff=0.01)
    with pytest.raises(ModelError, match=r"HTTP 529 .*its body broke off.*\(after 2 attempts\)"):
        model.reply([Message(role="user", content="hi")], [])
    thread.join(10)
    listener.close()


def test_a_stream_that_ends_without_done_after_its_finish_reason_is_a_whole_reply(chat_server: ChatServer) -> None:
    chat_server.stream([chunk({"role": "assistant", "content": "All "}), chunk({"content": "done."}),
                        chunk({}, "stop")])  # and the connection closes: no [DONE]
    reply = OpenAIModel("m", base_url=chat_server.url, api_key="", max_retries=0).reply(
        [Message(role="user", content="hi")], [])
    assert (reply.text, reply.stop_reason, len(chat_server.requests)) == ("All done.", "end_turn", 1)


def test_a_streamed_call_whose_arguments_come_as_an_object_is_read_as_a_whole_reply_is(chat_server: ChatServer) -> None:
    call = {"index": 0, "id": "c1", "type": "function", "function": {"name": "ls", "arguments": {"path": "."}}}
    chat_server.stream([chunk({"tool_calls": [call]}), chunk({}, "tool_calls"), "[DONE]"])
    chat_server.reply(body=completion(None, [("c1", "ls", '{"path": "."}')], "tool_calls"))
    model = OpenAIModel("m", base_url=chat_server.url, api_key="")
    streamed = model.reply([Message(role="user", content="hi")], [])
    whole = model.reply([Message(role="user", content="hi")], [])
    assert streamed.tool_calls == whole.tool_calls == [ToolCallRequest(id="c1", name="ls", arguments={"path": "."})]


@pytest.mark.parametrize(("name", "tokens"), [("claude-3-haiku-20240307", 4096), ("claude-3-opus-latest", 4096),
                                              ("claude-3-5-sonnet-20241022", 8192), ("claude-3-7-sonnet-latest", 8192),
                                              ("claude-sonnet-4-5", 16384), ("claude-opus-4-1", 16384)])
def test_the_default_reply_length_is_one_the_model_takes(name: str, tokens: int) -> None:
    assert default_max_tokens(name) == tokens


def test_a_temperature_the_messages_api_refuses_is_said_before_asking() -> None:
    model = AnthropicModel("claude-sonnet-4-5", config=ModelConfig(temperature=1.5), api_key="")
    with pytest.raises(ModelError, match=r"model.temperature is 1.5 in config.json; the Messages API takes 0 to 1"):
        model.reply([Message(role="user", content="hi")], [])
