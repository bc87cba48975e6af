"""``zagent worker``: a pool of drivers over one journal, on SQLite and on PostgreSQL.

Real worker processes, real background tasks, real SIGKILLs: the sessions left by
``run --detach`` are driven to a stop once each; a killed worker's sessions are taken
over when its leases expire, the takeover journaled, and every invariant of the design
holds on every session after (each call one result, each task one end, each wake-up
delivered once).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
import forked
from conftest import PYTHON, python_tool, wait_for
from crashcheck import check_invariants

from zagent_core import Engine, Home
from zagent_core.config import Config, JournalConfig
from zagent_core.journal.protocol import Journal
from zagent_core.session.leases import holder_alive
from zagent_core.journal.snapshots import open_state
from zagent_core.session.status import status_of_state

pytestmark = pytest.mark.stores

#: Short leases, so a killed worker's sessions are taken over within seconds.
LEASE_SECONDS = 3.0

#: Each session: the model starts a background nap, says it waits, and answers the wake-up.
SCRIPT = [
    {"text": "Napping in the background.", "tool_calls": [{"name": "nap", "arguments": {"seconds": 0.3}}]},
    {"text": "I will say when I am rested."},
    {"text": "Rested."},
]


def prepare(home: Path, tmp_path: Path, *, nap_seconds: float = 0.3) -> Path:
    """A home with the ``nap`` background tool and short leases; returns the script's path."""
    python_tool(home, "nap", "import json, sys, time\ntime.sleep(json.load(sys.stdin)['seconds'])\nprint('rested')",
                background=True, timeout_seconds=120,
                parameters={"type": "object", "properties": {"seconds": {"type": "number"}}})
    (home / "config.json").write_text(json.dumps({"journal": {"lease_seconds": LEASE_SECONDS}}))
    script = tmp_path / "nap.json"
    replies = json.loads(json.dumps(SCRIPT))
    replies[0]["tool_calls"][0]["arguments"]["seconds"] = nap_seconds
    script.write_text(json.dumps(replies))
    return script


def submit(home: Path, journal: Journal, workspace: Path, count: int) -> list[str]:
    """``count`` sessions left to the workers, as ``zagent run --detach`` leaves them."""
    engine = Engine(Home(home), journal, workspace=workspace,
                    config=Config(journal=JournalConfig(lease_seconds=LEASE_SECONDS)), command="run")
    ids = []
    for number in range(count):
        session = engine.start_session("run")
        session.record_user_message(f"nap {number}")
        session.release()
        ids.append(session.session_id)
    return ids


