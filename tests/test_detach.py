"""``zagent run --detach`` (issue 26): it takes ``--model``, journaled with the message so the
worker answers it with that model, and the session it leaves lists as ``queued`` (not
``interrupted``: nothing was cut off) until a worker claims it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import forked
from conftest import sql

from zagent_store import SQLiteJournal


def zagent(home: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return forked.run([sys.executable, "-m", "zagent_cli", "--home", str(home), *args], capture_output=True,
                      text=True, stdin=subprocess.DEVNULL, cwd=cwd, timeout=120)


def listed(home: Path, cwd: Path) -> dict[str, str]:
    listing = zagent(home, "sessions", "list", "--json", cwd=cwd)
    return {s["session_id"]: s["status"] for s in json.loads(listing.stdout)["sessions"]}


def test_a_detached_message_with_a_model_is_queued_then_answered_by_a_worker_with_that_model(
        home_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "script.json").write_text(json.dumps([{"text": "answered by the script"}]))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    left = zagent(home_dir, "run", "--detach", "--model", "scripted:script.json", "for the workers", cwd=tmp_path)
    assert left.returncode == 0, left.stderr
    session_id = left.stdout.strip()
    with SQLiteJournal(home_dir / "journal.db") as journal:
        (message,) = [e.event for e in journal.read(session_id) if e.event.type == "user_message"]
    assert message.model == f"scripted:{tmp_path / 'script.json'}"  # absolute: the worker runs anywhere
    assert listed(home_dir, elsewhere) == {session_id: "queued"}
    shown = zagent(home_dir, "sessions", "show", session_id, cwd=elsewhere)
    assert f"session {session_id} (queued)" in shown.stdout

    # The worker has no --model and config.json names none: the message's model answers it.
    worker = zagent(home_dir, "worker", "--until-idle", "--poll", "0.1", cwd=elsewhere)
    assert worker.returncode == 0, worker.stderr
    assert f"[session {session_id}: idle after 1 model request(s)]" in worker.stderr
    assert listed(home_dir, elsewhere) == {session_id: "idle"}
    with SQLiteJournal(home_dir / "journal.db") as journal:
        events = [e.event for e in journal.read(session_id)]
    assert [e.text for e in events if e.type == "model_replied"] == ["answered by the script"]
    assert [e.model for e in events if e.type == "turn_started"] == [message.model]


def test_a_detached_message_without_a_model_is_queued_and_a_bad_model_is_refused(
        home_dir: Path, tmp_path: Path) -> None:
    left = zagent(home_dir, "run", "--detach", "no model named", cwd=tmp_path)
    assert left.returncode == 0, left.stderr
    assert listed(home_dir, tmp_path) == {left.stdout.strip(): "queued"}
    (row,) = sql(f"sqlite:///{home_dir / 'journal.db'}", "SELECT data FROM events WHERE type = 'user_message'")
    assert json.loads(row["data"]) == {"v": 1, "text": "no model named"}  # a message that names no model: as ever
    bad = zagent(home_dir, "run", "--detach", "--model", "gpt-4o", "hi", cwd=tmp_path)
    assert bad.returncode == 2 and 'model "gpt-4o" is not one zagent knows' in bad.stderr
    missing = zagent(home_dir, "run", "--detach", "--model", "scripted:nope.json", "hi", cwd=tmp_path)
    assert missing.returncode == 2 and "cannot use the script" in missing.stderr
    assert len(listed(home_dir, tmp_path)) == 1  # nothing journaled for either
