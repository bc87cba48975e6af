"""Transcripts in the docs, run for real: ```text blocks whose ``$ COMMAND`` lines are each
followed by what the command printed.

A page's examples were captured in a private folder shown as ``/tmp/demo`` (``/tmp/demo/home``
the home, ``/tmp/demo/work`` the current folder). :class:`Demo` makes such a folder (under a
name of its own, so tests can run side by side), runs each command of the page, in page order,
with ``/tmp/demo`` replaced, and compares what it printed, shown as ``/tmp/demo`` again, with
what the page shows, by the rules of :func:`test_docs.shown_mismatch`: every line printed is
shown, ``...`` alone stands for lines left out, ids, times, pids and durations aside.

Session ids are learned as the page goes: a line shown with an id that was printed with
another maps the one to the other, and later commands get the id printed.

An HTML comment right before a block says what the page tells the reader in prose, so that
the block can run:

- ``<!-- transcript: not run: REASON -->``: the block is skipped, and the test says why (a
  real API key, a second terminal...).
- ``<!-- transcript: given`` + shell lines + ``-->``: run first (``bash -e``, in the work
  folder, ``/tmp/demo`` and the page's session ids replaced, ``$DEMO`` the demo folder for
  the scripts it runs): the state the prose describes.
  ``remember ID ACTUAL`` there maps a session id of the page to one it made, and ``latest``
  prints the most recently active top-level session's id; ``signal_after SIGNAL TEXT
  COMMAND...`` runs the command until it printed ``TEXT``, then sends it the signal (a
  ``kill -9``; ``TERM`` for a Ctrl-C, which zagent takes alike: a background job of a
  script ignores SIGINT). A block may have several givens.
- ``<!-- transcript: Ctrl-C after LINE -->``: SIGINT goes to the command's process group once
  it printed ``LINE``, as a Ctrl-C at a terminal does.
- ``<!-- transcript: in any order: REASON -->``: the lines each command prints are compared
  as a set (sub-agents that run at once journal their steps in either order).
- ``<!-- transcript: file PATH -->`` before any fenced block: its body is written to ``PATH``
  when the page gets there (a model script the page shows, for instance).
"""

from __future__ import annotations

import contextlib
import difflib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from test_docs import FENCE, _clean_env, _normalize, shown_mismatch

SHOWN_ROOT = "/tmp/demo"
SESSION_ID = re.compile(r"\b\d{8}-\d{6}-[0-9a-f]{6}\b")
_DIRECTIVE = re.compile(r"<!-- transcript: ?((?:(?!<!--).)*?)-->\s*\Z", re.S)
#: Shell functions a ``given`` may use.
_GIVEN_PRELUDE = """
DEMO=/tmp/demo
remember() { echo "@@remember $1 $2"; }
signal_after() {
  local signal=$1 text=$2 out; shift 2; out=$(mktemp)
  "$@" > "$out" 2>&1 &
  until grep -qF -- "$text" "$out"; do
    kill -0 $! 2> /dev/null || { echo "it ended before it printed $text:"; cat "$out"; return 1; }
    sleep 0.1
  done
  kill "-$signal" $!; wait $! || true
}
latest() {
  zagent --home /tmp/demo/home sessions list --json --limit 1 |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["sessions"][0]["session_id"])'
}
"""


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


@dataclass(frozen=True)
class Step:
    command: str
    shown: str


@dataclass(frozen=True)
class Block:
    """A fenced block of a page, with the directives of the comments right before it."""

    line: int
    language: str
    body: str
    directives: tuple[str, ...]

    @property
    def steps(self) -> list[Step]:
        """The ``$ COMMAND`` lines of a transcript, each with the lines shown after it."""
        steps: list[Step] = []
        for line in self.body.splitlines(keepends=True):
            if line.startswith("$ "):
                steps.append(Step(line[2:].rstrip("\n"), ""))
            elif steps:
                steps[-1] = Step(steps[-1].command, steps[-1].shown + line)
        return steps

    def directives_named(self, name: str) -> list[str]:
        """What follows ``name`` in each directive of this block of that name."""
        return [d[len(name):].strip() for d in self.directives if d.startswith(name)]

    def directive(self, name: str) -> str | None:
        """What follows ``name`` in the first directive of that name, if any."""
        return next(iter(self.directives_named(name)), None)

    @property
    def transcript(self) -> bool:
        """A ```text block that starts with a ``$ `` line."""
        return self.language == "text" and self.body.startswith("$ ")


def blocks(page: Path) -> list[Block]:
    """Every fenced block of a page (any number of backticks), with its directives."""
    text = page.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        before, directives = text[:match.start()], []
        while (comment := _DIRECTIVE.search(before)) is not None:
            directives.insert(0, comment.group(1).strip())
            before = before[:comment.start()]
        found.append(Block(text.count("\n", 0, match.start()) + 1, match.group(2), match.group(3),
                           tuple(directives)))
    return found


