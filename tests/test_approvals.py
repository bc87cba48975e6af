"""Approval of `"permission": "ask"` tools (issue 11): a call waits for a person's decision,
durably; `zagent approve` runs it, `zagent deny` gives the model the reason; each once.

The CLI tests run the real `zagent` in real processes with the scripted model and a real
SQLite journal; crashes are real SIGKILLs at the engine's named points
(`crashpoints.APPROVAL_POINTS`).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from conftest import PYTHON, python_tool, run_on_terminal
# The real CLI with no terminal (as in a script or CI), and the journal read back.
from test_ask_user import events, only_session, status, zagent

from zagent_core import Engine, Home
from zagent_core.agent.loop import Agent
from zagent_core.config import ApprovalsConfig, Config
from zagent_core.session.engine import NoApprovalError
from zagent_core.journal.events import ApprovalDecided, ApprovalRequested, ToolCallRejected, ToolCallStarted
from zagent_core.agent.models import Message, ModelReply, ToolSpec
from zagent_core.agent.models.scripted import ScriptedModel
from zagent_store import SQLiteJournal

DEPLOY = """
import json, sys
env = json.load(sys.stdin)["env"]
with open("deployed.txt", "a") as log:
    log.write(env + "\\n")
print(f"deployed to {env}")
"""
ENV = {"type": "object", "properties": {"env": {"type": "string"}}, "required": ["env"],
       "additionalProperties": False}
SCRIPT = [
    {"text": "Deploying.", "tool_calls": [{"id": "dep1", "name": "deploy", "arguments": {"env": "prod"}}]},
    {"text": "Done."},
]


@pytest.fixture
def deploy(home_dir: Path) -> Path:
    python_tool(home_dir, "deploy", DEPLOY, parameters=ENV, permission="ask")
    return home_dir.parent / "deployed.txt"


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(SCRIPT))
    return path


def deployed(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


def decided_once(home: Path, session_id: str, approved: bool, via: str) -> Any:
    """Asked once, decided once, and the call's one result: the tool's (approved, run once
    after the decision) or the denial (committed with the decision, in one transaction)."""
    stored = events(home, session_id)
    asked = [e for e in stored if isinstance(e.event, ApprovalRequested)]
    decided = [e for e in stored if isinstance(e.event, ApprovalDecided)]
    assert len(asked) == 1 and len(decided) == 1, [e.event.type for e in stored]
    assert decided[0].event.approved is approved and decided[0].event.via == via
    call_id = asked[0].event.call_id
    of_call = [e for e in stored if getattr(e.event, "call_id", None) == call_id]
    results = [e for e in of_call if e.event.type in ("tool_call_finished", "tool_call_interrupted",
                                                      "tool_call_rejected")]
    assert len(results) == 1, [e.event.type for e in of_call]
    (result,) = results
    starts = [e for e in of_call if isinstance(e.event, ToolCallStarted)]
    if approved:
        assert len(starts) == 1 and asked[0].version < decided[0].version < starts[0].version < result.version
    else:
        assert not starts and isinstance(result.event, ToolCallRejected) and result.event.reason == "denied"
        assert result.version == decided[0].version + 1 and result.at == decided[0].at
    return result.event


def run_until_parked(home: Path, script: Path, crash_at: str | None = None) -> str:
    result = zagent(home, "run", "--model", f"scripted:{script}", "ship it", crash_at=crash_at)
    session_id = only_session(home)
    if crash_at is None:
        assert result.returncode == 0, result.stderr
        assert f"approve with: zagent approve {session_id}; deny with: zagent deny {session_id}" in result.stdout
        assert "? run deploy? it needs approval (its manifest says \"permission\": \"ask\")" in result.stdout
    else:
        assert result.returncode == -signal.SIGKILL, result.stderr
    return session_id


# -- parking, approving, denying ----------------------------------------------------------


def test_a_call_that_needs_approval_parks_the_run_and_an_approval_from_another_process_runs_it(
        home_dir: Path, deploy: Path, script: Path) -> None:
    session_id = run_until_parked(home_dir, script)
    assert status(home_dir) == "waiting on approval"
    kinds = [e.event.type for e in events(home_dir, session_id)]
    assert kinds[-3:] == ["tool_call_requested", "approval_requested", "turn_ended"]
    assert "tool_call_started" not in kinds and deployed(deploy) == []

    approved = zagent(home_dir, "approve", session_id)
    assert approved.returncode == 0, approved.stderr
    assert "<- ok: deployed to prod" in approved.stdout and "assistant: Done." in approved.stdout
    assert deployed(deploy) == ["prod"]
    decided_once(home_dir, session_id, True, "zagent approve")
    assert status(home_dir) == "idle"
    shown = zagent(home_dir, "sessions", "show", session_id)
    assert "asked the user to approve deploy" in shown.stdout
    assert "the call was approved (zagent approve)" in shown.stdout


def test_a_denial_is_the_calls_result_with_its_reason_and_the_tool_never_runs(
        home_dir: Path, deploy: Path, script: Path) -> None:
    session_id = run_until_parked(home_dir, script)
    denied = zagent(home_dir, "deny", session_id, "--reason", "not on a Friday")
    assert denied.returncode == 0, denied.stderr
    assert "<- error: deploy was not run: the user denied this call (zagent deny): not on a Friday" in denied.stdout
    assert "assistant: Done." in denied.stdout
    assert deployed(deploy) == []
    result = decided_once(home_dir, session_id, False, "zagent deny")
    assert "not on a Friday" in result.message
    assert status(home_dir) == "idle"


def test_a_second_decision_is_refused_saying_what_was_decided(home_dir: Path, deploy: Path, script: Path) -> None:
    session_id = run_until_parked(home_dir, script)
    assert zagent(home_dir, "deny", session_id, "dep1", "--reason", "wrong env").returncode == 0
    before = len(events(home_dir, session_id))
    for again in (["approve", session_id], ["deny", session_id, "dep1"]):
        refused = zagent(home_dir, *again)
        assert refused.returncode == 1 and "Traceback" not in refused.stderr
        assert "call dep1 in session" in refused.stderr
        assert "was already denied (zagent deny: 'wrong env'); a decision is taken once" in refused.stderr
    assert len(events(home_dir, session_id)) == before
    assert deployed(deploy) == []


def test_a_decision_for_a_session_that_waits_on_nothing_is_refused(home_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "plain.json").write_text(json.dumps([{"text": "hello"}]))
    assert zagent(home_dir, "run", "--model", f"scripted:{tmp_path / 'plain.json'}", "hi").returncode == 0
    session_id = only_session(home_dir)
    refused = zagent(home_dir, "approve", session_id)
    assert refused.returncode == 1 and "has no call waiting for approval; nothing was changed" in refused.stderr
    named = zagent(home_dir, "deny", session_id, "nope")
    assert named.returncode == 1 and "has no call nope waiting for approval" in named.stderr


def test_several_waiting_calls_are_decided_one_by_one_naming_the_call(
        home_dir: Path, deploy: Path, tmp_path: Path) -> None:
    two = tmp_path / "two.json"
    two.write_text(json.dumps([
        {"tool_calls": [{"id": "stage", "name": "deploy", "arguments": {"env": "staging"}},
                        {"id": "prod", "name": "deploy", "arguments": {"env": "prod"}}]},
        {"text": "One of two."},
    ]))
    result = zagent(home_dir, "run", "--model", f"scripted:{two}", "ship both")
    session_id = only_session(home_dir)
    assert result.returncode == 0 and f"zagent approve {session_id} prod;" in result.stdout, result.stderr
    unnamed = zagent(home_dir, "approve", session_id)
    assert unnamed.returncode == 1
    assert "waits on 2 approvals; name the call to decide: stage, prod" in unnamed.stderr
    first = zagent(home_dir, "approve", session_id, "stage")
    assert first.returncode == 0 and f"approve with: zagent approve {session_id};" in first.stdout
    assert status(home_dir) == "waiting on approval" and deployed(deploy) == ["staging"]
    last = zagent(home_dir, "deny", session_id, "--reason", "staging first")
    assert last.returncode == 0 and "assistant: One of two." in last.stdout
    assert deployed(deploy) == ["staging"] and status(home_dir) == "idle"


def test_resume_keeps_a_parked_call_parked_and_refuses_a_new_prompt(
        home_dir: Path, deploy: Path, script: Path) -> None:
    session_id = run_until_parked(home_dir, script)
    resumed = zagent(home_dir, "resume", session_id)
    assert resumed.returncode == 0, resumed.stderr
    assert f"approve with: zagent approve {session_id}" in resumed.stdout
    kinds = [e.event.type for e in events(home_dir, session_id)]
    assert "tool_call_interrupted" not in kinds and "tool_call_started" not in kinds
    assert kinds.count("model_replied") == 1 and status(home_dir) == "waiting on approval"
    shown = zagent(home_dir, "sessions", "show", session_id).stdout
    assert f"session {session_id} (waiting on approval)" in shown
    assert "no result yet: it waits for approval (zagent approve, or zagent deny)" in shown
    prompted = zagent(home_dir, "resume", session_id, "something else")
    assert prompted.returncode == 2 and "waits for a decision on a call first" in prompted.stderr


def test_config_pre_approves_a_tool_and_the_journal_says_so(home_dir: Path, deploy: Path, script: Path) -> None:
    (home_dir / "config.json").write_text(json.dumps({"approvals": {"allow": ["deploy"]}}))
    ran = zagent(home_dir, "run", "--model", f"scripted:{script}", "ship it")
    assert ran.returncode == 0, ran.stderr
    assert "approved (config)" in ran.stdout and "assistant: Done." in ran.stdout
    assert deployed(deploy) == ["prod"]
    decided_once(home_dir, only_session(home_dir), True, "config")


def test_tools_run_of_a_tool_that_needs_approval_parks_and_approve_runs_it(home_dir: Path, deploy: Path) -> None:
    asked = zagent(home_dir, "tools", "run", "deploy", "--args", '{"env": "qa"}')
    session_id = only_session(home_dir)
    assert asked.returncode == 3 and f"zagent approve {session_id}" in asked.stdout, asked.stderr
    assert "[waiting on approval: deploy " in asked.stderr and "[ok" not in asked.stderr
    assert status(home_dir) == "waiting on approval"
    resumed = zagent(home_dir, "resume", session_id)  # no model: it stays parked, it is not ended
    assert resumed.returncode == 0 and status(home_dir) == "waiting on approval", resumed.stderr
    approved = zagent(home_dir, "approve", session_id)
    assert approved.returncode == 0 and "<- ok: deployed to qa" in approved.stdout, approved.stderr
    assert deployed(deploy) == ["qa"] and status(home_dir) == "ended"


# -- crashes --------------------------------------------------------------------------------


def test_a_run_killed_before_the_approval_was_asked_asks_no_one_and_the_call_gets_one_result(
        home_dir: Path, deploy: Path, script: Path) -> None:
    session_id = run_until_parked(home_dir, script, crash_at="before_approval_requested")
    resumed = zagent(home_dir, "resume", session_id)
    assert resumed.returncode == 0, resumed.stderr
    stored = events(home_dir, session_id)
    assert not [e for e in stored if e.event.type.startswith("approval_")]
    ends = [e.event for e in stored if e.event.type == "tool_call_interrupted"]
    assert len(ends) == 1 and "was not run" in ends[0].message
    assert deployed(deploy) == [] and status(home_dir) == "idle"


@pytest.mark.parametrize("resume_first", [True, False])
def test_a_run_killed_after_the_approval_was_asked_leaves_it_parked_for_another_process(
        home_dir: Path, deploy: Path, script: Path, resume_first: bool) -> None:
    session_id = run_until_parked(home_dir, script, crash_at="after_approval_requested")
    assert status(home_dir) == "waiting on approval"
    if resume_first:
        resumed = zagent(home_dir, "resume", session_id)
        assert resumed.returncode == 0 and status(home_dir) == "waiting on approval", resumed.stderr
    approved = zagent(home_dir, "approve", session_id)  # the dead run's lease is taken over
    assert approved.returncode == 0 and "assistant: Done." in approved.stdout, approved.stderr
    decided_once(home_dir, session_id, True, "zagent approve")
    assert deployed(deploy) == ["prod"] and status(home_dir) == "idle"


@pytest.mark.parametrize("command", [["approve"], ["deny", "--reason", "no"]])
def test_a_decision_killed_before_it_is_journaled_can_be_given_again(
        home_dir: Path, deploy: Path, script: Path, command: list[str]) -> None:
    session_id = run_until_parked(home_dir, script)
    killed = zagent(home_dir, command[0], session_id, *command[1:], crash_at="before_approval_decided")
    assert killed.returncode == -signal.SIGKILL
    assert status(home_dir) == "waiting on approval"
    assert zagent(home_dir, "approve", session_id).returncode == 0
    decided_once(home_dir, session_id, True, "zagent approve")
    assert deployed(deploy) == ["prod"]


def test_an_approval_killed_before_the_tool_started_runs_it_on_resume_once(
        home_dir: Path, deploy: Path, script: Path) -> None:
    session_id = run_until_parked(home_dir, script)
    killed = zagent(home_dir, "approve", session_id, crash_at="after_approval_decided")
    assert killed.returncode == -signal.SIGKILL and deployed(deploy) == []
    assert status(home_dir) == "interrupted"  # approved, but it never ran
    refused = zagent(home_dir, "deny", session_id)
    assert refused.returncode == 1 and "was already approved (zagent approve)" in refused.stderr
    resumed = zagent(home_dir, "resume", session_id)
    assert resumed.returncode == 0, resumed.stderr
    assert "<- ok: deployed to prod" in resumed.stdout and "assistant: Done." in resumed.stdout
    decided_once(home_dir, session_id, True, "zagent approve")
    assert deployed(deploy) == ["prod"] and status(home_dir) == "idle"


def test_a_denial_killed_after_it_is_journaled_is_kept_and_resume_goes_on(
        home_dir: Path, deploy: Path, script: Path) -> None:
    session_id = run_until_parked(home_dir, script)
    killed = zagent(home_dir, "deny", session_id, "--reason", "frozen", crash_at="after_approval_decided")
    assert killed.returncode == -signal.SIGKILL
    assert status(home_dir) == "interrupted"  # denied, but the model has not been told yet
    resumed = zagent(home_dir, "resume", session_id)
    assert resumed.returncode == 0 and "assistant: Done." in resumed.stdout, resumed.stderr
    decided_once(home_dir, session_id, False, "zagent deny")
    assert deployed(deploy) == [] and status(home_dir) == "idle"


def test_an_approved_call_killed_after_it_started_follows_the_cut_off_rules(
        home_dir: Path, deploy: Path, script: Path) -> None:
    session_id = run_until_parked(home_dir, script)
    killed = zagent(home_dir, "approve", session_id, crash_at="after_tool_call_started")
    assert killed.returncode == -signal.SIGKILL
    resumed = zagent(home_dir, "resume", session_id)
    assert resumed.returncode == 0, resumed.stderr
    (approval,) = [e.event for e in events(home_dir, session_id) if isinstance(e.event, ApprovalDecided)]
    assert approval.approved
    result = [e.event for e in events(home_dir, session_id) if e.event.type == "tool_call_interrupted"]
    assert len(result) == 1 and "Check before calling it again" in result[0].message  # replay: unsafe
    assert deployed(deploy) == [] and status(home_dir) == "idle"


def test_a_pre_approved_call_killed_before_it_started_runs_on_resume(
        home_dir: Path, deploy: Path, script: Path) -> None:
    (home_dir / "config.json").write_text(json.dumps({"approvals": {"allow": ["deploy"]}}))
    session_id = run_until_parked(home_dir, script, crash_at="after_approval_decided")
    assert deployed(deploy) == [] and status(home_dir) == "interrupted"
    resumed = zagent(home_dir, "resume", session_id)
    assert resumed.returncode == 0 and "assistant: Done." in resumed.stdout, resumed.stderr
    decided_once(home_dir, session_id, True, "config")
    assert deployed(deploy) == ["prod"]


# -- on a terminal --------------------------------------------------------------------------


def ship_on_terminal(home: Path, script: Path, typed: bytes) -> bytes:
    return run_on_terminal([PYTHON, "-m", "zagent_cli", "--home", str(home), "run", "--model",
                            f"scripted:{script}", "ship it"], home.parent, typed)


def test_on_a_terminal_the_run_asks_there_and_yes_runs_the_call(home_dir: Path, deploy: Path, script: Path) -> None:
    shown = ship_on_terminal(home_dir, script, b"y\n")
    assert b"approve deploy? [y/n]" in shown and b"assistant: Done." in shown
    decided_once(home_dir, only_session(home_dir), True, "terminal")
    assert deployed(deploy) == ["prod"]


def test_on_a_terminal_no_with_a_reason_denies_the_call(home_dir: Path, deploy: Path, script: Path) -> None:
    shown = ship_on_terminal(home_dir, script, b"maybe\nn\nuse staging\n")
    assert shown.count(b"approve deploy? [y/n]") == 2  # an answer that is neither is asked again
    result = decided_once(home_dir, only_session(home_dir), False, "terminal")
    assert result.message.endswith("(terminal): use staging. Do not call it again the same way.")
    assert deployed(deploy) == []


# -- the engine, in process -------------------------------------------------------------------


class RecordingModel(ScriptedModel):
    """The scripted model, keeping every request's messages: what the model was told."""

    def __init__(self, replies: list[ModelReply]) -> None:
        super().__init__(replies)
        self.requests: list[list[Message]] = []

    def reply(self, messages: list[Message], tools: list[ToolSpec]) -> ModelReply:
        self.requests.append(list(messages))
        return super().reply(messages, tools)


