"""A replay says `matches` only of what it checked: a rerun that ran nothing again tested nothing."""

from __future__ import annotations

import json
import shutil
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


def record(tmp_path: Path, *, safe: bool) -> tuple[Path, str]:
    """A session of two calls: ``checked`` (replay: safe) and ``risky`` (replay: safe only if ``safe``)."""
    home = tmp_path / "home"
    (home / "tools").mkdir(parents=True)
    python_tool(home, "checked", "print('checked ran')", replay="safe")
    python_tool(home, "risky", "print('risky ran')", **({"replay": "safe"} if safe else {}))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    calls = [ToolCallRequest(id="a", name="checked", arguments={}), ToolCallRequest(id="b", name="risky", arguments={})]
    with SQLiteJournal(home / "journal.db") as journal:
        session = Engine(Home(home), journal, workspace=workspace).start_session("run")
        Agent(session, ScriptedModel([ModelReply(tool_calls=calls, stop_reason="tool_use"), ModelReply(text="done")]),
              ).run("go")
    return home, session.session_id


def rerun(home: Path, session_id: str, tmp_path: Path, **options):
    with SQLiteJournal(home / "journal.db") as journal, SQLiteJournal(tmp_path / "replay.db") as into:
        return replay(journal, session_id, Home(home), into, workdir=tmp_path / "work", tools="rerun", **options)


def test_a_partial_rerun_says_how_many_steps_it_checked(tmp_path: Path) -> None:
    home, session_id = record(tmp_path, safe=False)
    report = rerun(home, session_id, tmp_path / "r")
    assert report.matched and report.rerun == 1 and report.not_rerun == ["risky (b)"]
    first = report.text().splitlines()[0]
    assert first.endswith("matches, 2 of 2 steps (1 run again and checked, 1 served from the recording)"), first


def test_a_rerun_that_ran_nothing_again_does_not_match(recorded_unsafe: tuple[Path, str], tmp_path: Path) -> None:
    home, session_id = recorded_unsafe
    report = rerun(home, session_id, tmp_path / "r")
    assert not report.matched and not report.diverged and report.nothing_rerun
    assert report.verdict == "NOTHING RERUN"
    assert "NOTHING RERUN, 1 of 1 steps (none run again: 1 served from the recording)" in report.text()
    assert "--allow-unsafe" in report.text()
    with pytest.raises(AssertionError, match="NOTHING RERUN"):
        report.assert_matches()
    assert rerun(home, session_id, tmp_path / "r2", allow_unsafe=True).matched
    # Served results in recorded mode check the host's decisions: that is what was asked.
    with SQLiteJournal(home / "journal.db") as journal, SQLiteJournal(tmp_path / "rec.db") as into:
        assert replay(journal, session_id, Home(home), into, workdir=tmp_path / "rec", tools="recorded").matched


@pytest.fixture
def recorded_unsafe(tmp_path: Path) -> tuple[Path, str]:
    home = tmp_path / "home"
    (home / "tools").mkdir(parents=True)
    python_tool(home, "risky", "print('risky ran')")
    with SQLiteJournal(home / "journal.db") as journal:
        session = Engine(Home(home), journal, workspace=tmp_path).start_session("run")
        Agent(session, ScriptedModel([
            ModelReply(tool_calls=[ToolCallRequest(id="a", name="risky", arguments={})], stop_reason="tool_use"),
            ModelReply(text="done")])).run("go")
    return home, session.session_id


def test_the_cli_exits_1_when_a_rerun_ran_nothing_again(recorded_unsafe: tuple[Path, str]) -> None:
    home, session_id = recorded_unsafe
    base = ["--home", str(home), "replay", session_id, "--tools", "rerun"]
    result = CliRunner().invoke(cli, base)
    assert result.exit_code == 1 and "NOTHING RERUN, 1 of 1 steps" in result.output
    body = json.loads(CliRunner().invoke(cli, [*base, "--json"]).output)
    (only,) = body["replays"]
    assert body["matched"] is False and only["verdict"] == "NOTHING RERUN" and only["rerun_steps"] == 0
    assert CliRunner().invoke(cli, [*base, "--allow-unsafe"]).exit_code == 0


def test_a_pytest_item_that_ran_nothing_again_is_skipped_with_the_reason(
        recorded_unsafe: tuple[Path, str], pytester: pytest.Pytester) -> None:
    home, session_id = recorded_unsafe
    export = CliRunner().invoke(cli, ["--home", str(home), "sessions", "export", session_id]).output
    (pytester.path / "risky.zagent.jsonl").write_text(export)
    pytester.makeini(f"[pytest]\nzagent_home = {home}\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*SKIPPED*zagent replay ran nothing again*zagent_replay_allow_unsafe = true*"])
    shutil.copy(pytester.path / "risky.zagent.jsonl", pytester.path / "again.zagent.jsonl")
    pytester.makeini(f"[pytest]\nzagent_home = {home}\nzagent_replay_allow_unsafe = true\n")
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)
