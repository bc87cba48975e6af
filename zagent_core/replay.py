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
import stat
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from zagent_core.agent import Agent
from zagent_core.config import AgentConfig, Config
from zagent_core.engine import Engine, Session
from zagent_core.events import (
    ArtifactRecorded,
    Event,
    ModelReplied,
    NoteReceived,
    ReadStateUpdated,
    RepliedCall,
    SessionStarted,
    ToolCallFinished,
    ToolCallInterrupted,
    ToolCallRejected,
    ToolCallRequested,
    ToolStateWritten,
    TurnEnded,
    TurnStarted,
    UserMessage,
    WakeRequested,
)
from zagent_core.home import Home
from zagent_core.ids import new_wake_id
from zagent_core.journal import Journal, StoredEvent
from zagent_core.models import Message, ModelError, ModelReply, ToolCallRequest, ToolSpec, Usage
from zagent_core.processes import ProcessIdentity, boot_id
from zagent_core.validation import validate_arguments

ToolsMode = Literal["recorded", "rerun"]
#: What answers a call in a recording.
CallResult = ToolCallFinished | ToolCallRejected | ToolCallInterrupted

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
    """What a replay found. ``matched`` is the verdict; ``differences`` say where and how.

    A replay says it matches only of what it checked: with ``tools="rerun"``, a replay
    whose calls were all served from the recording (their tools are ``replay: unsafe``)
    ran nothing again, and is not ``matched`` (``nothing_rerun``), though nothing differs.
    """

    session_id: str
    tools: ToolsMode
    expected: list[Step]
    actual: list[Step]
    differences: list[Difference] = field(default_factory=list)
    #: Calls served from the recording in rerun mode (replay: unsafe, no --allow-unsafe).
    not_rerun: list[str] = field(default_factory=list)
    #: How many calls really ran again (rerun mode; 0 in recorded mode).
    rerun: int = 0
    error: str | None = None
    replay_session_id: str | None = None
    #: Things the reader should know that are not differences (an uncopied workspace).
    notes: list[str] = field(default_factory=list)

    @property
    def diverged(self) -> bool:
        return bool(self.differences) or self.error is not None

    @property
    def nothing_rerun(self) -> bool:
        """Rerun mode, calls to check, and none ran again: the replay tested no tool."""
        return self.tools == "rerun" and self.rerun == 0 and bool(self.not_rerun)

    @property
    def matched(self) -> bool:
        return not self.diverged and not self.nothing_rerun

    @property
    def verdict(self) -> str:
        """``matches``, ``DIVERGES`` or ``NOTHING RERUN``."""
        if self.diverged:
            return "DIVERGES"
        return "NOTHING RERUN" if self.nothing_rerun else "matches"

    def _checked(self) -> str:
        """What the steps' results were checked against, for the report's first line."""
        if self.tools == "recorded":
            return "results served from the recording"
        if not self.not_rerun:
            return "all run again" if self.rerun else "nothing to run"
        if not self.rerun:
            return f"none run again: {len(self.not_rerun)} served from the recording"
        return f"{self.rerun} run again and checked, {len(self.not_rerun)} served from the recording"

    def text(self) -> str:
        lines = [f"replay of {self.session_id} (tools {self.tools}): {self.verdict}, "
                 f"{len(self.actual)} of {len(self.expected)} steps ({self._checked()})"]
        if self.error:
            lines.append(f"error: {self.error}")
        lines += [d.describe() for d in self.differences]
        if self.not_rerun:
            lines.append(f"served from the recording (replay: unsafe): {', '.join(self.not_rerun)}")
        if self.nothing_rerun:
            lines.append(NOTHING_RERUN)
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id, "tools": self.tools, "matched": self.matched, "verdict": self.verdict,
            "error": self.error, "expected_steps": len(self.expected), "actual_steps": len(self.actual),
            "rerun_steps": self.rerun, "differences": [d.__dict__ for d in self.differences],
            "not_rerun": self.not_rerun, "replay_session_id": self.replay_session_id, "notes": self.notes,
        }

    def assert_matches(self) -> None:
        """For tests: raise AssertionError carrying the report when the replay diverged, or
        ran no tool again in rerun mode (a test that cannot fail is no test)."""
        if not self.matched:
            raise AssertionError(self.text())


