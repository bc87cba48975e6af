"""Every input that goes to the model is bounded (issue 22).

What a person gives a session (a message, an answer, a denial's reason) is refused whole over
its cap in ``limits``, with a message that says its size, the cap and what to do, and nothing
is journaled. What machines produce (an MCP server's tool list, a sub-agent's reply) is cut,
in its own order, with a marker or a warning that says so.

Real processes: the CLI as a person runs it, with the scripted model and a real SQLite journal,
and a real MCP server (on the SDK) that offers 3,000 tools.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
import forked
from conftest import PYTHON, run_on_terminal
from test_approvals import SCRIPT as DEPLOY_SCRIPT, deploy  # noqa: F401 - deploy: a fixture
from test_ask_user import SCRIPT as ASK_SCRIPT, asked_once_answered_once, events, only_session, status, zagent

from zagent_core import Engine, Home
from zagent_core.agent.loop import Agent
from zagent_core.agent.models import load_model
from zagent_core.config import Config, LimitsConfig
from zagent_core.journal.events import ChildEnded, ModelReplied, SessionStarted
from zagent_core.journal.fold import rebuild
from zagent_core.session.typed import InputTooLargeError
from zagent_core.tools.mcp import definition_bytes
from zagent_store import SQLiteJournal

DEFAULTS = LimitsConfig()


def script_file(tmp_path: Path, script: Any) -> Path:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script))
    return path


def zagent_reading(home: Path, stdin: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real CLI, its stdin redirected from a file (``zagent run -`` reads the prompt there)."""
    with stdin.open("rb") as given:
        return forked.run([PYTHON, "-m", "zagent_cli", "--home", str(home), *args], capture_output=True,
                          text=True, stdin=given, cwd=home.parent, timeout=120)


def sessions(home: Path) -> list[dict[str, Any]]:
    listing = zagent(home, "sessions", "list", "--json")
    assert listing.returncode == 0, listing.stderr
    return list(json.loads(listing.stdout)["sessions"])


def refused(done: subprocess.CompletedProcess[str], said: str) -> None:
    """Refused as a person's mistake: exit 2, the message, no traceback."""
    assert done.returncode == 2, done.stderr[-2000:]
    assert said in " ".join(done.stderr.split()), done.stderr
    assert "Traceback" not in done.stderr


# -- what a person gives: refused whole over its cap, nothing journaled ----------------------------------


@pytest.mark.parametrize("how", [["--model", "MODEL"], ["--detach"]], ids=["run", "run --detach"])
def test_a_prompt_over_user_message_bytes_is_refused_and_no_session_is_started(
        home_dir: Path, tmp_path: Path, how: list[str]) -> None:
    spec = f"scripted:{script_file(tmp_path, [{'text': 'hi'}])}"
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("x" * 300_000)
    done = zagent_reading(home_dir, prompt, "run", *[spec if arg == "MODEL" else arg for arg in how], "-")
    refused(done, "the message is 300,000 bytes, over limits.user_message_bytes (262,144 bytes); it was not "
                  "journaled. Put the text in a file in the workspace and tell the agent to read it (read_file "
                  "pages it), or raise limits.user_message_bytes in config.json")
    assert sessions(home_dir) == []


def test_a_resume_prompt_over_its_cap_is_refused_and_the_session_is_left_as_it_was(
        home_dir: Path, tmp_path: Path) -> None:
    spec = f"scripted:{script_file(tmp_path, [{'text': 'hi'}, {'text': 'again'}])}"
    assert zagent(home_dir, "run", "--model", spec, "hello").returncode == 0
    session_id = only_session(home_dir)
    before = events(home_dir, session_id)
    (home_dir / "config.json").write_text(json.dumps({"limits": {"user_message_bytes": 1024}}))
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("é" * 600)  # 1,200 bytes of UTF-8 in 600 characters: the cap counts bytes
    refused(zagent_reading(home_dir, prompt, "resume", session_id, "-", "--model", spec),
            "the message is 1,200 bytes, over limits.user_message_bytes (1,024 bytes)")
    assert events(home_dir, session_id) == before and status(home_dir) == "idle"
    prompt.write_text("é" * 500)
    assert zagent_reading(home_dir, prompt, "resume", session_id, "-", "--model", spec).returncode == 0


