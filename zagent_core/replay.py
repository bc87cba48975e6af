"""Replay a recorded session and say, step by step, what changed.

The model's replies are served from the recording (:class:`ReplayModel`), so the host
(agent loop, validation, scheduling) is driven exactly as it was. Tools are either
served from the recording too (``recorded``: did the host make the same decisions, the
same tool with the same arguments in the same order?) or really run again in a fresh
workspace (``rerun``: do the tools still give the same results?). Differences that
legitimately change between runs (paths of call folders, times, durations, pids, task
numbers) are normalised away; users add their own rules.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from zagent_core import terminal
from zagent_core.agent import Agent
from zagent_core.config import AgentConfig, Config
from zagent_core.engine import Engine, Session
from zagent_core.events import (
    ModelReplied,
    NoteReceived,
    RepliedCall,
    SessionStarted,
    ToolCallRequested,
    WakeRequested,
)
from zagent_core.home import Home
from zagent_core.ids import new_wake_id
from zagent_core.journal import Journal, StoredEvent
from zagent_core.models import Message, ModelError, ModelReply, ToolCallRequest, ToolSpec, Usage
from zagent_core.validation import validate_arguments

ToolsMode = Literal["recorded", "rerun"]
_RESULT_TYPES = ("tool_call_finished", "tool_call_rejected", "tool_call_interrupted")

#: What legitimately differs between a recording and its replay.
BUILTIN_NORMALISERS: list[tuple[str, str]] = [
    (r"\S*/sessions/[^/\s]+/calls/[^/\s\]\)]+", "<call_dir>"),
    (r"\S*/sessions/[^/\s]+/scratch", "<scratch>"),
    (r"\d{8}-\d{6}-[0-9a-f]{6}", "<session>"),
    (r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?", "<time>"),
    (r"\b\d+(\.\d+)? ?(ms|s)\b", "<duration>"),
    (r"\bpid \d+", "pid <pid>"),
    (r"task #\d+", "task #<n>"),
]


@dataclass(frozen=True)
class Step:
    """One tool call of a session: what was asked, and what came back."""

    tool: str
    arguments: Any
    is_error: bool | None = None
    exit_code: int | None = None
    output: str = ""


@dataclass(frozen=True)
class Difference:
    step: int
    field: str
    expected: Any
    actual: Any
    diff: str | None = None

    def describe(self) -> str:
        head = f"step {self.step + 1}, {self.field}: expected {self.expected!r}, got {self.actual!r}"
        return head if self.diff is None else f"step {self.step + 1}, {self.field} differs:\n{self.diff}"


@dataclass
class ReplayReport:
    """What a replay found. ``matched`` is the verdict; ``differences`` say where and how."""

    session_id: str
    tools: ToolsMode
    expected: list[Step]
    actual: list[Step]
    differences: list[Difference] = field(default_factory=list)
    #: Calls served from the recording in rerun mode (replay: unsafe, no --allow-unsafe).
    not_rerun: list[str] = field(default_factory=list)
    error: str | None = None
    replay_session_id: str | None = None
    #: Things the reader should know that are not differences (an uncopied workspace).
    notes: list[str] = field(default_factory=list)

    @property
    def matched(self) -> bool:
        return not self.differences and self.error is None

    def text(self) -> str:
        verdict = "matches" if self.matched else "DIVERGES"
        lines = [f"replay of {self.session_id} (tools {self.tools}): {verdict}, "
                 f"{len(self.actual)} of {len(self.expected)} steps"]
        if self.error:
            lines.append(f"error: {self.error}")
        lines += [d.describe() for d in self.differences]
        if self.not_rerun:
            lines.append(f"served from the recording (replay: unsafe): {', '.join(self.not_rerun)}")
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id, "tools": self.tools, "matched": self.matched, "error": self.error,
            "expected_steps": len(self.expected), "actual_steps": len(self.actual),
            "differences": [d.__dict__ for d in self.differences], "not_rerun": self.not_rerun,
            "replay_session_id": self.replay_session_id, "notes": self.notes,
        }

    def assert_matches(self) -> None:
        """For tests: raise AssertionError carrying the structured diff when the replay diverged."""
        if not self.matched:
            raise AssertionError(self.text())


class ReplayModel:
    """Serves a recording's model replies: reply *n* answers the request with *n - 1* assistant messages."""

    name = "replay"

    def __init__(self, replies: list[ModelReplied]) -> None:
        self.replies = replies

    def reply(self, messages: list[Message], tools: list[ToolSpec]) -> ModelReply:
        index = sum(1 for m in messages if m.role == "assistant")
        if index >= len(self.replies):
            raise ModelError(f"the recording has no model reply #{index + 1}: the host asked the model more "
                             f"often than the recorded session did ({len(self.replies)} replies)")
        recorded = self.replies[index]
        return ModelReply(
            text=recorded.text, stop_reason=recorded.stop_reason, model=recorded.model,
            tool_calls=[ToolCallRequest(id=c.id, name=c.name, arguments=c.arguments) for c in recorded.tool_calls],
            usage=Usage(input_tokens=recorded.input_tokens, output_tokens=recorded.output_tokens),
        )