#: What a replay that ran nothing again tells its reader to do.
NOTHING_RERUN = ("nothing ran again, so no tool was tested: their manifests say \"replay\": \"unsafe\" (the "
                 "default). Rerun them anyway with --allow-unsafe (pytest: zagent_replay_allow_unsafe = true), "
                 "mark the tools \"replay\": \"safe\", or replay with --tools recorded to check only the "
                 "host's decisions")


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


def _results(events: Iterable[StoredEvent]) -> dict[str, CallResult]:
    """Each call's result, by call id."""
    return {stored.event.call_id: stored.event for stored in events
            if isinstance(stored.event, (ToolCallFinished, ToolCallRejected, ToolCallInterrupted))}


#: What a call changes besides its result: served with the result, so a replay knows what the live session knew.
Effect = ReadStateUpdated | ToolStateWritten | ArtifactRecorded


def _effects(events: Iterable[StoredEvent], workspace_then: str | None, workspace: Path) -> dict[str, list[Effect]]:
    """Each call's staged effects, by call id; read-state paths moved from the recorded
    workspace to the replay's, so the read-before-edit gate finds them there."""
    effects: dict[str, list[Effect]] = {}
    for stored in events:
        event = stored.event
        if isinstance(event, ReadStateUpdated) and workspace_then:
            event = event.model_copy(update={"entries": [
                entry.model_copy(update={"path": _moved(entry.path, workspace_then, workspace)})
                for entry in event.entries]})
        if isinstance(event, (ReadStateUpdated, ToolStateWritten, ArtifactRecorded)):
            effects.setdefault(event.call_id, []).append(event)
    return effects


def _changed_since(events: Iterable[StoredEvent], workspace_then: str | None, workspace: Path) -> str | None:
    """A note naming the files of the workspace copy that are not what the recording first
    read: a rerun from them reads something else, and diverges for that reason alone."""
    from zagent_core.builtins.files import content_hash

    first: dict[str, str | None] = {}  # path -> hash first read (None: the session wrote it first)
    for stored in events:
        if isinstance(stored.event, ReadStateUpdated):
            for entry in stored.event.entries:
                first.setdefault(entry.path, None if entry.elided else entry.hash)
    changed = []
    for path, digest in first.items():
        now = Path(_moved(path, workspace_then, workspace)) if workspace_then else None
        if digest is None or now is None or not now.is_relative_to(workspace):
            continue  # written before it was read, or outside the workspace: the copy says nothing of it
        try:
            same = content_hash(now.read_bytes()) == digest
        except OSError:
            same = False
        if not same:
            changed.append(str(now.relative_to(workspace)))
    if not changed:
        return None
    return (f"{len(changed)} file(s) of the workspace are not what the recording first read "
            f"({', '.join(changed[:5])}{', ...' if len(changed) > 5 else ''}): the rerun starts from the workspace "
            "as it is now; give a checkout of its state when the session began with --workspace DIR")


def _moved(path: str, then: str, now: Path) -> str:
    relative = os.path.relpath(path, then)
    return path if relative == ".." or relative.startswith("../") else os.path.normpath(os.path.join(now, relative))


def _steps(events: Iterable[StoredEvent]) -> list[Step]:
    events = list(events)
    results = _results(events)
    steps = []
    for stored in events:
        if not isinstance(stored.event, ModelReplied):
            continue
        for call in stored.event.tool_calls:
            step = Step(tool=call.name, arguments=call.arguments)
            match results.get(call.call_id):
                case ToolCallFinished() as result:
                    step = Step(call.name, call.arguments, result.is_error, result.exit_code, result.output)
                case ToolCallRejected(message=message) | ToolCallInterrupted(message=message):
                    step = Step(call.name, call.arguments, True, None, message)
            steps.append(step)
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
                differences.append(Difference(index, "output", old, new, diff=output_diff(old, new)))
    return differences


_NO_NEWLINE = "\\ No newline at end of file"