def recording(tmp_path: Path) -> RecordingModel:
    path = tmp_path / "recorded.json"
    path.write_text(json.dumps(SCRIPT))
    return RecordingModel(ScriptedModel.from_file(path).replies)


def test_the_models_next_request_carries_the_denial_and_its_reason(
        engine: Engine, deploy: Path, tmp_path: Path) -> None:
    model = recording(tmp_path)
    with engine.start_session("test") as session:
        agent = Agent(session, model, spec="scripted")
        assert agent.run("ship it").reason == "waiting_on_approval"
        assert len(model.requests) == 1
        result = session.deny(reason="the freeze is on until Monday")
        assert result.is_error
        assert agent.run(None).reason == "idle"
    (told,) = [m for m in model.requests[1] if m.role == "tool"]
    assert "the user denied this call" in told.content and "the freeze is on until Monday" in told.content
    assert deployed(engine.workspace / "deployed.txt") == []


def test_session_approve_runs_the_call_and_returns_its_result(engine: Engine, deploy: Path) -> None:
    with engine.start_session("test") as session:
        parked = session.call("deploy", {"env": "dev"}, call_id="c1")
        assert not parked.is_error and "waiting for approval" in parked.output
        assert list(session.state.waiting_approvals) == ["c1"]
        result = session.approve()
        assert (result.is_error, result.output.strip()) == (False, "deployed to dev")
        with pytest.raises(NoApprovalError, match="was already approved"):
            session.approve("c1")
    assert deployed(engine.workspace / "deployed.txt") == ["dev"]


