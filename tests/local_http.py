"""For the web built-ins' tests (fetch_url, web_search, generate_image): a real HTTP server on
127.0.0.1, one call of a built-in in a session of its own, and a run of the CLI with the
scripted model, then its replay."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from test_ask_user import events, only_session, zagent

from zagent_core import Engine, Home
from zagent_core.config import Config
from zagent_core.journal.events import ToolCallFinished
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


def scripted_run(home_dir: Path, script: Path, calls: list[dict[str, Any]], reply: str) -> tuple[str, list[ToolCallFinished]]:
    """``zagent run`` with a scripted model that makes ``calls`` in one reply, then says ``reply``:
    the session's id and its calls' results."""
    script.write_text(json.dumps([{"tool_calls": calls}, {"text": reply}]))
    ran = zagent(home_dir, "run", "--model", f"scripted:{script}", "go")
    assert ran.returncode == 0, ran.stderr
    assert f"assistant: {reply}" in ran.stdout
    session_id = only_session(home_dir)
    return session_id, [e.event for e in events(home_dir, session_id) if isinstance(e.event, ToolCallFinished)]


def replay_report(home_dir: Path, session_id: str, *options: str) -> dict[str, Any]:
    """What ``zagent replay SESSION --tools rerun OPTIONS --json`` reports of the session."""
    replayed = zagent(home_dir, "replay", session_id, "--tools", "rerun", *options, "--json")
    (report,) = json.loads(replayed.stdout)["replays"]
    return dict(report)
