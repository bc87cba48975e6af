"""A recorded session replays in any checkout: the workspace to copy can be given (the
global ``--workspace`` for ``zagent replay``, ``zagent_workspace`` for pytest), and paths of
the recorded and the given workspace in outputs compare equal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import python_tool

from zagent_cli.main import cli
from zagent_core import Engine, Home
from zagent_core.agent.loop import Agent
from zagent_core.agent.models import ModelReply, ToolCallRequest
from zagent_core.agent.models.scripted import ScriptedModel
from zagent_core.history.replay import replay
from zagent_store import SQLiteJournal

pytest_plugins = ["pytester"]

NO_NEWLINE = "\\ No newline at end of file"

#: Says where it runs and what the workspace's file holds.
READ = "import os\nprint('reading', os.path.abspath('data.txt'))\nprint(open('data.txt').read(), end='')"


@pytest.fixture
def moved(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A session recorded in ``checkout/ws``, exported, and the checkout then moved: (home, export, new ws)."""
    home = tmp_path / "home"
    python_tool(home, "read", READ, replay="safe")
    old = tmp_path / "checkout" / "ws"
    old.mkdir(parents=True)
    (old / "data.txt").write_text("fixture data\n")
    model = ScriptedModel([
        ModelReply(tool_calls=[ToolCallRequest(id="c1", name="read", arguments={})], stop_reason="tool_use"),
        ModelReply(text="read it"),
    ])
    with SQLiteJournal(home / "journal.db") as journal:
        session = Engine(Home(home), journal, workspace=old).start_session("run")
        Agent(session, model).run("read")
    export = tmp_path / "read.zagent.jsonl"
    export.write_text(CliRunner().invoke(cli, ["--home", str(home), "sessions", "export", session.session_id]).output)
    (home / "journal.db").unlink()
    (tmp_path / "checkout").rename(tmp_path / "elsewhere")
    return home, export, tmp_path / "elsewhere" / "ws"


def test_the_cli_replays_an_export_in_the_workspace_given(moved: tuple[Path, Path, Path]) -> None:
    home, export, workspace = moved
    base = ["--home", str(home)]
    args = ["replay", "--file", str(export), "--tools", "rerun"]
    lost = CliRunner().invoke(cli, [*base, *args])
    assert lost.exit_code == 1 and "does not exist (any more)" in lost.output and "--workspace DIR" in lost.output
    found = CliRunner().invoke(cli, [*base, "--workspace", str(workspace), *args])
    assert found.exit_code == 0, found.output
    assert "matches, 1 of 1 steps (all run again)" in found.output
    bad = CliRunner().invoke(cli, [*base, "--workspace", str(workspace / "nope"), *args])
    assert bad.exit_code == 2 and "is not a folder" in bad.output


def test_paths_of_the_recorded_and_the_given_workspace_compare_equal(moved: tuple[Path, Path, Path],
                                                                     tmp_path: Path) -> None:
    home, export, workspace = moved
    (workspace / "data.txt").write_text("changed data\n")
    from zagent_cli.pytest_plugin import replay_export

    report = replay_export(export, Home(home), workspace=workspace)
    (difference,) = report.differences
    # Only the content differs: the path line, recorded in checkout/ws and rerun in a copy of
    # elsewhere/ws, is the same line.
    assert difference.diff.splitlines()[3:] == [" reading <workspace>/data.txt", "-fixture data", NO_NEWLINE,
                                                 "+changed data", NO_NEWLINE]


def test_the_pytest_ini_names_the_workspace(moved: tuple[Path, Path, Path], pytester: pytest.Pytester) -> None:
    home, export, workspace = moved
    (pytester.path / "read.zagent.jsonl").write_text(export.read_text())
    (pytester.path / "ws").mkdir()
    (pytester.path / "ws" / "data.txt").write_text((workspace / "data.txt").read_text())
    pytester.makeini(f"[pytest]\nzagent_home = {home}\n")
    unset = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    unset.assert_outcomes(failed=1)
    unset.stdout.fnmatch_lines(["*zagent_workspace*"])
    pytester.makeini(f"[pytest]\nzagent_home = {home}\nzagent_workspace = ws\n")
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)
    pytester.makeini(f"[pytest]\nzagent_home = {home}\nzagent_workspace = nope\n")
    wrong = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    wrong.stderr.fnmatch_lines(["*zagent_workspace = nope*is not a folder*"])


def test_replay_takes_the_workspace_from_python(moved: tuple[Path, Path, Path], tmp_path: Path) -> None:
    home, export, workspace = moved
    from zagent_core.history.exports import import_session, parse_export

    with SQLiteJournal(tmp_path / "rec.db") as recorded, SQLiteJournal(tmp_path / "into.db") as into:
        session_id = import_session(recorded, parse_export(export.read_text().splitlines()), home=Home(home))
        report = replay(recorded, session_id, Home(home), into, tools="rerun", workspace=workspace,
                        workdir=tmp_path / "work")
    assert report.matched, report.text()
    assert json.loads(json.dumps(report.to_dict()))["rerun_steps"] == 1
