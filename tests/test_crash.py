"""Invariants 2-5 of the design under real SIGKILLs of the engine, then resume.

Named crash points kill the engine exactly where a crash is hardest to settle; random
kill times cover everything in between (200 kills per run). bench/crash_kills.py runs
more and prints the counts.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from crashcheck import crash, resume_and_check

from zagent_core.crashpoints import POINTS


@pytest.mark.parametrize("point", POINTS)
def test_a_crash_at_each_named_point_is_settled_by_resume(tmp_path: Path, point: str) -> None:
    home, workspace = tmp_path / "home", tmp_path / "workspace"
    workspace.mkdir()
    outcome = crash(home, workspace, point=point)
    assert not outcome.finished, f"the engine never reached {point}"
    counts = resume_and_check(home, workspace, outcome)
    assert counts["calls"] >= 1


KILLS_PER_CASE = 10


@pytest.mark.parametrize("case", range(20))
def test_random_sigkills_then_resume_keep_every_invariant(tmp_path: Path, case: int) -> None:
    rng = random.Random(case)
    for kill in range(KILLS_PER_CASE):
        home, workspace = tmp_path / f"home{kill}", tmp_path / f"workspace{kill}"
        workspace.mkdir()
        outcome = crash(home, workspace, after=rng.uniform(0.0, 0.8))
        resume_and_check(home, workspace, outcome)
