"""Replay a recorded session and say, step by step, what changed.

The model's replies are served from the recording (:class:`ReplayModel`), so the host
(agent loop, validation, scheduling) is driven exactly as it was. Tools are either
served from the recording too (``recorded``: did the host make the same decisions, the
same tool with the same arguments in the same order?) or really run again in a fresh
workspace (``rerun``: do the tools still give the same results?). Differences that
legitimately change between runs (paths of call folders, times, durations, pids, task
numbers) are normalised away; users add their own rules.

A session with sub-agents is replayed as a tree: its spawn calls are served from the
recording, and each child session is replayed in the call's place, against its own
recording, in the same engine and workspace (:class:`_SessionReplay`).
"""

from __future__ import annotations

import contextlib
import difflib
import os
import re
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from zagent_core.agent.engine import Engine
from zagent_core.agent.loop import Agent
from zagent_core.agent.models import Message, ModelError, ModelReply, ToolCallRequest, ToolSpec, Usage
from zagent_core.config import AgentConfig, Config
from zagent_core.home import Home
from zagent_core.ids import new_session_id, new_wake_id
from zagent_core.journal.events import (
    ArtifactRecorded,
    ChildEnded,
    ChildSpawned,
    Event,
    ModelReplied,
    NoteReceived,
    ParentLink,
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
from zagent_core.journal.protocol import Journal, StoredEvent
from zagent_core.session.engine import Session
from zagent_core.tools.processes import ProcessIdentity, boot_id
from zagent_core.tools.validation import validate_arguments

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

    A report is of one session; the replay of a session is also the replay of its tree, its
    sub-agents' reports are its :attr:`children`, and ``tree_matched`` is the tree's verdict.

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
    #: The session's name under its parent (``child-1``), for a sub-agent replayed in its parent's tree.
    label: str | None = None
    #: How many of its ``spawn`` calls were served from the recording, their children replayed on their own.
    spawns: int = 0
    #: The replays of its sub-agents' sessions, in the order they were first spawned.
    children: list[ReplayReport] = field(default_factory=list)

    @property
    def diverged(self) -> bool:
        """This session's replay differs (its sub-agents' are in :attr:`children`)."""
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
        """This session's: ``matches``, ``DIVERGES`` or ``NOTHING RERUN``."""
        if self.diverged:
            return "DIVERGES"
        return "NOTHING RERUN" if self.nothing_rerun else "matches"

    def sessions(self) -> Iterator[tuple[str, ReplayReport]]:
        """Every session of the replayed tree, parents first, each with its path of labels
        (``""`` for this one, ``child-1``, ``child-1/child-2``...)."""
        yield "", self
        for child in self.children:
            for path, report in child.sessions():
                yield f"{child.label}{'/' + path if path else ''}", report

    @property
    def tree_verdict(self) -> str:
        """The tree's: ``DIVERGES`` if any session of it diverged, else ``NOTHING RERUN`` if
        any ran nothing again, else ``matches`` (every session matched)."""
        verdicts = {report.verdict for _, report in self.sessions()}
        return next(v for v in ("DIVERGES", "NOTHING RERUN", "matches") if v in verdicts)

    @property
    def tree_matched(self) -> bool:
        """Whether every session of the tree (this one and its sub-agents') matched."""
        return self.tree_verdict == "matches"

    def _checked(self) -> str:
        """What the steps' results were checked against, for the report's first line."""
        if self.tools == "recorded":
            return "results served from the recording"
        spawns = (f"{self.spawns} spawn{'s' if self.spawns != 1 else ''} served, "
                  f"{'its sub-agent' if self.spawns == 1 else 'their sub-agents'} replayed below")
        if self.spawns:
            ran = [f"{self.rerun} run again and checked"] if self.rerun else []
            served = [f"{len(self.not_rerun)} served from the recording"] if self.not_rerun else []
            return ", ".join([*ran, *served, spawns])
        if not self.not_rerun:
            return "all run again" if self.rerun else "nothing to run"
        if not self.rerun:
            return f"none run again: {len(self.not_rerun)} served from the recording"
        return f"{self.rerun} run again and checked, {len(self.not_rerun)} served from the recording"

    def _lines(self) -> list[str]:
        """This session's part of the report; its sub-agents' follow, indented under it."""
        name = f"{self.label}: replay of" if self.label else "replay of"
        lines = [f"{name} {self.session_id} (tools {self.tools}): {self.verdict}, "
                 f"{len(self.actual)} of {len(self.expected)} steps ({self._checked()})"]
        if self.error:
            lines.append(f"error: {self.error}")
        lines += [d.describe() for d in self.differences]
        if self.not_rerun:
            lines.append(f"served from the recording (replay: unsafe): {', '.join(self.not_rerun)}")
        if self.nothing_rerun:
            lines.append(NOTHING_RERUN)
        lines += [f"note: {note}" for note in self.notes]
        for child in self.children:
            lines += ["  " + line if line else line
                      for child_line in child._lines() for line in child_line.split("\n")]
        return lines

    def text(self) -> str:
        """The report: this session's verdict and differences, then each sub-agent's under
        it, and for a tree, a last line with the tree's verdict."""
        lines = self._lines()
        if self.children:
            sessions = list(self.sessions())
            failed = [f"{path or self.session_id} {report.verdict}" for path, report in sessions if not report.matched]
            lines.append(f"tree of {len(sessions)} sessions: {self.tree_verdict}"
                         + (f" ({', '.join(failed)})" if failed else ""))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """This session's replay as JSON, its sub-agents' under ``children`` (``matched`` and
        ``verdict`` are this session's; ``tree_matched`` and ``tree_verdict`` its tree's)."""
        return {
            "session_id": self.session_id, "label": self.label, "tools": self.tools, "matched": self.matched,
            "verdict": self.verdict, "tree_matched": self.tree_matched, "tree_verdict": self.tree_verdict,
            "error": self.error, "expected_steps": len(self.expected), "actual_steps": len(self.actual),
            "rerun_steps": self.rerun, "spawn_steps": self.spawns,
            "differences": [d.__dict__ for d in self.differences],
            "not_rerun": self.not_rerun, "replay_session_id": self.replay_session_id, "notes": self.notes,
            "children": [child.to_dict() for child in self.children],
        }

    def assert_matches(self) -> None:
        """For tests: raise AssertionError carrying the report when the replay of any session
        of the tree diverged, or ran no tool again in rerun mode (a test that cannot fail is
        no test)."""
        if not self.tree_matched:
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

    def reply(self, messages: list[Message], tools: list[ToolSpec], *,
              on_text: Callable[[str], None] | None = None) -> ModelReply:
        index = sum(1 for m in messages if m.role == "assistant")
        if index >= len(self.replies):
            raise ModelError(f"the recording has no model reply #{index + 1}: the host asked the model more "
                             f"often than the recorded session did ({len(self.replies)} replies)")
        recorded = self.replies[index]
        return ModelReply(
            text=recorded.text, stop_reason=recorded.stop_reason, model=recorded.model,
            tool_calls=[ToolCallRequest(id=c.id, name=c.name, arguments=c.arguments) for c in recorded.tool_calls],
            usage=Usage(input_tokens=recorded.input_tokens, output_tokens=recorded.output_tokens,
                        cache_read_tokens=recorded.cache_read_tokens,
                        cache_creation_tokens=recorded.cache_creation_tokens),
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
    """Drive session ``session_id`` of ``journal`` again, and its tree: each sub-agent's
    session is replayed too, against its own recording, with the same options; the
    report's :attr:`~ReplayReport.children` say how they did. The replay is journaled
    into ``into``.

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
            return _replay(journal, recorded, home, into, options, folder)
    return _replay(journal, recorded, home, into, options, workdir)


def tree_roots(journal: Journal, session_ids: Iterable[str]) -> list[str]:
    """The sessions of ``session_ids`` that are not replayed as part of another's tree: all
    but the sub-agents whose parent session is in ``journal`` (``replay --all``)."""
    roots = []
    for session_id in session_ids:
        started = next(iter(journal.read(session_id, types=("session_started",))), None)
        parent = started.event.parent if started is not None and isinstance(started.event, SessionStarted) else None
        if parent is None or journal.head(parent.session_id) == 0:
            roots.append(session_id)
    return roots


def _replay_config(config: Config, recorded: list[StoredEvent], replies: int) -> AgentConfig:
    """The user's agent config, with room for the recorded number of requests and the recorded system prompt."""
    prompt = next((e.event.system_prompt for e in recorded
                   if isinstance(e.event, TurnStarted) and e.event.system_prompt is not None), None)
    return AgentConfig.model_validate({**config.agent.model_dump(), "max_turns": max(replies + 1, 1),
                                       **({"system_prompt": prompt} if prompt is not None else {})})


@dataclass(frozen=True)
class _Tree:
    """What the sessions of one replayed tree share, as the live tree did: one engine (so one
    workspace and one journal), the recording they are read from, the options."""

    source: Journal
    engine: Engine
    options: _Options
    #: The recorded workspace, whose paths in recorded effects move to the replay's.
    workspace_then: str | None
    normalise: Normaliser


def _replay(source: Journal, recorded: list[StoredEvent], home: Home, into: Journal, options: _Options,
            workdir: Path) -> ReplayReport:
    tools = options.tools
    started = recorded[0].event
    workspace_then = started.workspace if isinstance(started, SessionStarted) else None
    scratch_home = workdir / "home"
    scratch_home.mkdir(parents=True, exist_ok=True)
    if home.tools_dir.is_dir() and not (scratch_home / "tools").exists():
        (scratch_home / "tools").symlink_to(home.tools_dir, target_is_directory=True)
    source_workspace = options.workspace or (Path(workspace_then) if workspace_then else None)
    workspace, copy_note = _workspace_copy(source_workspace if tools == "rerun" else None,
                                           "given" if options.workspace else "recorded", workdir, home)
    normalise = Normaliser(options.normalisers, workspaces=_workspace_names(workspace_then, options.workspace,
                                                                            workspace))
    with Engine(Home(scratch_home), into, workspace=workspace, config=options.config) as engine:  # stops its MCP servers
        tree = _Tree(source, engine, options, workspace_then, normalise)
        # A sub-agent replayed alone keeps what it was given (its depth, its tools): its parent is not replayed.
        root = _SessionReplay(tree, recorded, parent=started.parent if isinstance(started, SessionStarted) else None)
        report = root.finish()
    if copy_note:
        report.notes.insert(0, copy_note)
    return report


class _SessionReplay:
    """One session of the tree, replayed: started when it is first needed (a sub-agent: at
    its parent's spawn call, with the id the parent journals), played one run at a time (a
    sub-agent given a new task with ``resume`` plays its next run at that spawn call), then
    compared with its recording."""

    def __init__(self, tree: _Tree, recorded: list[StoredEvent], *, parent: ParentLink | None,
                 label: str | None = None, session_id: str | None = None, runs: int = 1) -> None:
        self.tree = tree
        self.recorded = recorded
        self.label = label
        self.error: str | None = None
        options = tree.options
        workspace = tree.engine.workspace
        changed = _changed_since(recorded, tree.workspace_then, workspace) if options.tools == "rerun" else None
        self.notes = [changed] if changed else []
        replies = [e.event for e in recorded if isinstance(e.event, ModelReplied)]
        self.session = tree.engine.start_session(f"replay of {recorded[0].session_id} (tools {options.tools})",
                                                 session_id=session_id, parent=parent)
        self.calls = _Calls(self, _results(recorded), _effects(recorded, tree.workspace_then, workspace))
        self.agent = Agent(self.session, ReplayModel(replies), _replay_config(options.config, recorded, len(replies)),
                           run_call=self.calls.run)
        # A sub-agent's runs begin with the task its parent gave it (a user message); each
        # spawn call plays one, the last one plays the rest.
        starts = [stored.version for stored in recorded if isinstance(stored.event, UserMessage)][1:runs]
        self._bounds = [0, *starts, recorded[-1].version + 1]
        self._played = 0

    def play(self) -> None:
        """Play the next run of the recording (nothing once all are played)."""
        if self._played + 1 >= len(self._bounds):
            return
        first, end = self._bounds[self._played], self._bounds[self._played + 1]
        self._played += 1
        try:
            _drive(self.agent, self.session, [s for s in self.recorded if first <= s.version < end], self.recorded,
                   self.tree.options)
        except ModelError as exc:
            self.error = self.error or str(exc)

    def finish(self) -> ReplayReport:
        """Play what is left, end the replayed session, finish its sub-agents; the report."""
        session = self.session
        try:
            while self._played + 1 < len(self._bounds):
                self.play()
        finally:
            for task in session.state.running_tasks:
                session.kill_task(task.task_id)
            if session.state.status == "open":
                session.end()
        children = self.calls.finish_children()
        options = self.tree.options
        expected = _steps(self.recorded)
        actual = _steps(self.tree.engine.journal.read(session.session_id))
        error = self.error
        recorded_end = next((e.event.reason for e in reversed(self.recorded) if isinstance(e.event, TurnEnded)), None)
        ended = session.state.last_turn_end
        if error is None and ended not in (None, "idle", recorded_end):
            error = f"the replayed turn ended with {ended}, the recorded one with {recorded_end}"
        return ReplayReport(
            session_id=self.recorded[0].session_id, tools=options.tools, expected=expected, actual=actual,
            differences=self.calls.decisions + compare(expected, actual, options.tools, self.tree.normalise),
            not_rerun=self.calls.not_rerun, rerun=self.calls.rerun, error=error,
            replay_session_id=session.session_id, notes=self.notes + self.calls.notes, label=self.label,
            spawns=self.calls.spawns, children=children)


class _Calls:
    """How the replay of one session answers each call: run it again, or serve the recorded
    result (a spawn call: with its sub-agent replayed in its place)."""

    def __init__(self, owner: _SessionReplay, results: dict[str, CallResult], effects: dict[str, list[Effect]]) -> None:
        self.owner = owner
        self.session = owner.session
        self.into = owner.tree.engine.journal
        self.results = results
        self.effects = effects
        self.tools = owner.tree.options.tools
        self.allow_unsafe = owner.tree.options.allow_unsafe
        self.decisions: list[Difference] = []
        #: Calls served from the recording in rerun mode (replay: unsafe, no allow_unsafe).
        self.not_rerun: list[str] = []
        #: How many calls ran again.
        self.rerun = 0
        #: How many spawn calls were served with their sub-agent replayed.
        self.spawns = 0
        self.notes: list[str] = []
        recorded = owner.recorded
        #: The recorded sub-agent runs, by spawn call; and how each ended.
        self.spawned = {s.event.call_id: s.event for s in recorded if isinstance(s.event, ChildSpawned)}
        self.ended = {s.event.call_id: s.event for s in recorded if isinstance(s.event, ChildEnded)}
        #: The sub-agents' replays, and their sessions' ids, by recorded session id, in the order first spawned.
        self.children: dict[str, _SessionReplay] = {}
        self.ids: dict[str, str] = {}
        self._lock = threading.Lock()

    def run(self, call: RepliedCall) -> None:
        if self.tools == "recorded" or self.session.served_in_replay(call.name):
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
        spawned = self.spawned.get(call.call_id)
        if spawned is None:
            self.session.record([requested, *self.effects.get(call.call_id, []), result])
        else:
            self._serve_spawn(requested, spawned, result)

    def _serve_spawn(self, requested: ToolCallRequested, spawned: ChildSpawned, result: CallResult) -> None:
        """Serve a spawn call, its sub-agent replayed in the call's place (its next run)."""
        replayed_id = self._replayed_id(spawned)
        # As the live parent did: child_spawned before the sub-agent's session exists,
        # child_ended with the call's result; both name the replayed session, as the served
        # output does.
        moved: list[Event] = [event.model_copy(update={"child_session_id": replayed_id})
                              for event in (spawned, self.ended.get(requested.call_id)) if event is not None]
        # A resumed child was told its task after its journal's version then: the replayed one's.
        journal = self.session.engine.journal
        told_from = journal.head(replayed_id) if spawned.resumed and replayed_id != spawned.child_session_id else 0
        self.session.record([requested, moved[0].model_copy(update={"from_version": told_from})])
        child = self._child(spawned)
        if child is not None:
            with self._lock:  # spawn calls of one reply are served side by side
                self.spawns += 1
            child.play()
        if isinstance(result, ToolCallFinished):
            result = result.model_copy(update={"output": result.output.replace(spawned.child_session_id, replayed_id)})
        self.session.record([*moved[1:], result])

    def _replayed_id(self, spawned: ChildSpawned) -> str:
        """The id of the replay of the sub-agent a recorded spawn ran: a new one the first
        time; the recorded one when the recording does not hold its session (it is not replayed)."""
        recorded_id = spawned.child_session_id
        with self._lock:
            if recorded_id not in self.ids:
                if self.owner.tree.source.head(recorded_id) == 0:
                    self.notes.append(f"{spawned.label}'s session {recorded_id} is not in the recording (an export "
                                      "holds one session; a crash can come before a child's session starts): its "
                                      "spawn calls were served, the sub-agent was not replayed")
                    self.ids[recorded_id] = recorded_id
                else:
                    self.ids[recorded_id] = new_session_id()
            return self.ids[recorded_id]

    def _child(self, spawned: ChildSpawned) -> _SessionReplay | None:
        """The replay of the sub-agent a recorded spawn ran, started at its first spawn (None:
        not in the recording)."""
        recorded_id = spawned.child_session_id
        with self._lock:
            replayed_id = self.ids[recorded_id]
            if recorded_id not in self.children and replayed_id != recorded_id:
                self.children[recorded_id] = self._start_child(spawned, replayed_id)
            return self.children.get(recorded_id)

    def _start_child(self, spawned: ChildSpawned, replayed_id: str) -> _SessionReplay:
        """The sub-agent's session, replayed with what its parent gave it (its depth, its tools)."""
        recorded = list(self.owner.tree.source.read(spawned.child_session_id))
        started = recorded[0].event
        link = started.parent if isinstance(started, SessionStarted) else None
        if link is None:
            link = ParentLink(session_id="", call_id=spawned.call_id, label=spawned.label, depth=self.session.depth + 1)
        runs = sum(1 for event in self.spawned.values() if event.child_session_id == spawned.child_session_id)
        return _SessionReplay(self.owner.tree, recorded,
                              parent=link.model_copy(update={"session_id": self.session.session_id}),
                              label=spawned.label, session_id=replayed_id, runs=runs)

    def finish_children(self) -> list[ReplayReport]:
        """Each recorded sub-agent's report: those the replay did not spawn (its parent's
        decisions changed) are replayed now, whole, so every session of the tree is checked."""
        for spawned in self.spawned.values():
            self._replayed_id(spawned)
            self._child(spawned)
        return [child.finish() for child in self.children.values()]


def _drive(agent: Agent, session: Session, turns: list[StoredEvent], recorded: list[StoredEvent],
           options: _Options) -> None:
    """Play the recording's turns in ``turns`` (a part of ``recorded``): its user messages,
    and its wake-ups (real ones when tools rerun; re-created from the recording when they
    are served)."""
    by_version = {stored.version: stored.event for stored in recorded}
    budgets = _turn_budgets(recorded)
    last_user: str | None = None
    for stored in turns:
        budget, ended = budgets.get(stored.version, (None, "interrupted"))
        match stored.event:
            case UserMessage(text=text):
                last_user = text
            case TurnStarted(reason="user"):
                agent.turn(last_user, max_requests=budget, stop_reason=ended)
            case TurnStarted(reason="wake" | "resume" as reason) as turn:
                if options.tools == "rerun" and turn.wakes:
                    _wait_for_wakes(session, options.wait)
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
