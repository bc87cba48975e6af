"""spawn (issue 11): sub-agents as child sessions of the same journal.

In process, with a real engine, a real SQLite journal and scripted models (parent and
children scripted in one file); crashes and Ctrl-C are in tests/test_spawn_crash.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import forked
from conftest import python_tool

from zagent_core import Engine, Home
from zagent_core.agent.loop import Agent
from zagent_core.config import CatalogModel, Config, LimitsConfig, SpawnConfig, SubagentConfig
from zagent_core.journal.events import ChildEnded, ChildSpawned, SessionStarted, ToolCallFinished, ToolCallRejected
from zagent_core.agent.models import load_model
from zagent_core.journal.fold import rebuild
from zagent_store import SQLiteJournal


def spawn(task: str, **extra: Any) -> dict[str, Any]:
    return {"name": "spawn", "arguments": {"task": task, **extra}}


def reply(text: str = "", *calls: dict[str, Any]) -> dict[str, Any]:
    return {"text": text, "tool_calls": list(calls)}


def run(home: Path, journal: SQLiteJournal, workspace: Path, script: dict[str, Any] | list[Any], prompt: str = "go",
        catalog: list[CatalogModel] | None = None, **spawn_config: Any) -> tuple[Engine, str]:
    path = home.parent / "script.json"
    path.write_text(json.dumps(script))
    config = Config(limits=LimitsConfig(kill_grace_seconds=0.3), spawn=SpawnConfig(**spawn_config),
                    models=catalog or [])
    engine = Engine(Home(home), journal, workspace=workspace, config=config)
    spec = f"scripted:{path}"
    with engine.start_session("test") as session:
        result = Agent(session, load_model(spec), spec=spec).run(prompt)
        assert result.reason == "idle", result
        return engine, session.session_id


def results(journal: SQLiteJournal, session_id: str) -> dict[str, ToolCallFinished | ToolCallRejected]:
    """Each call's result, by call id."""
    return {stored.event.call_id: stored.event for stored in journal.read(session_id)
            if isinstance(stored.event, (ToolCallFinished, ToolCallRejected))}


def child_of(journal: SQLiteJournal, session_id: str, label: str) -> str:
    return rebuild(journal.read(session_id)).children[label].session_id


def test_children_of_one_reply_run_side_by_side_and_answer_their_calls(home_dir: Path, journal: SQLiteJournal,
                                                                        workspace: Path) -> None:
    (workspace / "a.txt").write_text("hello\n")
    script = {
        "replies": [reply("fanning out", spawn("list the files"), spawn("say hi")), reply("both answered")],
        "children": {
            "list the files": [reply("", {"name": "list_files", "arguments": {"path": "."}}), reply("one file: a.txt")],
            "say hi": [reply("hi")],
        },
    }
    _, parent_id = run(home_dir, journal, workspace, script)

    state = rebuild(journal.read(parent_id))
    assert {child.task: child.status for child in state.children.values()} == {
        "list the files": "completed", "say hi": "completed"}
    finished = results(journal, parent_id)
    assert finished["call_s1_0"].output.endswith("\none file: a.txt") and finished["call_s1_1"].output.endswith("\nhi")
    assert all(not result.is_error for result in finished.values())
    for child in state.children.values():
        events = [stored.event for stored in journal.read(child.session_id)]
        started = events[0]
        assert isinstance(started, SessionStarted) and started.origin == "spawn"
        assert started.parent is not None and started.parent.session_id == parent_id
        assert started.parent.depth == 1 and started.parent.label == child.label
        assert child.stats.turns == {"list the files": 2, "say hi": 1}[child.task]
        assert child.stats.input_tokens > 0
    # The child's outcome and the call's result are one transaction.
    stored = list(journal.read(parent_id))
    for ended in (s for s in stored if isinstance(s.event, ChildEnded)):
        after = stored[stored.index(ended) + 1]
        assert isinstance(after.event, ToolCallFinished) and after.event.call_id == ended.event.call_id
        assert after.at == ended.at


