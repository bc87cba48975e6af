"""Serving the console: the socket bound first (so ``--port 0`` gets a free port, said in the
URL), then uvicorn on it; the URL with the access token is printed once it serves."""

from __future__ import annotations

import ipaddress
import signal
import socket
import sys
from typing import TYPE_CHECKING

import uvicorn

if TYPE_CHECKING:
    from types import FrameType

    from zagent_cli.context import Context
    from zagent_cli.ui.app import Console

#: Seconds open pages (their live streams) get to close when the console stops.
GRACEFUL_SECONDS = 2


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (only its own users can connect)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bound(host: str, port: int) -> socket.socket:
    """A listening socket on ``host``:``port`` (IPv4 or IPv6, as ``host`` is)."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def _stopped(sig: int, frame: FrameType | None) -> None:
    sys.exit(0)


class _Server(uvicorn.Server):
    """uvicorn's server, which says its URL once it serves, and ends the live streams when it stops."""

    def __init__(self, config: uvicorn.Config, url: str, console: Console) -> None:
        super().__init__(config)
        self.url = url
        self.console = console

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if not self.should_exit:
            print(self.url, flush=True)  # the first line of stdout: scripts and tests read it

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.console.live.close()
        self.console.decider.stop()
        super().handle_exit(sig, frame)


def serve(context: Context, sock: socket.socket, token: str) -> None:
    """Serve the console of ``context``'s journal on ``sock`` until Ctrl-C or SIGTERM (then exit 0)."""
    import functools

    from zagent_cli.ui.app import Console, make_app
    from zagent_cli.ui.live import POLL_SECONDS
    from zagent_store.changes import open_changes

    host, port = sock.getsockname()[:2]
    with context.existing_journal() as journal:
        console = Console(journal, context, token, cookie=f"zagent_ui_{port}",
                          changes=functools.partial(open_changes, journal, poll_seconds=POLL_SECONDS))
        config = uvicorn.Config(make_app(console), log_level="warning", lifespan="off",
                                timeout_graceful_shutdown=GRACEFUL_SECONDS)
        shown = f"[{host}]" if ":" in host else host
        server = _Server(config, f"http://{shown}:{port}/?token={token}", console)
        # uvicorn stops on Ctrl-C or SIGTERM, then raises the signal again under the handlers it found:
        # these make that a plain exit 0, as `zagent worker` exits when it is stopped.
        for stop in (signal.SIGINT, signal.SIGTERM):
            signal.signal(stop, _stopped)
        try:
            server.run(sockets=[sock])
        finally:
            console.decider.wait()
