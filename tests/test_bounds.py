"""Every input that goes to the model is bounded (issue 22).

What a person gives a session (a message, an answer, a denial's reason) is refused whole over
its cap in ``limits``, with a message that says its size, the cap and what to do, and nothing
is journaled. What machines produce (an MCP server's tool list, a sub-agent's reply) is cut,
in its own order, with a marker or a warning that says so.

Real processes: the CLI as a person runs it, with the scripted model and a real SQLite journal,
and a real MCP server (on the SDK) that offers 3,000 tools.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import PYTHON, run_on_terminal
from test_approvals import SCRIPT as DEPLOY_SCRIPT, deploy  # noqa: F401 - deploy: a fixture
from test_ask_user import SCRIPT as ASK_SCRIPT, asked_once_answered_once, events, only_session, status, zagent

from zagent_core import Engine, Home
from zagent_core.agent.loop import Agent
from zagent_core.agent.models import load_model
from zagent_core.config import Config, LimitsConfig
from zagent_core.session.typed import InputTooLargeError
from zagent_store import SQLiteJournal


def script_file(tmp_path: Path, script: Any) -> Path:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script))
    return path


def zagent_reading(home: Path, stdin: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real CLI, its stdin redirected from a file (``zagent run -`` reads the prompt there)."""
    with stdin.open("rb") as given:
        return subprocess.run([PYTHON, "-m", "zagent_cli", "--home", str(home), *args], capture_output=True,
                              text=True, stdin=given, cwd=home.parent, timeout=120)


def sessions(home: Path) -> list[dict[str, Any]]:
    listing = zagent(home, "sessions", "list", "--json")
    assert listing.returncode == 0, listing.stderr
    return list(json.loads(listing.stdout)["sessions"])


def refused(done: subprocess.CompletedProcess[str], said: str) -> None:
    """Refused as a person's mistake: exit 2, the message, no traceback."""
    assert done.returncode == 2, done.stderr[-2000:]
    assert said in " ".join(done.stderr.split()), done.stderr
    assert "Traceback" not in done.stderr


# -- what a person gives: refused whole over its cap, nothing journaled ----------------------------------


@pytest.mark.parametrize("how", [["--model", "MODEL"], ["--detach"]], ids=["run", "run --detach"])
def test_a_prompt_over_user_message_bytes_is_refused_and_no_session_is_started(
        home_dir: Path, tmp_path: Path, how: list[str]) -> None:
    spec = f"scripted:{script_file(tmp_path, [{'text': 'hi'}])}"
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("x" * 300_000)
    done = zagent_reading(home_dir, prompt, "run", *[spec if arg == "MODEL" else arg for arg in how], "-")
    refused(done, "the message is 300,000 bytes, over limits.user_message_bytes (262,144 bytes); it was not "
                  "journaled. Put the text in a file in the workspace and tell the agent to read it (read_file "
                  "pages it), or raise limits.user_message_bytes in config.json")
    assert sessions(home_dir) == []


def test_a_resume_prompt_over_its_cap_is_refused_and_the_session_is_left_as_it_was(
        home_dir: Path, tmp_path: Path) -> None:
    spec = f"scripted:{script_file(tmp_path, [{'text': 'hi'}, {'text': 'again'}])}"
    assert zagent(home_dir, "run", "--model", spec, "hello").returncode == 0
    session_id = only_session(home_dir)
    before = events(home_dir, session_id)
    (home_dir / "config.json").write_text(json.dumps({"limits": {"user_message_bytes": 1024}}))
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("é" * 600)  # 1,200 bytes of UTF-8 in 600 characters: the cap counts bytes
    refused(zagent_reading(home_dir, prompt, "resume", session_id, "-", "--model", spec),
            "the message is 1,200 bytes, over limits.user_message_bytes (1,024 bytes)")
    assert events(home_dir, session_id) == before and status(home_dir) == "idle"
    prompt.write_text("é" * 500)
    assert zagent_reading(home_dir, prompt, "resume", session_id, "-", "--model", spec).returncode == 0


