"""File built-ins: read_file of a 100k-line file and edit of a 1 MB file through a real
session, each beside the raw operation and beside the journal appends alone, in one run.

- **read_file**: ``Session.call("read_file", {"path": ...})`` of a 100,000-line file
  (6.3 MB; the call shows its first 2000 lines, hashes the whole file for the gate and
  journals what it showed) beside Python's ``open(path).read()`` of the same file. Each
  call runs in a fresh session (started outside the timer), so it is a real read, not the
  "unchanged since your read" stub.
- **edit**: ``Session.call("edit", ...)`` of one unique line in a 1 MB file (read once;
  the edits then flip the line back and forth, each one passing the gate) beside
  ``open().read()``, ``str.replace`` and ``open("w").write()`` of a copy of the file.
  The built-in also checks the gate (hash), writes atomically (a temporary file, fsync,
  rename, fsync of the folder); a raw row with that fsync is shown too.
- **journal appends alone**: the very batches the built-in's call appended (recorded as
  it ran), appended again to another session of the same journal.

The ratio is built-in / (raw + appends alone); target <= 1.2x. Medians of alternating runs.

    .venv/bin/python bench/builtin_files.py [--quick] [-n CALLS] [--synchronous NORMAL|FULL]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from zagent_core import Engine, Home
from zagent_core.builtins import files
from zagent_store import SQLiteJournal

TARGET = 1.2
READ_LINES = 100_000
EDIT_BYTES = 1024 * 1024


class Stopwatch:
    """Wraps a function and adds the time spent in it to ``total`` (ns)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.total = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter_ns()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.total += time.perf_counter_ns() - start


class Recorder:
    """Wraps ``journal.append``: the time spent in it, and the batches it was given."""

    def __init__(self, journal: SQLiteJournal) -> None:
        self.append = journal.append
        self.total = 0
        self.batches: list[Sequence[Any]] = []

    def __call__(self, session_id: str, events: Sequence[Any], expected_version: int, **kwargs: Any) -> Any:
        self.batches.append(list(events))
        start = time.perf_counter_ns()
        try:
            return self.append(session_id, events, expected_version, **kwargs)
        finally:
            self.total += time.perf_counter_ns() - start


def big_text() -> str:
    return "".join(f"line {n}: the quick brown fox jumps over the lazy dog {n * 7}\n" for n in range(READ_LINES))


