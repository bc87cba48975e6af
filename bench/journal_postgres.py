"""The journal on PostgreSQL beside raw psycopg: W1-W4 of the SQLite journal benchmarks.

Each measure runs zagent's ``PostgresJournal`` and a raw psycopg 3 connection against the
same server in the same run, in alternating blocks (which side goes first flips every
block), so a slow moment of the disk or of the host hits both alike:

* W1, durable append, one event per transaction: ``append`` vs a raw ``INSERT`` of the
  same row, pre-serialised, in autocommit (the statement is its own transaction: one
  round trip, the least a durable insert takes);
* W2, 100 events per transaction: ``append`` of 100 vs raw ``executemany`` of 100 rows
  (pipelined by psycopg) in one transaction;
* W3, load a 10,000-event session: ``list(read())`` (typed events) vs raw ``SELECT`` of the
  same rows, psycopg parsing each ``jsonb`` body;
* W4, the tail of a 100,000-event session: ``open_state`` (what ``Engine.session_state``,
  resume and ``sessions show`` do: the newest snapshot and the 100 events after it,
  folded) vs raw ``SELECT`` of the snapshot row and of the 100 rows, parsed.

W1 and W2 run against two raw writers. ``bare``: a minimal event store, the same columns
with an identity ``seq`` and ``UNIQUE (session_id, version)`` (what optimistic concurrency
needs), one ``INSERT`` per event; the least a durable append can cost. ``same writes``:
zagent's own schema (its indexes and trigger) and the three writes zagent's append makes,
hand-written as a psycopg user would (``BEGIN``; take the positions from
``journal_position``; move the session's ``heads`` row; insert the events; ``COMMIT``).
zagent's side does everything ``append`` does, pydantic serialisation included. Both sides
write to a fresh database of their own each round. The server is a throwaway one
(tests/pg_cluster.py: fsync on, ``synchronous_commit`` on, as a real server has them) unless
``--url`` names one; W3 and W4 read the journal's own rows on both sides.

    /root/.pyenv/versions/3.11.7/bin/python bench/journal_postgres.py [--quick] [-r ROUNDS] [--url URL]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import itertools
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from journal_append import BATCH, _now, in_alternating_blocks, make_event, row_of, session_events  # noqa: E402

from zagent_core.journal.events import Event  # noqa: E402
from zagent_core.journal.fold import rebuild  # noqa: E402
from zagent_core.journal.snapshots import open_state, projection_tag, to_snapshot  # noqa: E402
from zagent_core.journal.views import status_of  # noqa: E402
from pg_cluster import fresh_database  # noqa: E402

from zagent_store.postgres import PostgresJournal  # noqa: E402

TARGET = 1.2
TAIL = 100

RAW_WRITERS = ("bare", "same writes")
_BARE_TABLE = ("CREATE TABLE events (seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
               " session_id TEXT NOT NULL, version INTEGER NOT NULL, type TEXT NOT NULL, at TEXT NOT NULL,"
               " call_id TEXT, task_id TEXT, data JSONB NOT NULL, UNIQUE (session_id, version))")
_BARE_INSERT = ("INSERT INTO events (session_id, version, type, at, call_id, task_id, data)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s::jsonb)")
_INSERT = ("INSERT INTO events (seq, session_id, version, type, at, call_id, task_id, data)"
           " VALUES (%s, %s, %s, %s, %s, %s, %s, %s::jsonb)")
_TAKE = "UPDATE journal_position SET seq = seq + %s RETURNING seq"
_MOVE = ("UPDATE heads SET version = %s, last_at = %s, last_seq = %s"
         " WHERE session_id = %s AND version = %s RETURNING version")
RAW_READ = "SELECT seq, version, type, at, data FROM events WHERE session_id = %s AND version > %s ORDER BY version"


@contextlib.contextmanager
def server(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    from pg_cluster import throwaway_cluster

    with throwaway_cluster() as started:
        yield started


class RawWriter:
    """The raw side's appends: pre-serialised rows, hand-written SQL on a connection of its own."""

    def __init__(self, url: str, kind: str, rows: list[tuple[Any, ...]]) -> None:
        self.kind, self.rows = kind, rows
        if kind == "same writes":
            PostgresJournal(url).close()  # zagent's schema, made by zagent
        self.conn = psycopg.connect(url, autocommit=True)
        if kind == "bare":
            self.conn.execute(_BARE_TABLE)
        else:
            self.conn.execute("INSERT INTO heads (session_id, version, started_at, last_at, last_seq, calls, tasks,"
                              " model_replies, ended) VALUES ('s1', 0, '', '', 0, 0, 0, 0, FALSE)")

    def append(self, lo: int, hi: int) -> None:
        """Rows ``lo`` to ``hi`` in one transaction."""
        conn, rows = self.conn, self.rows[lo:hi]
        if self.kind == "bare":
            if len(rows) == 1:  # autocommit: the statement is its transaction, one round trip
                conn.execute(_BARE_INSERT, rows[0])
            else:
                with conn.transaction():
                    conn.cursor().executemany(_BARE_INSERT, rows)
            return
        with conn.transaction():
            row = conn.execute(_TAKE, (len(rows),)).fetchone()
            assert row is not None
            first = row[0] - len(rows) + 1
            moved = conn.execute(_MOVE, (hi, rows[-1][3], row[0], "s1", lo)).fetchone()
            assert moved is not None, "the raw writer's head moved on"
            numbered = [(first + i, *values) for i, values in enumerate(rows)]
            if len(numbered) == 1:
                conn.execute(_INSERT, numbered[0])
            else:
                conn.cursor().executemany(_INSERT, numbered)

    def close(self) -> None:
        self.conn.close()


