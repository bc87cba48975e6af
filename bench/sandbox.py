"""The sandbox's cost: a trivial foreground call, confined and not, beside raw ``subprocess.run``.

Two calls, each made through ``Session.call`` (validation, folders, two journal
transactions, the process, the result):

- a folder tool whose program is ``/bin/true`` (``input: args_json``, so no stdin);
- ``shell`` with the command ``true``.

Each runs under four set-ups, in separate engines over one journal:

- ``no bubblewrap``: processes as zagent started them before the sandbox (bubblewrap
  hidden from the engine, as on a host without it);
- ``mode off``: in a PID namespace of their own that dies with them (``sandbox.mode: off``);
- ``workspace-write``: also confined (``sandbox.tools: all``, so the folder tool is too);
- and the same argv run by ``subprocess.run`` with ``capture_output=True``, the baseline.

The set-ups alternate within each round, in an order that rotates every round. The table
shows the median (and the fastest) milliseconds per call, and what the sandbox adds over
``mode off`` and over no bubblewrap, median to median (target: at most 10 ms more per call).
On a loaded machine the medians of the sandboxed calls grow more than the others: each call
is a new session (``setsid``), a new scheduler autogroup whose several processes hand over
to each other; the fastest calls show the cost without the contention.

    /work/main/.venv/bin/python bench/sandbox.py [--quick] [-n CALLS]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import zagent_core.tools.sandbox as sandbox
from zagent_core import Engine, Home
from zagent_core.config import Config, SandboxConfig
from zagent_store import SQLiteJournal

TARGET_MS = 10.0
TRUE = "/bin/true"
MANIFEST = {"description": "Do nothing. Use to measure.", "command": [TRUE], "input": "args_json",
            "parameters": {"type": "object", "properties": {}, "additionalProperties": False}}


@contextlib.contextmanager
def no_bubblewrap() -> Iterator[None]:
    """The engine finds no bubblewrap while the block runs (as on a host without it)."""
    found = sandbox._found
    sandbox._found = lambda: sandbox._Found(None, "hidden by the benchmark")  # type: ignore[assignment]
    try:
        yield
    finally:
        sandbox._found = found  # type: ignore[assignment]


def timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=200, help="calls per kind and set-up (default 200)")
    parser.add_argument("--quick", action="store_true", help="20 calls")
    args = parser.parse_args()
    calls = 20 if args.quick else args.n
    why_not = sandbox.unavailable()
    if why_not is not None:
        sys.exit(f"no sandbox on this host: {why_not}")

    with tempfile.TemporaryDirectory(prefix="zagent-bench-sandbox-") as root:
        home, workspace = Path(root) / "home", Path(root) / "workspace"
        (home / "tools" / "nothing").mkdir(parents=True)
        (home / "tools" / "nothing" / "nothing.json").write_text(json.dumps(MANIFEST))
        workspace.mkdir()
        journal = SQLiteJournal(home / "journal.db")
        sessions = {}
        for name, config in (("no bubblewrap", SandboxConfig(mode="off")), ("mode off", SandboxConfig(mode="off")),
                             ("workspace-write", SandboxConfig(tools="all"))):
            engine = Engine(Home(home), journal, workspace=workspace, config=Config(sandbox=config))
            sessions[name] = engine.start_session("bench")
        kinds: dict[str, tuple[str, dict[str, str], list[str]]] = {
            "folder tool (/bin/true)": ("nothing", {}, [TRUE]),
            "shell (true)": ("shell", {"command": "true"}, ["/bin/sh", "-c", "true"]),
        }
        setups = ["subprocess.run", "no bubblewrap", "mode off", "workspace-write"]
        times = {(kind, setup): [] for kind in kinds for setup in setups}

        def one(kind: str, setup: str) -> float:
            tool, arguments, argv = kinds[kind]
            if setup == "subprocess.run":
                return timed(lambda: subprocess.run(argv, cwd=workspace, capture_output=True, check=True))
            if setup == "no bubblewrap":
                with no_bubblewrap():
                    return timed(lambda: sessions[setup].call(tool, arguments))
            return timed(lambda: sessions[setup].call(tool, arguments))

        for kind in kinds:  # warm up: imports, first folders, the page cache
            for setup in setups:
                one(kind, setup)
        gc.disable()
        for round_ in range(calls):
            order = setups[round_ % len(setups):] + setups[:round_ % len(setups)]
            for kind in kinds:
                for setup in order:
                    times[kind, setup].append(one(kind, setup))
        gc.enable()
        for session in sessions.values():
            session.end()
        journal.close()

    print(f"{calls} calls per kind and set-up; milliseconds per call, median (fastest)")
    print(f"{'':26}" + "".join(f"{setup:>20}" for setup in setups) + f"{'added over off':>16}"
          + f"{'over no bwrap':>16}")
    worst = 0.0
    for kind in kinds:
        medians = {setup: statistics.median(times[kind, setup]) for setup in setups}
        fastest = {setup: min(times[kind, setup]) for setup in setups}
        added = medians["workspace-write"] - medians["mode off"]
        over_none = medians["workspace-write"] - medians["no bubblewrap"]
        worst = max(worst, over_none)
        print(f"{kind:26}" + "".join(f"{f'{medians[s]:.2f} ({fastest[s]:.2f})':>20}" for s in setups)
              + f"{added:>+16.2f}{over_none:>+16.2f}")
    verdict = "ok" if worst <= TARGET_MS else "missed"
    print(f"target: the sandbox adds <= {TARGET_MS:g} ms per call over no bubblewrap: {verdict} (worst {worst:+.2f} ms)")


if __name__ == "__main__":
    main()
