"""CLI start-up against bare interpreter start-up: issue 9's targets.

``zagent --help`` (target <= 2x) and ``zagent --home H tools list`` with 50 tools (target
<= 4x) beside ``python -c pass`` (and ``python -c "import click"``, the floor of any click
command line), each run with ``sys.executable`` (the console script is
a Python file, so ``sys.executable <bin>/zagent`` is what the shebang runs), round-robin,
the median of many runs, in the two ways users start Python:

* ``PYTHONDONTWRITEBYTECODE=1``: zagent's own modules have no ``__pycache__`` and are
  compiled on every start (the stdlib and site-packages have theirs from installation);
* unset, after a warm-up run that writes the bytecode cache.

The home and the copies of zagent's packages that make both cases certain come from
``bench/tools_list.py``, which also breaks ``tools list`` down further. The last part lists
what each command imports beyond ``python -c pass`` (``-X importtime``, cached bytecode).

    /root/.pyenv/versions/3.11.7/bin/python bench/cli_startup.py [--quick] [-n RUNS]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tools_list import SET, UNSET, ZAGENT, environments, make_home, time_run

TARGETS = {"zagent --help": 2.0, "zagent tools list": 4.0}
BASELINE = "python -c pass"


def imported(argv: list[str], env: dict[str, str]) -> dict[str, int]:
    """Module -> cumulative µs of one ``-X importtime`` run, for what is imported at depth 0
    (by the script or a command itself, not by another module)."""
    done = subprocess.run([sys.executable, "-X", "importtime", *argv], env=env, cwd=env["BENCH_CWD"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True)
    modules = {}
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "cumulative" not in line:
            _self, cumulative, name = line[len("import time:"):].split("|")
            if not name[1:].startswith("  "):
                modules[name.strip()] = int(cumulative)
    return modules


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="7 runs of each instead of 31")
    parser.add_argument("-n", "--runs", type=int, help="runs of each command per environment")
    parser.add_argument("--tools", type=int, default=50, help="tool folders in the home (default 50)")
    args = parser.parse_args()
    runs = args.runs or (7 if args.quick else 31)
    script = [sys.executable, str(ZAGENT)]

    with tempfile.TemporaryDirectory(prefix="zagent-bench-") as tmp:
        home = make_home(Path(tmp), args.tools)
        commands = {
            BASELINE: [sys.executable, "-c", "pass"],
            # No target: the floor of any click command line, for reading the ratios.
            'python -c "import click"': [sys.executable, "-c", "import click"],
            "zagent --help": [*script, "--help"],
            "zagent tools list": [*script, "--home", str(home), "tools", "list"],
        }
        envs = environments(Path(tmp))
        for argv in commands.values():  # warm-up: bytecode (unset), the home's tools list cache
            for env in envs.values():
                time_run(argv, env)
        timings: dict[tuple[str, str], list[float]] = {(e, c): [] for e in envs for c in commands}
        for _ in range(runs):  # round-robin, so drift hits every command alike
            for env_name, env in envs.items():
                for name, argv in commands.items():
                    timings[(env_name, name)].append(time_run(argv, env))
        bare = set(imported(["-c", "pass"], envs[UNSET]))
        extra = {name: imported(argv[1:], envs[UNSET]) for name, argv in commands.items() if name != BASELINE}

    medians = {key: statistics.median(values) for key, values in timings.items()}
    print(f"zagent start-up vs {BASELINE} (Python {sys.version.split()[0]}); median of {runs} runs, round-robin")
    print()
    print(f"{'command':<26}" + "".join(f"{name:>36}" for name in (SET, UNSET)))
    for name in commands:
        cells = []
        for env_name in (SET, UNSET):
            ms = medians[(env_name, name)]
            ratio = ms / medians[(env_name, BASELINE)]
            verdict = "" if name not in TARGETS else (" ok" if ratio <= TARGETS[name] else " MISSED")
            cells.append(f"{ms:8.1f} ms {ratio:5.2f}x{verdict:<7}")
        target = f"  (target <= {TARGETS[name]:g}x)" if name in TARGETS else ""
        print(f"{name:<26}" + "".join(f"{cell:>36}" for cell in cells) + target)
    for name, modules in extra.items():
        top = sorted(((us, m) for m, us in modules.items() if m not in bare), reverse=True)[:8]
        print(f"\n{name}: what it imports beyond {BASELINE} (cumulative ms, bytecode cached):")
        print("  " + ", ".join(f"{m} {us / 1000:.1f}" for us, m in top))


if __name__ == "__main__":
    main()
