"""The agent loop with the scripted model: turns, corrections, parallel calls, limits, wake-ups."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from conftest import python_tool

from zagent_core import Engine
from zagent_core.agent.conversation import OrphanedCallError, conversation
from zagent_core.agent.loop import Agent
from zagent_core.config import AgentConfig
from zagent_core.journal.events import ModelReplied, RepliedCall, ToolCallRequested
from zagent_core.agent.models import ModelReply, ToolCallRequest
from zagent_core.agent.models.scripted import ScriptedModel


def script(*replies: dict) -> ScriptedModel:
    return ScriptedModel([
        ModelReply(text=r.get("text", ""), tool_calls=[
            ToolCallRequest(id=c.get("id", f"c{n}_{i}"), name=c["name"], arguments=c.get("arguments", {}))
            for i, c in enumerate(r.get("tool_calls", []))], stop_reason="tool_use" if r.get("tool_calls") else "end_turn")
        for n, r in enumerate(replies)
    ])


def types(engine: Engine, session_id: str) -> list[str]:
    return [e.event.type for e in engine.journal.read(session_id)]


def test_every_reply_is_journaled_before_its_calls_run(home_dir: Path, engine: Engine) -> None:
    python_tool(home_dir, "echo", "import json, sys\nprint(json.load(sys.stdin)['say'])",
                parameters={"type": "object", "properties": {"say": {"type": "string"}}, "required": ["say"]})
    model = script({"text": "saying", "tool_calls": [{"name": "echo", "arguments": {"say": "hi"}}]}, {"text": "done"})
    session = engine.start_session("run")
    result = Agent(session, model).run("say hi")
    assert result.reason == "idle" and result.requests == 2
    assert types(engine, session.session_id)[1:] == [
        "user_message", "turn_started", "model_replied", "tool_call_requested", "tool_call_started",
        "tool_call_finished", "model_replied", "turn_ended"]
    messages = conversation(engine.journal.read(session.session_id), "sys")
    assert [(m.role, m.content) for m in messages] == [
        ("system", AgentConfig().system_prompt),  # the journaled one, not the fallback
        ("user", "say hi"), ("assistant", "saying"), ("tool", "hi"), ("assistant", "done")]
    assert messages[3].tool_call_id == "c0_0"


def test_concurrency_safe_calls_run_together_and_results_keep_the_order_asked(home_dir: Path, engine: Engine,
                                                                            tmp_path: Path) -> None:
    # Each call leaves a mark and waits (up to a limit) for the marks of the three calls of its
    # reply: calls that run together all see three, calls that run one after another see 1, 2, 3.
    code = ("import json, os, sys, time\nargs = json.load(sys.stdin)\n"
            "folder = os.path.join(os.environ['MEETING'], args['group'])\nos.makedirs(folder, exist_ok=True)\n"
            "open(os.path.join(folder, str(args['n'])), 'w').close()\ndeadline = time.time() + args['wait']\n"
            "while len(os.listdir(folder)) < 3 and time.time() < deadline:\n    time.sleep(0.01)\n"
            "print(json.dumps({'n': args['n'], 'met': len(os.listdir(folder))}))")
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "group": {"type": "string"},
                                               "wait": {"type": "number"}}}
    meeting = {"MEETING": str(tmp_path / "meeting")}
    python_tool(home_dir, "safe", code, parameters=schema, concurrency_safe=True, env=meeting)
    python_tool(home_dir, "unsafe", code, parameters=schema, env=meeting)
    calls = lambda name, wait: [{"name": name, "arguments": {"n": n, "group": name, "wait": wait}}  # noqa: E731
                                for n in (1, 2, 3)]
    # Together, the three meet however slow the machine (30 s to do it); alone, each waits 0.3 s in vain.
    model = script({"tool_calls": calls("safe", 30)}, {"tool_calls": calls("unsafe", 0.3)}, {"text": "ok"})
    session = engine.start_session("run")
    Agent(session, model).run("go")
    messages = conversation(engine.journal.read(session.session_id), "sys")
    tool_results = [json.loads(m.content) for m in messages if m.role == "tool"]
    assert [r["n"] for r in tool_results] == [1, 2, 3, 1, 2, 3]  # the order the model asked for
    assert [r["met"] for r in tool_results] == [3, 3, 3, 1, 2, 3]  # together, then one after another


def test_limits_stop_a_turn_with_a_clear_reason_and_every_call_answered(home_dir: Path, engine: Engine) -> None:
    python_tool(home_dir, "noop", "print('ok')")
    many = {"tool_calls": [{"name": "noop"} for _ in range(3)]}
    session = engine.start_session("run")
    result = Agent(session, script(many), AgentConfig(max_tool_calls_per_turn=2)).run("go")
    assert result.reason == "max_tool_calls"
    rejected = [e.event for e in engine.journal.read(session.session_id) if e.event.type == "tool_call_rejected"]
    assert len(rejected) == 3 and "limit of 2 tool calls" in rejected[0].message
    conversation(engine.journal.read(session.session_id), "sys")  # no orphan

    looping = script(*[{"tool_calls": [{"name": "noop"}]} for _ in range(10)])
    other = engine.start_session("run")
    assert Agent(other, looping, AgentConfig(max_turns=3)).run("go").reason == "max_turns"


def test_a_model_error_ends_the_turn_and_says_why(engine: Engine) -> None:
    session = engine.start_session("run")
    result = Agent(session, script()).run("hello")
    assert result.reason.startswith("model_error: the script has no reply #1")
    assert session.state.last_turn_end == result.reason


def test_an_idle_agent_is_woken_by_a_note_and_by_a_task_exit(home_dir: Path, engine: Engine) -> None:
    code = ("import json, os, time\nnote = lambda t, w: open(os.environ['ZAGENT_NOTIFY_FILE'], 'a').write("
            "json.dumps({'text': t, 'wake': w}) + '\\n')\n"
            "time.sleep(0.3)\nnote('halfway', False)\nnote('need a decision', True)\ntime.sleep(0.5)\nprint('finished')")
    python_tool(home_dir, "job", code, background=True)
    model = script({"tool_calls": [{"name": "job"}]}, {"text": "started"}, {"text": "decided"}, {"text": "all done"})
    session = engine.start_session("run")
    result = Agent(session, model).run("start the job", wait_minutes=1)
    assert result.reason == "idle" and result.requests == 4
    messages = conversation(engine.journal.read(session.session_id), "sys")
    infos = [m.content for m in messages if m.role == "user" and m.content.startswith("[info:")]
    assert infos[0] == "[info: halfway]\n[info: need a decision]"
    assert infos[1].startswith("[info: task #1 (job) finished:\nfinished")
    turns = [e.event.reason for e in engine.journal.read(session.session_id) if e.event.type == "turn_started"]
    assert turns == ["user", "wake", "wake"]
    assert session.state.pending_wakes == {}


def test_a_headless_run_gives_up_waiting_at_its_limit_and_stays_resumable(home_dir: Path, engine: Engine) -> None:
    python_tool(home_dir, "long", "import time\ntime.sleep(30)", background=True, timeout_seconds=-1)
    session = engine.start_session("run")
    started = time.monotonic()
    result = Agent(session, script({"tool_calls": [{"name": "long"}]}, {"text": "waiting"})).run(
        "go", wait_minutes=0.01)
    assert result.reason == "idle" and time.monotonic() - started < 5
    assert engine.status(session.session_id) == "running"  # this process still drives it
    session.release()
    assert engine.status(session.session_id) == "waiting on tasks"
    session.end()  # stops the task


def test_no_orphaned_call_ever_reaches_a_model(engine: Engine) -> None:
    session = engine.start_session("run")
    session._append([ModelReplied(model="m", stop_reason="tool_use",
                                  tool_calls=[RepliedCall(id="a", call_id="a", name="t", arguments={})])])
    with pytest.raises(OrphanedCallError, match="tool call a"):
        conversation(engine.journal.read(session.session_id), "sys")
    session._append([ToolCallRequested(call_id="a", tool="t", arguments={})])
    with pytest.raises(OrphanedCallError):
        conversation(engine.journal.read(session.session_id), "sys")


def test_model_call_ids_that_cannot_name_a_folder_or_repeat_are_mapped(home_dir: Path, engine: Engine) -> None:
    python_tool(home_dir, "noop", "print('ok')")
    model = script({"tool_calls": [{"id": "../x", "name": "noop"}, {"id": "call_0", "name": "noop"}]},
                   {"tool_calls": [{"id": "call_0", "name": "noop"}]}, {"text": "ok"})
    session = engine.start_session("run")
    Agent(session, model).run("go")
    requested = [e.event for e in engine.journal.read(session.session_id) if e.event.type == "tool_call_requested"]
    assert [e.call_id for e in requested] == ["call_.._x", "call_0", "call_0~2"]
    tool_ids = [m.tool_call_id for m in conversation(engine.journal.read(session.session_id), "s") if m.role == "tool"]
    assert tool_ids == ["../x", "call_0", "call_0"]  # the model sees its own ids back


def test_a_turn_the_model_failed_goes_on_when_resumed_without_a_prompt(engine: Engine) -> None:
    session = engine.start_session("run")
    assert Agent(session, script()).run("hello").reason.startswith("model_error")
    resumed = engine.resume(session.session_id)
    result = Agent(resumed, script({"text": "hello back"})).run(None)
    assert result.reason == "idle" and result.requests == 1
    turns = [e.event.reason for e in engine.journal.read(session.session_id) if e.event.type == "turn_started"]
    assert turns == ["user", "resume"]


def test_the_system_prompt_is_journaled_and_used_when_the_conversation_is_rebuilt(engine: Engine) -> None:
    session = engine.start_session("run")
    Agent(session, script({"text": "hi"}), AgentConfig(system_prompt="Be brief.")).run("hello")
    assert conversation(engine.journal.read(session.session_id), "another prompt")[0].content == "Be brief."


class Recording:
    """A model that remembers every request it was sent (the real interface, a scripted answer)."""

    def __init__(self, model: ScriptedModel) -> None:
        self.model, self.name, self.requests = model, model.name, []

    def reply(self, messages, tools):
        self.requests.append(messages)
        return self.model.reply(messages, tools)


def test_notes_a_turn_took_before_a_crash_cut_off_its_request_reach_the_model_after_resume(
        home_dir: Path, engine: Engine) -> None:
    python_tool(home_dir, "noisy", "import os\nopen(os.environ['ZAGENT_NOTIFY_FILE'], 'a').write('halfway there\\n')")
    session = engine.start_session("run")
    session.call("noisy", {})
    assert [n.text for n in session.state.pending_notes.values()] == ["halfway there"]
    # turn_started takes the note; then the process dies before the model is asked.
    session.deliver(turn="user", system_prompt="sys")
    assert not session.state.pending_notes
    model = Recording(script({"text": "noted"}))
    Agent(engine.resume(session.session_id), model).run(None)
    (request,) = model.requests
    assert [m.content for m in request if m.role == "user"] == ["[info: halfway there]"]


def test_an_idle_agent_never_sees_a_task_gone_without_its_wake_up(home_dir: Path, engine: Engine,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A task's end and its wake-up are one step: folded between the two, a session must
    not look idle with nothing to wait for (the run ended and the wake-up was lost)."""
    from zagent_core.session import writer as engine_module
    from zagent_core.journal.events import TaskExited

    folded = engine_module.fold

    def slow_after_task_end(state, stored) -> None:  # type: ignore[no-untyped-def]
        folded(state, stored)
        if isinstance(stored.event, TaskExited):
            time.sleep(0.5)  # widen the window between the task's end and its wake-up

    monkeypatch.setattr(engine_module, "fold", slow_after_task_end)
    python_tool(home_dir, "quick", "print('done quickly')", background=True)
    session = engine.start_session("run")
    result = Agent(session, script({"tool_calls": [{"name": "quick"}]}, {"text": "started it"},
                                   {"text": "it is done"})).run("go")
    assert result.reason == "idle" and result.requests == 3, result
    assert session.state.pending_wakes == {}
