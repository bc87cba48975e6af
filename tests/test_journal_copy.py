"""``zagent journal copy`` (issue 14): a whole journal from SQLite to PostgreSQL and back.

Real stores throughout: the source is a SQLite journal that real sessions wrote (an engine,
scripted models, tools that run: a call, a background task that wakes the agent, a
sub-agent), the PostgreSQL journal a database of the throwaway test server.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from conftest import python_tool

from zagent_cli.main import cli
from zagent_core import Engine, Home
from zagent_core.agent.loop import Agent
from zagent_core.config import Config, LimitsConfig
from zagent_core.journal.events import ToolCallFinished, UserMessage
from zagent_core.journal.protocol import Journal
from zagent_core.agent.models import load_model
from zagent_store import SQLiteJournal, open_journal
from zagent_store.copy import CopyMismatchError, CopyRefusedError, TargetHasSessionsError, copy_journal, verify


def reply(text: str = "", *calls: dict[str, Any]) -> dict[str, Any]:
    return {"text": text, "tool_calls": list(calls)}


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def drive(engine: Engine, tmp_path: Path, script: dict[str, Any], prompt: str, *, end: bool = False) -> str:
    """One session of the engine, its model scripted; returns its id once the agent is idle."""
    path = tmp_path / f"script-{prompt.replace(' ', '-')}.json"
    path.write_text(json.dumps(script))
    spec = f"scripted:{path}"
    with engine.start_session("test") as session:
        result = Agent(session, load_model(spec), spec=spec).run(prompt, wait_minutes=1)
        assert result.reason == "idle", result
        if end:
            session.end()
        return session.session_id


@pytest.fixture(scope="session")
def source_made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite journal of real sessions: tool calls, a background task, a sub-agent, an ended one
    (made once per test process; each test gets a copy of it: :func:`source`)."""
    made = tmp_path_factory.mktemp("journal-copy-source")
    home_dir, workspace = made / "home", made / "workspace"
    workspace.mkdir()
    python_tool(home_dir, "echo", "import json, sys\nprint(json.load(sys.stdin)['say'])",
                parameters={"type": "object", "properties": {"say": {"type": "string"}}, "required": ["say"]})
    python_tool(home_dir, "job", "print('job finished')", background=True)
    with SQLiteJournal(made / "source.db") as journal:
        engine = Engine(Home(home_dir), journal, workspace=workspace,
                        config=Config(limits=LimitsConfig(kill_grace_seconds=0.3)))
        drive(engine, made, {"replies": [reply("saying", call("echo", say="hi"), call("job")),
                                         reply("started the job"), reply("the job is done")]}, "calls and a task")
        drive(engine, made, {"replies": [reply("", call("spawn", task="say hello")), reply("it said hello")],
                             "children": {"say hello": [reply("", call("echo", say="hello")), reply("hello")]}},
              "a sub-agent")
        drive(engine, made, {"replies": [reply("bye")]}, "an ended one", end=True)
    assert not (made / "source.db-wal").exists()  # closed: the file alone holds every event
    return made


@pytest.fixture
def source(source_made: Path, home_dir: Path, tmp_path: Path) -> Iterator[SQLiteJournal]:
    """The test's own copy of the journal :func:`source_made` made, its home's tools in ``home_dir``."""
    shutil.copytree(source_made / "home", home_dir, dirs_exist_ok=True)
    shutil.copyfile(source_made / "source.db", tmp_path / "source.db")
    with SQLiteJournal(tmp_path / "source.db") as journal:
        yield journal


