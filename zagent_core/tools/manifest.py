"""Tool manifests: the model of ``<folder>/<folder>.json`` and loading ``<home>/tools/``.

Loading never raises on a user's mistake. A broken manifest is skipped and reported with
its folder and the exact reason; an unknown field is a warning that names it. Everything
that does not change between calls (the program's location on PATH, files of the tool
folder named in ``command``, the compiled argument schema) is resolved once, here.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import sys
from collections.abc import Collection
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from zagent_core.config import Config, SandboxGrant
from zagent_core.problems import Problem, describe_errors, did_you_mean
from zagent_core.tools.model_catalog import known
from zagent_core.tools.processes import file_sha256, read_json, write_json
from zagent_core.tools.text import storable, storable_json

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

    from zagent_core.home import Home

NAME_PATTERN = r"^[a-z0-9_]+$"

#: Placeholders known only per call (``{dir}`` and ``{home}`` are expanded at load).
CALL_PLACEHOLDERS = ("{workspace}", "{scratch}", "{output_dir}")

Platform = Literal["windows", "linux", "darwin"]

_PLATFORM_OF = {"win32": "windows", "cygwin": "windows", "darwin": "darwin"}
_IGNORED_FOLDERS = {"__pycache__", "node_modules"}
_HASH_SKIP = _IGNORED_FOLDERS | {".git", ".venv", "venv"}


def current_platform() -> Platform:
    """This machine, in the manifest's ``platforms`` vocabulary."""
    return _PLATFORM_OF.get(sys.platform, "linux")  # type: ignore[return-value]


