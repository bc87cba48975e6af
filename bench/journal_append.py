"""Journal append: ``SQLiteJournal.append`` beside raw ``sqlite3`` on the same schema.

Each round makes two fresh files in a temp dir: one created by ``SQLiteJournal``, the
other by plain ``sqlite3`` with the raw baseline's schema (``--raw-schema``: by default
``minimal``, the same ``events`` table with only the ``UNIQUE(session_id, version)``
index that optimistic concurrency needs; ``bare`` has no index at all; ``zagent`` is
zagent's own schema, indexes and triggers), opens the second with the same pragmas
(WAL, the given ``synchronous``, busy timeout), and times, in alternating blocks of
the two sides:

The events are those of an agent step, in turn (``turn_started``, ``model_replied``, a
call's ``requested``/``started``/``finished``, two notes, ``turn_ended``), so each kind
pays for the indexes its type has.

* single: one event per ``append`` (one transaction each) vs raw
  ``BEGIN IMMEDIATE`` / ``INSERT`` / ``COMMIT`` of the same row, pre-serialised;
* batch: 100 events per ``append`` vs raw ``executemany`` of 100 pre-serialised rows
  in one transaction.

The journal's figure includes everything ``append`` does (serialising the event with
pydantic, the timestamp, the lock, building the returned ``StoredEvent``s); the raw
figure is only SQLite. The table shows the median over rounds, in microseconds per
event, and then what ``append`` costs with SQLite stubbed out, to show where the gap is.

    /root/.pyenv/versions/3.11.7/bin/python bench/journal_append.py [--quick] [-r ROUNDS] [-n EVENTS]
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from collections.abc import Callable

from zagent_core.journal.events import (
    Event,
    SessionStarted,
    ModelReplied,
    NoteReceived,
    RepliedCall,
    ToolCallFinished,
    ToolCallRequested,
    ToolCallStarted,
    TurnEnded,
    TurnStarted,
    dump_event,
)
from zagent_store import SQLiteJournal

from datetime import datetime, timezone


def _now() -> str:
    """A timestamp in the journal's format, for the raw side's rows."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")

INSERT = (
    "INSERT INTO events (session_id, version, type, at, call_id, task_id, data)"
    " VALUES (?, ?, ?, ?, ?, ?, ?)"
)
BATCH = 100
TARGET = 1.1

_TABLE = ("CREATE TABLE events (seq INTEGER PRIMARY KEY, session_id TEXT NOT NULL, version INTEGER NOT NULL,"
          " type TEXT NOT NULL, at TEXT NOT NULL, call_id TEXT, task_id TEXT, data TEXT NOT NULL)")
RAW_SCHEMAS = {
    "minimal": [_TABLE, "CREATE UNIQUE INDEX events_session_version ON events (session_id, version)"],
    "bare": [_TABLE],
    "zagent": None,  # made by SQLiteJournal itself
}


def create_raw(path: Path, schema: str) -> None:
    statements = RAW_SCHEMAS[schema]
    if statements is None:
        SQLiteJournal(path).close()
        return
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    for statement in statements:
        conn.execute(statement)
    conn.commit()
    conn.close()


def make_event(i: int) -> Event:
    """The events of one agent step, in turn: a reply asking for a call, the call, two notes."""
    call_id = f"call_{i // len(_STEP):012x}"
    return _STEP[i % len(_STEP)](call_id)


