"""Event bodies: round trips, schema versions, and refusing what a newer zagent wrote."""

from __future__ import annotations

import json

import pytest

from zagent_core.journal import events
from zagent_core.journal.events import (
    EventSchemaError,
    NewerEventError,
    SessionStarted,
    ToolCallFinished,
    ToolCallRejected,
    ToolCallRequested,
    ToolCallStarted,
    ToolOffer,
    dump_event,
    load_event,
)
from zagent_core.version import zagent_version

SAMPLES = [
    SessionStarted(origin="test", workspace="/w", zagent_version="1",
                   tools=[ToolOffer(name="t", description="d", folder="/f", manifest_hash="h")], warnings=["w"]),
    events.SessionEnded(reason="completed"),
    ToolCallRequested(call_id="c1", tool="t", arguments={"a": [1, {"b": None}]}),
    ToolCallRequested(call_id="c1.1", tool="t", arguments={}, parent_call_id="c1"),
    ToolCallRejected(call_id="c1", reason="invalid_arguments", message="m", problems=["p"]),
    ToolCallStarted(call_id="c1", tool="t", arguments={}, argv=["x"], cwd="/", input_mode="stdin_json",
                    output_mode="text", output_dir="/o", notify_file="/n", env_names=["A"], timeout_seconds=None,
                    manifest_hash="h", files_hash="f"),
    ToolCallFinished(call_id="c1", output="out", is_error=False, exit_code=0, duration_ms=3),
    events.NoteReceived(call_id="c1", text="40% done", offset=9),
    events.WakeRequested(wake_id="w1", reason="note", text="decide", call_id="c1"),
    events.TurnStarted(notes=[7], wakes=["w1"], reason="wake"),
    events.NotesDelivered(notes=[9]),
    events.WakeAnswered(wakes=["w1"], call_id="c2"),
    events.SessionForked(parent_session_id="p", parent_seq=4),
    events.TurnEnded(reason="idle"),
    events.UserMessage(text="count the words"),
    events.UserMessage(text="for a worker", model="openai:gpt-4o"),  # run --detach --model
    events.ModelReplied(model="scripted", text="on it", stop_reason="tool_use", input_tokens=3,
                        tool_calls=[events.RepliedCall(id="c1", call_id="c1", name="t", arguments={"a": 1})]),
    events.ToolCallInterrupted(call_id="c1", message="cut off"),
    events.TaskStarted(task_id="1", call_id="c1", tool="t", pid=5, start_ticks=9, boot_id="b", task_dir="/t"),
    events.TaskExited(task_id="1", call_id="c1", output="ok", is_error=False, exit_code=0, duration_ms=4),
    events.TaskKilled(task_id="1", call_id="c1", output="", is_error=True, exit_code=None, duration_ms=4),
    events.TaskInterrupted(task_id="1", call_id="c1", message="gone", output_path="/t/output.log"),
    events.SessionResumed(zagent_version="1"),
    events.ReadStateUpdated(call_id="c1", entries=[events.ReadEntry(path="/w/a.py", hash="00ff" * 4, offset=1,
                                                                    limit=2000, at="2026-12-01T00:00:00.000Z")]),
    events.ToolStateWritten(call_id="c1", tool="t", values={"cursor": 3, "gone": None}),
    events.ArtifactRecorded(call_id="c1", kind="pull_request", title="Fix retries", url="https://example.com/pr/1"),
    events.SkillActivated(call_id="c1", name="pdf-tools", sha256="ab" * 32),
    events.ToolsUnlocked(call_id="c1", tools=["everything__echo", "everything__add"]),
    events.InputRequested(call_id="c1", question="Which colour?", choices=["red", "blue"]),
    events.InputAnswered(call_id="c1", answer="blue", via="zagent answer"),
    events.ApprovalRequested(call_id="c1", tool="deploy", arguments={"env": "prod"},
                             why='its manifest says "permission": "ask"'),
    events.ApprovalDecided(call_id="c1", approved=False, via="zagent deny", reason="not on a Friday"),
    events.ChildSpawned(call_id="c2", label="child-1", child_session_id="20261201-060000-abcdef", task="count",
                        model="scripted:/s.json#child-1"),
    events.ChildEnded(call_id="c2", label="child-1", child_session_id="20261201-060000-abcdef", status="completed",
                      text="3", stats=events.SpawnStats(turns=1, input_tokens=10, output_tokens=2, duration_ms=5)),
    events.ContextCompacted(summary="The task: count files.", through_version=40, requests=7, trigger="auto",
                            model="openai:gpt-4o", tokens_before=102_400, tokens_after=2_100, input_tokens=101_000,
                            output_tokens=700, pending_notes={38: "50% done"},
                            pending_wakes={"w1": events.WakeText(reason="task_exited", text="task #1 exited")}),
    events.ContextCleared(through_request=4, requests=7, results=3, bytes=90_000, tokens_before=102_400, tokens_after=80_000),
]


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: e.type)
def test_every_event_type_round_trips_through_its_journal_form(event) -> None:
    data = json.loads(dump_event(event))
    assert "type" not in data  # it has its own column
    assert data["v"] == 1
    assert load_event(event.type, data) == event


