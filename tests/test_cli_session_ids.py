"""Session ids by a part of them (issue 26): every command that takes a session id takes its
start (as git takes a short hash) or its random end, when no other session's id has it; a
part that names several sessions lists them (exit 2), one that names none says so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import forked
import pytest
from click.testing import CliRunner

from zagent_cli.main import cli
from zagent_core.journal.events import SessionStarted, UserMessage
from zagent_store import SQLiteJournal

IDS = ["20261130-044600-3fa2c1", "20261130-044612-77b0e4", "20261201-090000-c0ffee"]

#: Each command that takes a session id, with the part standing for the id.
COMMANDS = [
    ["run", "--session", "{id}", "hi"], ["resume", "{id}"], ["answer", "{id}", "yes"], ["approve", "{id}"],
    ["deny", "{id}"], ["compact", "{id}"], ["chat", "{id}"], ["replay", "{id}"], ["audit", "--session", "{id}"],
    ["sessions", "show", "{id}"], ["sessions", "export", "{id}"], ["sessions", "fork", "{id}", "--at", "1"],
    ["sessions", "trace", "{id}", "--endpoint", "http://127.0.0.1:4318"],
]


def home_with_sessions(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    with SQLiteJournal(home / "journal.db") as journal:
        for session_id in IDS:
            journal.append(session_id, [SessionStarted(origin="run", workspace=str(tmp_path), zagent_version="0"),
                                        UserMessage(text=f"prompt of {session_id}")], 0)
    return home


def invoke(home: Path, *args: str) -> click.testing.Result:
    return CliRunner().invoke(cli, ["--home", str(home), *args])


def test_every_command_that_takes_a_session_id_is_tested_here() -> None:
    def taking(group: click.Group, path: tuple[str, ...]) -> set[tuple[str, ...]]:
        found = set()
        context = click.Context(group)
        for name in group.list_commands(context):  # each module of commands is loaded when asked for
            command = group.get_command(context, name)
            assert command is not None
            if isinstance(command, click.Group):
                found |= taking(command, (*path, name))
            elif any(param.name == "session_id" for param in command.params):
                found.add((*path, name))
        return found

    tested = {tuple(word for word in argv if word == word.lower() and not word.startswith(("-", "{")))[:2]
              for argv in COMMANDS}
    assert {path if path[0] == "sessions" else path[:1] for path in taking(cli, ())} == {
        path if path[0] == "sessions" else path[:1] for path in tested}


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: " ".join(w for w in argv if not w.startswith("{")))
def test_a_part_that_names_several_sessions_lists_them_and_changes_nothing(tmp_path: Path, argv: list[str]) -> None:
    home = home_with_sessions(tmp_path)
    result = invoke(home, *[word.replace("{id}", "20261130") for word in argv])
    assert result.exit_code == 2, result.output
    assert '"20261130" names more than one session; give more of its id:\n  20261130-044600-3fa2c1\n' \
           "  20261130-044612-77b0e4\n" in result.output
    with SQLiteJournal(home / "journal.db") as journal:
        assert [(s.session_id, s.events) for s in journal.sessions()] == [(sid, 2) for sid in reversed(IDS)]


def test_the_start_or_the_end_of_an_id_names_its_session_and_a_part_of_none_is_refused(tmp_path: Path) -> None:
    home = home_with_sessions(tmp_path)
    for part in ("20261130-04460", "3fa2c1", IDS[0]):
        shown = invoke(home, "sessions", "show", part, "--json")
        assert shown.exit_code == 0, shown.output
        assert json.loads(shown.output)["session_id"] == IDS[0]
    assert json.loads(invoke(home, "sessions", "export", "c0ffee").output.splitlines()[0])["session_id"] == IDS[2]
    unknown = invoke(home, "sessions", "show", "beef")
    assert unknown.exit_code == 2
    assert 'no session "beef" in the journal (no id is, starts or ends with it)' in unknown.output
    middle = invoke(home, "sessions", "show", "0446")  # the middle of an id names nothing
    assert middle.exit_code == 2 and 'no session "0446"' in middle.output


def test_resume_by_the_random_end_of_an_id_continues_that_session(tmp_path: Path) -> None:
    home = tmp_path / "home"
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": "first"}, {"text": "second"}]))

    def zagent(*args: str) -> subprocess.CompletedProcess[str]:
        return forked.run([sys.executable, "-m", "zagent_cli", "--home", str(home), *args],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)

    first = zagent("run", "--model", f"scripted:{script}", "hello")
    assert first.returncode == 0, first.stderr
    session_id = first.stderr.rsplit("session ", 1)[1].split("]")[0]
    again = zagent("resume", session_id.rsplit("-", 1)[1], "more")
    assert again.returncode == 0, again.stderr
    assert "assistant: second" in again.stdout and f"session {session_id}]" in again.stderr
    # --last takes the one argument for the PROMPT, never for a session's name
    last = zagent("resume", "--last", "c0ffee")
    assert "names" not in last.stderr and "user: c0ffee" in last.stdout
