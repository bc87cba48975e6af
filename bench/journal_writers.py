"""Concurrent writers: N processes appending to one journal, beside one process alone.

Each writer is a separate Python process with its own ``SQLiteJournal`` on the same file
(``synchronous`` as given, FULL by default, as zagent runs), appending events of an agent
step to its own session, one event per ``append`` (the engine's common case), for a
fixed number of appends. All writers start together (they wait on a file the parent
creates once every one is ready). Reported: the events per second of all writers
together against one writer alone (run just before, on a fresh file), the p50/p99/max
latency of one ``append`` across all writers, and the errors any writer saw (any
exception an ``append`` raised: there should be none).

    /root/.pyenv/versions/3.11.7/bin/python bench/journal_writers.py [-w WRITERS] [-n APPENDS] [--sync FULL|NORMAL]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_RATE = 0.9
TARGET_P99_MS = 20.0

WRITER = r"""
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[6])
from journal_append import make_event
from zagent_store import SQLiteJournal

path, session, count, synchronous, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], Path(sys.argv[5])
journal = SQLiteJournal(path, synchronous=synchronous)
events = [make_event(i) for i in range(count)]
print("ready", flush=True)
while not go.exists():
    time.sleep(0.001)
latencies, errors = [], []
start = time.perf_counter()
for version, event in enumerate(events):
    began = time.perf_counter()
    try:
        journal.append(session, [event], version)
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
        break
    latencies.append(time.perf_counter() - began)
elapsed = time.perf_counter() - start
journal.close()
print(json.dumps({"latencies": latencies, "errors": errors, "elapsed": elapsed, "start": start}))
"""


def run_writers(path: Path, writers: int, appends: int, synchronous: str) -> dict:
    from zagent_store import SQLiteJournal

    SQLiteJournal(path).close()
    go = path.with_suffix(".go")
    here = str(Path(__file__).resolve().parent)
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), f"w{n}", str(appends), synchronous, str(go), here],
                         stdout=subprocess.PIPE, text=True)
        for n in range(writers)
    ]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    began = time.perf_counter()
    go.touch()
    results = [json.loads(proc.communicate()[0]) for proc in procs]
    wall = time.perf_counter() - began
    go.unlink()
    latencies = sorted(x for r in results for x in r["latencies"])
    with SQLiteJournal(path) as journal:
        stored = sum(s.events for s in journal.sessions())
        problems = journal.check()
    return {
        "events": len(latencies),
        "stored": stored,
        "rate": len(latencies) / wall,
        "p50": statistics.median(latencies) * 1000,
        "p99": latencies[int(len(latencies) * 0.99) - 1] * 1000,
        "max": latencies[-1] * 1000,
        "errors": [e for r in results for e in r["errors"]],
        "check": problems,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-w", "--writers", type=int, default=8)
    parser.add_argument("-n", "--appends", type=int, default=500, help="appends per writer (default 500)")
    parser.add_argument("--sync", choices=["FULL", "NORMAL"], default="FULL")
    parser.add_argument("--dir", help="where to put the temp journals (default: the system temp dir)")
    args = parser.parse_args()
    import sqlite3

    print(f"{args.writers} writer processes vs 1, {args.appends} single-event appends each, synchronous={args.sync} "
          f"(SQLite {sqlite3.sqlite_version}, {os.cpu_count()} cpus)")
    with tempfile.TemporaryDirectory(prefix="zagent-writers-", dir=args.dir) as tmp:
        one = run_writers(Path(tmp) / "one.db", 1, args.appends * 2, args.sync)
        many = run_writers(Path(tmp) / "many.db", args.writers, args.appends, args.sync)
    header = f"{'writers':>7} {'events':>7} {'events/s':>9} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7}  errors"
    print(header)
    print("-" * len(header))
    for label, r in (("1", one), (str(args.writers), many)):
        print(f"{label:>7} {r['events']:>7} {r['rate']:>9.0f} {r['p50']:>7.2f} {r['p99']:>7.2f} {r['max']:>7.1f}  "
              f"{len(r['errors'])}{' ' + r['errors'][0] if r['errors'] else ''}")
    ratio = many["rate"] / one["rate"]
    print()
    print(f"rate, {args.writers} writers / 1: {ratio:.2f}x (target >= {TARGET_RATE}x: "
          f"{'ok' if ratio >= TARGET_RATE else 'missed'}); p99 {many['p99']:.1f} ms (target <= {TARGET_P99_MS} ms: "
          f"{'ok' if many['p99'] <= TARGET_P99_MS else 'missed'}); errors: {len(many['errors'])}; "
          f"stored {many['stored']} of {many['events']} acknowledged; check: {many['check'] or 'ok'}")


if __name__ == "__main__":
    main()
