"""tests/forked.py: a command run in a fork of the test process keeps SQLite's locking whole.

The fork must not inherit the test process's SQLite state: when it did, a command's
connection to the journal the test held open took its locks through descriptors pointed
at /dev/null, so another process wrote beside it and the journal was damaged (CI, under
``test_worker``'s SIGKILLs). Each test holds the write lock in the command and checks that
a separate interpreter (exec'd, not forked) is refused it.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import forked

from zagent_store.sqlite import SQLiteJournal

#: Takes the write lock, says whether it runs in a fork (zagent already imported), waits for stdin.
HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
conn.execute("INSERT INTO events_probe VALUES (1)")
print("forked" if "zagent_core.journal.events" in sys.modules else "exec'd", flush=True)
sys.stdin.read()
conn.execute("COMMIT")
"""

#: Another process, started afresh, asking for the write lock without waiting.
CONTENDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=0)
try:
    conn.execute("BEGIN IMMEDIATE")
except sqlite3.OperationalError as exc:
    print(exc)
else:
    print("took the write lock beside the holder")
"""


def hold_and_contend(path: Path) -> tuple[str, str]:
    """(how the holder ran, what the contender was told)."""
    holder = forked.Popen([sys.executable, "-c", HOLDER, str(path)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        how = holder.stdout.readline().strip()
        contender = subprocess.run([sys.executable, "-c", CONTENDER, str(path)], capture_output=True, text=True,
                                   timeout=60)
    finally:
        holder.communicate("", timeout=60)
    assert holder.returncode == 0
    return how, contender.stdout.strip()


def test_a_forked_command_locks_a_journal_the_test_process_holds_open(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    with SQLiteJournal(path) as journal:
        journal.db.execute("CREATE TABLE events_probe (x)")
        assert hold_and_contend(path) == ("forked", "database is locked")
        # The test's journal works on after the fork, on its connection opened anew.
        assert journal.db.execute("SELECT count(*) FROM events_probe").fetchone() == (1,)


def test_a_raw_connection_the_test_holds_makes_the_command_exec(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    raw = sqlite3.connect(path, isolation_level=None)
    try:
        raw.execute("PRAGMA journal_mode=WAL")
        raw.execute("CREATE TABLE events_probe (x)")
        assert hold_and_contend(path) == ("exec'd", "database is locked")
    finally:
        raw.close()
    assert hold_and_contend(path)[0] == "forked"
