"""The console's live pages: server-sent events fed by the journal's change feed.

One thread per console (:class:`Hub`) reads the journal's change feed (``zagent_store.changes``:
LISTEN/NOTIFY on PostgreSQL, one poll of the journal every :data:`POLL_SECONDS` on SQLite, for all
open pages at once) and hands each change to the open streams on the server's event loop:

- a **session's page** follows its session: its stream sends a ``head`` event with the session's
  version when it moved, and the page fetches its main part again;
- the **list of sessions** follows every session: its stream sends a ``moved`` event naming the
  sessions that moved (at most one event a :data:`LIST_SECONDS`), and the page fetches itself again
  when one of them is on it, or on its first page, where a session that moved comes to the top.

Bounds. At most :data:`MOST_STREAMS` streams are open at a time; past that a page is refused (HTTP
503) and says to reload by hand. A stream holds what it has still to send, never a queue of
changes: a session's page one number (its session's newest version: a page that reads slowly
skips to the newest head), a list page at most :data:`MOST_MOVED` session ids, past which it is
told ``all`` and fetches itself again whole. The thread reads the feed only while a stream is open.
A comment every :data:`KEEPALIVE_SECONDS` keeps proxies from closing a quiet stream.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zagent_core.journal.protocol import Change, ChangeFeed


def _seconds(name: str, default: float) -> float:
    try:
        return max(0.01, float(os.environ.get(name, default)))
    except ValueError:
        return default


#: How often the journal is read for changes on SQLite (and on PostgreSQL while its listening
#: connection is down): ``ZAGENT_UI_POLL_SECONDS``.
POLL_SECONDS = _seconds("ZAGENT_UI_POLL_SECONDS", 0.5)
#: A quiet stream sends a comment this often.
KEEPALIVE_SECONDS = 15.0
#: Pages followed live at once (session pages and lists together).
MOST_STREAMS = 64
#: A list page's stream sends one ``moved`` event this often at most (the page then draws itself again).
LIST_SECONDS = 1.0
#: Sessions a list page's stream keeps to tell; past these it tells the page to fetch itself whole.
MOST_MOVED = 100
#: The feed's thread blocks this long at most: how soon it sees the console stop or its last page go.
WAIT_SECONDS = 1.0
#: After the change feed failed (the journal could not be read), the thread waits this long to try again.
RETRY_SECONDS = 2.0


class Follower:
    """An open stream: what its page has still to be told. ``session_id`` None: the list, which follows all."""

    def __init__(self, session_id: str | None) -> None:
        self.session_id = session_id
        self.version = 0
        self.moved: dict[str, int] = {}
        self.overflow = False
        self.woken = asyncio.Event()

    def tell(self, change: Change) -> None:
        """Called on the event loop: kept in place of what was not sent yet, never queued behind it."""
        if self.session_id is not None:
            if change.version > self.version:
                self.version = change.version
                self.woken.set()
            return
        if change.session_id in self.moved or len(self.moved) < MOST_MOVED:
            self.moved[change.session_id] = change.version
        else:
            self.overflow = True
        self.woken.set()

    def taken(self) -> tuple[list[str], bool]:
        """The sessions a list page is to be told of, and whether too many moved to name; then forgotten."""
        moved, overflow = list(self.moved), self.overflow
        self.moved, self.overflow = {}, False
        self.woken.clear()
        return moved, overflow


class Hub:
    """One per console: the streams open, and the thread that reads the change feed for all of them."""

    def __init__(self, open_feed: Callable[[], ChangeFeed]) -> None:
        self._open_feed = open_feed
        self._slots = threading.BoundedSemaphore(MOST_STREAMS)
        self._lock = threading.Lock()
        self._followers: set[Follower] = set()
        self._wanted = threading.Event()  # set when a stream opens or the console stops
        self._stopped = threading.Event()
        self._ready = threading.Event()  # set while the feed reads: its position was taken
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.closing = False
        #: Whether changes come told (PostgreSQL's NOTIFY) rather than polled, as the feed last said.
        self.pushed = False

    def take(self) -> bool:
        """A slot for one more stream, if one of the :data:`MOST_STREAMS` is free."""
        return self._slots.acquire(blocking=False)

    def give_back(self) -> None:
        self._slots.release()

    async def follow(self, session_id: str | None) -> Follower:
        """A stream's follower, told every change from the feed's position on: it is taken before this
        returns, so a head the caller reads after it misses nothing."""
        import anyio

        follower = Follower(session_id)
        with self._lock:
            self._loop = asyncio.get_running_loop()
            self._followers.add(follower)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="zagent ui changes", daemon=True)
                self._thread.start()
        self._wanted.set()
        await anyio.to_thread.run_sync(self._ready.wait, 30.0)
        return follower

    def leave(self, follower: Follower) -> None:
        with self._lock:
            self._followers.discard(follower)

    def _tell(self, changes: list[Change]) -> None:
        """On the event loop: each change to the streams that follow its session, and to the lists."""
        with self._lock:
            followers = list(self._followers)
        for follower in followers:
            for change in changes:
                if follower.session_id is None or follower.session_id == change.session_id:
                    follower.tell(change)

    def _run(self) -> None:
        """The feed's thread: reads while a stream is open, waits (the feed closed) while none is."""
        from zagent_core.errors import ZagentError

        feed: ChangeFeed | None = None
        position = 0
        while not self.closing:
            with self._lock:
                idle = not self._followers
                if idle:
                    self._ready.clear()
                    self._wanted.clear()
            if idle:
                if feed is not None:
                    feed.close()  # a listening connection nobody reads would hold PostgreSQL's queue back
                    feed = None
                self._wanted.wait()
                continue
            try:
                if feed is None:
                    feed = self._open_feed()
                    position = feed.position()
                    self._ready.set()
                changes, position = feed.changes(position, WAIT_SECONDS)
                self.pushed = feed.pushed
            except ZagentError:
                # The journal could not be read (PostgreSQL restarting, SQLite locked too long): pages keep
                # what they show, and the feed is read again from where it was.
                self._ready.set()  # a stream waiting to start starts; it catches up when the feed does
                self._stopped.wait(RETRY_SECONDS)
                continue
            if changes and self._loop is not None:
                self._loop.call_soon_threadsafe(self._tell, changes)
        if feed is not None:
            feed.close()

    def close(self) -> None:
        """Each open stream ends now: the server's graceful shutdown is not held up."""
        self.closing = True
        self._stopped.set()
        self._wanted.set()
        self._ready.set()
        with self._lock:
            followers = list(self._followers)
        loop = self._loop
        if loop is not None:
            for follower in followers:
                loop.call_soon_threadsafe(follower.woken.set)


