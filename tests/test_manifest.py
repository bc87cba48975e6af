"""Tool manifests: every field of the reference, and every way a manifest can be broken.

Each test writes real tool folders into a temporary agent home and loads them with
``load_tools``, asserting what a user sees: which tools load, and the exact problem lines
(``tools/<folder>: ...``) that ``zagent tools list`` and ``zagent doctor`` print.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from conftest import PYTHON, python_tool, write_tool
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from zagent_core import Home, ToolSet, load_tools
from zagent_core.builtins import registry
from zagent_core.config import Config, ToolsConfig
from zagent_core.tools.manifest import current_platform

HERE = current_platform()
OTHER = "windows" if HERE != "windows" else "linux"


def minimal(**fields: Any) -> dict[str, Any]:
    """The smallest valid manifest (absolute interpreter: no PATH lookup), plus ``fields``."""
    manifest: dict[str, Any] = {"description": "A test tool. Use in tests.", "command": [PYTHON]}
    manifest.update(fields)
    return manifest


def load(home_dir: Path, config: Config | None = None) -> ToolSet:
    """The tools of a home as an engine loads them: the built-ins' names reserved."""
    return load_tools(Home(home_dir), config, reserved=registry.names())


def lines(toolset: ToolSet) -> list[str]:
    """The problems as the user reads them."""
    return [str(p) for p in toolset.problems]


def load_one(home_dir: Path, manifest: dict[str, Any] | str, folder: str = "t") -> ToolSet:
    write_tool(home_dir, folder, manifest)
    return load(home_dir)


def only_error(toolset: ToolSet, folder: str = "t") -> str:
    """The single problem of a manifest that must not load, asserting it is an error."""
    assert toolset.tools == {}
    assert len(toolset.problems) == 1, lines(toolset)
    problem = toolset.problems[0]
    assert problem.severity == "error"
    assert problem.source == f"tools/{folder}"
    return str(problem)


def make_executable(path: Path, text: str = "#!/bin/sh\necho hi\n") -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


# --- the happy path and defaults -----------------------------------------------------------


def test_minimal_manifest_loads_with_the_reference_defaults(home_dir: Path) -> None:
    toolset = load_one(home_dir, minimal(), folder="my_tool")
    assert toolset.problems == []
    tool = toolset.tools["my_tool"]
    assert tool.name == "my_tool"
    assert tool.description == "A test tool. Use in tests."
    assert tool.folder == (home_dir / "tools" / "my_tool").resolve()
    m = tool.manifest
    assert m.input == "stdin_json"
    assert m.output == "text"
    assert m.cwd == "workspace"
    assert m.env == {}
    assert m.timeout_seconds == 0
    assert m.background is False
    assert m.permission == "allow"
    assert m.attach_outputs is False
    assert m.platforms is None
    # No parameters: a tool that takes an (empty) object.
    assert m.parameters["type"] == "object"
    assert tool.validator.is_valid({})


def test_the_seed_word_count_manifest_loads_with_every_field_it_sets(home_dir: Path) -> None:
    manifest = {
        "name": "word_count",
        "description": "Count words and list the most frequent ones. Use when the user wants text statistics.",
        "parameters": {
            "type": "object",
            "properties": {"text": {"type": "string"}, "top": {"type": "integer", "minimum": 1}},
            "required": ["text"],
            "additionalProperties": False,
        },
        "command": ["python", "word_count.py"],
        "input": "stdin_json",
        "output": "json",
        "timeout_seconds": 30,
    }
    folder = write_tool(home_dir, "word_count", manifest, {"word_count.py": "print('{}')\n"})
    toolset = load(home_dir)
    assert lines(toolset) == []
    tool = toolset.tools["word_count"]
    assert tool.argv_template[1] == str((folder / "word_count.py").resolve())
    assert tool.manifest.output == "json"
    assert tool.manifest.timeout_seconds == 30
    assert tool.manifest.parameters == manifest["parameters"]
    assert tool.manifest_hash == hashlib.sha256((folder / "word_count.json").read_bytes()).hexdigest()


def test_every_field_set_to_a_non_default_value_loads(home_dir: Path) -> None:
    manifest = minimal(
        name="all_fields",
        parameters={"type": "object", "properties": {"x": {"type": "integer"}}, "additionalProperties": False},
        input="env",
        output="json",
        cwd="tool_dir",
        env={"MY_KEY": "secret", "DATA": "{dir}/data"},
        timeout_seconds=-1,
        background=True,
        permission="ask",
        attach_outputs=True,
        platforms=[HERE],
    )
    toolset = load_one(home_dir, manifest, folder="folder_name")
    assert lines(toolset) == []
    tool = toolset.tools["all_fields"]
    m = tool.manifest
    assert (m.input, m.output, m.cwd) == ("env", "json", "tool_dir")
    assert m.env == {"MY_KEY": "secret", "DATA": "{dir}/data"}
    assert (m.timeout_seconds, m.background, m.permission, m.attach_outputs) == (-1, True, "ask", True)
    assert m.platforms == [HERE]


