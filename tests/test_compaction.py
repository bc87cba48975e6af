"""Compaction (issue 22): what the model is shown shrinks, the journal keeps everything.

A request estimated past ``agent.compact_at`` of the window first loses old tool results'
bodies (``context_cleared``), then the conversation gives way to a summary the model writes
(``context_compacted``); ``zagent compact`` does it on request, and a provider's "too long"
does it once. Resume, replay and ``sessions show`` see it; a SIGKILL at each step of it
leaves a session that resumes.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import forked
from conftest import PYTHON, python_tool
from test_anthropic import FakeServer as AnthropicServer
from test_anthropic import message
from test_openai import FakeServer as OpenAIServer
from test_openai import completion

from zagent_core import Engine, Home
from zagent_core.agent.compaction import COMPACTION_PROMPT, context_window
from zagent_core.agent.conversation import SUMMARY_INTRO, Conversation
from zagent_core.agent.loop import Agent
from zagent_core.agent.models import Message, ModelReply, ToolCallRequest, ToolSpec, Usage
from zagent_core.agent.models.anthropic import AnthropicModel
from zagent_core.agent.models.openai import OpenAIModel
from zagent_core.agent.models.scripted import ScriptedModel
from zagent_core.history.replay import replay
from zagent_core.config import AgentConfig, BuiltinsConfig, Config, ModelConfig
from zagent_core.journal.events import ContextCleared, ContextCompacted
from zagent_core.session.crashpoints import COMPACTION_POINTS
from zagent_store import SQLiteJournal

#: A tool whose output is as long as its ``size`` argument says.
BIG = "import json, sys\nsize = json.load(sys.stdin).get('size', 3000)\nprint('x' * size)\n"


class Recording:
    """A scripted model that keeps every request it was sent."""

    def __init__(self, replies: list[ModelReply]) -> None:
        self.scripted = ScriptedModel(replies)
        self.name = "scripted:recording"
        self.requests: list[list[Message]] = []

    def reply(self, messages: list[Message], tools: list[ToolSpec], **_: Any) -> ModelReply:
        self.requests.append(messages)
        return self.scripted.reply(messages, tools)


def call(call_id: str, size: int = 3000) -> ModelReply:
    return ModelReply(text="", stop_reason="tool_use",
                      tool_calls=[ToolCallRequest(id=call_id, name="big", arguments={"size": size})])


def small_window(**agent: Any) -> Config:
    """A 1,024-token window compacted past half of it: about 2 KB of conversation."""
    return Config(model=ModelConfig(context_window=1024), agent=AgentConfig(**{"compact_at": 0.5, **agent}),
                  builtins=BuiltinsConfig(enabled=[]))


def journaled(journal: SQLiteJournal, session_id: str, kind: type) -> list[Any]:
    return [e.event for e in journal.read(session_id) if isinstance(e.event, kind)]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    python_tool(home, "big", BIG, concurrency_safe=True, replay="safe")
    return home


def test_a_conversation_past_its_budget_is_summarised_and_the_model_is_shown_the_summary_and_the_tail(
        home: Path, tmp_path: Path) -> None:
    model = Recording([call("c1"), ModelReply(text="SUMMARY: the user wants big output; it was made."),
                       ModelReply(text="done")])
    with SQLiteJournal(home / "journal.db") as journal:
        engine = Engine(Home(home), journal, workspace=tmp_path, config=small_window())
        session = engine.start_session("run")
        result = Agent(session, model, spec="scripted:recording").run("make big output")
        compacted = journaled(journal, session.session_id, ContextCompacted)
        everything = list(journal.read(session.session_id))
    assert result.reason == "idle" and result.requests == 2  # the summary is no turn's request
    assert len(compacted) == 1
    event = compacted[0]
    assert event.trigger == "auto" and event.summary.startswith("SUMMARY:") and event.requests == 2
    assert event.tokens_before > 512 > event.tokens_after
    # the summary request: the whole conversation, then the compaction prompt
    summary_request = model.requests[1]
    assert summary_request[-1].content == COMPACTION_PROMPT and summary_request[-2].role == "tool"
    # the next request: the system prompt and the summary, nothing of what it replaced
    last = model.requests[2]
    assert [m.role for m in last] == ["system", "user"]
    assert last[1].content == SUMMARY_INTRO + event.summary
    # nothing was deleted, and the summary covers up to the tool's result
    assert [e.event.type for e in everything].count("tool_call_finished") == 1
    finished = next(e for e in everything if e.event.type == "tool_call_finished")
    assert event.through_version >= finished.version


def test_old_tool_results_are_cleared_first_and_that_can_be_enough(home: Path, tmp_path: Path) -> None:
    # Four requests each make a 700-byte result; past 2 KB, results older than the latest
    # request's are cleared, and no summary is needed.
    model = Recording([call("c1", 700), call("c2", 700), call("c3", 700), call("c4", 700), ModelReply(text="ok")])
    with SQLiteJournal(home / "journal.db") as journal:
        engine = Engine(Home(home), journal, workspace=tmp_path,
                        config=small_window(keep_results_of_requests=1))
        session = engine.start_session("run")
        Agent(session, model).run("go")
        cleared = journaled(journal, session.session_id, ContextCleared)
        assert journaled(journal, session.session_id, ContextCompacted) == []
    assert cleared and cleared[0].results >= 1 and cleared[0].bytes >= 700
    assert cleared[0].tokens_after < cleared[0].tokens_before
    final = model.requests[-1]
    results = [m.content for m in final if m.role == "tool"]
    assert results[-1] == "x" * 700  # the latest request's result is kept whole
    assert results[0].startswith("[output cleared from the conversation to save context: 700 bytes;")
    assert "zagent sessions show" in results[0]
    # the calls and their arguments stay in front of the model
    assert [c.arguments for m in final for c in m.tool_calls] == [{"size": 700}] * 4


def test_compact_at_zero_turns_automatic_compaction_off(home: Path, tmp_path: Path) -> None:
    model = Recording([call("c1"), ModelReply(text="done")])
    with SQLiteJournal(home / "journal.db") as journal:
        engine = Engine(Home(home), journal, workspace=tmp_path, config=small_window(compact_at=0))
        session = engine.start_session("run")
        Agent(session, model).run("go")
        assert journaled(journal, session.session_id, ContextCompacted) == []
    assert model.requests[-1][-1].content == "x" * 3000


def test_notes_past_the_per_request_bound_are_counted_not_sent(tmp_path: Path) -> None:
    home = tmp_path / "home"
    notes = "\n".join(f"progress {i:05d} " + "." * 80 for i in range(2000))
    python_tool(home, "chatty", f"import os\nopen(os.environ['ZAGENT_NOTIFY_FILE'], 'w').write({notes!r} + '\\n')\n"
                "print('done')")
    model = Recording([ModelReply(text="", stop_reason="tool_use",
                                  tool_calls=[ToolCallRequest(id="c1", name="chatty", arguments={})]),
                       ModelReply(text="ok")])
    with SQLiteJournal(home / "journal.db") as journal:
        engine = Engine(Home(home), journal, workspace=tmp_path)
        session = engine.start_session("run")
        Agent(session, model).run("go")
        received = [e for e in journal.read(session.session_id) if e.event.type == "note_received"]
    assert len(received) == 2000  # the journal keeps every one
    delivered = model.requests[-1][-1].content
    assert 30 * 1024 < len(delivered.encode()) <= 32 * 1024 + 300
    assert delivered.startswith("[info: progress 00000")
    last = delivered.splitlines()[-1]
    assert last.startswith("[info: ") and "more notes and wake-ups" in last
    assert f"zagent sessions show {session.session_id}" in last


def test_window_comes_from_the_config_else_the_model_family_else_128k() -> None:
    assert context_window("anthropic:claude-sonnet-4-5", ModelConfig()) == 200_000
    assert context_window("openai:gpt-4o-mini", ModelConfig()) == 128_000
    assert context_window("openai:anthropic/claude-3-haiku", ModelConfig()) == 200_000
    assert context_window("openai:my-local-model", ModelConfig()) == 128_000
    assert context_window("anthropic:claude-sonnet-4-5", ModelConfig(context_window=50_000)) == 50_000


def _openai(server: OpenAIServer) -> OpenAIModel:
    return OpenAIModel("test-model", base_url=server.url, api_key="sk-test", max_retries=0,
                       config=ModelConfig(stream=False))


@pytest.fixture
def openai_server() -> Iterator[OpenAIServer]:
    fake = OpenAIServer()
    fake.thread.start()
    yield fake
    fake.httpd.shutdown()


@pytest.fixture
def anthropic_server() -> Iterator[AnthropicServer]:
    fake = AnthropicServer()
    fake.thread.start()
    yield fake
    fake.httpd.shutdown()


TOO_LONG = {"error": {"message": "This model's maximum context length is 8192 tokens. However, your messages "
                                 "resulted in 9000 tokens.", "type": "invalid_request_error", "param": "messages",
                      "code": "context_length_exceeded"}}


def test_a_too_long_refusal_over_openai_compacts_once_and_asks_again(
        home: Path, tmp_path: Path, openai_server: OpenAIServer) -> None:
    openai_server.reply(body=completion(None, [("call_1", "big", '{"size": 100}')], "tool_calls"))
    openai_server.reply(status=400, body=TOO_LONG)
    openai_server.reply(body=completion("SUMMARY: big output was made"))
    openai_server.reply(body=completion("done"))
    with SQLiteJournal(home / "journal.db") as journal:
        engine = Engine(Home(home), journal, workspace=tmp_path)
        session = engine.start_session("run")
        result = Agent(session, _openai(openai_server), spec="openai:test-model").run("go")
        compacted = journaled(journal, session.session_id, ContextCompacted)
    assert result.reason == "idle"
    assert [c.trigger for c in compacted] == ["too_long"]
    summary_request, retried = openai_server.requests[2], openai_server.requests[3]
    assert summary_request["messages"][-1] == {"role": "user", "content": COMPACTION_PROMPT}
    assert summary_request["tools"] == openai_server.requests[0]["tools"]  # the cache prefix holds
    assert [m["role"] for m in retried["messages"]] == ["system", "user"]
    assert retried["messages"][1]["content"].endswith("SUMMARY: big output was made")


def test_a_provider_that_still_says_too_long_ends_the_turn_after_one_compaction(
        home: Path, tmp_path: Path, openai_server: OpenAIServer) -> None:
    openai_server.reply(status=400, body=TOO_LONG)
    openai_server.reply(body=completion("SUMMARY"))
    openai_server.reply(status=400, body=TOO_LONG)
    with SQLiteJournal(home / "journal.db") as journal:
        engine = Engine(Home(home), journal, workspace=tmp_path)
        session = engine.start_session("run")
        result = Agent(session, _openai(openai_server)).run("go")
        assert len(journaled(journal, session.session_id, ContextCompacted)) == 1
    assert result.reason.startswith("model_error:") and "context_length_exceeded" in result.reason
    assert len(openai_server.requests) == 3  # never a loop


def test_anthropic_usage_drives_automatic_compaction_and_tools_go_with_the_summary_request(
        home: Path, tmp_path: Path, anthropic_server: AnthropicServer) -> None:
    # The provider counts 900 tokens for the first request: past 0.8 of a 1,024-token window.
    anthropic_server.reply(message("", [("toolu_1", "big", {"size": 10})], "tool_use",
                                   usage={"input_tokens": 900, "output_tokens": 20}))
    anthropic_server.reply(message("SUMMARY: asked for big output of size 10; got it."))
    anthropic_server.reply(message("done"))
    with SQLiteJournal(home / "journal.db") as journal:
        engine = Engine(Home(home), journal, workspace=tmp_path,
                        config=Config(model=ModelConfig(context_window=1024)))
        session = engine.start_session("run")
        model = AnthropicModel("claude-test", base_url=anthropic_server.url, api_key="sk-ant-test",
                               config=ModelConfig(stream=False), max_retries=0)
        Agent(session, model, spec="anthropic:claude-test").run("go")
        event = journaled(journal, session.session_id, ContextCompacted)[0]
    assert event.tokens_before >= 920 and event.model == "claude-test"
    summary_request, after = anthropic_server.requests[1], anthropic_server.requests[2]
    assert summary_request["tools"] and summary_request["messages"][-1]["content"][-1]["text"] == COMPACTION_PROMPT
    assert [m["role"] for m in after["messages"]] == ["user"]
    assert "SUMMARY: asked for big output" in json.dumps(after["messages"][0])


def zagent(home: Path, *args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return forked.run([PYTHON, "-m", "zagent_cli", "--home", str(home), *args], capture_output=True, text=True,
                      cwd=cwd, timeout=120, env={**os.environ, **(env or {})})


def session_of(result: subprocess.CompletedProcess[str]) -> str:
    return result.stderr.rsplit("session ", 1)[1].split("]")[0]


def _script(path: Path, replies: Any) -> str:
    path.write_text(json.dumps(replies))
    return f"scripted:{path}"


def test_zagent_compact_summarises_on_request_and_resume_shows_the_model_the_summary(
        home: Path, tmp_path: Path) -> None:
    script = _script(tmp_path / "s.json", [
        {"tool_calls": [{"name": "big", "arguments": {"size": 50}}]},
        {"text": "made it"},
        {"text": "SUMMARY: made a big output, focus kept"},
        {"text": "continuing from the summary"},
    ])
    first = zagent(home, "run", "--model", script, "make it", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    session_id = session_of(first)
    compacted = zagent(home, "compact", session_id, "--instructions", "keep the focus", cwd=tmp_path)
    assert compacted.returncode == 0, compacted.stderr
    assert compacted.stdout.strip() == "SUMMARY: made a big output, focus kept"
    assert f"compacted session {session_id}" in compacted.stderr
    again = zagent(home, "resume", session_id, "go on", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "continuing from the summary" in again.stdout
    with SQLiteJournal(home / "journal.db") as journal:
        event = journaled(journal, session_id, ContextCompacted)[0]
        conversation = Conversation("sys", journal.read(session_id, after_version=event.through_version))
    assert event.trigger == "manual" and event.instructions == "keep the focus" and event.requests == 3
    assert [m.role for m in conversation.messages()] == ["system", "user", "user", "assistant"]
    shown = zagent(home, "sessions", "show", session_id, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "context compacted (manual)" in shown.stdout and "make it" in shown.stdout  # nothing deleted


def test_zagent_compact_refuses_what_it_cannot_compact_in_one_line(home: Path, tmp_path: Path) -> None:
    unknown = zagent(home, "compact", "20260101-000000-abcdef", cwd=tmp_path)
    assert unknown.returncode == 2 and "Traceback" not in unknown.stderr
    assert "20260101-000000-abcdef" in unknown.stderr
    script = _script(tmp_path / "s.json", [{"text": "hi"}, {"tool_calls": [{"name": "big", "arguments": {}}]}])
    session_id = session_of(zagent(home, "run", "--model", script, "hello", cwd=tmp_path))
    silent = zagent(home, "compact", session_id, cwd=tmp_path)
    assert silent.returncode == 2 and "Traceback" not in silent.stderr
    assert "gave no summary" in silent.stderr
    with SQLiteJournal(home / "journal.db") as journal:
        assert journaled(journal, session_id, ContextCompacted) == []


@pytest.mark.parametrize("point", COMPACTION_POINTS)
def test_a_sigkill_during_compaction_leaves_a_session_that_resumes(home: Path, tmp_path: Path, point: str) -> None:
    script = _script(tmp_path / "s.json", [
        {"tool_calls": [{"name": "big", "arguments": {"size": 3000}}]},
        {"text": "SUMMARY: one big output"},
        {"text": "done"},
    ])
    config = {"model": {"context_window": 1024}, "agent": {"compact_at": 0.5}, "builtins": {"enabled": []}}
    (home / "config.json").write_text(json.dumps(config))
    killed = zagent(home, "run", "--model", script, "go", cwd=tmp_path, env={"ZAGENT_CRASH_AT": point})
    assert killed.returncode == -9
    with SQLiteJournal(home / "journal.db") as journal:
        session_id = journal.sessions()[0].session_id
        before = journaled(journal, session_id, ContextCompacted)
    assert len(before) == (1 if point == "after_context_compacted" else 0)  # all of it, or none
    resumed = zagent(home, "resume", session_id, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "done" in resumed.stdout
    with SQLiteJournal(home / "journal.db") as journal:
        after = journaled(journal, session_id, ContextCompacted)
    assert len(after) == 1 and after[0].summary == "SUMMARY: one big output"


def test_a_compacted_session_replays_with_the_recorded_summary_and_no_difference(home: Path, tmp_path: Path) -> None:
    script = _script(tmp_path / "s.json", [
        {"tool_calls": [{"name": "big", "arguments": {"size": 3000}}]},
        {"text": "SUMMARY: one big output"},
        {"tool_calls": [{"name": "big", "arguments": {"size": 10}}]},
        {"text": "done"},
    ])
    (home / "config.json").write_text(json.dumps({"model": {"context_window": 1024}, "agent": {"compact_at": 0.5},
                                                  "builtins": {"enabled": []}}))
    session_id = session_of(zagent(home, "run", "--model", script, "go", cwd=tmp_path))
    # The replay's own config would compact elsewhere: it follows the recording instead.
    (home / "config.json").write_text(json.dumps({"agent": {"compact_at": 0}}))
    for tools in ("recorded", "rerun"):
        replayed = zagent(home, "replay", session_id, "--tools", tools, "--json", cwd=tmp_path)
        assert replayed.returncode == 0, replayed.stdout + replayed.stderr
        report = json.loads(replayed.stdout)["replays"][0]
        assert report["matched"] and report["differences"] == [], report
    with SQLiteJournal(home / "journal.db") as journal, SQLiteJournal(tmp_path / "replays.db") as into:
        report = replay(journal, session_id, Home(home), into, config=Config(agent=AgentConfig(compact_at=0)))
        copy = journaled(into, report.replay_session_id, ContextCompacted)
        recorded = journaled(journal, session_id, ContextCompacted)
    assert report.matched
    assert [(c.summary, c.requests, c.trigger) for c in copy] == [(c.summary, c.requests, c.trigger) for c in recorded]


def test_a_resumed_compacted_session_reads_from_its_summary(home: Path, tmp_path: Path) -> None:
    model = Recording([call("c1"), ModelReply(text="SUMMARY"), ModelReply(text="done"), ModelReply(text="again")])
    with SQLiteJournal(home / "journal.db") as journal:
        engine = Engine(Home(home), journal, workspace=tmp_path, config=small_window())
        session = engine.start_session("run")
        Agent(session, model).run("go")
        session.release()
        event = journaled(journal, session.session_id, ContextCompacted)[0]
        resumed = engine.resume(session.session_id)
        assert resumed.state.context_from == event.through_version
        Agent(resumed, model).run("more")
        resumed.release()
    assert [m.role for m in model.requests[-1]] == ["system", "user", "assistant", "user"]
    assert model.requests[-1][1].content.endswith("SUMMARY")


def test_notes_pending_when_the_conversation_was_compacted_are_still_delivered() -> None:
    from datetime import datetime, timezone

    from zagent_core.journal.events import NoteReceived, TurnStarted, UserMessage
    from zagent_core.journal.protocol import StoredEvent

    def stored(version: int, event: Any) -> StoredEvent:
        return StoredEvent(seq=version, session_id="s", version=version, at=datetime.now(timezone.utc), event=event)

    events = [stored(1, UserMessage(text="hi")),
              stored(2, NoteReceived(call_id="c", text="late note", offset=10)),
              stored(3, ContextCompacted(summary="S", through_version=2, requests=1, trigger="manual", model="m",
                                         tokens_before=10, tokens_after=2, pending_notes={2: "late note"})),
              stored(4, TurnStarted(reason="wake", notes=[2]))]
    # Read from the start, or (as a resume does) from the summary on: the same messages.
    for tail in (events, events[2:]):
        messages = Conversation("sys", tail).messages()
        assert [(m.role, m.content) for m in messages] == [
            ("system", "sys"), ("user", SUMMARY_INTRO + "S"), ("user", "[info: late note]")]
        assert messages[1].requests_before == 1


def test_a_scripted_model_counts_the_requests_a_summary_stands_for() -> None:
    model = ScriptedModel([ModelReply(text=str(n)) for n in range(5)])
    summary = Message(role="user", content="S", requests_before=3)
    assert model.reply([Message(role="system"), summary], []).text == "3"
    assert model.reply([Message(role="system"), summary, Message(role="assistant"), Message(role="user")],
                       []).text == "4"
    assert model.reply([Message(role="system")], []).usage != Usage(input_tokens=-1)


def test_a_fork_and_an_import_of_a_compacted_session_show_the_model_the_summary(home: Path, tmp_path: Path) -> None:
    script = _script(tmp_path / "s.json", [
        {"tool_calls": [{"name": "big", "arguments": {"size": 3000}}]},
        {"text": "SUMMARY: one big output"},
        {"text": "done"},
        {"text": "the fork goes on"},
    ])
    (home / "config.json").write_text(json.dumps({"model": {"context_window": 1024}, "agent": {"compact_at": 0.5},
                                                  "builtins": {"enabled": []}}))
    session_id = session_of(zagent(home, "run", "--model", script, "go", cwd=tmp_path))
    fork = zagent(home, "sessions", "fork", session_id, "--at", "999999", cwd=tmp_path)
    assert fork.returncode == 0, fork.stderr
    forked = fork.stdout.strip()
    exported = zagent(home, "sessions", "export", session_id, "-o", str(tmp_path / "s.jsonl"), cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    other = tmp_path / "other"
    imported = zagent(other, "sessions", "import", str(tmp_path / "s.jsonl"), cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr
    resumed = zagent(home, "resume", forked, "and now?", cwd=tmp_path)
    assert resumed.returncode == 0 and "the fork goes on" in resumed.stdout, resumed.stderr
    for journal_home, sid in ((home, forked), (other, session_id)):
        with SQLiteJournal(journal_home / "journal.db") as journal:
            start = Engine(Home(journal_home), journal).session_state(sid).context_from
            shown = Conversation("sys", journal.read(sid, after_version=start)).messages()
        assert start > 0 and shown[1].content == SUMMARY_INTRO + "SUMMARY: one big output"


def test_a_sub_agent_compacts_its_own_conversation(home: Path, tmp_path: Path) -> None:
    task = "make a big output"
    script = _script(tmp_path / "s.json", {
        "replies": [{"tool_calls": [{"name": "spawn", "arguments": {"task": task}}]}, {"text": "the child is done"}],
        "children": {task: [{"tool_calls": [{"name": "big", "arguments": {"size": 3000}}]},
                            {"text": "SUMMARY: the child made one big output"}, {"text": "made it"}]},
    })
    (home / "config.json").write_text(json.dumps({"model": {"context_window": 1024}, "agent": {"compact_at": 0.5},
                                                  "builtins": {"enabled": ["spawn"]}}))
    run = zagent(home, "run", "--model", script, "delegate it", cwd=tmp_path)
    assert run.returncode == 0 and "the child is done" in run.stdout, run.stderr
    with SQLiteJournal(home / "journal.db") as journal:
        parent = session_of(run)
        child = next(iter(Engine(Home(home), journal).session_state(parent).children.values()))
        compacted = journaled(journal, child.session_id, ContextCompacted)
    assert child.text == "made it"
    assert [c.summary for c in compacted] == ["SUMMARY: the child made one big output"]