def _diff_lines(text: str) -> list[str]:
    """``text`` as lines for a diff: split at newlines only (a tool's ``\\r`` or form feed
    stays in its line), the last one marked when the text does not end with a newline."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    else:
        lines[-1] += "\n" + _NO_NEWLINE
    return lines


def output_diff(old: str, new: str) -> str:
    """A unified diff of two outputs, one line per line, as ``diff -u`` prints it: an output
    without a final newline gets ``\\ No newline at end of file`` rather than being glued
    to the next line of the diff."""
    return "\n".join(difflib.unified_diff(_diff_lines(old), _diff_lines(new), "recorded", "replayed",
                                           lineterm=""))


#: A workspace larger than this is not copied for a rerun (the replay says so).
MAX_WORKSPACE_BYTES = 200 * 1024 * 1024
_SKIP = {".git", ".venv", "venv", "node_modules", "__pycache__"}
#: How many of the things a copy left out the report names.
_NAMED_SKIPS = 10


class _TooLarge(Exception):
    pass


class _WorkspaceCopy:
    """A copy of a workspace for a rerun, that reads nothing outside it and writes nothing
    through it: folders and regular files are copied (with their modes and times), a link
    is copied as a link when it leads to something inside the workspace (and then leads
    to the same thing inside the copy), and everything else is left out with the reason.
    The size counted is that of what is copied, so no link can smuggle ``/usr`` in.
    """

    def __init__(self, source: Path, excluded: set[Path]) -> None:
        self.source = source
        self.excluded = excluded
        self.folders: list[Path] = []
        self.files: list[Path] = []
        self.links: list[tuple[Path, str]] = []
        self.left_out: list[str] = []

    def plan(self) -> None:
        """Walk the workspace, never following a link; raises _TooLarge."""
        size = 0
        pending = [Path()]
        while pending:
            folder = pending.pop()
            try:
                entries = sorted(os.scandir(self.source / folder), key=lambda entry: entry.name)
            except OSError as exc:
                self.left_out.append(f"{folder} ({exc.strerror})")
                continue
            for entry in entries:
                relative = folder / entry.name
                if entry.is_symlink():
                    self._plan_link(relative)
                elif entry.is_dir(follow_symlinks=False):
                    if entry.name not in _SKIP and self.source / relative not in self.excluded:
                        self.folders.append(relative)
                        pending.append(relative)
                elif entry.is_file(follow_symlinks=False):
                    with contextlib.suppress(OSError):
                        size += entry.stat(follow_symlinks=False).st_size
                    if size > MAX_WORKSPACE_BYTES:
                        raise _TooLarge
                    self.files.append(relative)
                else:
                    self.left_out.append(f"{relative} (not a file, folder or link: a FIFO, socket or device)")

    def _plan_link(self, relative: Path) -> None:
        link = self.source / relative
        leads_to = Path(os.path.realpath(link))
        if leads_to.is_relative_to(self.source):
            # Relative to the link's real folder, through real folders only: the same
            # place in the copy.
            self.links.append((relative, os.path.relpath(leads_to, link.parent)))
        else:
            with contextlib.suppress(OSError):
                leads_to = Path(os.readlink(link))
            self.left_out.append(f"{relative} (a link to {leads_to}, outside the workspace)")

    def make(self, target: Path) -> None:
        """Copy what the plan holds into ``target``; raises _TooLarge if files grew past the limit."""
        for folder in self.folders:  # parents come before their children
            (target / folder).mkdir()
        room = MAX_WORKSPACE_BYTES
        for relative in self.files:
            try:
                room -= _copy_file(self.source / relative, target / relative, room)
            except _NotRegular:
                self.left_out.append(f"{relative} (no longer a regular file)")
            except OSError as exc:
                self.left_out.append(f"{relative} ({exc.strerror})")
        for relative, leads_to in self.links:
            os.symlink(leads_to, target / relative)
        for folder in reversed(self.folders):  # children first: a read-only folder is filled already
            with contextlib.suppress(OSError):
                shutil.copystat(self.source / folder, target / folder, follow_symlinks=False)

    def note(self) -> str | None:
        if not self.left_out:
            return None
        named = ", ".join(self.left_out[:_NAMED_SKIPS])
        more = len(self.left_out) - _NAMED_SKIPS
        return (f"left out of the copy of the workspace {self.source}: {named}"
                + (f" and {more} more" if more > 0 else ""))


class _NotRegular(OSError):
    pass


def _copy_file(source: Path, target: Path, room: int) -> int:
    """Copy one regular file (never through a link, never blocking on a FIFO put in its
    place); returns its size. Raises _TooLarge past ``room`` bytes."""
    descriptor = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with open(descriptor, "rb") as reader:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise _NotRegular
        copied = 0
        with open(target, "xb") as writer:
            while chunk := reader.read(1 << 20):
                copied += len(chunk)
                if copied > room:
                    raise _TooLarge
                writer.write(chunk)
    shutil.copystat(source, target, follow_symlinks=False)
    return copied


def _workspace_copy(source: Path | None, which: str, into: Path, home: Home) -> tuple[Path, str | None]:
    """A fresh copy of the workspace ``source`` for a rerun (``which``: ``recorded`` or
    ``given``), and what the report should say about it (what was left out, or why
    nothing was copied)."""
    target = into / "workspace"
    target.mkdir(parents=True, exist_ok=True)
    if source is None:
        return target, None
    source = source.resolve()
    if not source.is_dir():
        return target, (f"the {which} workspace {source} does not exist (any more); nothing was copied: give the "
                        "folder to copy with --workspace DIR (pytest: the zagent_workspace ini option)")
    if source == Path("/"):
        return target, f"the {which} workspace is /; not copied"
    # zagent's own folders are not the workspace's content, even when they are in it.
    copy = _WorkspaceCopy(source, excluded={home.root, into.resolve()})
    try:
        copy.plan()
        copy.make(target)
    except _TooLarge:
        _remove(target)
        target.mkdir()
        return target, f"the {which} workspace {source} is over {MAX_WORKSPACE_BYTES} bytes; not copied"
    return target, copy.note()


def _workspace_names(*paths: str | Path | None) -> list[str]:
    """Every spelling of the workspaces a path in an output may use (as given, and with its
    links resolved), longest first: a workspace inside another is replaced whole."""
    names = {str(path) for path in paths if path} | {os.path.realpath(path) for path in paths if path}
    return sorted(names, key=len, reverse=True)


# -- the replay's own folder ------------------------------------------------------------------


@contextlib.contextmanager
def replay_folder(home: Home) -> Iterator[Path]:
    """A new folder ``<home>/tmp/replay-PID-TICKS-XXXX`` for one replay, removed when done.

    A replay that was killed cannot remove its folder: the next one does, for every
    folder whose process (pid and start time in its name) is gone.
    """
    home.tmp_dir.mkdir(parents=True, exist_ok=True)
    for folder in home.tmp_dir.glob("replay-*"):
        if not _owner_alive(folder.name):
            _remove(folder)
    me = ProcessIdentity.of(os.getpid())
    path = Path(tempfile.mkdtemp(prefix=f"replay-{os.getpid()}-{me.start_ticks if me else 0}-", dir=home.tmp_dir))
    try:
        yield path
    finally:
        _remove(path)


def _owner_alive(name: str) -> bool:
    """Whether the replay that named its folder ``name`` still runs (unknown names: yes)."""
    try:
        _, pid, ticks, _ = name.split("-", 3)
        owner = ProcessIdentity(pid=int(pid), start_ticks=int(ticks), boot_id=boot_id())
    except ValueError:
        return True  # not a replay's folder: leave it
    if ProcessIdentity.of(os.getpid()) is None:  # no /proc: the pid is all there is
        try:
            os.kill(owner.pid, 0)
        except ProcessLookupError:
            return False
        except OSError:
            return True
        return True
    return owner.alive()


def _remove(path: Path) -> None:
    """Remove a folder a rerun's tools may have made read-only in places."""
    for folder, _, _ in os.walk(path):
        with contextlib.suppress(OSError):
            os.chmod(folder, 0o700)
    shutil.rmtree(path, ignore_errors=True)