@pytest.mark.parametrize("value", ["args_json", "env", "stdin_json"])
def test_input_modes(home_dir: Path, value: str) -> None:
    assert load_one(home_dir, minimal(input=value)).tools["t"].manifest.input == value


@pytest.mark.parametrize("field,value", [("output", "text"), ("output", "json"), ("cwd", "workspace"),
                                         ("cwd", "tool_dir"), ("permission", "allow"), ("permission", "ask")])
def test_enum_fields_accept_their_values(home_dir: Path, field: str, value: str) -> None:
    assert getattr(load_one(home_dir, minimal(**{field: value})).tools["t"].manifest, field) == value


@pytest.mark.parametrize("field,value,allowed", [
    ("input", "stdin", "'stdin_json', 'args_json' or 'env'"),
    ("output", "yaml", "'text' or 'json'"),
    ("cwd", "home", "'workspace' or 'tool_dir'"),
    ("permission", "deny", "'allow' or 'ask'"),
])
def test_enum_fields_refuse_other_values_and_list_the_allowed_ones(
    home_dir: Path, field: str, value: str, allowed: str
) -> None:
    message = only_error(load_one(home_dir, minimal(**{field: value})))
    assert message == f"tools/t: not loaded: \"{field}\": Input should be {allowed} (got '{value}')"


# --- name -------------------------------------------------------------------------------------


def test_name_defaults_to_the_folder_name(home_dir: Path) -> None:
    assert list(load_one(home_dir, minimal(), folder="folder_42").tools) == ["folder_42"]


def test_explicit_name_overrides_the_folder_name(home_dir: Path) -> None:
    toolset = load_one(home_dir, minimal(name="real_name"), folder="some_folder")
    assert list(toolset.tools) == ["real_name"]
    assert toolset.tools["real_name"].folder.name == "some_folder"


def test_null_name_means_the_folder_name(home_dir: Path) -> None:
    assert list(load_one(home_dir, minimal(name=None), folder="nameless").tools) == ["nameless"]


@pytest.mark.parametrize("name", ["Bad", "with-dash", "with space", "", "emoji_\u00e9", "trailing_newline\n"])
def test_name_must_be_lowercase_letters_digits_and_underscore(home_dir: Path, name: str) -> None:
    message = only_error(load_one(home_dir, minimal(name=name)))
    assert message.startswith('tools/t: not loaded: "name": ')
    assert repr(name) in message  # the user sees the name they wrote


def test_a_bad_name_is_said_in_words_with_a_name_that_would_do_not_as_a_pattern(home_dir: Path) -> None:
    message = only_error(load_one(home_dir, minimal(name="Word-Count")))
    assert message == ('tools/t: not loaded: "name": must be lowercase letters, digits and _ (the name the model '
                       'calls), e.g. "word_count" (got \'Word-Count\')')
    assert "pattern" not in only_error(load_one(home_dir, minimal(name="!!")))


def test_name_must_be_a_string(home_dir: Path) -> None:
    assert only_error(load_one(home_dir, minimal(name=3))) == 'tools/t: not loaded: "name": Input should be a valid string (got 3)'


def test_a_folder_name_that_is_not_a_valid_name_says_to_rename_it_or_set_name(home_dir: Path) -> None:
    message = only_error(load_one(home_dir, minimal(), folder="My-Tool"), folder="My-Tool")
    assert message == (
        'tools/My-Tool: not loaded: the name defaults to the folder name "My-Tool", which is not lowercase '
        'letters, digits and _; rename the folder or set "name"'
    )


def test_a_badly_named_folder_loads_when_name_is_set(home_dir: Path) -> None:
    toolset = load_one(home_dir, minimal(name="my_tool"), folder="My Tool")
    assert lines(toolset) == []
    assert list(toolset.tools) == ["my_tool"]


@pytest.mark.parametrize("how", ["explicit", "folder"])
def test_the_built_in_name_terminal_is_reserved(home_dir: Path, how: str) -> None:
    if how == "explicit":
        toolset = load_one(home_dir, minimal(name="terminal"), folder="my_terminal")
        folder = "my_terminal"
    else:
        toolset = load_one(home_dir, minimal(), folder="terminal")
        folder = "terminal"
    assert only_error(toolset, folder) == (
        f'tools/{folder}: not loaded: "terminal" is the name of a built-in tool; choose another name'
    )


# --- description ----------------------------------------------------------------------------


def test_description_is_required(home_dir: Path) -> None:
    manifest = minimal()
    del manifest["description"]
    assert only_error(load_one(home_dir, manifest)) == 'tools/t: not loaded: missing required field "description"'


@pytest.mark.parametrize("blank", ["", "   ", "\n\t"])
def test_a_blank_description_is_refused_with_the_reason(home_dir: Path, blank: str) -> None:
    message = only_error(load_one(home_dir, minimal(description=blank)))
    assert message.startswith('tools/t: not loaded: "description": ')
    assert "must say what the tool does and when to use it" in message


def test_description_must_be_a_string(home_dir: Path) -> None:
    message = only_error(load_one(home_dir, minimal(description=["Count", "words"])))
    assert message == "tools/t: not loaded: \"description\": Input should be a valid string (got ['Count', 'words'])"


