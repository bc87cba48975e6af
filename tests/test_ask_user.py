"""ask_user (issue 11): a question parks the session durably; `zagent answer` answers it once.

Everything runs through the real CLI in real processes, with the scripted model and a
real SQLite journal; crashes are real SIGKILLs at the engine's named points.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
import forked
from conftest import PYTHON, run_on_terminal

from zagent_core.journal.events import InputAnswered, InputRequested, ToolCallFinished
from zagent_store import SQLiteJournal

QUESTION = {"question": "Which colour should the button be?", "choices": ["red", "blue"]}
SCRIPT = [
    {"text": "I need to ask.", "tool_calls": [{"id": "ask1", "name": "ask_user", "arguments": QUESTION}]},
    {"text": "Going with your colour."},
]


def zagent(home: Path, *args: str, crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "ZAGENT_CRASH_AT"}
    if crash_at is not None:
        env["ZAGENT_CRASH_AT"] = crash_at
    # stdin is no terminal (DEVNULL), as in a script or CI: a question parks the session.
    return forked.run([PYTHON, "-m", "zagent_cli", "--home", str(home), *args], capture_output=True, text=True,
                      stdin=subprocess.DEVNULL, env=env, cwd=home.parent, timeout=120)


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(SCRIPT))
    return path


def events(home: Path, session_id: str) -> list:
    with SQLiteJournal(home / "journal.db") as journal:
        return list(journal.read(session_id))


def only_session(home: Path) -> str:
    with SQLiteJournal(home / "journal.db") as journal:
        (summary,) = journal.sessions()
    return summary.session_id


def status(home: Path) -> str:
    listing = zagent(home, "sessions", "list", "--json")
    (summary,) = json.loads(listing.stdout)["sessions"]
    return str(summary["status"])


def asked_once_answered_once(home: Path, session_id: str, answer: str) -> None:
    """The question journaled once, its answer once, and the call exactly one result: the answer,
    committed in the same transaction (consecutive versions, same time) as the answer."""
    stored = events(home, session_id)
    asked = [e for e in stored if isinstance(e.event, InputRequested)]
    answered = [e for e in stored if isinstance(e.event, InputAnswered)]
    assert len(asked) == 1 and len(answered) == 1, [e.event.type for e in stored]
    call_id = asked[0].event.call_id
    ends = [e for e in stored if getattr(e.event, "call_id", None) == call_id
            and e.event.type in ("tool_call_finished", "tool_call_interrupted", "tool_call_rejected")]
    # An attempt a crash cut off before it asked anyone has its own end (as every re-run
    # call has), saying it runs again; the call's result is the one finish.
    results = [e for e in ends if isinstance(e.event, ToolCallFinished)]
    assert len(results) == 1 and results[0] is ends[-1]
    assert all("it is replay-safe, so it runs again" in e.event.message for e in ends[:-1])
    assert all(e.version < asked[0].version for e in ends[:-1])
    assert results[0].event.output == answer and answered[0].event.answer == answer
    assert results[0].version == answered[0].version + 1 and results[0].at == answered[0].at


def run_until_parked(home: Path, script: Path, crash_at: str | None = None) -> str:
    result = zagent(home, "run", "--model", f"scripted:{script}", "make a button", crash_at=crash_at)
    session_id = only_session(home)
    if crash_at is None:
        assert result.returncode == 0, result.stderr
        assert f'answer with: zagent answer {session_id} "TEXT"' in result.stdout
        assert "? Which colour should the button be?" in result.stdout
    else:
        assert result.returncode == -signal.SIGKILL, result.stderr
    return session_id


def test_a_question_parks_the_run_and_an_answer_from_another_process_continues_it(
        home_dir: Path, script: Path) -> None:
    session_id = run_until_parked(home_dir, script)
    assert status(home_dir) == "waiting on user"
    kinds = [e.event.type for e in events(home_dir, session_id)]
    assert kinds.count("input_requested") == 1 and "tool_call_finished" not in kinds
    assert kinds[-2:] == ["input_requested", "turn_ended"]

    answered = zagent(home_dir, "answer", session_id, "blue")
    assert answered.returncode == 0, answered.stderr
    assert "assistant: Going with your colour." in answered.stdout
    asked_once_answered_once(home_dir, session_id, "blue")
    assert status(home_dir) == "idle"
    shown = zagent(home_dir, "sessions", "show", session_id)
    assert "asked the user" in shown.stdout and "the user answered (zagent answer)" in shown.stdout


def test_a_second_answer_is_refused_and_changes_nothing(home_dir: Path, script: Path) -> None:
    session_id = run_until_parked(home_dir, script)
    assert zagent(home_dir, "answer", session_id, "red").returncode == 0
    before = len(events(home_dir, session_id))
    again = zagent(home_dir, "answer", session_id, "blue")
    assert again.returncode == 1
    assert "was already answered (zagent answer: 'red')" in again.stderr and "Traceback" not in again.stderr
    assert len(events(home_dir, session_id)) == before
    asked_once_answered_once(home_dir, session_id, "red")


def test_an_answer_that_is_a_number_picks_that_choice_and_literal_sends_it_as_written(
        home_dir: Path, script: Path, tmp_path: Path) -> None:
    session_id = run_until_parked(home_dir, script)
    before = len(events(home_dir, session_id))
    past = zagent(home_dir, "answer", session_id, "3")
    assert past.returncode == 2 and "Traceback" not in past.stderr
    assert ("3 is not one of the question's choices (1. red, 2. blue); nothing was answered; answer with a "
            "choice's number, or give --literal to answer with the number as written") in " ".join(past.stderr.split())
    assert len(events(home_dir, session_id)) == before  # refused before the session was even resumed
    picked = zagent(home_dir, "answer", session_id, "2")
    assert picked.returncode == 0, picked.stderr
    asked_once_answered_once(home_dir, session_id, "blue")

    other = tmp_path / "other" / "home"
    other.mkdir(parents=True)
    literal = zagent(other, "answer", run_until_parked(other, script), "2", "--literal")
    assert literal.returncode == 0, literal.stderr
    asked_once_answered_once(other, only_session(other), "2")


def test_an_answer_to_a_session_that_asked_nothing_is_refused(home_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "plain.json").write_text(json.dumps([{"text": "hello"}]))
    assert zagent(home_dir, "run", "--model", f"scripted:{tmp_path / 'plain.json'}", "hi").returncode == 0
    session_id = only_session(home_dir)
    refused = zagent(home_dir, "answer", session_id, "blue")
    assert refused.returncode == 1 and "has no question waiting for an answer" in refused.stderr
    assert zagent(home_dir, "answer", session_id, " ").returncode == 2  # an empty answer is a usage error


def test_resume_keeps_a_parked_session_parked_and_refuses_a_new_prompt(home_dir: Path, script: Path) -> None:
    session_id = run_until_parked(home_dir, script)
    resumed = zagent(home_dir, "resume", session_id)
    assert resumed.returncode == 0, resumed.stderr
    assert f"answer with: zagent answer {session_id}" in resumed.stdout
    kinds = [e.event.type for e in events(home_dir, session_id)]
    assert "tool_call_interrupted" not in kinds and kinds.count("model_replied") == 1
    assert status(home_dir) == "waiting on user"
    prompted = zagent(home_dir, "resume", session_id, "something else")
    assert prompted.returncode == 2 and "waits for an answer to its question first" in prompted.stderr


@pytest.mark.parametrize("point", ["after_tool_call_started", "after_input_requested"])
def test_a_run_killed_while_asking_asks_once(home_dir: Path, script: Path, point: str) -> None:
    session_id = run_until_parked(home_dir, script, crash_at=point)
    # Killed before the question was journaled, resume asks it (the call is replay-safe);
    # after, resume finds it parked. Either way: one question, waiting.
    resumed = zagent(home_dir, "resume", session_id)
    assert resumed.returncode == 0, resumed.stderr
    assert status(home_dir) == "waiting on user"
    answered = zagent(home_dir, "answer", session_id, "blue")
    assert answered.returncode == 0, answered.stderr
    asked_once_answered_once(home_dir, session_id, "blue")
    assert status(home_dir) == "idle"


def test_an_answer_killed_before_it_is_journaled_can_be_given_again(home_dir: Path, script: Path) -> None:
    session_id = run_until_parked(home_dir, script)
    killed = zagent(home_dir, "answer", session_id, "red", crash_at="before_input_answered")
    assert killed.returncode == -signal.SIGKILL
    assert status(home_dir) == "waiting on user"
    assert zagent(home_dir, "answer", session_id, "blue").returncode == 0
    asked_once_answered_once(home_dir, session_id, "blue")


def test_an_answer_killed_after_it_is_journaled_is_kept_and_resume_goes_on(home_dir: Path, script: Path) -> None:
    session_id = run_until_parked(home_dir, script)
    killed = zagent(home_dir, "answer", session_id, "red", crash_at="after_input_answered")
    assert killed.returncode == -signal.SIGKILL
    assert status(home_dir) == "interrupted"  # answered, but the model has not seen it yet
    refused = zagent(home_dir, "answer", session_id, "blue")
    assert refused.returncode == 1 and "already answered" in refused.stderr
    resumed = zagent(home_dir, "resume", session_id)
    assert resumed.returncode == 0, resumed.stderr
    assert "assistant: Going with your colour." in resumed.stdout
    asked_once_answered_once(home_dir, session_id, "red")
    assert status(home_dir) == "idle"


def test_on_a_terminal_the_run_asks_there_and_a_choice_is_taken_by_its_number(
        home_dir: Path, script: Path) -> None:
    shown = run_on_terminal([PYTHON, "-m", "zagent_cli", "--home", str(home_dir), "run", "--model",
                             f"scripted:{script}", "make a button"], home_dir.parent, b"3\n2\n")
    assert b"2. blue" in shown and b"assistant: Going with your colour." in shown
    assert b"3 is not one of the question's choices (1. red, 2. blue); nothing was answered; give a choice's " \
           b"number, or your own words." in shown  # and it asks again
    session_id = only_session(home_dir)
    asked_once_answered_once(home_dir, session_id, "blue")
    (answer,) = [e.event for e in events(home_dir, session_id) if isinstance(e.event, InputAnswered)]
    assert answer.via == "terminal"


def test_a_replay_that_reruns_tools_serves_the_recorded_answer(home_dir: Path, script: Path) -> None:
    session_id = run_until_parked(home_dir, script)
    assert zagent(home_dir, "answer", session_id, "blue").returncode == 0
    replayed = zagent(home_dir, "replay", session_id, "--tools", "rerun")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "matches" in replayed.stdout
    assert status(home_dir) == "idle"  # the replay's own session is not listed as waiting either


def test_two_questions_in_one_reply_are_answered_one_by_one_naming_the_call(home_dir: Path, tmp_path: Path) -> None:
    two = tmp_path / "two.json"
    two.write_text(json.dumps([
        {"tool_calls": [{"id": "size", "name": "ask_user", "arguments": {"question": "Which size?"}},
                        {"id": "font", "name": "ask_user", "arguments": {"question": "Which font?"}}]},
        {"text": "Both answered."},
    ]))
    result = zagent(home_dir, "run", "--model", f"scripted:{two}", "style it")
    session_id = only_session(home_dir)
    assert result.returncode == 0 and f"zagent answer {session_id} --call font" in result.stdout
    unnamed = zagent(home_dir, "answer", session_id, "large")
    assert unnamed.returncode == 1 and "waits on 2 questions; name the one to answer with --call: size, font" \
        in unnamed.stderr
    first = zagent(home_dir, "answer", session_id, "--call", "size", "large")
    assert first.returncode == 0 and "answer with: zagent answer" in first.stdout
    assert status(home_dir) == "waiting on user"
    assert zagent(home_dir, "answer", session_id, "--call", "size", "small").returncode == 1
    last = zagent(home_dir, "answer", session_id, "serif")
    assert last.returncode == 0 and "assistant: Both answered." in last.stdout
    assert status(home_dir) == "idle"


def test_tools_run_of_ask_user_parks_its_session_and_the_answer_ends_it(home_dir: Path) -> None:
    asked = zagent(home_dir, "tools", "run", "ask_user", "--args", '{"question": "Deploy now?"}')
    session_id = only_session(home_dir)
    assert asked.returncode == 3 and f"zagent answer {session_id} TEXT" in asked.stdout, asked.stderr
    assert "[waiting on user: 'Deploy now?'" in asked.stderr and "[ok" not in asked.stderr
    assert status(home_dir) == "waiting on user"
    answered = zagent(home_dir, "answer", session_id, "not before Monday")
    assert answered.returncode == 0, answered.stderr
    assert "<- ok: not before Monday" in answered.stdout
    asked_once_answered_once(home_dir, session_id, "not before Monday")
    assert status(home_dir) == "ended"  # no model drives a tools run session: answered, it ends
