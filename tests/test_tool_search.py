"""Lazy tools and ``tool_search`` (issue 24): real ``zagent`` processes, a real MCP server in
Python, and a real HTTP server on 127.0.0.1 speaking Chat Completions, which records the
requests, so the tests read the tool list the model receives."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import threading
from pathlib import Path
from typing import Any

import forked
import pytest
from conftest import PYTHON, python_tool, wait_for
from test_openai import FakeServer, completion, server  # noqa: F401 - server: a fixture

from zagent_core import Engine, Home
from zagent_core.builtins import tool_search
from zagent_core.config import Config, load_config
from zagent_core.history.replay import replay
from zagent_core.journal.events import ToolCallRejected, ToolsUnlocked
from zagent_core.journal.fold import rebuild
from zagent_core.tools.disclosure import disclosed
from zagent_core.tools.inprocess import Findable
from zagent_store import SQLiteJournal

pytest.importorskip("mcp", reason="the MCP SDK is not installed: pip install -e '.[test]'")

LAB = textwrap.dedent("""\
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("lab")

    @server.tool()
    def weather(city: str) -> str:
        \"\"\"Tell the weather forecast of a city.\"\"\"
        return f"sunny in {city}"

    @server.tool()
    def translate(text: str, to: str) -> str:
        \"\"\"Translate a text into another language.\"\"\"
        return f"{text} ({to})"

    @server.tool()
    def stock_price(symbol: str) -> str:
        \"\"\"Look up the latest price of a stock.\"\"\"
        return f"{symbol}: 42"

    server.run()
