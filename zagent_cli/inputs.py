"""What commands read besides their options: a tool call's JSON arguments and a prompt, from argv, a file or stdin."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from zagent_cli.output import head, say

if TYPE_CHECKING:
    from zagent_core.config import LimitsConfig
    from zagent_core.session.typed import Kind


def no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (use a number or null)")


def stdin_text() -> str:
    """All of stdin, as text (bytes that are not UTF-8 become U+FFFD, as argv's do)."""
    return sys.stdin.buffer.read().decode("utf-8", "replace") if sys.stdin else ""


def stdin_piped() -> bool:
    """Whether something was piped or redirected into stdin: a pipe or a file. Not a terminal,
    and not a socket or device a harness left open, which could keep a read waiting forever."""
    import os
    import stat

    stream = sys.stdin
    if stream is None:  # started with descriptor 0 closed
        return False
    try:
        mode = os.fstat(stream.fileno()).st_mode
    except (OSError, ValueError):  # no descriptor: an in-memory stream (click's test runner) was given
        return not stream.isatty()
    return stat.S_ISFIFO(mode) or stat.S_ISREG(mode)


def arguments_text(args_text: str | None) -> tuple[str, str]:
    """``--args`` as curl's ``-d`` takes data: ``@FILE`` reads a file, ``@-`` stdin; without
    ``--args``, a pipe into stdin is the arguments (a terminal or nothing piped: ``{}``).
    Returns the JSON text and where it came from, for the error message."""
    if args_text is None:
        if not stdin_piped():
            return "{}", "--args"
        return stdin_text().strip() or "{}", "the arguments on stdin"
    if not args_text.startswith("@"):
        return args_text, "--args"
    if args_text == "@-":
        return stdin_text(), "the arguments on stdin"
    try:
        return Path(args_text[1:]).read_bytes().decode("utf-8", "replace"), f"--args {args_text}"
    except OSError as exc:
        raise click.UsageError(f"--args {args_text}: cannot read {args_text[1:]}: {exc.strerror or exc}; "
                               "@FILE names a file holding one JSON object") from None


def arguments_object(args_text: str | None) -> dict[str, Any]:
    """The call's arguments (see :func:`arguments_text`): one JSON object, its strings storable."""
    from zagent_core.tools.text import storable_json

    text, source = arguments_text(args_text)
    try:
        arguments = json.loads(text, parse_constant=no_constant)
    except (ValueError, RecursionError) as exc:
        raise click.UsageError(f"{source} is not valid JSON: {exc}; give one object, e.g. --args '{{\"text\": \"hi\"}}'")
    if not isinstance(arguments, dict):
        raise click.UsageError(f"{source} must be a JSON object like '{{\"text\": \"hi\"}}', not {head(text, 60)!r}")
    return storable_json(arguments)  # type: ignore[no-any-return]


#: How long a PROMPT given on the command line waits for a pipe on stdin to send its first byte
#: (or to close) before the command goes on without it, as ``claude -p`` does: a harness may
#: leave stdin a pipe nobody writes to, which would otherwise hang the command for good.
PIPE_WAIT_SECONDS = 3.0


def _bounded_stdin(kind: Kind, limits: LimitsConfig, before: int = 0) -> str:
    """All of stdin, as text, read no further than its cap allows (``before``: the bytes of the
    message it joins): a flood is refused as soon as it is over, not held in memory whole."""
    from zagent_core.session.typed import cap_of, too_large

    room = max(cap_of(kind, limits) - before, 0)
    left = _left_in_file()
    data = sys.stdin.buffer.read(room + 1) if sys.stdin else b""
    if len(data) > room:  # the same words as the session's own refusal, and a usage error as that is
        raise click.UsageError(str(too_large(kind, limits, None if left is None else before + left)))
    return data.decode("utf-8", "replace")


def _left_in_file() -> int | None:
    """The bytes stdin has left when it is a regular file (its size is known unread); None for a pipe."""
    import os
    import stat

    try:
        fd = sys.stdin.fileno()
        status = os.fstat(fd)
        return status.st_size - os.lseek(fd, 0, os.SEEK_CUR) if stat.S_ISREG(status.st_mode) else None
    except (AttributeError, OSError, ValueError):  # no stdin, or an in-memory one (click's test runner)
        return None


def _pipe_sends(prompt: str) -> bool:
    """Whether stdin, a pipe or a file, has something to read (or its end) now or within
    :data:`PIPE_WAIT_SECONDS`; a pipe that stays open and silent is left unread, and the person told."""
    import select

    try:
        fd = sys.stdin.fileno()
    except (OSError, ValueError):  # an in-memory stream (click's test runner): read it
        return True
    if select.select([fd], [], [], PIPE_WAIT_SECONDS)[0]:
        return True
    alone = f"with {head(prompt, 40)!r} alone" if prompt else "without it"
    say(f"[stdin is a pipe that sent nothing in {PIPE_WAIT_SECONDS:g} s: going on {alone}; give stdin from "
        "/dev/null to skip the wait, or put the prompt in the pipe and read it all with -]", err=True)
    return False


def prompt_text(prompt: str | None, limits: LimitsConfig, kind: Kind = "message", *,
                piped: bool = True) -> str | None:
    """The text PROMPT stands for: ``-`` is all of stdin (as llm and most Unix tools read it).
    Otherwise, with ``piped``, text piped or redirected into stdin (a pipe or a file, never a
    terminal) joins it, as llm sends them: PROMPT, a blank line, the text (no PROMPT: the text).
    Over its cap in ``limits``, it is refused before it is read whole."""
    if prompt == "-":
        text = _bounded_stdin(kind, limits).strip()
        if not text:
            raise click.UsageError("the prompt on stdin is empty; pipe the prompt in, e.g. echo 'hi' | zagent run -")
        return text
    if not piped or not stdin_piped() or not _pipe_sends(prompt or ""):
        return prompt
    joined = f"{prompt}\n\n" if prompt else ""
    text = _bounded_stdin(kind, limits, len(joined.encode("utf-8"))).rstrip()
    return joined + text if text.strip() else prompt
