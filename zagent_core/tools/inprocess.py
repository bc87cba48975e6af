"""What a built-in tool is, and what the session hands it for one call.

A built-in is data plus one function: its name, description and parameters (JSON
Schema) as the model sees them, whether a call may run beside others, what a resume
does with a call a crash cut off, and ``run(context, arguments) -> ToolResult``. The
engine validates, journals and schedules it like a folder tool and never branches on
its name; everything a built-in needs of the session comes through the
:class:`BuiltinContext`, so no built-in imports the engine.

What a call changes beyond its result (what the model was shown of a file, the tool's
durable state, an artifact) is *staged* on the context and committed in the same
transaction as the result: a crash keeps both or neither, and the projection of the
journal (``read_state``, ``tool_state``) is what the next call, a resume or a replay sees.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from zagent_core.config import CapabilitiesConfig, Config
from zagent_core.journal.events import (
    ArtifactRecorded,
    CallClock,
    ReadEntry,
    ReadStateUpdated,
    ToolOffer,
    ToolStateWritten,
)
from zagent_core.tools.results import ToolResult, checked_state
from zagent_core.tools.text import storable
from zagent_core.version import zagent_version

if TYPE_CHECKING:
    from zagent_core.journal.events import Event
    from zagent_core.journal.views import TaskView
    from zagent_core.tools.invocation import CallContext
    from zagent_core.tools.runner import ProcessOutcome, ProcessSpec

Arguments = dict[str, Any]


class PathRefused(ValueError):
    """A path the call may not touch (outside the workspace when confined); the message is the model's."""


#: The longest name one folder entry may have, in bytes (NAME_MAX of Linux's file systems).
NAME_MAX = 255


def unusable_path(exc: BaseException) -> str | None:
    """What the model is told when a path it gave cannot be used at all, wherever in a built-in the
    file system said so: a name longer than a file system allows, a loop of symbolic links
    (``RuntimeError`` from ``Path.resolve`` before Python 3.13, ``ELOOP`` elsewhere). None: ``exc``
    is something else, a failure of zagent's own."""
    if isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG:
        path = os.fsencode(exc.filename if isinstance(exc.filename, (str, bytes)) else "")
        longest = max(path.split(b"/"), key=len, default=b"")
        shown = os.fsdecode(path[:80]) + ("..." if len(path) > 80 else "")
        if len(longest) > NAME_MAX:
            return (f"the path {shown} has a name of {len(longest)} bytes, longer than the {NAME_MAX} bytes a file "
                    "name may have: use a shorter name")
        return (f"the path {shown} is {len(path)} bytes long, longer than the file system takes: "
                "use a shorter path")
    if isinstance(exc, OSError) and exc.errno == errno.ELOOP or (
            isinstance(exc, RuntimeError) and str(exc).startswith("Symlink loop from ")):
        where = exc.filename if isinstance(exc, OSError) and exc.filename else str(exc).removeprefix(
            "Symlink loop from ").strip("'")
        return (f"the path {where} runs into a loop of symbolic links (links that lead, through each other, back "
                "to themselves), so it names no file: list its folder with list_files to see where the links point")
    return None


class StateValueError(ValueError):
    """A tool-state value that cannot be stored; the message is the tool's."""


class Parked(Exception):  # noqa: N818 - not an error: the call waits, on purpose
    """Raised by :meth:`Host.ask_user` when no one can answer now: the call stays open
    (its question journaled) and the session waits for ``zagent answer``."""