def worker(home: Path, workspace: Path, script: Path, *args: str) -> subprocess.Popen[str]:
    return forked.Popen([PYTHON, "-m", "zagent_cli", "--home", str(home), "--workspace", str(workspace),
                         "worker", "--model", f"scripted:{script}", "--poll", "0.2", *args],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished(journal: Journal, session_id: str) -> bool:
    """The session's task ended, its wake-up was delivered, its agent is idle and no live driver
    holds it (a worker killed after its last snapshot leaves an expired lease: harmless)."""
    state = open_state(journal, session_id)
    return status_of_state(state) == "idle" and holder_alive(journal, session_id) is None


def check(journal: Journal, ids: list[str]) -> dict[str, Any]:
    """Every invariant on every session; each session answered exactly as the script says."""
    totals: dict[str, Any] = {"wakes": 0, "taken_over": []}
    for session_id in ids:
        events = list(journal.read(session_id))
        counts = check_invariants(events)
        replies = [e.event.text for e in events if e.event.type == "model_replied"]
        # A turn a kill cut off is not asked again when the wake-up's turn answers both.
        assert 2 <= len(replies) and replies == [reply["text"] for reply in SCRIPT][:len(replies)], (session_id, replies)
        # A kill between the call's start and its task's launch leaves no task: the call is interrupted.
        assert counts["calls"] == 1 and counts["tasks"] == counts["wakes"] <= 1, (session_id, counts)
        totals["wakes"] += counts["wakes"]
        totals["taken_over"] += [e.event.taken_over_from for e in events
                                 if e.event.type == "session_resumed" and e.event.taken_over_from]
    return totals


def test_a_worker_drives_each_detached_session_to_a_stop_once(
        home_dir: Path, workspace: Path, journal: Journal, tmp_path: Path) -> None:
    script = prepare(home_dir, tmp_path)
    ids = submit(home_dir, journal, workspace, 6)
    pool = worker(home_dir, workspace, script, "--until-idle", "--concurrency", "3")
    out, err = pool.communicate(timeout=120)
    assert pool.returncode == 0, err
    assert sorted(line.split()[1].rstrip(":") for line in err.splitlines() if line.endswith(": claimed]")) == sorted(ids)
    assert "6 sessions claimed, 0 taken over, 6 driven to a stop, 0 left for a person" in err
    totals = check(journal, ids)
    assert totals == {"wakes": 6, "taken_over": []}
    assert all(journal.lease(sid) is None for sid in ids)


def test_two_workers_share_the_sessions_and_never_drive_one_twice(
        home_dir: Path, workspace: Path, journal: Journal, tmp_path: Path) -> None:
    script = prepare(home_dir, tmp_path)
    ids = submit(home_dir, journal, workspace, 10)
    pools = [worker(home_dir, workspace, script, "--until-idle", "--concurrency", "3") for _ in range(2)]
    claimed: list[str] = []
    for pool in pools:
        out, err = pool.communicate(timeout=120)
        assert pool.returncode == 0, err
        assert "left for a person" not in err.replace("0 left for a person", "")
        claimed += [line.split()[1].rstrip(":") for line in err.splitlines() if line.endswith(": claimed]")]
    assert sorted(claimed) == sorted(ids)  # each session claimed once, by one of the two
    check(journal, ids)


def killed_once_every_task_runs(first: subprocess.Popen[str], journal: Journal, ids: list[str]) -> subprocess.Popen[str]:
    """``first``, a worker, SIGKILLed while every session's nap runs: its turn over, its wake-up
    still to come."""
    try:
        wait_for(lambda: all(any(e.event.type == "task_started" for e in journal.read(sid)) for sid in ids),
                 "the first worker to start every session's task", 60)
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=30)
    return first


def test_sigterm_lets_the_sessions_being_driven_go_and_the_worker_exits(
        home_dir: Path, workspace: Path, journal: Journal, tmp_path: Path) -> None:
    script = prepare(home_dir, tmp_path, nap_seconds=120)
    ids = submit(home_dir, journal, workspace, 2)
    pool = worker(home_dir, workspace, script, "--concurrency", "2")
    try:
        wait_for(lambda: all(any(e.event.type == "task_started" for e in journal.read(sid)) for sid in ids),
                 "the worker to start every session's task", 60)
    finally:
        pool.send_signal(signal.SIGTERM)
        out, err = pool.communicate(timeout=60)
    assert pool.returncode == 0, err
    assert "[stopping: the sessions being driven are let go]" in err
    assert err.count(": stopped with the worker]") == 2, err
    assert "2 sessions claimed, 0 taken over, 0 driven to a stop" in err
    assert all(journal.lease(sid) is None for sid in ids)  # let go, for another driver at once


def test_a_turn_ended_interrupted_wants_a_driver_and_a_worker_takes_it_up(
        home_dir: Path, workspace: Path, journal: Journal, tmp_path: Path) -> None:
    """A turn cut off and ended "interrupted" (a Ctrl-C, or a resume that settled a crash's turn
    and was killed before it went on, as CI saw) is interrupted, not idle: a worker takes it up."""
    from zagent_core.journal.events import TurnEnded, TurnStarted

    script = prepare(home_dir, tmp_path, nap_seconds=0.2)
    (session_id,) = submit(home_dir, journal, workspace, 1)
    journal.append(session_id, [TurnStarted(reason="user", model=f"scripted:{script}"),
                                TurnEnded(reason="interrupted")], journal.head(session_id))
    assert status_of_state(open_state(journal, session_id)) == "interrupted"
    pool = worker(home_dir, workspace, script, "--until-idle", "--concurrency", "1")
    out, err = pool.communicate(timeout=120)
    assert pool.returncode == 0, err
    assert "1 session claimed, 0 taken over, 1 driven to a stop" in err
    replies = [e.event.text for e in journal.read(session_id) if e.event.type == "model_replied"]
    assert replies == [reply["text"] for reply in SCRIPT]
    assert status_of_state(open_state(journal, session_id)) == "idle"


