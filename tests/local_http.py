"""For the web built-ins' tests (fetch_url, web_search, generate_image): a real HTTP server on
127.0.0.1, and one call of a built-in in a session of its own."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from zagent_core import Engine, Home
from zagent_core.config import Config
from zagent_core.tools.results import ToolResult
from zagent_store import SQLiteJournal


class QuietHandler(BaseHTTPRequestHandler):
    """A handler that does not log each request on stderr."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        return

    def answer(self, status: int, mime: str, body: bytes | None, length: int | None = None) -> None:
        """The status and headers (``Content-Length`` of ``body``, or ``length``), then ``body``."""
        self.send_response(status)
        self.send_header("Content-Type", mime)
        if body is not None or length is not None:
            self.send_header("Content-Length", str(len(body) if body is not None else length))
        self.end_headers()
        if body is not None:
            self.wfile.write(body)


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[tuple[ThreadingHTTPServer, str]]:
    """The server, started in a thread, and its ``http://127.0.0.1:PORT``; stopped on leaving."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def one_call(home_dir: Path, workspace: Path, config: Config, tool: str, arguments: dict[str, Any]) -> ToolResult:
    """The result of calling ``tool`` in a new session of an engine with ``config``."""
    with SQLiteJournal(home_dir / "journal.db") as journal:
        engine = Engine(Home(home_dir), journal, workspace=workspace, config=config)
        with engine.start_session("test") as session:
            return session.call(tool, arguments)
