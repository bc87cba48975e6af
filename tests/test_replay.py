"""Replay: recorded sessions driven again, and a precise report of what changed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from conftest import EXAMPLES, PYTHON

from zagent_cli.main import cli
from zagent_core import Engine, Home
from zagent_core.agent.loop import Agent
from zagent_core.agent.models import load_model
from zagent_core.history.replay import replay
from zagent_core.history.replay_report import output_diff
from zagent_store import SQLiteJournal


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[Path, str]:
    """A home with word_count, and a session recorded with the scripted word_count example."""
    home = tmp_path / "home"
    shutil.copytree(EXAMPLES / "tools" / "word_count", home / "tools" / "word_count")
    manifest = home / "tools" / "word_count" / "word_count.json"
    manifest.write_text(manifest.read_text().replace('"python"', json.dumps(PYTHON)))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with SQLiteJournal(home / "journal.db") as journal:
        session = Engine(Home(home), journal, workspace=workspace).start_session("run")
        Agent(session, load_model(f"scripted:{EXAMPLES.parent / 'scripts' / 'word_count.json'}")).run("count")
    return home, session.session_id


def run_replay(home: Path, session_id: str, tmp_path: Path, **options):
    with SQLiteJournal(home / "journal.db") as journal, SQLiteJournal(tmp_path / "replay.db") as into:
        return replay(journal, session_id, Home(home), into, workdir=tmp_path / "work", **options)


def test_an_unchanged_session_replays_the_same_both_ways(recorded, tmp_path: Path) -> None:
    home, session_id = recorded
    assert run_replay(home, session_id, tmp_path / "a", tools="recorded").matched
    report = run_replay(home, session_id, tmp_path / "b", tools="rerun", allow_unsafe=True)
    assert report.matched, report.text()
    assert len(report.actual) == 2 and report.actual[1].output.startswith("5 words")


def test_a_changed_tool_is_a_divergence_with_a_unified_diff(recorded, tmp_path: Path) -> None:
    home, session_id = recorded
    script = home / "tools" / "word_count" / "word_count.py"
    script.write_text(script.read_text().replace("words, ", "tokens, "))
    report = run_replay(home, session_id, tmp_path, tools="rerun", allow_unsafe=True)
    assert not report.matched
    (difference,) = report.differences
    assert difference.step == 1 and difference.field == "output"
    assert "-5 words, 4 distinct" in difference.diff and "+5 tokens, 4 distinct" in difference.diff
    assert difference.diff.endswith("   2. cat  1\n\\ No newline at end of file")
    with pytest.raises(AssertionError, match="step 2, output differs"):
        report.assert_matches()


def test_a_changed_last_line_is_not_glued_to_the_next_line_of_the_diff(recorded, tmp_path: Path) -> None:
    home, session_id = recorded
    script = home / "tools" / "word_count" / "word_count.py"
    script.write_text(script.read_text().replace('f"{i:>3}. {w.ljust(width)}  {n}"', 'f"{i:>3}. {w.ljust(width)} = {n}"'))
    base = ["--home", str(home), "replay", session_id, "--tools", "rerun", "--allow-unsafe"]
    shown = CliRunner().invoke(cli, base).output.splitlines()
    # The outputs end without a newline: each side's last line is a line of its own, as in diff -u.
    assert shown[-6:] == ["-  1. the  2", "-  2. cat  1", "\\ No newline at end of file",
                          "+  1. the = 2", "+  2. cat = 1", "\\ No newline at end of file"]
    body = json.loads(CliRunner().invoke(cli, [*base, "--json"]).output)
    assert body["replays"][0]["differences"][0]["diff"].splitlines()[-3:] == [
        "+  1. the = 2", "+  2. cat = 1", "\\ No newline at end of file"]


def test_a_changed_schema_is_a_different_host_decision(recorded, tmp_path: Path) -> None:
    home, session_id = recorded
    manifest = home / "tools" / "word_count" / "word_count.json"
    data = json.loads(manifest.read_text())
    data["parameters"]["properties"]["top"] = {"type": ["integer", "string"]}  # "two" is accepted now
    manifest.write_text(json.dumps(data))
    report = run_replay(home, session_id, tmp_path, tools="recorded")
    assert [(d.step, d.field, d.expected, d.actual) for d in report.differences] == [
        (0, "validation", "refused", "accepted")]


def test_unsafe_tools_are_not_rerun_without_permission(recorded, tmp_path: Path) -> None:
    home, session_id = recorded
    report = run_replay(home, session_id, tmp_path, tools="rerun")
    assert len(report.not_rerun) == 2 and report.rerun == 0 and not report.differences


def test_the_cli_replays_exports_and_normalises(recorded, tmp_path: Path) -> None:
    home, session_id = recorded
    runner = CliRunner()
    base = ["--home", str(home)]
    assert runner.invoke(cli, [*base, "replay", session_id]).exit_code == 0
    export = tmp_path / "s.zagent.jsonl"
    export.write_text(runner.invoke(cli, [*base, "sessions", "export", session_id]).output)
    script = home / "tools" / "word_count" / "word_count.py"
    script.write_text(script.read_text().replace("distinct", "different"))
    diverged = runner.invoke(cli, [*base, "replay", "--file", str(export), "--tools", "rerun", "--allow-unsafe",
                                   "--json"])
    assert diverged.exit_code == 1
    body = json.loads(diverged.output)
    assert body["matched"] is False and body["replays"][0]["differences"][0]["field"] == "output"
    normalised = runner.invoke(cli, [*base, "replay", "--file", str(export), "--tools", "rerun", "--allow-unsafe",
                                     "--normalize", "distinct|different=<d>"])
    assert normalised.exit_code == 0, normalised.output
    (home / "config.json").write_text(json.dumps({"replay": {"normalize": [
        {"pattern": "distinct|different", "replacement": "<d>"}]}}))
    assert runner.invoke(cli, [*base, "replay", session_id, "--tools", "rerun", "--allow-unsafe"]).exit_code == 0
    usage = runner.invoke(cli, [*base, "replay"])
    assert usage.exit_code == 2 and "name one SESSION_ID" in usage.output
    assert runner.invoke(cli, [*base, "replay", "nope"]).exit_code == 2
    assert runner.invoke(cli, [*base, "replay", session_id, "--normalize", "("]).exit_code == 2


def test_a_removed_tool_diverges_even_when_results_are_served(recorded, tmp_path: Path) -> None:
    home, session_id = recorded
    shutil.rmtree(home / "tools" / "word_count")
    report = run_replay(home, session_id, tmp_path, tools="recorded")
    assert not report.matched and {d.field for d in report.differences} == {"tool"}


def test_an_unknown_tools_mode_is_refused(recorded, tmp_path: Path) -> None:
    home, session_id = recorded
    with pytest.raises(ValueError, match='tools must be "recorded" or "rerun"'):
        run_replay(home, session_id, tmp_path, tools="Rerun")


def test_a_session_whose_turn_failed_and_was_resumed_replays_the_same(tmp_path: Path) -> None:
    from zagent_core.agent.models import ModelReply
    from zagent_core.agent.models.scripted import ScriptedModel

    home = tmp_path / "home"
    (home / "tools").mkdir(parents=True)
    with SQLiteJournal(home / "journal.db") as journal:
        engine = Engine(Home(home), journal, workspace=tmp_path)
        session = engine.start_session("run")
        assert Agent(session, ScriptedModel([])).run("hello").reason.startswith("model_error")
        resumed = engine.resume(session.session_id)
        assert Agent(resumed, ScriptedModel([ModelReply(text="hi")])).run(None).reason == "idle"
    report = run_replay(home, session.session_id, tmp_path / "r", tools="recorded")
    assert report.matched, report.text()


_DIFF_TEXT = st.text(st.sampled_from(["a", "b", "\n", "\r", "\x0c", " "]), max_size=12)


@given(_DIFF_TEXT, _DIFF_TEXT)
def test_an_output_diff_keeps_every_line_on_a_line_of_its_own(old: str, new: str) -> None:
    diff = output_diff(old, new)
    if old == new:
        assert diff == ""
        return
    lines = diff.split("\n")
    assert lines[:2] == ["--- recorded", "+++ replayed"]
    body = lines[2:]
    assert all(line[:1] in " -+@\\" for line in body), diff
    # Each removed or kept line is a whole line of the old output, each added or kept one of the new.
    old_lines, new_lines = old.split("\n"), new.split("\n")
    assert all(line[1:] in old_lines for line in body if line[:1] in " -")
    assert all(line[1:] in new_lines for line in body if line[:1] in " +")
    # The marker follows exactly the lines that ended an output without a final newline.
    for index, line in enumerate(body):
        if line.startswith("\\"):
            assert line == "\\ No newline at end of file" and body[index - 1][:1] in " -+"
