"""What the CLI prints: text made safe for a terminal, and exact JSON.

Tools, models and export files are not trusted to drive the user's terminal: an ESC in a
tool's output could set the window title (OSC), hide lines, or worse. Every line the CLI
prints for a person goes through :func:`say`, which shows control characters instead of
sending them; ``--json`` output is printed by :func:`emit_json`, exact JSON whose strings
escape them. Light on purpose (no zagent_core import): ``zagent --help`` loads it.

Colour marks what zagent itself says (ok, error, warning), never what tools wrote, and only
on a terminal: click leaves it out when the output is piped, and ``NO_COLOR`` turns it off.
"""

from __future__ import annotations

import os
import re
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable

import click

if TYPE_CHECKING:
    from zagent_core.problems import Problem

# C0 but tab and newline, DEL, C1: \x1b becomes the four characters "\x1b".
_VISIBLE = {code: f"\\x{code:02x}" for code in [*range(0x20), *range(0x7F, 0xA0)] if code not in (0x09, 0x0A)}
# JSON already escapes C0; DEL and C1 get the \u form: the same string.
JSON_ESCAPES = {code: f"\\u{code:04x}" for code in range(0x7F, 0xA0)}
_SURROGATES = range(0xD800, 0xE000)
#: Text with none of the characters above, nor a surrogate: shown as it is.
_SAFE = re.compile("[^\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]*")


def _surrogates_replaced(text: str, replace: Callable[[str], str]) -> str:
    """Lone surrogates (a file name's undecodable byte) cannot be encoded for output at all."""
    if text.isascii() or not any(ord(c) in _SURROGATES for c in text):
        return text
    return "".join(replace(c) if ord(c) in _SURROGATES else c for c in text)


def terminal_safe(text: str) -> str:
    """``text`` with control characters (but tab and newline) shown as ``\\x1b`` escapes.

    A lone surrogate is shown as U+FFFD.
    """
    if _SAFE.fullmatch(text):  # most text: one scan in C, where translate looks each character up
        return text
    return _surrogates_replaced(text.translate(_VISIBLE), lambda _: "\ufffd")


#: Colours of what zagent says about an outcome.
OK, ERROR, WARNING = "green", "red", "yellow"


def _coloured() -> bool:
    """Colour unless ``NO_COLOR`` is set to anything (https://no-color.org); click drops it off a terminal."""
    return not os.environ.get("NO_COLOR")


def say(text: str = "", *, err: bool = False, colour: str | None = None, dim: bool = False) -> None:
    """Print one line of tool-, model- or user-made text for a person, in ``colour`` (or dimmed) on a terminal."""
    line = terminal_safe(text)
    click.echo(click.style(line, fg=colour, dim=dim or None) if (colour or dim) and _coloured() else line, err=err)


def say_problems(problems: list[Problem]) -> None:
    """One indented line per problem, errors in red, warnings in yellow."""
    for problem in problems:
        say_problem(problem.severity, str(problem))


def say_problem(severity: str, text: str) -> None:
    """A problem's line (``text``: the problem as ``str()`` gives it), as :func:`say_problems` says it."""
    say(f"  {severity}: {text}", colour=ERROR if severity == "error" else WARNING)


def say_table(rows: list[tuple[str, str, str]], disabled: frozenset[str] = frozenset(),
              deferred: frozenset[str] = frozenset()) -> None:
    """One line per tool or skill: name, summary and where it comes from, in columns padded to
    their widest cell (after terminal_safe, which may lengthen a name); then whether the tool is
    disabled, or deferred (lazy disclosure: a request sends it once ``tool_search`` found it)."""
    rows = [(terminal_safe(name), terminal_safe(head(summary, 72)), where) for name, summary, where in rows]
    names = max((len(name) for name, _, _ in rows), default=0)
    summaries = max((len(summary) for _, summary, _ in rows), default=0)
    for name, summary, where in rows:
        mark = "  (disabled)" if name in disabled else "  (deferred)" if name in deferred else ""
        say(f"{name:<{names}}  {summary:<{summaries}}  [{where}]{mark}")


def say_part(text: str) -> None:
    """Print ``text`` made safe as :func:`say` does, with no newline, at once (click flushes):
    a model's reply as it streams."""
    click.echo(terminal_safe(text), nl=False)


def utc_ms(when: datetime) -> str:
    """``2026-11-30T04:46:00.123Z``: the journal's one time format, used in every output."""
    return when.astimezone(timezone.utc).isoformat(timespec="milliseconds")[:-6] + "Z"


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return utc_ms(value)
    from pydantic_core import to_jsonable_python  # sets, enums, paths, models: as pydantic writes them

    return to_jsonable_python(value, fallback=str)


def emit_json(value: Any) -> None:
    """Print ``value`` as JSON: exact, and still harmless on a terminal. Give times as
    ``datetime`` (a model's ``model_dump()``): they are written as :func:`utc_ms` does."""
    import json

    text = json.dumps(value, indent=2, ensure_ascii=False, default=_json_default).translate(JSON_ESCAPES)
    click.echo(_surrogates_replaced(text, lambda c: f"\\u{ord(c):04x}"))  # JSON's \u form keeps them exactly


def head(text: str | None, width: int = 80) -> str:
    """The first ``width`` characters of ``text`` on one line (whitespace runs become one space)."""
    line = " ".join((text or "").split())
    return line if len(line) <= width else line[: width - 3] + "..."


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``1 turn``, ``2 turns``, ``1 reply``, ``3 replies`` (``nouns``: an irregular plural)."""
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"