class Host(Protocol):
    """What the session does for a call of any tool: its processes and background tasks, questions.

    :class:`zagent_core.session.host.SessionHost` implements it; a tool never sees the session itself.
    """

    def capabilities(self) -> CapabilitiesConfig:
        """What the model of the session's latest turn can take: which media a result attaches."""
        ...

    def call_context(self, context: BuiltinContext, state_file: Path | None = None) -> CallContext:
        """Where the call's process runs and what it is told (the session's scratch folder made)."""
        ...

    def run_process(self, context: BuiltinContext, spec: ProcessSpec) -> ProcessOutcome:
        """Run the call's process in its sandbox (``spec.sandbox``, and a PID namespace that dies
        with it), journaling its notes as it runs and recording who it is."""
        ...

    def start_task(self, context: BuiltinContext, spec: ProcessSpec) -> ToolResult:
        """Start ``spec`` as the call's background task (its ``task_started`` staged on the context);
        returns what the model is told at once."""
        ...

    def calls_stopped(self) -> bool:
        """Whether the session's running calls are being stopped (Ctrl-C, a client's cancel):
        a built-in that waits on something else than a process looks at it while it waits."""
        ...

    def kept_tasks(self) -> tuple[list[TaskView], int]:
        """The tasks the session keeps at hand (running, then the latest ended), and how many were numbered."""
        ...

    def wait_task(self, task_id: str, timeout: float | None) -> TaskView: ...

    def kill_task(self, task_id: str) -> TaskView: ...

    def answer_wakes(self, task_id: str) -> None: ...

    def run_call_process(self, context: BuiltinContext, argv: list[str], *, timeout: float | None,
                         capture_limit: int) -> ProcessOutcome:
        """Run ``argv`` in the workspace for this call (stdout and stderr merged), killing its
        whole tree at ``timeout``; the whole output goes to the call's ``full_output.txt``.
        ``argv`` is what a model composed: it runs in the sandbox ``config.json`` describes."""
        ...

    def start_call_task(self, context: BuiltinContext, argv: list[str], *, timeout: float | None) -> ToolResult:
        """Start ``argv`` as this call's background task; returns what the model is told at once."""
        ...

    def ask_user(self, context: BuiltinContext, question: str, choices: list[str] | None) -> str:
        """Journal the question, then return the person's answer (asked on a terminal), or
        raise :class:`Parked` when there is no one to ask now."""
        ...

    def spawn(self, context: BuiltinContext, arguments: Arguments) -> ToolResult:
        """Give ``arguments["task"]`` to a child session (or go on with the one this call
        started before a crash), drive it to its end, and return its outcome."""
        ...

    def call_tool(self, context: BuiltinContext, name: str, arguments: Any) -> ToolResult:
        """Run a call of tool ``name`` nested in this call, as any call is run (validated,
        journaled with its ``parent_call_id``, capped, confined), and return its result."""
        ...


class ToolState:
    """One tool's durable key/value state, as one call sees it.

    Reads see the state as it was before the call; writes are staged and committed with
    the call's result (``tool_state_written``), so a crash keeps both or neither.
    """

    def __init__(self, values: Mapping[str, Any]) -> None:
        #: The state as it was before the call.
        self.before = values
        self.staged: dict[str, Any] = {}

    def get(self, key: str, default: Any = None) -> Any:
        if key in self.staged:
            value = self.staged[key]
            return default if value is None else value
        return self.before.get(key, default)

    def set(self, key: str, value: Any) -> None:
        """Stage ``value`` for ``key`` (``None`` removes the key): JSON, at most 64 KiB, and a
        call's writes at most 1 MiB in all (:class:`StateValueError` says what is over)."""
        staged, problems = checked_state({**self.staged, key: value})
        if problems:
            raise StateValueError(problems[0])
        self.staged = staged

    def delete(self, key: str) -> None:
        self.staged[key] = None


def read_state_key(workspace: Path, path: str) -> str:
    """The read-state key of ``path`` as the model wrote it: absolute against the workspace,
    ``.`` and ``..`` folded, symlinks not resolved (the file is the path the model addressed)."""
    return os.path.normpath(os.path.join(workspace, os.path.expanduser(path)))


@dataclass(frozen=True)
class Findable:
    """A deferred tool (config.json's ``tools.disclosure: "lazy"``), as ``tool_search`` finds it."""

    #: Its own name, which ``tools_unlocked`` journals.
    name: str
    #: Its name and description as the model is shown them (``tools.aliases``, ``tools.descriptions``).
    shown_name: str
    description: str
    parameters: dict[str, Any]
    #: Unlocked already: requests send it.
    unlocked: bool


def _nothing_findable() -> list[Findable]:
    return []