def test_a_grandchilds_tokens_count_in_its_parents_stats(home_dir: Path, journal: SQLiteJournal,
                                                         workspace: Path) -> None:
    script = {
        "replies": [reply("", spawn("plan")), reply("done")],
        "children": {"plan": {"replies": [reply("", spawn("research")), reply("planned")],
                              "children": {"research": [reply("found it")]}}},
    }
    _, parent_id = run(home_dir, journal, workspace, script)

    child = rebuild(journal.read(parent_id)).children["child-1"]
    child_state = rebuild(journal.read(child.session_id))
    grandchild = child_state.children["child-1"]
    grandchild_state = rebuild(journal.read(grandchild.session_id))
    assert grandchild_state.parent is not None and grandchild_state.parent.depth == 2
    assert grandchild.stats.input_tokens == grandchild_state.input_tokens > 0
    assert child.stats.input_tokens == child_state.input_tokens + grandchild.stats.input_tokens
    assert child.stats.output_tokens == child_state.output_tokens + grandchild.stats.output_tokens
    assert child.text == "planned" and grandchild.text == "found it"


def test_resume_gives_a_stopped_child_a_new_task_with_its_conversation(home_dir: Path, journal: SQLiteJournal,
                                                                       workspace: Path) -> None:
    script = {
        "replies": [reply("", spawn("count to two")), reply("", spawn("and now three", resume="child-1")),
                    reply("done")],
        "children": {"child-1": [reply("1, 2"), reply("3")]},
    }
    _, parent_id = run(home_dir, journal, workspace, script)

    state = rebuild(journal.read(parent_id))
    assert list(state.children) == ["child-1"]
    child = state.children["child-1"]
    assert child.text == "3" and child.task == "and now three"
    child_events = [stored.event for stored in journal.read(child.session_id)]
    assert sum(isinstance(event, SessionStarted) for event in child_events) == 1
    # Its second run's request held its first run: the script's second reply answered it.
    assert [e.text for e in child_events if e.type == "model_replied"] == ["1, 2", "3"]


def test_an_unknown_label_or_a_running_one_is_refused_with_what_there_is(home_dir: Path, journal: SQLiteJournal,
                                                                          workspace: Path) -> None:
    script = {"replies": [reply("", spawn("first")), reply("", spawn("more", resume="child-7")), reply("ok")],
              "children": {"*": [reply("did it")]}}
    _, parent_id = run(home_dir, journal, workspace, script)

    refused = [r for r in results(journal, parent_id).values() if r.is_error]
    assert len(refused) == 1
    assert refused[0].output == ('spawn refused: this session has no sub-agent "child-7" (did you mean "child-1"?); '
                                 "its sub-agents: child-1")


def test_depth_limit_leaves_spawn_out_of_a_childs_tools(home_dir: Path, journal: SQLiteJournal,
                                                         workspace: Path) -> None:
    script = {"replies": [reply("", spawn("try to delegate")), reply("ok")],
              "children": {"*": [reply("", spawn("deeper")), reply("did it myself")]}}
    _, parent_id = run(home_dir, journal, workspace, script, max_depth=1)

    child_id = child_of(journal, parent_id, "child-1")
    (rejected,) = [r for r in results(journal, child_id).values() if isinstance(r, ToolCallRejected)]
    assert rejected.reason == "not_offered"
    assert rejected.message.startswith('tool "spawn" is not offered to this sub-agent, so it was not run; its tools: ')
    offered = rebuild(journal.read(child_id)).tools
    assert "spawn" in {offer.name for offer in offered}  # what the engine has; the model is not told of it


def test_max_depth_zero_turns_spawn_off(home_dir: Path, journal: SQLiteJournal, workspace: Path) -> None:
    engine = Engine(Home(home_dir), journal, workspace=workspace, config=Config(spawn=SpawnConfig(max_depth=0)))
    assert "spawn" not in engine.builtins
    with engine.start_session("test") as session:
        result = session.call("spawn", {"task": "x"})
    assert result.is_error and result.output.startswith('unknown tool "spawn"')


def test_past_max_concurrent_a_top_level_spawn_waits_for_a_slot(home_dir: Path, journal: SQLiteJournal,
                                                               workspace: Path) -> None:
    slow = [reply("", {"name": "shell", "arguments": {"command": "sleep 0.2"}}), reply("done")]
    script = {"replies": [reply("", spawn("one"), spawn("two"), spawn("three")), reply("ok")],
              "children": {"*": slow}}
    _, parent_id = run(home_dir, journal, workspace, script, max_concurrent=1)

    spans = []
    for child in rebuild(journal.read(parent_id)).children.values():
        assert child.status == "completed"
        stored = list(journal.read(child.session_id))
        spans.append((stored[0].at, stored[-1].at))
    spans.sort()
    assert all(earlier[1] <= later[0] for earlier, later in zip(spans, spans[1:])), spans


