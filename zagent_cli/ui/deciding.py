"""A person's answer, approval or denial given on the console: the same drive as ``zagent
answer``, ``approve`` and ``deny`` (:func:`zagent_core.drive.driving.drive` with the same
:class:`Decision`), in a thread of its own, so the session goes on (the approved call runs,
the model is asked again) while the page follows it live.

The page waits only until the decision is journaled, or refused: a refusal (nothing waits
any more, another driver holds the session, an answer over its cap) is said on the page.
At most :data:`MOST_DRIVES` drives run at a time; the next decision is refused until one ends.
When the console stops, so do its drives, as a stopped ``zagent approve`` does: their running
calls are journaled interrupted and the sessions let go, resumable; the console waits
:data:`STOP_SECONDS` at most for that.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zagent_cli.context import Context
    from zagent_core.drive.driving import Decision
    from zagent_core.journal.protocol import StoredEvent
    from zagent_core.session.engine import Session

#: Drives the console runs at once (each holds its session's lease, a journal connection and
#: the tools and model requests of its turns).
MOST_DRIVES = 8

#: How long a stopping console waits for its drives to journal their calls interrupted and let go.
STOP_SECONDS = 30.0

_log = logging.getLogger("zagent.ui")


class Decider:
    """Starts the drives that carry a person's decisions, :data:`MOST_DRIVES` at most."""

    def __init__(self, context: Context) -> None:
        self._context = context
        self._slots = threading.BoundedSemaphore(MOST_DRIVES)
        self._lock = threading.Lock()
        self._stopping = False
        #: The drives running, and their session once it is open.
        self._drives: dict[threading.Thread, Session | None] = {}

    def stop(self) -> None:
        """Stop every drive (their running calls are interrupted); refuse new ones."""
        with self._lock:
            self._stopping = True
            for session in self._drives.values():
                if session is not None:
                    session.interrupt_calls.set()

    def wait(self, seconds: float = STOP_SECONDS) -> None:
        """Until the stopped drives have let their sessions go, ``seconds`` at most in all."""
        import time

        deadline = time.monotonic() + seconds
        with self._lock:
            drives = list(self._drives)
        for thread in drives:
            thread.join(max(deadline - time.monotonic(), 0))

    def _opened(self, session: Session) -> None:
        with self._lock:
            self._drives[threading.current_thread()] = session
            if self._stopping:
                session.interrupt_calls.set()

    def decide(self, session_id: str, decision: Decision) -> Future[str | None]:
        """Start the drive that gives ``decision`` to the session; the future is done once the
        decision is journaled (None) or refused (why, in a sentence)."""
        given: Future[str | None] = Future()
        if not self._slots.acquire(blocking=False):
            given.set_result(f"{MOST_DRIVES} sessions are being driven from this console already; "
                             "decide again once one of them stops")
            return given
        thread = threading.Thread(target=self._drive, args=(session_id, decision, given), daemon=True,
                                  name=f"zagent-ui-drive-{session_id}")
        with self._lock:
            if self._stopping:
                self._slots.release()
                given.set_result("the console is stopping")
                return given
            self._drives[thread] = None
        thread.start()
        return given

    def _drive(self, session_id: str, decision: Decision, given: Future[str | None]) -> None:
        import click

        from zagent_core.drive.display import Display
        from zagent_core.drive.driving import DriveRequest, drive
        from zagent_core.drive.engine import open_engine
        from zagent_core.drive.errors import Stopped
        from zagent_core.errors import ZagentError
        from zagent_core.session.engine import NoSuchChoiceError
        from zagent_core.session.typed import InputTooLargeError

        def journaled(stored: StoredEvent) -> None:
            if stored.event.type in ("input_answered", "approval_decided") and not given.done():
                given.set_result(None)

        def attach(session: Session) -> None:
            session.subscribe(journaled)
            self._opened(session)

        try:
            with self._context.journal() as journal:
                engine = open_engine(self._context.home, journal, workspace=self._context.workspace, command="ui")
                try:
                    drive(engine, DriveRequest(session_id, None, None, decision), Display(attach=attach))
                finally:
                    engine.close()
        except Stopped:  # the console stops: the session was let go, resumable
            _log.info("the drive of session %s stopped with the console", session_id)
        except (ZagentError, InputTooLargeError, NoSuchChoiceError) as exc:
            self._said(given, str(exc))
        except click.ClickException as exc:  # the journal could not be opened for writing
            self._said(given, exc.message)
        except Exception as exc:  # noqa: BLE001 - a drive's failure is said, never takes the console down
            _log.exception("the drive of session %s failed", session_id)
            self._said(given, f"the drive of session {session_id} failed: {exc}")
        finally:
            with self._lock:
                self._drives.pop(threading.current_thread(), None)
            self._slots.release()
            if not given.done():  # the drive stopped before anything was journaled, nor refused
                given.set_result(None)

    @staticmethod
    def _said(given: Future[str | None], why: str) -> None:
        if not given.done():
            given.set_result(why)
        else:  # after the decision was journaled: the session's page shows how its turn ended
            _log.warning("after the decision: %s", why)