def test_a_killed_workers_sessions_are_taken_over_when_its_leases_expire(
        home_dir: Path, workspace: Path, journal: Journal, tmp_path: Path) -> None:
    script = prepare(home_dir, tmp_path, nap_seconds=1.0)
    ids = submit(home_dir, journal, workspace, 4)
    first = killed_once_every_task_runs(worker(home_dir, workspace, script, "--concurrency", "4"), journal, ids)
    assert all(journal.lease(sid) is not None for sid in ids)  # left behind, to expire
    # They run out now, as LEASE_SECONDS after its last beat: the dead worker's own renewal, made short.
    for owner in {json.dumps(journal.lease(sid).owner, sort_keys=True) for sid in ids}:
        journal.renew_leases(json.loads(owner), ids, 0.01)
    wait_for(lambda: all(journal.lease(sid).expired for sid in ids), "the killed worker's leases to expire")
    second = worker(home_dir, workspace, script, "--concurrency", "4")
    try:
        wait_for(lambda: all(finished(journal, sid) for sid in ids), "the second worker to finish every session", 90)
    finally:
        second.send_signal(signal.SIGTERM)
        out, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    totals = check(journal, ids)
    assert [owner["pid"] for owner in totals["taken_over"]] == [first.pid] * len(ids)
    assert err.count(f"whose lease expired]") == len(ids) and "4 taken over" in err


def test_until_idle_waits_out_a_killed_workers_leases_and_takes_its_sessions_over(
        home_dir: Path, workspace: Path, journal: Journal, tmp_path: Path) -> None:
    script = prepare(home_dir, tmp_path, nap_seconds=1.0)
    ids = submit(home_dir, journal, workspace, 2)
    first = killed_once_every_task_runs(worker(home_dir, workspace, script, "--concurrency", "2"), journal, ids)
    # Its leases live on for up to LEASE_SECONDS: a batch worker waits them out, not exits at once.
    second = worker(home_dir, workspace, script, "--until-idle", "--concurrency", "2")
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    assert "2 sessions claimed, 2 taken over, 2 driven to a stop, 0 left for a person" in err
    assert err.count(f"held by pid {first.pid} on ") == 2 and "waiting for its lease to expire" in err
    assert all(finished(journal, sid) for sid in ids)
    check(journal, ids)


def test_until_idle_does_not_wait_for_a_lease_its_holder_renews(
        home_dir: Path, workspace: Path, journal: Journal, tmp_path: Path) -> None:
    from zagent_core.session.leases import this_process

    script = prepare(home_dir, tmp_path)
    (session_id,) = submit(home_dir, journal, workspace, 1)
    elsewhere = {**this_process("zagent worker"), "host": "host-b", "boot_id": "another-boot", "pid": 4242}
    journal.acquire_lease(session_id, elsewhere, ttl=60)
    pool = worker(home_dir, workspace, script, "--until-idle")
    assert pool.stderr is not None
    line = ""
    while "waiting for its lease to expire" not in line:
        line = pool.stderr.readline()
        assert line, "the worker stopped before it saw the lease"
    journal.renew_leases(elsewhere, [session_id], 60)  # host-b's worker lives: the session is its own to finish
    out, err = pool.communicate(timeout=60)
    assert pool.returncode == 0, err
    assert "0 sessions claimed" in err
    held = journal.lease(session_id)
    assert held is not None and held.owner == elsewhere


