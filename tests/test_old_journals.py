"""Old journals stay readable (issue 22): a journal each released schema wrote, opened by today's zagent.

Each folder of ``tests/fixtures/journals/`` holds a journal that ``make_journal.py`` made with
the zagent of its time (its README says which), and ``expect.json``: the sessions and what
they hold. Every test here runs once per folder, on a copy of it, through the real ``zagent``
in real processes: a later ``schemaN`` folder joins by being there.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import forked
from conftest import PYTHON, sql

from zagent_core.journal.events import EVENT_TYPES
from zagent_core.version import zagent_version
from zagent_store import SQLiteJournal

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "journals"
#: This process's environment, without the settings (ZAGENT_HOME, ZAGENT_JOURNAL...) a person's shell may have,
#: and with this checkout first on the path: the commands run in the fixture's folder, where a relative
#: PYTHONPATH would find no zagent (and the installed one would answer).
ENV = {key: value for key, value in os.environ.items() if not key.startswith("ZAGENT_")} | {
    "NO_COLOR": "1", "PYTHONPATH": os.pathsep.join(filter(None, [str(FIXTURES.parents[2]), os.environ.get("PYTHONPATH")]))}
FOLDERS = sorted(folder for folder in FIXTURES.iterdir() if (folder / "expect.json").is_file())


@dataclass(frozen=True)
class Old:
    """A copy of a fixture folder, and what its ``expect.json`` says it holds."""

    root: Path
    expect: dict[str, Any]

    @property
    def main(self) -> str:
        return str(self.expect["sessions"]["main"])

    @property
    def child(self) -> str:
        return str(self.expect["sessions"]["child"])

    @property
    def tools_run(self) -> str:
        return str(self.expect["sessions"]["tools_run"])

    @property
    def journal(self) -> Path:
        return self.root / "home" / "journal.db"

    def zagent(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        """The real CLI in the fixture's folder, with its home and workspace; ``ok``: it must exit 0."""
        result = forked.run([PYTHON, "-m", "zagent_cli", "--home", "home", "--workspace", "workspace", *args],
                            cwd=self.root, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                            env=ENV, timeout=120)
        if ok:
            assert result.returncode == 0, f"zagent {' '.join(args)}: {result.stdout}{result.stderr}"
            assert "Traceback" not in result.stderr, result.stderr
        return result


@pytest.fixture(params=FOLDERS, ids=[folder.name for folder in FOLDERS])
def old(request: pytest.FixtureRequest, tmp_path: Path) -> Old:
    root = tmp_path / "old"
    shutil.copytree(request.param, root)
    return Old(root, json.loads((root / "expect.json").read_text()))


def test_there_is_a_fixture_journal_and_each_is_one_file_with_its_readme() -> None:
    assert FOLDERS, f"no fixture journals in {FIXTURES}"
    for folder in FOLDERS:
        assert (folder / "README.md").is_file() and (folder / "home" / "journal.db").is_file()
        assert not list((folder / "home").glob("journal.db-*")), "checkpoint the journal: no -wal or -shm files"


def test_sessions_list_and_show_read_every_session_of_an_old_journal(old: Old) -> None:
    listed = json.loads(old.zagent("sessions", "list", "--all", "--json").stdout)["sessions"]
    status = {row["session_id"]: row["status"] for row in listed}
    assert status == {old.main: "idle", old.child: "idle", old.tools_run: "ended"}
    (child,) = [row for row in listed if row["session_id"] == old.child]
    assert (child["parent_session_id"], child["label"], child["depth"]) == (old.main, "child-1", 1)
    assert old.main in old.zagent("sessions", "list").stdout

    shown = old.zagent("sessions", "show", old.main).stdout
    for tool in old.expect["tools"]:
        assert f"-> {tool} (" in shown, tool
    for text in [*old.expect["notes"], old.expect["question"], old.expect["later_message"],
                 "<- lookup: error", "no planet called Vulcan", "[exit code 3]", "<- greet: rejected",
                 'unknown argument "nme"', "task #1 (brew) exited: ok", "the tea is ready",
                 f"the user answered (zagent answer): {old.expect['answer']}", "the call was approved (zagent approve)",
                 f"child-1 started as session {old.child}"]:
        assert text in shown, text
    assert "list_files" in old.zagent("sessions", "show", old.child).stdout
    assert "hello, Grace" in old.zagent("sessions", "show", old.tools_run).stdout

    tree = old.zagent("sessions", "show", "--tree", old.main).stdout
    assert old.main in tree and f"child-1  {old.child}  completed" in tree and old.expect["child_task"] in tree
    state = json.loads(old.zagent("sessions", "show", "--json", "--events", old.main).stdout)
    assert state["events"][0]["type"] == "session_started" and len(state["events"]) == state["version"]
    assert old.expect["question"] in old.zagent("sessions", "show", "--format", "md", old.main).stdout