class Manifest(BaseModel):
    """A tool manifest, exactly as the manifest reference describes it."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: str | None = None
    description: str
    #: Without parameters a tool takes no arguments: any argument is a mistake to report.
    parameters: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
    command: list[str] = Field(min_length=1)
    input: Literal["stdin_json", "args_json", "env"] = "stdin_json"
    output: Literal["text", "json"] = "text"
    #: The JSON Schema of a JSON result's ``structured`` value: checked on every result, and
    #: what ``mcp serve`` lists as the tool's ``outputSchema``.
    output_schema: dict[str, Any] | None = None
    cwd: Literal["workspace", "tool_dir"] = "workspace"
    env: dict[str, str] = {}
    timeout_seconds: float = 0
    background: bool = False
    permission: Literal["allow", "ask"] = "allow"
    #: What resume does with a call this tool was running when the engine stopped:
    #: ``safe`` runs it again (reads, no side effects), ``unsafe`` reports it interrupted.
    replay: Literal["safe", "unsafe"] = "unsafe"
    #: Calls of it may run in parallel with other concurrency-safe calls of one reply.
    concurrency_safe: bool = False
    attach_outputs: bool = False
    platforms: list[Platform] | None = None
    #: Run in the sandbox (``"workspace-write"``, ``"read-only"``, or an object with ``mode``,
    #: ``network``, ``writable``, ``readable``); without it, only with ``sandbox.tools: "all"``.
    sandbox: SandboxGrant | None = None

    @field_validator("name")
    @classmethod
    def _name_is_a_tool_name(cls, value: str | None) -> str | None:
        # Said as the other manifest errors are, with a name that would do, not as a regex.
        if value is not None and not re.fullmatch(NAME_PATTERN, value):
            suggestion = re.sub(r"[^a-z0-9_]+", "_", value.lower()).strip("_") or "my_tool"
            raise ValueError(f'must be lowercase letters, digits and _ (the name the model calls), e.g. "{suggestion}"')
        return value

    @field_validator("description")
    @classmethod
    def _description_says_something(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must say what the tool does and when to use it")
        return value

    @field_validator("command")
    @classmethod
    def _command_has_no_empty_argument(cls, value: list[str]) -> list[str]:
        if not value[0].strip():
            raise ValueError("the program (first element) is empty")
        if any("\0" in argument for argument in value):
            raise ValueError("an argument holds a NUL character, which no program can receive; remove it")
        return value

    @field_validator("env")
    @classmethod
    def _env_can_be_set(cls, value: dict[str, str]) -> dict[str, str]:
        # What the OS refuses would otherwise fail every call, long after the tool loaded.
        for name, setting in value.items():
            if not name:
                raise ValueError("a variable name is empty; give every variable a name")
            if "=" in name or "\0" in name:
                what = '"="' if "=" in name else "a NUL character"
                raise ValueError(f"variable name {json.dumps(name)} holds {what}, which a name cannot hold")
            if "\0" in setting:
                raise ValueError(f"the value of {json.dumps(name)} holds a NUL character, which a value cannot hold")
        return value

    @field_validator("timeout_seconds")
    @classmethod
    def _timeout_is_known(cls, value: float) -> float:
        if not math.isfinite(value) or (value != -1 and value < 0):
            raise ValueError("must be 0 (the engine default), -1 (no timeout) or a number of seconds")
        return value

    @field_validator("parameters")
    @classmethod
    def _parameters_is_a_json_schema_object(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        if value.get("type") != "object":
            raise ValueError('must be a JSON Schema with "type": "object" (the arguments are one object)')
        return _checked_schema(value, info)

    @field_validator("output_schema")
    @classmethod
    def _output_schema_is_a_json_schema(cls, value: dict[str, Any] | None,
                                        info: ValidationInfo) -> dict[str, Any] | None:
        if value is None:
            return None
        if info.data.get("output") != "json":
            raise ValueError('describes a JSON result\'s "structured" value: it needs "output": "json"')
        return _checked_schema(value, info)

    @field_validator("platforms")
    @classmethod
    def _platforms_names_one(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not value:
            raise ValueError("must name at least one of windows, linux, darwin (or be left out: every platform)")
        return value


def _checked_schema(value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
    """``value``, a valid JSON Schema of its dialect whose references stay inside it (else ValueError)."""
    # The metaschema check costs ~1 ms a schema (and jsonschema's import): a schema
    # that passed once is known by its digest, and not checked again.
    checked: set[str] = (info.context or {}).get("checked_schemas", set())
    digest = hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()
    if digest not in checked:
        from jsonschema import SchemaError

        try:
            schema_dialect(value).check_schema(value)
        except SchemaError as exc:
            where = "/".join(str(p) for p in exc.absolute_path) or "(top)"
            raise ValueError(f"is not a valid JSON Schema at {where}: {exc.message}") from None
        checked.add(digest)
    for ref in outside_refs(value):
        raise ValueError(f'"$ref": {json.dumps(ref)} does not point into this schema '
                         '(only local references like "#/$defs/name" are supported)')
    return value


def schema_dialect(schema: dict[str, Any]) -> type[Validator]:
    """The validator class of the schema's ``$schema`` (draft 2020-12 when it has none), its
    patterns matched in linear time (:mod:`~zagent_core.tools.patterns`)."""
    from jsonschema import Draft202012Validator
    from jsonschema.validators import validator_for

    from zagent_core.tools.patterns import bounded

    if "$schema" not in schema:
        return bounded(Draft202012Validator)
    if not isinstance(schema["$schema"], str):
        raise ValueError('"$schema" must be the URI of a JSON Schema dialect')
    found = validator_for(schema, default=None)  # type: ignore[arg-type]
    if found is None:
        raise ValueError(f'"$schema" {schema["$schema"]} is not a JSON Schema dialect zagent knows; '
                         "leave it out to use draft 2020-12")
    return bounded(found)


def validator_of(schema: dict[str, Any]) -> Validator:
    """The validator of ``schema`` (its dialect's), whose references resolve within the schema and the
    dialects' own metaschemas only: a ``$ref`` to a URL is never fetched (jsonschema's default registry
    fetches it), so no schema, whoever wrote it, makes zagent reach an address of its choosing."""
    from referencing import Registry

    return schema_dialect(schema)(schema, registry=Registry())


def outside_refs(schema: dict[str, Any]) -> list[str]:
    """The ``$ref`` strings of ``schema`` that do not point into it (a URL, another file)."""
    return [ref for ref in _refs(schema) if not _resolves(schema, ref)]


def _refs(node: Any) -> list[str]:
    """Every ``$ref`` string anywhere in a schema."""
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [ref for value in node.values() for ref in _refs(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in _refs(value)]
    return []


def _anchors(node: Any) -> set[str]:
    if isinstance(node, dict):
        own = {node["$anchor"]} if isinstance(node.get("$anchor"), str) else set()
        return own.union(*(_anchors(value) for value in node.values()))
    if isinstance(node, list):
        return set().union(*(_anchors(value) for value in node))
    return set()


def _resolves(schema: dict[str, Any], ref: str) -> bool:
    """Whether a local reference (``#``, ``#/json/pointer``, ``#anchor``) finds its target."""
    if not ref.startswith("#"):
        return False
    fragment = ref[1:]
    if fragment and not fragment.startswith("/"):
        return fragment in _anchors(schema)
    node: Any = schema
    for token in fragment.split("/")[1:]:
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return False
    return True


@dataclass(frozen=True)
class Tool:
    """A loaded tool: its manifest plus what was resolved when it loaded."""

    name: str
    manifest: Manifest
    folder: Path
    manifest_hash: str
    #: ``command`` with the program found, tool-folder files made absolute and load-time
    #: placeholders expanded; the per-call placeholders are still in it.
    argv_template: tuple[str, ...]
    _files_hash: dict[tuple[Any, ...], str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def description(self) -> str:
        return self.manifest.description

    @cached_property
    def validator(self) -> Validator:
        """The compiled argument schema (built on first use: listing tools does not need it)."""
        return validator_of(self.manifest.parameters)

    @cached_property
    def output_validator(self) -> Validator | None:
        """The compiled ``output_schema``, if the manifest has one."""
        schema = self.manifest.output_schema
        return validator_of(schema) if schema is not None else None

    def files_hash(self) -> str:
        """SHA-256 over the tool folder's files (names and contents), cached by their stat.

        Dependency and cache folders (``.git``, ``node_modules``, virtualenvs) are left
        out: they are not the tool's code, and hashing them would slow every call.
        """
        files: list[tuple[str, int, int]] = []
        for root, dirs, names in os.walk(self.folder):
            dirs[:] = sorted(d for d in dirs if d not in _HASH_SKIP and not (Path(root, d) / "pyvenv.cfg").exists())
            for name in sorted(names):
                try:
                    stat = os.stat(os.path.join(root, name))
                except OSError:
                    continue
                files.append((os.path.join(root, name), stat.st_mtime_ns, stat.st_size))
        signature = tuple(files)
        cached = self._files_hash.get(signature)
        if cached is None:
            digest = hashlib.sha256()
            for path, _, _ in files:
                relative = Path(path).relative_to(self.folder).as_posix()
                try:
                    digest.update(f"{relative}\0{file_sha256(path)}\n".encode())
                except OSError:
                    continue
            cached = self._files_hash[signature] = digest.hexdigest()
        return cached


@dataclass
class ToolSet:
    """The tools of a home, with everything that went wrong loading them."""

    tools: dict[str, Tool]
    problems: list[Problem]
    disabled: frozenset[str] = frozenset()

    def offered(self) -> list[Tool]:
        """The tools a model is told about: loaded and not disabled."""
        return [tool for name, tool in sorted(self.tools.items()) if name not in self.disabled]

    @property
    def broken(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]


def expand(text: str, values: dict[str, str]) -> str:
    """Replace the placeholders given in ``values``; other braces are left alone."""
    for placeholder, value in values.items():
        text = text.replace(placeholder, value)
    return text


def _resolve_program(program: str, folder: Path) -> str:
    """Where ``program`` is: in the tool folder, absolute, or on PATH. Raises ValueError."""
    if any(p in program for p in CALL_PLACEHOLDERS):
        return program
    candidate = (folder / program).resolve()
    if not os.path.isabs(program) and candidate.is_file() and candidate.is_relative_to(folder):
        return str(candidate)
    if candidate.is_dir() and candidate.is_relative_to(folder) or os.path.isdir(program):
        raise ValueError(f'program "{program}" is a folder; "command" must start with a program to run')
    if os.path.isabs(program):
        if not os.path.exists(program):
            raise ValueError(f'program "{program}" does not exist')
        return program
    if os.sep in program or (os.altsep and os.altsep in program):
        # A path, not a name: only the tool folder counts, never zagent's own current folder.
        raise ValueError(f'program "{program}" is not a file in the tool folder; give a path inside the tool '
                         "folder or an absolute path")
    found = shutil.which(program)
    if found:
        return found
    if program in ("python", "python3"):
        # The seed's examples say "python"; where it is not on PATH, the interpreter
        # running zagent is the one the user has.
        return sys.executable
    raise ValueError(f'program "{program}" was not found on PATH; install it or give its full path in "command"')


def _shown(program: str, folder: Path) -> str:
    """A program's path as the user wrote it: relative to the tool folder's home when inside it."""
    path = Path(program)
    return f"tools/{folder.name}/{path.relative_to(folder)}" if path.is_relative_to(folder) else program


def _interpreter_problem(line: bytes, shown: str) -> str | None:
    """What keeps the ``#!`` line of ``shown`` from starting it, if anything."""
    words = line[2:].decode("utf-8", "replace").split()
    if not words:
        return f'{shown} starts with "#!" but names no interpreter; write e.g. "#!/usr/bin/env python3" on its first line'
    if line.endswith(b"\r"):
        return (f"{shown} has Windows line endings: the \\r that ends its #! line would be taken as part of the "
                "interpreter's name; save it with Unix line endings (LF)")
    interpreter = words[0]
    if not os.path.isfile(interpreter):
        return (f'{shown} runs with "{interpreter}" (its #! line), which does not exist; fix the #! line, e.g. '
                '"#!/usr/bin/env python3", or start "command" with the interpreter')
    if os.path.basename(interpreter) == "env":
        name = next((w for w in words[1:] if not w.startswith("-") and "=" not in w), None)
        if name and shutil.which(name) is None:
            return (f'{shown} runs with "{name}" (its #! line: {" ".join(words)}), which is not on PATH; install '
                    f'it, or name the interpreter by its full path in the #! line or at the start of "command"')
    return None


def start_problem(tool: Tool) -> str | None:
    """Why the program of ``tool`` cannot be started, if it cannot: the checks ``doctor`` adds
    to loading (which finds the program): its run bit, and the interpreter of its ``#!`` line."""
    program = tool.argv_template[0]
    if any(p in program for p in CALL_PLACEHOLDERS) or not os.path.isfile(program):
        return None
    shown = _shown(program, tool.folder)
    if not os.access(program, os.X_OK):
        return (f'{shown} is not executable (no run bit); run "chmod +x {shown}", or start "command" with its '
                'interpreter, e.g. ["bash", "run.sh"] or ["python", "main.py"]')
    try:
        with open(program, "rb") as handle:
            first = handle.readline(512).rstrip(b"\n")
    except OSError as exc:
        return f"{shown} cannot be read: {exc.strerror or exc}"
    return _interpreter_problem(first, shown) if first.startswith(b"#!") else None


def _resolve_argument(argument: str, folder: Path) -> str:
    if os.path.isabs(argument) or not argument or argument.startswith("-"):
        return argument
    candidate = (folder / argument).resolve()
    if candidate.is_file() and candidate.is_relative_to(folder):
        return str(candidate)
    return argument


def _load_one(folder: Path, home: Home, checked: set[str],
              reserved: frozenset[str]) -> tuple[Tool | None, list[Problem]]:
    """Load one tool folder: (tool or None, problems); a manifest for another platform is (None, [])."""
    manifest_path = folder / f"{folder.name}.json"
    source = f"tools/{folder.name}"
    if not manifest_path.is_file():
        return None, [Problem(source=source, message=f"not loaded: no manifest (expected {folder.name}.json in it)")]
    try:
        raw_bytes = manifest_path.read_bytes()
        # A "\ud800" escape is valid JSON that no journal can store: mended here, once.
        raw = storable_json(json.loads(raw_bytes))
    except (OSError, UnicodeDecodeError) as exc:
        return None, [Problem(source=source, message=f"not loaded: cannot read {manifest_path.name}: {exc}")]
    except json.JSONDecodeError as exc:
        return None, [Problem(source=source, message=f"not loaded: {manifest_path.name} is not valid JSON: {exc}")]
    except RecursionError:
        return None, [Problem(source=source, message=f"not loaded: {manifest_path.name} is nested too deeply")]
    if not isinstance(raw, dict):
        return None, [Problem(source=source, message=f"not loaded: {manifest_path.name} must be a JSON object")]

    problems = [
        Problem(source=source, message=f'unknown field "{key}" is ignored{did_you_mean(key, Manifest.model_fields)}',
                severity="warning")
        for key in raw
        if key not in Manifest.model_fields
    ]
    known = {key: value for key, value in raw.items() if key in Manifest.model_fields}
    try:
        manifest = Manifest.model_validate(known, context={"checked_schemas": checked})
    except ValidationError as exc:
        errors, _ = describe_errors(exc, Manifest)
        return None, problems + [Problem(source=source, message=f"not loaded: {e}") for e in errors]

    if manifest.platforms is not None and current_platform() not in manifest.platforms:
        return None, []

    name = manifest.name or folder.name
    if not re.fullmatch(NAME_PATTERN, name):
        problems.append(Problem(
            source=source,
            message=f'not loaded: the name defaults to the folder name "{name}", which is not lowercase letters, '
            'digits and _; rename the folder or set "name"',
        ))
        return None, problems
    if name in reserved:
        problems.append(Problem(source=source, message=f'not loaded: "{name}" is the name of a built-in tool; choose another name'))
        return None, problems

    folder = folder.resolve()
    at_load = {"{dir}": str(folder), "{home}": str(home.root)}
    try:
        program = _resolve_program(expand(manifest.command[0], at_load), folder)
    except ValueError as exc:
        problems.append(Problem(source=source, message=f"not loaded: {exc}"))
        return None, problems
    argv = (program, *(_resolve_argument(expand(arg, at_load), folder) for arg in manifest.command[1:]))

    tool = Tool(
        name=name,
        manifest=manifest,
        folder=folder,
        manifest_hash=hashlib.sha256(raw_bytes).hexdigest(),
        argv_template=argv,
    )
    return tool, problems


def _read_digests(path: Path) -> set[str]:
    digests = read_json(path)
    return {d for d in digests if isinstance(d, str)} if isinstance(digests, list) else set()


def _write_digests(path: Path, digests: set[str]) -> None:
    """Best effort: a home that cannot be written to only loses the cache."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, sorted(digests))
    except OSError:
        pass


def load_tools(home: Home, config: Config | None = None, *, reserved: Collection[str] = ()) -> ToolSet:
    """Load every tool folder of ``home``, reporting (never raising on) broken ones.

    ``reserved``: the built-ins' names, which no folder may take.
    """
    config = config or Config()
    tools: dict[str, Tool] = {}
    problems: list[Problem] = []
    cache = home.root / "cache" / "checked_schemas.json"
    checked = _read_digests(cache)
    known_before = set(checked)
    if home.tools_dir.is_dir():
        folders = sorted(
            p for p in home.tools_dir.iterdir()
            if p.is_dir() and not p.name.startswith(".") and p.name not in _IGNORED_FOLDERS
        )
        for folder in folders:
            if storable(folder.name) != folder.name:
                problems.append(Problem(source=f"tools/{storable(folder.name)}",
                                        message="not loaded: the folder name is not valid UTF-8; rename the folder"))
                continue
            try:
                tool, found = _load_one(folder, home, checked, frozenset(reserved))
            except (OSError, ValueError) as exc:  # a path the OS refuses (too long, NUL, no access)
                tool, found = None, [Problem(source=f"tools/{folder.name}", message=f"not loaded: {exc}")]
            problems += found
            if tool is None:
                continue
            if tool.name in tools:
                other = tools[tool.name].folder.name
                problems.append(Problem(
                    source=f"tools/{folder.name}",
                    message=f'not loaded: the name "{tool.name}" is already used by tools/{other}; rename one of them '
                    'or limit each to other "platforms"',
                ))
                continue
            tools[tool.name] = tool
    if checked != known_before:
        _write_digests(cache, checked)
    disabled = frozenset(config.tools.disabled)
    named = [("tools.disabled", disabled), ("approvals.allow", frozenset(config.approvals.allow))]
    named += [(f"spawn.subagents.{preset}.tools", frozenset(setup.tools or ()))
              for preset, setup in config.spawn.subagents.items()]
    for key, names in named:
        for name in sorted(names - tools.keys() - set(reserved)):
            problems.append(Problem(
                source="config.json",
                message=f'{key} names "{name}", which is not a loaded tool{did_you_mean(name, [*tools, *reserved])}',
                severity="warning",
            ))
    return ToolSet(tools=tools, problems=problems + spawn_problems(config), disabled=disabled)


def spawn_problems(config: Config) -> list[Problem]:
    """What in ``spawn`` would make a spawn call fail: a model that is neither a catalog id nor a spec."""
    listed = config.spawn.models
    catalog = [entry.id for entry in known(config)]
    wrong = [(f"spawn.models.{name}", spec) for name, spec in listed.items() if ":" not in spec] \
        if isinstance(listed, dict) else []
    wrong += [(f"spawn.subagents.{name}.model", preset.model) for name, preset in config.spawn.subagents.items()
              if preset.model is not None and preset.model not in catalog and ":" not in preset.model]
    problems = [Problem(source="config.json", severity="warning",
                        message=f'{key} is "{spec}", which is neither an id of the models{did_you_mean(spec, catalog)} '
                                "nor a model spec (scripted:PATH, openai:MODEL, anthropic:MODEL)")
                for key, spec in wrong]
    return problems + [Problem(source="config.json", severity="warning",
                               message=f'spawn.models names "{name}", which is not the id of a model in "models"'
                                       f"{did_you_mean(name, catalog)}; spawn does not offer it")
                       for name in (listed if isinstance(listed, list) else []) if name not in catalog]
