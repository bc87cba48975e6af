"""docs/spawn.md runs as written, and shows what zagent prints (see tests/test_docs.py)."""

from __future__ import annotations

from pathlib import Path

from test_docs import DOCS, _clean_env, assert_shown_is_printed, command_steps, fenced_blocks, run_steps

PAGE = DOCS / "spawn.md"


def test_the_spawn_page_runs_as_written(tmp_path: Path) -> None:
    steps = command_steps(fenced_blocks(PAGE))
    status, blocks, output = run_steps(steps, tmp_path, _clean_env(tmp_path))
    assert status == 0, output
    assert assert_shown_is_printed("docs/spawn.md", steps, blocks, excerpts=True) == 3
