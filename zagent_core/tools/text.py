"""Text that can always be journaled.

SQLite stores UTF-8, and a Python ``str`` may hold what UTF-8 cannot encode: lone
surrogates, from a ``"\\ud800"`` escape in JSON a tool or a model sent, or from bytes that
``os.fsdecode`` or ``surrogateescape`` kept (a file name, an argv byte like ``\\xff``).
Such text is made storable where it enters zagent, the way undecodable bytes already
become U+FFFD, so the event built from it is the event the journal keeps.
"""

from __future__ import annotations

import re
from typing import Any

# A Python str holds code points: a valid pair is one code point, so any surrogate is lone.
_SURROGATE = re.compile("[\ud800-\udfff]")


def storable(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (unchanged, and fast, when there is none)."""
    if text.isascii():
        return text
    return _SURROGATE.sub("\ufffd", text)


def storable_json(value: Any) -> Any:
    """A JSON value (as ``json.loads`` gives it) with :func:`storable` applied to every key and string."""
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, list):
        return [storable_json(item) for item in value]
    if isinstance(value, dict):
        return {storable(key) if isinstance(key, str) else key: storable_json(item) for key, item in value.items()}
    return value
