"""`sessions show` shows the session: the conversation in order (text, or Markdown), a status
that tells `failed` and `wake-up pending` apart from idle (in `sessions list` too, with each
session's first prompt), and `resume --last` / `run -c` continue the latest session."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from conftest import python_tool

from zagent_cli.main import cli
from zagent_core import Engine, Home
from zagent_core.agent.loop import Agent
from zagent_core.agent.models import ModelReply, ToolCallRequest
from zagent_core.agent.models.scripted import ScriptedModel
from zagent_store import SQLiteJournal


def zagent(home: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--home", str(home), *args])


def reply(text: str, *calls: tuple[str, dict]) -> ModelReply:
    requests = [ToolCallRequest(id=f"c{n}", name=name, arguments=arguments) for n, (name, arguments) in enumerate(calls)]
    return ModelReply(text=text, tool_calls=requests, stop_reason="tool_use" if calls else "end_turn")


def converse(home: Path, workspace: Path, prompt: str, *replies: ModelReply) -> str:
    """A ``zagent run``-like session: ``prompt``, answered by ``replies``; left open."""
    with SQLiteJournal(home / "journal.db") as journal:
        session = Engine(Home(home), journal, workspace=workspace).start_session("run")
        Agent(session, ScriptedModel(list(replies))).turn(prompt)
        session.release()
    return session.session_id


@pytest.fixture
def chatted(home_dir: Path, workspace: Path) -> str:
    python_tool(home_dir, "shout", "import json, sys\nprint(json.load(sys.stdin)['text'].upper())\nprint('```done')",
                parameters={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"],
                            "additionalProperties": False})
    return converse(home_dir, workspace, "Shout hello, please.",
                    reply("Shouting.", ("shout", {"text": "hello"}), ("shout", {"txt": 1})),
                    reply("Done: HELLO."))


def test_the_conversation_is_shown_in_order(home_dir: Path, chatted: str) -> None:
    shown = zagent(home_dir, "sessions", "show", chatted)
    assert shown.exit_code == 0, shown.output
    lines = [line for line in shown.output.splitlines() if line.strip()]
    body = lines[lines.index(next(line for line in lines if line.endswith("  user:"))):]
    shown_lines = [re.sub(r"\d+ ms", "N ms", line.split("Z  ", 1)[-1]) for line in body]
    assert shown_lines == [
        "user:", "  Shout hello, please.",
        "assistant:", "  Shouting.",
        '  -> shout (c0) {"text": "hello"}',
        "  <- shout: ok, N ms, exit 0", "     HELLO", "     ```done",
        '  -> shout (c1) {"txt": 1}',
        "  <- shout: rejected",
        "     shout was not run: its arguments do not match its parameters.",
        shown_lines[11], shown_lines[12],
        "assistant:", "  Done: HELLO."]
    assert "txt" in shown_lines[11] and "text" in shown_lines[12]
    assert lines[0].startswith(f"session {chatted} (idle), run, started ")


def test_the_conversation_in_markdown(home_dir: Path, chatted: str) -> None:
    shown = zagent(home_dir, "sessions", "show", "--format", "md")
    assert shown.exit_code == 0, shown.output
    text = shown.output
    assert text.startswith(f"# Session {chatted}\n\n- **status:** idle\n")
    assert "## User · " in text and "\n\nShout hello, please.\n" in text
    assert '**Call: shout (c0)**\n\n```json\n{"text": "hello"}\n```\n' in text
    # The output holds a ``` run: its fence is longer, so the block holds all of it.
    assert "**Result of shout: ok, " in text and "\n\n````\nHELLO\n```done\n````\n" in text
    assert text.index("## User") < text.index("Shouting.") < text.index("Done: HELLO.")
    both = zagent(home_dir, "sessions", "show", "--format", "md", "--json")
    assert both.exit_code == 2 and "--json or --format" in both.output


def test_a_failed_turn_is_failed_with_its_reason(home_dir: Path, workspace: Path) -> None:
    session_id = converse(home_dir, workspace, "hello?")  # the script has no reply: model_error
    listing = json.loads(zagent(home_dir, "sessions", "list", "--json").output)["sessions"]
    assert [(s["status"], s["first_prompt"]) for s in listing] == [("failed", "hello?")]
    text = zagent(home_dir, "sessions", "list").output
    assert text.splitlines()[0].split() == ["SESSION", "STARTED", "LAST", "EVENT", "EVENTS", "CALLS", "STATUS",
                                            "FIRST", "PROMPT"]
    assert text.splitlines()[1].endswith("failed  hello?")
    shown = zagent(home_dir, "sessions", "show", session_id).output
    assert shown.splitlines()[0].startswith(f"session {session_id} (failed: model_error: ")
    assert any(line.endswith("turn stopped: model_error: " + line.split("model_error: ", 1)[1])
               for line in shown.splitlines() if "turn stopped" in line)


def background_session(home_dir: Path, workspace: Path) -> str:
    """A session whose background task ended after the agent's turn: its wake-up is pending."""
    python_tool(home_dir, "bg", "print('bg done')", background=True)
    with SQLiteJournal(home_dir / "journal.db") as journal:
        session = Engine(Home(home_dir), journal, workspace=workspace).start_session("run")
        agent = Agent(session, ScriptedModel([reply("Starting.", ("bg", {})), reply("Started.")]))
        assert agent.turn("start it") == "idle"
        session.wait_task("1", 10)
        session.release()
    return session.session_id


