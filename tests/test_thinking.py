"""Thinking (``model.thinking``): what Anthropic and OpenAI are asked, what the journal keeps,
and the thinking blocks sent back unchanged in the next requests of the turn."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
import test_chat
from conftest import PYTHON, python_tool
from test_anthropic import USAGE, FakeServer, events, message, server  # noqa: F401 - server: a fixture
from test_compaction import openai_server  # noqa: F401 - a fixture
from test_openai import FakeServer as ChatServer, completion

from zagent_core import Engine, Home
from zagent_core.agent.loop import Agent
from zagent_core.agent.models import Message, ModelError, load_model
from zagent_core.agent.models.anthropic import AnthropicModel
from zagent_core.agent.models.openai import OpenAIModel
from zagent_core.config import AnthropicConfig, Config, ModelConfig
from zagent_core.history.replay import ReplayModel
from zagent_core.journal.events import ChildSpawned, ModelReplied, ToolCallFinished, dump_event, load_event
from zagent_core.journal.parts import ThinkingBlock
from zagent_store import SQLiteJournal

#: A signature as the API sends one: opaque, and checked byte for byte when it comes back.
SIGNATURE = "EqQBCkgIARABGAIiQL+/Zm9v\u00e9+/=="
THOUGHT = {"type": "thinking", "thinking": "The user wants a count; I'll call the tool.\n", "signature": SIGNATURE}
REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}


def _reply_with_thinking(text: str, calls: list[tuple[str, str, Any]], stop: str) -> dict[str, Any]:
    reply = message(text, calls, stop)
    reply["content"] = [THOUGHT, REDACTED, *reply["content"]]
    return reply


def _echo(home: Path) -> None:
    python_tool(home, "echo", "import json, sys\nprint(json.load(sys.stdin)['text'])",
                parameters={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})


def test_thinking_blocks_are_journaled_and_sent_back_unchanged_in_the_turn(server: FakeServer,  # noqa: F811
                                                                           tmp_path: Path) -> None:
    home = tmp_path / "home"
    _echo(home)
    server.reply(_reply_with_thinking("Counting.", [("toolu_1", "echo", {"text": "hi"})], "tool_use"))
    server.reply(message("Done."))
    model = AnthropicModel("claude-test", base_url=server.url, config=ModelConfig(stream=False, thinking="high"))
    with SQLiteJournal(home / "journal.db") as journal:
        engine = Engine(Home(home), journal, workspace=tmp_path)
        with engine.start_session("run") as session:
            Agent(session, model).run("say hi")
        replied = [stored.event for stored in journal.read(session.session_id) if isinstance(stored.event, ModelReplied)]
    first, second = server.requests
    # high is 16,384 tokens of thinking: max_tokens (16,384 by default) is raised above it
    assert first["thinking"] == {"type": "enabled", "budget_tokens": 16384} and first["max_tokens"] == 20480
    assert "temperature" not in first
    assert second["messages"][1]["content"][:2] == [THOUGHT, REDACTED]
    assert [block["type"] for block in second["messages"][1]["content"]] == [
        "thinking", "redacted_thinking", "text", "tool_use"]
    assert replied[0].thinking == [ThinkingBlock(**THOUGHT), ThinkingBlock(**REDACTED)]
    assert replied[1].thinking == []


def test_a_streamed_reply_folds_thinking_and_signature_deltas(server: FakeServer) -> None:  # noqa: F811
    streamed = events(["Hi."])
    head, body = streamed[:2], streamed[2:]
    thinking = [
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        *[("content_block_delta", {"type": "content_block_delta", "index": 0,
                                   "delta": {"type": "thinking_delta", "thinking": piece}})
          for piece in ("Let me ", "think.")],
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "signature_delta", "signature": SIGNATURE}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("content_block_start", {"type": "content_block_start", "index": 1, "content_block": REDACTED}),
        ("content_block_stop", {"type": "content_block_stop", "index": 1}),
    ]
    renumbered = [(name, {**data, "index": data["index"] + 2} if "index" in data else data) for name, data in body]
    server.stream([*head, *thinking, *renumbered])
    pieces: list[str] = []
    reply = AnthropicModel("m", base_url=server.url, config=ModelConfig(thinking=2048)).reply(
        [Message(role="user", content="hi")], [], on_text=pieces.append)
    assert reply.thinking == [ThinkingBlock(thinking="Let me think.", signature=SIGNATURE), ThinkingBlock(**REDACTED)]
    assert reply.text == "Hi." and pieces == ["Hi."]
    assert server.requests[0]["thinking"] == {"type": "enabled", "budget_tokens": 2048}


def test_thinking_off_sends_nothing_and_a_temperature_with_thinking_is_refused() -> None:
    assert "thinking" not in AnthropicModel("m").request([Message(role="user", content="hi")], [])
    budget = AnthropicModel("m", config=ModelConfig(thinking=1024, max_tokens=30000))
    assert budget.request([Message(role="user", content="hi")], [])["max_tokens"] == 30000
    with pytest.raises(ModelError, match="no temperature with thinking: remove one of them"):
        AnthropicModel("m", config=ModelConfig(thinking="low", temperature=0.5)).request([], [])


@pytest.mark.parametrize(("thinking", "effort"), [("off", None), ("low", "low"), ("medium", "medium"),
                                                  ("high", "high"), (1024, "low"), (8192, "medium"), (40000, "high")])
def test_openai_is_asked_for_the_reasoning_effort(openai_server: ChatServer,  # noqa: F811
                                                  thinking: Any, effort: str | None) -> None:
    openai_server.reply(body=completion("ok"))
    model = OpenAIModel("o3", base_url=openai_server.url, api_key="sk-test", config=ModelConfig(thinking=thinking))
    assert model.reply([Message(role="user", content="hi")], []).text == "ok"
    assert openai_server.requests[0].get("reasoning_effort") == effort


def test_a_budget_under_1024_is_a_config_problem() -> None:
    with pytest.raises(ValueError, match="greater than or equal to 1024"):
        ModelConfig.model_validate({"thinking": 100})


def test_a_model_replied_of_an_old_journal_reads_without_thinking() -> None:
    old = load_event("model_replied", {"v": 1, "model": "m", "text": "hi", "stop_reason": "end_turn"})
    assert isinstance(old, ModelReplied) and old.thinking == []


SCRIPT = [{"thinking": [THOUGHT, REDACTED], "text": "Counting.", "tool_calls": [{"name": "echo", "arguments": {"text": "hi"}}]},
          {"text": "Done."}]


def _zagent_run(home: Path, tmp_path: Path, *flags: str) -> str:
    script = tmp_path / "thinking.json"
    script.write_text(json.dumps(SCRIPT))
    done = subprocess.run([PYTHON, "-m", "zagent_cli", "--home", str(home), "run", *flags,
                           "--model", f"scripted:{script}", "say hi"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_terminal_shows_thinking_before_the_reply_and_no_thinking_hides_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _echo(home)
    shown = _zagent_run(home, tmp_path).splitlines()
    assert shown[1:4] == ["thinking: The user wants a count; I'll call the tool.", "thinking: (redacted)",
                          "assistant: Counting."]
    hidden = _zagent_run(home, tmp_path, "--no-thinking")
    assert "thinking" not in hidden and "assistant: Counting." in hidden
    with SQLiteJournal(home / "journal.db") as journal:
        for summary in journal.sessions():  # journaled all the same
            (first, _) = [s.event for s in journal.read(summary.session_id) if isinstance(s.event, ModelReplied)]
            assert first.thinking == [ThinkingBlock(**THOUGHT), ThinkingBlock(**REDACTED)]


def _recorded(tmp_path: Path) -> tuple[Path, str]:
    """A home with one session of the thinking script, and that session's id."""
    home = tmp_path / "home"
    _echo(home)
    _zagent_run(home, tmp_path)
    with SQLiteJournal(home / "journal.db") as journal:
        (summary,) = journal.sessions()
    return home, summary.session_id