def test_a_childs_spawn_is_refused_when_no_slot_is_free(home_dir: Path, journal: SQLiteJournal,
                                                        workspace: Path) -> None:
    script = {"replies": [reply("", spawn("lead")), reply("ok")],
              "children": {"lead": {"replies": [reply("", spawn("help")), reply("alone then")],
                                    "children": {"*": [reply("helped")]}}}}
    _, parent_id = run(home_dir, journal, workspace, script, max_concurrent=1)

    child_id = child_of(journal, parent_id, "child-1")
    (refused,) = results(journal, child_id).values()
    assert refused.is_error and refused.output.startswith("spawn refused: 1 sub-agents are running already")
    assert rebuild(journal.read(child_id)).children == {}


def test_a_child_past_its_time_ends_as_timeout_and_its_task_is_stopped(home_dir: Path, journal: SQLiteJournal,
                                                                        workspace: Path) -> None:
    script = {"replies": [reply("", spawn("be slow")), reply("ok")],
              "children": {"*": [reply("", {"name": "shell", "arguments": {"command": "sleep 0.5"}}),
                                 reply("never sent")]}}
    _, parent_id = run(home_dir, journal, workspace, script, child_timeout_minutes=0.2 / 60)

    child = rebuild(journal.read(parent_id)).children["child-1"]
    assert child.status == "timeout" and child.stats.turns == 1
    (result,) = results(journal, parent_id).values()
    assert result.is_error
    assert result.output.endswith("child-1 did not complete: it ran out of time (spawn.child_timeout_minutes)")


def test_a_child_at_its_turn_limit_ends_with_an_error(home_dir: Path, journal: SQLiteJournal,
                                                      workspace: Path) -> None:
    script = {"replies": [reply("", spawn("loop")), reply("ok")],
              "children": {"*": [reply("", {"name": "glob", "arguments": {"pattern": "*"}})] * 3}}
    _, parent_id = run(home_dir, journal, workspace, script, child_max_turns=2)

    child = rebuild(journal.read(parent_id)).children["child-1"]
    assert child.status == "error" and child.stats.turns == 2
    assert child.text == "it reached its limit of 2 model requests (spawn.child_max_turns)"


def test_presets_and_the_model_catalog(home_dir: Path, journal: SQLiteJournal, workspace: Path) -> None:
    cheap = home_dir.parent / "cheap.json"
    cheap.write_text(json.dumps([reply("", {"name": "write_file", "arguments": {"path": "x", "content": "y"}}),
                                 reply("looked only")]))
    script = {"replies": [reply("", spawn("look", subagent_type="explore"), spawn("x", subagent_type="explorer"),
                                spawn("x", model="cheep")), reply("ok")],
              "children": {"x": [reply("wrote nothing")]}}
    _, parent_id = run(home_dir, journal, workspace, script, models={"cheap": f"scripted:{cheap}"},
                       subagents={"explore": SubagentConfig(description="reads", readonly=True, model="cheap",
                                                            system_prompt="You only read.")})

    finished = results(journal, parent_id)
    outputs = [finished[f"call_s1_{n}"].output for n in range(3)]  # type: ignore[union-attr]
    # an unknown preset is no refusal (as in the seed): a general-purpose child runs, and the model is told
    header, note, answer = outputs[1].split("\n")
    assert header.startswith("[child-2 completed: ") and answer == "wrote nothing"
    assert note == ('[unknown subagent_type "explorer" (did you mean "explore"?): it ran as a general-purpose '
                    "sub-agent (no preset); the presets are: explore]")
    general = rebuild(journal.read(parent_id)).children["child-2"]
    assert general.subagent_type is None and rebuild(journal.read(general.session_id)).parent.tools is None  # type: ignore[union-attr]
    assert outputs[2] == 'spawn refused: unknown model "cheep" (did you mean "cheap"?); the models are: cheap'
    assert outputs[0].endswith("\nlooked only")
    child = rebuild(journal.read(parent_id)).children["child-1"]
    assert child.model == f"scripted:{cheap}" and child.subagent_type == "explore"
    child_state = rebuild(journal.read(child.session_id))
    assert child_state.parent is not None
    assert child_state.parent.tools == ["read_file", "list_files", "glob", "grep", "record_artifact", "spawn"]
    (rejected,) = [r for r in results(journal, child.session_id).values() if isinstance(r, ToolCallRejected)]
    assert rejected.reason == "not_offered" and not (workspace / "x").exists()
    turns = [s.event for s in journal.read(child.session_id, types=("turn_started",))]
    assert turns[0].system_prompt == "You only read."


