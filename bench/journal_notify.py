"""What the change feed's NOTIFY costs a PostgreSQL append (issue 28): the same appends with and without it.

Three journals on one server, each in a database of its own, appended to in alternating blocks
(the order of the sides rotating every block, so a slow moment of the disk hits all alike):

* ``no NOTIFY``: ``PostgresJournal.tell_changes`` off, as appends were before the console's feed;
* ``NOTIFY``: every append tells ``zagent_changes`` in its transaction, and nobody listens;
* ``NOTIFY, listened``: the same, with a console's change feed (``NotifiedChanges``) reading the
  notifications in a thread of its own, as ``zagent ui`` does.

Each is measured for one event per append and for batches of 100 (one NOTIFY per append, so its
share per event falls with the batch). The server is a throwaway one (tests/pg_cluster.py: fsync
on, ``synchronous_commit`` on) unless ``--url`` names one.

    /work/main/.venv/bin/python bench/journal_notify.py [--quick] [-r ROUNDS] [--url URL]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from journal_append import make_event  # noqa: E402
from journal_postgres import server  # noqa: E402
from pg_cluster import fresh_database  # noqa: E402

from zagent_core.journal.events import Event  # noqa: E402
from zagent_store.changes import NotifiedChanges  # noqa: E402
from zagent_store.postgres import PostgresJournal  # noqa: E402

SIDES = ("no NOTIFY", "NOTIFY", "NOTIFY, listened")
BLOCK = 100  # events of one side timed in one go, before the next side's turn


@contextlib.contextmanager
def listening(journal: PostgresJournal) -> Iterator[list[int]]:
    """A console's change feed on ``journal``, read in a thread until the end; yields the changes counted."""
    feed = NotifiedChanges(PostgresJournal(journal.url))
    counted = [0]
    done = threading.Event()

    def read() -> None:
        position = feed.position()
        while not done.is_set():
            changes, position = feed.changes(position, 0.2)
            counted[0] += len(changes)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    try:
        yield counted
    finally:
        done.set()
        thread.join()
        feed.close()


def one_round(server_url: str, events: list[Event], per_txn: int) -> dict[str, float]:
    """µs per event of each side, each on a fresh database."""
    with contextlib.ExitStack() as stack:
        journals = {side: stack.enter_context(PostgresJournal(stack.enter_context(fresh_database(server_url))))
                    for side in SIDES}
        journals["no NOTIFY"].tell_changes = False
        counted = stack.enter_context(listening(journals["NOTIFY, listened"]))
        spent = dict.fromkeys(SIDES, 0)
        block = max(BLOCK, per_txn * 5)
        gc.collect()
        for number, lo in enumerate(range(0, len(events), block)):
            hi = min(lo + block, len(events))
            turn = SIDES[number % 3:] + SIDES[:number % 3]
            for side in turn:
                append = journals[side].append
                start = time.perf_counter_ns()
                for i in range(lo, hi, per_txn):
                    append("s1", events[i:i + per_txn], i)
                spent[side] += time.perf_counter_ns() - start
        assert journals["NOTIFY, listened"].head("s1") == len(events)
    assert counted[0] > 0, "the listening feed was told nothing"
    return {side: spent[side] / 1000 / len(events) for side in SIDES}


def measure(server_url: str, rounds: int, n: int, per_txn: int) -> dict[str, float]:
    """Median µs/event of each side over the rounds (after a warm-up round)."""
    events = [make_event(i) for i in range(n)]
    one_round(server_url, events[:5 * per_txn], per_txn)
    results = [one_round(server_url, events, per_txn) for _ in range(rounds)]
    return {side: statistics.median(result[side] for result in results) for side in SIDES}


def main() -> None:
    import psycopg

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and events (a smoke run)")
    parser.add_argument("-r", "--rounds", type=int, help="rounds per measure (default 5, quick 2)")
    parser.add_argument("-n", "--events", type=int, help="events per round (default 1000, quick 300); batches 10x")
    parser.add_argument("--url", help="a PostgreSQL server's database (its user may create databases)")
    parser.add_argument("--no-flush", action="store_true",
                        help="synchronous_commit off on the server (ALTER SYSTEM): the commit's WAL flush, most"
                             " of a one-event append, out of the way of what NOTIFY itself costs")
    args = parser.parse_args()
    rounds = args.rounds or (2 if args.quick else 5)
    n = args.events or (300 if args.quick else 1000)
    with server(args.url) as server_url:
        with psycopg.connect(server_url, autocommit=True) as probe:
            if args.no_flush:
                probe.execute("ALTER SYSTEM SET synchronous_commit = off")
                probe.execute("SELECT pg_reload_conf()")
            row = probe.execute("SHOW server_version").fetchone()
            flush = probe.execute("SHOW synchronous_commit").fetchone()
        print(f"append cost of the change feed's NOTIFY (PostgreSQL {row[0] if row else '?'}, psycopg "
              f"{psycopg.__version__}, Python {sys.version.split()[0]}, synchronous_commit {flush[0] if flush else '?'});"
              f" medians of {rounds} rounds, µs per event")
        print(f"{'':24}" + "".join(f"{side:>18}" for side in SIDES) + f"{'NOTIFY / none':>16}")
        for per_txn, label, count in ((1, "1 event per append", n), (100, "100 events per append", n * 10)):
            spent = measure(server_url, rounds, count, per_txn)
            print(f"{label:24}" + "".join(f"{spent[side]:>18.1f}" for side in SIDES)
                  + f"{spent['NOTIFY'] / spent['no NOTIFY']:>15.2f}x")


if __name__ == "__main__":
    main()