def test_every_problem_of_one_manifest_is_reported(home_dir: Path) -> None:
    toolset = load_one(home_dir, {"output": "xml", "timeout": 5})
    assert toolset.tools == {}
    assert lines(toolset) == [
        'tools/t: unknown field "timeout" is ignored (did you mean "timeout_seconds"?)',
        'tools/t: not loaded: missing required field "description"',
        'tools/t: not loaded: missing required field "command"',
        "tools/t: not loaded: \"output\": Input should be 'text' or 'json' (got 'xml')",
    ]
    assert [p.severity for p in toolset.problems] == ["warning", "error", "error", "error"]


# --- parameters -----------------------------------------------------------------------------


def test_parameters_are_compiled_once_into_the_tools_validator(home_dir: Path) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    tool = load_one(home_dir, minimal(parameters=schema)).tools["t"]
    assert tool.validator.schema == schema
    assert tool.validator.is_valid({"n": 1})
    assert not tool.validator.is_valid({})


@pytest.mark.parametrize("schema", [
    {"type": "string"},
    {"type": "array", "items": {"type": "string"}},
    {"properties": {"a": {"type": "string"}}},
    {},
])
def test_parameters_must_be_of_type_object(home_dir: Path, schema: dict[str, Any]) -> None:
    message = only_error(load_one(home_dir, minimal(parameters=schema)))
    assert message.startswith('tools/t: not loaded: "parameters": ')
    assert 'must be a JSON Schema with "type": "object" (the arguments are one object)' in message


@pytest.mark.parametrize("value", [[], "object", 3, None])
def test_parameters_must_be_a_json_object(home_dir: Path, value: Any) -> None:
    message = only_error(load_one(home_dir, minimal(parameters=value)))
    assert message == f'tools/t: not loaded: "parameters": Input should be a valid dictionary (got {value!r})'