# -- W1, W2: appends ---------------------------------------------------------------------

BLOCK = 100  # events of one side timed in one go, before switching sides


def append_round(server_url: str, events: list[Event], rows: list[tuple[Any, ...]], per_txn: int,
                 raw_kind: str) -> tuple[float, float]:
    """µs per event of zagent's and of the raw side, each on a fresh database."""
    with fresh_database(server_url) as zagent_url, fresh_database(server_url) as raw_url:
        journal = PostgresJournal(zagent_url)
        raw = RawWriter(raw_url, raw_kind, rows)
        block = max(BLOCK, per_txn * 5)
        spent = {"zagent": 0, "raw": 0}

        def zagent_block(lo: int, hi: int) -> None:
            start = time.perf_counter_ns()
            for i in range(lo, hi, per_txn):
                journal.append("s1", events[i:i + per_txn], i)
            spent["zagent"] += time.perf_counter_ns() - start

        def raw_block(lo: int, hi: int) -> None:
            start = time.perf_counter_ns()
            for i in range(lo, hi, per_txn):
                raw.append(i, i + per_txn)
            spent["raw"] += time.perf_counter_ns() - start

        try:
            in_alternating_blocks(len(events), block, zagent_block, raw_block)
        finally:
            journal.close()
            raw.close()
    return spent["zagent"] / 1000 / len(events), spent["raw"] / 1000 / len(events)


def appends(server_url: str, rounds: int, n: int, per_txn: int, raw_kind: str) -> tuple[float, float, float, float]:
    """Median zagent and raw µs/event over the rounds, and the lowest and highest round ratio."""
    at = _now()
    events = [make_event(i) for i in range(n)]
    rows = [row_of("s1", i + 1, event, at) for i, event in enumerate(events)]
    append_round(server_url, events[:5 * per_txn], rows[:5 * per_txn], per_txn, raw_kind)  # warm-up
    results = [append_round(server_url, events, rows, per_txn, raw_kind) for _ in range(rounds)]
    ratios = [zagent / raw for zagent, raw in results]
    return (statistics.median(z for z, _ in results), statistics.median(r for _, r in results),
            min(ratios), max(ratios))


# -- W3, W4: reads -----------------------------------------------------------------------


def write_session(journal: PostgresJournal, session_id: str, events: list[Event], snapshot_at: int | None) -> None:
    """Append ``events`` in batches of 1,000, and the snapshot the engine leaves at ``snapshot_at``."""
    for i in range(0, len(events), 1000):
        journal.append(session_id, events[i:i + 1000], i)
    if snapshot_at is not None:
        state = rebuild(itertools.islice(journal.read(session_id), snapshot_at))
        journal.save_snapshot(session_id, state.version, projection_tag(), to_snapshot(state), status_of(state))


def alternate(zagent: Callable[[], object], raw: Callable[[], object], rounds: int) -> tuple[float, float]:
    """Median ms of each, run in turns (the order flipping every round) after one warm-up each."""
    zagent(), raw()
    spent: dict[str, list[float]] = {"zagent": [], "raw": []}
    for number in range(rounds):
        sides = [("zagent", zagent), ("raw", raw)]
        for side, fn in sides if number % 2 == 0 else sides[::-1]:
            gc.collect()
            start = time.perf_counter()
            fn()
            spent[side].append((time.perf_counter() - start) * 1000)
    return statistics.median(spent["zagent"]), statistics.median(spent["raw"])