def test_an_unknown_subagent_type_runs_as_the_general_purpose_preset_when_config_has_one(
        home_dir: Path, journal: SQLiteJournal, workspace: Path) -> None:
    script = {"replies": [reply("", spawn("plan it", subagent_type="Plan")), reply("ok")],
              "children": {"plan it": [reply("planned")]}}
    _, parent_id = run(home_dir, journal, workspace, script, subagents={
        "general-purpose": SubagentConfig(system_prompt="You are general."), "explore": SubagentConfig()})

    output = results(journal, parent_id)["call_s1_0"].output
    assert output.split("\n")[1:] == [
        '[unknown subagent_type "Plan": it ran as a general-purpose sub-agent (the "general-purpose" preset); '
        "the presets are: general-purpose, explore]", "planned"]
    child = rebuild(journal.read(parent_id)).children["child-1"]
    assert child.subagent_type == "general-purpose"
    turns = [s.event for s in journal.read(child.session_id, types=("turn_started",))]
    assert turns[0].system_prompt == "You are general."


def test_a_childs_events_reach_the_listeners_of_the_whole_tree_and_no_others(
        home_dir: Path, journal: SQLiteJournal, workspace: Path) -> None:
    path = home_dir.parent / "script.json"
    path.write_text(json.dumps({"replies": [reply("", spawn("outer")), reply("ok")],
                                "children": {"outer": {"replies": [reply("", spawn("inner")), reply("outer done")],
                                                       "children": {"inner": [reply("inner done")]}}}}))
    engine = Engine(Home(home_dir), journal, workspace=workspace, config=Config())
    own: list[str] = []
    tree: list[tuple[str, str]] = []
    spec = f"scripted:{path}"
    with engine.start_session("test") as session:
        session.subscribe(lambda stored: own.append(stored.session_id))
        session.subscribe(lambda stored: tree.append((stored.session_id, stored.event.type)), descendants=True)
        Agent(session, load_model(spec), spec=spec).run("go")
    outer = child_of(journal, session.session_id, "child-1")
    inner = child_of(journal, outer, "child-1")
    assert set(own) == {session.session_id}
    heard = {sid: [kind for s, kind in tree if s == sid] for sid in (session.session_id, outer, inner)}
    for sid in heard:  # all a child appends once it runs: its run's events, in order
        run = [e.type for e in (s.event for s in journal.read(sid)) if e.type != "session_started"]
        assert heard[sid] == run, sid


def test_a_script_without_replies_for_a_child_refuses_the_spawn(home_dir: Path, journal: SQLiteJournal,
                                                                 workspace: Path) -> None:
    _, parent_id = run(home_dir, journal, workspace, [reply("", spawn("anything")), reply("ok")])

    (refused,) = results(journal, parent_id).values()
    assert refused.is_error and 'has no replies for sub-agent child-1: add "children": {"child-1": [...]}' in \
        refused.output
    assert not any(isinstance(s.event, ChildSpawned) for s in journal.read(parent_id))


@pytest.mark.parametrize("call", [{"name": "ask_user", "arguments": {"question": "?"}},
                                  {"name": "deploy", "arguments": {}}])
def test_a_child_asks_no_person(home_dir: Path, journal: SQLiteJournal, workspace: Path,
                                call: dict[str, Any]) -> None:
    python_tool(home_dir, "deploy", "print('deployed')", permission="ask")
    script = {"replies": [reply("", spawn("ask")), reply("ok")], "children": {"*": [reply("", call), reply("fine")]}}
    _, parent_id = run(home_dir, journal, workspace, script)

    child_id = child_of(journal, parent_id, "child-1")
    (rejected,) = results(journal, child_id).values()
    assert isinstance(rejected, ToolCallRejected) and rejected.reason == "not_offered"
    assert rebuild(journal.read(parent_id)).children["child-1"].text == "fine"


