"""``zagent chat`` on a real pseudo-terminal (pexpect): a conversation with tool calls, an
approval answered inline, Ctrl-C during a turn, a wake-up while the prompt waits, keys typed
during a turn, leaving and continuing."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pexpect
import pytest
import forked
from conftest import PYTHON, python_tool, wait_for

from zagent_store import SQLiteJournal

#: Every wait on the terminal's output; a wait that times out fails the test with what was printed.
TIMEOUT = 30


def _reply(text: str = "", *calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"text": text, "tool_calls": [{"name": name, "arguments": args} for name, args in calls]}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    python_tool(home, "greet", "import json, sys\nprint('hello, ' + json.load(sys.stdin)['name'])",
                parameters={"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]})
    python_tool(home, "deploy", "print('deployed')", permission="ask")
    gate = tmp_path / "gate"
    python_tool(home, "wait_for_gate",
                f"import os, pathlib, time\npathlib.Path({str(tmp_path / 'started')!r}).touch()\n"
                f"while not os.path.exists({str(gate)!r}): time.sleep(0.01)\nprint('gate open')",
                timeout_seconds=60)
    python_tool(home, "brew", f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.01)\n"
                "print('the tea is ready')", background=True, timeout_seconds=60)
    return home


def chat(home: Path, *args: str) -> pexpect.spawn:
    env = {**os.environ, "TERM": "xterm", "NO_COLOR": "1", "PROMPT_TOOLKIT_NO_CPR": "1"}
    child = pexpect.spawn(PYTHON, ["-m", "zagent_cli", "--home", str(home), "chat", *args], env=env,
                          cwd=str(home.parent), encoding="utf-8", timeout=TIMEOUT, dimensions=(50, 200))
    child.expect_exact("you>")
    return child


def say(child: pexpect.spawn, text: str) -> None:
    """Type ``text`` and press Enter (a carriage return, as a terminal's Enter sends)."""
    child.send(text + "\r")


def session_of(child: pexpect.spawn) -> str:
    child.expect(r"\[left session (\d{8}-\d{6}-[0-9a-f]{6});")
    return str(child.match.group(1))


def events(home: Path, session_id: str) -> list[Any]:
    with SQLiteJournal(home / "journal.db") as journal:
        return [e.event for e in journal.read(session_id)]


def test_a_conversation_with_calls_an_inline_approval_ctrl_c_leaving_and_continuing(
        home: Path, tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([
        _reply("", ("greet", {"name": "Ada"})), _reply("Greeted Ada."),
        _reply("", ("deploy", {})), _reply("Deployed."),
        _reply("", ("wait_for_gate", {})), _reply("Still here."),
        _reply("Continued where we left off."),
    ]))
    child = chat(home, "--model", f"scripted:{script}")
    say(child, "greet Ada")
    child.expect_exact("-> greet")
    child.expect_exact("<- ok: hello, Ada")
    child.expect_exact("assistant: Greeted Ada.")
    child.expect_exact("you>")
    say(child, "deploy it")
    child.expect_exact("approve deploy? [y/n]")
    child.send("y\r")
    child.expect_exact("assistant: Deployed.")
    child.expect_exact("you>")
    say(child, "wait for the gate")
    wait_for(lambda: (tmp_path / "started").exists(), "the tool to start", TIMEOUT)
    child.sendintr()
    child.expect_exact("[stopped: the turn was cut off")
    child.expect_exact("you>")
    say(child, "are you there?")
    child.expect_exact("assistant: Still here.")
    child.expect_exact("you>")
    child.sendeof()
    session_id = session_of(child)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    journaled = events(home, session_id)
    assert [e.text for e in journaled if e.type == "user_message"] == ["greet Ada", "deploy it", "wait for the gate",
                                                                        "are you there?"]
    assert any(e.type == "approval_decided" and e.approved and e.via == "terminal" for e in journaled)
    assert any(e.type == "tool_call_interrupted" for e in journaled)
    assert not any(e.type == "session_ended" for e in journaled)  # leaving never ends the session

    again = chat(home, session_id[-6:])  # by the end of its id, as every command takes it
    say(again, "go on")
    again.expect_exact("assistant: Continued where we left off.")
    again.expect_exact("you>")
    again.sendeof()
    assert session_of(again) == session_id
    again.expect(pexpect.EOF)


def test_a_wake_up_while_the_prompt_waits_gets_its_turn_and_keeps_what_was_typed(home: Path, tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([
        _reply("Brewing.", ("brew", {})), _reply("Started the tea."),
        _reply("The tea is ready."), _reply("Draft received."),
    ]))
    child = chat(home, "--model", f"scripted:{script}")
    say(child, "brew tea")
    child.expect_exact("assistant: Started the tea.")
    child.expect_exact("1 background task running")
    child.expect_exact("you>")
    child.send("a draft")
    child.expect_exact("a draft")
    (tmp_path / "gate").touch()
    child.expect_exact("assistant: The tea is ready.")
    child.expect_exact("you>")
    child.send("\r")  # the draft came back, and is sent
    child.expect_exact("assistant: Draft received.")
    child.expect_exact("you>")
    child.sendeof()
    session_id = session_of(child)
    assert [e.text for e in events(home, session_id) if e.type == "user_message"] == ["brew tea", "a draft"]


def test_a_ctrl_d_typed_while_a_turn_runs_still_leaves_when_it_ends(home: Path, tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([_reply("", ("wait_for_gate", {})), _reply("The gate opened.")]))
    child = chat(home, "--model", f"scripted:{script}")
    say(child, "wait")
    wait_for(lambda: (tmp_path / "started").exists(), "the tool to start", TIMEOUT)
    child.sendeof()  # typed ahead, during the turn
    (tmp_path / "gate").touch()
    child.expect_exact("assistant: The gate opened.")
    session_of(child)  # left, without another key
    child.expect(pexpect.EOF)


def test_slash_commands_answer_without_a_turn(home: Path, tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([_reply("Hi."), _reply("SUMMARY: said hi")]))
    child = chat(home, "--model", f"scripted:{script}")
    say(child, "/help")
    child.expect_exact("/compact [TEXT]")
    say(child, "/tools")
    child.expect_exact("greet: test tool greet")
    say(child, "hello")
    child.expect_exact("assistant: Hi.")
    say(child, "/compact keep the greeting")
    child.expect(r"\[compacted: about [\d,]+ tokens -> [\d,]+\]")
    say(child, "/cost")
    child.expect_exact("1 model reply")
    say(child, "/nonsense")
    child.expect_exact("[unknown command /nonsense; /help lists them]")
    say(child, "/exit")
    session_id = session_of(child)
    assert any(e.type == "context_compacted" and e.instructions == "keep the greeting"
               for e in events(home, session_id))


def test_chat_off_a_terminal_says_to_use_run(home: Path) -> None:
    done = forked.run([PYTHON, "-m", "zagent_cli", "--home", str(home), "chat"], stdin=subprocess.DEVNULL,
                      capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 2 and "zagent chat needs a terminal" in done.stderr and "Traceback" not in done.stderr
