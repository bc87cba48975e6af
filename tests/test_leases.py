"""One driver per session (issue 8, item 5): a lease in the journal, taken before anything
is settled, refused to a second live driver, taken over (and journaled) from a dead one."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import forked
from conftest import PYTHON, python_tool, wait_for

from zagent_core import Engine, Home
from zagent_core.config import Config, JournalConfig
from zagent_core.journal.events import ToolCallRequested, ToolCallStarted
from zagent_core.session.leases import SessionBusyError, running_here, this_process
from zagent_store import SQLiteJournal

# The store's promises hold for the engine on each of them: run on SQLite and PostgreSQL.
pytestmark = pytest.mark.stores


def zagent(home: Path, workspace: Path, *args: str) -> list[str]:
    return [PYTHON, "-m", "zagent_cli", "--home", str(home), "--workspace", str(workspace), *args]


def cut_off_call(engine: Engine, home: Path, tool: str) -> str:
    """A session a crash left with ``tool`` started and no result, and no driver."""
    session = engine.start_session("test")
    session._append([
        ToolCallRequested(call_id="call_1", tool=tool, arguments={}),
        ToolCallStarted(call_id="call_1", tool=tool, arguments={}, argv=["x"], cwd="/", input_mode="stdin_json",
                        output_mode="text", output_dir=str(home), notify_file=str(home / "no-notify"),
                        timeout_seconds=30, manifest_hash="m", files_hash="f"),
    ])
    session.release()
    return session.session_id


def test_a_second_resume_while_one_settles_is_refused_at_once_and_journals_nothing(
        home_dir: Path, workspace: Path, engine: Engine, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    # Replay-safe: resume runs it again, and it holds the settling until the gate opens.
    python_tool(home_dir, "slow_lookup", f"import os, time\nwhile not os.path.exists({str(gate)!r}): "
                "time.sleep(0.01)\nprint('looked up')", replay="safe", timeout_seconds=30)
    session_id = cut_off_call(engine, home_dir, "slow_lookup")
    first = forked.Popen(zagent(home_dir, workspace, "resume", session_id), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        journal = engine.journal
        wait_for(lambda: (lease := journal.lease(session_id)) is not None and lease.owner["pid"] == first.pid,
                 "the first resume to take the lease", 20)
        wait_for(lambda: sum(e.event.type == "tool_call_started" for e in journal.read(session_id)) == 2,
                 "the first resume to run the cut-off call again (it waits at the gate)", 20)
        before = journal.head(session_id)
        second = forked.run(zagent(home_dir, workspace, "resume", session_id), capture_output=True, text=True,
                            timeout=60)
        assert second.returncode == 2, second.stderr
        assert f"is being driven by pid {first.pid}" in second.stderr and "Traceback" not in second.stderr
        assert "zagent resume" in second.stderr and "since" in second.stderr
        assert journal.head(session_id) == before  # the loser journaled nothing
    finally:
        gate.touch()
        out, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    started = [e.event for e in engine.journal.read(session_id) if e.event.type == "tool_call_started"]
    assert len(started) == 2  # the cut-off attempt and one run again, never two
    assert engine.journal.lease(session_id) is None  # the winner let go when it stopped


def napping_driver(home_dir: Path, workspace: Path, engine: Engine) -> tuple[subprocess.Popen[bytes], str]:
    """``zagent tools run`` of a tool that naps for a minute, once its call has started: the
    driver and its session (the driver killed if its call never starts)."""
    python_tool(home_dir, "nap", "import time\ntime.sleep(60)", timeout_seconds=120)
    driver = forked.Popen(zagent(home_dir, workspace, "tools", "run", "nap"), stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: any(s.calls for s in engine.journal.sessions()), "the call to start", 20)
    except BaseException:
        driver.kill()
        driver.wait(timeout=10)
        raise
    return driver, engine.journal.sessions()[0].session_id


def test_the_lease_of_a_driver_that_was_killed_is_taken_over_and_the_takeover_journaled(
        home_dir: Path, workspace: Path, engine: Engine) -> None:
    driver, session_id = napping_driver(home_dir, workspace, engine)
    journal = engine.journal
    holder = journal.lease(session_id)
    assert holder is not None and holder.owner["pid"] == driver.pid
    assert engine.status(session_id) == "running"
    driver.send_signal(signal.SIGKILL)
    driver.wait(timeout=10)
    assert engine.status(session_id) == "interrupted"  # its driver is gone: not running any more
    resumed = engine.resume(session_id)
    (resume,) = [e.event for e in journal.read(session_id) if e.event.type == "session_resumed"]
    assert resume.taken_over_from is not None and resume.taken_over_from["pid"] == driver.pid
    assert resume.taken_over_from["command"] == "zagent tools run"
    assert journal.lease(session_id).owner == resumed.owner
    resumed.end()
    assert journal.lease(session_id) is None


def test_a_stopped_driver_keeps_its_session_past_its_leases_expiry_and_loses_it_when_killed(
        home_dir: Path, workspace: Path, engine: Engine) -> None:
    """A live holder on this host is late, not gone: neither resume nor a worker's claim takes its
    session however long its lease lapsed (SIGSTOP: a loaded machine, a stalled disk); it goes on
    when continued, and once it is dead its session is taken over."""
    (home_dir / "config.json").write_text('{"journal": {"lease_seconds": 1}}')
    driver, session_id = napping_driver(home_dir, workspace, engine)
    journal = engine.journal
    try:
        driver.send_signal(signal.SIGSTOP)
        wait_for(lambda: journal.lease(session_id).expired, "the stopped driver's lease to expire")
        with pytest.raises(SessionBusyError, match=f"is being driven by pid {driver.pid} on "):
            engine.resume(session_id)
        worker = this_process("zagent worker")
        assert journal.claim_sessions(worker, ttl=60, limit=10, running=running_here) == []
        assert engine.status(session_id) == "running"
        driver.send_signal(signal.SIGCONT)  # its next beat renews the lease nobody took
        wait_for(lambda: not journal.lease(session_id).expired, "the driver to renew its lease", 20)
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=10)
    resumed = engine.resume(session_id)
    (resume,) = [e.event for e in journal.read(session_id) if e.event.type == "session_resumed"]
    assert resume.taken_over_from is not None and resume.taken_over_from["pid"] == driver.pid
    resumed.end()


def in_another_pid_namespace() -> list[str]:
    """The command prefix that runs a program in a PID namespace of its own, with its own ``/proc``
    (where the holder's pid is not to be seen); the test is skipped where the host gives none."""
    for prefix in (["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"],
                   ["bwrap", "--unshare-pid", "--dev-bind", "/", "/", "--proc", "/proc"]):
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            probe = subprocess.run([*prefix, "readlink", "/proc/self/ns/pid"], capture_output=True, text=True,
                                   timeout=30)
            if probe.returncode == 0 and probe.stdout.strip() != os.readlink("/proc/self/ns/pid"):
                return prefix
    pytest.skip("no PID namespace can be made here (unshare and bwrap both refused): user namespaces are off")


def test_a_resume_from_another_pid_namespace_leaves_a_live_drivers_session_alone_until_its_lease_expires(
        home_dir: Path, workspace: Path, engine: Engine) -> None:
    """From another PID namespace (a container, ``unshare --pid``: same host, same boot) the holder's
    pid is nowhere to be seen, which is no sign that it died: it keeps its session while it renews
    its lease, and a dead one loses it only once the lease expired."""
    namespaced = in_another_pid_namespace()
    # Long enough that the lease outlives the first resume after the kill even on a loaded machine.
    (home_dir / "config.json").write_text('{"journal": {"lease_seconds": 10}}')
    driver, session_id = napping_driver(home_dir, workspace, engine)
    journal = engine.journal
    try:
        resume = [*namespaced, *zagent(home_dir, workspace, "resume", session_id)]
        refused = forked.run(resume, capture_output=True, text=True, timeout=60)
        assert refused.returncode == 2, refused.stderr
        assert (f"is being driven by pid {driver.pid} on {socket.gethostname()} (zagent tools run) in another PID "
                "namespace since") in refused.stderr
        assert engine.status(session_id) == "running"
        assert not [e for e in journal.read(session_id) if e.event.type == "session_resumed"]
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=10)
    # This namespace sees the driver is dead; the other cannot, and waits for the lease to expire.
    assert engine.status(session_id) == "interrupted"
    assert "another PID namespace" in forked.run(resume, capture_output=True, text=True, timeout=60).stderr
    # Its lease runs out as if its last beat were 10 s old: the dead driver's own renewal, made short.
    held = journal.lease(session_id)
    assert held is not None and not held.expired and held.owner["pid"] == driver.pid
    assert journal.renew_leases(held.owner, [session_id], 0.01) == {session_id}
    wait_for(lambda: journal.lease(session_id).expired, "the dead driver's lease to expire")
    taken = forked.run(resume, capture_output=True, text=True, timeout=60)
    (resumed,) = [e.event for e in journal.read(session_id) if e.event.type == "session_resumed"]
    assert resumed.taken_over_from is not None and resumed.taken_over_from["pid"] == driver.pid, taken.stderr
    assert taken.returncode == 0, taken.stderr
    assert resumed.taken_over_from["pid_ns"] == os.stat("/proc/self/ns/pid").st_ino


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """The journal's file locked by a raw writer (past zagent's own writers' lock) meanwhile."""
    blocker = sqlite3.connect(path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        yield
    finally:
        blocker.execute("COMMIT")
        blocker.close()


@pytest.mark.parametrize("fails", ["its release", "its renewals, for longer than the lease"])
def test_a_lease_left_naming_this_live_process_is_let_go_once_the_journal_is_back(
        home_dir: Path, workspace: Path, fails: str) -> None:
    """A live holder on this host is never taken over, so a lease it left behind would keep the
    session from every driver of the host until the process exits: the heartbeat releases it."""
    path = home_dir / "journal.db"
    with SQLiteJournal(path, busy_timeout_ms=50) as journal:
        engine = Engine(Home(home_dir), journal, workspace=workspace,
                        config=Config(journal=JournalConfig(lease_seconds=1)))
        session = engine.start_session("test")
        with locked(path):
            if fails == "its release":
                session.release()  # its snapshot and its release fail
            else:
                wait_for(lambda: session.session_id in engine.heartbeat.lost, "the heartbeat to give the lease up")
                session.release()  # lost: nothing of it is written from here
            assert journal.lease(session.session_id) is not None
        wait_for(lambda: journal.lease(session.session_id) is None, "the heartbeat to let the lease go", 20)
        assert engine.resume(session.session_id).session_id == session.session_id


def test_a_heartbeat_whose_journal_closed_says_so_in_a_line_and_gives_the_lease_up(
        home_dir: Path, workspace: Path, caplog: pytest.LogCaptureFixture) -> None:
    """No traceback from the heartbeat's thread (on CPython 3.11 formatting one parses source
    with ``ast``, which races any other thread's parse): the journal's own message, then lost."""
    journal = SQLiteJournal(home_dir / "journal.db")
    engine = Engine(Home(home_dir), journal, workspace=workspace, config=Config(journal=JournalConfig(lease_seconds=1)))
    session = engine.start_session("test")
    journal.close()
    wait_for(lambda: session.session_id in engine.heartbeat.lost, "the heartbeat to give the lease up", 20)
    failures = [record for record in caplog.records if "lease_renew_failed" in record.getMessage()]
    assert failures and not any(record.exc_info or "Traceback" in record.getMessage() for record in failures)
    assert "closed database" in failures[0].getMessage()


def test_a_driver_on_another_host_is_never_declared_dead(engine: Engine) -> None:
    session = engine.start_session("test")
    session.release()
    elsewhere = {**this_process("zagent run"), "host": "another-host", "pid": 1}
    engine.journal.acquire_lease(session.session_id, elsewhere)
    with pytest.raises(SessionBusyError, match="is being driven by pid 1 on another-host"):
        engine.resume(session.session_id)
    assert engine.status(session.session_id) == "running"


def test_a_resume_of_an_ended_or_unknown_session_takes_no_lease(engine: Engine) -> None:
    session = engine.start_session("test")
    session.end()
    with pytest.raises(Exception, match="has ended"):
        engine.resume(session.session_id)
    assert engine.journal.lease(session.session_id) is None


def test_the_api_holds_the_lease_while_a_session_is_open_and_lets_go_when_it_ends(engine: Engine) -> None:
    with engine.start_session("test") as session:
        lease = engine.journal.lease(session.session_id)
        assert lease is not None and lease.owner["pid"] == os.getpid()
    assert engine.journal.lease(session.session_id) is None

