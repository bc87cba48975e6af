"""Checking a call's arguments against its tool's JSON Schema, in words a model can act on.

Every problem is reported, one sentence each (``missing argument "text"``,
``unknown argument "pth" (allowed: path)``, ``argument "top": must be >= 1``), so the
model can fix them all in one retry. Unambiguous loose types are coerced first, as the
seed framework does (``"3"`` where an integer is expected), and each coercion is
recorded so the journal shows what the tool really received. An array item that still
does not fit its ``items`` schema is dropped, as the seed does, rather than failing the
whole call: the call runs with the rest, and the drop is recorded and told to the model.
"""

from __future__ import annotations

import copy
import json
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from zagent_core.journal.events import Coercion, DroppedItem
from zagent_core.tools.patterns import extras

if TYPE_CHECKING:
    from jsonschema import ValidationError
    from jsonschema.protocols import Validator

_INTEGER = re.compile(r"^\s*-?[0-9]+\s*$", re.ASCII)
_MAX_DIGITS = 1000
#: How many dropped items the model's one line names; the journal records them all.
MAX_DROPS_TOLD = 5
_NUMBER = re.compile(r"^\s*-?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?\s*$", re.ASCII)


@dataclass(frozen=True)
class Validated:
    """The outcome of validating one call."""

    arguments: Any
    problems: list[str] = field(default_factory=list)
    coercions: list[Coercion] = field(default_factory=list)
    dropped: list[DroppedItem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def json_type(value: Any) -> str:
    """The JSON Schema type name of a Python value decoded from JSON."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _types(schema: Any) -> set[str]:
    if not isinstance(schema, dict):
        return set()
    declared = schema.get("type")
    if isinstance(declared, str):
        return {declared}
    return set(declared) if isinstance(declared, list) else set()


def _coerce_scalar(value: str, types: set[str]) -> tuple[bool, Any]:
    if "string" in types:
        return False, value
    if len(value) > _MAX_DIGITS:
        return False, value  # int() refuses such numbers; the schema check will say "expected integer"
    if "integer" in types and _INTEGER.match(value):
        return True, int(value)
    if "number" in types and _NUMBER.match(value):
        number = float(value)
        if math.isfinite(number):
            return True, int(number) if _INTEGER.match(value) else number
    if "boolean" in types and value in ("true", "false"):
        return True, value == "true"
    return False, value


@dataclass
class _Loosening:
    """What coercion did to one call's arguments: the values converted and the array items left out."""

    validator: Validator
    coercions: list[Coercion] = field(default_factory=list)
    dropped: list[DroppedItem] = field(default_factory=list)

    def coerce(self, value: Any, schema: Any, path: str, asked: str) -> Any:
        """Coerce ``value`` in place where the schema wants a number or a boolean, and drop the array
        items that still break their ``items`` schema. ``path`` is the place in the arguments the tool
        receives (where a coercion's ``after`` is), ``asked`` the place in the arguments as asked (they
        differ once an earlier item of an array was dropped): a drop is recorded at ``asked``, whose value
        ``tool_call_requested`` holds."""
        if not isinstance(schema, dict):
            return value
        if isinstance(value, str):
            changed, new = _coerce_scalar(value, _types(schema))
            if changed:
                self.coercions.append(Coercion(path=path, before=value, after=new))
            return new
        if isinstance(value, dict):
            properties = schema.get("properties")
            if isinstance(properties, dict):
                for key, sub in properties.items():
                    if key in value:
                        value[key] = self.coerce(value[key], sub, _dotted(path, key), _dotted(asked, key))
        elif isinstance(value, list) and isinstance(schema.get("items"), dict):
            return self._kept_items(value, schema["items"], path, asked)
        return value

    def _kept_items(self, items: list[Any], schema: dict[str, Any], path: str, asked: str) -> list[Any]:
        item_validator = self.validator.evolve(schema=schema)  # keeps the root's resolver: $refs still resolve
        kept: list[Any] = []
        for index, item in enumerate(items):
            coercions, dropped = len(self.coercions), len(self.dropped)
            item = self.coerce(item, schema, f"{path}[{len(kept)}]", f"{asked}[{index}]")
            error = next(iter(sorted(item_validator.iter_errors(item), key=_path_key)), None)
            if error is None:
                kept.append(item)
                continue
            # Its own coercions and drops went with it: what is recorded is what the tool receives.
            del self.coercions[coercions:], self.dropped[dropped:]
            self.dropped.append(DroppedItem(path=f"{asked}[{index}]", problem=_describe(error, ARGUMENTS, f"{asked}[{index}]")[0]))
        return kept


def _dotted(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _where(error: ValidationError, base: str) -> str:
    where = base
    for part in error.absolute_path:
        where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
    return where


def _join(items: Any) -> str:
    return ", ".join(str(i) for i in items)


@dataclass(frozen=True)
class Checked:
    """What a schema checks, as its problems name it: a part (``argument "top"``), the whole
    (with its verb: ``the arguments are``) and the manifest field of the schema."""

    part: str
    whole: str
    verb: str
    schema: str


ARGUMENTS = Checked("argument", "the arguments", "are", "parameters")
#: A JSON result's ``structured`` value, checked against the manifest's ``output_schema``.
STRUCTURED = Checked("structured field", '"structured"', "is", "output_schema")


def _describe(error: ValidationError, checked: Checked, base: str = "") -> list[str]:
    """One model-readable sentence per problem in ``error``, found at ``base`` of what is checked."""
    where = _where(error, base)
    # Names come from the model: quoted as JSON strings, a newline cannot split a problem.
    subject = f"{checked.part} {_json(where)}" if where else checked.whole
    prefix = f"{where}." if where else ""
    # jsonschema types these as possibly unset; a raised error always has them.
    kind, expected, instance = cast(str, error.validator), cast(Any, error.validator_value), error.instance
    schema: dict[str, Any] = error.schema if isinstance(error.schema, dict) else {}

    if kind == "additionalProperties" and isinstance(instance, dict):
        allowed = sorted(schema.get("properties", {}))
        hint = f" (allowed: {_join(allowed)})" if allowed else " (this tool takes no arguments)"
        return [f"unknown {checked.part} {_json(prefix + name)}{hint}" for name in sorted(extras(instance, schema))]
    if kind == "required":
        missing = [name for name in expected if isinstance(instance, dict) and name not in instance]
        return [f"missing {checked.part} {_json(prefix + name)}" for name in missing]
    if kind == "type":
        wanted = " or ".join(expected) if isinstance(expected, list) else expected
        if not where:
            return [f"{checked.whole} must be a JSON {wanted}, got {json_type(instance)}"]
        return [f"{subject}: expected {wanted}, got {json_type(instance)}"]
    problem = _value_problem(kind, expected, instance)
    return [f"{subject}: {problem if problem is not None else error.message}"]


def _value_problem(kind: str, expected: Any, instance: Any) -> str | None:
    """What is wrong with a value that breaks the constraint ``kind``; None for a kind without a sentence here."""
    comparisons = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}
    if kind in comparisons:
        return f"must be {comparisons[kind]} {expected} (got {instance})"
    if kind == "enum":
        return f"must be one of {_join(_json(v) for v in expected)} (got {_json(instance)})"
    if kind == "const":
        return f"must be {_json(expected)} (got {_json(instance)})"
    sizes = {
        "minLength": "at least {} characters", "maxLength": "at most {} characters",
        "minItems": "at least {} items", "maxItems": "at most {} items",
        "minProperties": "at least {} fields", "maxProperties": "at most {} fields",
    }
    if kind in sizes:
        return f"must have {sizes[kind].format(expected)}"
    if kind == "pattern":
        return f"must match the pattern {expected} (got {_json(instance)})"
    if kind == "multipleOf":
        return f"must be a multiple of {expected} (got {instance})"
    if kind == "uniqueItems":
        return "items must be unique"
    if kind in ("anyOf", "oneOf"):
        return f"{_json(instance)} matches {'none' if kind == 'anyOf' else 'not exactly one'} of the allowed forms"
    return None


def _json(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


def _path_key(error: ValidationError) -> tuple[Any, ...]:
    """Sort by path, array indexes as numbers (a[2] before a[10])."""
    return tuple((0, part, "") if isinstance(part, int) else (1, 0, part) for part in error.absolute_path)


def validate_arguments(validator: Validator, arguments: Any) -> Validated:
    """Coerce loose types, then collect every problem of ``arguments`` against the schema.

    The caller's object is never modified; ``Validated.arguments`` is what the tool gets.
    """
    loosening = _Loosening(validator)
    try:
        arguments = loosening.coerce(copy.deepcopy(arguments), validator.schema, "", "")
    except (RecursionError, ValueError) as exc:
        return Validated(arguments=arguments, problems=[
            f"the arguments could not be checked ({type(exc).__name__}); send them less deeply nested"])
    problems = schema_problems(validator, arguments, ARGUMENTS)
    if problems:
        return Validated(arguments=arguments, problems=problems)
    return Validated(arguments=arguments, coercions=loosening.coercions, dropped=loosening.dropped)


def schema_problems(validator: Validator, value: Any, checked: Checked) -> list[str]:
    """Every problem of ``value`` against the validator's schema, one sentence each, in path order."""
    try:
        errors = sorted(validator.iter_errors(value), key=lambda e: (_path_key(e), str(e.validator)))
    except RecursionError:
        return [f"{checked.whole} {checked.verb} nested too deeply to be checked"]
    except Exception as exc:  # noqa: BLE001 - a schema that loads but cannot be applied is the tool's fault
        return [f"the tool's {checked.schema} schema cannot be applied ({type(exc).__name__}: {exc}); fix its manifest"]
    problems: list[str] = []
    for error in errors:
        for sentence in _describe(error, checked):
            if sentence not in problems:
                problems.append(sentence)
    return problems


def dropped_line(dropped: list[DroppedItem]) -> str:
    """The one line that tells the model which items of its arrays were left out, and why."""
    shown = "; ".join(item.problem for item in dropped[:MAX_DROPS_TOLD])
    more = f"; and {len(dropped) - MAX_DROPS_TOLD} more" if len(dropped) > MAX_DROPS_TOLD else ""
    return (f"[zagent: {len(dropped)} array item{'s' if len(dropped) > 1 else ''} that did not fit the "
            f"tool's parameters {'were' if len(dropped) > 1 else 'was'} left out; the call ran without "
            f"{'them' if len(dropped) > 1 else 'it'} ({shown}{more})]")