def edit_text() -> str:
    filler = "".join(f"    value_{n} = compute({n}, scale=0.5)  # a line of code\n" for n in range(EDIT_BYTES // 50))
    half = len(filler) // 2
    return filler[:half] + "MARKER = 1\n" + filler[half:]


def timed(action: Callable[[], Any]) -> int:
    start = time.perf_counter_ns()
    action()
    return time.perf_counter_ns() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="20 calls of each instead of 100")
    parser.add_argument("-n", "--calls", type=int, help="calls of each kind (default 100, quick 20)")
    parser.add_argument("--synchronous", choices=["NORMAL", "FULL"], default="FULL",
                        help="the journal's synchronous setting (default FULL, zagent's default)")
    args = parser.parse_args()
    calls = args.calls or (20 if args.quick else 100)

    with tempfile.TemporaryDirectory(prefix="zagent-bench-") as tmp:
        home, workspace = Path(tmp) / "home", Path(tmp) / "workspace"
        (home / "tools").mkdir(parents=True)
        workspace.mkdir()
        (workspace / "big.txt").write_text(big_text())
        (workspace / "code.py").write_text(edit_text())
        (workspace / "raw_code.py").write_text(edit_text())
        journal = SQLiteJournal(home / "journal.db", synchronous=args.synchronous)
        engine = Engine(Home(home), journal, workspace=workspace)
        recorder = Recorder(journal)
        journal.append = recorder  # type: ignore[method-assign]
        # Where a call's own time goes: the gate's hash, and the fsync of an atomic write.
        hashing = files.stream_hash = Stopwatch(files.stream_hash)  # type: ignore[assignment]
        syncing = Stopwatch(os.fsync)
        files.os.fsync = syncing  # type: ignore[attr-defined]
        scratch = engine.start_session("bench-appends")
        scratch_version = [scratch.state.version]
        scratch.release()

        def appends_alone(batches: list[Sequence[Any]]) -> int:
            start = time.perf_counter_ns()
            for batch in batches:
                recorder.append(scratch.session_id, batch, scratch_version[0])
                scratch_version[0] += len(batch)
            return time.perf_counter_ns() - start

        def builtin(session: Any, tool: str, arguments: dict[str, Any], rows: dict[str, list[int]]) -> None:
            recorder.batches, before = [], recorder.total
            hashed, synced = hashing.total, syncing.total
            rows["builtin"].append(timed(lambda: _ok(session.call(tool, arguments))))
            rows["in_call"].append(recorder.total - before)
            rows["hash"].append(hashing.total - hashed)
            rows["fsync"].append(syncing.total - synced)
            rows["appends"].append(appends_alone(recorder.batches))

        # -- read_file ---------------------------------------------------------------------
        big = str(workspace / "big.txt")
        read: dict[str, list[int]] = {"builtin": [], "raw": [], "appends": [], "in_call": [], "hash": [], "fsync": []}

        def read_builtin() -> None:
            session = engine.start_session("bench-read")
            builtin(session, "read_file", {"path": "big.txt"}, read)
            session.release()

        def read_raw() -> None:
            def raw() -> None:
                with open(big) as handle:
                    handle.read()
            read["raw"].append(timed(raw))

        _alternate(read_builtin, read_raw, calls, read)

        # -- edit --------------------------------------------------------------------------
        edit: dict[str, list[int]] = {"builtin": [], "raw": [], "raw_fsync": [], "appends": [], "in_call": [],
                                      "hash": [], "fsync": []}
        session = engine.start_session("bench-edit")
        _ok(session.call("read_file", {"path": "code.py"}))
        flip = [1]

        def edit_builtin() -> None:
            old, new = f"MARKER = {flip[0]}", f"MARKER = {3 - flip[0]}"
            flip[0] = 3 - flip[0]
            builtin(session, "edit", {"path": "code.py", "old_string": old, "new_string": new}, edit)

        raw_flip = [1]

        def edit_raw(sync: bool) -> None:
            old, new = f"MARKER = {raw_flip[0]}", f"MARKER = {3 - raw_flip[0]}"
            raw_flip[0] = 3 - raw_flip[0]
            path = workspace / "raw_code.py"

            def raw() -> None:
                with open(path) as handle:
                    text = handle.read()
                with open(path, "w") as handle:
                    handle.write(text.replace(old, new, 1))
                    if sync:
                        handle.flush()
                        os.fsync(handle.fileno())
            edit["raw_fsync" if sync else "raw"].append(timed(raw))

        def both_raw() -> None:
            edit_raw(False)
            edit_raw(True)

        _alternate(edit_builtin, both_raw, calls, edit)
        session.release()
        journal.close()

    ms = 1e-6
    med = {name: {k: statistics.median(v) * ms for k, v in rows.items()} for name, rows in
           (("read", read), ("edit", edit))}
    print(f"file built-ins vs the raw operation (Python {sys.version.split()[0]}, {os.cpu_count()} cpus, "
          f"journal synchronous={args.synchronous}); {calls} calls of each, alternating; medians in ms")
    print()
    header = (f"{'':<34} {'built-in':>9} {'raw op':>8} {'appends':>8} {'raw+app':>8} {'ratio':>7}"
              f" {'in call: appends':>17} {'hash':>6} {'fsync':>6}  target <= {TARGET}x")
    print(header)
    print("-" * len(header))
    for label, row, raw_key in [
        (f"read_file, {READ_LINES:,} lines (6.3 MB)", med["read"], "raw"),
        (f"edit, {EDIT_BYTES // 1024} KiB file", med["edit"], "raw"),
        ("edit, vs raw write + fsync", med["edit"], "raw_fsync"),
    ]:
        base = row[raw_key] + row["appends"]
        ratio = row["builtin"] / base
        verdict = "ok" if ratio <= TARGET else f"MISSED by {(ratio / TARGET - 1) * 100:.0f}%"
        print(f"{label:<34} {row['builtin']:>9.2f} {row[raw_key]:>8.2f} {row['appends']:>8.2f} {base:>8.2f} "
              f"{ratio:>6.2f}x {row['in_call']:>17.2f} {row['hash']:>6.2f} {row['fsync']:>6.2f}  {verdict}")
    print()
    print("appends: the call's journal batches appended again, alone. in call: the time the built-in's call spent in")
    print("its journal appends, in the gate's XXH3-64 hash (read_file: the 6.3 MB file once; edit: the 1 MB file before")
    print("and after) and in fsync (edit's atomic write).")


def _ok(result: Any) -> None:
    assert not result.is_error, result.output


def _alternate(first: Callable[[], None], second: Callable[[], None], calls: int,
               rows: dict[str, list[int]]) -> None:
    """Warm up, then run both ``calls`` times, flipping which goes first."""
    for _ in range(3):
        first()
        second()
    for values in rows.values():
        values.clear()
    gc.collect()
    for i in range(calls):
        if i % 2:
            second()
            first()
        else:
            first()
            second()


if __name__ == "__main__":
    main()