def test_an_approved_call_whose_arguments_no_longer_fit_the_tool_is_rejected(
        home_dir: Path, engine: Engine, deploy: Path) -> None:
    with engine.start_session("test") as session:
        session.call("deploy", {"env": "dev"}, call_id="c1")
    # The tool changed while the call waited: it is validated again before it runs.
    python_tool(home_dir, "deploy", DEPLOY, permission="ask", parameters={
        "type": "object", "properties": {"env": {"type": "integer"}}, "required": ["env"]})
    resumed = engine.resume(session.session_id)
    result = resumed.approve()
    assert result.is_error and "its arguments do not match its parameters" in result.output
    assert deployed(engine.workspace / "deployed.txt") == []
    resumed.end()


def test_a_call_of_an_ask_tool_never_runs_beside_others(engine: Engine, deploy: Path, home_dir: Path) -> None:
    python_tool(home_dir, "parallel", "print('x')", permission="ask", concurrency_safe=True)
    with engine.start_session("test") as session:
        assert not session.concurrency_safe("parallel", {})
    pre_approved = Engine(Home(home_dir), engine.journal, workspace=engine.workspace,
                          config=Config(approvals=ApprovalsConfig(allow=["parallel"])))
    with pre_approved.start_session("test") as session:
        assert session.concurrency_safe("parallel", {})


