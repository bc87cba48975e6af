"""The transcripts of docs/builtins.md are what zagent prints.

The ```sh blocks of a group of sections run, in order, as one script (as the tutorial does in
test_docs.py); each ```text block after one must be among the lines it printed, in order,
with times, session ids and temporary paths normalised.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_builtin_search import RG
from test_docs import DOCS, _clean_env, assert_shown_is_printed, run_steps, section_steps

PAGE = DOCS / "builtins.md"
#: How long a task ran before it was killed varies from run to run.
_SECONDS = re.compile(r"\bafter \d+\.\d s\b")


def _any_seconds(text: str) -> str:
    return _SECONDS.sub("after <n> s", text)


@pytest.mark.parametrize(("sections", "fewest", "errexit", "env"), [
    pytest.param(("The read-before-edit gate", "read_file", "write_file", "edit", "multi_edit"), 5, True, {},
                 id="files"),
    pytest.param(("list_files", "glob", "grep"), 5, True, {"ZAGENT_RG": str(RG) if RG.exists() else "none"},
                 id="search"),
    # Not bash -e: some of these commands answer an error on purpose.
    pytest.param(("shell", "shell_kill and wait_task", "record_artifact"), 6, False, {}, id="shell"),
    pytest.param(("fetch_url", "web_search"), 2, False, {}, id="web"),
    pytest.param(("People in the loop: ask_user",), 2, False, {}, id="ask_user"),
    pytest.param(("People in the loop: approval",), 3, False, {}, id="approval"),
])
def test_the_transcripts_are_what_zagent_prints(tmp_path: Path, sections: tuple[str, ...], fewest: int,
                                                errexit: bool, env: dict[str, str]) -> None:
    steps = section_steps(PAGE, sections)
    assert len(steps) >= fewest and all(shown is not None for _, shown in steps)
    status, blocks, output = run_steps(steps, tmp_path, _clean_env(tmp_path) | env, errexit=errexit)
    assert status == 0 or not errexit, output
    assert len(blocks) == len(steps) + 1, output
    assert_shown_is_printed(f"the sections {', '.join(sections)} of docs/builtins.md", steps, blocks,
                            normalize=_any_seconds, excerpts=True)
