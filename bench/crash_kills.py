"""SIGKILL the engine at random moments N times (default 1,000), resume, check the invariants.

Prints how many kills landed in each situation and what resume had to settle, beside
the design's invariants (all must hold: the script stops at the first violation).

    python bench/crash_kills.py [-n 1000] [--jobs 2] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from crashcheck import crash, resume_and_check  # noqa: E402


def one(seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        home, workspace = Path(tmp) / "home", Path(tmp) / "workspace"
        workspace.mkdir()
        outcome = crash(home, workspace, after=rng.uniform(0.0, 0.8))
        counts = resume_and_check(home, workspace, outcome)
        counts["finished_before_kill"] = int(outcome.finished)
        counts["acknowledged"] = len(outcome.acknowledged)
        return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=1000, help="how many kills")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    started = time.monotonic()
    totals: Counter[str] = Counter()
    settled: Counter[str] = Counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        for counts in pool.map(one, range(args.seed * 100_000, args.seed * 100_000 + args.n)):
            totals.update(counts)
            settled["kills with something interrupted"] += counts["interrupted"] > 0
            settled["kills after the session had finished"] += counts["finished_before_kill"]
    elapsed = time.monotonic() - started
    print(f"{args.n} SIGKILLs of the engine, each followed by resume ({elapsed:.0f} s, {args.jobs} jobs)")
    print("invariants held after every kill: acknowledged events kept, every started call and task ended once,")
    print("every notify line one note, every wake-up delivered once, versions gap-free, integrity ok\n")
    for key in ("acknowledged", "events", "calls", "tasks", "notes", "wakes", "interrupted"):
        print(f"  {key:<40} {totals[key]:>8}")
    for key, value in settled.items():
        print(f"  {key:<40} {value:>8}")


if __name__ == "__main__":
    main()
