"""What the model sees of the tools: shell's options, config's descriptions and aliases
(the request's tool list), against what the journal keeps (always the canonical names)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zagent_core import Engine, Home
from zagent_core.agent.loop import Agent
from zagent_core.agent.models import Message, ModelReply, ToolCallRequest, ToolSpec
from zagent_core.agent.models.scripted import ScriptedModel
from zagent_core.config import Config
from zagent_core.journal.events import ToolCallRejected
from zagent_core.journal.protocol import Journal


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

    def reply(self, messages: list[Message], tools: list[ToolSpec], **kwargs: Any) -> ModelReply:
        self.tools.append(tools)
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