_STEP: list[Callable[[str], Event]] = [
    lambda c: TurnStarted(reason="user", system_prompt="You are a helpful agent."),
    lambda c: ModelReplied(model="scripted", text="I will count the words.", stop_reason="tool_calls",
                           tool_calls=[RepliedCall(id=c, call_id=c, name="word_count", arguments={"top": 3})]),
    lambda c: ToolCallRequested(call_id=c, tool="word_count",
                                arguments={"text": "the cat and the hat sat on the mat", "top": 3}),
    lambda c: ToolCallStarted(call_id=c, tool="word_count", arguments={"top": 3}, argv=["python3", "run.py"],
                              cwd="/work", input_mode="stdin", output_mode="text", output_dir="/home/out",
                              notify_file="/home/out/notify", timeout_seconds=120.0, manifest_hash="a" * 64,
                              files_hash="b" * 64),
    lambda c: NoteReceived(call_id=c, text="counting: 50% done", offset=19),
    lambda c: NoteReceived(call_id=c, text="counting: 100% done", offset=39),
    lambda c: ToolCallFinished(call_id=c, output="9 words", is_error=False, exit_code=0, duration_ms=35),
    lambda c: TurnEnded(reason="idle"),
]


def session_events(n: int) -> list[Event]:
    """A session of ``n`` events: its start, then agent steps (``make_event``'s, less its notes,
    which a real session delivers and these steps never would: the state would keep them all)."""
    start: Event = SessionStarted(origin="bench", workspace="/work", zagent_version="bench")
    steps = (event for event in map(make_event, itertools.count()) if event.type != "note_received")
    return [start, *itertools.islice(steps, n - 1)]


def row_of(session_id: str, version: int, event: Event, at: str) -> tuple:
    fields = event.__dict__
    return (session_id, version, event.type, at, fields.get("call_id"), fields.get("task_id"), dump_event(event))


def open_raw(path: Path, synchronous: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("PRAGMA busy_timeout=5000")
    return conn


# -- the timed loops -----------------------------------------------------------------------
#
# Both sides are open at once, each on its own fresh file, and run in alternating blocks
# (which side goes first flips every block), so a slow patch of the disk or of the host
# hits both alike. Each returns microseconds per event.

BLOCK = 100  # events of one side timed in one go (single mode), before switching sides


def in_alternating_blocks(n: int, block: int, zagent: Callable[[int, int], None],
                          raw: Callable[[int, int], None]) -> None:
    """Both sides over events ``0 .. n`` in blocks of ``block``, which side goes first flipping every block."""
    gc.collect()
    for number, lo in enumerate(range(0, n, block)):
        hi = min(lo + block, n)
        first, second = (zagent, raw) if number % 2 == 0 else (raw, zagent)
        first(lo, hi)
        second(lo, hi)


def one_round(tmp: Path, tag: str, synchronous: str, events: list, rows: list, per_txn: int,
              raw_schema: str) -> tuple[float, float]:
    journal_path, raw_path = tmp / f"{tag}-zagent.db", tmp / f"{tag}-raw.db"
    # Both files are created and closed (so both start with an empty WAL), then reopened.
    SQLiteJournal(journal_path).close()
    create_raw(raw_path, raw_schema)
    journal = SQLiteJournal(journal_path, synchronous=synchronous)  # type: ignore[arg-type]
    conn = open_raw(raw_path, synchronous)
    execute, executemany = conn.execute, conn.executemany
    append = journal.append
    block = max(BLOCK, per_txn * 5)
    spent = {"zagent": 0, "raw": 0}

    def zagent_block(lo: int, hi: int) -> None:
        start = time.perf_counter_ns()
        for i in range(lo, hi, per_txn):
            append("s1", events[i : i + per_txn], i)
        spent["zagent"] += time.perf_counter_ns() - start

    def raw_block(lo: int, hi: int) -> None:
        start = time.perf_counter_ns()
        if per_txn == 1:
            for row in rows[lo:hi]:
                execute("BEGIN IMMEDIATE")
                execute(INSERT, row)
                execute("COMMIT")
        else:
            for i in range(lo, hi, per_txn):
                execute("BEGIN IMMEDIATE")
                executemany(INSERT, rows[i : i + per_txn])
                execute("COMMIT")
        spent["raw"] += time.perf_counter_ns() - start

    try:
        in_alternating_blocks(len(events), block, zagent_block, raw_block)
    finally:
        journal.close()
        conn.close()
        for path in tmp.glob(f"{tag}-*"):
            path.unlink()
    return spent["zagent"] / 1000 / len(events), spent["raw"] / 1000 / len(events)


# -- what append does besides SQLite, to explain the gap ---------------------------------


class _NoSQL:
    """Stands in for the sqlite3 connection: every statement is free."""

    in_transaction = False

    class _Cursor:
        lastrowid = 1
        rowcount = 1

        def fetchone(self) -> tuple[int]:
            return (1,)

    _cursor = _Cursor()

    def execute(self, *args: object) -> _Cursor:
        return self._cursor

    def executemany(self, *args: object) -> _Cursor:
        return self._cursor

    def close(self) -> None:
        pass


def python_side_costs(tmp: Path, events: list) -> dict[str, float]:
    """Per-event cost of append's pure-Python work, outside any transaction (µs, best of 5)."""
    from datetime import datetime

    from zagent_core.journal.protocol import StoredEvent

    def _parse_time(text: str) -> datetime:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))

    n = len(events)
    at = _now()
    when = _parse_time(at)
    costs = {}

    def timed(label: str, fn) -> None:
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter_ns()
            fn()
            best = min(best, time.perf_counter_ns() - start)
        costs[label] = best / 1000 / n

    journal = SQLiteJournal(tmp / "nosql.db")
    if hasattr(journal, "_conn"):  # a private attribute: skip this part if it is gone
        real, journal._conn = journal._conn, _NoSQL()  # type: ignore[assignment]
        try:
            timed("append() of 1 event, SQLite calls stubbed", lambda: [
                journal.append("s1", [e], i) for i, e in enumerate(events)
            ])
            timed("append() of 100 events, SQLite calls stubbed", lambda: [
                journal.append("s1", events[i : i + BATCH], i) for i in range(0, n, BATCH)
            ])
        finally:
            journal._conn = real
    journal.close()
    timed("  of which dump_event (model_dump_json)", lambda: [dump_event(e) for e in events])
    timed("  of which StoredEvent(...) for the result", lambda: [
        StoredEvent(i, "s1", i, when, e) for i, e in enumerate(events)
    ])
    return costs


