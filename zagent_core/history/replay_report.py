"""What a replay found: the steps of a session, recorded and replayed, how they are
compared (:func:`compare`, with :class:`Normaliser` rules for what legitimately differs
between runs), and the reports built from them once a replay ends: :class:`ReplayReport`
for one session's tree, :class:`ReplayResults` for several trees (``zagent replay --all``).
Both are frozen: a report is built whole when its replay ends, never filled in along the way.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

ToolsMode = Literal["recorded", "rerun"]

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
    """One way step ``step`` (from 0) of the replay differs from the recording's."""

    step: int
    field: str
    expected: Any
    actual: Any
    diff: str | None = None

    def describe(self) -> str:
        head = f"step {self.step + 1}, {self.field}: expected {self.expected!r}, got {self.actual!r}"
        return head if self.diff is None else f"step {self.step + 1}, {self.field} differs:\n{self.diff}"


@dataclass(frozen=True)
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

@dataclass(frozen=True)
class ReplayResults:
    """The replays of several sessions' trees, in the order they were replayed (``zagent
    replay --all``); ``matched`` is their verdict: every session of every tree matched."""

    reports: list[ReplayReport]

    @property
    def matched(self) -> bool:
        return all(report.tree_matched for report in self.reports)

    def sessions(self) -> list[ReplayReport]:
        """The report of every session of every tree, each tree's parents first."""
        return [session for report in self.reports for _, session in report.sessions()]

    def to_dict(self) -> dict[str, Any]:
        """The replays as JSON: the verdict, and each tree's :meth:`ReplayReport.to_dict`."""
        return {"matched": self.matched, "replays": [report.to_dict() for report in self.reports]}


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
        else:
            differences += _step_differences(index, expected[index], actual[index], tools, normalise)
    return differences


def _step_differences(index: int, want: Step, got: Step, tools: ToolsMode, normalise: Normaliser) -> list[Difference]:
    """How step ``index``, in both the recording and the replay, differs: another tool says it all."""
    if want.tool != got.tool:
        return [Difference(index, "tool", want.tool, got.tool)]
    differences = []
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

