"""A tool that calls tools (issue 24): ``zagent call`` from a folder tool's program, through the
real CLI with the scripted model; the nested call journaled with its parent, capped in depth,
and settled with its parent after a real SIGKILL of the engine."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import forked
import pytest
from conftest import PYTHON, python_tool, wait_for
from crashcheck import check_invariants
from test_ask_user import events, only_session, zagent

from zagent_core import Engine, Home
from zagent_core.config import Config, LimitsConfig, SandboxConfig
from zagent_core.history.replay import replay
from zagent_core.journal.events import (
    ToolCallFinished,
    ToolCallInterrupted,
    ToolCallRejected,
    ToolCallRequested,
    ToolCallStarted,
)
from zagent_core.tools import nested, sandbox
from zagent_core.tools.inprocess import Builtin
from zagent_core.tools.results import ToolResult
from zagent_store import MemoryJournal, SQLiteJournal

#: Calls ``{"tool": NAME, "args": {...}}`` through ``zagent call`` and says what it printed and its exit status.
CALLER = f"""
import json, subprocess, sys
asked = json.load(sys.stdin)
called = subprocess.run([{PYTHON!r}, "-m", "zagent_cli", "call", asked["tool"], "--args", json.dumps(asked["args"])],
                        capture_output=True, text=True)
print(called.stdout + called.stderr, end="")
print(f"[zagent call exit {{called.returncode}}]")
"""
TEXT = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"],
        "additionalProperties": False}


@pytest.fixture
def tools(home_dir: Path) -> Path:
    python_tool(home_dir, "caller", CALLER)
    python_tool(home_dir, "shout", "import json, sys\nprint(json.load(sys.stdin)['text'].upper())", parameters=TEXT)
    python_tool(home_dir, "fail", "import sys\nprint('the disk is full')\nsys.exit(1)")
    return home_dir


def run(home: Path, tmp_path: Path, *calls: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """``zagent run`` with a model whose one reply makes ``calls``, then says it is done."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"tool_calls": [{"name": "caller", "arguments": arguments} for arguments in calls]},
                                  {"text": "done"}]))
    return zagent(home, "run", "--model", f"scripted:{script}", "go")


def calls_of(home: Path) -> tuple[dict[str, ToolCallRequested], dict[str, Any]]:
    """The session's calls asked for, and each one's result, by call id."""
    stored = [e.event for e in events(home, only_session(home))]
    requested = {e.call_id: e for e in stored if isinstance(e, ToolCallRequested)}
    results = {e.call_id: e for e in stored if isinstance(e, (ToolCallFinished, ToolCallRejected, ToolCallInterrupted))}
    return requested, results


def test_a_tool_calls_another_through_zagent_call_journaled_with_its_parent_and_shown_nested(
        tools: Path, tmp_path: Path) -> None:
    ran = run(tools, tmp_path, {"tool": "shout", "args": {"text": "hello"}})
    assert ran.returncode == 0, ran.stderr

    requested, results = calls_of(tools)
    (parent,) = [r for r in requested.values() if r.tool == "caller"]
    (child,) = [r for r in requested.values() if r.tool == "shout"]
    assert parent.parent_call_id is None
    assert child.parent_call_id == parent.call_id and child.call_id == f"{parent.call_id}.1"
    assert results[child.call_id].output == "HELLO"
    # The caller got the nested result's text, as tools run prints it, and exit 0.
    assert results[parent.call_id].output == "HELLO\n[zagent call exit 0]"

    shown = zagent(tools, "sessions", "show", only_session(tools)).stdout
    assert f"  -> caller ({parent.call_id})" in shown
    assert f"\n    -> shout ({child.call_id}, called by caller ({parent.call_id})) " in shown
    assert "\n    <- shout: ok, " in shown


