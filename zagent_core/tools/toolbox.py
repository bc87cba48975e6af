"""One interface for every kind of tool, and the box that offers them.

A session never asks what kind of tool it holds. Folder tools (through
:class:`~zagent_core.tools.folder.FolderTool`), built-ins and MCP servers' tools (both
:class:`~zagent_core.tools.inprocess.Builtin`) implement :class:`ToolEntry`: what the model
is offered, what the session must know to schedule, approve, settle and replay a call,
and :meth:`ToolEntry.prepare`, which the session's one call runner journals and runs the
same way for all of them. A :class:`Toolbox` offers a session's entries by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol

from zagent_core.config import Config
from zagent_core.journal.events import ToolOffer
from zagent_core.tools.folder import FolderTool
from zagent_core.tools.inprocess import Arguments, Builtin, BuiltinContext, PreparedCall
from zagent_core.tools.manifest import ToolSet


class ToolEntry(Protocol):
    """A tool of any kind, as a session offers, schedules and runs it."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def parameters(self) -> dict[str, Any]:
        """The JSON Schema of its arguments, as the model is told."""
        ...

    @property
    def validator(self) -> Any:
        """The validator of :attr:`parameters`."""
        ...

    @property
    def output_schema(self) -> dict[str, Any] | None:
        """The JSON Schema of its results' ``structured`` value, if it has one (``mcp serve``'s ``outputSchema``)."""
        ...

    @property
    def replay(self) -> Literal["safe", "unsafe"]:
        """What a resume does with a call a crash cut off: ``safe`` runs it again, ``unsafe`` reports it."""
        ...

    @property
    def permission(self) -> Literal["allow", "ask"]:
        """``ask``: a person decides each call (unless config.json's ``approvals.allow`` names it)."""
        ...

    @property
    def continues(self) -> bool:
        """A call cut off stays open and goes on when the session is driven again."""
        ...

    @property
    def served_in_replay(self) -> bool:
        """A replay serves its recorded result whatever ``--tools`` says."""
        ...

    @property
    def read_only(self) -> bool:
        """A call only looks: a read-only sub-agent is given the tool."""
        ...

    @property
    def safe_beside_others(self) -> bool:
        """Every call may run beside other calls, whatever its arguments (MCP's ``readOnlyHint``)."""
        ...

    @property
    def finds_deferred(self) -> bool:
        """It is how the model finds deferred tools (``tool_search``): a request sends it only while some are."""
        ...

    def offered(self, config: Config, depth: int) -> bool:
        """Whether a session at ``depth`` (0: top-level) is offered it at all."""
        ...

    def deferred(self, config: Config) -> bool:
        """Whether ``config`` (``tools.disclosure: "lazy"``) keeps it out of requests until ``tool_search`` unlocks it."""
        ...

    def is_concurrency_safe(self, arguments: Any) -> bool:
        """Whether this call may run beside other concurrency-safe calls."""
        ...

    def runs_process(self, arguments: Arguments) -> bool:
        """Whether the call runs a process or keeps files of its own (it then gets a call folder)."""
        ...

    def background(self, arguments: Arguments) -> bool:
        """Whether the call starts a background task (numbered when the call starts)."""
        ...

    def offer(self) -> ToolOffer:
        """What ``session_started`` journals of it."""
        ...

    def delivery_problems(self, arguments: Arguments) -> list[str]:
        """Valid arguments that still cannot reach the tool, worded for the model."""
        ...

    def prepare(self, context: BuiltinContext, arguments: Arguments) -> PreparedCall:
        """The validated call, ready to be journaled started and run."""
        ...


class Toolbox:
    """The tools of one session by name: the home's folder tools, then the built-ins (MCP tools
    among them). A live view: a built-in added to the engine's registry is in it at once."""

    def __init__(self, tools: ToolSet, builtins: Mapping[str, Builtin]) -> None:
        self.tools = tools
        self._builtins = builtins
        # Adapted once: every request and every call asks for its tools by name, several times.
        self._folder = {name: FolderTool(tool) for name, tool in tools.tools.items()}

    def get(self, name: str) -> ToolEntry | None:
        """The tool called ``name``, disabled or not (None: no such tool)."""
        builtin = self._builtins.get(name)
        if builtin is not None:
            return builtin
        return self._folder.get(name)

    def is_disabled(self, name: str) -> bool:
        """Whether config.json's ``tools.disabled`` names it."""
        return name in self.tools.disabled

    def listed(self) -> list[ToolEntry]:
        """The tools not disabled: the folder tools by name, then the built-ins."""
        entries: list[ToolEntry] = [self._folder[tool.name] for tool in self.tools.offered()]
        return entries + [b for b in self._builtins.values() if b.name not in self.tools.disabled]

    def offers(self) -> list[ToolOffer]:
        """What a session offers the model, as ``session_started`` and ``session_resumed`` journal it."""
        return [entry.offer() for entry in self.listed()]