# -- replay ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Options:
    tools: ToolsMode
    allow_unsafe: bool
    normalisers: tuple[tuple[str, str], ...]
    config: Config
    #: The folder to copy for a rerun, instead of the recorded workspace.
    workspace: Path | None
    wait: float


def replay(journal: Journal, session_id: str, home: Home, into: Journal, *, tools: ToolsMode = "recorded",
           allow_unsafe: bool = False, normalisers: Iterable[tuple[str, str]] = (),
           config: Config | None = None, workdir: Path | None = None, workspace: str | Path | None = None,
           wait_seconds: float = 60.0) -> ReplayReport:
    """Drive session ``session_id`` of ``journal`` again, journaling the replay into ``into``.

    ``home`` provides the tools (as they are now: that is what a regression test checks).
    ``workdir`` holds the replay's scratch home and, for ``rerun``, the fresh copy of the
    workspace (by default a :func:`replay_folder` of ``home``, removed after).
    ``workspace`` is the folder that copy is made of, when not the recorded workspace (a
    fixture replayed in another checkout); paths of either in outputs compare equal.
    """
    if tools not in ("recorded", "rerun"):
        raise ValueError(f'tools must be "recorded" or "rerun", not {tools!r}')
    recorded = list(journal.read(session_id))
    if not recorded:
        raise LookupError(f'no session "{session_id}" to replay')
    options = _Options(tools, allow_unsafe, tuple(normalisers), config or Config(),
                       Path(workspace) if workspace is not None else None, wait_seconds)
    if workdir is None:
        with replay_folder(home) as folder:
            return _replay(recorded, home, into, options, folder)
    return _replay(recorded, home, into, options, workdir)