def test_a_20_mb_answer_is_refused_and_the_question_still_waits_for_one(home_dir: Path, tmp_path: Path) -> None:
    spec = f"scripted:{script_file(tmp_path, ASK_SCRIPT)}"
    assert zagent(home_dir, "run", "--model", spec, "make a button").returncode == 0
    session_id = only_session(home_dir)
    before = events(home_dir, session_id)
    answer = tmp_path / "answer.txt"
    answer.write_bytes(b"blue " * (4 * 1024 * 1024))  # 20 MiB, as a file piped in
    refused(zagent_reading(home_dir, answer, "answer", session_id, "-"),
            "the answer is 20,971,520 bytes, over limits.answer_bytes (65,536 bytes); it was not journaled. Put "
            "the text in a file in the workspace and answer with its path (the agent can read it), or raise "
            "limits.answer_bytes in config.json")
    assert events(home_dir, session_id) == before and status(home_dir) == "waiting on user"
    assert zagent(home_dir, "answer", session_id, "blue").returncode == 0
    asked_once_answered_once(home_dir, session_id, "blue")


def test_a_denial_reason_over_its_cap_is_refused_and_the_call_still_waits(
        home_dir: Path, tmp_path: Path, deploy: Path) -> None:  # noqa: F811 - the fixture
    spec = f"scripted:{script_file(tmp_path, DEPLOY_SCRIPT)}"
    assert zagent(home_dir, "run", "--model", spec, "ship it").returncode == 0
    session_id = only_session(home_dir)
    before = events(home_dir, session_id)
    refused(zagent(home_dir, "deny", session_id, "--reason", "no" * 4500),
            "the reason is 9,000 bytes, over limits.denial_reason_bytes (8,192 bytes); it was not journaled. "
            "Give a shorter reason, or put the text in a file in the workspace and name it in the reason")
    assert events(home_dir, session_id) == before and status(home_dir) == "waiting on approval"
    denied = zagent(home_dir, "deny", session_id, "--reason", "not on a Friday")
    assert denied.returncode == 0 and "the user denied this call (zagent deny): not on a Friday" in denied.stdout


def test_on_a_terminal_an_answer_over_its_cap_is_asked_again(home_dir: Path, tmp_path: Path) -> None:
    spec = f"scripted:{script_file(tmp_path, ASK_SCRIPT)}"
    (home_dir / "config.json").write_text(json.dumps({"limits": {"answer_bytes": 1024}}))
    shown = run_on_terminal([PYTHON, "-m", "zagent_cli", "--home", str(home_dir), "run", "--model", spec,
                             "make a button"], home_dir.parent, b"x" * 2000 + b"\nblue\n")
    assert b"the answer is 2,000 bytes, over limits.answer_bytes (1,024 bytes)" in shown
    assert b"assistant: Going with your colour." in shown
    asked_once_answered_once(home_dir, only_session(home_dir), "blue")


def test_the_python_api_refuses_a_message_and_an_answer_over_their_caps(home_dir: Path, tmp_path: Path,
                                                                        workspace: Path) -> None:
    spec = f"scripted:{script_file(tmp_path, ASK_SCRIPT)}"
    config = Config(limits=LimitsConfig(user_message_bytes=1024, answer_bytes=1024))
    with SQLiteJournal(home_dir / "journal.db") as journal, \
            Engine(Home(home_dir), journal, workspace=workspace, config=config) as engine:
        session = engine.start_session("test")
        head = journal.head(session.session_id)
        with pytest.raises(InputTooLargeError, match=r"the message is 1,025 bytes, over limits.user_message_bytes"):
            Agent(session, load_model(spec), spec=spec).run("x" * 1025)
        assert journal.head(session.session_id) == head
        assert Agent(session, load_model(spec), spec=spec).run("make a button").reason == "waiting_on_user"
        head = journal.head(session.session_id)
        with pytest.raises(InputTooLargeError, match=r"the answer is 2,048 bytes, over limits.answer_bytes"):
            session.answer("x" * 2048)
        assert journal.head(session.session_id) == head and session.state.questions
        session.answer("blue")
        session.release()


