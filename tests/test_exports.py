"""Exports round-trip exactly; imports refuse what is not an export; forks keep the parent link."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import pytest
import forked
from click.testing import CliRunner
from conftest import PYTHON, python_tool
from test_ask_user import zagent
from test_spawn_crash import setup_home, top_session
from hypothesis import given, settings
from hypothesis import strategies as st

from zagent_cli.main import cli
from zagent_core import Engine, Home
from zagent_core.journal.events import (
    ChildEnded,
    ChildSpawned,
    ModelReplied,
    NoteReceived,
    RepliedCall,
    SessionStarted,
    ToolCallFinished,
    ToolCallRequested,
    ToolCallStarted,
    UserMessage,
)
from zagent_core.history.exports import (
    SESSION_PATH_FIELDS,
    ExportError,
    ImportedSession,
    export_lines,
    fork_session,
    import_session,
    parse_export,
    relocate,
)
from zagent_core.journal.fold import rebuild
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
        assert import_session(second, parse_export(exported), home=Home(tmp)) == "s1"
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
    from zagent_core.journal.events import SessionEnded, TaskStarted, ToolCallStarted

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


# -- paths in imported events ----------------------------------------------------------------

def _open_call_events(notify_file: str, output_dir: str = "/h/sessions/s1/calls/c1/output") -> ImportedSession:
    """Session s1, cut off while call c1 ran, its folders as given."""
    events = [
        SessionStarted(origin="t", workspace="/w", zagent_version="0"),
        ToolCallRequested(call_id="c1", tool="x", arguments={}),
        ToolCallStarted(call_id="c1", tool="x", arguments={}, argv=["x"], cwd="/w", input_mode="stdin_json",
                        output_mode="text", output_dir=output_dir, notify_file=notify_file,
                        timeout_seconds=None, manifest_hash="m", files_hash="f"),
    ]
    return ImportedSession("s1", events, [datetime.now(timezone.utc)] * len(events))


def _open_call(notify_file: str, output_dir: str = "/h/sessions/s1/calls/c1/output") -> list[str]:
    """The export of :func:`_open_call_events`."""
    with tempfile.TemporaryDirectory() as tmp, SQLiteJournal(Path(tmp) / "j.db") as journal:
        journal.append("s1", _open_call_events(notify_file, output_dir).events, 0)
        return list(export_lines(journal.read("s1")))


def _zagent(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return forked.run([PYTHON, "-m", "zagent_cli", "--home", str(home), *args], capture_output=True, text=True,
                      timeout=60, cwd=home.parent)


@pytest.mark.parametrize("notify_file", [
    "/etc/passwd",
    "/h/sessions/s1/calls/c1/../../../../../etc/passwd",
    "/h/sessions/another/calls/c1/notify",
    "sessions/s1/calls/c1/notify",
    "/h/sessions/s1",
])
def test_an_export_whose_paths_leave_its_session_folder_is_refused(tmp_path: Path, notify_file: str) -> None:
    home = tmp_path / "home"
    export = tmp_path / "crafted.jsonl"
    export.write_text("\n".join(_open_call(notify_file)) + "\n")
    refused = _zagent(home, "sessions", "import", str(export))
    assert refused.returncode == 2, refused.stderr
    assert f"event 3 (tool_call_started): notify_file {notify_file!r}" in refused.stderr
    assert "Traceback" not in refused.stderr
    listed = _zagent(home, "sessions", "list", "--json")
    assert json.loads(listed.stdout)["sessions"] == []  # nothing imported


def test_paths_that_agree_on_no_one_home_are_refused(tmp_path: Path) -> None:
    imported = _open_call_events("/h/sessions/s1/calls/c1/notify", output_dir="/elsewhere/sessions/s1/calls/c1/output")
    with pytest.raises(ExportError, match="notify_file '/h/.*': it is not in /elsewhere/sessions/s1/, where the "
                                          "export's other paths are"):
        relocate(imported, Home(tmp_path / "home"), "s1")


def test_a_symlink_in_the_importing_session_folder_does_not_let_a_path_out(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    (tmp_path / "outside").mkdir()
    home.session_dir("s1").mkdir(parents=True)
    (home.session_dir("s1") / "calls").symlink_to(tmp_path / "outside")
    with pytest.raises(ExportError, match="leads out of .* through a symbolic link"):
        relocate(_open_call_events("/h/sessions/s1/calls/c1/notify"), home, "s1")


@settings(max_examples=200, deadline=None)
@given(path=st.lists(st.sampled_from(["h", "sessions", "s1", "s2", "calls", "c1", "..", ".", "", "notify", "/"]),
                     max_size=8).map("/".join))
def test_an_imported_session_path_is_in_the_importing_session_folder_or_refused(path: str) -> None:
    home = Home("/nonexistent/home")
    try:
        events = relocate(_open_call_events(path), home, "new")
    except ExportError:
        return
    started = events[2]
    assert isinstance(started, ToolCallStarted)
    assert Path(started.notify_file).resolve().is_relative_to(home.session_dir("new"))
    assert ".." not in Path(started.notify_file).parts


def test_a_real_session_and_its_fork_move_into_the_importing_home(tmp_path: Path) -> None:
    recording = Home(tmp_path / "a")
    python_tool(recording.root, "bg", "import os, pathlib\n"
                "pathlib.Path(os.environ['ZAGENT_OUTPUT_DIR'], 'r.txt').write_text('x')\n", background=True)
    python_tool(recording.root, "fg", "import os, pathlib\n"
                "pathlib.Path(os.environ['ZAGENT_OUTPUT_DIR'], 'f.txt').write_text('y')\nprint('y' * 50000)\n")
    with SQLiteJournal(recording.journal_path) as journal:
        with Engine(recording, journal, workspace=tmp_path).start_session("t") as session:
            session.call("fg", {})
            session.call("bg", {}, call_id="b1")
            task = next(t.task_id for t in session.state.tasks.values() if t.call_id == "b1")
            assert task is not None and session.wait_task(task, 30).status == "exited"
        fork_id = fork_session(journal, session.session_id, list(journal.read(session.session_id))[-1].seq, "fork")
        (tmp_path / "fork.jsonl").write_text("".join(f"{line}\n" for line in export_lines(journal.read(fork_id))))
    importing = Home(tmp_path / "b")
    done = _zagent(importing.root, "sessions", "import", str(tmp_path / "fork.jsonl"), "--as", "copy")
    assert done.returncode == 0, done.stderr
    with SQLiteJournal(importing.journal_path) as journal:
        events = [stored.event for stored in journal.read("copy")]
    values = [getattr(e, name) for e in events for name in SESSION_PATH_FIELDS.get(type(e), ())]
    flat = [item.path if hasattr(item, "path") else item
            for value in values for item in (value if isinstance(value, list) else [value]) if item is not None]
    assert len(flat) >= 8  # notify files, output folders, the task folder, full output, the files made
    assert all(path.startswith(f"{importing.session_dir('copy')}/calls/") for path in flat), flat


def test_every_path_an_event_holds_is_either_moved_on_import_or_only_describes_the_recording() -> None:
    from zagent_core.journal.events import EVENT_TYPES

    # Where things were on the recording machine; nothing is read from them for a recorded call.
    descriptive = {("session_started", "workspace"), ("tool_call_started", "cwd"), ("tool_call_started", "argv"),
                   ("artifact_recorded", "path")}
    moved = {(cls.model_fields["type"].default, name) for cls, names in SESSION_PATH_FIELDS.items() for name in names}
    path_like = re.compile(r"(path|dir|file|files|media|folder|workspace|cwd|argv)$")
    found = {(kind, name) for kind, cls in EVENT_TYPES.items() for name in cls.model_fields if path_like.search(name)}
    assert found == moved | descriptive


def test_resuming_a_fork_leaves_the_parents_running_foreground_tool_alone(tmp_path: Path) -> None:
    from zagent_core.journal.fold import rebuild as fold
    from zagent_core.tools.processes import ProcessIdentity, write_identity

    home = Home(tmp_path / "home")
    call_dir = home.call_dir("parent", "c1")
    call_dir.mkdir(parents=True)
    (call_dir / "notify").write_text("")
    # The parent's tool, still running (the parent's engine is busy with it elsewhere).
    tool = subprocess.Popen([PYTHON, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        assert ProcessIdentity.of(tool.pid) is not None
        write_identity(call_dir / "tool.json", tool.pid)
        with SQLiteJournal(home.journal_path) as journal:
            stored = journal.append("parent", [
                SessionStarted(origin="t", workspace=str(tmp_path), zagent_version="0"),
                ToolCallRequested(call_id="c1", tool="x", arguments={}),
                ToolCallStarted(call_id="c1", tool="x", arguments={}, argv=["x"], cwd=str(tmp_path),
                                input_mode="stdin_json", output_mode="text", output_dir=str(call_dir / "output"),
                                notify_file=str(call_dir / "notify"), timeout_seconds=None, manifest_hash="m",
                                files_hash="f"),
            ], 0)
            fork_session(journal, "parent", stored[-1].seq, "child")
            assert fold(journal.read("child"), history=True).calls["c1"].status == "interrupted"
            Engine(home, journal, workspace=tmp_path).resume("child").end()
        assert tool.poll() is None, "the fork's resume killed the parent's tool"
    finally:
        tool.kill()
        tool.wait()


# -- an import refers to no session outside its own tree ------------------------------------------


def recorded_open_spawn(tmp_path: Path) -> tuple[str, str, str]:
    """The export of a session a crash cut off right after its spawn call journaled ``child_spawned``
    (resumed, it goes on with the child that names), its id and its child's."""
    script = {"replies": [{"tool_calls": [{"name": "spawn", "arguments": {"task": "t"}}]}, {"text": "ok"}],
              "children": {"*": [{"text": "child done"}]}}
    home, model = setup_home(tmp_path / "recorded", script, {})
    crashed = zagent(home, "run", "go", "--model", model, crash_at="after_child_spawned")
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    parent_id = top_session(home)
    with SQLiteJournal(home / "journal.db") as journal:
        (spawned,) = [e.event for e in journal.read(parent_id) if isinstance(e.event, ChildSpawned)]
    return zagent(home, "sessions", "export", parent_id).stdout, parent_id, spawned.child_session_id