def _replay_config(config: Config, recorded: list[StoredEvent], replies: int) -> Config:
    """The user's config, with room for the recorded number of requests and the recorded system prompt."""
    prompt = next((e.event.system_prompt for e in recorded
                   if isinstance(e.event, TurnStarted) and e.event.system_prompt is not None), None)
    agent = AgentConfig.model_validate({**config.agent.model_dump(), "max_turns": max(replies + 1, 1),
                                        **({"system_prompt": prompt} if prompt is not None else {})})
    return config.model_copy(update={"agent": agent})


def _replay(recorded: list[StoredEvent], home: Home, into: Journal, options: _Options, workdir: Path) -> ReplayReport:
    session_id, tools = recorded[0].session_id, options.tools
    started = recorded[0].event
    workspace_then = started.workspace if isinstance(started, SessionStarted) else None
    expected = _steps(recorded)
    replies = [e.event for e in recorded if isinstance(e.event, ModelReplied)]
    report = ReplayReport(session_id=session_id, tools=tools, expected=expected, actual=[])

    scratch_home = workdir / "home"
    scratch_home.mkdir(parents=True, exist_ok=True)
    if home.tools_dir.is_dir() and not (scratch_home / "tools").exists():
        (scratch_home / "tools").symlink_to(home.tools_dir, target_is_directory=True)
    source = options.workspace or (Path(workspace_then) if workspace_then else None)
    workspace, copy_note = _workspace_copy(source if tools == "rerun" else None,
                                           "given" if options.workspace else "recorded", workdir, home)
    if copy_note:
        report.notes.append(copy_note)
    changed = _changed_since(recorded, workspace_then, workspace) if tools == "rerun" else None
    if changed:
        report.notes.append(changed)
    engine = Engine(Home(scratch_home), into, workspace=workspace,
                    config=_replay_config(options.config, recorded, len(replies)))
    session = engine.start_session(origin=f"replay of {session_id} (tools {tools})")
    report.replay_session_id = session.session_id
    calls = _Calls(session, into, _results(recorded), _effects(recorded, workspace_then, workspace), tools,
                   options.allow_unsafe)
    agent = Agent(session, ReplayModel(replies), run_call=calls.run)
    try:
        _drive(agent, session, recorded, tools, options.wait)
    except ModelError as exc:
        report.error = str(exc)
    finally:
        for task in session.state.running_tasks:
            session.kill_task(task.task_id)
        if session.state.status == "open":
            session.end()
    report.not_rerun = calls.not_rerun
    report.rerun = calls.rerun
    report.actual = _steps(into.read(session.session_id))
    normalise = Normaliser(options.normalisers, workspaces=_workspace_names(workspace_then, options.workspace,
                                                                            workspace))
    report.differences = calls.decisions + compare(expected, report.actual, tools, normalise)
    recorded_end = next((e.event.reason for e in reversed(recorded) if isinstance(e.event, TurnEnded)), None)
    ended = session.state.last_turn_end
    if report.error is None and ended not in (None, "idle", recorded_end):
        report.error = f"the replayed turn ended with {ended}, the recorded one with {recorded_end}"
    return report


