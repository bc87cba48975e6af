"""What commands read besides their options: a tool call's JSON arguments and a prompt, from argv, a file or stdin."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from zagent_cli.output import head


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


def prompt_text(prompt: str | None) -> str | None:
    """PROMPT, or stdin for ``-`` (as llm and most Unix tools read it)."""
    if prompt != "-":
        return prompt
    text = stdin_text().strip()
    if not text:
        raise click.UsageError("the prompt on stdin is empty; pipe the prompt in, e.g. echo 'hi' | zagent run -")
    return text