def test_a_config_approval_of_a_tool_that_is_not_loaded_is_warned_about(home_dir: Path, deploy: Path) -> None:
    (home_dir / "config.json").write_text(json.dumps({"approvals": {"allow": ["deplyo"]}}))
    doctor = zagent(home_dir, "doctor")
    assert 'approvals.allow names "deplyo", which is not a loaded tool (did you mean "deploy"?)' in doctor.stdout


# -- the audit: who was asked what, and the answer ------------------------------------------


def test_audit_shows_who_was_asked_what_and_the_answer(home_dir: Path, deploy: Path, script: Path,
                                                      tmp_path: Path) -> None:
    session_id = run_until_parked(home_dir, script)
    waiting = zagent(home_dir, "audit")
    assert 'asked the user to approve (its manifest says "permission": "ask"): no decision yet' in waiting.stdout
    assert zagent(home_dir, "deny", session_id, "--reason", "not on a Friday").returncode == 0
    (tmp_path / "ask.json").write_text(json.dumps([
        {"tool_calls": [{"id": "q", "name": "ask_user", "arguments": {"question": "Which env?"}}]}, {"text": "ok"}]))
    zagent(home_dir, "run", "--model", f"scripted:{tmp_path / 'ask.json'}", "ask me")
    with SQLiteJournal(home_dir / "journal.db") as journal:
        asker = next(s.session_id for s in journal.sessions() if s.session_id != session_id)
    assert zagent(home_dir, "answer", asker, "staging").returncode == 0

    shown = zagent(home_dir, "audit", "--asked")
    assert shown.returncode == 0, shown.stderr
    assert ('asked the user to approve (its manifest says "permission": "ask"): denied (zagent deny): '
            "not on a Friday") in shown.stdout
    assert "asked the user 'Which env?': 'staging' (zagent answer)" in shown.stdout
    calls = json.loads(zagent(home_dir, "audit", "--json").stdout)["calls"]
    asked = {call["tool"]: call["asked"] for call in calls}
    assert asked["deploy"] | {"asked_at": None, "decided_at": None} == {
        "session_id": session_id, "call_id": "dep1", "kind": "approval", "tool": "deploy",
        "asked": {"env": "prod"}, "choices": None, "why": 'its manifest says "permission": "ask"',
        "asked_at": None, "decision": "denied", "answer": None, "reason": "not on a Friday",
        "via": "zagent deny", "decided_at": None}
    assert (asked["ask_user"]["kind"], asked["ask_user"]["asked"], asked["ask_user"]["answer"]) == (
        "question", "Which env?", "staging")


def test_a_replay_that_reruns_tools_serves_the_recorded_decision(home_dir: Path, deploy: Path, script: Path) -> None:
    session_id = run_until_parked(home_dir, script)
    assert zagent(home_dir, "approve", session_id).returncode == 0
    replayed = zagent(home_dir, "replay", session_id, "--tools", "rerun", "--allow-unsafe")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "matches" in replayed.stdout
    assert deployed(deploy) == ["prod"]  # a person is not asked again, and the call is not run again


def test_an_approved_background_call_runs_as_a_task(engine: Engine, home_dir: Path) -> None:
    python_tool(home_dir, "bg_deploy", "print('deployed in the background')", permission="ask", background=True)
    with engine.start_session("test") as session:
        session.call("bg_deploy", {}, call_id="c1")
        assert not session.state.tasks  # nothing starts before the decision
        started = session.approve()
        assert "started as task #1" in started.output
        task = session.wait_task("1", 30)
    assert (task.status, task.is_error, (task.output or "").strip()) == ("exited", False, "deployed in the background")
