"""The CLI and the store see session trees (issue 11): ``sessions list`` (top-level unless
``--all``), ``sessions show --tree``, the parent and children in ``sessions show``, ``audit
--descendants``, the live lines of ``zagent run``, and the parent columns of ``heads`` and of
the ``sessions`` view.

Real ``zagent`` processes on a real SQLite journal, with scripted models (the parent and its
children scripted in one file, as in tests/test_spawn.py).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
import forked
from conftest import PYTHON, python_tool, wait_for
from hypothesis import given, settings
from hypothesis import strategies as st

from zagent_core.journal.events import ChildSpawned, SessionForked, SessionStarted, ToolCallRequested, UserMessage
from zagent_core.journal.protocol import JournalError
from zagent_core.journal.fold import rebuild
from zagent_core.history.trees import NOT_STARTED, session_tree
from zagent_store import MemoryJournal, SQLiteJournal
from zagent_store.sqlite import MIGRATIONS
from zagent_store.views import SUBTREE


def spawn(task: str) -> dict[str, Any]:
    return {"name": "spawn", "arguments": {"task": task}}


def reply(text: str = "", *calls: dict[str, Any]) -> dict[str, Any]:
    return {"text": text, "tool_calls": list(calls)}


#: A root that spawns two children; the first spawns a grandchild that lists the workspace.
TREE = {
    "replies": [reply("fanning out", spawn("look around\nin detail"), spawn("say hi")), reply("both answered"),
                reply("more from the root")],
    "children": {
        "look around\nin detail": {
            "replies": [reply("", spawn("list them")), reply("looked")],
            "children": {"list them": [reply("", {"name": "list_files", "arguments": {"path": "."}}),
                                       reply("one file")]},
        },
        "say hi": [reply("hi"), reply("hi again")],
    },
}


def zagent(home: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return forked.run([PYTHON, "-m", "zagent_cli", "--home", str(home), *args], capture_output=True, text=True,
                      cwd=cwd, timeout=120)


def run_tree(home: Path, folder: Path) -> tuple[str, subprocess.CompletedProcess[str]]:
    (folder / "tree.json").write_text(json.dumps(TREE))
    (folder / "a.txt").write_text("hello\n")
    result = zagent(home, "run", "--model", "scripted:tree.json", "go", cwd=folder)
    assert result.returncode == 0, result.stderr
    return result.stderr.rsplit("session ", 1)[1].split("]")[0], result


class Tree:
    """The sessions of one :data:`TREE` run, by role."""

    def __init__(self, home: Path, folder: Path) -> None:
        self.home, self.folder = home, folder
        self.root, self.run = run_tree(home, folder)
        with SQLiteJournal(home / "journal.db") as journal:
            children = {c.task: c for c in rebuild(journal.read(self.root)).children.values()}
            self.looker, self.greeter = children["look around\nin detail"], children["say hi"]
            (self.lister,) = rebuild(journal.read(self.looker.session_id)).children.values()

    def zagent(self, *args: str) -> subprocess.CompletedProcess[str]:
        return zagent(self.home, *args, cwd=self.folder)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Tree:
    """One run, read by the tests that only read (each test that writes runs its own)."""
    folder = tmp_path_factory.mktemp("tree")
    return Tree(folder / "home", folder)


def test_sessions_list_shows_top_level_sessions_unless_all_shows_each_child_under_its_parent(tree: Tree) -> None:
    plain = tree.zagent("sessions", "list")
    assert plain.returncode == 0, plain.stderr
    assert [line.split()[0] for line in plain.stdout.splitlines()[1:]] == [tree.root]

    listed = tree.zagent("sessions", "list", "--all").stdout.splitlines()[1:]
    by_id = {line.split()[0]: line for line in listed}
    assert listed[0].startswith(tree.root) and listed[0].endswith("  go")
    assert by_id[tree.looker.session_id].startswith(f"  {tree.looker.session_id}")
    assert by_id[tree.looker.session_id].endswith(f"{tree.looker.label}: look around in detail")
    assert by_id[tree.lister.session_id].startswith(f"    {tree.lister.session_id}")
    assert listed.index(by_id[tree.lister.session_id]) == listed.index(by_id[tree.looker.session_id]) + 1
    assert by_id[tree.greeter.session_id].endswith(f"{tree.greeter.label}: say hi")


def test_sessions_list_json_carries_the_parent_fields(tree: Tree) -> None:
    top = json.loads(tree.zagent("sessions", "list", "--json").stdout)["sessions"]
    assert [s["session_id"] for s in top] == [tree.root]
    assert (top[0]["parent_session_id"], top[0]["depth"]) == (None, 0)
    listed = json.loads(tree.zagent("sessions", "list", "--all", "--json").stdout)["sessions"]
    every = {s["session_id"]: s for s in listed}
    assert len(every) == 4
    lister = every[tree.lister.session_id]
    assert (lister["parent_session_id"], lister["parent_call_id"], lister["label"], lister["depth"]) == (
        tree.looker.session_id, tree.lister.call_id, tree.lister.label, 2)


def test_sessions_show_tree_gives_each_sessions_outcome_task_and_the_numbers_of_its_subtree(tree: Tree) -> None:
    shown = tree.zagent("sessions", "show", tree.root, "--tree")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith(f"{tree.root}  idle  ") and lines[0].endswith("  go")
    looker = next(line for line in lines if tree.looker.session_id in line)
    assert looker.startswith(("├─ ", "└─ "))
    assert f"{tree.looker.label}  {tree.looker.session_id}  completed  " in looker
    assert looker.endswith("  look around")  # the first line of the task
    lister = next(line for line in lines if tree.lister.session_id in line)
    assert lister.endswith("  list them") and lines.index(lister) == lines.index(looker) + 1
    assert "└─ " in lister and f"{tree.lister.label}  {tree.lister.session_id}  completed" in lister

    data = json.loads(tree.zagent("sessions", "show", tree.root, "--tree", "--json").stdout)["tree"]
    nodes = {data["session_id"]: data}
    for node in data["children"]:
        nodes[node["session_id"]] = node
        nodes.update((grandchild["session_id"], grandchild) for grandchild in node["children"])
    assert len(nodes) == 4
    # The subtree's tokens are its sessions' own, summed; a child's are what its parent's spawn reported.
    for field in ("input_tokens", "output_tokens", "requests"):
        assert data["subtree"][field] == sum(node[field] for node in nodes.values())
    looked = nodes[tree.looker.session_id]
    assert looked["subtree"]["input_tokens"] == tree.looker.stats.input_tokens > looked["input_tokens"]
    assert looked["requests"] == tree.looker.stats.turns == 2 and looked["subtree"]["requests"] == 4
    assert looked["duration_ms"] == tree.looker.stats.duration_ms
    assert (looked["outcome"], looked["status"], looked["task"]) == ("completed", "idle", "look around\nin detail")


def test_the_tree_of_a_child_starts_at_that_child(tree: Tree) -> None:
    lines = tree.zagent("sessions", "show", tree.looker.session_id, "--tree").stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"{tree.looker.label}  {tree.looker.session_id}  completed")


@pytest.mark.parametrize("args", [("--tree", "--events"), ("--tree", "--format", "md"), ("nope", "--tree")])
def test_a_tree_asked_with_what_it_cannot_show_or_of_no_session_is_a_usage_error(tree: Tree,
                                                                                  args: tuple[str, ...]) -> None:
    refused = tree.zagent("sessions", "show", *args)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert ("no session \"nope\"" if "nope" in args else "--tree prints a line per session") in refused.stderr


def test_sessions_show_of_a_parent_names_its_children_and_a_child_its_parent(tree: Tree) -> None:
    parent = tree.zagent("sessions", "show", tree.root).stdout
    for child in (tree.looker, tree.greeter):
        assert f"{child.label}: session {child.session_id}, completed: " in parent
        assert f"  {child.label} started as session {child.session_id}: " in parent
    shown = tree.zagent("sessions", "show", tree.lister.session_id).stdout
    assert (f"spawned by: {tree.looker.session_id} as {tree.lister.label} (call {tree.lister.call_id}, depth 2)"
            in shown.splitlines())


def test_audit_descendants_adds_the_calls_of_every_sub_agent_below_the_session(tree: Tree) -> None:
    def calls(*args: str) -> set[tuple[str, str]]:
        result = tree.zagent("audit", "--json", *args)
        assert result.returncode == 0, result.stderr
        return {(row["session_id"], row["tool"]) for row in json.loads(result.stdout)["calls"]}

    assert calls("--session", tree.root) == {(tree.root, "spawn")}
    assert calls("--session", tree.root, "--descendants") == {
        (tree.root, "spawn"), (tree.looker.session_id, "spawn"), (tree.lister.session_id, "list_files")}
    assert calls("--session", tree.looker.session_id, "--descendants", "--tool", "list_files") == {
        (tree.lister.session_id, "list_files")}
    refused = tree.zagent("audit", "--descendants")
    assert refused.returncode == 2 and "--session ID" in refused.stderr


def test_the_sessions_view_has_the_parent_columns(tree: Tree) -> None:
    with sqlite3.connect(tree.home / "journal.db") as db:
        rows = dict(((sid, (parent, call, label, depth)) for sid, parent, call, label, depth in db.execute(
            "SELECT session_id, parent_session_id, parent_call_id, label, depth FROM sessions")))
    assert rows[tree.root] == (None, None, None, 0)
    assert rows[tree.greeter.session_id] == (tree.root, tree.greeter.call_id, tree.greeter.label, 1)
    assert rows[tree.lister.session_id] == (tree.looker.session_id, tree.lister.call_id, tree.lister.label, 2)


def test_run_says_when_each_child_starts_and_ends(tree: Tree) -> None:
    out = tree.run.stdout.splitlines()
    for child, task in ((tree.looker, "look around in detail"), (tree.greeter, "say hi")):
        started = out.index(f"  [{child.label} started: {task}]")
        ended = next(n for n, line in enumerate(out) if line.startswith(f"  [{child.label} completed: "))
        assert started < ended
    assert f"  [{tree.greeter.label} completed: 1 model request, " in tree.run.stdout


def test_run_shows_what_each_child_does_indented_under_its_start_and_led_by_its_label(tree: Tree) -> None:
    out = tree.run.stdout.splitlines()
    greeter, looker, lister = (f"[{label}] " for label in ("child-2", "child-1", "child-1/child-1"))
    expected = [
        ("  [child-2 started: say hi]", [f"    {greeter}assistant: hi"]),
        ("  [child-1 started: look around in detail]", [
            f'    {looker}  -> spawn {{"task": "list them"}}', f"    {looker}  [child-1 started: list them]",
            f'        {lister}  -> list_files {{"path": "."}}', f"        {lister}assistant: one file",
            f"    {looker}assistant: looked"]),
    ]
    for started, lines in expected:
        at = [out.index(started), *(out.index(line) for line in lines)]
        assert at == sorted(at), (started, at)  # each after its start, in its own order
    assert f"{looker}user: " not in tree.run.stdout  # a child's task is its started line
    # the root's own lines are as they were: unindented, and its replies streamed or printed once
    assert out.count("assistant: both answered") == 1


def test_continue_and_last_pick_the_latest_top_level_session_not_a_child(tmp_path: Path) -> None:
    tree = Tree(tmp_path / "home", tmp_path)
    again = tree.zagent("resume", tree.greeter.session_id, "once more")  # the child is now the latest
    assert again.returncode == 0 and "assistant: hi again" in again.stdout, again.stderr
    latest = tree.zagent("sessions", "list", "--all", "--limit", "1").stdout.splitlines()[1:]
    assert latest[0].startswith(tree.greeter.session_id)  # its parent is not listed: it is named
    assert latest[0].endswith(f"{tree.greeter.label} of {tree.root}: say hi")
    more = tree.zagent("run", "-c", "more")
    assert more.returncode == 0, more.stderr
    assert "assistant: more from the root" in more.stdout and f"session {tree.root}]" in more.stderr
    assert tree.zagent("sessions", "show", "--tree").stdout.startswith(f"{tree.root}  idle")


def test_the_tree_of_a_running_run_and_of_one_killed_says_where_each_session_is(home_dir: Path,
                                                                                tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    python_tool(home_dir, "wait_gate", f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.01)\n"
                "print('through')", timeout_seconds=60)
    script = {"replies": [reply("", spawn("wait at the gate")), reply("done")],
              "children": {"*": [reply("", {"name": "wait_gate", "arguments": {}}), reply("passed")]}}
    (tmp_path / "gate.json").write_text(json.dumps(script))
    driver = forked.Popen([PYTHON, "-m", "zagent_cli", "--home", str(home_dir), "run", "--model",
                           "scripted:gate.json", "go"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    try:
        def waiting_child() -> str | None:  # the child whose call waits at the gate, once it does
            try:
                with SQLiteJournal(home_dir / "journal.db", read_only=True) as journal:
                    return next((s.session_id for s in journal.sessions() if s.parent_session_id and s.calls), None)
            except JournalError:  # not made yet, or not migrated yet: the run is starting
                return None

        wait_for(waiting_child, "the child's call to start", seconds=30)

        def tree() -> dict[str, Any]:
            shown = zagent(home_dir, "sessions", "show", "--tree", "--json", cwd=tmp_path)
            assert shown.returncode == 0, shown.stderr
            return json.loads(shown.stdout)["tree"]

        running = tree()
        (child,) = running["children"]
        assert (running["status"], child["status"], child["outcome"], child["duration_ms"]) == (
            "running", "running", "running", None)
        driver.kill()
        driver.wait(timeout=10)
        cut = tree()
        assert (cut["status"], cut["children"][0]["outcome"]) == ("interrupted", "interrupted")
    finally:
        gate.touch()  # the tool's process outlives its killed driver: let it end
        driver.kill()
        driver.wait(timeout=10)


# -- the store -----------------------------------------------------------------------------


def started(parent: str | None = None, label: str = "child-1", depth: int = 1) -> SessionStarted:
    from zagent_core.journal.events import ParentLink

    link = ParentLink(session_id=parent, call_id="call_1", label=label, depth=depth) if parent else None
    return SessionStarted(origin="spawn" if parent else "test", workspace="/w", zagent_version="0", parent=link)


def test_a_journal_of_schema_5_gets_its_sessions_parents_from_their_events(home_dir: Path) -> None:
    import sqlite_utils

    from zagent_core.journal.events import Event, dump_event

    path = home_dir / "journal.db"
    db = sqlite_utils.Database(path)
    for migration in MIGRATIONS[:5]:
        migration(db)
    events: list[tuple[str, Event]] = [("p", started()), ("c", started("p")), ("f", started("p")),
                                       ("c", UserMessage(text="task")),  # a fork of a child is a person's own:
                                       ("f", SessionForked(parent_session_id="c", parent_seq=2))]
    for seq, (sid, event) in enumerate(events, start=1):
        db.execute("INSERT INTO events (session_id, version, type, at, data) VALUES (?, ?, ?, ?, ?)",
                   [sid, 1 + sum(s == sid for s, _ in events[:seq - 1]), event.type, f"2026-01-01T00:00:0{seq}.000Z",
                    dump_event(event)])
    db.execute("INSERT INTO heads SELECT session_id, max(version), min(at), max(at), max(seq), 0, 0, 0, 0"
               " FROM events GROUP BY session_id")  # as schema 5's appends kept them
    db.execute("PRAGMA user_version = 5")
    db.conn.commit()
    db.close()
    with SQLiteJournal(path) as journal:
        by_id = {s.session_id: (s.parent_session_id, s.parent_call_id, s.label, s.depth) for s in journal.sessions()}
        assert by_id == {"p": (None, None, None, 0), "c": ("p", "call_1", "child-1", 1), "f": (None, None, None, 0)}
        assert {s.session_id for s in journal.sessions(top_level=True)} == {"p", "f"}
        assert journal.db.execute("SELECT label, depth FROM sessions WHERE session_id = 'c'").fetchone() == (
            "child-1", 1)
        assert journal.check() == []


def test_heads_rebuilt_or_repaired_keep_the_parent(journal: SQLiteJournal) -> None:
    from zagent_core.journal.events import dump_event

    journal.append("p", [started()], 0)
    # A child written around zagent (a raw INSERT: no head row), then appended to: its head is repaired.
    journal.db.execute("INSERT INTO events (session_id, version, type, at, data) VALUES (?, 1, ?, ?, ?)",
                       ["c", "session_started", "2026-01-01T00:00:00.000Z", dump_event(started("p"))])
    journal.append("c", [UserMessage(text="task")], 1)
    assert {s.session_id: s.label for s in journal.sessions()} == {"p": None, "c": "child-1"}
    assert journal.rebuild_heads() == 2
    assert {s.session_id: (s.parent_session_id, s.depth) for s in journal.sessions()} == {"p": (None, 0),
                                                                                          "c": ("p", 1)}


def test_a_child_its_parent_journaled_but_never_started_is_in_the_tree_as_not_started(
        journal: SQLiteJournal) -> None:
    journal.append("p", [started(), ToolCallRequested(call_id="call_1", tool="spawn", arguments={"task": "t"}),
                         ChildSpawned(call_id="call_1", label="child-1", child_session_id="c", task="t",
                                      model="scripted:x")], 0)
    root = session_tree(journal, "p")
    assert root is not None and [(c.session_id, c.status, c.outcome) for c in root.children] == [
        ("c", NOT_STARTED, NOT_STARTED)]
    assert session_tree(journal, "nobody") is None


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=-1, max_value=30), max_size=12), st.integers(min_value=0, max_value=12))
def test_a_forest_of_sessions_lists_its_roots_and_finds_each_subtree(parents: list[int], gone: int) -> None:
    """Session n is a child of session ``parents[n]`` when that one came before it, else
    top-level; ``gone`` names a parent the journal never had (a child imported alone)."""
    import tempfile

    parent_of = {f"s{n}": f"s{p}" if 0 <= p < n else None for n, p in enumerate(parents)}
    if f"s{gone}" in parent_of:
        parent_of[f"s{gone}"] = "missing"
    depth: dict[str, int] = {}
    for sid, parent in parent_of.items():
        depth[sid] = depth[parent] + 1 if parent in depth else (1 if parent else 0)
    roots = {sid for sid, parent in parent_of.items() if parent not in parent_of}
    with tempfile.TemporaryDirectory() as folder, SQLiteJournal(Path(folder) / "journal.db") as sqlite_journal:
        for journal in (sqlite_journal, MemoryJournal()):
            for sid, parent in parent_of.items():
                journal.append(sid, [started(parent, label=f"child-{sid}", depth=depth[sid])], 0)
            assert {s.session_id for s in journal.sessions(top_level=True)} == roots
            assert {s.session_id: s.parent_session_id for s in journal.sessions()} == parent_of
        for sid in parent_of:
            below = {sid}
            while grown := {c for c, p in parent_of.items() if p in below} - below:
                below |= grown
            assert {row[0] for row in sqlite_journal.db.execute(SUBTREE, [sid])} == below


def edit(path: str, old: str, new: str) -> dict[str, Any]:
    return {"name": "edit", "arguments": {"path": path, "old_string": old, "new_string": new}}


def read(path: str) -> dict[str, Any]:
    return {"name": "read_file", "arguments": {"path": path}}


@pytest.mark.parametrize("shared", [True, False])
def test_a_child_that_shares_read_state_edits_what_its_parent_read_and_its_reads_are_the_parents(
        tmp_path: Path, shared: bool) -> None:
    home, folder = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    folder.mkdir()
    (folder / "a.txt").write_text("one\n")
    (folder / "b.txt").write_text("two\n")
    (home / "config.json").write_text(json.dumps({"spawn": {"subagents": {
        "editor": {"description": "edits", "share_read_state": shared}}}}))
    script = {"replies": [reply("", read("a.txt")),
                          reply("", {"name": "spawn", "arguments": {"task": "fix a", "subagent_type": "editor"}}),
                          reply("", edit("b.txt", "two", "2")), reply("done")],
              "children": {"fix a": [reply("", edit("a.txt", "one", "1")), reply("", read("b.txt")),
                                     reply("fixed")]}}
    (folder / "s.json").write_text(json.dumps(script))
    result = zagent(home, "run", "--model", "scripted:s.json", "go", cwd=folder)
    assert result.returncode == 0, result.stderr

    assert (folder / "a.txt").read_text() == ("1\n" if shared else "one\n")
    assert (folder / "b.txt").read_text() == ("2\n" if shared else "two\n")
    with SQLiteJournal(home / "journal.db") as journal:
        (root,) = journal.sessions(top_level=True)
        spawned = next(s.event for s in journal.read(root.session_id) if isinstance(s.event, ChildSpawned))
        child_started = next(iter(journal.read(spawned.child_session_id))).event
    assert spawned.share_read_state is shared
    assert isinstance(child_started, SessionStarted) and child_started.parent is not None
    assert child_started.parent.share_read_state is shared
