"""A session tree killed (SIGKILL) or stopped (Ctrl-C) anywhere resumes whole (issue 11).

Real `zagent run` processes with a scripted parent that fans out three children (one
with a grandchild, two running a real process), a real SQLite journal, real signals.
After the crash, `zagent resume PARENT` must finish the tree: no child started twice,
every spawn call exactly one result (never "interrupted" while its child could go on),
each child's outcome committed with its call's result, and the stats adding up.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import forked
from conftest import PYTHON, wait_for
from test_ask_user import zagent

from zagent_core.session.crashpoints import SPAWN_POINTS
from zagent_core.journal.events import (
    ChildEnded,
    ChildSpawned,
    SessionStarted,
    ToolCallFinished,
    ToolCallInterrupted,
    ToolCallRejected,
    ToolCallRequested,
    ToolCallStarted,
)
from zagent_core.journal.fold import rebuild
from zagent_core.journal.views import SessionState
from zagent_store import SQLiteJournal


def spawn(task: str) -> dict[str, Any]:
    return {"name": "spawn", "arguments": {"task": task}}


def shell(command: str) -> dict[str, Any]:
    return {"name": "shell", "arguments": {"command": command}}


SCRIPT = {
    "replies": [{"text": "fanning out", "tool_calls": [spawn("alpha"), spawn("beta"), spawn("gamma")]},
                {"text": "all three answered"}],
    "children": {
        "alpha": [{"tool_calls": [shell("sleep 0.4; echo alpha")]}, {"text": "alpha done"}],
        "beta": {"replies": [{"tool_calls": [spawn("beta-sub")]}, {"text": "beta done"}],
                 "children": {"beta-sub": [{"tool_calls": [shell("sleep 0.3")]}, {"text": "sub done"}]}},
        "gamma": [{"text": "gamma done"}],
    },
}


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, str]:
    home = tmp_path / "home"
    (home / "tools").mkdir(parents=True)
    # Room for the three children and the grandchild at once (a child's spawn never waits for a slot).
    (home / "config.json").write_text(json.dumps({"spawn": {"max_concurrent": 4}}))
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    return home, f"scripted:{script}"


def top_session(home: Path) -> str:
    with SQLiteJournal(home / "journal.db") as journal:
        for summary in journal.sessions():
            first = next(iter(journal.read(summary.session_id)), None)
            if first is not None and isinstance(first.event, SessionStarted) and first.event.parent is None:
                return summary.session_id
    raise AssertionError("no top-level session")


def check_tree(journal: SQLiteJournal, session_id: str, parent: tuple[str, str] | None = None) -> SessionState:
    """The invariants of one session of the tree, then of its children; returns its state."""
    stored = list(journal.read(session_id))
    events = [s.event for s in stored]
    starts = [e for e in events if isinstance(e, SessionStarted)]
    assert len(starts) == 1, f"{session_id} started {len(starts)} times"
    if parent is not None:
        assert starts[0].parent is not None and (starts[0].parent.session_id, starts[0].parent.call_id) == parent
    spawn_calls = {e.call_id for e in events if isinstance(e, ToolCallRequested) and e.tool == "spawn"}
    for call_id in {e.call_id for e in events if isinstance(e, ToolCallRequested)}:
        ends = [e for e in events if isinstance(e, (ToolCallFinished, ToolCallRejected, ToolCallInterrupted))
                and e.call_id == call_id]
        final = [e for e in ends if not isinstance(e, ToolCallInterrupted)
                 or "so it runs again" not in e.message]
        assert len(final) == 1 and final[0] is ends[-1], f"call {call_id} of {session_id}: {ends}"
        if call_id in spawn_calls:
            assert not any(isinstance(e, ToolCallInterrupted) for e in ends), f"spawn call {call_id} interrupted"
            assert sum(isinstance(e, ToolCallStarted) for e in events if getattr(e, "call_id", None) == call_id) == 1
    spawned = [e for e in events if isinstance(e, ChildSpawned) and not e.resumed]
    assert len({e.child_session_id for e in spawned}) == len(spawned) == len({e.label for e in spawned})
    assert len({e.call_id for e in spawned}) == len(spawned), "a spawn call started two children"
    for index, item in enumerate(stored):
        if isinstance(item.event, ChildEnded):
            result = stored[index + 1]
            assert isinstance(result.event, ToolCallFinished) and result.event.call_id == item.event.call_id
            assert result.at == item.at  # one transaction
    state = rebuild(stored)
    assert not state.in_turn and not state.running_calls and not state.running_children, session_id
    for child in state.children.values():
        child_state = check_tree(journal, child.session_id, (session_id, next(
            e.call_id for e in spawned if e.label == child.label)))
        assert child.status == "completed", child
        assert child.stats.input_tokens == child_state.input_tokens + sum(
            c.stats.input_tokens for c in child_state.children.values())
        assert child.stats.turns == child_state.model_replies
    return state


def finished_tree(home: Path, parent_id: str) -> SessionState:
    with SQLiteJournal(home / "journal.db") as journal:
        state = check_tree(journal, parent_id)
        assert len(journal.sessions()) == 5  # the parent, three children, one grandchild
    assert state.last_turn_end == "idle"
    assert sorted(child.text for child in state.children.values()) == ["alpha done", "beta done", "gamma done"]
    return state


def test_the_tree_runs_whole(tree: tuple[Path, str]) -> None:
    home, model = tree
    done = zagent(home, "run", "go", "--model", model)
    assert done.returncode == 0, done.stderr
    finished_tree(home, top_session(home))


@pytest.mark.parametrize("point", [*SPAWN_POINTS, "after_tool_call_started", "before_tool_call_finished",
                                   "after_input_requested"])
def test_a_kill_at_a_named_point_resumes_the_whole_tree(tree: tuple[Path, str], point: str) -> None:
    home, model = tree
    killed = zagent(home, "run", "go", "--model", model, crash_at=point)
    if point == "after_input_requested":  # a tree with no question is never killed there: a control
        assert killed.returncode == 0, killed.stderr
    else:
        assert killed.returncode == -signal.SIGKILL, (killed.returncode, killed.stderr)
    parent_id = top_session(home)
    resumed = zagent(home, "resume", parent_id)
    assert resumed.returncode == 0, resumed.stderr
    finished_tree(home, parent_id)


@pytest.mark.long
@pytest.mark.parametrize("after", [0.15, 0.3, 0.45, 0.6, 0.8])
def test_a_kill_at_any_moment_resumes_the_whole_tree(tree: tuple[Path, str], after: float) -> None:
    home, model = tree
    process = forked.Popen([PYTHON, "-m", "zagent_cli", "--home", str(home), "run", "go", "--model", model],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           cwd=home.parent)
    time.sleep(after)  # the moment of the crash is the test's input, not a wait for something
    process.kill()
    process.wait(30)
    if not (home / "journal.db").exists():
        return  # killed before it journaled anything: nothing to resume
    with SQLiteJournal(home / "journal.db") as journal:
        if not journal.sessions():
            return
    parent_id = top_session(home)
    # --model: the kill may have come before the first turn journaled which model it asks.
    resumed = zagent(home, "resume", parent_id, "--model", model)
    assert resumed.returncode == 0, resumed.stderr
    finished_tree(home, parent_id)


def test_ctrl_c_stops_the_whole_tree_and_every_session_in_it_resumes(tree: tuple[Path, str]) -> None:
    home, model = tree
    process = forked.Popen([PYTHON, "-m", "zagent_cli", "--home", str(home), "run", "go", "--model", model],
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           cwd=home.parent)

    def children_running_processes() -> bool:
        if not (home / "journal.db").exists():
            return False
        with SQLiteJournal(home / "journal.db") as journal:
            shells = [s for summary in journal.sessions() for s in journal.read(summary.session_id)
                      if isinstance(s.event, ToolCallStarted) and s.event.tool == "shell"]
        return len(shells) == 2  # alpha's and the grandchild's

    wait_for(children_running_processes, "both shells of the tree to start", seconds=30)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    parent_id = top_session(home)
    assert f"[stopped; resume with: zagent resume {parent_id}]" in stderr
    with SQLiteJournal(home / "journal.db") as journal:
        for summary in journal.sessions():
            state = rebuild(journal.read(summary.session_id))
            assert state.status == "open", summary.session_id  # none ended: each can go on
        spawns = [s.event for s in journal.read(parent_id) if isinstance(s.event, (ToolCallFinished,
                                                                                  ToolCallInterrupted))]
        assert not any(isinstance(e, ToolCallInterrupted) for e in spawns)
    resumed = zagent(home, "resume", parent_id)
    assert resumed.returncode == 0, resumed.stderr
    finished_tree(home, parent_id)


# -- what a review of the first version found -------------------------------------------------


def setup_home(tmp_path: Path, script: dict[str, Any], config: dict[str, Any]) -> tuple[Path, str]:
    home = tmp_path / "home"
    (home / "tools").mkdir(parents=True)
    (home / "config.json").write_text(json.dumps(config))
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script))
    return home, f"scripted:{path}"


def test_a_child_killed_before_it_started_keeps_its_presets_tools_and_prompt(tmp_path: Path) -> None:
    explore = {"readonly": True, "system_prompt": "You only read."}
    script = {"replies": [{"tool_calls": [{"name": "spawn", "arguments": {"task": "look",
                                                                          "subagent_type": "explore"}}]},
                          {"text": "ok"}],
              "children": {"*": [{"tool_calls": [{"name": "write_file", "arguments": {"path": "pwned.txt",
                                                                                      "content": "x"}}]},
                                 {"text": "looked"}]}}
    home, model = setup_home(tmp_path, script, {"spawn": {"subagents": {"explore": explore}}})
    assert zagent(home, "run", "go", "--model", model, crash_at="after_child_spawned").returncode == -signal.SIGKILL
    parent_id = top_session(home)
    assert zagent(home, "resume", parent_id).returncode == 0

    with SQLiteJournal(home / "journal.db") as journal:
        child_id = rebuild(journal.read(parent_id)).children["child-1"].session_id
        child = rebuild(journal.read(child_id))
        prompts = [s.event.system_prompt for s in journal.read(child_id, types=("turn_started",))]
    assert child.parent is not None and child.parent.tools is not None and "write_file" not in child.parent.tools
    assert prompts == ["You only read."]
    assert not (home.parent / "pwned.txt").exists()


def test_a_child_stopped_at_its_limit_keeps_that_outcome_across_a_crash(tmp_path: Path) -> None:
    script = {"replies": [{"tool_calls": [spawn("loop")]}, {"text": "ok"}],
              "children": {"*": [{"tool_calls": [{"name": "glob", "arguments": {"pattern": "*"}}]}] * 4}}
    home, model = setup_home(tmp_path, script, {"spawn": {"child_max_turns": 2}})
    assert zagent(home, "run", "go", "--model", model, crash_at="before_child_ended").returncode == -signal.SIGKILL
    parent_id = top_session(home)
    assert zagent(home, "resume", parent_id).returncode == 0

    with SQLiteJournal(home / "journal.db") as journal:
        child = rebuild(journal.read(parent_id)).children["child-1"]
    assert (child.status, child.stats.turns) == ("error", 2)


def test_ctrl_c_of_tools_run_spawn_leaves_it_to_resume(tmp_path: Path) -> None:
    script = {"replies": [], "children": {"*": [{"tool_calls": [shell("touch started && sleep 30")]},
                                                {"text": "done"}]}}
    home, model = setup_home(tmp_path, script, {})
    (home / "config.json").write_text(json.dumps({"agent": {"model": model}}))  # what the child inherits
    process = forked.Popen([PYTHON, "-m", "zagent_cli", "--home", str(home), "tools", "run", "spawn", "--args",
                            '{"task": "t"}'], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, cwd=tmp_path)

    # The shell runs (not only its call journaled): the stop reaches a running process.
    wait_for((tmp_path / "started").exists, "the child's shell to run", seconds=30)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    parent_id = top_session(home)
    assert f"[stopped; resume with: zagent resume {parent_id}]" in stderr
    resumed = zagent(home, "resume", parent_id)
    assert resumed.returncode == 0, resumed.stderr
    assert "[child-1 completed" in resumed.stdout
    with SQLiteJournal(home / "journal.db") as journal:
        state = rebuild(journal.read(parent_id))
    assert state.status == "ended" and state.children["child-1"].text == "done"


def test_a_question_waiting_beside_a_cut_off_spawn_does_not_hold_the_child_back(tmp_path: Path) -> None:
    script = {"replies": [{"tool_calls": [{"name": "ask_user", "arguments": {"question": "colour?"}}, spawn("t")]},
                          {"text": "ok"}],
              "children": {"*": [{"tool_calls": [shell("true")]}, {"text": "child done"}]}}
    home, model = setup_home(tmp_path, script, {})
    assert zagent(home, "run", "go", "--model", model, crash_at="after_child_started").returncode == -signal.SIGKILL
    parent_id = top_session(home)
    resumed = zagent(home, "resume", parent_id)
    assert resumed.returncode == 0, resumed.stderr
    with SQLiteJournal(home / "journal.db") as journal:
        state = rebuild(journal.read(parent_id))
    assert state.children["child-1"].text == "child done" and state.questions


def test_a_child_its_parent_waits_on_is_resumed_through_the_parent(tmp_path: Path) -> None:
    script = {"replies": [{"tool_calls": [spawn("t")]}, {"text": "ok"}],
              "children": {"*": [{"tool_calls": [shell("true")]}, {"text": "child done"}]}}
    home, model = setup_home(tmp_path, script, {})
    assert zagent(home, "run", "go", "--model", model, crash_at="after_child_started").returncode == -signal.SIGKILL
    parent_id = top_session(home)
    with SQLiteJournal(home / "journal.db") as journal:
        child = rebuild(journal.read(parent_id)).children["child-1"]
    refused = zagent(home, "resume", child.session_id, "something else")
    assert refused.returncode == 2
    assert (f"session {child.session_id} is child-1 of session {parent_id}, whose spawn call {child.call_id} waits "
            f"on it; resume the parent, which goes on with it: zagent resume {parent_id}") in refused.stderr
    assert zagent(home, "resume", parent_id).returncode == 0
    with SQLiteJournal(home / "journal.db") as journal:
        assert rebuild(journal.read(parent_id)).children["child-1"].text == "child done"
    again = zagent(home, "resume", child.session_id, "and now?")  # ended its spawn: a session like any other
    assert "waits on it" not in again.stderr


def test_a_spawn_the_config_no_longer_allows_is_refused_on_resume_and_its_child_aborted(tmp_path: Path) -> None:
    script = {"replies": [{"tool_calls": [{"name": "spawn", "arguments": {"task": "look",
                                                                          "subagent_type": "explore"}}]},
                          {"text": "ok"}],
              "children": {"*": [{"tool_calls": [shell("true")]}, {"text": "looked"}]}}
    home, model = setup_home(tmp_path, script, {"spawn": {"subagents": {"explore": {"readonly": True}}}})
    assert zagent(home, "run", "go", "--model", model, crash_at="after_child_started").returncode == -signal.SIGKILL
    (home / "config.json").write_text("{}")  # the preset is gone: the cut-off call no longer validates
    parent_id = top_session(home)
    assert zagent(home, "resume", parent_id).returncode == 0

    with SQLiteJournal(home / "journal.db") as journal:
        (rejected,) = [s.event for s in journal.read(parent_id) if isinstance(s.event, ToolCallRejected)]
        child = rebuild(journal.read(parent_id)).children["child-1"]
    assert rejected.reason == "invalid_arguments"
    assert rejected.message.startswith("spawn was not run: its arguments do not match its parameters.")
    assert child.status == "aborted"


@pytest.mark.parametrize("point", ["after_child_spawned", "after_child_started", "before_child_ended"])
def test_a_child_sharing_its_parents_read_state_still_shares_it_after_a_crash(tmp_path: Path, point: str) -> None:
    def call(name: str, **arguments: str) -> dict[str, Any]:
        return {"tool_calls": [{"name": name, "arguments": arguments}]}

    script = {"replies": [call("read_file", path="a.txt"), call("spawn", task="fix a"),
                          call("edit", path="b.txt", old_string="two", new_string="2"), {"text": "ok"}],
              "children": {"*": [call("edit", path="a.txt", old_string="one", new_string="1"),
                                 call("read_file", path="b.txt"), {"text": "fixed"}]}}
    home, model = setup_home(tmp_path, script, {"spawn": {"share_read_state": True}})
    (tmp_path / "a.txt").write_text("one\n")
    (tmp_path / "b.txt").write_text("two\n")
    assert zagent(home, "run", "go", "--model", model, crash_at=point).returncode == -signal.SIGKILL
    parent_id = top_session(home)
    assert zagent(home, "resume", parent_id).returncode == 0

    # the child edited what its parent read, and the parent what its child read
    assert (tmp_path / "a.txt").read_text() == "1\n" and (tmp_path / "b.txt").read_text() == "2\n"