def test_a_pending_wake_up_is_said_and_resume_last_delivers_it(home_dir: Path, workspace: Path,
                                                               tmp_path: Path) -> None:
    session_id = background_session(home_dir, workspace)
    (listed,) = json.loads(zagent(home_dir, "sessions", "list", "--json").output)["sessions"]
    assert listed["status"] == "wake-up pending"
    shown = zagent(home_dir, "sessions", "show").output
    assert f"({'wake-up pending'})" in shown.splitlines()[0] and "pending wake-up: task #1 (bg)" in shown
    zagent(home_dir, "tools", "run", "bg")  # a later session, ended: --last passes it over
    script = tmp_path / "woken.json"
    # A scripted model answers request n with reply n: the session had two.
    script.write_text(json.dumps([{"text": "unused"}, {"text": "unused"}, {"text": "The task is done."}]))
    resumed = zagent(home_dir, "resume", "--last", "--model", f"scripted:{script}")
    assert resumed.exit_code == 0, resumed.output
    assert f"[resuming {session_id}]" in resumed.output and "assistant: The task is done." in resumed.output
    assert json.loads(zagent(home_dir, "sessions", "show", session_id, "--json").output)["status_detail"] == "idle"


def test_run_c_continues_the_latest_open_session(home_dir: Path, workspace: Path, tmp_path: Path) -> None:
    session_id = converse(home_dir, workspace, "first", reply("one"))
    script = tmp_path / "more.json"
    script.write_text(json.dumps([{"text": "unused"}, {"text": "two"}]))
    again = zagent(home_dir, "--workspace", str(workspace), "run", "-c", "second", "--model", f"scripted:{script}")
    assert again.exit_code == 0, again.output
    assert f"[resuming {session_id}]" in again.output and "assistant: two" in again.output
    with SQLiteJournal(home_dir / "journal.db") as journal:
        assert [s.session_id for s in journal.sessions()] == [session_id]
        prompts = [e.event.text for e in journal.read(session_id, types=("user_message",))]
    assert prompts == ["first", "second"]


@pytest.mark.parametrize(("args", "message"), [
    (["resume"], "name the SESSION_ID to resume, or give --last"),
    (["resume", "--last", "a", "b"], "--last names the session: give at most a PROMPT"),
    (["run", "-c", "--session", "x", "hi"], "give --session ID or -c (the latest session), not both"),
    (["run", "-c", "hi"], "no session to continue: every session of the journal has ended"),
    (["resume", "--last"], "no session to continue"),
])
def test_continuing_the_latest_session_says_what_is_wrong(home_dir: Path, args: list[str], message: str) -> None:
    zagent(home_dir, "tools", "run", "terminal", "--args", '{"action": "list"}')  # one session, ended
    result = zagent(home_dir, *args)
    assert result.exit_code == 2 and message in result.output, result.output


# -- long sessions: the last turns, and a pager on a terminal ---------------------------------


@pytest.fixture
def four_turns(home_dir: Path, workspace: Path) -> str:
    """A session of four turns, prompts ``prompt 1`` ... ``prompt 4``, each answered ``reply N``."""
    with SQLiteJournal(home_dir / "journal.db") as journal:
        session = Engine(Home(home_dir), journal, workspace=workspace).start_session("run")
        agent = Agent(session, ScriptedModel([reply(f"reply {n}") for n in range(1, 5)]))
        for n in range(1, 5):
            agent.turn(f"prompt {n}")
        session.release()
    return session.session_id


