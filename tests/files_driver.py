"""A session of file built-ins for crash tests: run it, SIGKILL it, then resume and check.

``python files_driver.py HOME WORKSPACE read PATH...`` reads each file, prints
``SESSION <id>`` and ``READ`` once the reads are journaled, then waits on stdin (a crash
test kills it there). ``... write PATH SIZE`` writes PATH over and over, alternating two
contents of SIZE bytes (``a`` lines, then ``b`` lines), and prints ``WROTE <n>`` after
each: a kill lands in the middle of a write.
"""

from __future__ import annotations

import sys
from pathlib import Path

from zagent_core import Engine, Home
from zagent_store import SQLiteJournal


def content(letter: str, size: int) -> str:
    """``size`` bytes of lines of ``letter``: the two contents a write alternates between."""
    line = letter * 63 + "\n"
    return (line * (size // len(line) + 1))[:size]


def main(home: Path, workspace: Path, mode: str, rest: list[str]) -> None:
    engine = Engine(Home(home), SQLiteJournal(home / "journal.db"), workspace=workspace)
    session = engine.start_session("files-crash-test")
    print("SESSION", session.session_id, flush=True)
    if mode == "read":
        for path in rest:
            assert not session.call("read_file", {"path": path}).is_error
        print("READ", flush=True)
        sys.stdin.read()
        return
    path, size = rest[0], int(rest[1])
    texts = [content("a", size), content("b", size)]
    for n in range(1_000_000):
        result = session.call("write_file", {"path": path, "content": texts[n % 2]})
        assert not result.is_error, result.output
        print("WROTE", n, flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4:])
