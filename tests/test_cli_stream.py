"""``zagent run`` on a terminal prints the model's reply as it streams, once; off a terminal as before.

Real ``zagent`` processes against the fake Chat Completions server of ``test_openai.py``,
on a pseudo-terminal; the printer itself (:class:`zagent_cli.show.LiveConversation`) in
this process.
"""

from __future__ import annotations

import os
import pty
import subprocess
import threading
from datetime import datetime, timezone
from pathlib import Path

import pytest
import forked
from conftest import PYTHON, read_terminal
from test_openai import USAGE, FakeServer, _echo_tool, call_delta, chunk, completion, text_stream

from zagent_cli.show import LiveConversation
from zagent_core.journal.events import Event, ModelReplied, NoteReceived, TurnEnded
from zagent_core.journal.protocol import StoredEvent
from zagent_store import SQLiteJournal


@pytest.fixture
def server():
    fake = FakeServer()
    fake.thread.start()
    yield fake
    fake.httpd.shutdown()


def _zagent_run(home: Path, url: str, *, watch: tuple[str, threading.Event] | None = None,
                terminal: bool = True) -> str:
    """What ``zagent run --model openai:m go`` prints (stdout and stderr), on a terminal or
    piped; ``watch``: the event is set once the text has been printed."""
    argv = [PYTHON, "-m", "zagent_cli", "--home", str(home), "run", "--model", "openai:m", "go"]
    env = {**os.environ, "OPENAI_BASE_URL": url, "NO_COLOR": "1"}
    if not terminal:
        done = forked.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout
    leader, follower = pty.openpty()
    proc = forked.Popen(argv, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env=env)
    os.close(follower)

    def seen(shown: bytes) -> None:
        if watch is not None and watch[0].encode() in shown:
            watch[1].set()

    shown = read_terminal(leader, seen)
    assert proc.wait(timeout=60) == 0, shown
    return shown.decode().replace("\r\n", "\n")


def _conversation(printed: str) -> list[str]:
    """The conversation's lines (zagent's own, on stderr, are in brackets)."""
    return [line for line in printed.splitlines() if not line.startswith("[")]


def _replies(home: Path) -> list[ModelReplied]:
    with SQLiteJournal(home / "journal.db") as journal:
        (summary,) = journal.sessions()
        return [s.event for s in journal.read(summary.session_id) if isinstance(s.event, ModelReplied)]


def test_zagent_run_prints_the_reply_as_it_streams_once_and_journals_it_once(server: FakeServer,
                                                                              tmp_path: Path) -> None:
    home = tmp_path / "home"
    _echo_tool(home)
    seen = threading.Event()
    first = server.stream([
        chunk({"role": "assistant", "content": ""}), chunk({"content": "Let me"}),
        chunk({"content": " look."}),  # sent once "Let me" is on the terminal: printed as it came
        call_delta(0, '{"name"', "c1", "echo_stdin"), call_delta(0, ': "x"}'),
        chunk({}, "tool_calls"), USAGE, "[DONE]",
    ], gate=(2, seen))
    server.stream(text_stream("Do", "ne."))
    printed = _zagent_run(home, server.url, watch=("assistant: Let me", seen))
    assert first.opened, printed
    assert _conversation(printed) == ["user: go", "assistant: Let me look.", '  -> echo_stdin {"name": "x"}',
                                      "  <- ok: Received 1 argument(s) on stdin: name = \"x\" Hello, x!",
                                      "assistant: Done."], printed
    assert all(request["stream"] is True for request in server.requests)
    assert [(r.text, [c.name for c in r.tool_calls]) for r in _replies(home)] == [
        ("Let me look.", ["echo_stdin"]), ("Done.", [])]


def test_a_stream_cut_short_ends_its_line_and_the_reply_asked_again_is_printed_whole_once(
        server: FakeServer, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    events = text_stream("Hel", "lo ", "world")
    server.stream(events, cut_after=2)
    server.stream(events)
    printed = _zagent_run(home, server.url)
    lines = _conversation(printed)
    assert lines[:2] == ["user: go", "assistant: Hel"], printed
    assert "model_request_retrying" in lines[2] and "the stream ended before [DONE]" in lines[2]
    assert lines[3:] == ["assistant: Hello world"], printed
    assert [r.text for r in _replies(home)] == ["Hello world"]


def test_off_a_terminal_zagent_run_prints_each_reply_whole_once_it_is_complete(
        server: FakeServer, tmp_path: Path) -> None:
    streamed, whole = tmp_path / "streamed", tmp_path / "whole"
    streamed.mkdir(), whole.mkdir()
    server.stream(text_stream("Hel", "lo\nworld"))
    server.reply(body=completion("Fine\nthanks"))  # a server that answers a stream request whole
    assert _zagent_run(streamed, server.url, terminal=False) == "user: go\nassistant: Hello\nworld\n"
    assert _zagent_run(whole, server.url, terminal=False) == "user: go\nassistant: Fine\nthanks\n"
    assert all(asked["stream"] is True for asked in server.requests)


# -- the printer -----------------------------------------------------------------------------


def _stored(event: Event) -> StoredEvent:
    return StoredEvent(seq=1, session_id="s", version=1, at=datetime.now(timezone.utc), event=event)


def _replied(text: str) -> StoredEvent:
    return _stored(ModelReplied(model="m", text=text, stop_reason="end_turn"))


def test_a_line_printed_while_the_text_streams_breaks_it_and_the_text_goes_on_below(
        capsys: pytest.CaptureFixture[str]) -> None:
    live = LiveConversation()
    live.text("Hel")
    live.event(_stored(NoteReceived(call_id="c", text="halfway", offset=8)))
    live.text("lo")
    live.event(_replied("Hello"))
    assert capsys.readouterr().out == "assistant: Hel\n  [info: halfway]\nassistant: lo\n"


def test_what_streamed_is_printed_again_whole_if_the_journal_kept_another_text(
        capsys: pytest.CaptureFixture[str]) -> None:
    live = LiveConversation()
    live.text("Hel")
    live.event(_stored(TurnEnded(reason="model_error: down")))  # that reply never came
    live.text("Bye")
    live.event(_replied("Bye"))
    live.text("a\x1b]0;x")
    live.event(_replied("b"))
    assert capsys.readouterr().out == ("assistant: Hel\n(turn stopped: model_error: down)\nassistant: Bye\n"
                                       "assistant: a\\x1b]0;x\nassistant: b\n")
