"""Checking a call's arguments against its tool's JSON Schema, in words a model can act on.

Every problem is reported, one sentence each (``missing argument "text"``,
``unknown argument "pth" (allowed: path)``, ``argument "top": must be >= 1``), so the
model can fix them all in one retry. Unambiguous loose types are coerced first, as the
seed framework does (``"3"`` where an integer is expected), and each coercion is
recorded so the journal shows what the tool really received.
"""

from __future__ import annotations

import copy
import json
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from zagent_core.journal.events import Coercion
from zagent_core.tools.patterns import extras

if TYPE_CHECKING:
    from jsonschema import ValidationError
    from jsonschema.protocols import Validator

_INTEGER = re.compile(r"^\s*-?[0-9]+\s*$", re.ASCII)
_MAX_DIGITS = 1000
_NUMBER = re.compile(r"^\s*-?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?\s*$", re.ASCII)


@dataclass(frozen=True)
class Validated:
    """The outcome of validating one call."""

    arguments: Any
    problems: list[str] = field(default_factory=list)
    coercions: list[Coercion] = field(default_factory=list)

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


def _coerce(value: Any, schema: Any, path: str, coercions: list[Coercion]) -> Any:
    """Coerce ``value`` in place of where the schema wants a number or a boolean."""
    if not isinstance(schema, dict):
        return value
    if isinstance(value, str):
        changed, new = _coerce_scalar(value, _types(schema))
        if changed:
            coercions.append(Coercion(path=path, before=value, after=new))
        return new
    if isinstance(value, dict):
        properties = schema.get("properties")
        if isinstance(properties, dict):
            for key, sub in properties.items():
                if key in value:
                    value[key] = _coerce(value[key], sub, f"{path}.{key}" if path else key, coercions)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            value[index] = _coerce(item, schema["items"], f"{path}[{index}]", coercions)
    return value


def _where(error: ValidationError) -> str:
    where = ""
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


def _describe(error: ValidationError, checked: Checked) -> list[str]:
    """One model-readable sentence per problem in ``error``."""
    where = _where(error)
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
    coercions: list[Coercion] = []
    try:
        arguments = _coerce(copy.deepcopy(arguments), validator.schema, "", coercions)
    except (RecursionError, ValueError) as exc:
        return Validated(arguments=arguments, problems=[
            f"the arguments could not be checked ({type(exc).__name__}); send them less deeply nested"])
    problems = schema_problems(validator, arguments, ARGUMENTS)
    return Validated(arguments=arguments, problems=problems, coercions=coercions if not problems else [])


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
