"""``zagent sessions show`` of a long session, whole process, beside a raw read process (issue 27).

Builds a journal with ``journal_scale.py``'s generator holding one long session (default
100,000 events, among others running at the same time) with the snapshot the engine leaves
at the end of its last turn, then times, in rotating rounds:

* ``zagent sessions show SID``, its output piped (not a terminal: the whole conversation,
  no pager), from process start to its first output line and to its end;
* ``zagent sessions show SID --last 3``: what a terminal shows of it by default (minus the
  pager);
* raw: a ``python -c`` process that opens the SQLite file, ``SELECT``s the session's rows,
  ``json.loads`` each and prints a line per row (``resume_scale.py``'s ``RAW_SHOW``);
* ``python -c pass``, for context.

Targets: the whole show <= 1.5x raw, first output <= 200 ms. Every process starts with its
bytecode cached (in the temp dir). ``--profile`` then prints cProfile's top functions of
one ``sessions show`` run in this process.

    $PY bench/sessions_show.py [--events N] [-n RUNS] [--profile]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import os
import pstats
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import journal_scale  # noqa: E402  (the generator: bench/journal_scale.py)
from resume_scale import RAW_SHOW  # noqa: E402

TARGET_RATIO, TARGET_FIRST_MS = 1.5, 200.0


def env(pycache: Path) -> dict[str, str]:
    """Bytecode cached (in the temp dir, not the checkout), as a user's install has it."""
    # PYTHONUNBUFFERED (set on the development machines) would make raw's every print a system call.
    drop = ("PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED", "ZAGENT_HOME")
    base = {k: v for k, v in os.environ.items() if k not in drop}
    return base | {"PYTHONPYCACHEPREFIX": str(pycache), "NO_COLOR": "1"}


def run(argv: list[str], environ: dict[str, str], cwd: Path) -> tuple[float, float, int]:
    """(ms to the first line on stdout, ms to the end, lines) of one process."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environ, cwd=cwd)
    assert proc.stdout is not None
    first_line = proc.stdout.readline()
    first = (time.perf_counter() - start) * 1000
    rest = proc.stdout.read()
    err = proc.stderr.read() if proc.stderr else b""
    code = proc.wait()
    total = (time.perf_counter() - start) * 1000
    if code != 0:
        raise SystemExit(f"{' '.join(argv)} exited {code}:\n{err.decode(errors='replace')[-2000:]}")
    return first if first_line else total, total, rest.count(b"\n") + bool(first_line)


def profile(home: Path, sid: str, top: int) -> None:
    from zagent_cli.main import cli

    out, profiler = io.StringIO(), cProfile.Profile()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        profiler.runcall(cli, ["--home", str(home), "sessions", "show", sid], prog_name="zagent")
    for order in ("cumulative", "tottime"):
        print(f"\ncProfile of one `sessions show` in this process, top {top} by {order}:")
        stats = pstats.Stats(profiler, stream=sys.stdout)
        stats.sort_stats(order).print_stats(top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=100_000, help="events of the long session (default 100,000)")
    parser.add_argument("-n", "--runs", type=int, default=7, help="rounds (default 7)")
    parser.add_argument("--profile", action="store_true", help="cProfile one show in this process")
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--seed", type=int, default=2727)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="zagent-show-") as tmp_name:
        tmp = Path(tmp_name)
        home = tmp / "home"
        home.mkdir()
        path = home / "journal.db"
        built = journal_scale.build(path, args.events + args.events // 10, args.seed, extra=[(args.events, "idle")])
        (sid,) = built["extra_ids"]
        journal_scale.snapshot_sessions(path, [sid], open_only=False)
        with sqlite3.connect(path) as conn:
            length = conn.execute("SELECT count(*) FROM events WHERE session_id = ?", (sid,)).fetchone()[0]
            snapshot = conn.execute("SELECT max(version) FROM snapshots WHERE session_id = ?", (sid,)).fetchone()[0]
        print(f"sessions show of a {length:,}-event session (snapshot at {snapshot:,}) in a {built['events']:,}-event "
              f"journal; SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}, {os.cpu_count()} cpus, "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
        environ = env(tmp / "pycache")
        py = sys.executable
        commands = {
            "zagent sessions show SID": [py, "-m", "zagent_cli", "--home", str(home), "sessions", "show", sid],
            "zagent sessions show SID --last 3": [py, "-m", "zagent_cli", "--home", str(home), "sessions", "show",
                                                  sid, "--last", "3"],
            "raw: python, sqlite3, json.loads": [py, "-c", RAW_SHOW, str(path), sid],
            "python -c pass": [py, "-c", "pass"],
        }
        lines = {}
        for name, argv in list(commands.items()):  # warm-up: bytecode
            try:
                lines[name] = run(argv, environ, tmp)[2]
            except SystemExit as exc:  # an older zagent (the "before" side) has no --last
                print(f"left out: {name} ({str(exc).splitlines()[-1]})")
                del commands[name]
        firsts: dict[str, list[float]] = {name: [] for name in commands}
        totals: dict[str, list[float]] = {name: [] for name in commands}
        names = list(commands)
        for round_ in range(args.runs):  # rotating order, so drift hits every command alike
            for name in names[round_ % len(names):] + names[:round_ % len(names)]:
                first, total, _ = run(commands[name], environ, tmp)
                firsts[name].append(first)
                totals[name].append(total)

        raw = statistics.median(totals["raw: python, sqlite3, json.loads"])
        print(f"\nmedians of {args.runs} rounds; ratio: total / raw's total\n")
        print(f"{'command':<36} {'first line':>11} {'total':>10} {'ratio':>6} {'lines':>8}")
        for name in commands:
            first, total = statistics.median(firsts[name]), statistics.median(totals[name])
            print(f"{name:<36} {first:8.1f} ms {total:7.1f} ms {total / raw:5.2f}x {lines[name]:>8,}")
        whole = statistics.median(totals["zagent sessions show SID"])
        first = statistics.median(firsts["zagent sessions show SID"])
        print(f"\nwhole show {whole / raw:.2f}x raw (target <= {TARGET_RATIO}x): "
              f"{'ok' if whole / raw <= TARGET_RATIO else 'MISSED'}; first output {first:.0f} ms "
              f"(target <= {TARGET_FIRST_MS:.0f} ms): {'ok' if first <= TARGET_FIRST_MS else 'MISSED'}")
        if args.profile:
            profile(home, sid, args.top)


if __name__ == "__main__":
    main()
