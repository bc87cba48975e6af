"""What the model sees of the tools: shell's options, config's descriptions and aliases
(the request's tool list), against what the journal keeps (always the canonical names)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import python_tool

from zagent_cli.main import cli
from zagent_core import Engine, Home
from zagent_core.agent.conversation import conversation
from zagent_core.agent.loop import Agent
from zagent_core.agent.models import Message, ModelReply, ToolCallRequest, ToolSpec
from zagent_core.agent.models.scripted import ScriptedModel
from zagent_core.builtins import registry
from zagent_core.config import Config
from zagent_core.history.replay import replay
from zagent_core.journal.events import ModelReplied, ToolCallRejected, ToolCallRequested, ToolCallStarted
from zagent_core.journal.protocol import Journal
from zagent_core.tools.shown import AliasError
from zagent_store import SQLiteJournal


class Seeing:
    """A scripted model that keeps the tool list of every request it is sent."""

    def __init__(self, *replies: dict[str, Any]) -> None:
        self.model = ScriptedModel([
            ModelReply(text=r.get("text", ""), tool_calls=[
                ToolCallRequest(id=f"c{n}_{i}", name=c["name"], arguments=c.get("arguments", {}))
                for i, c in enumerate(r.get("tool_calls", []))],
                stop_reason="tool_use" if r.get("tool_calls") else "end_turn")
            for n, r in enumerate(replies)])
        self.name = self.model.name
        self.tools: list[list[ToolSpec]] = []
        self.requests: list[list[Message]] = []

    def reply(self, messages: list[Message], tools: list[ToolSpec], **kwargs: Any) -> ModelReply:
        self.tools.append(tools)
        self.requests.append(messages)
        return self.model.reply(messages, tools, **kwargs)

    def seen(self, name: str) -> ToolSpec:
        return next(spec for spec in self.tools[-1] if spec.name == name)


def configured(home_dir: Path, journal: Journal, workspace: Path, **raw: Any) -> Engine:
    return Engine(Home(home_dir), journal, workspace=workspace, config=Config.model_validate(raw))


def test_shell_without_background_offers_no_run_in_background_and_does_not_describe_it(
        home_dir: Path, journal: Journal, workspace: Path) -> None:
    engine = configured(home_dir, journal, workspace, builtins={"shell": {"background": False}})
    model = Seeing({"tool_calls": [{"name": "shell", "arguments": {"command": "true", "run_in_background": True}}]},
                   {"text": "done"})
    session = engine.start_session("run")
    Agent(session, model).run("go")
    shell = model.seen("shell")
    assert "run_in_background" not in shell.parameters["properties"]
    assert "run_in_background" not in shell.description and "background" not in shell.description
    assert "Prefer read_file, edit, grep and glob for files" in shell.description
    [rejected] = [e.event for e in journal.read(session.session_id) if isinstance(e.event, ToolCallRejected)]
    assert "run_in_background" in rejected.message  # refused as any argument shell does not take


def test_shell_names_only_the_file_tools_offered(home_dir: Path, journal: Journal, workspace: Path) -> None:
    model = Seeing({"text": "done"})
    engine = configured(home_dir, journal, workspace, builtins={"enabled": ["shell", "read_file", "grep"]},
                        tools={"disabled": ["grep"]})
    Agent(engine.start_session("run"), model).run("go")
    assert "Prefer read_file for files" in model.seen("shell").description
    assert "run_in_background" in model.seen("shell").parameters["properties"]
    model = Seeing({"text": "done"})
    engine = configured(home_dir, journal, workspace, builtins={"enabled": ["shell"]})
    Agent(engine.start_session("run"), model).run("go")
    description = model.seen("shell").description
    assert "Prefer" not in description and "read_file" not in description and "run_in_background" in description


def doctor(home: Path) -> dict[str, Any]:
    import json

    done = CliRunner().invoke(cli, ["--home", str(home), "doctor", "--json"], catch_exceptions=False)
    return json.loads(done.output)


def echo_tool(home_dir: Path) -> None:
    python_tool(home_dir, "echo", "import json, sys\nprint(json.load(sys.stdin)['say'])",
                parameters={"type": "object", "properties": {"say": {"type": "string"}}, "required": ["say"]})


def test_descriptions_replace_what_the_model_is_told_of_built_ins_and_folder_tools(
        home_dir: Path, journal: Journal, workspace: Path) -> None:
    echo_tool(home_dir)
    engine = configured(home_dir, journal, workspace,
                        tools={"descriptions": {"echo": "Say it back.", "grep": "Search the repository."}})
    model = Seeing({"text": "done"})
    Agent(engine.start_session("run"), model).run("go")
    assert model.seen("echo").description == "Say it back."
    assert model.seen("grep").description == "Search the repository."
    assert model.seen("read_file").description == registry.all_builtins()["read_file"].description


def test_a_description_or_alias_of_no_tool_is_a_warning_doctor_reports(home_dir: Path) -> None:
    (home_dir / "config.json").write_text(
        '{"tools": {"descriptions": {"gerp": "x"}, "aliases": {"nothing": "none"}}}')
    report = doctor(home_dir)
    messages = {p["message"]: p["severity"] for p in report["problems"]}
    assert messages == {
        'tools.descriptions names "gerp", which is not a tool (did you mean "grep"?); it is left unused': "warning",
        'tools.aliases names "nothing", which is not a tool; it is left unused': "warning"}
    assert report["ok"]


def test_the_model_sees_and_calls_an_alias_and_the_journal_keeps_the_tool_s_own_name(
        home_dir: Path, journal: Journal, workspace: Path) -> None:
    echo_tool(home_dir)
    engine = configured(home_dir, journal, workspace, tools={"aliases": {"echo": "say", "shell": "bash"}})
    model = Seeing({"tool_calls": [{"name": "say", "arguments": {"say": "hi"}}]}, {"text": "done"})
    session = engine.start_session("run")
    assert Agent(session, model).run("go").reason == "idle"
    names = [spec.name for spec in model.tools[0]]
    assert "say" in names and "bash" in names and "echo" not in names and "shell" not in names
    events = [e.event for e in journal.read(session.session_id)]
    [requested] = [e for e in events if isinstance(e, ToolCallRequested)]
    [started] = [e for e in events if isinstance(e, ToolCallStarted)]
    assert requested.tool == started.tool == "echo"
    assert [c.name for e in events if isinstance(e, ModelReplied) for c in e.tool_calls] == ["echo"]
    assert [t.name for t in session.state.tools if t.name in ("echo", "say")] == ["echo"]
    # The second request shows the model its call by the name it may call.
    assert [c.name for m in model.requests[1] for c in m.tool_calls] == ["say"]
    assert [m.content for m in conversation(journal.read(session.session_id), "sys") if m.role == "tool"] == ["hi"]

    # A replay under another alias (or none) matches the recording.
    for aliases in ({"echo": "repeat"}, {}):
        with SQLiteJournal(workspace.parent / f"replay{len(aliases)}.db") as into:
            report = replay(journal, session.session_id, Home(home_dir), into, tools="rerun", allow_unsafe=True,
                            config=Config.model_validate({"tools": {"aliases": aliases}}),
                            workdir=workspace.parent / f"work{len(aliases)}")
        assert report.matched, report.text()


@pytest.mark.parametrize("aliases, why", [
    ({"echo": "grep"}, 'tools.aliases gives "echo" the alias "grep", which is the name of another tool, "grep"'),
    ({"echo": "say", "shell": "say"}, 'tools.aliases gives "shell" the alias "say", which is also the alias of "echo"'),
    ({"echo": "say it"}, 'tools.aliases gives "echo" the alias "say it", which is not a valid tool name'),
])
def test_an_alias_a_model_cannot_use_is_refused_at_start_and_doctor_says_which(
        home_dir: Path, journal: Journal, workspace: Path, aliases: dict[str, str], why: str) -> None:
    echo_tool(home_dir)
    engine = configured(home_dir, journal, workspace, tools={"aliases": aliases})
    with pytest.raises(AliasError, match=why.replace("(", r"\(")):
        engine.start_session("run")
    assert not list(journal.sessions())  # nothing started
    (home_dir / "config.json").write_text(Config.model_validate({"tools": {"aliases": aliases}}).model_dump_json())
    report = doctor(home_dir)
    assert not report["ok"]
    assert [p["message"] for p in report["problems"] if p["severity"] == "error" and why in p["message"]]