def test_audit_and_every_view_show_the_calls_tasks_notes_and_decisions_of_an_old_journal(old: Old) -> None:
    every = old.zagent("audit", "--limit", "0").stdout
    for tool in [*old.expect["tools"], "ask_user", "spawn", "list_files"]:
        assert f"  {tool} " in every, tool
    errors = old.zagent("audit", "--errors").stdout
    assert "lookup" in errors and "rejected" in errors and "deploy" not in errors
    asked = old.zagent("audit", "--asked").stdout
    assert f"'{old.expect['answer']}' (zagent answer)" in asked and "approved (zagent approve)" in asked
    assert "list_files" in old.zagent("audit", "--session", old.main, "--descendants").stdout
    assert "list_files" not in old.zagent("audit", "--session", old.main).stdout
    assert "brew" in old.zagent("audit", "--slowest", "1").stdout.split()
    calls = json.loads(old.zagent("audit", "--tool", "deploy", "--json").stdout)["calls"]
    assert [(c["tool"], c["arguments"], c["asked"]["decision"]) for c in calls] == [
        ("deploy", {"env": "prod"}, "approved")]

    # The SQL views, as any SQLite client reads them once today's zagent has opened the journal.
    with SQLiteJournal(old.journal):
        pass
    url = f"sqlite:///{old.journal}"
    assert {row["tool"] for row in sql(url, "SELECT tool FROM tool_calls")} >= set(old.expect["tools"])
    assert [(t["tool"], t["status"], t["output_head"]) for t in sql(url, "SELECT * FROM tasks")] == [
        ("brew", "exited", "the tea is ready")]
    assert [n["text"] for n in sql(url, "SELECT text FROM notes ORDER BY seq")] == old.expect["notes"]
    assert {s["session_id"]: s["parent_session_id"] for s in sql(url, "SELECT * FROM sessions")} == {
        old.main: None, old.child: old.main, old.tools_run: None}
    assert sql(url, "SELECT * FROM artifacts") == []
    assert sorted((d["kind"], d["decision"]) for d in sql(url, "SELECT * FROM decisions")) == [
        ("approval", "approved"), ("question", "answered")]


def test_an_old_journals_sessions_export_and_import_into_a_fresh_journal(old: Old) -> None:
    fresh = "sqlite:///fresh.db"
    for sid in (old.main, old.child):
        exported = old.zagent("sessions", "export", sid, "-o", f"{sid}.jsonl")
        lines = (old.root / f"{sid}.jsonl").read_text().splitlines()
        assert f"{len(lines)} events written to {sid}.jsonl" in exported.stderr
        assert old.zagent("--journal", fresh, "sessions", "import", f"{sid}.jsonl").stdout.strip() == sid
    tree = old.zagent("--journal", fresh, "sessions", "show", "--tree", old.main).stdout
    assert f"child-1  {old.child}  completed" in tree
    assert old.expect["notes"][0] in old.zagent("--journal", fresh, "sessions", "show", old.main).stdout
    assert "2 of 2 sessions match" in old.zagent("--journal", fresh, "replay", "--all").stdout

    # The export files the old zagent wrote import too.
    older = "sqlite:///older.db"
    for name in ("tools_run", "child", "main"):
        old.zagent("--journal", older, "sessions", "import", f"exports/{name}.jsonl")
    assert "hello, Grace" in old.zagent("--journal", older, "sessions", "show", old.tools_run).stdout
    assert "matches, " in old.zagent("replay", "--file", "exports/main.jsonl").stdout


def test_an_old_session_replays_with_its_recorded_results(old: Old) -> None:
    replayed = old.zagent("replay", old.main).stdout
    assert f"replay of {old.main} (tools recorded): matches" in replayed
    assert f"child-1: replay of {old.child} (tools recorded): matches" in replayed
    assert "tree of 2 sessions: matches" in replayed


def test_an_old_session_resumes_with_a_new_message_and_the_journal_stays_healthy(old: Old) -> None:
    doctor = old.zagent("doctor").stdout
    assert "journal: " in doctor and ": ok (" in doctor and "3 sessions" in doctor and "all good" in doctor

    resumed = old.zagent("resume", old.main, "a new message", "--model", old.expect["model"]).stdout
    assert "user: a new message" in resumed and f"assistant: {old.expect['resume_reply']}" in resumed
    shown = old.zagent("sessions", "show", old.main).stdout
    assert shown.index(old.expect["later_message"]) < shown.index("a new message") < shown.index(
        old.expect["resume_reply"])
    if "summary" in old.expect:  # compacted (schema2 and later): the resume went on from the summary
        assert "context compacted (manual)" in shown and old.expect["summary"] in shown
    assert "all good" in old.zagent("doctor").stdout


def test_an_old_journal_copies_into_postgresql_and_reads_there(old: Old, postgres_url: str) -> None:
    copied = old.zagent("journal", "copy", "home/journal.db", postgres_url).stdout
    assert "copied 3 sessions" in copied
    shown = old.zagent("--journal", postgres_url, "sessions", "show", old.main).stdout
    assert old.expect["notes"][1] in shown and "approved (zagent approve)" in shown
    assert f"child-1  {old.child}  completed" in old.zagent("--journal", postgres_url, "sessions", "show", "--tree",
                                                           old.main).stdout
    refusal = _from_the_future(postgres_url, old.main)
    assert refused(old.zagent("--journal", postgres_url, "sessions", "show", old.main, ok=False)) == f"Error: {refusal}"
    assert refusal in old.zagent("--journal", postgres_url, "doctor", ok=False).stdout


