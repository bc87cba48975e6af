"""Notes flood: reading a notify file of N lines as notes, beside reading it raw.

A temp notify file holds N short lines (``line 123\\n``, with a blank line every tenth).
``notes`` reads it the way the engine does: ``read_notes`` batch after batch, each from the
offset of the last note, as each batch would be journaled. ``raw`` reads the same file and
splits it into stripped, non-blank lines with plain Python (``read_bytes().split``), the
least any reader must do. Both run in the same process, alternating, best of ``--repeat``.

``--engine M`` also measures M notes end to end (a foreground tool writes them, the
engine journals them): that adds the journal and the session's fold, which are not the
reader's (the fold is the performance issue's).

    /root/.pyenv/versions/3.11.7/bin/python bench/notes_flood.py [-n LINES] [--repeat R] [--engine M]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from zagent_core import Engine, Home
from zagent_core.config import Config
from zagent_core.tools.notes import read_notes
from zagent_store import SQLiteJournal


def write_file(path: Path, lines: int) -> None:
    path.write_bytes(b"".join(b"\n" if i % 10 == 9 else b"line %d\n" % i for i in range(lines)))


def read_as_notes(path: Path) -> int:
    offset, count = 0, 0
    while (batch := read_notes(path, offset)).notes:
        count += len(batch.notes)
        offset = batch.notes[-1].offset
    return count


def read_raw(path: Path) -> int:
    return sum(1 for line in path.read_bytes().split(b"\n") if line.strip())


def best(action, path: Path, repeat: int) -> tuple[float, int]:
    times, count = [], 0
    for _ in range(repeat):
        started = time.perf_counter()
        count = action(path)
        times.append(time.perf_counter() - started)
    return min(times), count


def end_to_end(notes: int) -> float:
    with tempfile.TemporaryDirectory() as temp:
        home = Path(temp) / "home"
        tool = home / "tools" / "flood"
        tool.mkdir(parents=True)
        (tool / "flood.json").write_text(
            '{"description": "floods notes", "command": ["%s", "flood.py"]}' % sys.executable)
        (tool / "flood.py").write_text(
            "import os\nwith open(os.environ['ZAGENT_NOTIFY_FILE'], 'a') as f:\n"
            f"    f.write(''.join(f'line {{i}}\\n' for i in range({notes})))\n")
        with SQLiteJournal(home / "journal.db") as journal:
            session = Engine(Home(home), journal, workspace=temp, config=Config()).start_session("bench")
            started = time.perf_counter()
            session.call("flood", {})
            took = time.perf_counter() - started
            assert session.state.notes_received == notes
            return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--lines", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--engine", type=int, default=0, metavar="M", help="also journal M notes end to end")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temp:
        path = Path(temp) / "notify"
        write_file(path, args.lines)
        size = path.stat().st_size
        raw, raw_count = best(read_raw, path, args.repeat)
        notes, count = best(read_as_notes, path, args.repeat)
    assert count == raw_count, (count, raw_count)
    print(f"{args.lines} lines, {size / 1e6:.1f} MB, {count} notes (best of {args.repeat})")
    print(f"| reader | {count / notes:,.0f} notes/s | {notes:.2f} s |")
    print(f"| raw split | {raw_count / raw:,.0f} lines/s | {raw:.2f} s |")
    print(f"| ratio | {notes / raw:.1f}x | |")
    if args.engine:
        took = end_to_end(args.engine)
        print(f"| engine, {args.engine} notes journaled | {args.engine / took:,.0f} notes/s | {took:.2f} s |")


if __name__ == "__main__":
    main()
