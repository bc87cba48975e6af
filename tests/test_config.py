"""``<home>/config.json``: every value optional, a bad one reported and replaced by its default.

The problems are asserted as the user reads them (``<path>: <message>``), the way
``zagent doctor`` and the session warnings print them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from zagent_core import Config, Problem, load_config
from zagent_core.config import CapabilitiesConfig

DEFAULTS = Config()


def write(path: Path, content: Any) -> Path:
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return path


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    return tmp_path / "config.json"


def load(config_path: Path, content: Any) -> tuple[Config, list[str], list[Problem]]:
    config, problems = load_config(write(config_path, content))
    return config, [str(p) for p in problems], problems


def test_the_documented_defaults() -> None:
    assert DEFAULTS.tools.disabled == []
    assert DEFAULTS.limits.default_timeout_seconds == 120
    assert DEFAULTS.limits.output_cap_bytes == 32 * 1024
    assert DEFAULTS.capabilities.as_env() == "vision=true,audio=false,pdf=true,video=false"
    assert DEFAULTS.journal.synchronous == "FULL"


@pytest.mark.parametrize(("spec", "vision", "pdf"), [
    (None, True, True), ("scripted:x.json", True, True),  # no model known: the defaults
    ("anthropic:claude-sonnet-4-5", True, True), ("anthropic:claude-2.1", False, False),
    ("openai:gpt-4o-mini", True, False), ("openai:llama3.1", False, False), ("openai:llava:13b", True, False),
])
def test_capabilities_follow_the_model_family(spec: str | None, vision: bool, pdf: bool) -> None:
    caps = DEFAULTS.capabilities.for_model(spec)
    assert (caps.vision, caps.pdf, caps.audio, caps.video) == (vision, pdf, False, False)


def test_capabilities_set_in_config_win_over_the_model_family(config_path: Path) -> None:
    config, _, _ = load(config_path, {"capabilities": {"pdf": True}})
    caps = config.capabilities.for_model("openai:llama3.1")
    assert (caps.vision, caps.pdf) == (False, True)


def test_a_missing_file_means_defaults_and_no_problem(config_path: Path) -> None:
    assert load_config(config_path) == (DEFAULTS, [])


def test_an_empty_object_means_defaults(config_path: Path) -> None:
    assert load(config_path, {})[:2] == (DEFAULTS, [])


def test_every_valid_value_is_used(config_path: Path) -> None:
    config, lines, _ = load(config_path, {
        "tools": {"disabled": ["word_count", "image_maker"]},
        "limits": {"default_timeout_seconds": 30, "output_cap_bytes": 4096, "kill_grace_seconds": 0.5,
                   "media_max_bytes": 0},
        "capabilities": {"vision": False, "audio": True, "pdf": False, "video": True},
        "journal": {"synchronous": "NORMAL"},
    })
    assert lines == []
    assert config.tools.disabled == ["word_count", "image_maker"]
    assert config.limits.default_timeout_seconds == 30
    assert config.limits.output_cap_bytes == 4096
    assert config.limits.kill_grace_seconds == 0.5
    assert config.limits.media_max_bytes == 0
    assert config.journal.synchronous == "NORMAL"


@pytest.mark.parametrize("text,reason", [
    ("{", "is not valid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    ('{"tools": {"disabled": []},}', "is not valid JSON: Expecting property name enclosed in double quotes: "
                                     "line 1 column 28 (char 27)"),
    ("", "is not valid JSON: Expecting value: line 1 column 1 (char 0)"),
])
def test_bad_json_is_one_error_and_all_defaults(config_path: Path, text: str, reason: str) -> None:
    config, lines, problems = load(config_path, text)
    assert config == DEFAULTS
    assert lines == [f"config.json: {reason}; using defaults"]
    assert problems[0].severity == "error"


@pytest.mark.parametrize("content", ["[]", '"tools"', "null", "3", '[{"tools": {}}]'])
def test_a_config_that_is_not_an_object_is_one_error_and_all_defaults(config_path: Path, content: str) -> None:
    config, lines, _ = load(config_path, content)
    assert config == DEFAULTS
    assert lines == [f"config.json: must be a JSON object; using defaults"]


def test_a_config_that_is_not_utf8_is_reported(config_path: Path) -> None:
    config_path.write_bytes(b'{"tools": "\xff"}')
    config, problems = load_config(config_path)
    assert config == DEFAULTS
    assert len(problems) == 1 and problems[0].severity == "error"
    assert str(problems[0]).startswith(f"config.json: cannot be read (")
    assert str(problems[0]).endswith("; using defaults")


def test_a_deeply_nested_config_is_reported_not_raised(config_path: Path) -> None:
    config, lines, _ = load(config_path, '{"tools": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert config == DEFAULTS
    assert len(lines) == 1 and lines[0].startswith(f"config.json: ")


def test_each_bad_value_is_reported_and_replaced_by_its_default_keeping_the_others(config_path: Path) -> None:
    config, lines, problems = load(config_path, {
        "tools": {"disabled": ["keep_me"]},
        "limits": {"default_timeout_seconds": "30", "output_cap_bytes": 10, "kill_grace_seconds": 1},
        "capabilities": {"vision": "yes", "audio": True},
        "journal": {"synchronous": "OFF"},
    })
    assert lines == [
        f"config.json: \"limits.default_timeout_seconds\": Input should be a valid number (got '30'); using the default",
        f'config.json: "limits.output_cap_bytes": Input should be greater than or equal to 256 (got 10); '
        "using the default",
        f"config.json: \"capabilities.vision\": Input should be a valid boolean (got 'yes'); using the default",
        f"config.json: \"journal.synchronous\": Input should be 'NORMAL' or 'FULL' (got 'OFF'); using the default",
    ]
    assert {p.severity for p in problems} == {"error"}
    # the bad ones fell back ...
    assert config.limits.default_timeout_seconds == DEFAULTS.limits.default_timeout_seconds
    assert config.limits.output_cap_bytes == DEFAULTS.limits.output_cap_bytes
    assert config.capabilities.vision is True
    assert config.journal.synchronous == "FULL"
    # ... and the good ones, even beside them, were kept
    assert config.tools.disabled == ["keep_me"]
    assert config.limits.kill_grace_seconds == 1
    assert config.capabilities.audio is True


@pytest.mark.parametrize("limit,value,expected", [
    ("default_timeout_seconds", 0, "Input should be greater than 0 (got 0)"),
    ("default_timeout_seconds", -1, "Input should be greater than 0 (got -1)"),
    ("output_cap_bytes", 255, "Input should be greater than or equal to 256 (got 255)"),
    ("output_cap_bytes", 1000.0, "Input should be a valid integer (got 1000.0)"),
    ("output_cap_bytes", True, "Input should be a valid integer (got True)"),
    ("kill_grace_seconds", -0.1, "Input should be greater than or equal to 0 (got -0.1)"),
    ("media_max_bytes", -1, "Input should be greater than or equal to 0 (got -1)"),
    ("media_max_bytes", "5MB", "Input should be a valid integer (got '5MB')"),
])
def test_limits_are_checked_and_not_coerced(config_path: Path, limit: str, value: Any, expected: str) -> None:
    config, lines, _ = load(config_path, {"limits": {limit: value}})
    assert lines == [f'config.json: "limits.{limit}": {expected}; using the default']
    assert getattr(config.limits, limit) == getattr(DEFAULTS.limits, limit)


def test_a_nan_limit_is_refused(config_path: Path) -> None:
    config, lines, _ = load(config_path, '{"limits": {"default_timeout_seconds": NaN}}')
    assert lines == [f'config.json: "limits.default_timeout_seconds": Input should be a finite number (got nan); '
                     "using the default"]
    assert config.limits.default_timeout_seconds == 120


@pytest.mark.parametrize("section,value", [("tools", "x"), ("tools", None), ("limits", []), ("capabilities", True),
                                           ("journal", "FULL")])
def test_a_section_that_is_not_an_object_falls_back_whole(config_path: Path, section: str, value: Any) -> None:
    config, lines, _ = load(config_path, {section: value, "capabilities": {"video": True}}
                            if section != "capabilities" else {section: value})
    assert len(lines) == 1
    assert lines[0].startswith(f'config.json: "{section}": Input should be a valid dictionary')
    assert lines[0].endswith(f"(got {value!r}); using the default")
    assert getattr(config, section) == getattr(DEFAULTS, section)
    if section != "capabilities":
        assert config.capabilities.video is True


def test_tools_disabled_must_be_a_list_of_names(config_path: Path) -> None:
    config, lines, _ = load(config_path, {"tools": {"disabled": "word_count"}})
    assert lines == [f"config.json: \"tools.disabled\": Input should be a valid list (got 'word_count'); "
                     "using the default"]
    assert config.tools.disabled == []


def test_a_bad_entry_of_tools_disabled_is_dropped_and_the_others_kept(config_path: Path) -> None:
    config, lines, _ = load(config_path, {"tools": {"disabled": ["a", 1, "b", None]}})
    assert config.tools.disabled == ["a", "b"]
    assert lines == [
        f'config.json: "tools.disabled.1": Input should be a valid string (got 1); using the default',
        f'config.json: "tools.disabled.3": Input should be a valid string (got None); using the default',
    ]


def test_unknown_top_level_keys_are_warnings_with_suggestions(config_path: Path) -> None:
    config, lines, problems = load(config_path, {"tool": {"disabled": ["x"]}, "limit": {}, "colour": "blue"})
    assert config == DEFAULTS
    assert lines == [
        f'config.json: unknown field "tool" is ignored (did you mean "tools"?)',
        f'config.json: unknown field "limit" is ignored (did you mean "limits"?)',
        f'config.json: unknown field "colour" is ignored',
    ]
    assert {p.severity for p in problems} == {"warning"}


def test_an_unknown_key_does_not_drop_its_neighbours(config_path: Path) -> None:
    config, lines, problems = load(config_path, {"limits": {"default_timeout": 5, "kill_grace_seconds": 1}})
    assert config.limits.kill_grace_seconds == 1
    assert config.limits.default_timeout_seconds == 120
    assert [p.severity for p in problems] == ["warning"]
    assert lines[0].startswith(f'config.json: unknown field "limits.default_timeout" is ignored')


@pytest.mark.parametrize("section,typo,meant", [
    ("limits", "default_timeout", "default_timeout_seconds"),
    ("limits", "output_cap", "output_cap_bytes"),
    ("tools", "disable", "disabled"),
    ("capabilities", "visoin", "vision"),
    ("journal", "synchronus", "synchronous"),
])
def test_unknown_nested_keys_suggest_the_key_meant(config_path: Path, section: str, typo: str, meant: str) -> None:
    _, lines, _ = load(config_path, {section: {typo: 1}})
    assert lines == [f'config.json: unknown field "{section}.{typo}" is ignored (did you mean "{meant}"?)']


@pytest.mark.parametrize("capabilities,expected", [
    ({}, "vision=true,audio=false,pdf=true,video=false"),
    ({"vision": False}, "vision=false,audio=false,pdf=true,video=false"),
    ({"vision": False, "audio": True, "pdf": False, "video": True}, "vision=false,audio=true,pdf=false,video=true"),
])
def test_capabilities_become_the_zagent_caps_string(config_path: Path, capabilities: dict[str, bool],
                                                    expected: str) -> None:
    config, lines, _ = load(config_path, {"capabilities": capabilities})
    assert lines == []
    assert config.capabilities.as_env() == expected


def test_a_bad_capability_falls_back_to_its_default_in_zagent_caps(config_path: Path) -> None:
    config, lines, _ = load(config_path, {"capabilities": {"vision": "false", "video": True}})
    assert len(lines) == 1
    assert config.capabilities.as_env() == "vision=true,audio=false,pdf=true,video=true"


def test_caps_string_matches_the_reference_format() -> None:
    # vision=true,audio=false,pdf=true,video=false: lowercase booleans, this order, no spaces
    caps = CapabilitiesConfig(vision=True, audio=False, pdf=True, video=False).as_env()
    assert caps == "vision=true,audio=false,pdf=true,video=false"
    assert dict(part.split("=") for part in caps.split(",")).keys() == {"vision", "audio", "pdf", "video"}


def test_loading_does_not_modify_the_file(config_path: Path) -> None:
    content = {"limits": {"output_cap_bytes": 1, "default_timeout": 3}, "tools": {"disabled": ["x"]}}
    write(config_path, content)
    before = config_path.read_bytes()
    load_config(config_path)
    assert config_path.read_bytes() == before