def _steps(events: Iterable[StoredEvent]) -> list[Step]:
    events = list(events)
    results = {e.event.call_id: e.event for e in events if e.event.type in _RESULT_TYPES}
    steps = []
    for stored in events:
        if stored.event.type != "model_replied":
            continue
        for call in stored.event.tool_calls:
            result = results.get(call.call_id)
            output = getattr(result, "output", None) or getattr(result, "message", "") or ""
            steps.append(Step(tool=call.name, arguments=call.arguments,
                              is_error=None if result is None else (getattr(result, "is_error", True)),
                              exit_code=getattr(result, "exit_code", None), output=output))
    return steps


class Normaliser:
    """Built-in rules, then the user's ``(regex, replacement)`` ones, plus the two workspaces."""

    def __init__(self, extra: Iterable[tuple[str, str]] = (), workspaces: Iterable[str] = ()) -> None:
        rules = [(re.escape(w), "<workspace>") for w in workspaces if w and w != "/"]
        self.rules = [(re.compile(p), r) for p, r in [*rules, *BUILTIN_NORMALISERS, *extra]]

    def __call__(self, text: str) -> str:
        for pattern, replacement in self.rules:
            text = pattern.sub(replacement, text)
        return text


def compare(expected: list[Step], actual: list[Step], tools: ToolsMode, normalise: Normaliser) -> list[Difference]:
    """Step-by-step differences: always tool and arguments; in rerun mode, results too."""
    differences = []
    for index in range(max(len(expected), len(actual))):
        if index >= len(expected) or index >= len(actual):
            extra = actual[index] if index < len(actual) else expected[index]
            differences.append(Difference(index, "step", None if index >= len(expected) else extra.tool,
                                          None if index >= len(actual) else extra.tool))
            continue
        want, got = expected[index], actual[index]
        if want.tool != got.tool:
            differences.append(Difference(index, "tool", want.tool, got.tool))
            continue
        if want.arguments != got.arguments:
            differences.append(Difference(index, "arguments", want.arguments, got.arguments))
        if tools == "rerun":
            for name in ("is_error", "exit_code"):
                if getattr(want, name) != getattr(got, name):
                    differences.append(Difference(index, name, getattr(want, name), getattr(got, name)))
            old, new = normalise(want.output), normalise(got.output)
            if old != new:
                diff = "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                                    "recorded", "replayed"))
                differences.append(Difference(index, "output", old, new, diff=diff))
    return differences


#: A workspace larger than this is not copied for a rerun (the replay says so).
MAX_WORKSPACE_BYTES = 200 * 1024 * 1024
_SKIP = {".git", ".venv", "venv", "node_modules", "__pycache__"}


def _workspace_copy(recorded: str | None, into: Path) -> tuple[Path, str | None]:
    """A fresh copy of the recorded workspace for a rerun; (path, why it is empty) otherwise."""
    target = into / "workspace"
    target.mkdir(parents=True, exist_ok=True)
    source = Path(recorded).resolve() if recorded else None
    if source is None or not source.is_dir():
        return target, None if source is None else f"the recorded workspace {source} no longer exists"
    if into.resolve().is_relative_to(source) or source == Path("/"):
        return target, f"the recorded workspace {source} holds the replay's own folder; not copied"
    total = 0
    for root, dirs, names in os.walk(source):
        dirs[:] = [d for d in dirs if d not in _SKIP]
        for name in names:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
        if total > MAX_WORKSPACE_BYTES:
            return target, f"the recorded workspace {source} is over {MAX_WORKSPACE_BYTES} bytes; not copied"
    # Links are copied as what they point to (inside the copy): a rerun must never write
    # through a link into the real files.
    shutil.copytree(source, target, symlinks=False, ignore_dangling_symlinks=True, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns(*_SKIP))
    return target, None


