"""The built-ins as one family: offered, validated, journaled and scheduled like folder tools,
with what a call stages (tool state) committed with its result."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import forked
from conftest import python_tool, write_tool

from zagent_core import Engine, Home
from zagent_core.agent.conversation import conversation
from zagent_core.agent.loop import Agent
from zagent_core.builtins import registry, skills
from zagent_core.tools.inprocess import Builtin, BuiltinContext, StateValueError
from zagent_core.config import AgentConfig, BuiltinsConfig, Config, ToolsConfig
from zagent_core.journal.events import ToolCallStarted, ToolStateWritten
from zagent_core.agent.models import ModelReply, ToolCallRequest
from zagent_core.agent.models.scripted import ScriptedModel
from zagent_core.tools.results import ToolResult
from zagent_store import SQLiteJournal

ZAGENT = [sys.executable, "-m", "zagent_cli"]


def events_of(engine: Engine, session_id: str, kind: type) -> list[Any]:
    return [e.event for e in engine.journal.read(session_id) if isinstance(e.event, kind)]


def test_a_built_in_call_is_journaled_with_its_identity_and_zagent_version(engine: Engine) -> None:
    with engine.start_session() as session:
        result = session.call("terminal", {"action": "list"})
    assert result.output == "no background tasks in this session" and not result.is_error
    types = [e.event.type for e in engine.journal.read(session.session_id)]
    assert types[1:4] == ["tool_call_requested", "tool_call_started", "tool_call_finished"]
    [started] = events_of(engine, session.session_id, ToolCallStarted)
    assert started.identity == "builtin:terminal" and started.tool_version
    assert started.input_mode == "builtin" and started.notify_file is None  # no process, no folder
    offered = {t.name: t for t in session.state.tools}
    assert offered["terminal"].identity == "builtin:terminal" and offered["terminal"].folder == "(built-in)"


def test_a_built_in_call_is_validated_and_refused_like_a_folder_tool(engine: Engine) -> None:
    with engine.start_session() as session:
        result = session.call("terminal", {"action": "peek", "tsk": 1})
    assert result.is_error
    assert result.output.startswith("terminal was not run: its arguments do not match its parameters.\n")
    assert "peek" in result.output and '"tsk"' in result.output


def test_builtins_enabled_chooses_what_is_offered_and_warns_of_unknown_names(
        home_dir: Path, journal: SQLiteJournal, workspace: Path) -> None:
    config = Config(builtins=BuiltinsConfig(enabled=["terminl"]))
    engine = Engine(Home(home_dir), journal, workspace=workspace, config=config)
    with engine.start_session() as session:
        result = session.call("terminal", {"action": "list"})
    assert [t.name for t in session.state.tools] == []
    assert any('builtins.enabled names "terminl", which is not a built-in tool (did you mean "terminal"?)' in w
               for w in session.state.warnings)
    assert result.is_error and result.output.startswith('unknown tool "terminal"')


def test_a_disabled_built_in_is_not_offered_and_its_calls_are_refused(
        home_dir: Path, journal: SQLiteJournal, workspace: Path) -> None:
    config = Config(tools=ToolsConfig(disabled=["terminal"]))
    engine = Engine(Home(home_dir), journal, workspace=workspace, config=config)
    with engine.start_session() as session:
        result = session.call("terminal", {"action": "list"})
    assert "terminal" not in [t.name for t in session.state.tools]
    assert result.is_error and 'tool "terminal" is disabled in config.json' in result.output
    assert not any("tools.disabled" in w for w in session.state.warnings)  # a built-in is a known name


def test_tools_list_shows_the_built_ins_marked(home_dir: Path) -> None:
    python_tool(home_dir, "echo", "print('hi')")
    listing = forked.run([*ZAGENT, "--home", str(home_dir), "tools", "list"], capture_output=True, text=True,
                         check=True).stdout
    lines = listing.splitlines()
    assert lines[0].startswith("echo") and "[tools/echo]" in lines[0]
    assert any(line.startswith("terminal") and line.endswith("[built-in]") for line in lines)
    as_json = json.loads(forked.run([*ZAGENT, "--home", str(home_dir), "tools", "list", "--json"],
                                    capture_output=True, text=True, check=True).stdout)
    assert [t["name"] for t in as_json["tools"]] == ["echo"]
    assert {b["name"]: b["replay"] for b in as_json["builtins"]}["terminal"] == "safe"


def test_no_tool_folder_can_take_a_built_in_name(home_dir: Path, engine: Engine) -> None:
    for name in registry.names():
        write_tool(home_dir, name, {"description": "mine", "command": [sys.executable]})
    toolset = engine.load_tools()
    assert toolset.tools == {}
    assert {p.source for p in toolset.problems} == {f"tools/{name}" for name in registry.names()}


# -- scheduling -----------------------------------------------------------------------------

RENDEZVOUS = """
import json, os, sys, time
args = json.load(sys.stdin)
meeting = os.path.join(os.environ["ZAGENT_WORKSPACE"], "meeting")
os.makedirs(meeting, exist_ok=True)
open(os.path.join(meeting, args["me"]), "w").close()
deadline = time.monotonic() + 20
while len(os.listdir(meeting)) < args["expect"] and time.monotonic() < deadline:
    time.sleep(0.01)
