"""Structured results (issue 24): a JSON tool's ``structured`` value, checked against its manifest's
``output_schema``, and the ``outcome`` it reports, journaled with its result; through the real CLI."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any

import forked
import pytest
from conftest import PYTHON, python_tool, sql

from zagent_core import Engine

#: Counts the words of its ``text``; ``shape`` bends what it prints to test the checks.
COUNTER = """
import json, sys
args = json.load(sys.stdin)
words = args.get("text", "").split()
shape = args.get("shape", "good")
structured = {"words": len(words), "first": words[0] if words else None}
if shape == "bad":
    structured = {"words": str(len(words)), "extra": True}
result = {"output": f"{len(words)} words", "structured": structured}
if shape == "none":
    del result["structured"]
if shape == "data_only":
    del result["output"]
if shape == "failed":
    result = {"output": "nothing to count", "is_error": True,
              "outcome": {"status": "failure", "reason": "the text is empty"}}
if shape == "partial":
    result["outcome"] = {"status": "partial", "reason": "counted the first page only"}
if shape == "bad_outcome":
    result["outcome"] = "done"
if shape == "huge":
    result["structured"]["first"] = "w" * 300_000
    result["outcome"] = {"status": "success", "reason": "r" * 1500}
print(json.dumps(result))
"""

OUTPUT_SCHEMA = {
    "type": "object",
    "properties": {"words": {"type": "integer"}, "first": {"type": ["string", "null"]}},
    "required": ["words"],
    "additionalProperties": False,
}


def zagent(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return forked.run([PYTHON, "-m", "zagent_cli", "--home", str(home), *args], capture_output=True, text=True,
                      stdin=subprocess.DEVNULL, cwd=home.parent, timeout=120)


def counter(home: Path, **manifest: Any) -> None:
    python_tool(home, "counter", COUNTER, output="json", output_schema=OUTPUT_SCHEMA, **manifest)


def run_counter(home: Path, text: str, shape: str = "good") -> dict[str, Any]:
    ran = zagent(home, "tools", "run", "counter", "--args", json.dumps({"text": text, "shape": shape}), "--json")
    body: dict[str, Any] = json.loads(ran.stdout)
    assert ran.returncode == (1 if body["is_error"] else 0), ran.stderr
    return body


def finished(home: Path, call_id: str) -> dict[str, Any]:
    """The ``tool_call_finished`` of call ``call_id`` of the latest session, as ``sessions show`` gives it."""
    shown = json.loads(zagent(home, "sessions", "show", "--json", "--events").stdout)
    (event,) = [e for e in shown["events"] if e["type"] == "tool_call_finished" and e["data"]["call_id"] == call_id]
    return dict(event["data"])


def test_a_structured_result_that_matches_the_output_schema_is_journaled(home_dir: Path) -> None:
    counter(home_dir)
    body = run_counter(home_dir, "one two three")
    assert body["is_error"] is False and body["output"] == "3 words"
    assert body["structured"] == {"words": 3, "first": "one"}
    assert finished(home_dir, body["call_id"])["structured"] == {"words": 3, "first": "one"}


def test_a_structured_result_that_does_not_match_is_an_error_saying_what_is_wrong(home_dir: Path) -> None:
    counter(home_dir)
    body = run_counter(home_dir, "one two", "bad")
    assert body["is_error"] is True and body["structured"] is None
    assert body["output"] == ('2 words\n["structured" does not match the manifest\'s output_schema: unknown structured '
                              'field "extra" (allowed: first, words); structured field "words": expected integer, '
                              'got string]')
    assert "structured" not in finished(home_dir, body["call_id"])  # only a value that matches is journaled


def test_a_result_without_the_structured_value_its_schema_describes_is_an_error(home_dir: Path) -> None:
    counter(home_dir)
    body = run_counter(home_dir, "one", "none")
    assert body["is_error"] is True
    assert body["output"].endswith("""["structured" is missing: the manifest's output_schema describes it; print """
                                   """{"output": "...", "structured": {...}}]""")
    # A tool that says it failed need not give its data.
    failed = run_counter(home_dir, "", "failed")
    assert failed["output"] == "nothing to count" and failed["structured"] is None


def test_a_result_that_is_all_data_shows_the_model_its_json(home_dir: Path) -> None:
    counter(home_dir)
    body = run_counter(home_dir, "a b", "data_only")
    assert body["is_error"] is False
    assert json.loads(body["output"]) == body["structured"] == {"words": 2, "first": "a"}


def test_a_reported_outcome_is_journaled_with_its_reason(home_dir: Path) -> None:
    counter(home_dir)
    failed = run_counter(home_dir, "", "failed")
    assert failed["outcome"] == {"status": "failure", "reason": "the text is empty"}
    partial = run_counter(home_dir, "a", "partial")
    assert partial["is_error"] is False
    assert finished(home_dir, partial["call_id"])["outcome"] == {"status": "partial",
                                                                 "reason": "counted the first page only"}
    wrong = run_counter(home_dir, "a", "bad_outcome")
    assert wrong["is_error"] is True and wrong["outcome"] is None
    assert wrong["output"].endswith("""["outcome" must be {"status": "success" | "failure" | "partial", """
                                    """"reason": "..."}, not "done"]""")