def test_every_event_type_is_in_the_catalog() -> None:
    assert {e.type for e in SAMPLES} == set(events.EVENT_TYPES)


def test_an_unknown_event_type_says_to_upgrade() -> None:
    with pytest.raises(EventSchemaError, match='unknown event type "lease_acquired".*upgrade zagent'):
        load_event("lease_acquired", {"v": 1})


def test_a_newer_schema_version_is_refused_with_a_clear_message() -> None:
    with pytest.raises(EventSchemaError, match="schema version 2, this zagent reads up to 1"):
        load_event("session_ended", {"v": 2, "reason": "x"})


def test_a_refusal_names_this_zagent_and_the_one_that_last_opened_the_session() -> None:
    with pytest.raises(NewerEventError) as refused:
        load_event("session_ended", {"v": 2, "reason": "x"})
    mine = zagent_version()
    assert str(refused.value).endswith(f"it was written by a zagent newer than {mine}; upgrade zagent to read "
                                       "this journal")
    assert str(refused.value.located("event #7", "9.1")) == (
        f'event #7: event "session_ended" has schema version 2, this zagent reads up to 1: it was written by a '
        f"zagent newer than {mine} (the session was last started or resumed by zagent 9.1); upgrade zagent to "
        "read this journal")
    # This zagent cannot have written what it cannot read: the session went on with a newer one.
    assert "last started" not in str(refused.value.located("event #7", mine))


def test_older_bodies_are_upcast(monkeypatch: pytest.MonkeyPatch) -> None:
    # Pretend session_ended is at version 2, where "why" was renamed "reason".
    monkeypatch.setattr(events.SessionEnded, "SCHEMA_VERSION", 2)
    monkeypatch.setitem(events.UPCASTERS, ("session_ended", 1),
                        lambda data: {"v": 1, "reason": data["why"]})
    event = load_event("session_ended", {"v": 1, "why": "crashed"})
    assert event.reason == "crashed" and event.v == 2


def test_a_body_that_does_not_match_its_schema_is_reported() -> None:
    with pytest.raises(EventSchemaError, match='event "tool_call_requested" does not match its schema'):
        load_event("tool_call_requested", {"v": 1, "tool": "t"})


def test_a_call_the_model_made_is_journaled_without_a_parent_as_before_nested_calls() -> None:
    # Older zagents read such bodies: parent_call_id appears only on a nested call.
    assert "parent_call_id" not in dump_event(ToolCallRequested(call_id="c1", tool="t", arguments={}))
    nested = ToolCallRequested(call_id="c1.1", tool="t", arguments={}, parent_call_id="c1")
    assert json.loads(dump_event(nested))["parent_call_id"] == "c1"