def typed_read(tmp: Path, n: int, rounds: int) -> tuple[float, float]:
    """Median ms to read an ``n``-event session: ``SQLiteJournal.read`` as typed events vs raw
    ``SELECT`` + ``json.loads`` of the same rows (alternating, fresh cursor each time)."""
    import json

    path = tmp / "read.db"
    with SQLiteJournal(path, synchronous="OFF") as journal:
        events = [make_event(i) for i in range(n)]
        for i in range(0, n, 1000):
            journal.append("s1", events[i : i + 1000], i)
    journal = SQLiteJournal(path)
    conn = open_raw(path, "NORMAL")
    query = "SELECT seq, version, type, at, data FROM events WHERE session_id = ? AND version > ? ORDER BY version"
    spent: dict[str, list[float]] = {"zagent": [], "raw": []}
    try:
        for _ in range(rounds):
            for side in ("zagent", "raw"):
                gc.collect()
                start = time.perf_counter()
                if side == "zagent":
                    list(journal.read("s1"))
                else:
                    [(seq, v, t, at, json.loads(data)) for seq, v, t, at, data in conn.execute(query, ("s1", 0))]
                spent[side].append((time.perf_counter() - start) * 1000)
    finally:
        journal.close()
        conn.close()
    return statistics.median(spent["zagent"]), statistics.median(spent["raw"])