def test_children_of_one_reply_take_their_labels_in_the_replys_order(home_dir: Path, journal: SQLiteJournal,
                                                                     workspace: Path) -> None:
    # Four threads race to their admission; the labels follow the reply all the same.
    script = {"replies": [reply("", *(spawn(f"part {n}") for n in range(1, 5))), reply("ok")],
              "children": {"child-1": [reply("I am child-1")], "*": [reply("I am another")]}}
    for _ in range(3):
        _, parent_id = run(home_dir, journal, workspace, script, max_concurrent=4)
        children = rebuild(journal.read(parent_id)).children
        assert {label: child.task for label, child in children.items()} == {
            f"child-{n}": f"part {n}" for n in range(1, 5)}
        assert children["child-1"].text == "I am child-1"


# -- what a review of the first version found -------------------------------------------------


def test_two_resumes_of_one_child_in_one_reply_drive_it_once(home_dir: Path, journal: SQLiteJournal,
                                                             workspace: Path) -> None:
    script = {"replies": [reply("", spawn("one")),
                          reply("", spawn("two", resume="child-1"), spawn("three", resume="child-1")), reply("ok")],
              "children": {"child-1": [reply("1"), reply("2"), reply("3")]}}
    _, parent_id = run(home_dir, journal, workspace, script)

    finished = results(journal, parent_id)
    assert finished["call_s2_0"].output.endswith("\n2")  # type: ignore[union-attr]
    assert finished["call_s2_1"].output == (  # type: ignore[union-attr]
        "spawn refused: child-1 is still running (spawn call call_s2_0); its result comes with that call")
    child = rebuild(journal.read(parent_id)).children["child-1"]
    assert (child.task, child.status) == ("two", "completed")
    told = [s.event.text for s in journal.read(child.session_id) if s.event.type == "user_message"]
    assert told == ["one", "two"]


def test_a_resumed_child_keeps_its_system_prompt_and_may_not_change_model_or_preset(
        home_dir: Path, journal: SQLiteJournal, workspace: Path) -> None:
    script = {"replies": [reply("", spawn("one", system="You are terse.")),
                          reply("", spawn("two", resume="child-1"), spawn("x", resume="child-1", model="other")),
                          reply("ok")],
              "children": {"child-1": [reply("1"), reply("2")]}}
    _, parent_id = run(home_dir, journal, workspace, script, models={"other": "openai:gpt-4o-mini"})

    child_id = child_of(journal, parent_id, "child-1")
    prompts = [s.event.system_prompt for s in journal.read(child_id, types=("turn_started",))]
    assert prompts == ["You are terse.", "You are terse."]
    assert results(journal, parent_id)["call_s2_1"].output == (  # type: ignore[union-attr]
        "spawn refused: a resumed sub-agent keeps its model, preset and thinking: leave out model, or spawn a new sub-agent")


def test_a_presets_own_model_spec_works_beside_a_catalog(home_dir: Path, journal: SQLiteJournal,
                                                         workspace: Path) -> None:
    other = home_dir.parent / "other.json"
    other.write_text(json.dumps([reply("from the preset's model")]))
    script = {"replies": [reply("", spawn("x", subagent_type="pinned")), reply("ok")]}
    _, parent_id = run(home_dir, journal, workspace, script, models={"fast": "openai:gpt-4o-mini"},
                       subagents={"pinned": SubagentConfig(model=f"scripted:{other}")})

    (result,) = results(journal, parent_id).values()
    assert result.output.endswith("\nfrom the preset's model")  # type: ignore[union-attr]