def test_a_temporary_folder_too_deep_for_a_socket_path_still_lets_a_tool_call_tools(
        tools: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A socket's path is limited to about 100 bytes: a $TMPDIR as deep as a build's or a test's
    # must not fail every call that runs a process ("AF_UNIX path too long").
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    monkeypatch.setenv("TMPDIR", str(deep))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    assert run(tools, tmp_path, {"tool": "shout", "args": {"text": "deep"}}).returncode == 0

    requested, results = calls_of(tools)
    (parent,) = [r for r in requested.values() if r.tool == "caller"]
    assert results[parent.call_id].output == "DEEP\n[zagent call exit 0]"


def test_an_invalid_nested_call_is_refused_with_the_message_a_model_would_get(tools: Path, tmp_path: Path) -> None:
    ran = run(tools, tmp_path, {"tool": "shout", "args": {"txt": "hello"}}, {"tool": "nope", "args": {}})
    assert ran.returncode == 0, ran.stderr

    requested, results = calls_of(tools)
    invalid, unknown = [r.call_id for r in requested.values() if r.parent_call_id is not None]
    assert results[invalid].reason == "invalid_arguments" and results[unknown].reason == "unknown_tool"
    said = [results[r.call_id].output for r in requested.values() if r.tool == "caller"]
    assert said[0].startswith("shout was not run: its arguments do not match its parameters.\n")
    assert 'missing argument "text"' in said[0] and said[0].endswith("[zagent call exit 1]")
    assert said[1].startswith('unknown tool "nope"') and said[1].endswith("[zagent call exit 1]")


def test_an_error_result_exits_1_with_its_text(tools: Path, tmp_path: Path) -> None:
    assert run(tools, tmp_path, {"tool": "fail", "args": {}}).returncode == 0

    requested, results = calls_of(tools)
    (child,) = [r for r in requested.values() if r.tool == "fail"]
    assert results[child.call_id].is_error
    (parent,) = [r for r in requested.values() if r.tool == "caller"]
    assert results[parent.call_id].output == "the disk is full\n[exit code 1]\n[zagent call exit 1]"


def test_calls_nest_no_deeper_than_the_limit_and_the_refusal_says_it(tools: Path, tmp_path: Path) -> None:
    # caller -> caller (depth 1, allowed) -> shout (depth 2, over limits.nested_call_depth: 1).
    ran = run(tools, tmp_path, {"tool": "caller", "args": {"tool": "shout", "args": {"text": "deep"}}})
    assert ran.returncode == 0, ran.stderr

    requested, results = calls_of(tools)
    (deepest,) = [r for r in requested.values() if r.tool == "shout"]
    refused = results[deepest.call_id]
    assert isinstance(refused, ToolCallRejected) and refused.reason == "limit"
    assert refused.message == (f"shout was not run: calls nest at most 1 deep (limits.nested_call_depth in "
                               f"config.json), and this one, asked for by call {deepest.parent_call_id}, would be "
                               "2 deep")

    (tools / "config.json").write_text(json.dumps({"limits": {"nested_call_depth": 2}}))
    assert run(tools, tmp_path, {"tool": "caller", "args": {"tool": "shout", "args": {"text": "deep"}}}).returncode == 0
    with_two = [e.event for e in events(tools, _latest(tools))]
    assert [e.output for e in with_two if isinstance(e, ToolCallFinished)][0] == "DEEP"


def _latest(home: Path) -> str:
    listing = json.loads(zagent(home, "sessions", "list", "--json").stdout)["sessions"]
    return str(max(listing, key=lambda s: s["started_at"])["session_id"])


def test_zagent_call_outside_a_call_says_what_it_is_for(tmp_path: Path) -> None:
    said = forked.run([PYTHON, "-m", "zagent_cli", "call", "shout", "--args", "{}"], capture_output=True, text=True,
                      stdin=subprocess.DEVNULL, cwd=tmp_path, timeout=60)
    assert said.returncode == 2
    assert f"{nested.SOCKET_VARIABLE} is not set" in said.stderr and "Traceback" not in said.stderr


def test_a_wrong_token_is_refused_and_the_socket_goes_with_its_call(tmp_path: Path) -> None:
    folder = nested.socket_folder("a-session", "a-call")
    with nested.CallSocket(lambda name, arguments: pytest.fail("no call may run"), folder) as sockets:
        variables = sockets.variables()
        reply = nested.call("shout", {}, {**variables, nested.TOKEN_VARIABLE: "0" * 32})
        assert reply.is_error and "the token is not this call's" in reply.output
        assert sockets.path.stat().st_mode & 0o777 == 0o600 and folder.stat().st_mode & 0o777 == 0o700
        assert folder.parent.stat().st_mode & 0o777 == 0o700
    assert not folder.exists()
    with pytest.raises(OSError):
        nested.call("shout", {}, variables)


def test_a_sigkill_of_the_engine_while_a_nested_call_runs_is_settled_for_both_on_resume(
        tools: Path, tmp_path: Path) -> None:
    marker = tmp_path / "nested-started"
    python_tool(tools, "slow", f"from pathlib import Path\nimport time\nPath({str(marker)!r}).touch()\ntime.sleep(300)")
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"tool_calls": [{"name": "caller", "arguments": {"tool": "slow", "args": {}}}]},
                                  {"text": "done"}]))
    engine = subprocess.Popen([PYTHON, "-m", "zagent_cli", "--home", str(tools), "run", "--model", f"scripted:{script}",
                               "go"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              cwd=tmp_path)
    try:
        wait_for(marker.exists, "the nested call to start", seconds=60)
        engine.send_signal(signal.SIGKILL)
    finally:
        engine.wait()
    session_id = only_session(tools)
    assert "no result yet" in zagent(tools, "sessions", "show", session_id).stdout

    resumed = zagent(tools, "resume", session_id)
    assert resumed.returncode == 0, resumed.stderr

    requested, results = calls_of(tools)
    assert len(requested) == 2
    for call_id, call in requested.items():  # neither is left running: each cut off, said once
        assert isinstance(results[call_id], ToolCallInterrupted), (call.tool, results[call_id])
        assert not nested.socket_folder(session_id, call_id).exists()  # nor its socket left behind
    check_invariants(events(tools, session_id))
    shown = zagent(tools, "sessions", "show", session_id).stdout
    assert "no result yet" not in shown
    assert "\n  <- caller: interrupted\n" in shown and "\n    <- slow: interrupted\n" in shown


def test_a_built_in_calls_a_tool_through_its_context(tools: Path, tmp_path: Path) -> None:
    def twice(context: Any, arguments: dict[str, Any]) -> ToolResult:
        shouted = context.call_tool("shout", {"text": arguments["text"]})
        return ToolResult(output=shouted.output * 2, is_error=shouted.is_error)

    with SQLiteJournal(tools / "journal.db") as journal:
        engine = Engine(Home(tools), journal, workspace=tmp_path)
        engine.builtins["twice"] = Builtin(name="twice", description="Shouts twice.", run=twice, parameters=TEXT)
        with engine.start_session() as session:
            result = session.call("twice", {"text": "hi"})
            nested_calls = [e.event for e in journal.read(session.session_id)
                            if isinstance(e.event, ToolCallRequested) and e.event.parent_call_id is not None]
    assert result.output == "HIHI" and not result.is_error
    assert [(c.tool, c.parent_call_id, c.call_id) for c in nested_calls] == [
        ("shout", result.call_id, f"{result.call_id}.1")]


def test_a_recorded_replay_serves_the_nested_calls_with_their_parent(tools: Path, tmp_path: Path) -> None:
    assert run(tools, tmp_path, {"tool": "shout", "args": {"text": "hello"}}).returncode == 0
    recorded, _ = calls_of(tools)

    into = MemoryJournal()
    with SQLiteJournal(tools / "journal.db") as journal:
        report = replay(journal, only_session(tools), Home(tools), into, tools="recorded")
    assert not report.diverged and report.replay_session_id is not None
    served = [e.event for e in into.read(report.replay_session_id)]
    requested = [e for e in served if isinstance(e, ToolCallRequested)]
    assert [(r.tool, r.parent_call_id) for r in requested] == [(r.tool, r.parent_call_id) for r in recorded.values()]
    assert [e.output for e in served if isinstance(e, ToolCallFinished)] == ["HELLO", "HELLO\n[zagent call exit 0]"]


def test_a_rerun_replay_reruns_the_nested_calls_a_model_call_would_rerun_and_serves_the_others(
        tools: Path, tmp_path: Path) -> None:
    python_tool(tools, "caller", CALLER, replay="safe")
    python_tool(tools, "shout", "import json, sys\nprint(json.load(sys.stdin)['text'].upper())", parameters=TEXT,
                replay="safe")
    python_tool(tools, "stamp", "print('stamped')")  # replay: unsafe, the default
    assert run(tools, tmp_path, {"tool": "shout", "args": {"text": "hi"}}, {"tool": "stamp", "args": {}}).returncode == 0
    recorded, _ = calls_of(tools)
    (stamped,) = [r.call_id for r in recorded.values() if r.tool == "stamp"]

    into = MemoryJournal()
    with SQLiteJournal(tools / "journal.db") as journal:
        report = replay(journal, only_session(tools), Home(tools), into, tools="rerun", workdir=tmp_path / "replay")
    assert not report.diverged, report.differences
    assert report.rerun == 3 and report.not_rerun == [f"stamp ({stamped})"]  # both callers and shout ran again
    assert report.replay_session_id is not None
    replayed = [e.event for e in into.read(report.replay_session_id)]
    started = {e.call_id for e in replayed if isinstance(e, ToolCallStarted)}
    assert stamped not in started and len(started) == 3
    assert [(r.tool, r.parent_call_id) for r in replayed if isinstance(r, ToolCallRequested)] == [
        (r.tool, r.parent_call_id) for r in recorded.values()]


@pytest.mark.skipif(sandbox.unavailable() is not None, reason="no bubblewrap sandbox on this host")
@pytest.mark.parametrize("grant", ["workspace-write", "read-only"])
@pytest.mark.parametrize("private_tmp", [False, True])
def test_a_confined_tool_reaches_its_session_through_the_socket_bound_into_its_sandbox(
        tools: Path, tmp_path: Path, grant: str, private_tmp: bool) -> None:
    python_tool(tools, "boxed", CALLER, sandbox=grant)
    config = Config(sandbox=SandboxConfig(private_tmp=private_tmp))
    with SQLiteJournal(tools / "journal.db") as journal:
        engine = Engine(Home(tools), journal, workspace=tmp_path, config=config)
        with engine.start_session() as session:
            result = session.call("boxed", {"tool": "shout", "args": {"text": "out"}})
    assert result.output == "OUT\n[zagent call exit 0]", result.output


def test_a_call_makes_no_more_nested_calls_than_the_limit(tools: Path, tmp_path: Path) -> None:
    def many(context: Any, arguments: dict[str, Any]) -> ToolResult:
        results = [context.call_tool("shout", {"text": str(n)}) for n in range(3)]
        return ToolResult(output="\n".join(r.output for r in results), is_error=False)

    config = Config(limits=LimitsConfig(nested_calls_per_call=2))
    with SQLiteJournal(tools / "journal.db") as journal:
        engine = Engine(Home(tools), journal, workspace=tmp_path, config=config)
        engine.builtins["many"] = Builtin(name="many", description="Shouts thrice.", run=many,
                                          parameters={"type": "object"})
        with engine.start_session() as session:
            result = session.call("many", {})
    assert result.output.split("\n") == ["0", "1", f"shout was not run: call {result.call_id} has made the 2 nested "
                                                   "calls a call may make (limits.nested_calls_per_call in config.json)"]


def test_zagent_call_json_prints_the_output_and_whether_it_is_an_error(tools: Path) -> None:
    python_tool(tools, "asks", f"""
import subprocess
subprocess.run([{PYTHON!r}, "-m", "zagent_cli", "call", "shout", "--args", '{{"text": "json"}}', "--json"])
""")
    ran = zagent(tools, "tools", "run", "asks")
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout) == {"output": "JSON", "is_error": False}
