"""The one writer of a session's events: append, fold, listeners, the lease, snapshots.

Each step appends its events in one transaction at the version the session expects and
folds them into the state, so the in-memory state is always exactly the journal's. A
step is refused once the session ended, or once its lease was lost to another driver.
Every other part of a session writes through its :class:`Writer`.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any

from zagent_core.errors import ZagentError
from zagent_core.journal.events import Event
from zagent_core.journal.fold import fold
from zagent_core.journal.protocol import Journal, JournalError, Lease, StoredEvent
from zagent_core.journal.snapshots import projection_tag, to_snapshot
from zagent_core.journal.views import SessionState
from zagent_core.logs import get_logger
from zagent_core.session import leases
from zagent_core.session.status import status_of_state

log = get_logger(__name__)

#: A snapshot at least every this many events, besides one at the end of each turn.
SNAPSHOT_EVERY = 1000

_DEFERRED = (signal.SIGINT, signal.SIGTERM)


class SessionEndedError(ZagentError, RuntimeError):
    """A call or an end on a session that already ended."""


@contextlib.contextmanager
def _interrupts_deferred() -> Iterator[None]:
    """Ctrl-C (and the CLI's SIGTERM) wait until the block is done.

    A KeyboardInterrupt between an append's commit and its fold would leave the session's
    state behind its journal, and every later append would fail. Python runs signal
    handlers in the main thread only, whichever thread the signal reached, so there the
    handlers are swapped for one that only remembers; the real one runs when the block
    ends. (Blocking the signal would not do: the kernel hands it to another thread.)
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[tuple[int, Any]] = []
    previous = {number: signal.signal(number, lambda n, frame: caught.append((n, frame))) for number in _DEFERRED}
    try:
        yield
    finally:
        for number, handler in previous.items():
            if handler is not None:  # None: set outside Python, and so not ours to restore
                signal.signal(number, handler)
        for received, frame in caught[:1]:
            original = previous[signal.Signals(received)]
            if callable(original):
                original(received, frame)
            elif original == signal.SIG_DFL:
                signal.raise_signal(received)


class Writer:
    """Appends a session's events and keeps its state; holds the session's lock and lease."""

    def __init__(self, journal: Journal, heartbeat: leases.Heartbeat, session_id: str, owner: dict[str, Any],
                 state: SessionState) -> None:
        self.journal = journal
        self.heartbeat = heartbeat
        self.session_id = session_id
        #: Who drives the session (this process), as its lease in the journal says.
        self.owner = owner
        self.state = state
        # Background watchers append too: one writer at a time keeps versions in order.
        self.lock = threading.RLock()
        #: Notified after each append: what a call waits on in :meth:`Session.await_turn`.
        self.appended = threading.Condition(self.lock)
        self._listeners: list[Callable[[StoredEvent], None]] = []
        #: Told this session's events and its sub-agents' (theirs too): a person watching the tree.
        self._tree_listeners: list[Callable[[StoredEvent], None]] = []
        self._snapshot_version = state.version
        #: Let go (:meth:`release`): this process drives the session no more, and its
        #: background watcher stops instead of journaling what another driver now may.
        self.released = False

    def subscribe(self, listener: Callable[[StoredEvent], None], *, descendants: bool = False) -> None:
        """Call ``listener`` with every event this session appends, after it is committed; with
        ``descendants``, every event its sub-agents' sessions append too (see :meth:`heard`)."""
        (self._tree_listeners if descendants else self._listeners).append(listener)

    def heard(self, item: StoredEvent) -> None:
        """A sub-agent's event (its ``session_id`` says whose), for the listeners of the whole tree:
        a child's session is subscribed to its parent's ``heard`` (:meth:`SessionHost.follow`)."""
        self._tell(self._tree_listeners, item)

    def _tell(self, listeners: list[Callable[[StoredEvent], None]], item: StoredEvent) -> None:
        for listener in listeners:
            try:
                listener(item)
            except Exception:  # noqa: BLE001 - an observer's bug must not undo a committed step
                log.error("listener_failed", exc_info=True, session=self.session_id, event_type=item.event.type)

    def append(self, events: Sequence[Event], *, at: datetime | None = None) -> None:
        """Commit ``events`` in one step at the session's version, fold them, then tell the listeners.
        ``at``: their time, when the caller told it to someone already (a call's ``ZAGENT_NOW``)."""
        with self.lock:
            if self.state.status == "ended":
                raise SessionEndedError(f"session {self.session_id} has ended; start a new session")
            if self.session_id in self.heartbeat.lost:
                raise leases.LeaseLostError(self.session_id)
            with _interrupts_deferred():  # committed and folded, or neither: never one without the other
                stored = self.journal.append(self.session_id, events, self.state.version,
                                             at=None if at is None else [at] * len(events))
                for item in stored:
                    fold(self.state, item)
            self.appended.notify_all()
            # A snapshot costs as much as the state is big: taken no more often than that, a
            # flood of pending notes stays linear.
            if self.state.version - self._snapshot_version >= max(SNAPSHOT_EVERY, len(self.state.pending_notes)):
                self.snapshot()
        for item in stored:
            self._tell([*self._listeners, *self._tree_listeners], item)

    def snapshot(self) -> None:
        """Store the state as a snapshot, so opening the session reads only what follows.

        A snapshot is a cache: failing to write one is logged, never raised.
        """
        with self.lock:
            self._snapshot_version = self.state.version
            try:
                self.journal.save_snapshot(self.session_id, self.state.version, projection_tag(),
                                           to_snapshot(self.state), status_of_state(self.state))
            except JournalError as exc:
                log.warning("snapshot_failed", error=str(exc), session=self.session_id)

    def take_lease(self) -> Lease | None:
        """Take the session's lease (see :func:`leases.take`) and keep it renewed until :meth:`release`;
        returns the lease it replaced, if any."""
        self.heartbeat.before_take(self.session_id)
        self.released = False
        previous = leases.take(self.journal, self.session_id, self.owner, self.heartbeat.ttl)
        self.heartbeat.hold(self.session_id, self.owner)
        return previous

    def release(self) -> None:
        """Stop driving the session: snapshot it and let go of its lease (the session stays open)."""
        with self.lock:
            self.released = True
        self.heartbeat.drop(self.session_id)
        if self.session_id in self.heartbeat.lost:
            return  # another driver may have it: nothing of it is this process's to write (the heartbeat lets go)
        if self.state.version > self._snapshot_version:
            self.snapshot()
        self.heartbeat.release(self.session_id, self.owner)

    def has_call(self, call_id: str) -> bool:
        """Whether the session has requested a call with this id (open or closed)."""
        # Finished calls are not in the state: the journal knows every id the session used.
        return call_id in self.state.calls or self.journal.has_call(self.session_id, call_id)