@dataclass
class Demo:
    """The folder a page's transcripts run in, and what was learned running them."""

    root: Path
    env: dict[str, str]
    normalize: Callable[[str], str] = lambda text: text
    ids: dict[str, str] = field(default_factory=dict)

    @classmethod
    def make(cls, tmp: Path, normalize: Callable[[str], str] = lambda text: text) -> Demo:
        # Short, so that lines zagent shortens are cut about where the page's were.
        root = Path(tempfile.mkdtemp(prefix="zd", dir="/tmp"))
        (root / "work").mkdir()
        return cls(root, _clean_env(tmp), normalize)

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def real(self, text: str) -> str:
        """``text`` of the page as it must run here: the demo folder and the ids learned."""
        return SESSION_ID.sub(lambda m: self.ids.get(m.group(0), m.group(0)), text.replace(SHOWN_ROOT, str(self.root)))

    def unknown_ids(self, command: str) -> list[str]:
        return [found for found in SESSION_ID.findall(command) if found not in self.ids]

    def shell(self, script: str, *, interrupt_after: str | None = None) -> str:
        """What ``bash -c script`` prints (stdout and stderr, in order), in the work folder."""
        proc = subprocess.Popen(["bash", "-c", script], cwd=self.root / "work", env=self.env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        assert proc.stdout is not None
        watchdog = threading.Timer(300, _kill_group, (proc.pid,))
        watchdog.start()
        printed = []
        try:
            for line in proc.stdout:
                printed.append(line)
                if interrupt_after is not None and self.shown(line).strip() == interrupt_after:
                    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the foreground group
                    interrupt_after = None
            proc.wait()
        finally:
            watchdog.cancel()
        return "".join(printed)

    def shown(self, printed: str) -> str:
        """What was printed, as the page would show it."""
        return printed.replace(str(self.root), SHOWN_ROOT)

    def given(self, script: str) -> None:
        """Run a ``given``; its ``remember`` lines map ids of the page to ids made here."""
        printed = self.shell(self.real("set -e\n" + _GIVEN_PRELUDE + script + "\necho '@@given done'\n"))
        assert "@@given done" in printed, f"the given failed:\n{script}\nit printed:\n{self.shown(printed)}"
        for shown_id, real_id in re.findall(r"^@@remember (\S+) (\S+)$", printed, re.M):
            self.ids[shown_id] = real_id

    def learn(self, shown: str, printed: str) -> None:
        """Map the ids of the lines shown to those of the same lines printed (the latest
        session a page shows with an id is the one it names with it from then on)."""
        def lines(text: str) -> list[str]:
            return [line for line in text.splitlines() if line.strip()]

        def key(line: str) -> str:
            return _normalize(self.normalize(line))

        wanted, actual = lines(shown), lines(self.shown(printed))
        matcher = difflib.SequenceMatcher(None, [key(line) for line in wanted], [key(line) for line in actual],
                                          autojunk=False)
        for a, b, size in matcher.get_matching_blocks():
            for offset in range(size):
                self.ids.update(zip(SESSION_ID.findall(wanted[a + offset]), SESSION_ID.findall(actual[b + offset])))

    def check(self, block: Block) -> Iterator[str]:
        """Run a transcript block; yields what is wrong with it."""
        for given in block.directives_named("given"):
            self.given(given)
        interrupt = block.directive("Ctrl-C after")
        compared = self._sorted if block.directive("in any order:") else self.normalize
        for step in block.steps:
            unknown = self.unknown_ids(step.command)
            if unknown:
                yield (f"line {block.line}: $ {step.command}\nnames session {', '.join(unknown)}, which nothing "
                       "before it printed (a given can `remember` it)")
                return
            printed = self.shell(self.real(step.command), interrupt_after=interrupt)
            mismatch = shown_mismatch(compared(step.shown), compared(self.shown(printed)))
            if mismatch is not None:
                yield (f"line {block.line}: $ {step.command}\nshows another output than it prints:\n{mismatch}\n"
                       f"it printed:\n{self.shown(printed)}")
            self.learn(step.shown, printed)

    def _sorted(self, text: str) -> str:
        return "\n".join(sorted(_normalize(line) for line in self.normalize(text).splitlines()))

    def write_file(self, block: Block) -> None:
        target = Path(self.real(block.directive("file") or ""))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(block.body, encoding="utf-8")


@dataclass
class Outcome:
    checked: int = 0
    skipped: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def run_page(page: Path, demo: Demo) -> Outcome:
    """Run every transcript of ``page`` in order (and write its ``file`` blocks), in ``demo``."""
    outcome = Outcome()
    for block in blocks(page):
        if block.directive("file"):
            demo.write_file(block)
        if not block.transcript:
            continue
        reason = block.directive("not run:")
        if reason:
            outcome.skipped.append(f"line {block.line}: {reason}")
            continue
        problems = list(demo.check(block))
        outcome.checked += 1
        outcome.problems += problems
    return outcome
