"""The read-before-edit gate, durable: its refusals, the map as a projection of the journal,
and what a SIGKILL leaves (the gate after a resume, never half a file)."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO

import pytest
import forked
from files_driver import content
from hypothesis import given, settings
from hypothesis import strategies as st

from zagent_core import Engine, Home
from zagent_core.builtins import files
from zagent_core.journal.events import ReadStateUpdated
from zagent_core.session.engine import Session
from zagent_core.journal.fold import rebuild
from zagent_store import SQLiteJournal

DRIVER = Path(__file__).resolve().parent / "files_driver.py"


@pytest.fixture
def session(engine: Engine) -> Session:
    return engine.start_session("test")


def test_a_stale_read_is_refused_then_the_rewriter_is_named(session: Session, workspace: Path) -> None:
    path = workspace / "a.txt"
    path.write_text("one\n")
    assert not session.call("read_file", {"path": "a.txt"}).is_error
    at = session.state.read_state[str(path)].at
    path.write_text("two\n")  # an editor saves it
    first = session.call("edit", {"path": "a.txt", "old_string": "one", "new_string": "1"})
    assert (first.output, first.is_error) == (f"a.txt changed since you read it at {at}; read it again", True)
    assert session.state.read_state[str(path)].stale_rejections == 1
    # The model reads it again, and it changes again before the edit: the second refusal in a row.
    assert not session.call("read_file", {"path": "a.txt"}).is_error
    at = session.state.read_state[str(path)].at
    path.write_text("three\n")
    second = session.call("write_file", {"path": "a.txt", "content": "mine\n"})
    assert second.output == (
        f"a.txt changed since you read it at {at}, again (2 refusals in a row): something outside this session "
        "(an editor's auto-save, a formatter, a file watcher) keeps rewriting it. Stop whatever rewrites it, or "
        "make the change with that tool in mind, then read it again")
    assert path.read_text() == "three\n"
    # A successful write ends the run of refusals, and leaves the entry at the new bytes, elided.
    assert not session.call("read_file", {"path": "a.txt"}).is_error
    assert not session.call("multi_edit", {"path": "a.txt", "edits": [
        {"old_string": "three", "new_string": "3"}]}).is_error
    entry = session.state.read_state[str(path)]
    assert (entry.hash, entry.elided, entry.stale_rejections) == (files.content_hash(b"3\n"), True, 0)
    third = session.call("edit", {"path": "a.txt", "old_string": "3", "new_string": "4"})
    assert (third.output, path.read_text()) == ("Edited a.txt: 1 replacement", "4\n")


def test_a_new_file_needs_no_read_but_a_file_made_since_does(session: Session, workspace: Path) -> None:
    assert session.call("write_file", {"path": "new.txt", "content": "x"}).output == "Created new.txt (1 bytes)"
    (workspace / "other.txt").write_text("made by someone else")
    refusal = session.call("edit", {"path": "other.txt", "old_string": "made", "new_string": "x"}).output
    assert refusal.startswith("other.txt has not been read in this session")


# -- the map is a projection of the journal -----------------------------------------------

FILES = ("a.txt", "b.txt")
OPS = st.lists(st.tuples(st.sampled_from(["read", "read_head", "edit", "write", "outside", "turn"]),
                         st.sampled_from(FILES)), max_size=14)


class Reference:
    """What the gate must decide, from what happened: per file, whether the model's view is current."""

    def __init__(self) -> None:
        self.seen: dict[str, bool] = {}  # name -> the last thing the session did was read or write it
        self.token: dict[str, int] = {}
        self.writes = 0

    def expected(self, name: str, exists: bool) -> str:
        if not exists:
            return "missing"
        if name not in self.seen:
            return "unread"
        return "current" if self.seen[name] else "stale"