# -- what machines produce: cut, in order, with a marker or a warning ----------------------------------

MANY_TOOLS = textwrap.dedent("""\
    import sys
    import anyio
    from mcp import types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    COUNT, PAGE = int(sys.argv[1]), 500
    TOOLS = [types.Tool(name=f"tool_{i:04d}", description=f"Tool number {i} of {COUNT}.",
                        input_schema={"type": "object", "properties": {"n": {"type": "integer"}}})
             for i in range(COUNT)]

    async def list_tools(ctx, params):  # in pages, as a big server lists them
        start = int(params.cursor) if params is not None and params.cursor else 0
        return types.ListToolsResult(tools=TOOLS[start:start + PAGE],
                                     next_cursor=str(start + PAGE) if start + PAGE < COUNT else None)

    async def call_tool(ctx, params):
        return types.CallToolResult(content=[types.TextContent(type="text", text=params.name)])

    async def main():
        server = Server("many", version="1.0.0", on_list_tools=list_tools, on_call_tool=call_tool)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)
""")


def many_tools(home: Path, count: int, **limits: int) -> None:
    """A home whose config names an MCP server ``many`` that lists ``count`` tools."""
    pytest.importorskip("mcp", reason="the MCP SDK is not installed: pip install -e '.[test]'")
    server = home.parent / "many.py"
    server.write_text(MANY_TOOLS)
    (home / "config.json").write_text(json.dumps({"limits": limits, "mcp": {"servers": {"many": {
        "command": [PYTHON, str(server), str(count)]}}}}))


def offered_mcp_tools(home: Path, session_id: str) -> list[str]:
    started = events(home, session_id)[0].event
    assert isinstance(started, SessionStarted)
    return [offer.name for offer in started.tools if offer.name.startswith("many__")]


def test_an_mcp_server_of_3000_tools_has_its_first_100_offered_and_a_warning_says_what_was_left_out(
        home_dir: Path, tmp_path: Path) -> None:
    many_tools(home_dir, 3000)
    spec = f"scripted:{script_file(tmp_path, [{'text': 'hi'}])}"
    done = zagent(home_dir, "run", "--model", spec, "hello")
    assert done.returncode == 0, done.stderr
    warning = ('MCP server "many": it lists 3,000 tools; the first 100 are offered (limits.mcp_tools_per_server), '
               '2,900 left out: "tool_0100", "tool_0101", "tool_0102", "tool_0103", "tool_0104" and 2,895 more; '
               "raise limits.mcp_tools_per_server in config.json to offer more")
    assert done.stderr.count(warning) == 1, done.stderr  # said once, at the start
    session_id = only_session(home_dir)
    assert offered_mcp_tools(home_dir, session_id) == [f"many__tool_{i:04d}" for i in range(100)]
    started = events(home_dir, session_id)[0].event
    assert isinstance(started, SessionStarted) and warning in started.warnings  # journaled with the session


def test_an_mcp_tool_list_over_its_bytes_keeps_the_tools_that_fit_in_the_servers_order(
        home_dir: Path, workspace: Path) -> None:
    many_tools(home_dir, 50, mcp_tool_list_bytes=4096)
    with SQLiteJournal(home_dir / "journal.db") as journal, \
            Engine(Home(home_dir), journal, workspace=workspace) as engine:
        session = engine.start_session("test")
        offered = [tool for tool in session.offered() if tool.name.startswith("many__")]
        session.release()
    sizes = [definition_bytes(tool) for tool in offered]
    assert sum(sizes) <= 4096 < sum(sizes) + sizes[-1]  # as many as fit, and no more
    assert [tool.name for tool in offered] == [f"many__tool_{i:04d}" for i in range(len(offered))]
    left = 50 - len(offered)
    assert offered_mcp_tools(home_dir, session.session_id) == [tool.name for tool in offered]
    started = events(home_dir, session.session_id)[0].event
    assert isinstance(started, SessionStarted)
    assert [w for w in started.warnings if "limits.mcp" in w] == [
        f'MCP server "many": {left} of its tools are not offered: their definitions would take its tool list past '
        f'limits.mcp_tool_list_bytes (4,096 bytes): "tool_{len(offered):04d}", "tool_{len(offered) + 1:04d}", '
        f'"tool_{len(offered) + 2:04d}", "tool_{len(offered) + 3:04d}", "tool_{len(offered) + 4:04d}" and '
        f"{left - 5} more; raise limits.mcp_tool_list_bytes in config.json to offer them"]