""")


def lab_home(tmp_path: Path, **tools: Any) -> Path:
    """A home whose config.json discloses tools lazily and starts the ``lab`` MCP server."""
    home = tmp_path / "home"
    (home / "tools").mkdir(parents=True)
    (tmp_path / "lab.py").write_text(LAB)
    (home / "config.json").write_text(json.dumps({
        "tools": {"disclosure": "lazy", **tools},
        "mcp": {"servers": {"lab": {"command": [PYTHON, str(tmp_path / "lab.py")]}}}}))
    return home


def zagent(home: Path, *args: str) -> list[str]:
    return [PYTHON, "-m", "zagent_cli", "--home", str(home), *args]


def env(fake: FakeServer) -> dict[str, str]:
    return {**os.environ, "OPENAI_BASE_URL": fake.url, "OPENAI_API_KEY": "sk-test", "NO_COLOR": "1"}


def names(request: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in request["tools"]]


def call(call_id: str, name: str, **arguments: Any) -> tuple[str, str, str]:
    return call_id, name, json.dumps(arguments)


def only_session(home: Path) -> tuple[str, list[Any]]:
    with SQLiteJournal(home / "journal.db") as journal:
        (summary,) = journal.sessions()
        return summary.session_id, list(journal.read(summary.session_id))


def test_lazy_tools_are_found_unlocked_and_appended_in_unlock_order_keeping_the_request_prefix(
        server: FakeServer, tmp_path: Path) -> None:  # noqa: F811 - the fixture
    home = lab_home(tmp_path)
    server.reply(body=completion(None, [call("c1", "lab__weather", city="Oslo"),
                                        call("c2", "tool_search", query="weather forecast")], "tool_calls"))
    server.reply(body=completion(None, [call("c3", "tool_search", query="TRANSLATE", limit=1)], "tool_calls"))
    server.reply(body=completion(None, [call("c4", "lab__weather", city="Oslo"),
                                        call("c5", "tool_search", query="weather")], "tool_calls"))
    server.reply(body=completion("Sunny in Oslo."))
    done = subprocess.run(zagent(home, "run", "--model", "openai:m", "weather in Oslo?"),
                          capture_output=True, text=True, timeout=120, env=env(server), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    first, second, third, fourth = server.requests
    assert "tool_search" in names(first) and not [n for n in names(first) if n.startswith("lab__")]
    # Each request sends the one before's tools byte for byte, then what was unlocked since.
    assert second["tools"][:-1] == first["tools"] and names(second)[-1] == "lab__weather"
    assert third["tools"][:-1] == second["tools"] and names(third)[-1] == "lab__translate"
    assert fourth["tools"] == third["tools"]  # found again: nothing new
    assert second["tools"][-1]["function"]["parameters"]["required"] == ["city"]

    refused, found = second["messages"][-2:]
    assert refused["tool_call_id"] == "c1" and "call tool_search with words from its name" in refused["content"]
    assert found["content"].startswith("Found 1 tool, loaded: you can call it from your next reply on.")
    assert "lab__weather: Tell the weather forecast of a city.\n  parameters:\n  - city (string, required)" \
        in found["content"]
    assert "sunny in Oslo" in fourth["messages"][-2]["content"]

    session_id, events = only_session(home)
    unlocks = [stored.event for stored in events if isinstance(stored.event, ToolsUnlocked)]
    assert [(u.call_id, u.tools) for u in unlocks] == [("c2", ["lab__weather"]), ("c3", ["lab__translate"])]
    (rejected,) = [stored.event for stored in events if isinstance(stored.event, ToolCallRejected)]
    assert rejected.reason == "deferred"
    assert rebuild(events).unlocked == ["lab__weather", "lab__translate"]


def test_an_unlock_survives_a_sigkill_and_resume_sends_the_same_tools(
        server: FakeServer, tmp_path: Path) -> None:  # noqa: F811 - the fixture
    home = lab_home(tmp_path)
    server.reply(body=completion(None, [call("c1", "tool_search", query="stock")], "tool_calls"))
    release = threading.Event()
    server.stream([], gate=(0, release))  # the request after the unlock is never answered: the run is killed
    run = forked.Popen(zagent(home, "run", "--model", "openai:m", "price of ACME?"), env=env(server),
                       cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: len(server.requests) == 2, "the request after the unlock", seconds=60)
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
    finally:
        release.set()
    killed = server.requests[1]
    assert names(killed)[-1] == "lab__stock_price"

    server.reply(body=completion(None, [call("c2", "lab__stock_price", symbol="ACME")], "tool_calls"))
    server.reply(body=completion("ACME is at 42."))
    session_id, _ = only_session(home)
    resumed = subprocess.run(zagent(home, "resume", session_id), capture_output=True, text=True,
                             timeout=120, env=env(server), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    asked_again, after_call = server.requests[2:]
    assert asked_again["tools"] == killed["tools"] and after_call["tools"] == killed["tools"]
    assert "ACME: 42" in after_call["messages"][-1]["content"]


def test_a_replay_unlocks_what_the_recording_did_and_serves_the_same_tool_list(
        server: FakeServer, tmp_path: Path) -> None:  # noqa: F811 - the fixture
    home = lab_home(tmp_path)
    server.reply(body=completion(None, [call("c1", "tool_search", query="translate")], "tool_calls"))
    server.reply(body=completion(None, [call("c2", "lab__translate", text="hei", to="en")], "tool_calls"))
    server.reply(body=completion("Done."))
    done = subprocess.run(zagent(home, "run", "--model", "openai:m", "translate hei"),
                          capture_output=True, text=True, timeout=120, env=env(server), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    session_id, recorded = only_session(home)
    for mode in ("recorded", "rerun"):
        with SQLiteJournal(home / "journal.db") as journal, SQLiteJournal(tmp_path / f"{mode}.db") as into:
            report = replay(journal, session_id, Home(home), into, workdir=tmp_path / mode, tools=mode,
                            config=load_config(home / "config.json")[0])
            assert report.matched and report.differences == [], report
            events = list(into.read(report.replay_session_id))
        # The translate call ran (it was not refused as deferred): the replay had unlocked it.
        assert not [stored for stored in events if isinstance(stored.event, ToolCallRejected)]
        assert rebuild(events).unlocked == rebuild(recorded).unlocked == ["lab__translate"]
    assert len(server.requests) == 3  # a replay never asks the model


# -- what a request sends, without a model --------------------------------------------------


def test_folder_tools_are_deferred_only_with_lazy_folder_tools_and_eager_names_stay_sent(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for name in ("alpha", "beta", "gamma"):
        python_tool(home, name, "print('ok')", description=f"The {name} tool.")

    def sent(tools: dict[str, Any], unlocked: list[str] = ()) -> list[str]:
        config = Config.model_validate({"tools": tools, "builtins": {"enabled": ["read_file", "tool_search"]}})
        with SQLiteJournal(tmp_path / f"{len(list(tmp_path.iterdir()))}.db") as journal:
            session = Engine(Home(home), journal, workspace=tmp_path, config=config).start_session("test")
            return [entry.name for entry in disclosed(session.offered(), config, list(unlocked))]

    assert sent({}) == ["alpha", "beta", "gamma", "read_file"]
    assert sent({"disclosure": "lazy"}) == ["alpha", "beta", "gamma", "read_file"]  # nothing deferred: no tool_search
    lazy = {"disclosure": "lazy", "lazy_folder_tools": True, "eager": ["beta"]}
    assert sent(lazy) == ["beta", "read_file", "tool_search"]
    assert sent(lazy, ["gamma", "beta", "alpha"]) == ["beta", "read_file", "tool_search", "gamma", "alpha"]


def findable(name: str, description: str, unlocked: bool = False) -> Findable:
    return Findable(name=name, shown_name=name, description=description, parameters={}, unlocked=unlocked)


def test_matches_rank_a_word_in_the_name_over_one_in_the_description_and_keep_ties_in_order() -> None:
    tools = [findable("gh__list_issues", "List the issues of a repository."),
             findable("gh__create_issue", "Open an issue."),
             findable("mail__send", "Send an e-mail about an issue."),
             findable("calendar__add", "Add an event.")]
    found = tool_search.matches(tools, "Issue create", 10)
    assert [tool.name for tool in found] == ["gh__create_issue", "gh__list_issues", "mail__send"]
    assert [tool.name for tool in tool_search.matches(tools, "issue", 2)] == ["gh__list_issues", "gh__create_issue"]
    assert tool_search.matches(tools, "weather", 5) == []
    selected = tool_search.matches(tools, "select:mail__send, gh__create_issue,nothing,mail__send", 5)
    assert [tool.name for tool in selected] == ["mail__send", "gh__create_issue"]


def test_a_person_or_an_mcp_client_calls_a_deferred_tool_without_searching_a_model_is_told_to(tmp_path: Path) -> None:
    home = tmp_path / "home"
    python_tool(home, "alpha", "print('alpha ran')")
    config = Config.model_validate({"tools": {"disclosure": "lazy", "lazy_folder_tools": True}})
    with SQLiteJournal(tmp_path / "journal.db") as journal:
        engine = Engine(Home(home), journal, workspace=tmp_path, config=config)
        for origin in ("tools run", "mcp"):
            assert engine.start_session(origin=origin).call("alpha", {}).output.strip() == "alpha ran"
        refused = engine.start_session(origin="run").call("alpha", {})
    assert refused.is_error and refused.output.startswith('tool "alpha" is not loaded yet')


def test_doctor_warns_of_an_eager_name_no_tool_has_and_of_lazy_tools_nothing_can_find(tmp_path: Path) -> None:
    home = tmp_path / "home"
    python_tool(home, "alpha", "print('ok')")
    (home / "config.json").write_text(json.dumps({
        "builtins": {"enabled": ["read_file"]},
        "tools": {"disclosure": "lazy", "lazy_folder_tools": True, "eager": ["alpah"]}}))
    doctor = forked.run(zagent(home, "doctor"), capture_output=True, text=True, cwd=tmp_path)
    assert 'tools.eager names "alpah", which is not a tool (did you mean "alpha"?); it is left unused' in doctor.stdout
    assert ('tools.disclosure is "lazy" but builtins.enabled leaves out tool_search, so the model cannot find the '
            'deferred tools: add "tool_search" to builtins.enabled') in doctor.stdout


def test_tools_list_marks_the_deferred_tools(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for name in ("alpha", "beta"):
        python_tool(home, name, "print('ok')", description=f"The {name} tool.")
    (home / "config.json").write_text(json.dumps({
        "builtins": {"enabled": ["read_file", "tool_search"]},
        "tools": {"disclosure": "lazy", "lazy_folder_tools": True, "eager": ["beta"]}}))
    listed = forked.run(zagent(home, "tools", "list"), capture_output=True, text=True, cwd=tmp_path)
    marks = {line.split()[0]: line.rstrip().endswith("(deferred)") for line in listed.stdout.splitlines() if line}
    assert marks == {"alpha": True, "beta": False, "read_file": False, "tool_search": False}, listed.stdout
    as_json = json.loads(forked.run(zagent(home, "tools", "list", "--json"), capture_output=True, text=True,
                                    cwd=tmp_path).stdout)
    assert {row["name"]: row["deferred"] for row in as_json["tools"] + as_json["builtins"]} == {
        "alpha": True, "beta": False, "read_file": False, "tool_search": False}