def test_an_output_schema_needs_json_output_and_must_be_a_valid_schema(home_dir: Path) -> None:
    python_tool(home_dir, "texty", COUNTER, output_schema=OUTPUT_SCHEMA)
    python_tool(home_dir, "broken", COUNTER, output="json", output_schema={"type": "objekt"})
    listed = zagent(home_dir, "tools", "list").stdout
    assert ('tools/texty: not loaded: "output_schema": describes a JSON result\'s "structured" value: it needs '
            '"output": "json"') in listed
    assert 'tools/broken: not loaded: "output_schema": is not a valid JSON Schema at type' in listed


def test_a_background_task_s_structured_result_is_checked_too(home_dir: Path) -> None:
    counter(home_dir, background=True)
    started = run_counter(home_dir, "x y z")
    shown = json.loads(zagent(home_dir, "sessions", "show", started["session_id"], "--json", "--events").stdout)
    (exited,) = [e["data"] for e in shown["events"] if e["type"] == "task_exited"]
    assert exited["structured"] == {"words": 3, "first": "x"}


#: Stamps its result with the call's time (as milliseconds since 1970: no replay rule hides those)
#: and an id made from the call's seed.
STAMPER = """
import json, os
from datetime import datetime
now = datetime.fromisoformat(os.environ["ZAGENT_NOW"].replace("Z", "+00:00"))
print(f"stamped {round(now.timestamp() * 1000)}, id {os.environ['ZAGENT_CALL_SEED'][:12]}")
"""


def test_a_call_is_told_its_journaled_start_time_and_a_seed_of_its_ids(home_dir: Path) -> None:
    python_tool(home_dir, "stamper", STAMPER)
    ran = json.loads(zagent(home_dir, "tools", "run", "stamper", "--json").stdout)
    shown = json.loads(zagent(home_dir, "sessions", "show", ran["session_id"], "--json", "--events").stdout)
    (started,) = [e for e in shown["events"] if e["type"] == "tool_call_started"]
    at = datetime.fromisoformat(started["at"].replace("Z", "+00:00"))
    seed = hashlib.sha256(f"{ran['session_id']}/{ran['call_id']}".encode()).hexdigest()
    assert ran["output"] == f"stamped {round(at.timestamp() * 1000)}, id {seed[:12]}"
    assert {"ZAGENT_NOW", "ZAGENT_CALL_SEED"} <= set(started["data"]["env_names"])
    assert "clock" not in started["data"]  # the call was told its own: its event's time and ids say it


def test_a_rerun_replay_tells_each_call_what_its_recording_was_told(home_dir: Path, tmp_path: Path) -> None:
    python_tool(home_dir, "stamper", STAMPER, replay="safe")
    script = tmp_path / "stamp.json"
    script.write_text(json.dumps([{"text": "Stamping.", "tool_calls": [{"name": "stamper", "arguments": {}}]},
                                  {"text": "Stamped."}]))
    ran = zagent(home_dir, "run", "--json", "--model", f"scripted:{script}", "stamp it")
    session_id = json.loads(ran.stdout)["session_id"]
    replayed = zagent(home_dir, "replay", session_id, "--tools", "rerun", "--json")
    report = json.loads(replayed.stdout)
    assert replayed.returncode == 0 and report["matched"] is True, replayed.stdout
    assert report["replays"][0]["rerun_steps"] == 1


@pytest.mark.stores
def test_audit_filters_the_calls_by_the_outcome_their_tool_reported(engine: Engine, home_dir: Path,
                                                                    journal_url: str) -> None:
    counter(home_dir)
    session = engine.start_session("test")
    failed = session.call("counter", {"text": "", "shape": "failed"}).call_id
    partial = session.call("counter", {"text": "a b", "shape": "partial"}).call_id
    session.call("counter", {"text": "a b"})
    session.end()

    rows = sql(journal_url, "SELECT call_id, outcome, outcome_reason FROM tool_calls ORDER BY requested_at")
    assert [(row["outcome"], row["outcome_reason"]) for row in rows] == [
        ("failure", "the text is empty"), ("partial", "counted the first page only"), (None, None)]
    listed = zagent(home_dir, "audit", "--outcome", "failure", "--json")
    assert [row["call_id"] for row in json.loads(listed.stdout)["calls"]] == [failed], listed.stderr
    shown = zagent(home_dir, "audit", "--outcome", "partial").stdout
    assert shown.splitlines()[2:] == ["    outcome: partial: counted the first page only"]
    assert partial in zagent(home_dir, "audit", "--outcome", "partial", "--json").stdout
    assert zagent(home_dir, "audit", "--outcome", "success").stdout == "no calls match\n"


