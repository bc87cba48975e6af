"""Retention (issue 22): ``zagent sessions prune`` and ``zagent journal vacuum``, on SQLite and PostgreSQL.

Sessions are written as their events (times in the past, so the cut-off decides), or by the
engine where their folders and export paths matter; the commands run through the CLI and
the Python API, against the real stores.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from conftest import python_tool, sql

from zagent_cli.main import cli
from zagent_core import Engine, Home
from zagent_core.history.retention import prune_sessions, vacuum_journal
from zagent_core.journal.events import (
    Event,
    InputRequested,
    ParentLink,
    SessionEnded,
    SessionStarted,
    ToolCallFinished,
    ToolCallRequested,
    UserMessage,
)
from zagent_core.journal.protocol import AdminJournal, ConcurrencyError, JournalBusyError, JournalError
from zagent_core.session.leases import this_process
from zagent_store import SQLiteJournal

pytestmark = pytest.mark.stores

THEN = datetime(2026, 1, 10, 12, 0, tzinfo=timezone.utc)
CUTOFF = datetime(2026, 2, 1, tzinfo=timezone.utc)


def write(journal: AdminJournal, session_id: str, *events: Event, parent: str | None = None, ended: bool = True,
          at: datetime = THEN) -> None:
    """A session of ``events`` at ``at``: started (a sub-agent of ``parent``), a message, and ended."""
    link = ParentLink(session_id=parent, call_id="spawn-1", label=f"child-{session_id}", depth=1) if parent else None
    stream: list[Event] = [SessionStarted(origin="test", workspace="/w", zagent_version="0", parent=link),
                           UserMessage(text=f"the task of {session_id}"), *events]
    if ended:
        stream.append(SessionEnded())
    journal.append(session_id, stream, 0, at=[at] * len(stream))


def waiting_on_user() -> list[Event]:
    return [ToolCallRequested(call_id="ask-1", tool="ask_user", arguments={"question": "?"}),
            InputRequested(call_id="ask-1", question="which one?")]


def zagent(home: Path, url: str, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--home", str(home), "--journal", url, *args], catch_exceptions=False)


def ids(journal: AdminJournal) -> set[str]:
    return {summary.session_id for summary in journal.sessions()}


def test_ended_sessions_go_with_their_sub_agents_and_the_rest_stay_saying_why(
        journal: AdminJournal, journal_url: str, home_dir: Path) -> None:
    write(journal, "old")
    write(journal, "old-child", parent="old", ended=False)  # idle: it goes with its parent
    write(journal, "recent", at=CUTOFF + timedelta(days=1))
    write(journal, "idle", ended=False)
    write(journal, "waits", ended=False)
    write(journal, "waits-child", *waiting_on_user(), parent="waits")
    write(journal, "parent-waiting")
    write(journal, "asks", *waiting_on_user(), parent="parent-waiting", ended=False)
    write(journal, "orphan", parent="gone")  # a child imported without its parent: top-level
    before = journal.stats()["events"]

    shown = zagent(home_dir, journal_url, "sessions", "prune", "--ended-before", "2026-02-01")
    assert shown.exit_code == 0, shown.output
    assert ids(journal) == {"recent", "idle", "waits", "waits-child", "parent-waiting", "asks"}
    lines = shown.output.splitlines()
    assert "pruned old: 3 events, last at 2026-01-10T12:00:00.000Z" in lines
    assert "pruned old-child (sub-agent of old): 2 events, last at 2026-01-10T12:00:00.000Z" in lines
    assert "pruned orphan (sub-agent of gone): 3 events, last at 2026-01-10T12:00:00.000Z" in lines
    # What sessions list says of them: a message no turn took up yet, for a worker (or resume) to answer.
    assert "skipped idle: not ended (queued)" in lines and "skipped waits: not ended (queued)" in lines
    assert "skipped parent-waiting: its sub-agent asks is waiting on a user (zagent answer)" in lines
    assert lines[-1] == "pruned 3 sessions (8 events) that ended before 2026-02-01T00:00:00.000Z"
    assert journal.stats()["events"] == before - 8
    assert [e.version for e in journal.read("old")] == [] and journal.load_snapshot("old", "any") is None


def test_a_dry_run_lists_what_would_go_and_deletes_nothing(
        journal: AdminJournal, journal_url: str, home_dir: Path) -> None:
    write(journal, "old")
    write(journal, "old-child", parent="old", ended=False)
    shown = zagent(home_dir, journal_url, "sessions", "prune", "--ended-before", "2026-02-01T00:00Z", "--dry-run",
                   "--json")
    assert shown.exit_code == 0, shown.output
    report = json.loads(shown.output)
    assert (report["dry_run"], report["sessions"], report["events"]) == (True, 2, 5)
    assert [(s["session_id"], s["parent_session_id"], s["export"]) for s in report["pruned"]] == [
        ("old", None, None), ("old-child", "old", None)]
    assert report["ended_before"] == "2026-02-01T00:00:00.000Z" and report["skipped"] == []
    assert ids(journal) == {"old", "old-child"}
    text = zagent(home_dir, journal_url, "sessions", "prune", "--ended-before", "2026-02-01", "--dry-run")
    assert text.output.splitlines()[-1] == ("would prune 2 sessions (5 events) that ended before "
                                            "2026-02-01T00:00:00.000Z; nothing was deleted (--dry-run)")


def test_a_session_driven_by_a_live_process_stays_and_a_dead_drivers_lease_goes_with_its_session(
        journal: AdminJournal, home_dir: Path) -> None:
    write(journal, "driven")
    write(journal, "child-driven", parent="driven", ended=False)
    write(journal, "let-go")
    me = this_process("zagent run")
    journal.acquire_lease("child-driven", me)
    journal.acquire_lease("let-go", {**me, "boot_id": "an-earlier-boot"})  # its holder is gone

    report = prune_sessions(journal, CUTOFF, home=Home(home_dir))
    assert [(s.session_id, s.reason) for s in report.skipped] == [
        ("driven", f"its sub-agent child-driven is driven by pid {me['pid']} on {me['host']} (zagent run)")]
    assert [s.session_id for s in report.pruned] == ["let-go"] and not report.failed
    assert ids(journal) == {"driven", "child-driven"}
    assert journal.lease("let-go") is None and journal.lease("child-driven") is not None


def test_exports_are_written_and_checked_first_and_import_back_to_the_same_events(
        engine: Engine, journal: AdminJournal, journal_url: str, home_dir: Path, tmp_path: Path) -> None:
    python_tool(home_dir, "make", "import os\nopen(os.environ['ZAGENT_OUTPUT_DIR'] + '/out.txt', 'w').write('made')\n"
                "print('made a file')")
    with engine.start_session("test") as session:
        assert session.call("make", {}).output.startswith("made a file")
    session_id = session.session_id
    folder = Home(home_dir).session_dir(session_id)
    assert (folder / "calls").is_dir()
    recorded = [(e.version, e.at, e.event) for e in journal.read(session_id)]

    exports = tmp_path / "kept" / "exports"
    shown = zagent(home_dir, journal_url, "sessions", "prune", "--ended-before", "0s", "--keep-exports", str(exports))
    assert shown.exit_code == 0, shown.output
    exported = exports / f"{session_id}.jsonl"
    assert f"pruned {session_id}: {len(recorded)} events, " in shown.output
    assert f", exported to {exported}" in shown.output
    assert journal.head(session_id) == 0 and not folder.exists()
    assert exported.read_text(encoding="utf-8").count("\n") == len(recorded)

    back = zagent(home_dir, journal_url, "sessions", "import", str(exported))
    assert back.exit_code == 0 and back.output.strip() == session_id, back.output
    assert [(e.version, e.at, e.event) for e in journal.read(session_id)] == recorded


def test_a_failed_export_deletes_nothing_of_its_tree_and_fails_the_command(
        journal: AdminJournal, journal_url: str, home_dir: Path, tmp_path: Path) -> None:
    write(journal, "fine")
    write(journal, "tree")
    # A sub-agent whose journal no import would take: a result for a call it never requested.
    write(journal, "tree-child", ToolCallFinished(call_id="nope", output="?", is_error=False, exit_code=0,
                                                  duration_ms=1), parent="tree", ended=False)

    shown = zagent(home_dir, journal_url, "sessions", "prune", "--ended-before", "2026-02-01",
                   "--keep-exports", str(tmp_path / "exports"), "--json")
    assert shown.exit_code == 1, shown.output
    report = json.loads(shown.output)
    assert [s["session_id"] for s in report["pruned"]] == ["fine"]
    (skipped,) = report["skipped"]
    assert skipped["session_id"] == "tree" and skipped["failed"]
    child_file = tmp_path / "exports" / "tree-child.jsonl"
    assert skipped["reason"].startswith(f"its sub-agent tree-child's export to {child_file} failed: ")
    assert "refers to 'nope', which the session never had" in skipped["reason"]
    assert skipped["reason"].endswith("; nothing of the tree was deleted")
    assert ids(journal) == {"tree", "tree-child"} and journal.head("tree") == 3 and journal.head("tree-child") == 3


def test_a_session_written_to_after_it_was_checked_is_not_deleted_and_the_guard_is_back(
        journal: AdminJournal, journal_url: str) -> None:
    write(journal, "a")
    write(journal, "b")
    with pytest.raises(ConcurrencyError):
        journal.delete_sessions({"a": 3, "b": 2})  # b is at 3: nothing of either goes
    assert ids(journal) == {"a", "b"} and journal.head("a") == 3
    assert journal.delete_sessions({"a": 3}) == 3
    for query in ("DELETE FROM events", "UPDATE events SET type = 'x'"):
        with pytest.raises(Exception, match="append-only"):
            sql(journal_url, query)
    assert [e.version for e in journal.read("b")] == [1, 2, 3]


def test_a_tree_written_to_after_its_check_stays_whole_and_the_others_of_its_batch_go(
        journal: AdminJournal, journal_url: str) -> None:
    write(journal, "fine")
    write(journal, "moved")
    # An event written around zagent after the end: the session's head row (what the check saw) is behind.
    sql(journal_url, "INSERT INTO events (seq, session_id, version, type, at, data) VALUES (?, ?, ?, ?, ?, ?)"
        " RETURNING seq",
        (10_000, "moved", 4, "user_message", "2026-01-10T12:00:01.000Z", '{"v": 1, "text": "late"}'))
    report = prune_sessions(journal, CUTOFF)
    assert [s.session_id for s in report.pruned] == ["fine"]
    assert [(s.session_id, s.reason) for s in report.skipped] == [
        ("moved", "session moved was written to while it was being pruned (version 4, not 3); nothing of the tree "
                  "was deleted")]
    assert journal.head("moved") == 4 and journal.head("fine") == 0


def test_a_date_that_is_not_one_is_a_usage_error_saying_what_is_wrong(journal_url: str, home_dir: Path) -> None:
    for given, says in [("yesterday", "use a date or time (2026-11-30, 2026-11-30T05:00) or a span: 30m, 2h, 7d"),
                        ("2026-13-01", "2026-13-01: month must be in 1..12; use a date or time")]:
        shown = zagent(home_dir, journal_url, "sessions", "prune", "--ended-before", given)
        assert shown.exit_code == 2 and f"Invalid value for --ended-before: {says}" in shown.output, shown.output


def test_vacuum_gives_the_space_of_pruned_sessions_back(journal: AdminJournal, journal_url: str, home_dir: Path,
                                                        store: str) -> None:
    bulky = "x" * 2000
    for number in range(20):
        write(journal, f"s{number}", *[UserMessage(text=bulky) for _ in range(100)])
    assert prune_sessions(journal, CUTOFF).events == 20 * 103
    shown = zagent(home_dir, journal_url, "journal", "vacuum")
    assert shown.exit_code == 0, shown.output
    assert shown.output.startswith("vacuumed ") and " before, " in shown.output
    if store == "sqlite":
        path = Path(journal_url.removeprefix("sqlite:///"))
        assert "note" not in shown.output
        done = vacuum_journal(journal)
        assert done.after == path.stat().st_size < 200_000
    else:
        assert "note: PostgreSQL keeps the space freed" in shown.output


def test_vacuum_of_a_sqlite_journal_a_live_process_drives_is_refused(tmp_path: Path, home_dir: Path) -> None:
    path = tmp_path / "journal.db"
    with SQLiteJournal(path) as journal:
        write(journal, "driven", ended=False)
        journal.acquire_lease("driven", this_process("zagent run"))
        with pytest.raises(JournalBusyError) as busy:
            vacuum_journal(journal)
        assert busy.value.sessions == ["driven"]
        shown = zagent(home_dir, f"sqlite:///{path}", "journal", "vacuum")
        assert shown.exit_code == 1
        assert "live processes drive 1 of its sessions (driven)" in shown.output
        journal.release_lease("driven", this_process("zagent run"))
        assert vacuum_journal(journal).after > 0


def test_vacuum_of_a_sqlite_journal_a_raw_writer_holds_fails_saying_so(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    with SQLiteJournal(path, busy_timeout_ms=50) as journal:
        write(journal, "old")
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(JournalError, match=r"could not vacuum the journal .*: database is locked \(another "
                                                   r"process held it longer than the busy timeout\); try again"):
                vacuum_journal(journal)
        finally:
            blocker.execute("COMMIT")
            blocker.close()
        assert vacuum_journal(journal).after > 0
