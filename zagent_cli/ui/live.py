"""A session's page kept live: server-sent events that say the session's journal head moved.

The stream polls the head of the session (one indexed read) every :data:`POLL_SECONDS`, on
SQLite and PostgreSQL alike, and sends a ``head`` event with the new version when it moved;
the page then fetches its main part again. A comment every :data:`KEEPALIVE_SECONDS` keeps
proxies from closing a quiet stream. At most :data:`MOST_STREAMS` streams are open at a time;
past that a page is told to reload by hand (HTTP 503).
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Awaitable, Callable

#: How often an open page's session head is read.
POLL_SECONDS = 0.5
#: A quiet stream sends a comment this often.
KEEPALIVE_SECONDS = 15.0
#: Pages followed live at once.
MOST_STREAMS = 64


class Streams:
    """Counts the open streams, :data:`MOST_STREAMS` at most, and ends them all when the console stops."""

    def __init__(self) -> None:
        self._slots = threading.BoundedSemaphore(MOST_STREAMS)
        self.closing = False

    def take(self) -> bool:
        return self._slots.acquire(blocking=False)

    def give_back(self) -> None:
        self._slots.release()

    def close(self) -> None:
        """Each open stream ends at its next poll: the server's graceful shutdown is not held up."""
        self.closing = True


async def head_events(head: Callable[[], int], disconnected: Callable[[], Awaitable[bool]],
                      streams: Streams) -> AsyncIterator[str]:
    """The stream's text: a ``head`` event with the session's version now, then each time
    ``head()`` moves on, until the page goes away (``disconnected``, awaited) or the console
    stops. The page ignores a version it shows already."""
    import anyio

    try:
        sent, quiet = -1, 0.0
        yield "retry: 2000\n\n"
        while not streams.closing and not await disconnected():
            version = await anyio.to_thread.run_sync(head)
            if version > sent:
                sent, quiet = version, 0.0
                yield f"event: head\ndata: {version}\n\n"
            elif quiet >= KEEPALIVE_SECONDS:
                quiet = 0.0
                yield ": still here\n\n"
            await anyio.sleep(POLL_SECONDS)
            quiet += POLL_SECONDS
    finally:
        streams.give_back()
