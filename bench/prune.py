"""Retention (issue 22): ``sessions prune`` and ``journal vacuum`` on a large SQLite journal, beside raw sqlite3.

Builds the realistic journal of ``bench/journal_scale.py`` (default 200,000 events, about
2,000 sessions; about a third of them ended), copies it twice, and on each copy takes the
same sessions out (the ended ones whose end is older than the median end):

* zagent: ``prune_sessions`` (its dry run first: the listing and the checks alone), then
  with ``keep_exports`` on a second copy (each session written, synced, read back and
  checked before it goes);
* raw: one hand-written transaction on a third copy: the trigger dropped, ``DELETE`` of
  the same sessions' rows from ``events``, ``heads``, ``snapshots`` and ``leases``, the
  trigger made again;

then ``vacuum_journal`` vs a raw ``VACUUM`` + ``wal_checkpoint(TRUNCATE)``, with the files'
sizes. One run each (a prune cannot be repeated on the same copy); the file is in the page
cache, as it was just written.

    $PY bench/prune.py [--events N] [--dir DIR]
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from journal_scale import build  # noqa: E402

from zagent_core.history.retention import prune_sessions, vacuum_journal  # noqa: E402
from zagent_store import SQLiteJournal  # noqa: E402


def size(path: Path) -> int:
    return sum(part.stat().st_size for part in (path, Path(f"{path}-wal")) if part.exists())


def raw_prune(path: Path, ids: list[str]) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    started = time.perf_counter()
    conn.execute("BEGIN IMMEDIATE")
    (guard,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'events_no_delete'").fetchone()
    conn.execute("DROP TRIGGER events_no_delete")
    for sid in ids:
        conn.execute("DELETE FROM events WHERE session_id = ?", (sid,))
        for table in ("heads", "snapshots", "leases"):
            conn.execute(f"DELETE FROM {table} WHERE session_id = ?", (sid,))
    conn.execute(guard)
    conn.execute("COMMIT")
    took = time.perf_counter() - started
    conn.close()
    return took


def raw_vacuum(path: Path) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    started = time.perf_counter()
    conn.execute("VACUUM")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    took = time.perf_counter() - started
    conn.close()
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--dir", type=Path, help="Build here (default: a temporary folder, removed after).")
    args = parser.parse_args()
    folder = args.dir or Path(tempfile.mkdtemp(prefix="zagent-prune-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        source = folder / "journal.db"
        started = time.perf_counter()
        build(source, args.events, seed=22)
        print(f"built {args.events:,} events in {time.perf_counter() - started:.1f} s")
        copies = {name: folder / f"{name}.db" for name in ("zagent", "exports", "raw")}
        for copy in copies.values():
            shutil.copy(source, copy)

        with SQLiteJournal(copies["zagent"]) as journal:
            summaries = journal.sessions()
            ends = sorted(s.last_at for s in summaries if s.ended)
            cutoff = ends[len(ends) // 2]
            started = time.perf_counter()
            planned = prune_sessions(journal, cutoff, dry_run=True)
            dry = time.perf_counter() - started
            started = time.perf_counter()
            report = prune_sessions(journal, cutoff)
            real = time.perf_counter() - started
        ids = [s.session_id for s in report.pruned]
        assert [s.session_id for s in planned.pruned] == ids
        print(f"{len(summaries):,} sessions, {len(ends):,} ended; pruning {report.sessions:,} sessions "
              f"({report.events:,} events), {len(report.skipped):,} skipped (not ended)")

        with SQLiteJournal(copies["exports"]) as journal:
            started = time.perf_counter()
            exported = prune_sessions(journal, cutoff, keep_exports=folder / "exports")
            with_exports = time.perf_counter() - started
        assert [s.session_id for s in exported.pruned] == ids
        raw = raw_prune(copies["raw"], ids)

        print("| what | zagent | raw sqlite3 | ratio |\n| --- | ---: | ---: | ---: |")
        print(f"| prune --dry-run (list, statuses, leases) | {dry * 1000:.0f} ms | - | - |")
        print(f"| prune ({report.sessions:,} sessions, {report.events:,} events) | {real * 1000:.0f} ms "
              f"| {raw * 1000:.0f} ms | {real / raw:.2f}x |")
        print(f"| prune --keep-exports | {with_exports * 1000:.0f} ms | {raw * 1000:.0f} ms (no export) "
              f"| {with_exports / raw:.2f}x |")
        before = size(copies["zagent"]), size(copies["raw"])
        with SQLiteJournal(copies["zagent"]) as journal:
            started = time.perf_counter()
            done = vacuum_journal(journal)
            vacuumed = time.perf_counter() - started
        raw_vacuumed = raw_vacuum(copies["raw"])
        print(f"| vacuum | {vacuumed * 1000:.0f} ms | {raw_vacuumed * 1000:.0f} ms | {vacuumed / raw_vacuumed:.2f}x |")
        print(f"\nsizes: source {size(source) / 2**20:.1f} MiB; zagent's copy {before[0] / 2**20:.1f} MiB pruned, "
              f"{done.after / 2**20:.1f} MiB vacuumed (it said {done.before / 2**20:.1f} -> "
              f"{done.after / 2**20:.1f}); raw copy {before[1] / 2**20:.1f} -> {size(copies['raw']) / 2**20:.1f} MiB")
    finally:
        if args.dir is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