def test_a_sub_agents_reply_over_child_reply_bytes_is_cut_with_a_marker_and_a_warning(
        home_dir: Path, tmp_path: Path) -> None:
    long_reply = "".join(f"line {n:05d}\n" for n in range(4000))  # 44,000 bytes
    script = {"replies": [{"text": "", "tool_calls": [{"name": "spawn", "arguments": {"task": "write a lot"}}]},
                          {"text": "ok"}],
              "children": {"*": [{"text": long_reply}]}}
    done = zagent(home_dir, "run", "--model", f"scripted:{script_file(tmp_path, script)}", "go")
    assert done.returncode == 0, done.stderr
    assert "child_reply_cut" in done.stderr  # the warning, in the log
    with SQLiteJournal(home_dir / "journal.db") as journal:
        (parent,) = journal.sessions(top_level=True)
    parent_id = parent.session_id
    (ended,) = [e.event for e in events(home_dir, parent_id) if isinstance(e.event, ChildEnded)]
    cap = DEFAULTS.child_reply_bytes
    assert ended.text == long_reply[:cap] + (
        f"\n[... {len(long_reply) - cap:,} more bytes (limits.child_reply_bytes): the whole reply is in "
        f"zagent sessions show {ended.child_session_id}]")
    replies = [e.event for e in events(home_dir, ended.child_session_id) if isinstance(e.event, ModelReplied)]
    assert replies[-1].text == long_reply  # the child's session keeps it whole
    assert rebuild(events(home_dir, parent_id)).children["child-1"].status == "completed"


def test_one_mcp_server_at_its_cap_and_the_built_ins_stay_under_openais_128_tools_a_request() -> None:
    from zagent_core.builtins import registry

    builtins, _ = registry.enabled(Config())
    assert DEFAULTS.mcp_tools_per_server + len(builtins) <= 128


@pytest.mark.parametrize("tool", ["shell", "flood"])
def test_limits_truncation_marker_is_the_line_that_says_where_output_was_cut(home_dir: Path, tool: str) -> None:
    from conftest import python_tool

    python_tool(home_dir, "flood", "for n in range(20000): print(n)")
    (home_dir / "config.json").write_text(json.dumps({"limits": {
        "truncation_marker": "<<{bytes} bytes left out at the {where}; all of it: {path}>>"}}))
    arguments = json.dumps({"command": "seq 0 19999"} if tool == "shell" else {})
    ran = forked.run([PYTHON, "-m", "zagent_cli", "--home", str(home_dir), "tools", "run", tool, "--args", arguments],
                     capture_output=True, text=True, cwd=home_dir.parent, timeout=60)
    assert ran.returncode == 0, ran.stderr
    marker, rest = ran.stdout.split("\n", 1)
    assert marker.startswith("<<") and marker.endswith("/full_output.txt>>"), marker
    dropped = int(marker.removeprefix("<<").split(" ")[0])
    assert " bytes left out at the head; all of it: " in marker
    whole = "".join(f"{n}\n" for n in range(20000))
    assert whole.endswith(rest) and len(whole) - len(rest) == dropped
    assert Path(marker.rsplit(": ", 1)[1].removesuffix(">>")).read_text() == whole


def test_a_truncation_marker_with_a_placeholder_zagent_lacks_is_refused_with_the_ones_it_has() -> None:
    with pytest.raises(ValueError, match=r"\{lines\} is not a placeholder of the marker; it takes \{bytes\}, "
                                         r"\{where\}, \{path\}"):
        LimitsConfig(truncation_marker="[{lines} lines cut]")
    with pytest.raises(ValueError, match=r"\{bytes:>9999\} is not a placeholder"):  # a width could be any size
        LimitsConfig(truncation_marker="{bytes:>9999}")