@pytest.mark.parametrize("schema,where", [
    ({"type": "object", "properties": {"a": {"type": "nope"}}}, "properties/a/type"),
    ({"type": "object", "required": "text"}, "required"),
    ({"type": "object", "properties": {"a": {"minimum": "one"}}}, "properties/a/minimum"),
    ({"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}}, "properties/a/pattern"),
    ({"type": "object", "additionalProperties": "no"}, "additionalProperties"),
])
def test_parameters_are_checked_against_the_metaschema(home_dir: Path, schema: dict[str, Any], where: str) -> None:
    message = only_error(load_one(home_dir, minimal(parameters=schema)))
    assert message.startswith('tools/t: not loaded: "parameters": ')
    assert f"is not a valid JSON Schema at {where}: " in message


def test_a_non_string_schema_dialect_is_reported_not_raised(home_dir: Path) -> None:
    # "$schema" names the JSON Schema dialect; a list there must be a problem, not a crash.
    toolset = load_one(home_dir, minimal(parameters={"type": "object", "$schema": ["draft-07"]}))
    message = only_error(toolset)
    assert message.startswith('tools/t: not loaded: "parameters": ')


def test_a_dangling_ref_in_parameters_never_makes_loading_or_a_call_raise(home_dir: Path) -> None:
    from zagent_core.tools.validation import validate_arguments

    schema = {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}
    toolset = load_one(home_dir, minimal(parameters=schema))
    if "t" not in toolset.tools:
        # Refusing it at load time is the better answer: the reason names the reference.
        assert "#/$defs/missing" in only_error(toolset)
        return
    # Otherwise the call must get a problem the model can read, not an exception.
    result = validate_arguments(toolset.tools["t"].validator, {"a": 1})
    assert not result.ok


# --- command ----------------------------------------------------------------------------------


def test_command_is_required(home_dir: Path) -> None:
    manifest = minimal()
    del manifest["command"]
    assert only_error(load_one(home_dir, manifest)) == 'tools/t: not loaded: missing required field "command"'


def test_command_must_not_be_empty(home_dir: Path) -> None:
    message = only_error(load_one(home_dir, minimal(command=[])))
    assert message == 'tools/t: not loaded: "command": List should have at least 1 item after validation, not 0 (got [])'


@pytest.mark.parametrize("program", ["", "  "])
def test_the_program_must_not_be_blank(home_dir: Path, program: str) -> None:
    message = only_error(load_one(home_dir, minimal(command=[program, "x.py"])))
    assert message.startswith('tools/t: not loaded: "command": ')
    assert "the program (first element) is empty" in message


@pytest.mark.parametrize("command", ["python tool.py", {"argv": ["python"]}, [["python"]], ["python", 3]])
def test_command_must_be_a_list_of_strings(home_dir: Path, command: Any) -> None:
    message = only_error(load_one(home_dir, minimal(command=command)))
    assert message.startswith('tools/t: not loaded: "command')


def test_a_program_not_on_path_says_to_install_it_or_give_its_full_path(home_dir: Path) -> None:
    message = only_error(load_one(home_dir, minimal(command=["zagent_no_such_program_xyz", "a.js"])))
    assert message == (
        'tools/t: not loaded: program "zagent_no_such_program_xyz" was not found on PATH; '
        'install it or give its full path in "command"'
    )


def test_an_absolute_program_that_does_not_exist_is_reported(home_dir: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "tool.exe"
    message = only_error(load_one(home_dir, minimal(command=[str(missing)])))
    assert message == f'tools/t: not loaded: program "{missing}" does not exist'


def test_the_program_is_resolved_on_path_once_at_load(home_dir: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    program = make_executable(bin_dir / "mytool")
    monkeypatch.setenv("PATH", str(bin_dir))
    toolset = load_one(home_dir, minimal(command=["mytool", "--flag"]))
    assert lines(toolset) == []
    tool = toolset.tools["t"]
    assert tool.argv_template == (str(program), "--flag")
    # Later PATH changes do not change a loaded tool: the lookup is not repeated per call.
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert tool.argv_template[0] == str(program)


def test_python_on_path_is_used_when_there(home_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = make_executable(bin_dir / "python")
    monkeypatch.setenv("PATH", str(bin_dir))
    assert load_one(home_dir, minimal(command=["python", "-V"])).tools["t"].argv_template[0] == str(fake)


@pytest.mark.parametrize("program", ["python", "python3"])
def test_python_falls_back_to_the_running_interpreter_only_when_not_on_path(
    home_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, program: str
) -> None:
    empty = tmp_path / "empty_bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    toolset = load_one(home_dir, minimal(command=[program, "-V"]))
    assert lines(toolset) == []
    assert toolset.tools["t"].argv_template == (sys.executable, "-V")


def test_other_interpreters_have_no_fallback(home_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty_bin"))
    message = only_error(load_one(home_dir, minimal(command=["node", "hello.js"])))
    assert 'program "node" was not found on PATH; install it or give its full path in "command"' in message


def test_a_program_inside_the_tool_folder_is_found_there(home_dir: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty_bin"))
    folder = write_tool(home_dir, "t", minimal(command=["bin/mytool", "x"]))
    (folder / "bin").mkdir()
    program = make_executable(folder / "bin" / "mytool")
    assert load(home_dir).tools["t"].argv_template == (str(program.resolve()), "x")


def test_a_relative_program_is_not_looked_up_in_the_engines_current_folder(
    home_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Where zagent happens to be started must not decide which program a tool runs.
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "bin").mkdir(parents=True)
    make_executable(elsewhere / "bin" / "helper")
    monkeypatch.chdir(elsewhere)
    message = only_error(load_one(home_dir, minimal(command=["bin/helper"])))
    assert '"bin/helper"' in message


def test_dir_and_home_placeholders_expand_at_load_and_call_placeholders_stay(home_dir: Path) -> None:
    folder = write_tool(home_dir, "t", minimal(command=["{dir}/run.sh", "{home}/data", "{workspace}", "{scratch}/x",
                                                        "{output_dir}", "{unknown}"]))
    make_executable(folder / "run.sh")
    tool = load(home_dir).tools["t"]
    root = str(home_dir.resolve())
    assert tool.argv_template == (str(folder.resolve() / "run.sh"), f"{root}/data", "{workspace}", "{scratch}/x",
                                  "{output_dir}", "{unknown}")


def test_relative_arguments_naming_files_in_the_tool_folder_are_resolved_there(home_dir: Path) -> None:
    tools = home_dir / "tools"
    (tools / "outside.txt").write_text("not mine")
    folder = write_tool(
        home_dir, "t",
        minimal(command=[PYTHON, "main.py", "data/words.txt", "../outside.txt", "data/../main.py", "missing.txt",
                         "-v", "data", "text with spaces"]),
        {"main.py": "print(1)\n"},
    )
    (folder / "data").mkdir()
    (folder / "data" / "words.txt").write_text("a b c")
    resolved = folder.resolve()
    assert load(home_dir).tools["t"].argv_template == (
        PYTHON,
        str(resolved / "main.py"),
        str(resolved / "data" / "words.txt"),
        "../outside.txt",            # names a file, but outside the tool folder: left as written
        str(resolved / "main.py"),   # ../ that stays inside is fine
        "missing.txt",               # not a file of the tool: passed as written
        "-v",
        "data",                      # a folder, not a file
        "text with spaces",
    )


def test_an_argument_escaping_the_tool_folder_through_a_symlink_is_not_resolved(home_dir: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("outside")
    folder = write_tool(home_dir, "t", minimal(command=[PYTHON, "link.txt"]))
    (folder / "link.txt").symlink_to(secret)
    assert load(home_dir).tools["t"].argv_template == (PYTHON, "link.txt")


# --- env, timeout, booleans, platforms ---------------------------------------------------


def test_env_is_a_dict_of_strings(home_dir: Path) -> None:
    assert only_error(load_one(home_dir, minimal(env={"A": "x", "N": 1}))) == (
        'tools/t: not loaded: "env.N": Input should be a valid string (got 1)'
    )


@pytest.mark.parametrize("value", [[], "A=1", ["A=1"]])
def test_env_must_be_an_object(home_dir: Path, value: Any) -> None:
    assert only_error(load_one(home_dir, minimal(env=value))) == (
        f'tools/t: not loaded: "env": Input should be a valid dictionary (got {value!r})'
    )


@pytest.mark.parametrize("value", [0, -1, 30, 0.5, 3600])
def test_timeout_seconds_accepts_default_none_and_positive(home_dir: Path, value: float) -> None:
    toolset = load_one(home_dir, minimal(timeout_seconds=value))
    assert lines(toolset) == []
    assert toolset.tools["t"].manifest.timeout_seconds == value


@pytest.mark.parametrize("value", [-2, -0.5, -100])
def test_timeout_seconds_refuses_other_negatives_with_the_meaning_of_each_value(home_dir: Path, value: float) -> None:
    message = only_error(load_one(home_dir, minimal(timeout_seconds=value)))
    assert message.startswith('tools/t: not loaded: "timeout_seconds": ')
    assert "must be 0 (the engine default), -1 (no timeout) or a number of seconds" in message
    assert f"(got {value})" in message


@pytest.mark.parametrize("value", ["NaN", "-Infinity"])
def test_timeout_seconds_refuses_non_numbers_python_json_accepts(home_dir: Path, value: str) -> None:
    # Python's json reads NaN/Infinity; a NaN timeout would silently never fire.
    text = json.dumps(minimal())[:-1] + f', "timeout_seconds": {value}}}'
    message = only_error(load_one(home_dir, text))
    assert message.startswith('tools/t: not loaded: "timeout_seconds": ')


@pytest.mark.parametrize("field,value,expected", [
    ("timeout_seconds", "30", "Input should be a valid number (got '30')"),
    ("timeout_seconds", True, "Input should be a valid number (got True)"),
    ("background", "true", "Input should be a valid boolean (got 'true')"),
    ("background", 1, "Input should be a valid boolean (got 1)"),
    ("attach_outputs", "yes", "Input should be a valid boolean (got 'yes')"),
    ("attach_outputs", 0, "Input should be a valid boolean (got 0)"),
])
def test_values_are_not_coerced(home_dir: Path, field: str, value: Any, expected: str) -> None:
    assert only_error(load_one(home_dir, minimal(**{field: value}))) == f'tools/t: not loaded: "{field}": {expected}'


@pytest.mark.parametrize("field", ["background", "attach_outputs"])
def test_boolean_fields(home_dir: Path, field: str) -> None:
    assert getattr(load_one(home_dir, minimal(**{field: True})).tools["t"].manifest, field) is True


def test_platforms_for_this_platform_loads(home_dir: Path) -> None:
    assert list(load_one(home_dir, minimal(platforms=["windows", "linux", "darwin"])).tools) == ["t"]
    assert list(load_one(home_dir, minimal(platforms=[HERE]), folder="u").tools) == ["t", "u"]


def test_a_manifest_for_another_platform_is_skipped_silently(home_dir: Path) -> None:
    # Its program does not exist here (a Windows tool on Linux): no "not found" either.
    windows_only = minimal(command=["powershell", "-File", "hello.ps1"], platforms=[OTHER], timeout=3)
    toolset = load_one(home_dir, windows_only)
    assert toolset.tools == {}
    assert toolset.problems == []


@pytest.mark.parametrize("value,expected", [
    (["beos"], "\"platforms.0\": Input should be 'windows', 'linux' or 'darwin' (got 'beos')"),
    (["Linux"], "\"platforms.0\": Input should be 'windows', 'linux' or 'darwin' (got 'Linux')"),
    ("linux", "\"platforms\": Input should be a valid list (got 'linux')"),
])
def test_platforms_must_be_a_list_of_known_platforms(home_dir: Path, value: Any, expected: str) -> None:
    assert only_error(load_one(home_dir, minimal(platforms=value))) == f"tools/t: not loaded: {expected}"


def test_an_empty_platforms_list_is_reported_not_silently_skipped(home_dir: Path) -> None:
    # "platforms": [] restricts the tool to no platform at all: a mistake, and the user must hear of it.
    message = only_error(load_one(home_dir, minimal(platforms=[])))
    assert message.startswith('tools/t: not loaded: "platforms"')


def test_folders_sharing_a_name_with_different_platforms_load_the_one_for_this_platform(home_dir: Path) -> None:
    write_tool(home_dir, "mytool_a_other", minimal(name="mytool", description="other", platforms=[OTHER],
                                                   command=["mytool.exe"]))
    write_tool(home_dir, "mytool_b_here", minimal(name="mytool", description="here", platforms=[HERE]))
    write_tool(home_dir, "mytool_c_other", minimal(name="mytool", description="other 2", platforms=[OTHER]))
    toolset = load(home_dir)
    assert toolset.problems == []
    assert list(toolset.tools) == ["mytool"]
    assert toolset.tools["mytool"].description == "here"
    assert toolset.tools["mytool"].folder.name == "mytool_b_here"


def test_a_duplicate_name_on_the_same_platform_is_reported_naming_the_first_folder(home_dir: Path) -> None:
    write_tool(home_dir, "a_first", minimal(name="shared", description="first"))
    write_tool(home_dir, "b_second", minimal(name="shared", description="second", platforms=[HERE]))
    toolset = load(home_dir)
    assert toolset.tools["shared"].description == "first"
    assert lines(toolset) == [
        'tools/b_second: not loaded: the name "shared" is already used by tools/a_first; '
        'rename one of them or limit each to other "platforms"'
    ]
    assert toolset.problems[0].severity == "error"


def test_a_folder_named_like_another_tools_explicit_name_is_a_duplicate(home_dir: Path) -> None:
    write_tool(home_dir, "alpha", minimal(name="beta"))
    write_tool(home_dir, "beta", minimal())
    toolset = load(home_dir)
    assert list(toolset.tools) == ["beta"]
    assert toolset.tools["beta"].folder.name == "alpha"
    assert lines(toolset) == [
        'tools/beta: not loaded: the name "beta" is already used by tools/alpha; '
        'rename one of them or limit each to other "platforms"'
    ]


# --- the file itself --------------------------------------------------------------------------


@pytest.mark.parametrize("text,reason", [
    ("{", "t.json is not valid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    ('{"description": "x",}', "t.json is not valid JSON: Expecting property name enclosed in double quotes: "
                              "line 1 column 21 (char 20)"),
    ("", "t.json is not valid JSON: Expecting value: line 1 column 1 (char 0)"),
    ("[1, 2]", "t.json must be a JSON object"),
    ('"a tool"', "t.json must be a JSON object"),
    ("null", "t.json must be a JSON object"),
    ("42", "t.json must be a JSON object"),
])
def test_a_manifest_that_is_not_a_json_object_is_reported(home_dir: Path, text: str, reason: str) -> None:
    assert only_error(load_one(home_dir, text)) == f"tools/t: not loaded: {reason}"


def test_a_manifest_that_is_not_utf8_is_reported(home_dir: Path) -> None:
    folder = home_dir / "tools" / "t"
    folder.mkdir()
    (folder / "t.json").write_bytes(b'{"description": "\xff\xfe"}')
    assert only_error(load(home_dir)).startswith("tools/t: not loaded: ")


def test_a_deeply_nested_manifest_is_reported_not_raised(home_dir: Path) -> None:
    depth = 100_000
    text = '{"description": "d", "command": ["x"], "env": ' + "[" * depth + "]" * depth + "}"
    assert only_error(load_one(home_dir, text)).startswith("tools/t: not loaded: ")


def test_a_folder_without_its_manifest_is_reported(home_dir: Path) -> None:
    folder = home_dir / "tools" / "lonely"
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps(minimal()))  # wrong name: must be lonely.json
    assert only_error(load(home_dir), "lonely") == "tools/lonely: not loaded: no manifest (expected lonely.json in it)"


def test_an_unknown_field_is_a_warning_naming_it_and_the_tool_still_loads(home_dir: Path) -> None:
    toolset = load_one(home_dir, minimal(timeout=30, author="me"))
    assert list(toolset.tools) == ["t"]
    assert toolset.tools["t"].manifest.timeout_seconds == 0  # the typo did not set anything
    assert lines(toolset) == [
        'tools/t: unknown field "timeout" is ignored (did you mean "timeout_seconds"?)',
        'tools/t: unknown field "author" is ignored',
    ]
    assert {p.severity for p in toolset.problems} == {"warning"}
    assert toolset.broken == []


@pytest.mark.parametrize("typo,meant", [("descripton", "description"), ("paramters", "parameters"),
                                        ("platform", "platforms"), ("attach_output", "attach_outputs")])
def test_unknown_field_suggestions(home_dir: Path, typo: str, meant: str) -> None:
    toolset = load_one(home_dir, minimal(**{typo: "x"}))
    assert f'tools/t: unknown field "{typo}" is ignored (did you mean "{meant}"' in lines(toolset)[0]


def test_messages_do_not_leak_pydantic_wording(home_dir: Path) -> None:
    # The user wrote a manifest, not Python: "Value error, ..." is the library talking.
    write_tool(home_dir, "a", minimal(description=" "))
    write_tool(home_dir, "b", minimal(timeout_seconds=-5))
    write_tool(home_dir, "c", minimal(parameters={"type": "string"}))
    write_tool(home_dir, "d", minimal(command=[""]))
    toolset = load(home_dir)
    assert len(toolset.problems) == 4
    for line in lines(toolset):
        assert "Value error" not in line, line


# --- the tools folder -------------------------------------------------------------------------


def test_hidden_folders_pycache_and_stray_files_are_ignored(home_dir: Path) -> None:
    for hidden in (".git", ".hidden_tool", "__pycache__", "node_modules"):
        write_tool(home_dir, hidden, "{ broken")
    (home_dir / "tools" / "README.md").write_text("my tools")
    (home_dir / "tools" / "loose.json").write_text("{}")
    write_tool(home_dir, "real", minimal())
    toolset = load(home_dir)
    assert list(toolset.tools) == ["real"]
    assert toolset.problems == []


def test_a_home_without_a_tools_folder_has_no_tools_and_no_problems(tmp_path: Path) -> None:
    toolset = load(tmp_path / "fresh_home")
    assert toolset.tools == {} and toolset.problems == []


def test_one_broken_tool_does_not_stop_the_others(home_dir: Path) -> None:
    write_tool(home_dir, "a_good", minimal())
    write_tool(home_dir, "b_bad", "not json")
    write_tool(home_dir, "c_good", minimal())
    toolset = load(home_dir)
    assert sorted(toolset.tools) == ["a_good", "c_good"]
    assert [p.source for p in toolset.broken] == ["tools/b_bad"]


def test_python_tool_fixture_loads(home_dir: Path) -> None:
    python_tool(home_dir, "fixture_tool", "print('hi')\n")
    assert list(load(home_dir).tools) == ["fixture_tool"]


# --- tools.disabled ---------------------------------------------------------------------------


def test_a_disabled_tool_is_loaded_but_not_offered(home_dir: Path) -> None:
    write_tool(home_dir, "keep", minimal())
    write_tool(home_dir, "drop", minimal())
    toolset = load(home_dir, Config(tools=ToolsConfig(disabled=["drop"])))
    assert sorted(toolset.tools) == ["drop", "keep"]
    assert [t.name for t in toolset.offered()] == ["keep"]
    assert toolset.problems == []


def test_disabling_a_tool_that_does_not_exist_is_a_warning_with_a_suggestion(home_dir: Path) -> None:
    write_tool(home_dir, "word_count", minimal())
    toolset = load(home_dir, Config(tools=ToolsConfig(disabled=["word_cont", "zzz"])))
    assert list(toolset.tools) == ["word_count"]
    assert lines(toolset) == [
        'config.json: tools.disabled names "word_cont", which is not a loaded tool (did you mean "word_count"?)',
        'config.json: tools.disabled names "zzz", which is not a loaded tool',
    ]
    assert {p.severity for p in toolset.problems} == {"warning"}


# --- property: loading never raises and every broken folder is reported -------------------------

json_scalars = (st.none() | st.booleans() | st.integers(min_value=-10**6, max_value=10**6)
                | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12))
#: Keys a manifest (or a schema inside it) might plausibly have, plus anything at all.
interesting_keys = st.sampled_from([
    "name", "description", "parameters", "command", "input", "output", "cwd", "env", "timeout_seconds",
    "background", "permission", "attach_outputs", "platforms", "timeout", "type", "properties", "required",
    "items", "additionalProperties", "enum", "minimum", "$schema", "$ref", "$defs", "pattern",
]) | st.text(max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(interesting_keys, children, max_size=4),
    max_leaves=12,
)

FIELDS = ["name", "description", "parameters", "command", "input", "output", "cwd", "env", "timeout_seconds",
          "background", "permission", "attach_outputs", "platforms"]


def valid_manifest(folder: str) -> dict[str, Any]:
    return {
        "name": folder,
        "description": "Fuzzed tool. Use never.",
        "parameters": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}},
                       "required": ["n"], "additionalProperties": False},
        "command": [PYTHON, "main.py", "{workspace}"],
        "input": "args_json",
        "output": "json",
        "cwd": "tool_dir",
        "env": {"K": "{dir}"},
        "timeout_seconds": 5,
        "background": False,
        "permission": "allow",
        "attach_outputs": True,
        "platforms": ["linux", "darwin", "windows"],
    }


@st.composite
def mutated_manifests(draw: st.DrawFn) -> dict[str, Any]:
    manifest = valid_manifest("x")
    for key in FIELDS:
        action = draw(st.sampled_from(["keep", "keep", "drop", "replace"]))
        if action == "drop":
            del manifest[key]
        elif action == "replace":
            manifest[key] = draw(json_values)
    if draw(st.booleans()):
        # Get past the "type": "object" gate so the metaschema check and compilation are exercised.
        manifest["parameters"] = {**draw(st.dictionaries(interesting_keys, json_values, max_size=4)), "type": "object"}
    extra = draw(st.dictionaries(interesting_keys, json_values, max_size=2))
    manifest.update(extra)
    return manifest


def excluded_here(raw: Any) -> bool:
    """A manifest that asks for other platforms only: it may be skipped without a word."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except (ValueError, RecursionError):
            return False
    return (isinstance(raw, dict) and isinstance(raw.get("platforms"), list)
            and HERE not in raw["platforms"])


def check_every_folder_is_accounted_for(raws: list[Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        folders = [f"f{i}" for i in range(len(raws))]
        for folder, raw in zip(folders, raws):
            write_tool(home, folder, raw if isinstance(raw, str) else json.dumps(raw), {"main.py": "print(1)\n"})
        toolset = load_tools(Home(home))  # must not raise
        loaded_from = {tool.folder.name: name for name, tool in toolset.tools.items()}
        for problem in toolset.problems:
            assert problem.message.strip()
            assert problem.source in {f"tools/{f}" for f in folders}
        errors = {p.source for p in toolset.problems if p.severity == "error"}
        for folder, raw in zip(folders, raws):
            loaded = folder in loaded_from
            reported = f"tools/{folder}" in errors
            assert not (loaded and reported), (folder, raw, [str(p) for p in toolset.problems])
            if not excluded_here(raw):
                assert loaded or reported, (folder, raw, [str(p) for p in toolset.problems])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(json_values, min_size=1, max_size=3))
def test_loading_arbitrary_json_never_raises_and_reports_every_folder(raws: list[Any]) -> None:
    check_every_folder_is_accounted_for(raws)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mutated_manifests(), min_size=1, max_size=3))
@example([{**valid_manifest("x"), "parameters": {"type": "object", "$schema": []}}])  # found by this test
def test_loading_mutated_manifests_never_raises_and_reports_every_folder(raws: list[Any]) -> None:
    check_every_folder_is_accounted_for(raws)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=40))
def test_loading_arbitrary_text_never_raises(text: str) -> None:
    check_every_folder_is_accounted_for([text])


def test_a_valid_manifest_used_by_the_fuzzer_loads() -> None:
    # Guards the property tests above: unmutated, the base manifest must load.
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        write_tool(home, "x", valid_manifest("x"), {"main.py": "print(1)\n"})
        toolset = load_tools(Home(home))
        assert list(toolset.tools) == ["x"] and toolset.problems == []
        assert os.path.isabs(toolset.tools["x"].argv_template[1])


# --- the schema-check cache ----------------------------------------------------------------


def test_a_schema_that_passed_is_remembered_and_a_bad_one_is_still_reported_every_time(home_dir: Path) -> None:
    good = {"type": "object", "properties": {"n": {"type": "integer"}}}
    bad = {"type": "object", "properties": {"n": {"type": "no-such-type"}}}
    write_tool(home_dir, "good", minimal(parameters=good))
    write_tool(home_dir, "bad", minimal(parameters=bad))
    first = load(home_dir)
    cache = home_dir / "cache" / "checked_schemas.json"
    assert len(json.loads(cache.read_text())) == 1  # only the schema that passed
    second = load(home_dir)
    assert lines(second) == lines(first) and len(lines(first)) == 1
    assert second.tools["good"].validator.is_valid({"n": 1})
    assert not second.tools["good"].validator.is_valid({"n": "x"})


def test_a_corrupt_or_unwritable_cache_only_costs_time(home_dir: Path) -> None:
    write_tool(home_dir, "t", minimal())
    (home_dir / "cache").mkdir()
    (home_dir / "cache" / "checked_schemas.json").write_text("{not json")
    assert list(load(home_dir).tools) == ["t"]
    (home_dir / "cache" / "checked_schemas.json").unlink()
    (home_dir / "cache" / "checked_schemas.json").mkdir()  # cannot be written as a file
    assert list(load(home_dir).tools) == ["t"]


# --- what the OS or the journal could not take ---------------------------------------------


@pytest.mark.parametrize(("env", "reason"), [
    ({"BAD=NAME": "x"}, 'variable name "BAD=NAME" holds "=", which a name cannot hold'),
    ({"": "x"}, "a variable name is empty; give every variable a name"),
    ({"A\0B": "x"}, 'variable name "A\\u0000B" holds a NUL character, which a name cannot hold'),
    ({"GOOD": "a\0b"}, 'the value of "GOOD" holds a NUL character, which a value cannot hold'),
])
def test_env_the_os_cannot_set_is_refused_at_load(home_dir: Path, env: dict[str, str], reason: str) -> None:
    message = only_error(load_one(home_dir, minimal(env=env)))
    assert message.startswith(f'tools/t: not loaded: "env": {reason} (got ')


def test_a_nul_in_command_is_refused_at_load(home_dir: Path) -> None:
    message = only_error(load_one(home_dir, minimal(command=[PYTHON, "a\0b"])))
    assert message.startswith('tools/t: not loaded: "command": an argument holds a NUL character')


@pytest.mark.parametrize("program", ["{dir}/lib", "lib", "/usr"])
def test_a_command_naming_a_folder_is_refused_at_load(home_dir: Path, program: str) -> None:
    (home_dir / "tools" / "t" / "lib").mkdir(parents=True)
    message = only_error(load_one(home_dir, minimal(command=[program])))
    assert message.startswith('tools/t: not loaded: program "') and message.endswith(
        '" is a folder; "command" must start with a program to run')


def test_lone_surrogates_in_a_manifest_are_mended_so_sessions_can_record_it(home_dir: Path) -> None:
    write_tool(home_dir, "t", '{"description": "half a pair \\ud800", "command": ["' + PYTHON + '"]}')
    toolset = load(home_dir)
    assert toolset.tools["t"].description == "half a pair \ufffd"


def test_a_folder_name_that_is_not_utf8_is_reported_not_loaded(home_dir: Path) -> None:
    os.mkdir(os.path.join(os.fsencode(home_dir / "tools"), b"caf\xe9"))
    assert lines(load(home_dir)) == ["tools/caf\ufffd: not loaded: the folder name is not valid UTF-8; rename the folder"]