def test_an_import_whose_spawn_names_a_session_of_the_journal_outside_its_tree_is_refused(tmp_path: Path) -> None:
    exported, parent_id, child_id = recorded_open_spawn(tmp_path)
    home = tmp_path / "home"
    (home / "tools").mkdir(parents=True)
    with SQLiteJournal(home / "journal.db") as journal:
        victim = Engine(Home(home), journal, workspace=tmp_path).start_session("run")
        victim.release()  # open, driven by nobody: what a crafted spawn call would go on with
        before = journal.head(victim.session_id)
    crafted = tmp_path / "crafted.jsonl"
    crafted.write_text(exported.replace(child_id, victim.session_id))
    refused = zagent(home, "sessions", "import", str(crafted))
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert (f"event 7 (child_spawned): its sub-agent child-1 is session {victim.session_id}, which in this journal "
            "is no sub-agent; an import may only refer to sessions inside it, or to the sessions of its own tree"
            ) in refused.stderr
    # The export as recorded imports: its child is not in this journal, and starts when it is resumed.
    original = tmp_path / "original.jsonl"
    original.write_text(exported)
    assert zagent(home, "sessions", "import", str(original)).stdout.strip() == parent_id
    # Under another id, the parent of that child (the journal has it now) is no longer its parent.
    assert zagent(home, "resume", parent_id).returncode == 0
    renamed = zagent(home, "sessions", "import", str(original), "--as", "renamed")
    assert renamed.returncode == 2
    assert f"its sub-agent child-1 is session {child_id}, which in this journal is child-1 of session {parent_id}" \
        in renamed.stderr
    with SQLiteJournal(home / "journal.db") as journal:
        assert journal.head(victim.session_id) == before
        assert journal.head("renamed") == 0
        child = next(iter(journal.read(child_id))).event
        assert isinstance(child, SessionStarted) and child.parent is not None and child.parent.session_id == parent_id