def test_a_20_mb_answer_is_refused_and_the_question_still_waits_for_one(home_dir: Path, tmp_path: Path) -> None:
    spec = f"scripted:{script_file(tmp_path, ASK_SCRIPT)}"
    assert zagent(home_dir, "run", "--model", spec, "make a button").returncode == 0
    session_id = only_session(home_dir)
    before = events(home_dir, session_id)
    answer = tmp_path / "answer.txt"
    answer.write_bytes(b"blue " * (4 * 1024 * 1024))  # 20 MiB, as a file piped in
    refused(zagent_reading(home_dir, answer, "answer", session_id, "-"),
            "the answer is 20,971,519 bytes, over limits.answer_bytes (65,536 bytes); it was not journaled. Put "
            "the text in a file in the workspace and answer with its path (the agent can read it), or raise "
            "limits.answer_bytes in config.json")
    assert events(home_dir, session_id) == before and status(home_dir) == "waiting on user"
    assert zagent(home_dir, "answer", session_id, "blue").returncode == 0
    asked_once_answered_once(home_dir, session_id, "blue")


def test_a_denial_reason_over_its_cap_is_refused_and_the_call_still_waits(
        home_dir: Path, tmp_path: Path, deploy: Path) -> None:  # noqa: F811 - the fixture
    spec = f"scripted:{script_file(tmp_path, DEPLOY_SCRIPT)}"
    assert zagent(home_dir, "run", "--model", spec, "ship it").returncode == 0
    session_id = only_session(home_dir)
    before = events(home_dir, session_id)
    refused(zagent(home_dir, "deny", session_id, "--reason", "no" * 4500),
            "the reason is 9,000 bytes, over limits.denial_reason_bytes (8,192 bytes); it was not journaled. "
            "Give a shorter reason, or put the text in a file in the workspace and name it in the reason")
    assert events(home_dir, session_id) == before and status(home_dir) == "waiting on approval"
    denied = zagent(home_dir, "deny", session_id, "--reason", "not on a Friday")
    assert denied.returncode == 0 and "the user denied this call (zagent deny): not on a Friday" in denied.stdout


def test_on_a_terminal_an_answer_over_its_cap_is_asked_again(home_dir: Path, tmp_path: Path) -> None:
    spec = f"scripted:{script_file(tmp_path, ASK_SCRIPT)}"
    (home_dir / "config.json").write_text(json.dumps({"limits": {"answer_bytes": 1024}}))
    shown = run_on_terminal([PYTHON, "-m", "zagent_cli", "--home", str(home_dir), "run", "--model", spec,
                             "make a button"], home_dir.parent, b"x" * 2000 + b"\nblue\n")
    assert b"the answer is 2,000 bytes, over limits.answer_bytes (1,024 bytes)" in shown
    assert b"assistant: Going with your colour." in shown
    asked_once_answered_once(home_dir, only_session(home_dir), "blue")


def test_the_python_api_refuses_a_message_and_an_answer_over_their_caps(home_dir: Path, tmp_path: Path,
                                                                        workspace: Path) -> None:
    spec = f"scripted:{script_file(tmp_path, ASK_SCRIPT)}"
    config = Config(limits=LimitsConfig(user_message_bytes=1024, answer_bytes=1024))
    with SQLiteJournal(home_dir / "journal.db") as journal, \
            Engine(Home(home_dir), journal, workspace=workspace, config=config) as engine:
        session = engine.start_session("test")
        head = journal.head(session.session_id)
        with pytest.raises(InputTooLargeError, match=r"the message is 1,025 bytes, over limits.user_message_bytes"):
            Agent(session, load_model(spec), spec=spec).run("x" * 1025)
        assert journal.head(session.session_id) == head
        assert Agent(session, load_model(spec), spec=spec).run("make a button").reason == "waiting_on_user"
        head = journal.head(session.session_id)
        with pytest.raises(InputTooLargeError, match=r"the answer is 2,048 bytes, over limits.answer_bytes"):
            session.answer("x" * 2048)
        assert journal.head(session.session_id) == head and session.state.questions
        session.answer("blue")
        session.release()
