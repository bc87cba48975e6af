"""Problems found in user-written files (manifests, config), worded for people.

Loading never raises on a user's mistake: it collects :class:`Problem` entries that
``zagent tools list``, ``zagent doctor`` and the session's warnings all show the same way.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError


class Problem(BaseModel):
    """One thing wrong in one file. ``error`` means it was not used; ``warning`` that it was."""

    model_config = ConfigDict(frozen=True)

    source: str
    message: str
    severity: Literal["error", "warning"] = "error"

    def __str__(self) -> str:
        return f"{self.source}: {self.message}"


def closest(word: str, options: Iterable[str], n: int = 3) -> list[str]:
    """The options that look most like ``word``, best first."""
    return difflib.get_close_matches(word, list(options), n=n, cutoff=0.6)


def did_you_mean(word: str, options: Iterable[str]) -> str:
    """`` (did you mean "x"?)`` for the closest options, or an empty string."""
    near = closest(word, options)
    return f" (did you mean {' or '.join(f'{n!r}'.replace(chr(39), chr(34)) for n in near)}?)" if near else ""


def _where(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc)


def _fields_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> dict[str, Any]:
    """The field names of the (nested) model that ``loc``'s last part belongs to."""
    for part in loc[:-1]:
        field = model.model_fields.get(str(part))
        annotation = field.annotation if field else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return {}
        model = annotation
    return model.model_fields


def describe_errors(exc: ValidationError, model: type[BaseModel]) -> tuple[list[str], list[str]]:
    """Split a pydantic error about ``model`` into (problems, unknown-field warnings), one sentence each."""
    problems: list[str] = []
    unknown: list[str] = []
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        where = _where(loc)
        if error["type"] == "extra_forbidden":
            unknown.append(f'unknown field "{where}" is ignored{did_you_mean(str(loc[-1]), _fields_at(model, loc))}')
        elif error["type"] == "missing":
            problems.append(f'missing required field "{where}"')
        else:
            # Our own validators' messages are already sentences; drop pydantic's "Value error, ".
            cause = error.get("ctx", {}).get("error")
            message = str(cause) if error["type"] == "value_error" and cause is not None else error["msg"]
            problems.append(f'"{where}": {message} (got {_short(error.get("input"))})')
    return problems, unknown


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