met = sorted(os.listdir(meeting))
print(json.dumps({"me": args["me"], "met": met}))
"""

ALONE = """
import json, os, sys
meeting = os.path.join(os.environ["ZAGENT_WORKSPACE"], "meeting")
present = sorted(os.listdir(meeting)) if os.path.isdir(meeting) else []
# It runs alone: whoever met before it has left, and it clears the room for those after.
for name in present:
    os.remove(os.path.join(meeting, name))
print(json.dumps({"alone": True, "found": present}))
"""


def test_safe_calls_run_as_a_fleet_and_an_unsafe_call_is_a_barrier(home_dir: Path, engine: Engine) -> None:
    """[safe a, safe b, unsafe, safe c, safe d]: a and b meet, the unsafe call runs after both
    ended and before c and d start, c and d meet, and the model gets the results in its order."""
    schema = {"type": "object", "properties": {"me": {"type": "string"}, "expect": {"type": "integer"}}}
    python_tool(home_dir, "meet", RENDEZVOUS, parameters=schema, concurrency_safe=True)
    python_tool(home_dir, "alone", ALONE)
    calls = [("meet", {"me": "a", "expect": 2}), ("meet", {"me": "b", "expect": 2}), ("alone", {}),
             ("meet", {"me": "c", "expect": 2}), ("meet", {"me": "d", "expect": 2})]
    model = ScriptedModel([
        ModelReply(tool_calls=[ToolCallRequest(id=f"k{i}", name=name, arguments=args)
                               for i, (name, args) in enumerate(calls)], stop_reason="tool_use"),
        ModelReply(text="done", stop_reason="end_turn"),
    ])
    session = engine.start_session("run")
    Agent(session, model).run("go")
    outputs = [json.loads(e.event.output) for e in engine.journal.read(session.session_id)
               if e.event.type == "tool_call_finished"]
    by_me = {o.get("me", "alone"): o for o in outputs}
    assert by_me["a"]["met"] == ["a", "b"] and by_me["b"]["met"] == ["a", "b"]
    assert by_me["alone"]["found"] == ["a", "b"]  # both had run; nothing of the next fleet had started
    assert by_me["c"]["met"] == ["c", "d"] and by_me["d"]["met"] == ["c", "d"]
    steps = [(e.event.type, e.event.call_id) for e in engine.journal.read(session.session_id)
             if e.event.type in ("tool_call_started", "tool_call_finished")]
    at = steps.index
    assert max(at(("tool_call_finished", "k0")), at(("tool_call_finished", "k1"))) < at(("tool_call_started", "k2"))
    assert at(("tool_call_finished", "k2")) < min(at(("tool_call_started", "k3")), at(("tool_call_started", "k4")))
    messages = conversation(engine.journal.read(session.session_id), "system")
    assert [m.tool_call_id for m in messages if m.role == "tool"] == ["k0", "k1", "k2", "k3", "k4"]


def test_max_concurrent_tools_bounds_the_fleet(home_dir: Path, journal: SQLiteJournal, workspace: Path) -> None:
    # With one at a time, the fleet runs in order: each finds only those before it (and itself).
    schema = {"type": "object", "properties": {"me": {"type": "string"}, "expect": {"type": "integer"}}}
    python_tool(home_dir, "meet", RENDEZVOUS, parameters=schema, concurrency_safe=True)
    engine = Engine(Home(home_dir), journal, workspace=workspace,
                    config=Config(agent=AgentConfig(max_concurrent_tools=1)))
    model = ScriptedModel([
        ModelReply(tool_calls=[ToolCallRequest(id=f"k{i}", name="meet", arguments={"me": me, "expect": 1})
                               for i, me in enumerate("ab")], stop_reason="tool_use"),
        ModelReply(text="done", stop_reason="end_turn"),
    ])
    session = engine.start_session("run")
    Agent(session, model).run("go")
    outputs = [json.loads(e.event.output) for e in engine.journal.read(session.session_id)
               if e.event.type == "tool_call_finished"]
    assert [o["met"] for o in outputs] == [["a"], ["a", "b"]]


# -- tool state ---------------------------------------------------------------------------

COUNTER = """
import json, os, sys
args = json.load(sys.stdin)
state = json.load(open(os.environ["ZAGENT_STATE_FILE"]))
count = state.get("count", 0) + 1
writes = {"count": count}
if args.get("big"):
    writes["blob"] = "x" * (64 * 1024 + 1)