@pytest.mark.long
def test_four_workers_and_random_sigkills_answer_every_wake_up_once(
        home_dir: Path, workspace: Path, journal: Journal, tmp_path: Path) -> None:
    # 32 sessions driven at once on 2 cores beside the other tests, on 3 s leases: a live
    # worker's heartbeat may well be late here, yet only the killed workers' sessions are taken.
    script = prepare(home_dir, tmp_path, nap_seconds=0.2)
    ids = submit(home_dir, journal, workspace, 200)
    rng = random.Random(int(os.environ.get("ZAGENT_SEED", "14")))
    pools = [worker(home_dir, workspace, script, "--concurrency", "8") for _ in range(4)]
    killed: list[int] = []
    try:
        for _ in range(6):
            target = len([sid for sid in ids if finished(journal, sid)]) + rng.randint(10, 25)
            wait_for(lambda: len([sid for sid in ids if finished(journal, sid)]) >= min(target, len(ids)),
                     "the workers to get on", 120)
            victim = rng.randrange(len(pools))
            pools[victim].send_signal(signal.SIGKILL)
            pools[victim].communicate(timeout=30)
            killed.append(pools[victim].pid)
            pools[victim] = worker(home_dir, workspace, script, "--concurrency", "8")
        wait_for(lambda: all(finished(journal, sid) for sid in ids), "every session to be finished", 300)
    finally:
        for pool in pools:
            pool.send_signal(signal.SIGTERM)
        for pool in pools:
            pool.communicate(timeout=60)
    totals = check(journal, ids)
    assert totals["wakes"] >= len(ids) - 8 * len(killed)  # a kill before a task began loses that task (8 at a time)
    assert {owner["pid"] for owner in totals["taken_over"]} <= set(killed)


def test_a_task_of_another_host_is_interrupted_only_once_that_hosts_lease_expired(
        home_dir: Path, workspace: Path, engine: Engine) -> None:
    """Tasks belong to the host that started them: while its driver's lease lives, no other host
    resumes the session; once it expired, the task (another boot's process) is interrupted."""
    from zagent_core.journal.events import TaskStarted, ToolCallFinished, ToolCallRequested, ToolCallStarted
    from zagent_core.session.leases import SessionBusyError, this_process

    session = engine.start_session("test")
    call_dir = home_dir / "sessions" / session.session_id / "calls" / "call_1"
    session._append([
        ToolCallRequested(call_id="call_1", tool="nap", arguments={}),
        ToolCallStarted(call_id="call_1", task_id="1", tool="nap", arguments={}, argv=["nap"], cwd="/",
                        input_mode="stdin_json", output_mode="text", output_dir=str(call_dir / "output"),
                        notify_file=str(call_dir / "notify"), timeout_seconds=30, manifest_hash="m", files_hash="f"),
        TaskStarted(task_id="1", call_id="call_1", tool="nap", pid=4242, start_ticks=1, boot_id="another-boot",
                    task_dir=str(call_dir)),
        ToolCallFinished(call_id="call_1", output="started as task #1", is_error=False, exit_code=None,
                         duration_ms=0),
    ])
    session.release()
    elsewhere = {**this_process("zagent worker"), "host": "host-b", "boot_id": "another-boot", "pid": 4242}
    engine.journal.acquire_lease(session.session_id, elsewhere, ttl=60)
    with pytest.raises(SessionBusyError, match="pid 4242 on host-b"):
        engine.resume(session.session_id)
    assert not any(e.event.type == "task_interrupted" for e in engine.journal.read(session.session_id))
    engine.journal.acquire_lease(session.session_id, elsewhere, ttl=0.01)  # host-b stops heart-beating
    wait_for(lambda: engine.journal.lease(session.session_id).expired, "host-b's lease to expire")
    resumed = engine.resume(session.session_id)
    events = [e.event for e in engine.journal.read(session.session_id)]
    (resume,) = [e for e in events if e.type == "session_resumed"]
    assert resume.taken_over_from == elsewhere
    assert [e.type for e in events].count("task_interrupted") == 1 and not resumed.state.running_tasks
    resumed.release()
