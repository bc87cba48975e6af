"""Validating a call's arguments against its tool's JSON Schema.

The problems are what the model is told (one per line), so they are asserted word for
word; the coercions are what the journal records (path, before, after).
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import forked
import pytest
from conftest import EXAMPLES, PYTHON, python_tool
from hypothesis import HealthCheck, example, given, settings, strategies as st
from jsonschema.validators import validator_for

from zagent_core.journal.events import DroppedItem, ToolCallFinished, ToolCallStarted
from zagent_core.tools.validation import Validated, dropped_line, validate_arguments
from zagent_store import SQLiteJournal

WORD_COUNT = {
    "type": "object",
    "properties": {"text": {"type": "string"}, "top": {"type": "integer", "minimum": 1}},
    "required": ["text"],
    "additionalProperties": False,
}
FIND = {"type": "object", "properties": {"path": {"type": "string"}}, "additionalProperties": False}


def check(schema: dict[str, Any], arguments: Any) -> Validated:
    return validate_arguments(validator_for(schema)(schema), arguments)


def problems(schema: dict[str, Any], arguments: Any) -> list[str]:
    return check(schema, arguments).problems


def props(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


def coercions(result: Validated) -> list[tuple[str, Any, Any]]:
    return [(c.path, c.before, c.after) for c in result.coercions]


# --- the examples of the issue, word for word --------------------------------------------------


def test_valid_arguments_pass_unchanged() -> None:
    result = check(WORD_COUNT, {"text": "the cat", "top": 2})
    assert result.ok
    assert result.problems == [] and result.coercions == []
    assert result.arguments == {"text": "the cat", "top": 2}


def test_unknown_argument_lists_the_allowed_ones() -> None:
    assert problems(FIND, {"pth": "a.txt"}) == ['unknown argument "pth" (allowed: path)']


def test_unknown_arguments_are_each_reported_with_allowed_ones_sorted() -> None:
    assert problems(WORD_COUNT, {"text": "x", "zeta": 1, "alpha": 2}) == [
        'unknown argument "alpha" (allowed: text, top)',
        'unknown argument "zeta" (allowed: text, top)',
    ]


def test_names_the_model_made_up_are_quoted_so_each_problem_stays_one_line() -> None:
    # Argument names come from the model: quoted as JSON strings, a newline cannot split a problem.
    assert problems(FIND, {"a\nb": 1, 'q"x': 2}) == [
        'unknown argument "a\\nb" (allowed: path)',
        'unknown argument "q\\"x" (allowed: path)',
    ]


def test_an_argument_to_a_tool_without_parameters() -> None:
    schema = {"type": "object", "properties": {}, "additionalProperties": False}
    assert problems(schema, {"a": 1}) == ['unknown argument "a" (this tool takes no arguments)']


def test_missing_argument() -> None:
    assert problems(WORD_COUNT, {}) == ['missing argument "text"']


def test_several_missing_arguments_are_each_reported() -> None:
    schema = {**props(a={"type": "string"}, b={"type": "string"}), "required": ["a", "b"]}
    assert problems(schema, {}) == ['missing argument "a"', 'missing argument "b"']


def test_wrong_type() -> None:
    assert problems(WORD_COUNT, {"text": "x", "top": "many"}) == ['argument "top": expected integer, got string']


@pytest.mark.parametrize("value,got", [(2.5, "number"), (True, "boolean"), (None, "null"), ([1], "array"),
                                       ({"n": 1}, "object")])
def test_wrong_type_names_the_json_type_that_was_sent(value: Any, got: str) -> None:
    assert problems(WORD_COUNT, {"text": "x", "top": value}) == [f'argument "top": expected integer, got {got}']


def test_a_whole_float_is_an_integer_in_json_schema() -> None:
    assert check(WORD_COUNT, {"text": "x", "top": 3.0}).ok


def test_a_union_type_is_listed_with_or() -> None:
    assert problems(props(x={"type": ["string", "null"]}), {"x": 3}) == ['argument "x": expected string or null, got integer']


def test_minimum() -> None:
    assert problems(WORD_COUNT, {"text": "x", "top": 0}) == ['argument "top": must be >= 1 (got 0)']


@pytest.mark.parametrize("keyword,bound,value,expected", [
    ("maximum", 5, 6, 'argument "n": must be <= 5 (got 6)'),
    ("exclusiveMinimum", 0, 0, 'argument "n": must be > 0 (got 0)'),
    ("exclusiveMaximum", 5, 5, 'argument "n": must be < 5 (got 5)'),
    ("multipleOf", 2, 3, 'argument "n": must be a multiple of 2 (got 3)'),
])
def test_numeric_bounds(keyword: str, bound: int, value: int, expected: str) -> None:
    assert problems(props(n={"type": "integer", keyword: bound}), {"n": value}) == [expected]


def test_every_problem_is_reported_one_per_line() -> None:
    result = check(WORD_COUNT, {"pth": 1, "top": "many"})
    assert result.problems == [
        'unknown argument "pth" (allowed: text, top)',
        'missing argument "text"',
        'argument "top": expected integer, got string',
    ]
    assert not result.ok
    assert all("\n" not in line for line in result.problems)


@pytest.mark.parametrize("enum,value,expected", [
    (["solid", "gradient"], "dotted", 'argument "x": must be one of "solid", "gradient" (got "dotted")'),
    ([1, 2, 3], 4, 'argument "x": must be one of 1, 2, 3 (got 4)'),
    (["a", None], "b", 'argument "x": must be one of "a", null (got "b")'),
])
def test_enum_lists_the_allowed_values_as_json(enum: list[Any], value: Any, expected: str) -> None:
    assert problems(props(x={"enum": enum}), {"x": value}) == [expected]


def test_const() -> None:
    assert problems(props(x={"const": "v1"}), {"x": "v2"}) == ['argument "x": must be "v1" (got "v2")']


@pytest.mark.parametrize("schema,value,expected", [
    ({"type": "string", "minLength": 2}, "a", 'argument "x": must have at least 2 characters'),
    ({"type": "string", "maxLength": 3}, "abcd", 'argument "x": must have at most 3 characters'),
    ({"type": "array", "minItems": 2}, [1], 'argument "x": must have at least 2 items'),
    ({"type": "array", "maxItems": 1}, [1, 2], 'argument "x": must have at most 1 items'),
    ({"type": "array", "uniqueItems": True}, [1, 1], 'argument "x": items must be unique'),
    ({"type": "object", "minProperties": 1}, {}, 'argument "x": must have at least 1 fields'),
    ({"type": "string", "pattern": "^#[0-9a-f]{6}$"}, "red",
     'argument "x": must match the pattern ^#[0-9a-f]{6}$ (got "red")'),
])
def test_size_and_pattern_constraints(schema: dict[str, Any], value: Any, expected: str) -> None:
    assert problems(props(x=schema), {"x": value}) == [expected]


def test_nested_objects_use_dotted_paths() -> None:
    schema = props(opts={
        "type": "object",
        "properties": {"depth": {"type": "integer"}, "mode": {"enum": ["fast", "slow"]}},
        "required": ["name"],
        "additionalProperties": False,
    })
    assert problems(schema, {"opts": {"depth": "deep", "mode": "medium", "extra": 1}}) == [
        'unknown argument "opts.extra" (allowed: depth, mode)',
        'missing argument "opts.name"',
        'argument "opts.depth": expected integer, got string',
        'argument "opts.mode": must be one of "fast", "slow" (got "medium")',
    ]


def dropped(result: Validated) -> list[tuple[str, str]]:
    return [(d.path, d.problem) for d in result.dropped]


def test_array_items_that_do_not_fit_are_dropped_with_indexed_paths() -> None:
    schema = props(
        sizes={"type": "array", "items": {"type": "integer", "maximum": 5}},
        rows={"type": "array", "items": {"type": "object", "properties": {"n": {"type": "integer"}},
                                         "required": ["n"]}},
    )
    result = check(schema, {"sizes": [1, 9, "x", "4"], "rows": [{"n": 1}, {"n": "q"}, {}]})
    assert result.ok and result.arguments == {"sizes": [1, 4], "rows": [{"n": 1}]}
    assert dropped(result) == [
        ("sizes[1]", 'argument "sizes[1]": must be <= 5 (got 9)'),
        ("sizes[2]", 'argument "sizes[2]": expected integer, got string'),
        ("rows[1]", 'argument "rows[1].n": expected integer, got string'),
        ("rows[2]", 'missing argument "rows[2].n"'),
    ]
    # the coercion is recorded where the tool receives the value, after the drops before it
    assert coercions(result) == [("sizes[1]", "4", 4)]


def test_a_dropped_item_takes_its_own_coercions_and_drops_with_it() -> None:
    row = {"type": "object", "properties": {"n": {"type": "integer"}, "tags": {"type": "array",
           "items": {"type": "string"}}}, "required": ["n"]}
    result = check(props(rows={"type": "array", "items": row}),
                   {"rows": [{"n": "x", "tags": [1]}, {"n": "2", "tags": ["a", 3]}]})
    assert result.arguments == {"rows": [{"n": 2, "tags": ["a"]}]}
    assert dropped(result) == [("rows[0]", 'argument "rows[0].n": expected integer, got string'),
                               ("rows[1].tags[1]", 'argument "rows[1].tags[1]": expected string, got integer')]
    assert coercions(result) == [("rows[0].n", "2", 2)]


def test_an_array_that_its_drops_leave_too_short_is_rejected_and_nothing_is_recorded() -> None:
    result = check(props(paths={"type": "array", "items": {"type": "string"}, "minItems": 1}), {"paths": [3]})
    assert result.problems == ['argument "paths": must have at least 1 items']
    assert result.dropped == [] and result.coercions == []


def test_items_that_refer_to_definitions_are_checked_against_them() -> None:
    schema = {"type": "object", "$defs": {"n": {"type": "integer"}},
              "properties": {"ns": {"type": "array", "items": {"$ref": "#/$defs/n"}}}}
    result = check(schema, {"ns": [1, "a", 2]})
    assert result.arguments == {"ns": [1, 2]} and dropped(result) == [
        ("ns[1]", 'argument "ns[1]": expected integer, got string')]


def test_the_model_is_told_of_the_drops_in_one_line() -> None:
    result = check(props(ns={"type": "array", "items": {"type": "integer"}}), {"ns": ["a"] * 7})
    line = dropped_line(result.dropped)
    assert "\n" not in line
    assert line.startswith("[zagent: 7 array items that did not fit the tool's parameters were left out; "
                           'the call ran without them (argument "ns[0]": expected integer, got string; ')
    assert line.endswith('argument "ns[4]": expected integer, got string; and 2 more)]')


@pytest.mark.parametrize("arguments,got", [([1, 2], "array"), ("text", "string"), (None, "null"), (3, "integer"),
                                           (2.5, "number"), (True, "boolean")])
def test_arguments_that_are_not_an_object(arguments: Any, got: str) -> None:
    result = check(WORD_COUNT, arguments)
    assert result.problems == [f"the arguments must be a JSON object, got {got}"]
    assert result.coercions == []


# --- coercion ---------------------------------------------------------------------------------


@pytest.mark.parametrize("schema,before,after", [
    ({"type": "integer"}, "3", 3),
    ({"type": "integer"}, "-12", -12),
    ({"type": "number"}, "2.5", 2.5),
    ({"type": "number"}, "-0.5", -0.5),
    ({"type": "number"}, "1e3", 1000.0),
    ({"type": "number"}, "3", 3),
    ({"type": "boolean"}, "true", True),
    ({"type": "boolean"}, "false", False),
    ({"type": ["integer", "null"]}, "7", 7),
])
def test_unambiguous_loose_types_are_coerced_and_recorded(schema: dict[str, Any], before: str, after: Any) -> None:
    result = check(props(x=schema), {"x": before})
    assert result.ok, result.problems
    assert result.arguments == {"x": after}
    assert type(result.arguments["x"]) is type(after)
    assert coercions(result) == [("x", before, after)]


def test_the_issue_example_coercion_then_the_bound_applies_to_the_number() -> None:
    result = check(WORD_COUNT, {"text": "x", "top": "3"})
    assert result.ok and result.arguments == {"text": "x", "top": 3}
    assert coercions(result) == [("top", "3", 3)]
    assert problems(WORD_COUNT, {"text": "x", "top": "0"}) == ['argument "top": must be >= 1 (got 0)']


@pytest.mark.parametrize("schema,value", [
    ({"type": "integer"}, "2.5"),
    ({"type": "integer"}, "3 apples"),
    ({"type": "integer"}, ""),
    ({"type": "integer"}, "0x10"),
    ({"type": "number"}, "nan"),
    ({"type": "number"}, "inf"),
    ({"type": "number"}, "1e400"),
    ({"type": "number"}, "1,5"),
    ({"type": "boolean"}, "True"),
    ({"type": "boolean"}, "yes"),
    ({"type": "boolean"}, "1"),
])
def test_ambiguous_strings_are_not_coerced(schema: dict[str, Any], value: str) -> None:
    result = check(props(x=schema), {"x": value})
    assert result.arguments == {"x": value}
    assert result.coercions == []
    assert result.problems == [f'argument "x": expected {schema["type"]}, got string']


@pytest.mark.parametrize("digits", ["\u0663", "\uff13", "\u0661\u0662"])
def test_only_ascii_digits_are_coerced(digits: str) -> None:
    # "٣" (Arabic-Indic three) or "３" (fullwidth) is not what a JSON number looks like.
    result = check(props(x={"type": "integer"}), {"x": digits})
    assert result.coercions == []
    assert result.problems == ['argument "x": expected integer, got string']


@pytest.mark.parametrize("schema", [
    {"type": "string"},
    {"type": ["string", "integer"]},
    {"type": ["integer", "string"]},
    {"enum": ["1", "2"]},
    {},
])
def test_no_coercion_when_the_schema_allows_strings(schema: dict[str, Any]) -> None:
    result = check(props(x=schema), {"x": "1"})
    assert result.ok
    assert result.arguments == {"x": "1"}
    assert result.coercions == []


def test_numbers_are_never_turned_into_strings() -> None:
    assert problems(props(x={"type": "string"}), {"x": 3}) == ['argument "x": expected string, got integer']


def test_coercion_reaches_nested_objects_and_arrays_with_their_paths() -> None:
    schema = props(
        opts={"type": "object", "properties": {"depth": {"type": "integer"}, "fast": {"type": "boolean"}}},
        sizes={"type": "array", "items": {"type": "number"}},
    )
    result = check(schema, {"opts": {"depth": "2", "fast": "false"}, "sizes": ["1.5", 2, "3"]})
    assert result.ok, result.problems
    assert result.arguments == {"opts": {"depth": 2, "fast": False}, "sizes": [1.5, 2, 3]}
    assert coercions(result) == [
        ("opts.depth", "2", 2),
        ("opts.fast", "false", False),
        ("sizes[0]", "1.5", 1.5),
        ("sizes[2]", "3", 3),
    ]


def test_no_coercion_is_recorded_for_a_rejected_call() -> None:
    result = check(WORD_COUNT, {"top": "3"})
    assert result.problems == ['missing argument "text"']
    assert result.coercions == []


def test_the_callers_arguments_are_not_modified() -> None:
    schema = props(n={"type": "integer"}, o={"type": "object", "properties": {"b": {"type": "boolean"}}},
                   a={"type": "array", "items": {"type": "number"}})
    arguments = {"n": "3", "o": {"b": "true"}, "a": ["1.5"]}
    before = copy.deepcopy(arguments)
    result = check(schema, arguments)
    assert result.arguments == {"n": 3, "o": {"b": True}, "a": [1.5]}
    assert arguments == before
    assert result.arguments["o"] is not arguments["o"]


def test_validation_results_can_be_recorded_as_json() -> None:
    result = check(WORD_COUNT, {"text": "x", "top": "4"})
    assert json.loads(json.dumps([c.model_dump() for c in result.coercions])) == [
        {"path": "top", "before": "4", "after": 4}
    ]


def test_the_example_tools_reject_and_coerce_as_documented() -> None:
    schema = json.loads((EXAMPLES / "tools" / "image_maker" / "image_maker.json").read_text())["parameters"]
    result = check(schema, {"colour": "#ff0000", "width": "2000", "style": "dots"})
    assert result.problems == [
        'unknown argument "colour" (allowed: color, height, name, style, width)',
        'missing argument "color"',
        'argument "style": must be one of "solid", "gradient" (got "dots")',
        'argument "width": must be <= 1024 (got 2000)',
    ]


# --- property: validation never raises --------------------------------------------------------

EXAMPLE_SCHEMAS = {
    path.parent.name: json.loads(path.read_text())["parameters"]
    for path in sorted((EXAMPLES / "tools").glob("*/*.json"))
}

loose_strings = st.sampled_from(["3", "0", "-1", "2.5", "1e3", "true", "false", "", " 4 ", "#ff8800", "solid",
                                 "gradient", "nan", "-", "."])
json_scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                | st.text(max_size=10) | loose_strings)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=10,
)


@st.composite
def tool_and_arguments(draw: st.DrawFn) -> tuple[str, Any]:
    name = draw(st.sampled_from(sorted(EXAMPLE_SCHEMAS)))
    known = sorted(EXAMPLE_SCHEMAS[name].get("properties", {}))
    keys = st.sampled_from(known) | st.text(max_size=6) if known else st.text(max_size=6)
    arguments = draw(st.dictionaries(keys, json_values, max_size=5) | json_values)
    return name, arguments


def value_at(arguments: Any, path: str) -> Any:
    node = arguments
    for key, index in re.findall(r"([^.\[\]]+)|\[(\d+)\]", path):
        node = node[int(index)] if index else node[key]
    return node


def test_the_example_schemas_were_found() -> None:
    assert {"word_count", "image_maker", "echo_stdin"} <= EXAMPLE_SCHEMAS.keys()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tool_and_arguments())
@example(("echo_argv", {"\n": None}))  # found by this test: a name with a newline split a problem in two
def test_validation_never_raises_on_arbitrary_arguments(case: tuple[str, Any]) -> None:
    name, arguments = case
    schema = EXAMPLE_SCHEMAS[name]
    validator = validator_for(schema)(schema)
    before = copy.deepcopy(arguments)
    result = validate_arguments(validator, arguments)

    assert arguments == before  # the caller's object is untouched
    assert all(isinstance(p, str) and p and "\n" not in p for p in result.problems)
    assert len(result.problems) == len(set(result.problems))
    # ok means the tool really gets arguments its schema accepts, and vice versa
    assert result.ok == validator.is_valid(result.arguments)
    if not result.ok:
        assert result.coercions == [] and result.dropped == []
    for c in result.coercions:
        assert isinstance(c.before, str)
        assert value_at(result.arguments, c.path) == c.after
    if validator.is_valid(arguments):
        # valid as sent: passed through exactly, nothing coerced
        assert result.ok and result.coercions == [] and result.dropped == [] and result.arguments == arguments


# --- through zagent run: the call runs with the rest, the journal and the model are told --------


def test_zagent_run_drops_the_items_that_do_not_fit_and_says_so(home_dir: Path, workspace: Path) -> None:
    python_tool(home_dir, "touch_all", "import sys; print(sys.stdin.read())",
                parameters=props(paths={"type": "array", "items": {"type": "string"}}))
    script = workspace / "script.json"
    script.write_text(json.dumps([
        {"text": "", "tool_calls": [{"name": "touch_all", "arguments": {"paths": ["a", 3, "b"]}}]},
        {"text": "done"}]))
    ran = forked.run([PYTHON, "-m", "zagent_cli", "--home", str(home_dir), "run", "--model",
                      f"scripted:{script}", "go"], capture_output=True, text=True, cwd=workspace, timeout=60)
    assert ran.returncode == 0, ran.stderr
    with SQLiteJournal(home_dir / "journal.db") as journal:
        (session,) = journal.sessions()
        events = [stored.event for stored in journal.read(session.session_id)]
    started = next(e for e in events if isinstance(e, ToolCallStarted))
    finished = next(e for e in events if isinstance(e, ToolCallFinished))
    assert started.arguments == {"paths": ["a", "b"]}
    assert started.dropped == [DroppedItem(path="paths[1]", problem='argument "paths[1]": expected string, got integer')]
    received, told = finished.output.rsplit("\n", 1)
    assert json.loads(received) == {"paths": ["a", "b"]}
    assert told == ("[zagent: 1 array item that did not fit the tool's parameters was left out; the call ran "
                    'without it (argument "paths[1]": expected string, got integer)]')
