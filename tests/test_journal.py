"""The SQLite journal: append-only, gap-free versions, optimistic concurrency, crash safety."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from zagent_core.journal.events import SessionEnded, SessionStarted, ToolCallRequested, dump_event
from zagent_core.journal.protocol import ConcurrencyError, Journal, JournalError
from zagent_store import SQLiteJournal
from zagent_store.sql import JournalVersionError
from zagent_store.sqlite import MIGRATIONS


def started() -> SessionStarted:
    return SessionStarted(origin="test", workspace="/w", zagent_version="0")


def request(n: int) -> ToolCallRequested:
    return ToolCallRequested(call_id=f"c{n}", tool="t", arguments={"n": n})


def test_it_implements_the_journal_protocol(journal: SQLiteJournal) -> None:
    assert isinstance(journal, Journal)


def test_appends_get_consecutive_versions_and_global_seqs(journal: SQLiteJournal) -> None:
    journal.append("a", [started()], 0)
    journal.append("b", [started()], 0)
    stored = journal.append("a", [request(1), request(2)], 1)
    assert [(e.seq, e.version) for e in stored] == [(3, 2), (4, 3)]
    assert [e.version for e in journal.read("a")] == [1, 2, 3]
    assert [e.event for e in journal.read("a", after_version=1)] == [request(1), request(2)]


def test_a_stale_expected_version_is_a_conflict_and_appends_nothing(journal: SQLiteJournal) -> None:
    journal.append("a", [started(), request(1)], 0)
    with pytest.raises(ConcurrencyError, match="session a is at version 2, not at version 1"):
        journal.append("a", [request(2), request(3)], 1)
    with pytest.raises(ConcurrencyError):
        journal.append("a", [request(2)], 7)  # ahead of the journal: would leave a gap
    assert [e.version for e in journal.read("a")] == [1, 2]


def test_two_writers_on_one_file_cannot_both_append_at_the_same_version(home_dir: Path) -> None:
    path = home_dir / "journal.db"
    with SQLiteJournal(path) as first, SQLiteJournal(path) as second:
        first.append("s", [started()], 0)
        second.append("s", [request(1)], 1)
        with pytest.raises(ConcurrencyError) as raised:
            first.append("s", [request(2)], 1)
        assert (raised.value.expected, raised.value.actual) == (1, 2)


def test_the_database_itself_refuses_updates_deletes_and_a_taken_version(journal: SQLiteJournal) -> None:
    journal.append("s", [started()], 0)
    raw = sqlite3.connect(journal.path)
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        raw.execute("UPDATE events SET type = 'x'")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        raw.execute("DELETE FROM events")
    with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
        raw.execute("INSERT INTO events (session_id, version, type, at, data) VALUES ('s', 1, 't', 'now', '{}')")
    raw.close()


def test_a_gap_left_by_a_raw_writer_is_reported_and_not_built_on(journal: SQLiteJournal) -> None:
    journal.append("s", [started()], 0)
    with sqlite3.connect(journal.path) as raw:
        raw.execute("INSERT INTO events (session_id, version, type, at, data)"
                    " VALUES ('s', 5, 'session_ended', '2026-01-01T00:00:00.000Z', '{\"v\":1}')")
    assert journal.check()[0] == "session s has a gap in its versions (events were written around zagent)"
    with pytest.raises(ConcurrencyError, match="at version 5, not at version 5"):
        journal.append("s", [request(6)], 5)  # building on the gap is refused


def test_events_written_around_zagent_without_a_gap_are_taken_up(journal: SQLiteJournal) -> None:
    journal.append("s", [started()], 0)
    with sqlite3.connect(journal.path) as raw:
        raw.execute("INSERT INTO events (session_id, version, type, at, call_id, data) VALUES"
                    " ('s', 2, 'tool_call_requested', '2026-01-01T00:00:00.000Z', 'c1', ?)",
                    ('{"v":1,"call_id":"c1","tool":"t","arguments":{}}',))
    stored = journal.append("s", [SessionEnded()], 2)
    assert [s.version for s in stored] == [3]
    (summary,) = journal.sessions()
    assert (summary.events, summary.calls, summary.ended) == (3, 1, True)
    assert [e.seq for e in journal.read("s")] == [1, 2, 3]


def test_correlation_columns_are_filled_for_audits(journal: SQLiteJournal) -> None:
    journal.append("s", [started(), request(9)], 0)
    rows = journal.db.execute("SELECT type, call_id FROM events ORDER BY seq").fetchall()
    assert rows == [("session_started", None), ("tool_call_requested", "c9")]


def test_sessions_are_summarised_most_recent_first(journal: SQLiteJournal) -> None:
    journal.append("old", [started(), request(1), SessionEnded()], 0)
    journal.append("new", [started()], 0)
    summaries = journal.sessions()
    assert [s.session_id for s in summaries] == ["new", "old"]
    assert (summaries[1].events, summaries[1].calls, summaries[1].ended) == (3, 1, True)
    assert summaries[0].ended is False


def test_health_check_and_wal_mode(journal: SQLiteJournal) -> None:
    assert journal.check() == []
    assert journal.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert journal.stats() == {"events": 0, "sessions": 0, "schema_version": len(MIGRATIONS)}


def _journal_of_schema(path: Path, schema: int) -> None:
    """A journal as an older zagent left it: its migrations only, and two sessions written."""
    import sqlite_utils

    db = sqlite_utils.Database(path)
    for migration in MIGRATIONS[:schema]:
        migration(db)
    db.execute(f"PRAGMA user_version = {schema}")
    rows = [("a", 1, "session_started", started()), ("b", 1, "session_started", started()),
            ("a", 2, "tool_call_requested", request(1)), ("a", 3, "session_ended", SessionEnded())]
    for n, (sid, version, kind, event) in enumerate(rows):
        db.execute("INSERT INTO events (session_id, version, type, at, call_id, data) VALUES (?, ?, ?, ?, ?, ?)",
                   [sid, version, kind, f"2026-01-01T00:00:0{n}.000Z", getattr(event, "call_id", None),
                    dump_event(event)])
    db.conn.commit()
    db.close()


@pytest.mark.parametrize("schema", [1, 2])
def test_an_older_journal_is_migrated_in_place(home_dir: Path, schema: int) -> None:
    path = home_dir / "journal.db"
    _journal_of_schema(path, schema)
    with SQLiteJournal(path) as journal:
        assert journal.stats()["schema_version"] == len(MIGRATIONS)
        assert [e.version for e in journal.read("a")] == [1, 2, 3]
        assert [(s.session_id, s.events, s.calls, s.ended) for s in journal.sessions()] == [
            ("a", 3, 1, True), ("b", 1, 0, False)]
        assert journal.sessions()[0].started_at.second == 0 and journal.sessions()[0].last_at.second == 3
        assert journal.db.execute("SELECT session_id, events, status FROM sessions ORDER BY 1").fetchall() == [
            ("a", 3, "ended"), ("b", 1, "open")]
        assert journal.db.execute("SELECT call_id, status FROM tool_calls").fetchall() == [("c1", "requested")]
        journal.append("b", [request(2)], 1)
        assert journal.check() == []



def test_a_read_only_open_reads_a_schema_8_journal_as_it_is_and_refuses_an_older_one(home_dir: Path) -> None:
    # Schema 9 changed an index's condition and a view's spelling only: a reading command need not wait for a writer.
    path = home_dir / "journal.db"
    _journal_of_schema(path, 8)
    with SQLiteJournal(path, read_only=True) as journal:
        assert journal.stats()["schema_version"] == 8
        assert [e.version for e in journal.read("a")] == [1, 2, 3]
        assert journal.db.execute("SELECT count(*) FROM decisions").fetchone() == (0,)
    with SQLiteJournal(path) as journal:
        assert journal.stats()["schema_version"] == len(MIGRATIONS)
    _journal_of_schema(home_dir / "seven.db", 7)
    with pytest.raises(JournalError, match="schema 7 and this zagent writes"):
        SQLiteJournal(home_dir / "seven.db", read_only=True)

def test_a_journal_from_a_newer_zagent_is_refused(home_dir: Path) -> None:
    path = home_dir / "journal.db"
    SQLiteJournal(path).close()
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA user_version = 99")
    raw.close()
    with pytest.raises(JournalVersionError, match="schema 99.*upgrade zagent"):
        SQLiteJournal(path)


def test_reopening_keeps_everything(home_dir: Path) -> None:
    path = home_dir / "journal.db"
    with SQLiteJournal(path) as journal:
        journal.append("s", [started(), request(1)], 0)
    with SQLiteJournal(path) as journal:
        assert [e.event.type for e in journal.read("s")] == ["session_started", "tool_call_requested"]


WRITER = textwrap.dedent(
    """
    import sys
    from zagent_store import SQLiteJournal
    from zagent_core.journal.events import SessionStarted, ToolCallRequested
    journal = SQLiteJournal(sys.argv[1])
    session, version = sys.argv[2], 0
    journal.append(session, [SessionStarted(origin="crash", workspace="/", zagent_version="0")], 0)
    version = 1
    print("ready", flush=True)
    while True:
        batch = [ToolCallRequested(call_id=f"c{version + i}", tool="t", arguments={"i": i}) for i in range(3)]
        stored = journal.append(session, batch, version)
        version = stored[-1].version
        print(version, flush=True)  # acknowledged: committed
    """
)


@pytest.mark.parametrize("kill_after", [0.01, 0.03, 0.07, 0.11, 0.17, 0.23])
def test_sigkill_loses_no_acknowledged_event_and_leaves_the_journal_readable(home_dir: Path,
                                                                            kill_after: float) -> None:
    path = home_dir / "journal.db"
    acknowledged = 0
    for round_ in range(3):
        session = f"s{round_}"
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), session], stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(kill_after)
        os.kill(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        acknowledged = max([1, *(int(line) for line in out.split())])
        with SQLiteJournal(path) as journal:
            assert journal.check() == []
            versions = [e.version for e in journal.read(session)]
        # Every acknowledged append is there, whole batches only, with no gaps.
        assert versions == list(range(1, len(versions) + 1))
        assert len(versions) >= acknowledged
        assert (len(versions) - 1) % 3 == 0


def test_the_audit_index_range_holds_exactly_the_call_and_task_types() -> None:
    # events_calls is a partial index on a range of type names: a new event type whose
    # name falls in it would be indexed (and cost every append) without anyone asking.
    from zagent_core.journal.events import EVENT_TYPES

    in_range = sorted(name for name in EVENT_TYPES if "task_exited" <= name <= "tool_call_started")
    assert in_range == sorted(name for name in EVENT_TYPES if name.startswith(("task_", "tool_call_")))


def test_a_journal_filled_around_zagent_is_reported_until_its_heads_are_rebuilt(journal: SQLiteJournal) -> None:
    with sqlite3.connect(journal.path) as raw:
        raw.executemany("INSERT INTO events (session_id, version, type, at, call_id, data) VALUES (?, ?, ?, ?, ?, ?)",
                        [("bulk", n, "tool_call_requested", f"2026-01-01T00:00:0{n}.000Z", f"c{n}", dump_event(request(n)))
                         for n in range(1, 4)])
    assert journal.sessions() == []
    assert "session bulk: its row in heads is behind its events" in journal.check()[0]
    assert journal.rebuild_heads() == 1
    (summary,) = journal.sessions()
    assert (summary.session_id, summary.events, summary.calls, summary.last_at.second) == ("bulk", 3, 3, 3)
    assert journal.check() == []


CONTENDER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from zagent_store import SQLiteJournal
    from zagent_core.journal.events import SessionStarted, ToolCallRequested
    journal = SQLiteJournal(sys.argv[1], synchronous="NORMAL", busy_timeout_ms=50)
    go = Path(sys.argv[3])
    print("ready", flush=True)
    while not go.exists():
        pass
    journal.append(sys.argv[2], [SessionStarted(origin="t", workspace="/", zagent_version="0")], 0)
    for version in range(1, 200):
        journal.append(sys.argv[2], [ToolCallRequested(call_id=f"c{version}", tool="t", arguments={})], version)
    print("done", flush=True)
    """
)


