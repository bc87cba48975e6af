"""Damaged journals: every command says what is wrong, doctor finds it, recover copies what reads.

The files are damaged for real (bytes overwritten, a body replaced behind the triggers'
back) and the real ``zagent`` command runs on them in a subprocess.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import python_tool, wait_for

from zagent_core.journal.events import SessionEnded, SessionStarted, ToolCallRequested
from zagent_store import SQLiteJournal
from zagent_store.recover import RecoverError, recover_journal

ZAGENT = [sys.executable, "-c", "from zagent_cli.main import main; main()"]


def zagent(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ZAGENT, *map(str, args)], capture_output=True, text=True, timeout=120)


def build(path: Path, sessions: int = 4, calls: int = 40) -> None:
    """Sessions of calls with bodies big enough to spread over many pages; checkpointed."""
    with SQLiteJournal(path) as journal:
        for s in range(sessions):
            events = [SessionStarted(origin="test", workspace="/w", zagent_version="0")]
            events += [ToolCallRequested(call_id=f"c{n}", tool="t", arguments={"text": f"s{s}-n{n}-" + "x" * 300})
                       for n in range(calls)]
            journal.append(f"s{s}", [*events, SessionEnded()], 0)
    with sqlite3.connect(path) as raw:
        raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def overwrite(path: Path, offset: int, junk: bytes) -> None:
    data = bytearray(path.read_bytes())
    data[offset:offset + len(junk)] = junk
    path.write_bytes(bytes(data))


def assert_clean_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "Traceback" not in output
    for needle in needles:
        assert needle in output, output


@pytest.fixture
def home(tmp_path: Path) -> Path:
    root = tmp_path / "home"
    (root / "tools").mkdir(parents=True)
    build(root / "journal.db")
    return root


def test_a_damaged_list_of_tables_gets_a_clear_error_from_every_command(home: Path, tmp_path: Path) -> None:
    path = home / "journal.db"
    # Not UTF-8, in the middle of the schema's SQL text: SQLite then returns it undecodable.
    offset = path.read_bytes().index(b"CREATE TABLE heads")
    overwrite(path, offset + 7, b"\xff\xfe\xc3\x28")
    for command in (["doctor"], ["sessions", "list"], ["sessions", "show", "s1"], ["audit"]):
        assert_clean_error(zagent("--home", home, *command), "journal", "zagent journal recover")


def test_a_damaged_data_page_is_found_by_doctor_and_recovered_around(home: Path, tmp_path: Path) -> None:
    path = home / "journal.db"
    page = path.read_bytes().index(b"s2-n20-") // 4096 * 4096
    overwrite(path, page, b"\x0d\xff\xff\xff\xff\xff\xff\xff")  # a leaf page's header, made nonsense
    assert_clean_error(zagent("--home", home, "doctor"), "journal recover")
    target = tmp_path / "recovered.db"
    result = zagent("journal", "recover", path, target)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "unreadable" in result.stdout and "Traceback" not in result.stderr
    with SQLiteJournal(target) as recovered:
        assert recovered.check() == []
        for sid in ("s0", "s1", "s2", "s3"):  # each keeps a gap-free prefix; the whole ones are whole
            versions = [e.version for e in recovered.read(sid)]
            assert versions == list(range(1, len(versions) + 1))
        assert {len(list(recovered.read(sid))) for sid in ("s0", "s3")} == {42}
        assert len(list(recovered.read("s2"))) < 42


def test_a_body_that_is_not_json_is_named_by_doctor_and_commands_and_recover_keeps_the_prefix(
        home: Path, tmp_path: Path) -> None:
    path = home / "journal.db"
    with sqlite3.connect(path) as raw:
        raw.execute("DROP TRIGGER events_no_update")
        raw.execute("DROP INDEX events_tool")  # its json_extract refuses a body that is not JSON
        seq = raw.execute("SELECT seq FROM events WHERE session_id = 's1' AND version = 10").fetchone()[0]
        raw.execute("UPDATE events SET data = 'this is {not json' WHERE seq = ?", (seq,))
    assert_clean_error(zagent("--home", home, "doctor"), f"event #{seq} (tool_call_requested) has a body that is "
                                                         "not valid JSON")
    assert_clean_error(zagent("--home", home, "sessions", "show", "s1"), f"event #{seq}", "not valid JSON")
    assert_clean_error(zagent("--home", home, "sessions", "export", "s1"), f"event #{seq}")
    target = tmp_path / "recovered.db"
    result = zagent("journal", "recover", path, target)
    assert result.returncode == 0, result.stderr
    assert f"skipped: event #{seq}: event \"tool_call_requested\" is not valid JSON" in result.stdout
    assert "session s1: kept versions 1-9, left out 32 later event(s)" in result.stdout
    assert "recovered 135 events of 4 sessions" in result.stdout
    with SQLiteJournal(target) as recovered:
        assert [e.version for e in recovered.read("s1")] == list(range(1, 10))
        assert len(list(recovered.read("s0"))) == 42
    assert zagent("--home", home, "sessions", "list").returncode == 0  # the list needs no bodies


@pytest.mark.parametrize(("definition", "junk", "said"), [
    (b'CREATE TABLE "events"', b"CREATE TABLX", "malformed database schema (events)"),
    (b"CREATE TABLE heads", b"CREATE \xff\xfe\xc3\x28", "a definition that is not UTF-8 text"),
    (b"CREATE TRIGGER events_no_update", b"CREATE TRIGGEX", "malformed database schema (events_no_update)"),
], ids=["events", "heads", "trigger"])
def test_recover_reads_past_a_damaged_list_of_tables(home: Path, tmp_path: Path, definition: bytes, junk: bytes,
                                                     said: str) -> None:
    path = home / "journal.db"
    overwrite(path, path.read_bytes().index(definition), junk)  # the text SQLite keeps of a table's definition
    target = tmp_path / "recovered.db"
    result = zagent("journal", "recover", path, target)
    assert result.returncode == 0, result.stdout + result.stderr
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("skipped: the list of tables")]
    assert f"is damaged ({said}" in line and line.endswith("): read past it with PRAGMA writable_schema"), line
    assert "recovered 168 events of 4 sessions" in result.stdout  # all of them: their pages are whole
    with SQLiteJournal(target) as recovered:
        assert recovered.check() == []
        assert [e.version for e in recovered.read("s2")] == list(range(1, 43))


def test_recover_keeps_ids_versions_and_times(tmp_path: Path) -> None:
    source = tmp_path / "journal.db"
    build(source, sessions=2, calls=3)
    report = recover_journal(source, tmp_path / "copy.db")
    assert (report.sessions, report.events, report.unreadable, report.after_gaps) == (2, 10, 0, 0)
    with SQLiteJournal(source) as before, SQLiteJournal(tmp_path / "copy.db") as after:
        for sid in ("s0", "s1"):
            assert [(e.version, e.at, e.event) for e in before.read(sid)] == \
                   [(e.version, e.at, e.event) for e in after.read(sid)]


def test_recover_refuses_what_is_not_a_journal_and_an_existing_target(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hello\n" * 1000)
    result = zagent("journal", "recover", text, tmp_path / "new.db")
    assert_clean_error(result, "is not a journal")
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as raw:
        raw.execute("CREATE TABLE t (x)")
    assert_clean_error(zagent("journal", "recover", other, tmp_path / "new.db"), "not a zagent journal")
    assert not (tmp_path / "new.db").exists()
    build(tmp_path / "journal.db", sessions=1, calls=1)
    text.write_text("keep me")
    result = zagent("journal", "recover", tmp_path / "journal.db", text)
    assert result.returncode == 2 and "already exists" in result.stderr
    assert text.read_text() == "keep me"
    with pytest.raises(RecoverError, match="already exists"):
        recover_journal(tmp_path / "journal.db", text)


def test_resume_refuses_a_session_with_a_hole_in_its_versions_and_appends_nothing(tmp_path: Path) -> None:
    """A finished call's result deleted behind the triggers' back, in a session a crash left
    mid-turn: resume would report the call as not run. It refuses, and names the way out."""
    home, ready = tmp_path / "home", tmp_path / "ready"
    python_tool(home, "count", "print('counted')")
    # The crash comes from outside: a tool cannot reach zagent from its sandbox.
    python_tool(home, "crash", "import os, time\nopen(os.environ['READY'], 'w').close()\ntime.sleep(60)\n")
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"tool_calls": [{"id": "c1", "name": "count", "arguments": {}}]},
                                  {"tool_calls": [{"id": "c2", "name": "crash", "arguments": {}}]},
                                  {"text": "done"}]))
    driver = subprocess.Popen([*ZAGENT, "--home", str(home), "run", "--model", f"scripted:{script}", "count, then crash"],
                              env={**os.environ, "READY": str(ready)}, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        wait_for(ready.exists, "the crashing call to start", 60)
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    path = home / "journal.db"
    with sqlite3.connect(path) as raw:
        raw.execute("DROP TRIGGER events_no_delete")
        (session_id, version), = raw.execute("SELECT session_id, version FROM events WHERE type = "
                                             "'tool_call_finished' AND data ->> 'call_id' = 'c1'").fetchall()
        raw.execute("DELETE FROM events WHERE session_id = ? AND version = ?", (session_id, version))
        before = raw.execute("SELECT count(*), (SELECT owner FROM leases) FROM events").fetchone()
    assert_clean_error(zagent("--home", home, "doctor"), f"session {session_id} has a gap in its versions")
    resumed = zagent("--home", home, "resume", session_id)
    assert_clean_error(resumed, f"session {session_id} is damaged: its version {version + 1} follows version "
                                f"{version - 1}", "zagent journal recover")
    with sqlite3.connect(path) as raw:
        # Nothing appended (no "not run" for c1), and the crashed driver's lease not taken over.
        assert raw.execute("SELECT count(*), (SELECT owner FROM leases) FROM events").fetchone() == before


HOLD = """\
import os, time
open(os.environ["READY"], "w").close()
while not os.path.exists(os.environ["GO"]):  # held until the test lets go
    time.sleep(0.02)
print("held")
"""


def test_doctor_says_the_write_ahead_log_vanished_under_a_running_driver_and_after_it(tmp_path: Path) -> None:
    home, ready = tmp_path / "home", tmp_path / "ready"
    python_tool(home, "hold", HOLD)
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"tool_calls": [{"id": "c1", "name": "hold", "arguments": {}}]}, {"text": "done"}]))
    driver = subprocess.Popen([*ZAGENT, "--home", str(home), "run", "--model", f"scripted:{script}", "hold"],
                              env={**os.environ, "READY": str(ready), "GO": str(tmp_path / "go")},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(ready.exists, "the driver's tool to start", 60)
        (home / "journal.db-wal").unlink()  # under the driver, which has committed the call's start into it
        assert_clean_error(zagent("--home", home, "doctor"), "journal.db: its write-ahead log journal.db-wal was "
                                                             f"deleted while process {driver.pid} had it open")
        assert not (home / "journal.db-wal").exists()  # doctor did not open the journal: the signs are kept
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    # Killed, the driver took its log with it: the session's events are gone, and doctor says so.
    assert_clean_error(zagent("--home", home, "doctor"), "journal.db-shm is there without journal.db-wal: the "
                                                         "write-ahead log was deleted while the journal was open")
