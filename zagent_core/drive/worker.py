"""A pool of drivers over one journal: ``zagent worker``.

A worker claims sessions that want a driver (a wake-up not yet answered, a message no
turn took up, a turn or call cut off, background tasks nobody watches: see
:meth:`Journal.claim_sessions`), resumes each under its lease, runs the agent with the
session's model until it is idle with nothing to wait for, and lets it go. Any number of
workers, on any number of hosts, share a PostgreSQL journal: a claim is atomic, so no
session has two drivers, and a worker that dies stops renewing its leases, so another
takes its sessions over once they expire (the resume journals the takeover and settles
what the dead worker left, as ``zagent resume`` would).

A session a worker cannot drive (no model, a model that fails, a damaged journal) is
left for a person (``zagent resume``) and not claimed again by that worker, which would
otherwise spin on it. So is one that made ``agent.max_turns`` model requests since a person
last gave it something (a message, an answer, a decision), counted across claims: a task
that keeps waking the agent must not buy it a new budget with every claim (a wake storm
made 195 requests in 60 s).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from zagent_core.journal.protocol import Claim, JournalError, canonical_owner
from zagent_core.logs import get_logger
from zagent_core.session import leases
from zagent_core.session.engine import Engine, SessionEndedError, UnknownSessionError

if TYPE_CHECKING:
    from zagent_core.history.telemetry import LiveTrace
    from zagent_core.journal.views import SessionState
    from zagent_core.session.engine import Session

log = get_logger(__name__)

#: How long a worker's agent waits for a session's background tasks: as long as they run (the
#: tasks are this host's, and the worker is their watcher), bounded only to stay a number.
_TASK_WAIT_MINUTES = 60 * 24 * 365


@dataclass
class WorkerStats:
    """What a worker did, for its report when it stops."""

    claimed: int = 0
    taken_over: int = 0
    finished: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    #: Sessions at ``agent.max_turns`` since a person last acted: not driven, not claimed again.
    limited: set[str] = field(default_factory=set)


class Worker:
    """Claims and drives sessions, ``concurrency`` at a time, until :meth:`stop`.

    A session is driven with the model it journaled, else ``model_spec``, else config's
    (:func:`~zagent_core.drive.model.choose_model`); one no model drives (a cut-off ``tools
    run``) is settled by its resume and left. ``report`` is told each step in a line
    (``session X: claimed``...).
    """

    def __init__(self, engine: Engine, *, model_spec: str | None = None, concurrency: int = 4,
                 poll_seconds: float = 5.0, report: Callable[[str], None] = lambda line: None) -> None:
        self.engine = engine
        self.model_spec = model_spec
        self.concurrency = concurrency
        self.poll_seconds = poll_seconds
        self.report = report
        self.owner = leases.this_process(f"zagent {engine.command}" if engine.command else "zagent")
        self.stats = WorkerStats()
        self._active: dict[str, Session | None] = {}
        self._changed = threading.Condition()
        self._stopping = threading.Event()
        #: The expiry each lease on work had when this worker first saw it (``--until-idle``).
        self._expiries: dict[tuple[str, str], datetime | None] = {}
        #: Telemetry configured without its extra: said once, not for every session claimed.
        self._warned = False

    def run(self, *, until_idle: bool = False) -> WorkerStats:
        """Claim and drive until :meth:`stop` (or, ``until_idle``, until nothing is left to claim,
        every session taken has been let go, and no lease on work is a dead driver's, whose
        sessions are claimed once it expired)."""
        journal = self.engine.journal
        threads: list[threading.Thread] = []
        while not self._stopping.is_set():
            with self._changed:
                while len(self._active) >= self.concurrency and not self._stopping.is_set():
                    self._changed.wait()
                free = self.concurrency - len(self._active)
                busy = set(self._active) | set(self.stats.failed) | self.stats.limited
            if self._stopping.is_set():
                break
            claims = journal.claim_sessions(self.owner, ttl=self.engine.heartbeat.ttl, limit=free, exclude=busy,
                                            running=leases.running_here)
            for claim in claims:
                with self._changed:
                    self._active[claim.session_id] = None
                thread = threading.Thread(target=self._drive, args=(claim,), name=f"zagent-worker-{claim.session_id}")
                thread.start()
                threads.append(thread)
            threads = [thread for thread in threads if thread.is_alive()]
            if claims:
                continue
            if until_idle:
                with self._changed:
                    idle = not self._active
                if idle and not self._leases_to_wait_out():
                    break
            journal.wait_for_work(self.poll_seconds)
        if self._stopping.is_set():
            self.report("stopping: the sessions being driven are let go")
        for thread in threads:
            thread.join()
        return self.stats

    def _leases_to_wait_out(self) -> bool:
        """Whether work is held by a lease that may yet expire for this worker to claim: one held
        by no process running here, and not renewed since this worker first saw it (a dead
        worker's). A renewed lease's holder lives, and finishes its session itself."""
        waiting = False
        for lease in self.engine.journal.leased_work():
            if leases.running_here(lease.owner):
                continue
            key = (lease.session_id, canonical_owner(lease.owner))
            if key not in self._expiries:
                self._expiries[key] = lease.expires_at
                self.report(f"session {lease.session_id}: held by {leases.describe(lease.owner)}; waiting for its "
                            "lease to expire, to take it over")
            waiting = waiting or lease.expires_at == self._expiries[key]
        return waiting

    def stop(self) -> None:
        """Claim nothing more; the sessions being driven stop their running calls (journaled
        interrupted) and are let go, for this or another worker to go on with."""
        self._stopping.set()
        with self._changed:
            for session in self._active.values():
                if session is not None:
                    session.interrupt_calls.set()
            self._changed.notify_all()

    def _drive(self, claim: Claim) -> None:
        session_id = claim.session_id
        try:
            opened = self._resume(claim)
            if opened is not None:
                self._run(*opened)
        finally:
            with self._changed:
                self._active.pop(session_id, None)
                self._changed.notify_all()

    def _resume(self, claim: Claim) -> tuple[Session, int] | None:
        """The session resumed under the claim, and its version before (where its live trace starts)."""
        session_id = claim.session_id
        self.stats.claimed += 1
        try:
            before = self.engine.session_state(session_id)
            if self._budget(session_id, before) <= 0:
                self.engine.heartbeat.release(session_id, self.owner)
                return None
            session = self.engine.resume(session_id, claim=claim)
        except (UnknownSessionError, SessionEndedError):
            self.engine.heartbeat.release(session_id, self.owner)  # ended between the claim and now
            return None
        except leases.SessionBusyError:
            return None
        except Exception as exc:  # noqa: BLE001 - one session's damage must not stop the worker
            self._failed(session_id, exc)
            self.engine.heartbeat.release(session_id, self.owner)
            return None
        with self._changed:
            self._active[session_id] = session
        if self._stopping.is_set():
            session.interrupt_calls.set()
        if claim.previous is not None:
            self.stats.taken_over += 1
            self.report(f"session {session_id}: taken over from {leases.describe(claim.previous.owner)}, whose "
                        "lease expired")
        else:
            self.report(f"session {session_id}: claimed")
        return session, before.version

    def _run(self, session: Session, before: int) -> None:
        from zagent_core.agent.loop import Agent
        from zagent_core.drive.driving import traced
        from zagent_core.drive.model import choose_model

        trace: LiveTrace | None = None
        try:
            trace = traced(self.engine, session, before, self._warn_once)
            state = session.state
            model, spec = choose_model(self.engine, None if state.model else self.model_spec, state, None)
            if model is None:
                self.report(f"session {session.session_id}: no model drives it; settled and left")
                return
            budget = self.engine.config.agent.model_copy(update={"max_turns": self._budget(session.session_id,
                                                                                          session.state)})
            result = Agent(session, model, budget, spec=spec).run(None, wait_minutes=_TASK_WAIT_MINUTES)
        except KeyboardInterrupt:  # stop(): the session is let go mid-turn, for resume to go on with
            self.report(f"session {session.session_id}: stopped with the worker")
            return
        except (Exception, leases.LeaseLostError) as exc:  # noqa: BLE001 - as in _resume
            self._failed(session.session_id, exc)
            return
        finally:
            try:
                if trace is not None:  # before the lease goes: see LiveTrace.close
                    trace.close()
            finally:
                try:
                    session.release()
                except JournalError:
                    log.warning("release_failed", exc_info=True, session=session.session_id)
        self.stats.finished += 1
        self.report(f"session {session.session_id}: {result.reason} after {result.requests} model request(s)")

    def _warn_once(self, text: str) -> None:
        if not self._warned:
            self._warned = True
            self.report(f"warning: config.json: {text}")

    def _budget(self, session_id: str, state: SessionState) -> int:
        """Model requests the session may still make before a person acts; at 0 it is left, said once."""
        limit = self.engine.config.agent.max_turns
        left = limit - state.replies_since_person
        if left <= 0 and session_id not in self.stats.limited:
            self.stats.limited.add(session_id)
            self.report(f"session {session_id}: left for a person: it made agent.max_turns ({limit}) model requests "
                        "since a person last gave it a message, an answer or a decision; zagent resume "
                        f"{session_id} goes on")
        return left

    def _failed(self, session_id: str, exc: BaseException) -> None:
        self.stats.failed[session_id] = f"{type(exc).__name__}: {exc}"
        log.error("worker_session_failed", session=session_id, error=str(exc))
        self.report(f"session {session_id}: left for a person ({type(exc).__name__}: {exc}); "
                    f"see zagent resume {session_id}")
