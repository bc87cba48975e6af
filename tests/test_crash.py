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
import forked
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


def test_a_built_in_background_call_killed_before_its_result_is_settled_by_resume(tmp_path: Path) -> None:
    # Built-ins start tasks too (shell's run_in_background): the named point stops them where
    # the supervisor runs and nothing of it is journaled yet, as it stops a foreground call.
    import json
    import os
    import signal
    import subprocess
    import sys

    from crashcheck import check_invariants

    from zagent_core import Engine, Home
    from zagent_store import SQLiteJournal

    home, workspace = tmp_path / "home", tmp_path / "workspace"
    workspace.mkdir()
    arguments = json.dumps({"command": "sleep 0.3; echo hi", "run_in_background": True})
    killed = forked.run(
        [sys.executable, "-m", "zagent_cli", "--home", str(home), "--workspace", str(workspace), "tools", "run",
         "shell", "--args", arguments],
        env={**os.environ, "ZAGENT_CRASH_AT": "before_tool_call_finished"}, capture_output=True, timeout=60)
    assert killed.returncode == -signal.SIGKILL
    with SQLiteJournal(home / "journal.db") as journal:
        (summary,) = journal.sessions()
        session = Engine(Home(home), journal, workspace=workspace).resume(summary.session_id)
        for task in session.state.running_tasks:
            assert session.wait_task(task.task_id, 20).status != "running"
        session.deliver()
        session.end()
        counts = check_invariants(list(journal.read(summary.session_id)))
    assert counts["calls"] == 1 and counts["tasks"] == 1