def zagent(home: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--home", str(home), *args], catch_exceptions=False)


def answers(home: Path, url: str) -> dict[str, Any]:
    """What ``audit --json`` and ``sessions list --all --json`` say of the journal at ``url``."""
    audit = zagent(home, "--journal", url, "audit", "--json", "--limit", "0")
    listed = zagent(home, "--journal", url, "sessions", "list", "--all", "--json", "--limit", "0")
    assert audit.exit_code == 0 and listed.exit_code == 0, audit.output + listed.output
    calls = json.loads(audit.output)["calls"]
    # audit orders by time: calls of the same millisecond come in each store's own order.
    return {"calls": sorted(calls, key=lambda row: (row["session_id"], row["call_id"])),
            "sessions": json.loads(listed.output)["sessions"]}


def test_a_journal_goes_to_postgresql_and_back_and_every_command_answers_alike(
        source: SQLiteJournal, home_dir: Path, postgres_url: str, tmp_path: Path) -> None:
    back = tmp_path / "back.db"
    ids = {s.session_id for s in source.sessions()}
    assert len(ids) == 4  # three sessions and the sub-agent's

    there = zagent(home_dir, "journal", "copy", str(source.path), postgres_url, "--json")
    assert there.exit_code == 0, there.output
    report = json.loads(there.output)
    assert (report["sessions"], report["events"]) == (4, sum(s.events for s in source.sessions()))
    assert report["digest"] == report["source_digest"] and report["nul_replaced"] == []
    assert report["snapshots"] >= 1 and report["driven"] == {}

    again = zagent(home_dir, "journal", "copy", postgres_url, f"sqlite:///{back}")
    assert again.exit_code == 0, again.output
    assert f"copied 4 sessions ({report['events']} events" in again.output
    assert f"sha256 {report['digest']}" in again.output  # the same events, hashed the same on every store

    first = answers(home_dir, f"sqlite:///{source.path}")
    assert len(first["calls"]) == 4 and {s["status"] for s in first["sessions"]} == {"idle", "ended"}
    assert first == answers(home_dir, postgres_url) == answers(home_dir, str(back))
    with open_journal(postgres_url) as copied:
        for summary in source.sessions():
            assert [(e.version, e.at, e.event) for e in copied.read(summary.session_id)] == [
                (e.version, e.at, e.event) for e in source.read(summary.session_id)]


def test_a_target_that_holds_one_of_the_sessions_is_refused_before_anything_is_written(
        source: SQLiteJournal, home_dir: Path, postgres_url: str) -> None:
    newest = source.sessions()[0].session_id
    with open_journal(postgres_url) as target:
        target.append(newest, [e.event for e in source.read(newest)], 0)

        with pytest.raises(TargetHasSessionsError) as refused:
            copy_journal(source, target)
        assert refused.value.sessions == [newest]
        assert [s.session_id for s in target.sessions()] == [newest]

    result = zagent(home_dir, "journal", "copy", f"sqlite:///{source.path}", postgres_url)
    assert result.exit_code == 2
    assert f"already holds 1 of the 4 sessions of {source.path} ({newest}); nothing was copied" in result.output
    assert "copy into a new, empty journal" in result.output and "Traceback" not in result.output


def test_a_journal_is_not_copied_into_itself(source: SQLiteJournal, home_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(CopyRefusedError, match="is both the source and the target"):
        copy_journal(source, source)
    (tmp_path / "again").mkdir()
    for target in (str(source.path), f"sqlite:///{source.path}", str(tmp_path / "again" / ".." / "source.db")):
        result = zagent(home_dir, "journal", "copy", str(source.path), target)
        assert result.exit_code == 2, result.output
        assert "is both the source and the target" in result.output


def test_a_missing_source_file_is_a_usage_error_and_is_not_made(home_dir: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nothing.db"
    result = zagent(home_dir, "journal", "copy", str(missing), str(tmp_path / "to.db"))
    assert result.exit_code == 2 and f"no journal at {missing}" in result.output
    assert not missing.exists() and not (tmp_path / "to.db").exists()
    bad = zagent(home_dir, "journal", "copy", "mysql://x/y", str(tmp_path / "to.db"))
    assert bad.exit_code == 2 and "journal URLs start with sqlite:/// or postgresql://" in bad.output


class _Lossy:
    """A real journal whose appends keep event times to the second only: a store that loses what it is given."""

    def __init__(self, journal: SQLiteJournal) -> None:
        self.journal = journal
        self.path = journal.path

    def append(self, session_id: str, events: Any, expected_version: int, **options: Any) -> Any:
        options["at"] = [when.replace(microsecond=0) for when in options["at"]]
        return self.journal.append(session_id, events, expected_version, **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.journal, name)


def test_the_check_names_a_session_the_target_does_not_hold_as_it_was(source: SQLiteJournal, tmp_path: Path) -> None:
    with SQLiteJournal(tmp_path / "lossy.db") as target:
        with pytest.raises(CopyMismatchError) as caught:
            copy_journal(source, _Lossy(target))  # type: ignore[arg-type]
        differing = {line.split(":")[0] for line in caught.value.differences}
        assert differing <= {f"session {s.session_id}" for s in source.sessions()} and differing
        assert "events on both sides, but version 1 differs (its time: " in str(caught.value)


def test_verify_finds_a_changed_event_and_a_missing_one(source: SQLiteJournal, tmp_path: Path) -> None:
    sessions = source.sessions()
    with SQLiteJournal(tmp_path / "other.db") as other:
        copy_journal(source, other)
        assert verify(source, other).digest == verify(other, source).digest

    changed_id, short_id = sessions[0].session_id, sessions[1].session_id
    with SQLiteJournal(tmp_path / "changed.db") as changed:
        for summary in sessions:
            stored = list(source.read(summary.session_id))
            if summary.session_id == short_id:
                stored = stored[:-1]
            events = [e.event for e in stored]
            if summary.session_id == changed_id:
                said = next(i for i, e in enumerate(events) if isinstance(e, UserMessage))
                events[said] = events[said].model_copy(update={"text": "something else"})
            changed.append(summary.session_id, events, 0, at=[e.at for e in stored])
        with pytest.raises(CopyMismatchError) as caught:
            verify(source, changed)
    assert sorted(caught.value.differences) == sorted([
        f"session {changed_id}: {sessions[0].events} events on both sides, but version {said + 1} differs (its body)",
        f"session {short_id}: {sessions[1].events} events in {source.path}, {sessions[1].events - 1} in "
        f"{tmp_path / 'changed.db'}"])


def test_a_nul_that_postgresql_keeps_as_u_fffd_is_reported_not_refused(
        home_dir: Path, workspace: Path, tmp_path: Path, postgres_url: str) -> None:
    python_tool(home_dir, "nul", "import sys\nsys.stdout.write('a\\x00b')")
    with SQLiteJournal(tmp_path / "nul.db") as journal:
        engine = Engine(Home(home_dir), journal, workspace=workspace)
        session_id = drive(engine, tmp_path, {"replies": [reply("", call("nul")), reply("read it")]}, "nul")
        assert any("\x00" in e.event.output for e in journal.read(session_id) if isinstance(e.event, ToolCallFinished))
        with open_journal(postgres_url) as target:
            report = copy_journal(journal, target)
            assert report.nul_replaced == [session_id] and report.digest != report.source_digest
            assert report.snapshots == 0  # its snapshot holds the U+0000 its copied events no longer do
            outputs = [e.event.output for e in target.read(session_id) if isinstance(e.event, ToolCallFinished)]
            assert outputs == ["a\ufffdb"]
            with SQLiteJournal(tmp_path / "back.db") as back:
                assert copy_journal(target, back).nul_replaced == []
    result = zagent(home_dir, "journal", "copy", str(tmp_path / "nul.db"), str(tmp_path / "again.db"))
    assert result.exit_code == 0 and "U+0000" not in result.output  # SQLite keeps it as it is


def test_a_fork_stays_a_top_level_session_when_its_first_append_is_split(source: SQLiteJournal,
                                                                        tmp_path: Path) -> None:
    from zagent_core.history.exports import fork_session

    child = next(s for s in source.sessions() if s.depth == 1)
    copied = list(source.read(child.session_id))
    fork_session(source, child.session_id, copied[-1].seq, "forked-child")
    with SQLiteJournal(tmp_path / "small-batches.db") as target:
        copy_journal(source, target, batch=2)
        listed = {s.session_id: s for s in target.sessions()}
    assert listed["forked-child"].parent_session_id is None and listed[child.session_id].depth == 1
    assert {s.session_id: s for s in source.sessions()} == listed


def test_progress_is_told_after_each_append(source: SQLiteJournal, tmp_path: Path) -> None:
    seen: list[Any] = []
    with SQLiteJournal(tmp_path / "target.db") as target:
        report = copy_journal(source, target, progress=seen.append, batch=5)
    assert seen[-1].sessions_done == seen[-1].sessions == 4
    assert seen[-1].events_done == seen[-1].events == report.events
    assert [step.events_done for step in seen] == sorted(step.events_done for step in seen)


def test_a_target_that_cannot_be_reached_is_an_error_that_says_which(source: SQLiteJournal, home_dir: Path,
                                                                    postgres_server: str) -> None:
    unreachable = postgres_server.rsplit("/", 1)[0] + "/no_such_database"
    result = zagent(home_dir, "journal", "copy", str(source.path), unreachable)
    assert result.exit_code == 1
    assert "DST: cannot open the journal" in result.output and "no_such_database" in result.output


def test_a_session_driven_while_it_is_copied_is_named_with_the_version_copied(source: SQLiteJournal,
                                                                              tmp_path: Path) -> None:
    from zagent_core.session.leases import this_process

    driven = source.sessions()[-1]
    source.acquire_lease(driven.session_id, this_process("test"))  # this live process drives it
    with SQLiteJournal(tmp_path / "target.db") as target:
        report = copy_journal(source, target)
        assert report.driven == {driven.session_id: driven.events}
        assert target.lease(driven.session_id) is None  # leases stay with the source's processes


def test_on_a_terminal_a_progress_line_is_shown_while_it_copies(source: SQLiteJournal, home_dir: Path,
                                                                tmp_path: Path) -> None:
    import sys

    from conftest import run_on_terminal

    zagent_bin = str(Path(sys.executable).parent / "zagent")
    shown = run_on_terminal([zagent_bin, "--home", str(home_dir), "journal", "copy", str(source.path),
                             str(tmp_path / "target.db")], tmp_path, b"").decode()
    assert "\rcopying: 4/4 sessions" in shown and "copied 4 sessions" in shown


def test_a_postgresql_database_is_not_copied_into_itself_under_another_spelling(home_dir: Path,
                                                                                postgres_url: str) -> None:
    with open_journal(postgres_url):
        pass  # made: an empty journal, so only the check of the locations can refuse
    other = postgres_url.replace("postgresql://", "postgres://").replace("127.0.0.1", "localhost") + "?sslmode=disable"
    result = zagent(home_dir, "journal", "copy", postgres_url, other)
    assert result.exit_code == 2, result.output
    assert "is both the source and the target" in result.output
