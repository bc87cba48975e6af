"""Exports round-trip exactly; imports refuse what is not an export; forks keep the parent link."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from zagent_cli.main import cli
from zagent_core.events import (
    ModelReplied,
    NoteReceived,
    RepliedCall,
    SessionStarted,
    ToolCallFinished,
    ToolCallRequested,
    UserMessage,
)
from zagent_core.exports import ExportError, export_lines, fork_session, import_session, parse_export
from zagent_core.state import rebuild
from zagent_store import SQLiteJournal

text = st.text(max_size=20)
json_values = st.recursive(st.none() | st.booleans() | st.integers(-10**6, 10**6) | text,
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
                           max_leaves=8)
events = st.lists(st.one_of(
    st.builds(UserMessage, text=text),
    st.builds(NoteReceived, call_id=st.just("c1"), text=text, wake=st.booleans(), offset=st.integers(0, 10**9)),
    st.builds(ToolCallRequested, call_id=st.sampled_from(["c1", "c2"]), tool=text, arguments=json_values),
    st.builds(ToolCallFinished, call_id=st.just("c1"), output=text, is_error=st.booleans(),
              exit_code=st.none() | st.integers(-9, 255), duration_ms=st.integers(0, 10**6)),
    st.builds(ModelReplied, model=text, text=text, stop_reason=text, input_tokens=st.integers(0, 10**6),
              tool_calls=st.lists(st.builds(RepliedCall, id=text, call_id=text, name=text, arguments=json_values),
                                  max_size=2)),
), max_size=12)


@settings(max_examples=60, deadline=None)
@given(body=events, batch=st.integers(1, 4))
def test_export_import_export_is_the_same_file(body: list, batch: int) -> None:
    # Only sessions that hold together: a result or a note for a call that was requested.
    requested: set[str] = set()
    consistent = []
    for event in body:
        if event.type == "tool_call_requested":
            requested.add(event.call_id)
        elif event.type in ("tool_call_finished", "note_received") and event.call_id not in requested:
            continue
        consistent.append(event)
    body = consistent
    with tempfile.TemporaryDirectory() as tmp:
        first = SQLiteJournal(Path(tmp) / "a.db")
        stream = [SessionStarted(origin="test", workspace="/w", zagent_version="0"), *body]
        for start in range(0, len(stream), batch):  # several transactions, like a real session
            first.append("s1", stream[start:start + batch], start)
        exported = list(export_lines(first.read("s1")))
        second = SQLiteJournal(Path(tmp) / "b.db")
        second.append("noise", [UserMessage(text="another session first, so seqs differ")], 0)
        assert import_session(second, parse_export(exported)) == "s1"
        assert list(export_lines(second.read("s1"))) == exported
        assert [e.event for e in second.read("s1")] == stream
        first.close()
        second.close()


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (["not json"], "line 1: Expecting value"),
        (['{"session_id": "s", "version": 2, "at": "2026-01-01T00:00:00Z", "type": "user_message", '
          '"data": {"v": 1, "text": "x"}}'], "line 1: version 2 where 1 was expected"),
        (['{"session_id": "s", "version": 1, "at": "2026-01-01T00:00:00Z", "type": "teleport", "data": {}}'],
         'line 1: unknown event type "teleport"'),
        ([], "holds no events"),
    ],
)
def test_a_file_that_is_not_an_export_is_refused_naming_the_line(lines: list[str], message: str) -> None:
    with pytest.raises(ExportError, match=message):
        parse_export(lines, source="x.jsonl")


def test_a_fork_copies_a_prefix_and_keeps_the_parent_link(tmp_path: Path) -> None:
    with SQLiteJournal(tmp_path / "journal.db") as journal:
        stored = journal.append("parent", [SessionStarted(origin="t", workspace="/", zagent_version="0"),
                                           UserMessage(text="one"), UserMessage(text="two")], 0)
        fork_session(journal, "parent", stored[1].seq, "child")
        child = list(journal.read("child"))
        assert [e.event.type for e in child] == ["session_started", "user_message", "session_forked"]
        assert child[1].at == stored[1].at  # times are kept
        assert rebuild(child).forked_from == f"parent@{stored[1].seq}"
        with pytest.raises(ValueError, match="no event at or before"):
            fork_session(journal, "parent", 0, "other")


def test_the_cli_exports_imports_and_forks(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with SQLiteJournal(home / "journal.db") as journal:
        journal.append("s1", [SessionStarted(origin="t", workspace="/", zagent_version="0"), UserMessage(text="hi")], 0)
    runner = CliRunner()
    exported = runner.invoke(cli, ["--home", str(home), "sessions", "export", "s1"])
    assert exported.exit_code == 0 and len(exported.output.splitlines()) == 2
    file = tmp_path / "s1.jsonl"
    file.write_text(exported.output)
    again = runner.invoke(cli, ["--home", str(home), "sessions", "import", str(file)])
    assert again.exit_code == 2 and "import it under another id with --as" in again.output
    copied = runner.invoke(cli, ["--home", str(home), "sessions", "import", str(file), "--as", "s2"])
    assert copied.output.strip() == "s2"
    seq = json.loads(runner.invoke(cli, ["--home", str(home), "sessions", "show", "s1", "--json", "--events"]).output)
    forked = runner.invoke(cli, ["--home", str(home), "sessions", "fork", "s1", "--at", str(seq["events"][0]["seq"])])
    assert forked.exit_code == 0
    shown = runner.invoke(cli, ["--home", str(home), "sessions", "show", forked.output.strip(), "--json"]).output
    assert json.loads(shown)["forked_from"] == f"s1@{seq['events'][0]['seq']}"
    missing = runner.invoke(cli, ["--home", str(home), "sessions", "export", "nope"])
    assert missing.exit_code == 2 and 'no session "nope"' in missing.output


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"session_id": "../../escape", "version": 1, "at": "2026-01-01T00:00:00Z", "type": "user_message", '
         '"data": {"v": 1, "text": "x"}}', "is not a usable session id"),
        ('{"session_id": "s", "version": 1, "at": 5, "type": "user_message", "data": {"v": 1, "text": "x"}}',
         "line 1"),
        ('{"session_id": "s", "version": 1, "at": "2026-01-01T00:00:00Z", "type": "tool_call_finished", '
         '"data": {"v": 1, "call_id": "c9", "output": "", "is_error": false, "exit_code": 0, "duration_ms": 1}}',
         "the first event is tool_call_finished, not session_started"),
    ],
)
def test_an_export_that_would_break_the_journal_is_refused(line: str, message: str) -> None:
    with pytest.raises(ExportError, match=message):
        parse_export([line], source="x.jsonl")


def test_an_export_with_a_result_for_a_call_never_requested_is_refused() -> None:
    lines = [
        '{"session_id": "s", "version": 1, "at": "2026-01-01T00:00:00Z", "type": "session_started", '
        '"data": {"v": 1, "origin": "t", "workspace": "/", "zagent_version": "0"}}',
        '{"session_id": "s", "version": 2, "at": "2026-01-01T00:00:01Z", "type": "tool_call_finished", '
        '"data": {"v": 1, "call_id": "c9", "output": "", "is_error": false, "exit_code": 0, "duration_ms": 1}}',
    ]
    with pytest.raises(ExportError, match="refers to 'c9', which the session never had"):
        parse_export(lines, source="x.jsonl")


def test_import_refuses_a_session_id_that_could_leave_the_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with SQLiteJournal(home / "journal.db") as journal:
        journal.append("s1", [SessionStarted(origin="t", workspace="/", zagent_version="0")], 0)
    runner = CliRunner()
    file = tmp_path / "s1.jsonl"
    file.write_text(runner.invoke(cli, ["--home", str(home), "sessions", "export", "s1"]).output)
    result = runner.invoke(cli, ["--home", str(home), "sessions", "import", str(file), "--as", "../../escape"])
    assert result.exit_code == 2 and "--as" in result.output and "not a usable session id" in result.output


def test_a_fork_of_an_ended_session_can_go_on_and_leaves_the_parents_tasks_alone(tmp_path: Path) -> None:
    from zagent_core.events import SessionEnded, TaskStarted, ToolCallStarted

    with SQLiteJournal(tmp_path / "journal.db") as journal:
        stored = journal.append("parent", [
            SessionStarted(origin="t", workspace="/", zagent_version="0"),
            ToolCallRequested(call_id="c1", tool="bg", arguments={}),
            ToolCallStarted(call_id="c1", task_id="1", tool="bg", arguments={}, argv=["x"], cwd="/",
                            input_mode="stdin_json", output_mode="text", output_dir="/o", notify_file="/n",
                            timeout_seconds=None, manifest_hash="m", files_hash="f"),
            TaskStarted(task_id="1", call_id="c1", tool="bg", pid=1, start_ticks=1, boot_id="b", task_dir="/t"),
            SessionEnded(),
        ], 0)
        fork_session(journal, "parent", stored[-1].seq, "child")
        child = rebuild(journal.read("child"))
    assert child.status == "open" and child.tasks["1"].status == "interrupted"
    assert "stays with session parent" in child.tasks["1"].output