def replay(journal: Journal, session_id: str, home: Home, into: Journal, *, tools: ToolsMode = "recorded",
           allow_unsafe: bool = False, normalisers: Iterable[tuple[str, str]] = (),
           config: Config | None = None, workdir: Path | None = None, wait_seconds: float = 60.0) -> ReplayReport:
    """Drive session ``session_id`` of ``journal`` again, journaling the replay into ``into``.

    ``home`` provides the tools (as they are now: that is what a regression test checks).
    ``workdir`` holds the replay's scratch home and, for ``rerun``, the fresh copy of the
    recorded workspace (a temporary folder by default).
    """
    if tools not in ("recorded", "rerun"):
        raise ValueError(f'tools must be "recorded" or "rerun", not {tools!r}')
    recorded = list(journal.read(session_id))
    if not recorded:
        raise LookupError(f'no session "{session_id}" to replay')
    started = recorded[0].event
    workspace_then = started.workspace if isinstance(started, SessionStarted) else None
    expected = _steps(recorded)
    replies = [e.event for e in recorded if e.event.type == "model_replied"]
    results = {e.event.call_id: e.event for e in recorded if e.event.type in _RESULT_TYPES}
    report = ReplayReport(session_id=session_id, tools=tools, expected=expected, actual=[])

    workdir = workdir or Path(tempfile.mkdtemp(prefix="zagent-replay-"))
    scratch_home = workdir / "home"
    scratch_home.mkdir(parents=True, exist_ok=True)
    if home.tools_dir.is_dir() and not (scratch_home / "tools").exists():
        (scratch_home / "tools").symlink_to(home.tools_dir, target_is_directory=True)
    workspace, not_copied = _workspace_copy(workspace_then if tools == "rerun" else None, workdir)
    if not_copied:
        report.notes.append(not_copied)
    config = config or Config()
    recorded_prompt = next((e.event.system_prompt for e in recorded
                            if e.event.type == "turn_started" and e.event.system_prompt is not None), None)
    config = config.model_copy(update={"agent": AgentConfig(**{
        **config.agent.model_dump(), "max_turns": max(len(replies) + 1, 1),
        **({"system_prompt": recorded_prompt} if recorded_prompt is not None else {})})})
    engine = Engine(Home(scratch_home), into, workspace=workspace, config=config)
    session = engine.start_session(origin=f"replay of {session_id} (tools {tools})")
    report.replay_session_id = session.session_id

    decisions: list[Difference] = []

    def serve(call: RepliedCall) -> None:
        """Answer a call with the recorded result, without running anything; but check that
        validation still decides the same (refused then, refused now)."""
        result = results.get(call.call_id)
        tool = session.tools.tools.get(call.name)
        step = sum(1 for e in into.read(session.session_id) if e.event.type == "tool_call_requested")
        unknown_then = result is not None and result.type == "tool_call_rejected" and result.reason == "unknown_tool"
        if tool is None and call.name != terminal.NAME and not unknown_then:
            decisions.append(Difference(step, "tool", f"{call.name} (offered)", f"{call.name} (no such tool now)"))
        ran_then = result is not None and result.type != "tool_call_interrupted"
        if tool is not None and result is not None and ran_then:
            refused_then = result.type == "tool_call_rejected" and result.reason == "invalid_arguments"
            refused_now = not validate_arguments(tool.validator, call.arguments).ok
            if refused_then != refused_now:
                decisions.append(Difference(step, "validation", "refused" if refused_then else "accepted",
                                            "refused" if refused_now else "accepted"))
        requested = ToolCallRequested(call_id=call.call_id, tool=call.name, arguments=call.arguments)
        if result is None:
            from zagent_core.events import ToolCallRejected

            session._append([requested, ToolCallRejected(
                call_id=call.call_id, reason="invalid_arguments",
                message=f"replay: the recording has no result for call {call.call_id}")])
            return
        session._append([requested, result])

    def run_call(call: RepliedCall) -> None:
        tool = session.tools.tools.get(call.name)
        if tools == "recorded":
            serve(call)
        elif tool is not None and tool.manifest.replay == "unsafe" and not allow_unsafe:
            report.not_rerun.append(f"{call.name} ({call.call_id})")
            serve(call)
        else:
            session.call(call.name, call.arguments, call_id=call.call_id)

    agent = Agent(session, ReplayModel(replies), run_call=run_call)
    try:
        _drive(agent, session, recorded, tools, wait_seconds)
    except ModelError as exc:
        report.error = str(exc)
    finally:
        for task in session.state.running_tasks:
            session.kill_task(task.task_id)
        if session.state.status == "open":
            session.end()
    report.actual = _steps(into.read(session.session_id))
    normalise = Normaliser(normalisers, workspaces=[w for w in (workspace_then, str(workspace)) if w])
    report.differences = decisions + compare(expected, report.actual, tools, normalise)
    recorded_end = next((e.event.reason for e in reversed(recorded) if e.event.type == "turn_ended"), None)
    if report.error is None and session.state.last_turn_end not in (None, "idle", recorded_end):
        report.error = f"the replayed turn ended with {session.state.last_turn_end}, the recorded one with {recorded_end}"
    return report


