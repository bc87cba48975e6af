"""``-q`` and ``--json`` for the commands that drive a session (issue 26): ``-q`` prints only the
final reply, ``--json`` one object at the end, as ``llm`` and ``claude -p`` scripts expect;
without either, the transcript as before. Real processes, the scripted model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import forked
from conftest import python_tool

QUESTION = {"question": "Which colour should the button be?", "choices": ["red", "blue"]}


def zagent(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # stdin is no terminal (as in a script): a question or an approval parks the session
    return forked.run([sys.executable, "-m", "zagent_cli", "--home", str(home), *args], capture_output=True,
                      text=True, stdin=subprocess.DEVNULL, cwd=home.parent, timeout=120)


def script(tmp_path: Path, replies: list[dict[str, Any]]) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(replies))
    return f"scripted:{path}"


def test_quiet_prints_only_the_final_reply(home_dir: Path, tmp_path: Path) -> None:
    model = script(tmp_path, [
        {"text": "Looking first.", "tool_calls": [{"name": "glob", "arguments": {"pattern": "*.md"}}]},
        {"text": "There is no Markdown here."}])
    quiet = zagent(home_dir, "run", "-q", "--model", model, "any Markdown?")
    assert quiet.returncode == 0, quiet.stderr
    assert (quiet.stdout, quiet.stderr) == ("There is no Markdown here.\n", "")


def test_json_prints_one_object_with_the_reply_the_counts_and_the_tokens(home_dir: Path, tmp_path: Path) -> None:
    model = script(tmp_path, [
        {"text": "Looking first.", "tool_calls": [{"name": "glob", "arguments": {"pattern": "*.md"}}]},
        {"text": "None."}])
    done = zagent(home_dir, "run", "--json", "--model", model, "any Markdown?")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    result = json.loads(done.stdout)
    assert set(result) == {"session_id", "status", "reason", "reply", "turns", "requests", "tokens", "running_tasks",
                           "questions", "approvals"}
    assert (result["status"], result["reason"], result["reply"], result["turns"], result["requests"]) == (
        "idle", "idle", "None.", 1, 2)
    assert set(result["tokens"]) == {"input", "output", "cache_read", "cache_creation"}
    assert result["tokens"]["input"] > 0
    shown = json.loads(zagent(home_dir, "sessions", "show", result["session_id"], "--json").stdout)
    assert shown["session_id"] == result["session_id"]


def test_a_parked_session_says_what_it_waits_on_and_answer_approve_and_deny_take_the_modes_too(
        home_dir: Path, tmp_path: Path) -> None:
    python_tool(home_dir, "deploy", "print('deployed')", permission="ask")
    model = script(tmp_path, [
        {"text": "I need to ask.", "tool_calls": [{"name": "ask_user", "arguments": QUESTION}]},
        {"text": "Deploying.", "tool_calls": [{"name": "deploy", "arguments": {}}]},
        {"text": "Deployed in blue."}])
    parked = zagent(home_dir, "run", "--json", "--model", model, "make a button")
    assert parked.returncode == 0, parked.stderr
    result = json.loads(parked.stdout)
    session_id = result["session_id"]
    assert (result["status"], result["reply"], result["approvals"]) == ("waiting_on_user", "I need to ask.", [])
    (question,) = result["questions"]
    assert (question["question"], question["choices"]) == (QUESTION["question"], QUESTION["choices"])

    answered = zagent(home_dir, "answer", session_id, "blue", "-q")
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout == "Deploying.\n"  # the reply that asked for the approval
    assert "[waiting on approval: deploy {} (its manifest says" in answered.stderr
    approved = zagent(home_dir, "approve", session_id, "--json")
    assert approved.returncode == 0, approved.stderr
    assert (json.loads(approved.stdout)["reply"], json.loads(approved.stdout)["status"]) == ("Deployed in blue.", "idle")
    refused = zagent(home_dir, "deny", session_id, "-q", "--json")
    assert refused.returncode == 2 and "give -q (the final reply) or --json (one JSON object), not both" in refused.stderr


def test_a_failed_turn_says_why_on_stderr_and_exits_1(home_dir: Path, tmp_path: Path) -> None:
    model = script(tmp_path, [{"text": "only one"}])
    first = json.loads(zagent(home_dir, "run", "--json", "--model", model, "hi").stdout)
    failed = zagent(home_dir, "resume", first["session_id"], "again", "-q")
    assert failed.returncode == 1 and failed.stdout == ""
    assert failed.stderr == (f"error: model_error: the script has no reply #2 (it has 1); session "
                             f"{first['session_id']}\n")
    as_json = zagent(home_dir, "resume", first["session_id"], "again", "--json")
    assert as_json.returncode == 1
    assert (json.loads(as_json.stdout)["status"], json.loads(as_json.stdout)["reply"]) == ("model_error", None)


def test_detach_with_json_prints_the_queued_session(home_dir: Path) -> None:
    left = zagent(home_dir, "run", "--detach", "--json", "for the workers")
    assert left.returncode == 0, left.stderr
    result = json.loads(left.stdout)
    assert result["status"] == "queued" and result["session_id"].count("-") == 2