@dataclass
class BuiltinContext:
    """One call of a built-in: where it runs, what it may see, and what it stages."""

    session_id: str
    call_id: str
    tool: str
    workspace: Path
    config: Config
    host: Host
    #: What started the session (``run``, ``tools run``, ``api``...), as ``session_started`` says.
    origin: str | None
    #: What the model was shown of each file, as the journal tells it before this call.
    read_state: Mapping[str, ReadEntry]
    state: ToolState
    #: What the call is told of the time and its seed (``ZAGENT_NOW``, ``ZAGENT_CALL_SEED`` of a process).
    clock: CallClock
    #: The call's own folder (``output/``, ``notify``), for a built-in that runs a process.
    call_dir: Path | None = None
    #: The task number this call starts, when it runs in the background.
    task_id: str | None = None
    #: The skills active in the session before this call, by name (the sha256 of their SKILL.md).
    active_skills: Mapping[str, str] = field(default_factory=dict)
    #: The session's deferred tools, asked for when a call needs them (``tool_search``).
    findable: Callable[[], list[Findable]] = _nothing_findable
    #: Staged events, committed with the result.
    staged: list[Event] = field(default_factory=list)
    _read_updates: dict[str, ReadEntry] = field(default_factory=dict)

    def resolve(self, path: str) -> Path:
        """``path`` as the model wrote it, made absolute against the workspace.

        With ``builtins.confine_to_workspace``, a path that resolves (symlinks followed)
        outside the workspace raises :class:`PathRefused`: the early word. What a file built-in
        opens, it opens beneath the workspace (``zagent_core.builtins.beneath``), refused the same
        way whatever changed on disk since.
        """
        if "\x00" in path:
            raise PathRefused(f"the path {path!r} contains a NUL character")
        resolved = Path(read_state_key(self.workspace, path))
        if self.config.builtins.confine_to_workspace:
            real, root = resolved.resolve(), self.workspace.resolve()
            if real != root and root not in real.parents:
                raise self.outside(path)
        return resolved

    def outside(self, path: str) -> PathRefused:
        """The refusal of ``path``, which leads out of the workspace while it is confined."""
        return PathRefused(f"{path} is outside the workspace ({self.workspace.resolve()}), and "
                           "builtins.confine_to_workspace is on in config.json; use a path inside the workspace")

    def seen(self, path: Path) -> ReadEntry | None:
        """What the model was last shown of ``path`` (this call's own updates included)."""
        key = str(path)
        return self._read_updates.get(key) or self.read_state.get(key)

    def remember(self, entry: ReadEntry) -> None:
        """Stage a new read-state entry for ``entry.path``."""
        self._read_updates[entry.path] = entry

    def call_tool(self, name: str, arguments: Any) -> ToolResult:
        """Call tool ``name`` from this call: a nested call, journaled with this call as its parent
        (``limits.nested_call_depth`` says how deep calls nest). Its result is this tool's to use;
        the model sees only what this call returns."""
        return self.host.call_tool(self, name, arguments)

    def record_artifact(self, artifact: ArtifactRecorded) -> None:
        self.staged.append(artifact)

    def effects(self) -> list[Event]:
        """What the call staged, as the events committed with its result."""
        events: list[Event] = list(self.staged)
        if self._read_updates:
            events.append(ReadStateUpdated(call_id=self.call_id, entries=list(self._read_updates.values())))
        if self.state.staged:
            events.append(ToolStateWritten(call_id=self.call_id, tool=self.tool, values=self.state.staged))
        return events


@dataclass(frozen=True)
class PreparedCall:
    """One call of a tool, ready to run: what its ``tool_call_started`` records of it (beyond
    what every call records), and how it runs (see :class:`zagent_core.tools.toolbox.ToolEntry`)."""

    started: dict[str, Any]
    run: Callable[[], ToolResult]
    #: Whether ``before_tool_call_finished`` is passed before its result is journaled (a folder
    #: tool's background start never passed it: its task's start is "after_task_started").
    crash_before_finished: bool = True


def _never(arguments: Arguments) -> bool:
    return False


def object_schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """A tool's parameters: an object of ``properties``, the ``required`` ones, and no other."""
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def always(arguments: Arguments) -> bool:
    """``runs_process`` of a built-in that keeps files of its own in every call's folder."""
    return True


def _everywhere(config: Config, depth: int) -> bool:
    return True