def test_mcp_serve_lists_the_output_schema_and_passes_structured_content_on(home_dir: Path, tmp_path: Path) -> None:
    import anyio
    from test_mcp_serve import over_stdio

    counter(home_dir)
    (tmp_path / "workspace").mkdir()

    async def scenario() -> None:
        async with over_stdio(home_dir) as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            good = await client.call_tool("counter", {"text": "a b"})
            bad = await client.call_tool("counter", {"text": "a b", "shape": "bad"})
        assert listed["counter"].output_schema == OUTPUT_SCHEMA
        assert listed["read_file"].output_schema is None
        assert not good.is_error and good.structured_content == {"words": 2, "first": "a"}
        assert bad.is_error and bad.structured_content is None

    anyio.run(scenario)


def test_sessions_show_says_the_outcome_and_the_structured_value_of_a_result(home_dir: Path) -> None:
    counter(home_dir)
    ran = run_counter(home_dir, "a b", "partial")
    shown = zagent(home_dir, "sessions", "show", ran["session_id"]).stdout
    assert "  outcome: partial: counted the first page only\n" in shown
    assert '  structured: {"words": 2, "first": "a"}\n' in shown


def test_the_replay_doc_s_ticket_tool_replays_without_a_difference(tmp_path: Path) -> None:
    from test_docs import DOCS, _clean_env, assert_shown_is_printed, run_steps, section_steps

    steps = section_steps(DOCS / "replay.md", ["Tools that stamp times or make ids"])
    status, blocks, output = run_steps(steps, tmp_path, _clean_env(tmp_path))
    assert status == 0, output

    def varying(text: str) -> str:  # the ticket's id and time are the recorded call's, new each time the doc runs
        return re.sub(r"ticket \S+ opened at \d+", "ticket <id> opened at <seconds>", text)

    assert assert_shown_is_printed("docs/replay.md", steps, blocks, normalize=varying) == 1


def test_a_built_in_reads_its_clock_on_its_context_and_returns_data_and_an_outcome(engine: Engine,
                                                                                   journal_url: str) -> None:
    from zagent_core.journal.events import Outcome
    from zagent_core.tools.inprocess import Builtin, BuiltinContext
    from zagent_core.tools.results import ToolResult

    def stamp(context: BuiltinContext, arguments: dict[str, Any]) -> ToolResult:
        return ToolResult(output="stamped", is_error=False, structured={"at": context.clock.now,
                                                                        "seed": context.clock.seed},
                          outcome=Outcome(status="success"))

    engine.builtins["stamp"] = Builtin(name="stamp", description="Stamps.", parameters={"type": "object"}, run=stamp)
    with engine.start_session() as session:
        result = session.call("stamp", {})
    (row,) = sql(journal_url, "SELECT at, session_id, call_id FROM events WHERE type = 'tool_call_started'")
    seed = hashlib.sha256(f"{row['session_id']}/{row['call_id']}".encode()).hexdigest()[:32]
    assert result.structured == {"at": row["at"], "seed": seed}
    assert sql(journal_url, "SELECT outcome FROM tool_calls") == [{"outcome": "success"}]


def test_the_new_fields_are_written_only_when_there_is_something_to_say() -> None:
    from zagent_core.journal.events import CallClock, Outcome, ToolCallFinished, ToolCallStarted, dump_event

    started = ToolCallStarted(call_id="c", tool="t", arguments={}, argv=[], cwd="/", input_mode="builtin",
                              output_mode="text", timeout_seconds=None)
    finished = ToolCallFinished(call_id="c", output="", is_error=False, exit_code=0, duration_ms=1)
    assert not {"clock", "structured", "outcome"} & (json.loads(dump_event(started)).keys()
                                                      | json.loads(dump_event(finished)).keys())
    told = started.model_copy(update={"clock": CallClock(now="2026-12-07T12:12:22.123Z", seed="ab" * 16)})
    assert json.loads(dump_event(told))["clock"] == {"now": "2026-12-07T12:12:22.123Z", "seed": "ab" * 16}
    reported = finished.model_copy(update={"structured": [], "outcome": Outcome(status="partial")})
    assert json.loads(dump_event(reported))["structured"] == []
    assert json.loads(dump_event(reported))["outcome"] == {"status": "partial", "reason": ""}


def test_a_structured_value_is_bounded_and_a_long_reason_is_cut(home_dir: Path) -> None:
    python_tool(home_dir, "counter", COUNTER, output="json")  # no output_schema: any value, within the bound
    body = run_counter(home_dir, "a", "huge")
    assert body["is_error"] is True and body["structured"] is None
    assert body["output"].endswith("over the 262144-byte limit; keep a path to a file instead]")
    assert body["outcome"]["reason"] == "r" * 1000 + "... [cut: 1500 characters in all]"
