"""`zagent replay` replays a session tree (issue 11): each sub-agent's session against its own recording.

Trees are recorded by real runs (a real engine, a real SQLite journal, parents and children
scripted in one file, as tests/test_spawn.py does), then replayed in process and with the CLI.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
import forked
from click.testing import CliRunner
from conftest import PYTHON, python_tool
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zagent_cli.main import cli
from zagent_core import Engine, Home
from zagent_core.agent.loop import Agent
from zagent_core.config import Config, LimitsConfig, SpawnConfig
from zagent_core.journal.events import ChildSpawned, SessionStarted, UserMessage
from zagent_core.agent.models import load_model
from zagent_core.history.replay import replay, tree_roots
from zagent_core.history.replay_report import ReplayReport
from zagent_core.journal.fold import rebuild
from zagent_store import SQLiteJournal


def spawn(task: str, **extra: Any) -> dict[str, Any]:
    return {"name": "spawn", "arguments": {"task": task, **extra}}


def reply(text: str = "", *calls: dict[str, Any]) -> dict[str, Any]:
    return {"text": text, "tool_calls": list(calls)}


def greet() -> dict[str, Any]:
    return {"name": "greet", "arguments": {}}


def record(home: Path, workspace: Path, script: dict[str, Any]) -> str:
    """Run ``script`` (parent and children) for real into ``home``'s journal; the parent's id."""
    path = home.parent / "script.json"
    path.write_text(json.dumps(script))
    # Slots for every child of the property test's trees: a refused spawn would make another tree.
    config = Config(limits=LimitsConfig(kill_grace_seconds=0.3), spawn=SpawnConfig(max_concurrent=16))
    spec = f"scripted:{path}"
    with SQLiteJournal(home / "journal.db") as journal:
        engine = Engine(Home(home), journal, workspace=workspace, config=config)
        with engine.start_session("test") as session:
            result = Agent(session, load_model(spec), spec=spec).run("go")
            assert result.reason == "idle", result
            return session.session_id


def replayed(home: Path, session_id: str, into: Path, **options: Any) -> ReplayReport:
    with SQLiteJournal(home / "journal.db") as journal, SQLiteJournal(into) as replay_journal:
        return replay(journal, session_id, Home(home), replay_journal, workdir=into.parent / "work", **options)


def greet_tool(home: Path) -> None:
    """``greet``: replay-safe, so a rerun runs it again."""
    python_tool(home, "greet", "print('hello from greet')", replay="safe")


#: A parent with two children, one after the other (so their labels are known); child-1
#: calls greet and has a child of its own. Children side by side: the property test below.
TREE = {
    "replies": [reply("", spawn("greet and plan")), reply("", spawn("say hi")), reply("both answered")],
    "children": {
        "greet and plan": {"replies": [reply("", greet()), reply("", spawn("research")), reply("greeted, planned")],
                           "children": {"research": [reply("found it")]}},
        "say hi": [reply("hi")],
    },
}


def test_a_replay_replays_every_session_of_the_tree_and_the_parent_points_at_them(
        home_dir: Path, workspace: Path, tmp_path: Path) -> None:
    greet_tool(home_dir)
    parent_id = record(home_dir, workspace, TREE)

    report = replayed(home_dir, parent_id, tmp_path / "r" / "replay.db")

    assert report.tree_matched, report.text()
    assert [path for path, _ in report.sessions()] == ["", "child-1", "child-1/child-1", "child-2"]
    by_path = dict(report.sessions())
    assert report.spawns == 2 and by_path["child-1"].spawns == 1
    assert [s.tool for s in by_path["child-1"].actual] == ["greet", "spawn"]
    with SQLiteJournal(tmp_path / "r" / "replay.db") as into:
        # The replayed parent's children are the replayed sessions, which name it as their parent.
        for path, child in report.sessions():
            if not path:
                continue
            parent = by_path[path.rpartition("/")[0]]
            view = rebuild(into.read(parent.replay_session_id or "")).children[child.label or ""]
            assert view.session_id == child.replay_session_id and view.status == "completed"
            started = next(iter(into.read(child.replay_session_id or ""))).event
            assert isinstance(started, SessionStarted) and started.parent is not None
            assert started.parent.session_id == parent.replay_session_id
            assert started.parent.depth == path.count("/") + 1
    text = report.text()
    assert "\n  child-1: replay of " in text and "\n    child-1: replay of " in text
    assert text.endswith("tree of 4 sessions: matches")

    # A sub-agent replayed alone is its own subtree, and keeps what its parent gave it.
    alone = replayed(home_dir, by_path["child-1"].session_id, tmp_path / "alone" / "replay.db")
    assert alone.tree_matched and [path for path, _ in alone.sessions()] == ["", "child-1"]
    with SQLiteJournal(tmp_path / "alone" / "replay.db") as into:
        started = next(iter(into.read(alone.replay_session_id or ""))).event
        assert isinstance(started, SessionStarted) and started.parent is not None and started.parent.depth == 1


def test_a_child_whose_tool_output_changes_in_a_rerun_is_the_diverging_session_of_the_tree(
        home_dir: Path, workspace: Path, tmp_path: Path) -> None:
    greet_tool(home_dir)
    parent_id = record(home_dir, workspace, TREE)
    (home_dir / "tools" / "greet" / "main.py").write_text("print('goodbye from greet')")

    report = replayed(home_dir, parent_id, tmp_path / "r" / "replay.db", tools="rerun")

    by_path = dict(report.sessions())
    assert {path: r.verdict for path, r in by_path.items()} == {
        "": "matches", "child-1": "DIVERGES", "child-1/child-1": "matches", "child-2": "matches"}
    (difference,) = by_path["child-1"].differences
    assert difference.step == 0 and difference.field == "output"
    assert "-hello from greet" in (difference.diff or "") and "+goodbye from greet" in (difference.diff or "")
    assert not report.tree_matched and report.tree_verdict == "DIVERGES"
    assert report.text().endswith("tree of 4 sessions: DIVERGES (child-1 DIVERGES)")

    result = CliRunner().invoke(cli, ["--home", str(home_dir), "--workspace", str(workspace), "replay", parent_id,
                                      "--tools", "rerun", "--json"])
    assert result.exit_code == 1, result.output
    body = json.loads(result.output)
    (root,) = body["replays"]
    assert body["matched"] is False and root["verdict"] == "matches" and root["tree_verdict"] == "DIVERGES"
    child = next(c for c in root["children"] if c["label"] == "child-1")
    assert child["verdict"] == "DIVERGES" and child["differences"][0]["field"] == "output"
    assert [c["label"] for c in child["children"]] == ["child-1"]
    shown = CliRunner().invoke(cli, ["--home", str(home_dir), "replay", parent_id, "--tools", "rerun"])
    assert shown.exit_code == 1 and "  child-1: replay of " in shown.output and "  +goodbye from greet" in shown.output


def test_a_rerun_serves_spawn_calls_and_never_runs_a_child_live(home_dir: Path, workspace: Path,
                                                                tmp_path: Path) -> None:
    script = {"replies": [reply("", spawn("say hi")), reply("done")], "children": {"say hi": [reply("hi")]}}
    parent_id = record(home_dir, workspace, script)
    # A live child would need its script: gone, it could not run (the spawn would be refused).
    (home_dir.parent / "script.json").unlink()

    report = replayed(home_dir, parent_id, tmp_path / "r" / "replay.db", tools="rerun")

    assert report.tree_matched, report.text()
    assert report.rerun == 0 and report.spawns == 1 and report.not_rerun == []
    assert report.text().splitlines()[0].endswith("1 of 1 steps (1 spawn served, its sub-agent replayed below)")
    # The served result names the replayed child, as the replayed parent's child_spawned does.
    assert report.children[0].replay_session_id in report.actual[0].output
    with SQLiteJournal(tmp_path / "r" / "replay.db") as into:
        assert len(into.sessions()) == 2  # the parent and its one child: no third, live one
        spawned = [s for s in into.read(report.replay_session_id or "") if isinstance(s.event, ChildSpawned)]
        child_id = report.children[0].replay_session_id or ""
        assert [s.event.child_session_id for s in spawned if isinstance(s.event, ChildSpawned)] == [child_id]
        # As in a live run, the child's session begins after its parent journaled it.
        assert spawned[0].seq < next(iter(into.read(child_id))).seq


def test_a_child_given_a_new_task_replays_each_run_at_its_spawn_call(home_dir: Path, workspace: Path,
                                                                     tmp_path: Path) -> None:
    script = {
        "replies": [reply("", spawn("count to two")), reply("", spawn("and now three", resume="child-1")),
                    reply("done")],
        "children": {"child-1": [reply("1, 2"), reply("3")]},
    }
    parent_id = record(home_dir, workspace, script)

    report = replayed(home_dir, parent_id, tmp_path / "r" / "replay.db")

    assert report.tree_matched, report.text()
    (child,) = report.children
    with SQLiteJournal(tmp_path / "r" / "replay.db") as into:
        spawned = [s for s in into.read(report.replay_session_id or "") if isinstance(s.event, ChildSpawned)]
        spawns = [s.seq for s in spawned]
        tasks = [(s.seq, s.event.text) for s in into.read(child.replay_session_id or "")
                 if isinstance(s.event, UserMessage)]
        told = [s.version for s in into.read(child.replay_session_id or "") if isinstance(s.event, UserMessage)]
    # The second spawn names where the replayed child's journal stood when it was told (a
    # resume of the replay finds its task delivered), not where the recorded one stood.
    assert spawned[0].event.from_version == 0 and told[0] < spawned[1].event.from_version < told[1]
    # Each task reaches the child after its own spawn call, not both at the first one.
    assert [text for _, text in tasks] == ["count to two", "and now three"]
    assert spawns[0] < tasks[0][0] < spawns[1] < tasks[1][0]


def test_replay_all_replays_a_child_only_as_part_of_its_parents_tree(home_dir: Path, workspace: Path) -> None:
    parent_id = record(home_dir, workspace, {"replies": [reply("", spawn("say hi")), reply("done")],
                                             "children": {"say hi": [reply("hi")]}})

    result = CliRunner().invoke(cli, ["--home", str(home_dir), "replay", "--all", "--json"])
    assert result.exit_code == 0, result.output
    (root,) = json.loads(result.output)["replays"]
    assert root["session_id"] == parent_id and [c["label"] for c in root["children"]] == ["child-1"]
    shown = CliRunner().invoke(cli, ["--home", str(home_dir), "replay", "--all"])
    assert shown.exit_code == 0 and shown.output.endswith("2 of 2 sessions match\n"), shown.output


def test_an_export_of_a_parent_replays_it_and_says_its_children_were_not(home_dir: Path, workspace: Path,
                                                                        tmp_path: Path) -> None:
    parent_id = record(home_dir, workspace, {"replies": [reply("", spawn("say hi")), reply("done")],
                                             "children": {"say hi": [reply("hi")]}})
    export = tmp_path / "parent.zagent.jsonl"
    base = ["--home", str(home_dir)]
    assert CliRunner().invoke(cli, [*base, "sessions", "export", parent_id, "-o", str(export)]).exit_code == 0

    result = CliRunner().invoke(cli, [*base, "replay", "--file", str(export)])

    assert result.exit_code == 0, result.output
    assert "note: child-1's session " in result.output and "the sub-agent was not replayed" in result.output


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=st.lists(st.lists(st.lists(st.just([]), max_size=2), max_size=2), max_size=2))
def test_a_recorded_tree_replays_as_the_same_tree(tmp_path_factory: Any, shape: list[Any]) -> None:
    """Any tree (children of children, several spawned in one reply) replays to a report of the recorded tree."""
    def script(kids: list[Any], name: str) -> dict[str, Any]:
        calls = [spawn(f"{name}.{n}") for n in range(len(kids))]
        return {"replies": [reply("", *calls), reply(f"{name} done")] if calls else [reply(f"{name} done")],
                "children": {f"{name}.{n}": script(k, f"{name}.{n}") for n, k in enumerate(kids)}}

    tmp = tmp_path_factory.mktemp("tree")
    home, workspace = tmp / "home", tmp / "ws"
    (home / "tools").mkdir(parents=True)
    workspace.mkdir()
    parent_id = record(home, workspace, script(shape, "t"))

    report = replayed(home, parent_id, tmp / "r" / "replay.db")

    assert report.tree_matched, report.text()
    with SQLiteJournal(home / "journal.db") as journal:
        assert tree_of(report) == recorded_tree(journal, parent_id)
    assert len(list(report.sessions())) == size(shape)


def tree_of(report: ReplayReport) -> dict[str, Any]:
    return {"session": report.session_id, "children": {c.label: tree_of(c) for c in report.children}}


def recorded_tree(journal: SQLiteJournal, session_id: str) -> dict[str, Any]:
    children = rebuild(journal.read(session_id)).children
    return {"session": session_id, "children": {label: recorded_tree(journal, child.session_id)
                                                for label, child in children.items()}}


def size(kids: list[Any]) -> int:
    return 1 + sum(size(k) for k in kids)


def test_children_the_replayed_parent_did_not_spawn_are_still_replayed_and_checked(
        home_dir: Path, workspace: Path, tmp_path: Path) -> None:
    script = {"replies": [reply("", spawn("say hi"), spawn("say ho")), reply("done")],
              "children": {"say hi": [reply("hi")], "say ho": [reply("ho")]}}
    parent_id = record(home_dir, workspace, script)
    # The host now refuses a reply of two calls: the replayed parent spawns nothing.
    config = Config.model_validate({"agent": {"max_tool_calls_per_turn": 1}})

    report = replayed(home_dir, parent_id, tmp_path / "r" / "replay.db", config=config)

    assert report.diverged and report.spawns == 0
    assert sorted(child.label or "" for child in report.children) == ["child-1", "child-2"]
    assert all(child.matched for child in report.children), report.text()
    assert report.tree_verdict == "DIVERGES" and report.text().endswith(f"({report.session_id} DIVERGES)")


@pytest.mark.parametrize("point", ["after_tool_call_started", "before_tool_call_finished"])
def test_a_tree_a_sigkill_cut_and_resume_finished_replays_and_matches(home_dir: Path, workspace: Path,
                                                                       point: str) -> None:
    """The child's call is cut by a real SIGKILL of the process driving the tree; `zagent resume`
    finishes the tree. Both recordings (cut turns, resumed turns) replay, both ways."""
    greet_tool(home_dir)
    script = home_dir.parent / "script.json"
    script.write_text(json.dumps({"replies": [reply("", spawn("greet")), reply("done")],
                                  "children": {"greet": [reply("", greet()), reply("greeted")]}}))
    env = {key: value for key, value in os.environ.items() if key != "ZAGENT_CRASH_AT"}
    base = [PYTHON, "-m", "zagent_cli", "--home", str(home_dir), "--workspace", str(workspace)]
    killed = forked.run([*base, "run", "--model", f"scripted:{script}", "go"],
                        env={**env, "ZAGENT_CRASH_AT": point}, capture_output=True, text=True,
                        stdin=subprocess.DEVNULL, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    with SQLiteJournal(home_dir / "journal.db") as journal:
        (parent_id,) = tree_roots(journal, [summary.session_id for summary in journal.sessions()])
    resumed = forked.run([*base, "resume", parent_id], env=env, capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, timeout=120)
    assert resumed.returncode == 0, resumed.stderr

    for tools in ("recorded", "rerun"):
        result = CliRunner().invoke(cli, ["--home", str(home_dir), "--workspace", str(workspace), "replay", parent_id,
                                          "--tools", tools, "--json"])
        assert result.exit_code == 0, result.output
        (root,) = json.loads(result.output)["replays"]
        (child,) = root["children"]
        assert child["tree_verdict"] == "matches" and child["expected_steps"] == child["actual_steps"] == 1