@dataclass(frozen=True, eq=False)
class Builtin:
    """A built-in tool: what the model is offered, and how a call runs."""

    name: str
    description: str
    parameters: dict[str, Any]
    run: Callable[[BuiltinContext, Arguments], ToolResult]
    #: Whether a call may run beside other concurrency-safe calls: a bool, or a function of the arguments.
    concurrency_safe: bool | Callable[[Arguments], bool] = False
    #: What a resume does with a call a crash cut off: ``safe`` runs it again, ``unsafe`` reports it interrupted.
    replay: Literal["safe", "unsafe"] = "unsafe"
    #: Whether a call runs a process or keeps files of its own (it then gets a call folder, with
    #: its ``output/``, that the engine can clean up after a crash).
    runs_process: Callable[[Arguments], bool] = _never
    #: Whether a call starts a background task (numbered when the call starts).
    background: Callable[[Arguments], bool] = _never
    #: A call a crash (or Ctrl-C) cut off stays open and goes on when the session is driven
    #: again, instead of being settled at resume: ``run`` must pick up where it was.
    continues: bool = False
    #: Whether a session at this depth (0: top-level, 1: a sub-agent...) is offered it.
    offered: Callable[[Config, int], bool] = _everywhere
    #: A replay serves its recorded result even with ``--tools rerun``: it asks a person, or
    #: starts a sub-agent (which is replayed on its own).
    served_in_replay: bool = False
    #: What runs a call, when not zagent itself (``mcp:SERVER@VERSION``, an MCP server's tool):
    #: journaled as the offer's and each call's ``identity``.
    source: str | None = None
    #: The version of what runs a call (None: zagent's own), journaled as ``tool_version``.
    version: str | None = None
    #: The sha256 of what defines the tool outside zagent (an MCP tool's input schema), journaled
    #: as the offer's and each call's ``manifest_hash``: a replay or an audit can tell it changed.
    definition_hash: str = ""
    #: Where it comes from, as ``zagent tools list`` and the session's offer say.
    origin: str = "(built-in)"
    #: Lazy disclosure may keep it out of requests until ``tool_search`` unlocks it (an MCP server's tool).
    deferrable: bool = False
    #: It is how the model finds deferred tools (``tool_search``): a request sends it only while some are.
    finds_deferred: bool = False
    #: The JSON Schema of the ``structured`` value of its results (an MCP tool's ``outputSchema``), if any.
    output_schema: dict[str, Any] | None = None

    #: A person decides each call (``ask``): never for a built-in, which asks inside the call if it must.
    permission: Literal["allow", "ask"] = "allow"

    @property
    def identity(self) -> str:
        return self.source or f"builtin:{self.name}"

    @property
    def read_only(self) -> bool:
        """Whether a call only looks (a read-only sub-agent is given it): replay-safe, and safe beside others whatever
        its arguments."""
        return self.replay == "safe" and self.safe_beside_others

    @property
    def safe_beside_others(self) -> bool:
        """Whether every call may run beside others, whatever its arguments (terminal's list and read
        only look, its other actions do not: it is not)."""
        return self.concurrency_safe is True

    def deferred(self, config: Config) -> bool:
        return self.deferrable and config.tools.defers(self.name)

    def shaped(self, description: str, parameters: dict[str, Any]) -> Builtin:
        """The tool with the description and parameters a config gives it (its caps in them)."""
        return dataclasses.replace(self, description=description, parameters=parameters)

    def offer(self) -> ToolOffer:
        return ToolOffer(name=self.name, description=self.description, folder=self.origin,
                         manifest_hash=self.definition_hash, identity=self.identity)

    def delivery_problems(self, arguments: Arguments) -> list[str]:
        """Valid arguments that still cannot reach the tool: none, a built-in takes them as they are."""
        return []

    def prepare(self, context: BuiltinContext, arguments: Arguments) -> PreparedCall:
        call_dir = context.call_dir

        def run() -> ToolResult:
            started = time.monotonic()
            try:
                result = self.run(context, arguments)
            except (OSError, RuntimeError) as exc:
                if (problem := unusable_path(exc)) is None:
                    raise
                result = ToolResult(output=problem, is_error=True)
            # What a built-in says may quote what it found on disk (a file name that is not UTF-8).
            return result.model_copy(update={"output": storable(result.output), "duration_ms": result.duration_ms
                                             or round((time.monotonic() - started) * 1000)})

        return PreparedCall(started={
            "argv": [], "cwd": str(context.workspace), "input_mode": "builtin", "output_mode": "text",
            "output_dir": str(call_dir / "output") if call_dir else None,
            "notify_file": str(call_dir / "notify") if call_dir else None, "timeout_seconds": None,
            "identity": self.identity, "tool_version": self.version or zagent_version(),
            "manifest_hash": self.definition_hash,
        }, run=run)

    @functools.cached_property
    def validator(self) -> Any:
        """The JSON Schema validator of its parameters (built on first use)."""
        from zagent_core.tools.manifest import validator_of

        return validator_of(self.parameters)

    def is_concurrency_safe(self, arguments: Any) -> bool:
        if not isinstance(arguments, dict):
            return False
        if callable(self.concurrency_safe):
            try:
                return bool(self.concurrency_safe(arguments))
            except Exception:  # noqa: BLE001 - arguments not yet validated: run it alone
                return False
        return self.concurrency_safe
