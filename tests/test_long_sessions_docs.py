"""The transcripts of docs/long-sessions.md are what zagent prints (as test_builtins_docs.py
checks builtins.md's): its ```sh blocks run in order as one script, and each ```text block
after one is among the lines it printed, with times, ids and token estimates normalised."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from test_docs import DOCS, _clean_env, assert_shown_is_printed, run_steps, section_steps

PAGE = DOCS / "long-sessions.md"
#: An estimate moves with the size of the built-ins' descriptions and the system prompt.
_ESTIMATE = re.compile(r"about [\d,]+ tokens -> [\d,]+")


def _any_estimate(text: str) -> str:
    return _ESTIMATE.sub("about <n> tokens -> <n>", text)


@pytest.mark.parametrize(("section", "shown"), [("A session compacted", 2), ("Retention", 1)])
def test_the_transcripts_are_what_zagent_prints(tmp_path: Path, section: str, shown: int) -> None:
    steps = section_steps(PAGE, [section])
    status, blocks, output = run_steps(steps, tmp_path, _clean_env(tmp_path))
    assert status == 0, output
    assert len(blocks) == len(steps) + 1, output
    assert assert_shown_is_printed(f"the section {section} of docs/long-sessions.md", steps, blocks,
                                   normalize=_any_estimate, excerpts=True) == shown
