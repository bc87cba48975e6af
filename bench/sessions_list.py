"""A page of sessions from a journal of a million: ``SQLiteJournal.sessions`` beside raw ``sqlite3``.

The journal gets N head rows (one per session, as appends keep them; a third of them
sub-agents) written straight into ``heads``: a listing reads only those rows and the
sessions' snapshots, never the events. Then, in alternating rounds, it times the first
page (50 sessions, newest first), the page after it (the keyset cursor the console and
``sessions list`` use), and the first page of top-level sessions, each three ways: zagent's
listing, the same listing with the ``heads_last_seq`` index dropped (a journal before
schema 11), and raw ``sqlite3`` reading the 50 newest head rows (the floor: no join, no
parsing). Medians in milliseconds.

    /root/.pyenv/versions/3.11.7/bin/python bench/sessions_list.py [--quick] [-n SESSIONS] [-r ROUNDS]
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from zagent_store.sqlite import SQLiteJournal

PAGE = 50


def fill(path: Path, sessions: int) -> None:
    SQLiteJournal(path).close()
    conn = sqlite3.connect(path)
    rows = ((f"20261207-{n:07d}-bench", 10, "2026-12-07T00:00:00.000Z", "2026-12-07T00:00:00.000Z", n * 10, 1, 0, 2,
             0, 0 if n % 3 else 1, None if n % 3 else f"20261207-{n - 1:07d}-bench") for n in range(sessions))
    conn.executemany("INSERT INTO heads (session_id, version, started_at, last_at, last_seq, calls, tasks,"
                     " model_replies, ended, depth, parent_session_id) VALUES (?,?,?,?,?,?,?,?,?,?,?)", rows)
    conn.commit()
    conn.close()


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--sessions", type=int, default=1_000_000)
    parser.add_argument("-r", "--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="100,000 sessions, 3 rounds")
    args = parser.parse_args()
    if args.quick:
        args.sessions, args.rounds = 100_000, 3
    with tempfile.TemporaryDirectory() as tmp:
        indexed = Path(tmp) / "indexed.db"
        fill(indexed, args.sessions)
        unindexed = Path(tmp) / "unindexed.db"
        shutil.copy(indexed, unindexed)
        with sqlite3.connect(unindexed) as conn:
            conn.execute("DROP INDEX heads_last_seq")
        raw = sqlite3.connect(indexed)
        journals = {"zagent": SQLiteJournal(indexed), "zagent, no index": SQLiteJournal(unindexed, read_only=True)}
        second = journals["zagent"].sessions(PAGE)[-1].session_id
        cases: dict[str, dict[str, Callable[[], object]]] = {
            name: {"first page": lambda j=journal: j.sessions(PAGE),
                   "next page": lambda j=journal: j.sessions(PAGE, after=second),
                   "top-level": lambda j=journal: j.sessions(PAGE, top_level=True)}
            for name, journal in journals.items()}
        floor = raw.execute
        cases["raw sqlite3"] = {
            "first page": lambda: floor("SELECT * FROM heads ORDER BY last_seq DESC LIMIT ?", (PAGE,)).fetchall(),
            "next page": lambda: floor("SELECT * FROM heads WHERE last_seq < (SELECT last_seq FROM heads WHERE "
                                       "session_id = ?) ORDER BY last_seq DESC LIMIT ?", (second, PAGE)).fetchall(),
            "top-level": lambda: floor("SELECT * FROM heads WHERE parent_session_id IS NULL ORDER BY last_seq DESC"
                                       " LIMIT ?", (PAGE,)).fetchall()}
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.rounds):
            for side, shapes in cases.items():
                for shape, action in shapes.items():
                    times.setdefault((side, shape), []).append(timed(action))
        print(f"{args.sessions:,} sessions, a page of {PAGE}, median of {args.rounds} rounds (ms)")
        shapes_in_order = list(cases["raw sqlite3"])
        print(f"{'':18}" + "".join(f"{shape:>12}" for shape in shapes_in_order))
        for side in cases:
            print(f"{side:18}" + "".join(f"{statistics.median(times[side, shape]):12.1f}" for shape in shapes_in_order))
        for journal in journals.values():
            journal.close()
        raw.close()


if __name__ == "__main__":
    main()
