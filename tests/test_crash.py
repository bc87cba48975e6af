"""Invariants 2-5 of the design under real SIGKILLs of the engine, then resume.

Named crash points kill the engine exactly where a crash is hardest to settle; random
kill times cover everything in between (200 kills per run, 20 of them in the everyday
suite, the rest behind the ``long`` marker: ``pytest -m long``). bench/crash_kills.py runs
more and prints the counts.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from crashcheck import crash, parse_output, resume_and_check
from hypothesis import given
from hypothesis import strategies as st

from zagent_core.session.crashpoints import POINTS

# The killed engine and the one that resumes write to the store under test: SQLite, PostgreSQL.
STORES = ["sqlite", "postgres"]


@pytest.fixture
def crash_journal(store: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """On PostgreSQL, the driver and the checks find the test's database through ``ZAGENT_JOURNAL``."""
    if store == "postgres":
        monkeypatch.setenv("ZAGENT_JOURNAL", request.getfixturevalue("postgres_url"))


@pytest.mark.parametrize("store", STORES, indirect=True)
@pytest.mark.parametrize("point", POINTS)
def test_a_crash_at_each_named_point_is_settled_by_resume(tmp_path: Path, point: str, crash_journal: None) -> None:
    home, workspace = tmp_path / "home", tmp_path / "workspace"
    workspace.mkdir()
    outcome = crash(home, workspace, point=point)
    assert not outcome.finished, f"the engine never reached {point}"
    counts = resume_and_check(home, workspace, outcome)
    assert counts["calls"] >= 1


KILLS_PER_CASE = 10
#: Cases run by a plain ``pytest``; the rest are long runs (``-m long``), which CI runs in a step
#: of its own so that the everyday suite stays quick. PostgreSQL runs the first ``POSTGRES_CASES``
#: (its appends are the store's; what is killed is the same engine), so that step stays in minutes.
QUICK_CASES = 2
POSTGRES_CASES = 6


@pytest.mark.parametrize(("store", "case"), [
    pytest.param(store, case, marks=[] if case < QUICK_CASES else [pytest.mark.long])
    for store in STORES for case in range(20 if store == "sqlite" else POSTGRES_CASES)], indirect=["store"])
def test_random_sigkills_then_resume_keep_every_invariant(tmp_path: Path, case: int, crash_journal: None) -> None:
    rng = random.Random(case)
    for kill in range(KILLS_PER_CASE):
        home, workspace = tmp_path / f"home{kill}", tmp_path / f"workspace{kill}"
        workspace.mkdir()
        outcome = crash(home, workspace, after=rng.uniform(0.0, 0.8))
        resume_and_check(home, workspace, outcome)


@given(st.lists(st.integers(min_value=1, max_value=10**6), max_size=20), st.booleans(), st.data())
def test_a_kill_mid_line_never_breaks_or_misreads_the_drivers_output(seqs: list[int], done: bool,
                                                                      data: st.DataObject) -> None:
    printed = "".join(f"SEQ {n}\n" for n in seqs) + ("DONE\n" if done else "")
    cut = data.draw(st.integers(min_value=0, max_value=len(printed)))
    acknowledged, finished = parse_output(printed[:cut])
    whole_lines = printed[:cut].count("\n")
    assert acknowledged == seqs[:whole_lines]
    assert finished == (done and cut == len(printed))