def test_last_n_shows_the_last_turns_and_says_how_many_came_before(home_dir: Path, four_turns: str) -> None:
    shown = zagent(home_dir, "sessions", "show", four_turns, "--last", "2")
    assert shown.exit_code == 0, shown.output
    assert "(2 earlier turns not shown: --all shows the whole session, --last N the last N turns)" in shown.output
    assert "prompt 2" not in shown.output and "reply 2" not in shown.output
    assert shown.output.index("earlier turns") < shown.output.index("prompt 3") < shown.output.index("reply 4")
    assert "model: 4 replies in 4 turns" in shown.output  # the header is the whole session's
    for whole in (zagent(home_dir, "sessions", "show", four_turns, "--last", "4"),
                  zagent(home_dir, "sessions", "show", four_turns)):  # off a terminal: all of it
        assert whole.exit_code == 0 and "earlier turns" not in whole.output
        assert all(f"prompt {n}" in whole.output for n in range(1, 5))
    md = zagent(home_dir, "sessions", "show", four_turns, "--last", "1", "--format", "md")
    assert "\n*(3 earlier turns not shown: " in md.output and "prompt 3" not in md.output


@pytest.mark.parametrize(("args", "message"), [
    (["--last", "1", "--json"], "not with --json or --tree"),
    (["--all", "--tree"], "not with --json or --tree"),
    (["--last", "1", "--all"], "--last N or --all, not both"),
    (["--last", "0"], "0 is not in the range"),
])
def test_last_and_all_are_checked(home_dir: Path, four_turns: str, args: list[str], message: str) -> None:
    shown = zagent(home_dir, "sessions", "show", four_turns, *args)
    assert shown.exit_code == 2 and message in shown.output


def _show_on_terminal(home: Path, *args: str, pager: str, rows: int = 10) -> str:
    """What ``sessions show`` writes to a terminal of ``rows`` lines, ``$ZAGENT_PAGER`` being ``pager``."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import termios

    from conftest import PYTHON, read_terminal

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", rows, 100, 0, 0))
    proc = subprocess.Popen([PYTHON, "-m", "zagent_cli", "--home", str(home), "sessions", "show", *args],
                            stdin=subprocess.DEVNULL, stdout=follower, stderr=follower,
                            env={**os.environ, "ZAGENT_PAGER": pager, "NO_COLOR": "1"})
    os.close(follower)
    shown = read_terminal(leader)
    assert proc.wait(timeout=60) == 0, shown
    return shown.decode().replace("\r\n", "\n")


def test_on_a_terminal_a_long_session_goes_through_the_pager_and_shows_its_last_turns(
        home_dir: Path, four_turns: str, tmp_path: Path) -> None:
    paged = tmp_path / "paged.txt"
    on_screen = _show_on_terminal(home_dir, four_turns, pager=f"cat > {paged}")
    assert on_screen == ""  # all of it went to the pager
    text = paged.read_text()
    assert text.startswith(f"session {four_turns} (idle)")
    assert "(1 earlier turn not shown: " in text and "prompt 1" not in text and "prompt 2" in text

    everything = _show_on_terminal(home_dir, four_turns, "--all", "--no-pager", pager=f"cat > {tmp_path / 'no'}")
    assert not (tmp_path / "no").exists()
    assert "earlier turn" not in everything and "prompt 1" in everything and "reply 4" in everything
    # A screen the session fits on: all of it, and no pager when ZAGENT_PAGER says none.
    tall = _show_on_terminal(home_dir, four_turns, pager="", rows=200)
    assert "earlier turn" not in tall and "prompt 1" in tall


def test_off_a_terminal_nothing_is_paged(home_dir: Path, four_turns: str, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZAGENT_PAGER", f"cat > {tmp_path / 'paged.txt'}")
    monkeypatch.setenv("PAGER", f"cat > {tmp_path / 'paged.txt'}")
    shown = zagent(home_dir, "sessions", "show", four_turns)
    assert shown.exit_code == 0 and "prompt 1" in shown.output and "reply 4" in shown.output
    assert not (tmp_path / "paged.txt").exists()


@pytest.mark.parametrize("window", [1, 2, 3, 5, 1000])
def test_the_last_turns_are_found_from_the_end_whatever_the_first_window(
        home_dir: Path, four_turns: str, window: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from zagent_cli import session_view

    monkeypatch.setattr(session_view, "_TAIL_WINDOW", window)
    shown = zagent(home_dir, "sessions", "show", four_turns, "--last", "2")
    assert "(2 earlier turns not shown: " in shown.output
    assert "prompt 2" not in shown.output and "prompt 3" in shown.output and "reply 4" in shown.output


def test_last_n_with_events_lists_the_events_of_the_turns_shown(home_dir: Path, four_turns: str) -> None:
    shown = zagent(home_dir, "sessions", "show", four_turns, "--last", "1", "--events")
    assert shown.exit_code == 0, shown.output
    events = shown.output[shown.output.index("\nevents:\n"):]
    assert 'user_message {"v":1,"text":"prompt 4"}' in events and "prompt 3" not in events
    assert " session_started " not in events
