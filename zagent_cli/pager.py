"""Long output for a person: written as it is made, through a pager on a terminal (as git does).

Off a terminal (a pipe, a file, a test) nothing is paged, whatever the environment says.
On one, the pager is ``$ZAGENT_PAGER``, else ``$PAGER``, else ``less``; an empty value or
``cat`` means none. ``less`` gets ``LESS=FRX`` unless ``$LESS`` is set: it quits by itself
when everything fits on one screen (F), passes colours through (R) and leaves the text on
the terminal when it quits (X). Quitting the pager early stops the command, quietly.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import IO

from zagent_cli.output import terminal_safe

#: Lines written at once once the first screen is out (one write per line would cost a system call each).
_BATCH = 512


class PagerClosed(Exception):
    """The person quit the pager (or closed the pipe) before everything was written."""


def pager_command() -> str | None:
    """The pager's command line, or None for no pager."""
    command = os.environ.get("ZAGENT_PAGER", os.environ.get("PAGER", "less")).strip()
    return None if command in ("", "cat") else command


def screen_lines() -> int:
    """The terminal's height (24 where it cannot be told)."""
    try:
        return os.get_terminal_size(sys.stdout.fileno()).lines
    except (OSError, ValueError):
        return 24


class Lines:
    """Where a long output's lines go, made safe as :func:`zagent_cli.output.say` makes them.

    The first screen is written (and flushed) as soon as it is there, the rest in batches,
    so a person sees the start while the rest is still being read.
    """

    def __init__(self, stream: IO[str], first: int) -> None:
        self._stream = stream
        self._pending: list[str] = []
        self._due = first  # lines to gather before the next write

    def say(self, text: str = "") -> None:
        self._pending.append(text)
        if len(self._pending) >= self._due:
            self.flush()
            self._due = _BATCH

    def flush(self) -> None:
        if not self._pending:
            return
        text = terminal_safe("\n".join(self._pending) + "\n")  # made safe a batch at once: one scan
        self._pending.clear()
        try:
            self._stream.write(text)
            self._stream.flush()
        except BrokenPipeError:
            raise PagerClosed from None


@contextlib.contextmanager
def paged_lines(*, page: bool) -> Iterator[Lines]:
    """:class:`Lines` to stdout, or to the pager when ``page`` and stdout is a terminal and a
    pager is set. Quitting the pager (or closing a pipe) early ends the output without an error."""
    command = pager_command() if page and sys.stdout.isatty() else None
    if command is None:
        lines = Lines(sys.stdout, first=screen_lines())
        try:
            yield lines
            lines.flush()
        except PagerClosed:  # `| head`: what stdout still buffers can never be written, so the
            # interpreter's last flush must not fail on it (and print a traceback): it goes nowhere.
            with contextlib.suppress(OSError, ValueError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return
    import subprocess  # only to page

    env = dict(os.environ)
    env.setdefault("LESS", "FRX")
    pager = subprocess.Popen(command, shell=True, stdin=subprocess.PIPE, env=env, text=True,  # noqa: S602 - the user's own $PAGER, as git runs it
                             encoding=sys.stdout.encoding or "utf-8", errors="replace")
    assert pager.stdin is not None
    try:
        lines = Lines(pager.stdin, first=screen_lines())
        with contextlib.suppress(PagerClosed):
            yield lines
            lines.flush()
    finally:
        with contextlib.suppress(BrokenPipeError, OSError):
            pager.stdin.close()
        pager.wait()  # the terminal is the pager's until it quits