def run(synchronous: str, rounds: int, n_single: int, n_batch: int, tmp: Path,
        raw_schema: str) -> dict[str, tuple[float, ...]]:
    """Per mode: median zagent and raw µs/event over ``rounds`` fresh pairs of files, and
    the lowest and highest per-round ratio (how noisy the machine was)."""
    at = _now()
    figures = {}
    for kind, n, per_txn in (("single", n_single, 1), ("batch", n_batch, BATCH)):
        events = [make_event(i) for i in range(n)]
        rows = [row_of("s1", i + 1, e, at) for i, e in enumerate(events)]
        one_round(tmp, "warmup", synchronous, events[: 5 * per_txn], rows[: 5 * per_txn], per_txn, raw_schema)
        results = [one_round(tmp, f"{kind}{r}", synchronous, events, rows, per_txn, raw_schema)
                   for r in range(rounds)]
        ratios = [z / raw for z, raw in results]
        figures[kind] = (
            statistics.median(z for z, _ in results),
            statistics.median(raw for _, raw in results),
            min(ratios),
            max(ratios),
        )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and events (a few seconds)")
    parser.add_argument("-r", "--rounds", type=int, help="rounds per setting (default 9, quick 3)")
    parser.add_argument("-n", "--events", type=int,
                        help="events per round with synchronous=NORMAL (default 2000, quick 500); "
                        "FULL uses half of it, since every commit is an fsync; batches use 5x (FULL 1x)")
    parser.add_argument("--sync", choices=["NORMAL", "FULL", "both"], default="both")
    parser.add_argument("--raw-schema", choices=list(RAW_SCHEMAS), default="minimal",
                        help="the raw side's table: minimal (UNIQUE(session_id, version) only, the default), "
                        "bare (no index), zagent (zagent's own schema)")
    parser.add_argument("--dir", help="where to put the temp databases (default: the system temp dir)")
    args = parser.parse_args()
    rounds = args.rounds or (3 if args.quick else 9)
    n = args.events or (500 if args.quick else 2000)

    print(f"zagent journal append vs raw sqlite3 (SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}, "
          f"{os.cpu_count()} cpus)")
    print(f"median of {rounds} rounds, fresh files each round, raw schema {args.raw_schema}, WAL; "
          f"batch = {BATCH} events per transaction; target <= {TARGET}x")
    print()
    header = (f"{'synchronous':<12} {'mode':<24} {'events':>6} {'zagent µs/ev':>13} {'raw µs/ev':>10} "
              f"{'ratio':>6} {'round ratios':>13}  target")
    print(header)
    print("-" * len(header))
    settings = ["NORMAL", "FULL"] if args.sync == "both" else [args.sync]
    with tempfile.TemporaryDirectory(prefix="zagent-bench-", dir=args.dir) as tmp:
        for synchronous in settings:
            # FULL fsyncs every commit: half the single-event transactions, a fifth of the batches.
            n_single = n if synchronous == "NORMAL" else max(BLOCK, n // 2)
            n_batch = max(BATCH, (n * 5 // BATCH) * BATCH) if synchronous == "NORMAL" else max(BATCH, (n // BATCH) * BATCH)
            figures = run(synchronous, rounds, n_single, n_batch, Path(tmp), args.raw_schema)
            for kind, label, count in (("single", "1 event / transaction", n_single),
                                       ("batch", f"{BATCH} events / transaction", n_batch)):
                zagent, raw, low, high = figures[kind]
                ratio = zagent / raw
                verdict = "ok" if ratio <= TARGET else f"MISSED by {(ratio / TARGET - 1) * 100:.1f}%"
                print(f"{synchronous:<12} {label:<24} {count:>6} {zagent:>13.1f} {raw:>10.1f} {ratio:>5.2f}x "
                      f"{low:>5.2f}-{high:.2f}x  {verdict}")
        zagent_ms, raw_ms = typed_read(Path(tmp), 10_000, rounds)
        print()
        print(f"typed read of a 10,000-event session: zagent read() {zagent_ms:.1f} ms, raw SELECT + json.loads "
              f"{raw_ms:.1f} ms: {zagent_ms / raw_ms:.2f}x (target <= 0.8x)")
        print()
        print("where zagent's extra time goes: append's Python work per event, SQLite stubbed out (best of 5):")
        for label, cost in python_side_costs(Path(tmp), [make_event(i) for i in range(2000)]).items():
            print(f"  {label:<50} {cost:6.2f} µs")


if __name__ == "__main__":
    main()