@settings(max_examples=40, deadline=None)
@given(ops=OPS)
def test_the_map_rebuilt_from_the_journal_is_the_live_map(ops: list[tuple[str, str]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home, workspace = Path(tmp) / "home", Path(tmp) / "workspace"
        workspace.mkdir()
        with SQLiteJournal(home / "journal.db") as journal:
            engine = Engine(Home(home), journal, workspace=workspace)
            with engine.start_session("property") as session:
                reference = Reference()
                for op, name in ops:
                    _step(session, workspace, reference, op, name)
                    live = session.state.read_state
                    assert rebuild(journal.read(session.session_id)).read_state == live
                    assert engine.session_state(session.session_id).read_state == live
                    for key, entry in live.items():
                        current = (workspace / Path(key).name).read_bytes()
                        assert (entry.hash == files.content_hash(current)) == reference.seen[Path(key).name]


def _step(session: Session, workspace: Path, reference: Reference, op: str, name: str) -> None:
    path = workspace / name
    token = reference.token.get(name, 0)
    state = reference.expected(name, path.exists())
    if op == "turn":
        session.end_turn("completed")
    elif op == "outside":
        reference.writes += 1
        path.write_text(f"outside {reference.writes}\ntoken {token}\n")
        reference.token[name] = token
        if name in reference.seen:
            reference.seen[name] = False
    elif op in ("read", "read_head"):
        result = session.call("read_file", {"path": name, **({"limit": 1} if op == "read_head" else {})})
        assert result.is_error == (state == "missing"), result.output
        if state != "missing":
            reference.seen[name] = True
    else:
        if op == "edit":
            arguments = {"path": name, "old_string": f"token {token}", "new_string": f"token {token + 1}"}
        else:
            reference.writes += 1
            arguments = {"path": name, "content": f"written {reference.writes}\ntoken {token + 1}\n"}
        result = session.call("edit" if op == "edit" else "write_file", arguments)
        applies = state == "current" or (op == "write" and state == "missing")
        assert result.is_error != applies, (state, result.output)
        if applies:
            reference.seen[name], reference.token[name] = True, token + 1
        elif state == "stale":
            assert "changed since you read it" in result.output


# -- SIGKILL ------------------------------------------------------------------------------


def _start(home: Path, workspace: Path, *args: str) -> subprocess.Popen[str]:
    return forked.Popen([sys.executable, str(DRIVER), str(home), str(workspace), *args],
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=DRIVER.parent)


def _line(stream: IO[str] | None, prefix: str) -> str:
    assert stream is not None
    for line in stream:
        if line.startswith(prefix):
            return line.split(maxsplit=1)[1].strip() if " " in line.strip() else ""
    raise AssertionError(f"the driver ended before printing {prefix}")


def _kill(process: subprocess.Popen[str]) -> None:
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL
    for stream in (process.stdin, process.stdout):
        if stream is not None:
            stream.close()


def test_resume_after_a_sigkill_keeps_the_gate(tmp_path: Path) -> None:
    home, workspace = tmp_path / "home", tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "kept.txt").write_text("kept\n")
    (workspace / "stale.txt").write_text("stale\n")
    driver = _start(home, workspace, "read", "kept.txt", "stale.txt")
    session_id = _line(driver.stdout, "SESSION")
    _line(driver.stdout, "READ")
    _kill(driver)
    (workspace / "stale.txt").write_text("rewritten while no one drove the session\n")
    with SQLiteJournal(home / "journal.db") as journal:
        with Engine(Home(home), journal, workspace=workspace).resume(session_id) as session:
            assert session.call("edit", {"path": "kept.txt", "old_string": "kept",
                                         "new_string": "edited"}).output == "Edited kept.txt: 1 replacement"
            refusal = session.call("edit", {"path": "stale.txt", "old_string": "stale", "new_string": "x"})
            assert refusal.is_error and refusal.output.startswith("stale.txt changed since you read it at ")
            assert session.call("edit", {"path": "never.txt", "old_string": "a", "new_string": "b"}).is_error
    assert (workspace / "kept.txt").read_text() == "edited\n"


@pytest.mark.parametrize("writes_before_kill", [1, 2, 3, 5, 8])
def test_a_sigkill_during_write_file_never_leaves_half_a_file(tmp_path: Path, writes_before_kill: int) -> None:
    home, workspace = tmp_path / "home", tmp_path / "workspace"
    workspace.mkdir()
    size = 4 * 1024 * 1024
    whole = {content("a", size).encode(), content("b", size).encode()}
    driver = _start(home, workspace, "write", "big.txt", str(size))
    session_id = _line(driver.stdout, "SESSION")
    for _ in range(writes_before_kill):
        _line(driver.stdout, "WROTE")
    _kill(driver)  # while the next write runs: each takes milliseconds, the print between them microseconds
    assert (workspace / "big.txt").read_bytes() in whole
    # The cut-off write is reported interrupted on resume, and the gate still guards the file:
    # a write passes when the file holds what the journal says the model saw, is refused otherwise.
    with SQLiteJournal(home / "journal.db") as journal:
        with Engine(Home(home), journal, workspace=workspace).resume(session_id) as session:
            result = session.call("write_file", {"path": "big.txt", "content": "small\n"})
            journaled = session.state.read_state[str(workspace / "big.txt")].hash
            interrupted = list(journal.read(session_id, types=["tool_call_interrupted"]))
    on_disk = (workspace / "big.txt").read_bytes()
    leftovers = [p.name for p in workspace.iterdir() if p.name != "big.txt"]
    if result.is_error:
        assert "changed since you read it" in result.output
        assert on_disk in whole and files.content_hash(on_disk) != journaled
    else:
        assert on_disk == b"small\n"
        assert not leftovers, "the next write removes what the killed one left"
    assert len(interrupted) <= 1  # the write the kill cut off, unless it fell between two calls


def test_an_entry_an_older_zagent_journaled_is_compared_in_its_own_hash(engine: Engine, workspace: Path) -> None:
    """Journals written before the XXH3 hash hold SHA-256's first 16 hex digits: resumed, a session
    still knows the files it read (a re-read is "unchanged", an edit passes the gate), and a file
    changed since is still refused."""
    (workspace / "same.txt").write_text("one\n")
    (workspace / "moved.txt").write_text("two\n")
    session = engine.start_session("test")
    for name in ("same.txt", "moved.txt"):
        assert not session.call("read_file", {"path": name}).is_error
    entries = [entry.model_copy(update={"hash": hashlib.sha256((workspace / name).read_bytes()).hexdigest()[:16]})
               for name, entry in ((Path(path).name, entry) for path, entry in session.state.read_state.items())]
    session.release()
    engine.journal.append(session.session_id, [ReadStateUpdated(call_id="older", entries=entries)],
                          engine.journal.head(session.session_id))
    (workspace / "moved.txt").write_text("changed while no one drove the session\n")
    with engine.resume(session.session_id) as resumed:
        assert resumed.state.read_state[str(workspace / "same.txt")].hash == entries[0].hash
        assert resumed.call("read_file", {"path": "same.txt"}).output.startswith(
            "same.txt: unchanged since your read at ")
        assert resumed.call("edit", {"path": "same.txt", "old_string": "one",
                                     "new_string": "1"}).output == "Edited same.txt: 1 replacement"
        refusal = resumed.call("edit", {"path": "moved.txt", "old_string": "two", "new_string": "2"})
        assert refusal.is_error and refusal.output.startswith("moved.txt changed since you read it at ")