def reads(server_url: str, rounds: int, loaded: int, long: int) -> dict[str, tuple[float, float]]:
    import json

    with fresh_database(server_url) as url:
        journal = PostgresJournal(url)
        write_session(journal, "loaded", session_events(loaded), None)
        write_session(journal, "long", session_events(long), long - TAIL)
        conn = psycopg.connect(url, autocommit=True)
        tag = projection_tag()

        def raw_load() -> list[Any]:
            return conn.execute(RAW_READ, ("loaded", 0)).fetchall()

        def raw_open() -> tuple[Any, list[Any]]:
            row = conn.execute("SELECT version, data FROM snapshots WHERE session_id = %s AND projection = %s",
                               ("long", tag)).fetchone()
            assert row is not None
            return json.loads(row[1]), conn.execute(RAW_READ, ("long", row[0])).fetchall()

        opened = open_state(journal, "long")
        assert opened.version == long and len(raw_open()[1]) == TAIL, "the long session's snapshot was not used"
        try:
            return {
                "load": alternate(lambda: list(journal.read("loaded")), raw_load, rounds),
                "open": alternate(lambda: open_state(journal, "long"), raw_open, rounds * 5),
            }
        finally:
            conn.close()
            journal.close()


def verdict(ratio: float) -> str:
    return "ok" if ratio <= TARGET else f"MISSED by {(ratio / TARGET - 1) * 100:.0f}%"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and events (a smoke run of ~20 s)")
    parser.add_argument("-r", "--rounds", type=int, help="rounds per measure (default 7, quick 2)")
    parser.add_argument("-n", "--events", type=int, help="events per append round (default 1000, quick 200);"
                        " batches use 5x")
    parser.add_argument("--raw", action="append", choices=RAW_WRITERS,
                        help="the raw writers W1 and W2 compare with (default: both)")
    parser.add_argument("--url", help="a PostgreSQL server's database to use instead of a throwaway server"
                        " (its user may create databases)")
    args = parser.parse_args()
    args.raw = args.raw or list(RAW_WRITERS)
    rounds = args.rounds or (2 if args.quick else 7)
    n = args.events or (200 if args.quick else 1000)
    loaded, long = (2_000, 10_000) if args.quick else (10_000, 100_000)

    with server(args.url) as server_url:
        with psycopg.connect(server_url) as probe:
            version = probe.execute("SHOW server_version").fetchone()
            settings = {name: probe.execute(f"SHOW {name}").fetchone() for name in ("fsync", "synchronous_commit")}
        print(f"zagent's PostgreSQL journal vs raw psycopg {psycopg.__version__} (PostgreSQL {version[0] if version else '?'},"
              f" fsync {settings['fsync'][0] if settings['fsync'] else '?'}, synchronous_commit "
              f"{settings['synchronous_commit'][0] if settings['synchronous_commit'] else '?'}; Python "
              f"{sys.version.split()[0]}, {os.cpu_count()} cpus)")
        print(f"medians of {rounds} rounds; target <= {TARGET}x raw")
        print()
        header = f"{'measure':<60} {'zagent':>12} {'raw':>12} {'ratio':>6} {'round ratios':>13}  target"
        print(header)
        print("-" * len(header))
        for label, count, per_txn in ((f"W1 append, 1 event/transaction ({n})", n, 1),
                                      (f"W2 append, {BATCH} events/transaction ({n * 5})", n * 5, BATCH)):
            for raw_kind in args.raw:
                zagent, raw, low, high = appends(server_url, rounds, count, per_txn, raw_kind)
                print(f"{label + ', raw ' + raw_kind:<60} {zagent:>8.1f} µs/ev {raw:>5.1f} µs/ev {zagent / raw:>5.2f}x "
                      f"{low:>5.2f}-{high:.2f}x  {verdict(zagent / raw)}")
        figures = reads(server_url, rounds, loaded, long)
        for key, label in (("load", f"W3 load a {loaded:,}-event session (typed)"),
                           ("open", f"W4 open a {long:,}-event session (snapshot + {TAIL})")):
            zagent, raw = figures[key]
            print(f"{label:<60} {zagent:>9.2f} ms {raw:>9.2f} ms {zagent / raw:>5.2f}x {'':>13}  "
                  f"{verdict(zagent / raw)}")


if __name__ == "__main__":
    main()