def _append_raw(url: str, session_id: str, type_: str, body: dict[str, Any]) -> str:
    """An event as a newer zagent would append it, written around this zagent: the session's next row.
    Returns where an error names it (``event #SEQ (version N of session ID)``)."""
    (last,) = sql(url, "SELECT max(seq) AS seq FROM events")
    (head,) = sql(url, "SELECT max(version) AS version FROM events WHERE session_id = ?", (session_id,))
    row = (last["seq"] + 1, session_id, head["version"] + 1, type_, "2030-01-01T00:00:00.000Z", json.dumps(body))
    insert = "INSERT INTO events (seq, session_id, version, type, at, data) VALUES (?, ?, ?, ?, ?, ?)"
    if url.startswith("sqlite:///"):
        db = sqlite3.connect(url.removeprefix("sqlite:///"))
        with db:
            db.execute(insert, row)
        db.close()
    else:
        sql(url, insert.replace("?)", "?::jsonb) RETURNING seq"), row)
    return f"event #{row[0]} (version {row[2]} of session {session_id})"


def _from_the_future(url: str, session_id: str) -> str:
    """A resume by zagent 99.0, then a user message of a schema version this zagent does not know;
    the one line of the refusal of that message."""
    _append_raw(url, session_id, "session_resumed", {"v": 1, "zagent_version": "99.0"})
    newer = EVENT_TYPES["user_message"].SCHEMA_VERSION + 1
    where = _append_raw(url, session_id, "user_message", {"v": newer, "text": "hello", "mood": "new"})
    return (f'{where}: event "user_message" has schema version {newer}, this zagent reads up to {newer - 1}: '
            f"it was written by a zagent newer than {zagent_version()} (the session was last started or resumed by "
            "zagent 99.0); upgrade zagent to read this journal")


def refused(result: subprocess.CompletedProcess[str]) -> str:
    """The one line a refused command printed: an error, no traceback, exit 1."""
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    (line,) = result.stderr.splitlines()
    return line


def test_an_event_a_newer_zagent_wrote_is_refused_in_one_line_that_names_that_zagent(old: Old) -> None:
    refusal = _from_the_future(f"sqlite:///{old.journal}", old.main)
    assert refused(old.zagent("sessions", "show", old.main, ok=False)) == f"Error: {refusal}"
    assert refused(old.zagent("resume", old.main, "hi", "--model", old.expect["model"], ok=False)) == f"Error: {refusal}"
    doctor = old.zagent("doctor", ok=False)
    assert doctor.returncode == 1 and refusal in doctor.stdout
    assert "journal recover" not in doctor.stdout  # it is not damaged: recovering would leave the newer events out
    assert "hello, Grace" in old.zagent("sessions", "show", old.tools_run).stdout  # the other sessions still read


def test_an_unknown_event_type_is_refused_as_a_newer_zagents(old: Old) -> None:
    where = _append_raw(f"sqlite:///{old.journal}", old.tools_run, "mood_changed", {"v": 1, "mood": "new"})
    line = refused(old.zagent("sessions", "show", old.tools_run, ok=False))
    assert line.startswith(f'Error: {where}: unknown event type "mood_changed": it was written by a zagent newer '
                           f"than {zagent_version()}")
    assert line.endswith("; upgrade zagent to read this journal")


def test_an_export_with_an_event_a_newer_zagent_wrote_is_refused_naming_that_zagent(old: Old) -> None:
    lines = (old.root / "exports" / "main.jsonl").read_text().splitlines()
    newer = EVENT_TYPES["user_message"].SCHEMA_VERSION + 1
    future = [{"session_id": old.main, "version": len(lines) + 1, "at": "2030-01-01T00:00:00.000Z",
               "type": "session_resumed", "data": {"v": 1, "zagent_version": "99.0"}},
              {"session_id": old.main, "version": len(lines) + 2, "at": "2030-01-01T00:00:00.000Z",
               "type": "user_message", "data": {"v": newer, "text": "hello"}}]
    (old.root / "future.jsonl").write_text("\n".join([*lines, *map(json.dumps, future)]) + "\n")
    imported = old.zagent("--journal", "sqlite:///fresh.db", "sessions", "import", "future.jsonl", ok=False)
    assert imported.returncode == 2 and "Traceback" not in imported.stderr  # a bad file: a usage error, as ever
    assert imported.stderr.splitlines()[-1] == (f'Error: future.jsonl, line {len(lines) + 2}: event "user_message" has schema version {newer}, '
                    f"this zagent reads up to {newer - 1}: it was written by a zagent newer than {zagent_version()} "
                    "(the session was last started or resumed by zagent 99.0); upgrade zagent to read this journal")
