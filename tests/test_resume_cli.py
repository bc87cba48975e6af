"""`zagent resume SESSION` needs nothing retyped (issue 8, item 12): the model a session
ran with is journaled with each turn, and a session no model drove is settled and ended."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import forked
from conftest import PYTHON, python_tool

from zagent_store import SQLiteJournal


def zagent(home: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return forked.run([PYTHON, "-m", "zagent_cli", "--home", str(home), *args], capture_output=True, text=True,
                      cwd=cwd, timeout=120)


def turns(home: Path, session_id: str) -> list:
    with SQLiteJournal(home / "journal.db") as journal:
        return [e.event for e in journal.read(session_id) if e.event.type == "turn_started"]


def session_of(result: subprocess.CompletedProcess[str]) -> str:
    return result.stderr.rsplit("session ", 1)[1].split("]")[0]


def test_resume_asks_the_model_the_session_journaled_from_any_folder(home_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "script.json").write_text(json.dumps([{"text": "first answer"}, {"text": "second answer"}]))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    first = zagent(home_dir, "run", "--model", "scripted:script.json", "hello", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    session_id = session_of(first)
    again = zagent(home_dir, "resume", session_id, "and now?", cwd=elsewhere)
    assert again.returncode == 0, again.stderr
    assert "assistant: second answer" in again.stdout
    spec = f"scripted:{tmp_path / 'script.json'}"
    assert [t.model for t in turns(home_dir, session_id)] == [spec, spec]


def test_a_model_given_to_resume_overrides_the_journaled_one_and_is_journaled(
        home_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps([{"text": "from a"}]))
    (tmp_path / "b.json").write_text(json.dumps([{"text": "unused"}, {"text": "from b"}]))
    session_id = session_of(zagent(home_dir, "run", "--model", "scripted:a.json", "hi", cwd=tmp_path))
    again = zagent(home_dir, "resume", session_id, "more", "--model", "scripted:b.json", cwd=tmp_path)
    assert again.returncode == 0 and "assistant: from b" in again.stdout, again.stderr
    assert turns(home_dir, session_id)[-1].model == f"scripted:{tmp_path / 'b.json'}"


def test_a_tools_run_killed_with_its_task_running_is_settled_by_resume_and_ended(
        home_dir: Path, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    python_tool(home_dir, "later", f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.01)\n"
                "print('later done')", background=True, timeout_seconds=60)
    driver = forked.Popen([PYTHON, "-m", "zagent_cli", "--home", str(home_dir), "tools", "run", "later"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=tmp_path)
    assert driver.stdout is not None
    assert driver.stdout.readline().startswith("started as task #1")  # the task runs: now the driver dies
    driver.kill()
    driver.wait(timeout=10)
    with SQLiteJournal(home_dir / "journal.db") as journal:
        (summary,) = journal.sessions()
    gate.touch()
    settled = zagent(home_dir, "resume", summary.session_id, cwd=tmp_path)
    assert settled.returncode == 0, settled.stderr
    assert "task #1 (later) finished" in settled.stdout
    with SQLiteJournal(home_dir / "journal.db") as journal:
        kinds = [e.event.type for e in journal.read(summary.session_id)]
    assert "task_exited" in kinds and kinds[-1] == "session_ended"


def test_a_run_cut_off_before_its_first_turn_asks_for_the_model_instead_of_ending(home_dir: Path,
                                                                                   tmp_path: Path) -> None:
    from zagent_core import Engine, Home

    with SQLiteJournal(home_dir / "journal.db") as journal:
        session = Engine(Home(home_dir), journal, workspace=tmp_path).start_session("run")
        session.record_user_message("hello")  # then the run was killed: no turn journaled its model
        session.release()
    refused = zagent(home_dir, "resume", session.session_id, cwd=tmp_path)
    assert refused.returncode == 2
    assert "no model: give --model (scripted:PATH, openai:MODEL or anthropic:MODEL)" in refused.stderr
    with SQLiteJournal(home_dir / "journal.db") as journal:
        assert not next(iter(journal.sessions())).ended  # nothing was lost: it resumes with --model
    listed = zagent(home_dir, "sessions", "list", cwd=tmp_path)
    assert "queued" in listed.stdout  # its message waits, nothing was cut off: as one run --detach leaves
    (tmp_path / "script.json").write_text(json.dumps([{"text": "hello to you"}]))
    resumed = zagent(home_dir, "resume", session.session_id, "--model", "scripted:script.json", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "assistant: hello to you" in resumed.stdout  # the message the run never took up is answered