if args.get("forget"):
    writes["count"] = None
print(json.dumps({"output": f"count {count} (state seen: {sorted(state)})", "state": writes}))
"""


def counter_tool(home_dir: Path) -> None:
    schema = {"type": "object", "properties": {"big": {"type": "boolean"}, "forget": {"type": "boolean"}}}
    python_tool(home_dir, "counter", COUNTER, parameters=schema, output="json")


def test_a_folder_tool_reads_its_state_from_a_file_and_writes_it_in_its_json_result(
        home_dir: Path, engine: Engine) -> None:
    counter_tool(home_dir)
    session = engine.start_session()
    assert [session.call("counter", {}).output for _ in range(3)] == [
        "count 1 (state seen: [])", "count 2 (state seen: ['count'])", "count 3 (state seen: ['count'])"]
    session.release()
    # The state is a projection of the journal: another engine (a resume) sees it.
    resumed = Engine(engine.home, engine.journal, workspace=engine.workspace).resume(session.session_id)
    assert resumed.call("counter", {}).output == "count 4 (state seen: ['count'])"
    assert resumed.call("counter", {"forget": True}).output == "count 5 (state seen: ['count'])"
    assert resumed.state.tool_state == {"counter": {}}
    resumed.end()
    written = events_of(engine, session.session_id, ToolStateWritten)
    assert [w.values for w in written][:2] == [{"count": 1}, {"count": 2}]


def test_state_is_committed_in_the_same_transaction_as_the_result(home_dir: Path, engine: Engine) -> None:
    counter_tool(home_dir)
    with engine.start_session() as session:
        session.call("counter", {})
    stored = list(engine.journal.read(session.session_id))
    [write] = [e for e in stored if e.event.type == "tool_state_written"]
    finished = stored[stored.index(write) + 1]
    assert finished.event.type == "tool_call_finished" and finished.event.call_id == write.event.call_id


def test_a_state_value_over_64_kib_is_a_clear_error_and_nothing_is_written(home_dir: Path, engine: Engine) -> None:
    counter_tool(home_dir)
    with engine.start_session() as session:
        result = session.call("counter", {"big": True})
        assert session.state.tool_state == {}
    assert result.is_error
    assert 'tool state "blob": the value is 65539 bytes as JSON, over the 65536-byte limit' in result.output
    assert "no state was written" in result.output
    assert events_of(engine, session.session_id, ToolStateWritten) == []


def remembering(context: BuiltinContext, arguments: dict[str, Any]) -> ToolResult:
    seen = context.state.get("seen", [])
    try:
        context.state.set("seen", [*seen, arguments["word"]])
    except StateValueError as exc:
        return ToolResult(output=str(exc), is_error=True)
    return ToolResult(output=f"seen before: {seen}", is_error=False)


def test_a_built_in_stages_state_that_is_committed_with_its_result(engine: Engine) -> None:
    engine.builtins["remember"] = Builtin(
        name="remember", description="Remembers words.", run=remembering,
        parameters={"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]})
    with engine.start_session() as session:
        assert session.call("remember", {"word": "a"}).output == "seen before: []"
        assert session.call("remember", {"word": "b"}).output == "seen before: ['a']"
        too_big = session.call("remember", {"word": "x" * 70_000})
    assert too_big.is_error and "over the 65536-byte limit" in too_big.output
    assert session.state.tool_state == {"remember": {"seen": ["a", "b"]}}


@pytest.mark.parametrize("value", [float("nan"), {1, 2}])
def test_a_state_value_that_is_not_json_is_refused_with_the_reason(value: Any) -> None:
    from zagent_core.tools.inprocess import ToolState

    with pytest.raises(StateValueError, match='tool state "k": the value is not plain JSON'):
        ToolState({}).set("k", value)


# -- artifacts ----------------------------------------------------------------------------


def test_artifacts_are_in_their_audit_view_and_in_sessions_show(home_dir: Path, engine: Engine) -> None:
    with engine.start_session() as session:
        session.call("record_artifact", {"kind": "pull_request", "title": "Fix retries",
                                         "url": "https://example.com/o/r/pull/7"})
        session.call("record_artifact", {"kind": "branch", "title": "Retry work", "ref": "fix-retries"})
    rows = list(engine.journal.db.query("select kind, title, url, ref from artifacts where session_id = ?",
                                        [session.session_id]))
    assert rows == [
        {"kind": "pull_request", "title": "Fix retries", "url": "https://example.com/o/r/pull/7", "ref": None},
        {"kind": "branch", "title": "Retry work", "url": None, "ref": "fix-retries"}]
    shown = forked.run([*ZAGENT, "--home", str(home_dir), "sessions", "show", session.session_id],
                       capture_output=True, text=True, check=True).stdout.splitlines()
    assert "artifact: pull request Fix retries (https://example.com/o/r/pull/7)" in shown
    assert "artifact: branch Retry work (fix-retries)" in shown
    assert "  artifact recorded: branch Retry work (fix-retries)" in shown  # in the conversation, in order


# -- replay -------------------------------------------------------------------------------


def _edit_session(engine: Engine, workspace: Path) -> str:
    (workspace / "notes.txt").write_text("the cat sat\non teh mat\n")
    model = ScriptedModel([
        ModelReply(tool_calls=[ToolCallRequest(id="r", name="read_file", arguments={"path": "notes.txt"})],
                   stop_reason="tool_use"),
        ModelReply(tool_calls=[ToolCallRequest(id="e", name="edit", arguments={
            "path": "notes.txt", "old_string": "teh", "new_string": "the"})], stop_reason="tool_use"),
        ModelReply(text="fixed", stop_reason="end_turn"),
    ])
    session = engine.start_session("run")
    Agent(session, model).run("fix the typo")
    session.end()
    return session.session_id


@pytest.mark.parametrize("tools", ["recorded", "rerun"])
def test_a_replay_knows_what_the_recording_read_and_wrote(home_dir: Path, engine: Engine, workspace: Path,
                                                          tmp_path: Path, tools: str) -> None:
    """The read-state map of a replay is the recording's, moved to the replay's workspace:
    served calls bring their read_state_updated with them (an edit is replay-unsafe: served)."""
    from zagent_core.history.replay import replay

    session_id = _edit_session(engine, workspace)
    recorded = engine.session_state(session_id).read_state
    # A rerun copies the workspace as it is now: put it back as the recording found it.
    (workspace / "notes.txt").write_text("the cat sat\non teh mat\n")
    with SQLiteJournal(tmp_path / "replays.db") as into:
        report = replay(engine.journal, session_id, engine.home, into, tools=tools, workdir=tmp_path / "work")  # type: ignore[arg-type]
        assert report.matched, report.text()
        replayed = Engine(engine.home, into).session_state(report.replay_session_id).read_state
    if tools == "rerun":
        assert report.not_rerun == ["edit (e)"]  # read_file ran again; the edit was served
    [(path_then, entry_then)] = recorded.items()
    [(path_now, entry_now)] = replayed.items()
    assert path_then == str(workspace / "notes.txt") and path_now.endswith("/notes.txt")
    assert (entry_now.hash, entry_now.elided) == (entry_then.hash, True)  # what the edit left, as recorded


def test_doctor_counts_the_built_ins_says_which_grep_runs_and_reports_a_folder_taking_a_built_in_name(
        home_dir: Path) -> None:
    write_tool(home_dir, "grep", {"description": "my grep", "command": [sys.executable]})
    (home_dir / "config.json").write_text(json.dumps({"tools": {"disabled": ["shell"]}}))
    env = {"PATH": "/usr/bin:/bin", "ZAGENT_RG": "none"}
    doctor = forked.run([*ZAGENT, "--home", str(home_dir), "doctor"], capture_output=True, text=True, env=env)
    lines = doctor.stdout.splitlines()
    # Every built-in a config without settings turns on, but shell (web_search needs its provider,
    # tool_search lazy disclosure, the skill tools a home with skills).
    assert f"built-ins: {len(registry.enabled(Config())[0]) - 1} offered; grep runs its Python search (no rg on PATH)" in lines
    assert '  error: tools/grep: not loaded: "grep" is the name of a built-in tool; choose another name' in lines
    assert doctor.returncode == 1


# -- what the review found ----------------------------------------------------------------


def test_a_built_in_output_that_is_not_valid_unicode_is_journaled_with_replacement_characters(engine: Engine) -> None:
    engine.builtins["names"] = Builtin(
        name="names", description="Lists a name read from disk.", parameters={"type": "object"},
        run=lambda context, arguments: ToolResult(output="caf\udce9.txt", is_error=False))
    with engine.start_session() as session:
        assert session.call("names", {}).output == "caf\ufffd.txt"
        assert session.call("terminal", {"action": "list"}).output == "no background tasks in this session"


def test_a_built_in_that_stages_what_cannot_be_journaled_gets_an_error_result_and_the_session_goes_on(
        engine: Engine) -> None:
    from zagent_core.journal.events import ArtifactRecorded

    def stage_bad(context: BuiltinContext, arguments: dict[str, Any]) -> ToolResult:
        context.record_artifact(ArtifactRecorded(call_id=context.call_id, kind="custom", title="\udce9"))
        return ToolResult(output="recorded", is_error=False)

    engine.builtins["bad"] = Builtin(name="bad", description="Stages a bad event.", parameters={"type": "object"},
                                     run=stage_bad)
    with engine.start_session() as session:
        result = session.call("bad", {})
        assert result.is_error and result.output.startswith("zagent could not record what bad returned:")
        assert session.state.calls == {}  # the call has its result: nothing for a resume to run again


def test_arguments_with_a_lone_surrogate_are_refused_saying_so(engine: Engine) -> None:
    with engine.start_session() as session:
        result = session.call("read_file", {"path": "\ud800.txt"})
    assert result.is_error and "a lone surrogate" in result.output and "NaN" not in result.output


def test_a_replay_safe_call_is_run_again_once_after_a_crash_never_a_third_time(home_dir: Path, engine: Engine) -> None:
    from zagent_core.journal.events import SessionStarted, ToolCallInterrupted, ToolCallRequested

    python_tool(home_dir, "look", "print('looked')", replay="safe")
    session_id = "20261201-000000-abcdef"
    started = dict(tool="look", arguments={}, argv=["x"], cwd="/", input_mode="stdin_json", output_mode="text",
                   timeout_seconds=None)
    for attempt, expected in ((1, "looked"), (2, "not run a third time")):
        sid = f"{session_id[:-1]}{attempt}"
        engine.journal.append(sid, [
            SessionStarted(origin="test", workspace=str(engine.workspace), zagent_version="0"),
            ToolCallRequested(call_id="c1", tool="look", arguments={}),
            ToolCallStarted(call_id="c1", attempt=attempt, **started)], 0)
        resumed = engine.resume(sid)
        resumed.end()
        events = [e.event for e in engine.journal.read(sid)]
        reruns = [e for e in events if isinstance(e, ToolCallStarted)]
        if attempt == 1:
            assert [e.attempt for e in reruns] == [1, 2] and events[-2].output.startswith(expected)  # type: ignore[union-attr]
        else:
            assert len(reruns) == 1
            [cut] = [e for e in events if isinstance(e, ToolCallInterrupted)]
            assert expected in cut.message


def test_ctrl_c_stops_calls_running_side_by_side_and_journals_them_interrupted(tmp_path: Path) -> None:
    import signal
    import time

    from conftest import PYTHON, wait_for

    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    python_tool(home, "slow", "import json, os, sys, time\nme = json.load(sys.stdin)['me']\n"
                "open(os.path.join(os.environ['ZAGENT_WORKSPACE'], me), 'w').close()\ntime.sleep(60)\n",
                parameters={"type": "object", "properties": {"me": {"type": "string"}}}, concurrency_safe=True)
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": "both", "tool_calls": [
        {"name": "slow", "arguments": {"me": "a"}}, {"name": "slow", "arguments": {"me": "b"}}]}, {"text": "done"}]))
    proc = forked.Popen([PYTHON, "-m", "zagent_cli", "--home", str(home), "--workspace", str(work), "run",
                         "--model", f"scripted:{script}", "go"],
                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: (work / "a").exists() and (work / "b").exists(), "both calls running", 30)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert time.monotonic() - sent < 15  # not the 60 s the calls would have run
    with SQLiteJournal(home / "journal.db") as journal:
        (summary,) = journal.sessions()
        kinds = [e.event.type for e in journal.read(summary.session_id)]
    assert kinds.count("tool_call_interrupted") == 2 and "tool_call_finished" not in kinds


def test_a_process_sees_the_workspace_as_pwd_links_resolved(home_dir: Path, journal: SQLiteJournal,
                                                            tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    engine = Engine(Home(home_dir), journal, workspace=tmp_path / "link")
    python_tool(home_dir, "pwd", "import os\nprint(os.environ['PWD'])")
    with engine.start_session() as session:
        assert session.call("shell", {"command": "echo $PWD; pwd"}).output.split() == [str(real), str(real)]
        assert session.call("pwd", {}).output.strip() == str(real)


def test_tool_state_keys_totals_and_surrogates_are_checked(home_dir: Path, engine: Engine) -> None:
    from zagent_core.tools.inprocess import ToolState

    with pytest.raises(StateValueError, match="over 256"):
        ToolState({}).set("k" * 300, 1)
    state = ToolState({})
    for n in range(17):  # 17 values of 60,000 bytes: under 1 MiB
        state.set(f"k{n}", "x" * 60_000)
    with pytest.raises(StateValueError, match="over the 1048576-byte limit of one call"):
        state.set("k17", "x" * 60_000)
    state.set("name", "caf\udce9")
    assert state.get("name") == "caf\ufffd"


def test_a_rerun_from_a_workspace_that_changed_since_says_which_files_differ(
        home_dir: Path, engine: Engine, workspace: Path, tmp_path: Path) -> None:
    from zagent_core.history.replay import replay

    session_id = _edit_session(engine, workspace)  # the session fixed notes.txt: the workspace holds the fix
    with SQLiteJournal(tmp_path / "replays.db") as into:
        report = replay(engine.journal, session_id, engine.home, into, tools="rerun", workdir=tmp_path / "work")
    assert not report.matched
    assert any(note.startswith("1 file(s) of the workspace are not what the recording first read (notes.txt)")
               for note in report.notes), report.notes


def test_no_built_in_imports_the_session_engine_or_anything_above_it() -> None:
    """design.md: a built-in gets what it needs through its context, never from the engine."""
    import ast

    import zagent_core.builtins

    above = ("zagent_core.session.engine", "zagent_core.agent.loop", "zagent_core.history.replay", "zagent_core.history.exports", "zagent_cli")
    folder = Path(zagent_core.builtins.__file__).parent
    found = []
    for module in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(module.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            found += [f"{module.name}: {name}" for name in names if name.startswith(above)]
    assert found == []
