"""The regular expressions of tool schemas (``pattern``, ``patternProperties``), matched in linear time.

jsonschema matches them with Python's ``re``, which backtracks: a tool whose schema says
``"pattern": "^(a+)+$"`` held the validation of a call, and the engine with it (``re`` holds
the interpreter's lock while it matches), for as long as the model's argument made it:
hours, for forty characters. zagent validates with the same dialects, but these keywords
match with RE2 (``google-re2``), whose time grows with the text's length and never more.
RE2 is also nearer than Python's ``re`` to the ECMA-262 expressions JSON Schema's patterns
are: ``\\d`` and ``\\w`` are ASCII in both.

A pattern RE2 cannot read (a lookaround, a backreference: ECMA-262 features that need
backtracking) is not checked by zagent, which says so when the tool is offered
(:func:`unreadable`): the tool checks its own input. ``unevaluatedProperties`` still matches
``patternProperties`` with Python's ``re`` (jsonschema's own); tool schemas do not use both.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import re2  # type: ignore[import-untyped]  # google-re2 ships no types

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

#: Schema keywords whose values are data, not schemas: a ``pattern`` in them is no pattern.
_DATA = frozenset({"enum", "const", "default", "examples"})


@functools.lru_cache(maxsize=4096)
def _compiled(pattern: str) -> Any | None:
    options = re2.Options()
    options.log_errors = False  # RE2 would print to stderr what it cannot read: it is said once, as a warning
    try:
        return re2.compile(pattern, options)
    except (re2.error, TypeError, ValueError):
        return None


def matches(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches somewhere in ``text``, in time linear in ``text``; a pattern
    RE2 cannot read counts as matching (zagent leaves it to the tool)."""
    regex = _compiled(pattern)
    return regex is None or regex.search(text) is not None


def unreadable(schema: Any) -> list[str]:
    """The patterns of ``schema`` (``pattern`` values, ``patternProperties`` keys) RE2 cannot read."""
    return [pattern for pattern in dict.fromkeys(_patterns(schema)) if _compiled(pattern) is None]


def _patterns(node: Any) -> Iterator[str]:
    if isinstance(node, list):
        for item in node:
            yield from _patterns(item)
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        if key == "pattern" and isinstance(value, str):
            yield value
        elif key == "patternProperties" and isinstance(value, dict):
            yield from (name for name in value if isinstance(name, str))
            yield from _patterns(list(value.values()))
        elif key not in _DATA:
            yield from _patterns(value)


# Keyword functions as jsonschema calls them; its ``descend`` is not in the Validator protocol.
def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema import ValidationError

    if validator.is_type(instance, "string") and not matches(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, properties: dict[str, Any], instance: Any,
                        schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in properties.items():
        for key, value in instance.items():
            if matches(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def extras(instance: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """The keys of ``instance`` that neither ``properties`` nor ``patternProperties`` of ``schema`` name."""
    named = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    return [key for key in instance if key not in named and not any(matches(p, key) for p in patterns)]


def _additional_properties(validator: Any, additional: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """jsonschema's own, with the extra keys found by :func:`extras`."""
    from jsonschema import ValidationError

    if not validator.is_type(instance, "object"):
        return
    found = extras(instance, schema)
    if validator.is_type(additional, "object"):
        for extra in found:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and found:
        yield ValidationError(f"Additional properties are not allowed ({', '.join(map(repr, sorted(found)))} "
                              f"{'was' if len(found) == 1 else 'were'} unexpected)")


@functools.lru_cache(maxsize=None)
def bounded(dialect: type[Validator]) -> type[Validator]:
    """``dialect`` (a jsonschema validator class) with its patterns matched by RE2."""
    from jsonschema.validators import extend

    return extend(dialect, {"pattern": _pattern, "patternProperties": _pattern_properties,
                            "additionalProperties": _additional_properties})
