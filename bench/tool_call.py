"""Tool call: a foreground call through ``Session.call`` beside raw ``subprocess.run``.

A temp home holds one trivial Python tool (``command: [sys.executable, "tool.py"]``,
``input: stdin_json``, ``output: text``; it reads its JSON arguments and prints "ok").
Each iteration makes one call through the engine (argument validation, output and
scratch folders, the environment, two journal transactions, the process, the result)
and one ``subprocess.run`` of the very same argv with the same stdin bytes, the same
cwd and ``capture_output=True``. The two alternate, and which goes first flips every
iteration. The table shows the median (and mean) milliseconds per call, the ratio, and
where the engine's time went: journal appends, the process (``run_process``, of which
the /proc scan that checks the tool left nothing behind), and everything else.

    /root/.pyenv/versions/3.11.7/bin/python bench/tool_call.py [--quick] [-n CALLS] [--profile]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import zagent_core.session.host as engine_module
import zagent_core.tools.runner as runner_module
from zagent_core import Engine, Home
from zagent_store import SQLiteJournal

TARGET = 1.1
ARGUMENTS = {"name": "world"}

TOOL_SOURCE = """\
import json
import sys

json.load(sys.stdin)
print("ok")
"""

MANIFEST = {
    "description": "Answer ok. Use to check that tools run.",
    "parameters": {
        "type": "object",
        "properties": {"name": {"type": "string", "description": "Who is asking."}},
        "required": ["name"],
        "additionalProperties": False,
    },
    "command": [sys.executable, "tool.py"],
    "input": "stdin_json",
    "output": "text",
}


class Stopwatch:
    """Wraps a callable and adds the time spent in it to ``total`` (ns)."""

    def __init__(self, fn):
        self.fn = fn
        self.total = 0

    def __call__(self, *args, **kwargs):
        start = time.perf_counter_ns()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.total += time.perf_counter_ns() - start


def make_home(root: Path) -> tuple[Path, Path]:
    home, workspace = root / "home", root / "workspace"
    folder = home / "tools" / "ping"
    folder.mkdir(parents=True)
    workspace.mkdir()
    (folder / "ping.json").write_text(json.dumps(MANIFEST, indent=2))
    (folder / "tool.py").write_text(TOOL_SOURCE)
    return home, workspace


def summary(values: list[float]) -> tuple[float, float]:
    return statistics.median(values), statistics.mean(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="30 calls of each instead of 200")
    parser.add_argument("-n", "--calls", type=int, help="calls of each kind (default 200, quick 30)")
    parser.add_argument("--profile", action="store_true",
                        help="afterwards, profile the engine's calls with cProfile and print the top functions")
    parser.add_argument("--synchronous", choices=["NORMAL", "FULL"], default="NORMAL",
                        help="the journal's synchronous setting (default NORMAL, zagent's default)")
    args = parser.parse_args()
    calls = args.calls or (30 if args.quick else 200)

    with tempfile.TemporaryDirectory(prefix="zagent-bench-") as tmp:
        home_path, workspace = make_home(Path(tmp))
        journal = SQLiteJournal(home_path / "journal.db", synchronous=args.synchronous)
        engine = Engine(Home(home_path), journal, workspace=workspace)
        tools = engine.load_tools()
        assert "ping" in tools.tools, tools.problems
        tool = tools.tools["ping"]
        argv = list(tool.argv_template)
        stdin = json.dumps(ARGUMENTS, ensure_ascii=False).encode()  # exactly what the engine sends

        # Instrument (the timers cost well under a microsecond per call).
        # (Patch points are the engine's module globals: a row stays at 0 if one is renamed.)
        journal.append = appends = Stopwatch(journal.append)  # type: ignore[method-assign]
        process = Stopwatch(getattr(engine_module, "run_process", None))
        if process.fn is not None:
            engine_module.run_process = process
        proc_scan = Stopwatch(getattr(runner_module, "_group_alive", None))
        if proc_scan.fn is not None:
            runner_module._group_alive = proc_scan

        def zagent_call(session) -> tuple[float, float, float, float]:
            a0, p0, s0 = appends.total, process.total, proc_scan.total
            start = time.perf_counter_ns()
            result = session.call("ping", ARGUMENTS)
            elapsed = time.perf_counter_ns() - start
            assert not result.is_error and result.output.strip() == "ok", result
            return elapsed, appends.total - a0, process.total - p0, proc_scan.total - s0

        def raw_call() -> float:
            start = time.perf_counter_ns()
            done = subprocess.run(argv, input=stdin, capture_output=True, cwd=workspace)
            elapsed = time.perf_counter_ns() - start
            assert done.returncode == 0 and done.stdout.strip() == b"ok", done
            return elapsed

        zagent_ns: list[int] = []
        raw_ns: list[int] = []
        parts: dict[str, list[int]] = {"journal": [], "process": [], "scan": []}
        with engine.start_session(origin="bench", tools=tools) as session:
            for _ in range(5):  # warm-up: page cache, pydantic, jsonschema, sqlite statement cache
                zagent_call(session)
                raw_call()
            gc.collect()
            for i in range(calls):
                if i % 2:
                    raw_ns.append(raw_call())
                    timed = zagent_call(session)
                else:
                    timed = zagent_call(session)
                    raw_ns.append(raw_call())
                zagent_ns.append(timed[0])
                parts["journal"].append(timed[1])
                parts["process"].append(timed[2])
                parts["scan"].append(timed[3])
            if args.profile:
                import cProfile
                import pstats

                profiler = cProfile.Profile()
                profiler.enable()
                for _ in range(min(calls, 50)):
                    zagent_call(session)
                profiler.disable()
        journal.close()

    ms = 1e-6
    z_med, z_mean = summary([v * ms for v in zagent_ns])
    r_med, r_mean = summary([v * ms for v in raw_ns])
    ratio = z_med / r_med
    verdict = "ok" if ratio <= TARGET else f"MISSED by {(ratio / TARGET - 1) * 100:.1f}%"

    print(f"zagent foreground tool call vs raw subprocess.run (Python {sys.version.split()[0]}, "
          f"{os.cpu_count()} cpus, journal synchronous={args.synchronous})")
    print(f"{calls} calls of each, alternating; tool: {' '.join(Path(a).name for a in argv)}, stdin {stdin.decode()}, "
          f"text output; target <= {TARGET}x")
    print()
    header = f"{'':<34} {'median ms':>10} {'mean ms':>9}"
    print(header)
    print("-" * len(header))
    print(f"{'zagent Session.call':<34} {z_med:>10.2f} {z_mean:>9.2f}")
    print(f"{'raw subprocess.run':<34} {r_med:>10.2f} {r_mean:>9.2f}")
    print(f"{'ratio (medians)':<34} {ratio:>9.3f}x {z_mean / r_mean:>8.3f}x  target <= {TARGET}x: {verdict}")
    print(f"{'difference':<34} {z_med - r_med:>10.2f} {z_mean - r_mean:>9.2f}")
    print()
    other = [z - j - p for z, j, p in zip(zagent_ns, parts["journal"], parts["process"])]
    print("zagent call, broken down (median ms per call):")
    rows = [
        ("journal appends (2 transactions)", parts["journal"]),
        ("run_process (spawn, I/O, exit, cleanup)", parts["process"]),
        ("  of which _group_alive /proc scan", parts["scan"]),
        ("the rest (validation, folders, env, hash, result)", other),
    ]
    for label, values in rows:
        print(f"  {label:<50} {statistics.median(values) * ms:>6.2f}")
    print(f"  {'raw subprocess.run, for comparison':<50} {r_med:>6.2f}")
    if args.profile:
        print()
        print(f"cProfile of {min(calls, 50)} engine calls, by own time (waiting for the process is select/poll):")
        pstats.Stats(profiler, stream=sys.stdout).strip_dirs().sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
