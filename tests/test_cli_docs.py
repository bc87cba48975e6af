"""The transcripts of docs/cli.md are what zagent prints (tests/transcripts.py runs them).

They run in a demo folder made as the page says its examples were made: a copy of
``examples/home`` as the home, the scripts of ``examples/scripts/`` beside it, and an empty
work folder as the current one. What the page shows that depends on the machine or the run
(token estimates, counts of a journal that other examples filled, hashes) is normalised.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from test_builtin_search import RG
from test_docs import DOCS
from transcripts import Demo, run_page

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
]


def _varies(text: str) -> str:
    for pattern, replacement in _VARIES:
        text = pattern.sub(replacement, text)
    return text


def demo_for(tmp: Path) -> Demo:
    """The demo folder; a page's givens find a clean copy of ``examples/home`` in
    ``$EXAMPLE_HOME`` (for another home), and the repository in ``$ZAGENT_REPO``."""
    demo = Demo.make(tmp, _varies)
    # What running the README's example left in the clone's examples/home is not the example.
    example = shutil.copytree(REPO / "examples" / "home", tmp / "example-home",
                              ignore=shutil.ignore_patterns("journal.db*", "sessions", "chat_history"))
    shutil.copytree(example, demo.root / "home")
    shutil.copytree(REPO / "examples" / "scripts", demo.root / "scripts")
    demo.env |= {"ZAGENT_RG": str(RG) if RG.exists() else "none", "ZAGENT_REPO": str(REPO),
                 "EXAMPLE_HOME": str(example)}
    return demo


def test_the_transcripts_of_cli_md_are_what_zagent_prints(tmp_path: Path) -> None:
    demo = demo_for(tmp_path)
    try:
        outcome = run_page(DOCS / "cli.md", demo)
    finally:
        demo.remove()
    print(f"docs/cli.md: {outcome.checked} transcripts checked, {len(outcome.skipped)} not run:",
          *outcome.skipped, sep="\n  ")
    assert not outcome.problems, "\n\n".join(outcome.problems)
    assert outcome.checked >= 40