def test_a_replay_serves_the_recorded_thinking(tmp_path: Path) -> None:
    home, session_id = _recorded(tmp_path)
    with SQLiteJournal(home / "journal.db") as journal:
        recorded = [s.event for s in journal.read(session_id) if isinstance(s.event, ModelReplied)]
    served = ReplayModel(list(recorded)).reply([Message(role="user", content="say hi")], [])
    assert served.thinking == recorded[0].thinking and served.journaled(0).thinking == recorded[0].thinking


@pytest.mark.parametrize(("asked", "budget", "note"), [
    ("low", 2048, ""), (None, 8192, ""),
    ("high", 8192, "[thinking 'high' is more than model.thinking in config.json allows: the sub-agent thought at "
                   "'medium']")])
def test_spawn_thinks_as_asked_within_the_config(server: FakeServer, tmp_path: Path,  # noqa: F811
                                                  asked: str | None, budget: int, note: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    spawn = {"task": "think about it"} | ({"thinking": asked} if asked else {})
    server.reply(message("", [("toolu_1", "spawn", spawn)], "tool_use"))
    server.reply(message("Thought it over."))
    server.reply(message("Done."))
    config = Config(model=ModelConfig(stream=False, thinking="medium", anthropic=AnthropicConfig(base_url=server.url)))
    with SQLiteJournal(home / "journal.db") as journal:
        engine = Engine(Home(home), journal, workspace=tmp_path, config=config)
        with engine.start_session("run") as session:
            model = load_model("anthropic:claude-test", config.model)
            assert Agent(session, model, spec="anthropic:claude-test").run("go").reason == "idle"
        (spawned,) = [s.event for s in journal.read(session.session_id) if isinstance(s.event, ChildSpawned)]
        (result,) = [s.event for s in journal.read(session.session_id) if isinstance(s.event, ToolCallFinished)]
    parent, child, _ = server.requests
    assert parent["thinking"]["budget_tokens"] == 8192 and child["thinking"]["budget_tokens"] == budget
    assert spawned.thinking == (None if asked is None else "medium" if asked == "high" else asked)
    assert (note in result.output) if note else "thinking" not in result.output


def test_a_resume_after_a_sigkill_between_the_call_and_the_next_request_sends_the_same_thinking(
        server: FakeServer, tmp_path: Path) -> None:  # noqa: F811
    home = tmp_path / "home"
    _echo(home)
    (home / "config.json").write_text(json.dumps({"model": {"stream": False, "thinking": "low", "max_retries": 0}}))
    server.reply(_reply_with_thinking("Counting.", [("toolu_1", "echo", {"text": "hi"})], "tool_use"))
    server.reply(message("Done."))
    env = {**os.environ, "ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "sk-ant-test"}
    argv = [PYTHON, "-m", "zagent_cli", "--home", str(home)]
    crashed = subprocess.run([*argv, "run", "--model", "anthropic:claude-test", "say hi"], capture_output=True,
                             text=True, timeout=60, cwd=tmp_path, env={**env, "ZAGENT_CRASH_AT": "before_tool_call_finished"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    assert len(server.requests) == 1
    with SQLiteJournal(home / "journal.db") as journal:
        (summary,) = journal.sessions()
    resumed = subprocess.run([*argv, "resume", summary.session_id], capture_output=True, text=True, timeout=60,
                             cwd=tmp_path, env=env)
    assert resumed.returncode == 0, resumed.stderr
    first, second = server.requests
    assert second["messages"][1]["content"][:2] == [THOUGHT, REDACTED]
    assert second["messages"][1]["content"][2:] == [
        {"type": "text", "text": "Counting."}, {"type": "tool_use", "id": "toolu_1", "name": "echo",
                                                "input": {"text": "hi"}}]
    assert second["thinking"] == first["thinking"] == {"type": "enabled", "budget_tokens": 2048}


def test_thinking_only_leads_an_assistant_message_when_two_replies_are_joined() -> None:
    first, second = ThinkingBlock(thinking="a", signature="sa"), ThinkingBlock(thinking="b", signature="sb")
    wire = AnthropicModel("m").request([Message(role="user", content="go"),
                                        Message(role="assistant", content="One.", thinking=[first]),
                                        Message(role="assistant", content="Two.", thinking=[second])], [])["messages"]
    assert [block.get("thinking") or block["text"] for block in wire[1]["content"]] == ["a", "One.", "Two."]


@pytest.mark.parametrize("shown", [True, False])
def test_chat_shows_thinking_under_the_streamed_reply_unless_no_thinking(tmp_path: Path, shown: bool) -> None:
    script = tmp_path / "chat.json"
    script.write_text(json.dumps([{"thinking": [{"thinking": "A greeting; greet back.", "signature": "s"}],
                                   "text": "Hi."}]))
    home = tmp_path / "home"
    home.mkdir()
    child = test_chat.chat(home, "--model", f"scripted:{script}", *([] if shown else ["--no-thinking"]))
    test_chat.say(child, "hello")
    child.expect_exact("assistant: Hi.")
    child.expect_exact("you>")  # the turn is over: all of it printed
    assert ("thinking: A greeting; greet back." in child.before) is shown
    test_chat.say(child, "/exit")
    child.expect_exact("[left session")


def test_sessions_show_gives_the_thinking_with_the_reply(tmp_path: Path) -> None:
    home, session_id = _recorded(tmp_path)
    shown = subprocess.run([PYTHON, "-m", "zagent_cli", "--home", str(home), "sessions", "show", session_id],
                           capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "  [thinking: The user wants a count; I'll call the tool.]\n  [thinking: (redacted)]\n  Counting.\n" \
        in shown.stdout


def test_a_reply_without_thinking_is_journaled_as_before() -> None:
    # Older zagents refuse fields they do not know: a body without thinking must not name it.
    assert "thinking" not in dump_event(ModelReplied(model="m", stop_reason="end_turn"))
    assert "thinking" not in dump_event(ChildSpawned(call_id="c", label="child-1", child_session_id="s", task="t",
                                                     model="m"))
    assert '"thinking":[{"type":"thinking"' in dump_event(ModelReplied(model="m", stop_reason="end_turn",
                                                                       thinking=[ThinkingBlock(**THOUGHT)]))