def test_a_child_whose_parent_in_the_journal_has_another_child_of_that_name_is_refused(tmp_path: Path) -> None:
    exported, parent_id, child_id = recorded_open_spawn(tmp_path)
    home = tmp_path / "recorded" / "home"
    assert zagent(home, "resume", parent_id).returncode == 0  # its child runs, and ends its spawn call
    child_export = zagent(home, "sessions", "export", child_id).stdout
    other = tmp_path / "other"
    (other / "tools").mkdir(parents=True)
    with SQLiteJournal(other / "journal.db") as journal:
        import_session(journal, parse_export(exported.splitlines()), home=Home(other))
        with pytest.raises(ExportError, match=(
                f"event 1 \\(session_started\\): it is child-1 of session {parent_id}, whose child-1 in this journal "
                f"is session {child_id}")):
            import_session(journal, parse_export(child_export.splitlines()), home=Home(other), as_id="impostor")
        assert import_session(journal, parse_export(child_export.splitlines()), home=Home(other)) == child_id


def test_a_journal_whose_spawn_names_a_session_outside_its_tree_never_drives_that_session(tmp_path: Path) -> None:
    """However a link to another session came in (an edited journal, an older zagent's import), the
    spawn call that would go on with it is answered, and the session it names left alone."""
    exported, parent_id, child_id = recorded_open_spawn(tmp_path)
    home = tmp_path / "home"
    (home / "tools").mkdir(parents=True)
    (home / "config.json").write_text((tmp_path / "recorded" / "home" / "config.json").read_text())
    with SQLiteJournal(home / "journal.db") as journal:
        victim = Engine(Home(home), journal, workspace=tmp_path).start_session("run")
        victim.release()
        before = journal.head(victim.session_id)
        imported = parse_export(exported.replace(child_id, victim.session_id).splitlines())
        journal.append(parent_id, relocate(imported, Home(home), parent_id), 0, at=imported.times)  # no check_links
    resumed = zagent(home, "resume", parent_id)
    assert resumed.returncode == 0, resumed.stderr
    with SQLiteJournal(home / "journal.db") as journal:
        assert journal.head(victim.session_id) == before
        (ended,) = [e.event for e in journal.read(parent_id) if isinstance(e.event, ChildEnded)]
    assert ended.status == "error" and ended.text == (
        f"the sub-agent's session could not be driven: session {victim.session_id} is no sub-agent, not child-1 of "
        "this session: it is left alone")
