"""What the CLI prints: text made safe for a terminal, and exact JSON.

Tools, models and export files are not trusted to drive the user's terminal: an ESC in a
tool's output could set the window title (OSC), hide lines, or worse. Every line the CLI
prints for a person goes through :func:`say`, which shows control characters instead of
sending them; ``--json`` output is printed by :func:`emit_json`, exact JSON whose strings
escape them. Light on purpose (no zagent_core import): ``zagent --help`` loads it.
"""

from __future__ import annotations

from typing import Any, Callable

import click

# C0 but tab and newline, DEL, C1: \x1b becomes the four characters "\x1b".
_VISIBLE = {code: f"\\x{code:02x}" for code in [*range(0x20), *range(0x7F, 0xA0)] if code not in (0x09, 0x0A)}
# JSON already escapes C0; DEL and C1 get the \u form: the same string.
JSON_ESCAPES = {code: f"\\u{code:04x}" for code in range(0x7F, 0xA0)}
_SURROGATES = range(0xD800, 0xE000)


def _surrogates_replaced(text: str, replace: Callable[[str], str]) -> str:
    """Lone surrogates (a file name's undecodable byte) cannot be encoded for output at all."""
    if text.isascii() or not any(ord(c) in _SURROGATES for c in text):
        return text
    return "".join(replace(c) if ord(c) in _SURROGATES else c for c in text)


def terminal_safe(text: str) -> str:
    """``text`` with control characters (but tab and newline) shown as ``\\x1b`` escapes.

    A lone surrogate is shown as U+FFFD.
    """
    return _surrogates_replaced(text.translate(_VISIBLE), lambda _: "\ufffd")


def say(text: str = "", *, err: bool = False) -> None:
    """Print one line of tool-, model- or user-made text for a person."""
    click.echo(terminal_safe(text), err=err)


def emit_json(value: Any) -> None:
    """Print ``value`` as JSON: exact, and still harmless on a terminal."""
    import json

    text = json.dumps(value, indent=2, ensure_ascii=False, default=str).translate(JSON_ESCAPES)
    click.echo(_surrogates_replaced(text, lambda c: f"\\u{ord(c):04x}"))  # JSON's \u form keeps them exactly


def head(text: str | None, width: int = 80) -> str:
    """The first ``width`` characters of ``text`` on one line (whitespace runs become one space)."""
    line = " ".join((text or "").split())
    return line if len(line) <= width else line[: width - 3] + "..."


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``1 turn``, ``2 turns``, ``1 reply``, ``3 replies`` (``nouns``: an irregular plural)."""
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"
