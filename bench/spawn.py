"""The cost of a sub-agent: a spawn (child session created, its first request) against a plain turn.

Three runs of a top-level session with a scripted model (free), on a real SQLite journal:

- ``plain``: the model asks for one ``glob`` call, then answers (two requests, one call);
- ``spawn``: the model asks for one ``spawn``; the child answers at once; the parent answers
  (three requests: what a spawn adds is the child's session and its one request);
- ``fan-out``: one reply spawns N children (default 10) that run side by side.

Each is repeated; medians are printed, the spawn's overhead as the difference with
``plain``, and with ``--profile`` where a spawn's time goes (cProfile, by module).

    python bench/spawn.py [-n 30] [--children 10] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from zagent_core import Engine, Home
from zagent_core.agent.loop import Agent
from zagent_core.config import Config, SpawnConfig
from zagent_core.agent.models import load_model
from zagent_store import SQLiteJournal


def scripts(children: int) -> dict[str, Any]:
    return {
        "plain": [{"tool_calls": [{"name": "glob", "arguments": {"pattern": "*.txt"}}]}, {"text": "done"}],
        "spawn": {"replies": [{"tool_calls": [{"name": "spawn", "arguments": {"task": "say done"}}]},
                              {"text": "done"}],
                  "children": {"*": [{"text": "child done"}]}},
        "fan-out": {"replies": [{"tool_calls": [{"name": "spawn", "arguments": {"task": f"part {n}"}}
                                                for n in range(children)]}, {"text": "done"}],
                    "children": {"*": [{"text": "child done"}]}},
    }


def run_once(engine: Engine, spec: str) -> float:
    started = time.perf_counter()
    with engine.start_session("bench") as session:
        result = Agent(session, load_model(spec), spec=spec).run("go")
    assert result.reason == "idle", result
    return time.perf_counter() - started


def where_time_goes(engine: Engine, spec: str, runs: int) -> None:
    """cProfile of ``runs`` single spawns (a lone spawn runs in the calling thread, so the
    profile sees the child too), by module; SQLite's C calls by name."""
    profile = cProfile.Profile()
    appends = 0
    append = engine.journal.append

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal appends
        appends += 1
        return append(*args, **kwargs)

    engine.journal.append = counted  # type: ignore[method-assign]
    profile.runcall(lambda: [run_once(engine, spec) for _ in range(runs)])
    engine.journal.append = append  # type: ignore[method-assign]
    by_part: dict[str, float] = defaultdict(float)
    for (filename, _, function), (_, _, own, _, _) in pstats.Stats(profile).stats.items():  # type: ignore[attr-defined]
        parts = Path(filename).parts
        name = next((f"{parts[i]}/{parts[i + 1]}" for i in range(len(parts) - 1)
                     if parts[i] in ("zagent_core", "zagent_store", "pydantic", "sqlite_utils", "json")), None)
        if name is None and "sqlite3" in function:
            name = f"sqlite3: {function.split(' of ')[0].strip('{<')}"
        by_part[name or "other (Python, imports, threads)"] += own
    total = sum(by_part.values())
    print(f"\nwhere a spawn's time goes ({runs} runs of the 1-spawn session, {total * 1000 / runs:.1f} ms each "
          f"profiled, {appends / runs:.0f} journal transactions each):")
    for name, seconds in sorted(by_part.items(), key=lambda item: -item[1])[:10]:
        print(f"  {name:<45} {seconds * 1000 / runs:6.2f} ms  {100 * seconds / total:4.1f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=30, help="runs of each")
    parser.add_argument("--children", type=int, default=10, help="children of the fan-out")
    parser.add_argument("--profile", action="store_true", help="say where a spawn's time goes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        (home / "tools").mkdir(parents=True)
        specs = {}
        for name, script in scripts(args.children).items():
            path = Path(tmp) / f"{name}.json"
            path.write_text(json.dumps(script))
            specs[name] = f"scripted:{path}"
        config = Config(spawn=SpawnConfig(max_concurrent=args.children))
        with SQLiteJournal(home / "journal.db") as journal:
            engine = Engine(Home(home), journal, workspace=tmp, config=config)
            for spec in specs.values():
                run_once(engine, spec)  # warm: imports, schema validators
            times: dict[str, list[float]] = {name: [] for name in specs}
            for _ in range(args.n):  # interleaved, so a noisy moment hits every kind alike
                for name, spec in specs.items():
                    times[name].append(run_once(engine, spec))
            median = {name: statistics.median(values) * 1000 for name, values in times.items()}
            print(f"medians of {args.n} runs (scripted model, SQLite journal, synchronous=FULL):")
            print(f"  plain turn (1 glob call, 2 requests)      {median['plain']:7.1f} ms")
            print(f"  1 spawn (child: 1 request)                {median['spawn']:7.1f} ms   "
                  f"+{median['spawn'] - median['plain']:.1f} ms for the child")
            print(f"  fan-out of {args.children} children in one reply        {median['fan-out']:7.1f} ms   "
                  f"{(median['fan-out'] - median['plain']) / args.children:.1f} ms a child beyond a plain turn")
            if args.profile:
                where_time_goes(engine, specs["spawn"], args.n)


if __name__ == "__main__":
    main()
