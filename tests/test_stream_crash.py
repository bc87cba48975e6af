"""A run SIGKILLed while the model's reply streams in journals nothing of that reply, and
``zagent resume`` asks again (issue 13): the reply is journaled once, whole, or not at all."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import forked
from conftest import PYTHON, read_terminal

from zagent_store import SQLiteJournal


def chunk(content: str | None = None, finish: str | None = None) -> bytes:
    delta = {"content": content} if content is not None else {}
    body = {"model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return f"data: {json.dumps(body)}\n\n".encode()


class HalfThenWhole:
    """The first request gets the start of a stream and then nothing (until the test ends);
    every later one the whole reply."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.first_piece_sent = threading.Event()
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                server.requests.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(chunk("The answer "))
                self.wfile.flush()
                if len(server.requests) == 1:
                    server.first_piece_sent.set()
                    server.release.wait(30)  # the client is killed meanwhile
                    return
                self.wfile.write(chunk("is 42.") + chunk(finish="stop") + b"data: [DONE]\n\n")

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


@pytest.fixture
def server() -> Iterator[HalfThenWhole]:
    fake = HalfThenWhole()
    thread = threading.Thread(target=fake.httpd.serve_forever, daemon=True)
    thread.start()
    yield fake
    fake.release.set()
    fake.httpd.shutdown()


def on_a_terminal(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[subprocess.Popen[bytes], int]:
    """``argv`` started with a terminal for its output (zagent streams replies only there),
    and the terminal's other end to read it from."""
    leader, follower = pty.openpty()
    proc = forked.Popen(argv, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env=env, cwd=cwd)
    os.close(follower)
    return proc, leader


def test_a_run_killed_mid_stream_journals_no_reply_and_resume_asks_again(server: HalfThenWhole,
                                                                          tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "tools").mkdir(parents=True)
    env = {**os.environ, "OPENAI_BASE_URL": server.url, "NO_COLOR": "1"}
    zagent = [PYTHON, "-m", "zagent_cli", "--home", str(home)]
    run, leader = on_a_terminal([*zagent, "run", "--model", "openai:m", "what is the answer?"], env, tmp_path)
    assert server.first_piece_sent.wait(30), "the run never asked the model"
    run.send_signal(signal.SIGKILL)
    run.wait(timeout=30)
    read_terminal(leader).decode(errors="replace")
    assert server.requests[0]["stream"] is True
    with SQLiteJournal(home / "journal.db") as journal:
        (summary,) = journal.sessions()
        types = [stored.event.type for stored in journal.read(summary.session_id)]
    assert "turn_started" in types and "model_replied" not in types  # nothing of the half reply

    resumed, leader = on_a_terminal([*zagent, "resume", summary.session_id], env, tmp_path)
    shown = read_terminal(leader).decode(errors="replace")
    assert resumed.wait(timeout=60) == 0, shown
    assert "assistant: The answer is 42." in shown
    assert len(server.requests) == 2 and server.requests[1]["messages"] == server.requests[0]["messages"]
    with SQLiteJournal(home / "journal.db") as journal:
        replies = [stored.event for stored in journal.read(summary.session_id, types=["model_replied"])]
    assert [reply.text for reply in replies] == ["The answer is 42."]