def test_writer_processes_take_turns_instead_of_failing_on_a_busy_journal(home_dir: Path) -> None:
    # A busy timeout of 50 ms: SQLite's busy handler alone lets contending writers fail
    # with "database is locked"; the writer lock makes them wait their turn instead.
    path = home_dir / "journal.db"
    SQLiteJournal(path).close()
    go = home_dir / "go"
    procs = [subprocess.Popen([sys.executable, "-c", CONTENDER, str(path), f"w{n}", str(go)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in range(6)]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    go.touch()
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0 and out.strip() == "done", err
    with SQLiteJournal(path) as journal:
        assert sorted((s.session_id, s.events) for s in journal.sessions()) == [(f"w{n}", 200) for n in range(6)]
        assert journal.check() == []


@pytest.mark.parametrize("top_level", [False, True])
@pytest.mark.parametrize("after", [None, "a-session"])
def test_a_page_of_sessions_reads_the_heads_down_their_activity_index(tmp_path: Path, top_level: bool,
                                                                     after: str | None) -> None:
    # A scan and sort of every head row took 4 s for the first page of a million sessions
    # (bench/sessions_list.py); down heads_last_seq, a page reads only its rows.
    with SQLiteJournal(tmp_path / "journal.db") as journal:
        journal.append("a-session", [started()], 0)
        statements: list[str] = []
        journal._conn.set_trace_callback(statements.append)
        journal.sessions(50, top_level=top_level, after=after)
        journal._conn.set_trace_callback(None)
        (listing,) = [sql for sql in statements if "ORDER BY last_seq" in sql]
        plan = [row[3] for row in journal._conn.execute("EXPLAIN QUERY PLAN " + listing)]
    assert any(step.startswith("SEARCH h USING INDEX heads_last_seq") or step == "SCAN h USING INDEX heads_last_seq"
               for step in plan), plan
