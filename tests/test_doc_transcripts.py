"""The ``$ zagent`` transcripts of the docs are what zagent prints (tests/transcripts.py runs them).

Each page runs in a demo folder made as docs/cli.md says its examples were made: a copy of
``examples/home`` as the home, the scripts of ``examples/scripts/`` beside it, and an empty
work folder as the current one. What the page shows that depends on the machine or the run
(token estimates, counts of a journal that other examples filled, sizes) is normalised, and
so are the tables of SQL clients (sqlite-utils, sqlite3): their column widths and the
numbers of more than one digit in them (durations, pids, offsets).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from test_builtin_search import RG
from test_docs import DOCS, _normalize
from transcripts import Demo, blocks, run_page

REPO = DOCS.parent

_VARIES = [
    # A scripted model's token counts follow the length of what it was sent (paths included).
    (re.compile(r"\b\d+ tokens in, \d+ out\b"), "<n> tokens in, <n> out"),
    (re.compile(r'"(input_tokens|output_tokens)": \d+'), r'"\1": <n>'),
    # The size of a journal the page's other examples filled.
    (re.compile(r"\bok \(\d+ events, \d+ sessions\b"), "ok (<n> events, <n> sessions"),
    (re.compile(r'^    "(events|sessions)": \d+', re.M), r'    "\1": <n>'),
    (re.compile(r'"ripgrep": (?:"[^"]*"|null)'), '"ripgrep": "<rg>"'),
    (re.compile(r"\b\d+\.\d KiB before, \d+\.\d KiB after"), "<n> KiB before, <n> KiB after"),
    # A trace id is a hash of its session's id, which each run makes anew.
    (re.compile(r"\btrace [0-9a-f]{32}\b"), "trace <id>"),
]


#: A row of a table a SQL client prints: cells apart by two spaces or more.
_TABLE_ROW = re.compile(r"\S {2,}\S.* {2,}")


def _table_row(line: str) -> str:
    if not _TABLE_ROW.search(line):
        return line
    return re.sub(r"\b\d{2,}\b", "<n>", re.sub(r"-{2,}", "--", re.sub(r" {2,}", "  ", line.strip())))


def _varies(text: str) -> str:
    for pattern, replacement in _VARIES:
        text = pattern.sub(replacement, text)
    return text


def _varies_in_tables(text: str) -> str:
    # Ids and times first (their digits are not a duration's).
    return "\n".join(_table_row(_normalize(line)) for line in _varies(text).splitlines())


def demo_for(tmp: Path, normalize: Callable[[str], str] = _varies) -> Demo:
    """The demo folder; a page's givens find a clean copy of ``examples/home`` in
    ``$EXAMPLE_HOME`` (for another home), and the repository in ``$ZAGENT_REPO``."""
    demo = Demo.make(tmp, normalize)
    # What running the README's example left in the clone's examples/home is not the example.
    example = shutil.copytree(REPO / "examples" / "home", tmp / "example-home",
                              ignore=shutil.ignore_patterns("journal.db*", "sessions", "chat_history"))
    shutil.copytree(example, demo.root / "home")
    shutil.copytree(REPO / "examples" / "scripts", demo.root / "scripts")
    demo.env |= {"ZAGENT_RG": str(RG) if RG.exists() else "none", "ZAGENT_REPO": str(REPO),
                 "EXAMPLE_HOME": str(example)}
    return demo


#: Each page run, how many of its transcripts at least, and how what varies is normalised.
PAGES = {"cli.md": (50, _varies), "audit.md": (21, _varies_in_tables), "manifest.md": (1, _varies),
         "models.md": (1, _varies),
         "skills.md": (5, _varies), "telemetry.md": (2, _varies)}
#: Pages with transcripts that no test runs yet, and why.
NOT_YET = {
    "journal.md": "its SQL examples read the homes of both cli.md and audit.md, after all their examples",
    "replay.md": "a tree replay that diverges, and a pytest run of the replays folder",
    "security.md": "its transcripts show what the reader's own home and network give (~/.bashrc, a server on "
                   "127.0.0.1); tests/test_sandbox.py holds the sandbox to the same",
}


def test_every_page_with_transcripts_is_run_or_says_why_not() -> None:
    pages = {page.name for page in DOCS.glob("*.md") if any(block.transcript for block in blocks(page))}
    assert pages == PAGES.keys() | NOT_YET.keys()


@pytest.mark.parametrize(("page", "fewest", "normalize"), [(page, *rest) for page, rest in PAGES.items()])
def test_the_transcripts_are_what_zagent_prints(tmp_path: Path, page: str, fewest: int,
                                                normalize: Callable[[str], str]) -> None:
    demo = demo_for(tmp_path, normalize)
    try:
        outcome = run_page(DOCS / page, demo)
    finally:
        demo.remove()
    print(f"docs/{page}: {outcome.checked} transcripts checked, {len(outcome.skipped)} not run",
          *outcome.skipped, sep="\n  ")
    assert not outcome.problems, "\n\n".join(outcome.problems)
    assert outcome.checked >= fewest