def test_a_long_reply_reaches_the_parent_capped_at_child_reply_bytes(home_dir: Path, journal: SQLiteJournal,
                                                                     workspace: Path) -> None:
    script = {"replies": [reply("", spawn("write a lot")), reply("ok")], "children": {"*": [reply("x" * 5000)]}}
    path = home_dir.parent / "script.json"
    path.write_text(json.dumps(script))
    engine = Engine(Home(home_dir), journal, workspace=workspace,
                    config=Config(limits=LimitsConfig(child_reply_bytes=1000)))
    with engine.start_session("test") as session:
        Agent(session, load_model(f"scripted:{path}"), spec=f"scripted:{path}").run("go")
    (result,) = results(journal, session.session_id).values()
    child = rebuild(journal.read(session.session_id)).children["child-1"]
    assert len(result.output) < 1300  # type: ignore[union-attr]
    assert child.text.startswith("x" * 1000) and child.text.endswith(
        f"[... 4,000 more bytes (limits.child_reply_bytes): the whole reply is in zagent sessions show "
        f"{child.session_id}]")


def test_a_child_waits_for_its_background_task_as_long_as_it_may(home_dir: Path, journal: SQLiteJournal,
                                                                 workspace: Path) -> None:
    script = {"replies": [reply("", spawn("build")), reply("ok")],
              "children": {"*": [reply("", {"name": "shell", "arguments": {"command": "sleep 0.3; echo built",
                                                                           "run_in_background": True}}),
                                 reply("started"), reply("the build printed: built")]}}
    path = home_dir.parent / "script.json"
    path.write_text(json.dumps(script))
    config = Config(limits=LimitsConfig(kill_grace_seconds=0.3))
    config = config.model_copy(update={"agent": config.agent.model_copy(update={"max_background_wait_minutes": 0.0})})
    engine = Engine(Home(home_dir), journal, workspace=workspace, config=config)
    with engine.start_session("test") as session:
        Agent(session, load_model(f"scripted:{path}"), spec=f"scripted:{path}").run("go")
    child = rebuild(journal.read(session.session_id)).children["child-1"]
    assert (child.status, child.text) == ("completed", "the build printed: built")


def test_a_fork_is_top_level_and_leaves_the_originals_children_alone(home_dir: Path, journal: SQLiteJournal,
                                                                      workspace: Path) -> None:
    from zagent_core.history.exports import fork_session

    script = {"replies": [reply("", spawn("original task")), reply("ok"),
                          reply("", spawn("follow-up", resume="child-1")), reply("done")],
              "children": {"child-1": [reply("a"), reply("b")]}}
    engine, parent_id = run(home_dir, journal, workspace, script)
    child_id = child_of(journal, parent_id, "child-1")
    fork_of_child = fork_session(journal, child_id, list(journal.read(child_id))[-1].seq, "fork-of-child")
    assert rebuild(journal.read(fork_of_child)).parent is None  # a person's own session: all its tools

    fork = fork_session(journal, parent_id, list(journal.read(parent_id))[-1].seq, "fork-of-parent")
    spec = f"scripted:{home_dir.parent / 'script.json'}"
    with engine.resume(fork) as session:
        Agent(session, load_model(spec), spec=spec).run("again")
    refused = [r for r in results(journal, fork).values() if r.is_error]
    assert [r.output for r in refused] == [  # type: ignore[union-attr]
        "spawn refused: child-1 was spawned by the session this one was forked from, and goes on there; "
        "spawn a new sub-agent"]
    assert [s.event.text for s in journal.read(child_id) if s.event.type == "user_message"] == ["original task"]


def test_doctor_names_what_in_spawn_would_make_a_spawn_fail(home_dir: Path, tmp_path: Path) -> None:
    import subprocess

    from conftest import PYTHON

    (home_dir / "config.json").write_text(json.dumps({"spawn": {
        "models": {"fast": "gpt-4o"},
        "subagents": {"explore": {"tools": ["reed_file", "grep"], "model": "fats"}}}}))
    doctor = forked.run([PYTHON, "-m", "zagent_cli", "--home", str(home_dir), "doctor"], capture_output=True,
                        text=True, cwd=tmp_path, timeout=60)
    said = doctor.stdout + doctor.stderr
    assert ('spawn.subagents.explore.tools names "reed_file", which is not a loaded tool (did you mean '
            '"read_file" or "write_file"?)') in said
    assert ('spawn.models.fast is "gpt-4o", which is neither an id of the models nor a model spec '
            "(scripted:PATH, openai:MODEL, anthropic:MODEL)") in said
    assert ('spawn.subagents.explore.model is "fats", which is neither an id of the models (did you mean '
            '"fast"?) nor a model spec (scripted:PATH, openai:MODEL, anthropic:MODEL)') in said