class _Calls:
    """How the replay answers each call: run it again, or serve the recorded result."""

    def __init__(self, session: Session, into: Journal, results: dict[str, CallResult],
                 effects: dict[str, list[Effect]], tools: ToolsMode, allow_unsafe: bool) -> None:
        self.session = session
        self.into = into
        self.results = results
        self.effects = effects
        self.tools = tools
        self.allow_unsafe = allow_unsafe
        self.decisions: list[Difference] = []
        #: Calls served from the recording in rerun mode (replay: unsafe, no allow_unsafe).
        self.not_rerun: list[str] = []
        #: How many calls ran again.
        self.rerun = 0

    def run(self, call: RepliedCall) -> None:
        # A person is not asked again: their answer (or decision on an approval) is served.
        if self.tools == "recorded" or call.name == "ask_user" or self.session.needs_approval(call.name):
            self.serve(call)
        elif self.session.replay_policy(call.name) == "unsafe" and not self.allow_unsafe:
            self.not_rerun.append(f"{call.name} ({call.call_id})")
            self.serve(call)
        else:
            self.rerun += 1
            self.session.call(call.name, call.arguments, call_id=call.call_id)

    def serve(self, call: RepliedCall) -> None:
        """Answer a call with the recorded result, without running anything; but check that
        validation still decides the same (refused then, refused now)."""
        result = self.results.get(call.call_id)
        validator = self.session.validator_of(call.name)
        step = sum(1 for e in self.into.read(self.session.session_id) if isinstance(e.event, ToolCallRequested))
        unknown_then = isinstance(result, ToolCallRejected) and result.reason == "unknown_tool"
        if validator is None and not unknown_then:
            self.decisions.append(Difference(step, "tool", f"{call.name} (offered)",
                                             f"{call.name} (no such tool now)"))
        if validator is not None and result is not None and not isinstance(result, ToolCallInterrupted):
            refused_then = isinstance(result, ToolCallRejected) and result.reason == "invalid_arguments"
            refused_now = not validate_arguments(validator, call.arguments).ok
            if refused_then != refused_now:
                self.decisions.append(Difference(step, "validation", "refused" if refused_then else "accepted",
                                                 "refused" if refused_now else "accepted"))
        requested = ToolCallRequested(call_id=call.call_id, tool=call.name, arguments=call.arguments)
        if result is None:
            result = ToolCallRejected(call_id=call.call_id, reason="invalid_arguments",
                                      message=f"replay: the recording has no result for call {call.call_id}")
        self.session.record([requested, *self.effects.get(call.call_id, []), result])


def _drive(agent: Agent, session: Session, recorded: list[StoredEvent], tools: ToolsMode, wait: float) -> None:
    """Play the recording's turns: its user messages, and its wake-ups (real ones when tools
    rerun; re-created from the recording when they are served)."""
    by_version = {stored.version: stored.event for stored in recorded}
    budgets = _turn_budgets(recorded)
    last_user: str | None = None
    for stored in recorded:
        budget, ended = budgets.get(stored.version, (None, "interrupted"))
        match stored.event:
            case UserMessage(text=text):
                last_user = text
            case TurnStarted(reason="user"):
                agent.turn(last_user, max_requests=budget, stop_reason=ended)
            case TurnStarted(reason="wake" | "resume" as reason) as turn:
                if tools == "rerun" and turn.wakes:
                    _wait_for_wakes(session, wait)
                else:
                    _recreate_delivery(session, turn, by_version)
                agent.turn(None, resumed=reason == "resume", max_requests=budget, stop_reason=ended)


def _wait_for_wakes(session: Session, wait: float) -> None:
    """Until the rerun tasks wake the agent (or ``wait`` seconds pass)."""
    deadline = time.monotonic() + wait
    while not session.state.pending_wakes and time.monotonic() < deadline:
        for task in session.state.running_tasks:
            session.poll_task(task.task_id)
        time.sleep(0.05)


def _turn_budgets(recorded: list[StoredEvent]) -> dict[int, tuple[int | None, str]]:
    """For each recorded turn (by its turn_started version): how many model replies it got
    and how it ended. A turn a crash or an error cut short stops there in the replay too;
    one that ended idle is left to end by itself."""
    budgets: dict[int, tuple[int | None, str]] = {}
    current: int | None = None
    replies = 0
    for stored in recorded:
        match stored.event:
            case TurnStarted(reason=reason) if reason != "delivery":
                if current is not None:  # cut off with no turn_ended (the recording stopped)
                    budgets[current] = (replies, "interrupted")
                current, replies = stored.version, 0
            case ModelReplied() if current is not None:
                replies += 1
            case TurnEnded(reason=reason) if current is not None:
                budgets[current] = (None if reason == "idle" else replies, reason)
                current = None
    if current is not None:
        budgets[current] = (replies, "interrupted")
    return budgets


def _recreate_delivery(session: Session, turn: TurnStarted, by_version: dict[int, Event]) -> None:
    """Put what the recorded turn delivered (its notes and wake-ups) in front of the agent again."""
    events: list[Event] = []
    for version in turn.notes:
        note = by_version.get(version)
        if isinstance(note, NoteReceived) and session.has_call(note.call_id):
            events.append(note)
    for event in by_version.values():
        if isinstance(event, WakeRequested) and event.wake_id in turn.wakes and event.reason != "note":
            events.append(event.model_copy(update={"wake_id": new_wake_id()}))
    if events:
        session.record(events)