async def _woken(follower: Follower, seconds: float) -> bool:
    """Whether the follower was told something within ``seconds``."""
    try:
        await asyncio.wait_for(follower.woken.wait(), seconds)
    except asyncio.TimeoutError:
        return False
    return True


async def head_events(hub: Hub, session_id: str, head: Callable[[str], int]) -> AsyncIterator[str]:
    """A session page's stream: a ``head`` event with the session's version now, then each time it
    moves on, until the page goes away or the console stops. The page ignores a version it shows."""
    import anyio

    follower: Follower | None = None
    try:
        yield "retry: 2000\n\n"
        follower = await hub.follow(session_id)
        sent = await anyio.to_thread.run_sync(head, session_id)
        follower.version = max(follower.version, sent)
        yield f"event: head\ndata: {sent}\n\n"
        while not hub.closing:
            if not await _woken(follower, KEEPALIVE_SECONDS):
                yield ": still here\n\n"
                continue
            follower.woken.clear()
            if follower.version > sent:
                sent = follower.version
                yield f"event: head\ndata: {sent}\n\n"
    finally:
        if follower is not None:
            hub.leave(follower)
        hub.give_back()


async def list_events(hub: Hub) -> AsyncIterator[str]:
    """The list's stream: a ``moved`` event (``{"ids": [...], "all": bool}``) when sessions moved, at most
    one a :data:`LIST_SECONDS`, until the page goes away or the console stops."""
    import anyio

    follower: Follower | None = None
    try:
        yield "retry: 2000\n\n"
        follower = await hub.follow(None)
        yield "event: following\ndata: 1\n\n"  # the page knows it misses nothing from now on
        while not hub.closing:
            if not await _woken(follower, KEEPALIVE_SECONDS):
                yield ": still here\n\n"
                continue
            moved, overflow = follower.taken()
            if moved or overflow:
                yield f"event: moved\ndata: {json.dumps({'ids': moved, 'all': overflow})}\n\n"
                await anyio.sleep(LIST_SECONDS)  # what moves meanwhile is told together, next
    finally:
        if follower is not None:
            hub.leave(follower)
        hub.give_back()