def _drive(agent: Agent, session: Session, recorded: list[StoredEvent], tools: ToolsMode, wait: float) -> None:
    """Play the recording's turns: its user messages, and its wake-ups (real ones when tools
    rerun; re-created from the recording when they are served)."""
    by_version = {stored.version: stored.event for stored in recorded}
    budgets = _turn_budgets(recorded)
    last_user: str | None = None
    for stored in recorded:
        event = stored.event
        budget, ended = budgets.get(stored.version, (None, "interrupted"))
        if event.type == "user_message":
            last_user = event.text
        elif event.type == "turn_started" and event.reason == "user":
            agent.turn(last_user, max_requests=budget, stop_reason=ended)
        elif event.type == "turn_started" and event.reason in ("wake", "resume"):
            if tools == "rerun" and event.wakes:
                deadline = time.monotonic() + wait
                while not session.state.pending_wakes and time.monotonic() < deadline:
                    for task in session.state.running_tasks:
                        session.poll_task(task.task_id)
                    time.sleep(0.05)
            else:
                _recreate_delivery(session, event, by_version)
            agent.turn(None, resumed=event.reason == "resume", max_requests=budget, stop_reason=ended)


def _turn_budgets(recorded: list[StoredEvent]) -> dict[int, tuple[int | None, str]]:
    """For each recorded turn (by its turn_started version): how many model replies it got
    and how it ended. A turn a crash or an error cut short stops there in the replay too;
    one that ended idle is left to end by itself."""
    budgets: dict[int, tuple[int | None, str]] = {}
    current: int | None = None
    replies = 0
    for stored in recorded:
        kind = stored.event.type
        if kind == "turn_started" and stored.event.reason != "delivery":
            if current is not None:  # cut off with no turn_ended (the recording stopped)
                budgets[current] = (replies, "interrupted")
            current, replies = stored.version, 0
        elif kind == "model_replied" and current is not None:
            replies += 1
        elif kind == "turn_ended" and current is not None:
            reason = stored.event.reason
            budgets[current] = (None if reason == "idle" else replies, reason)
            current = None
    if current is not None:
        budgets[current] = (replies, "interrupted")
    return budgets


def _recreate_delivery(session: Session, turn: Any, by_version: dict[int, Any]) -> None:
    """Put what the recorded turn delivered (its notes and wake-ups) in front of the agent again."""
    events: list[Any] = []
    for version in turn.notes:
        note = by_version.get(version)
        if isinstance(note, NoteReceived) and note.call_id in session.state.calls:
            events.append(note)
    for stored in by_version.values():
        if isinstance(stored, WakeRequested) and stored.wake_id in turn.wakes and stored.reason != "note":
            events.append(stored.model_copy(update={"wake_id": new_wake_id()}))
    if events:
        session._append(events)
