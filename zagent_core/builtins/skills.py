"""The built-in skill tools: ``skills_use``, ``skills_read`` and ``skills_run_script``.

Offered only when the home has skills (``<home>/skills/NAME/SKILL.md``, see
:mod:`zagent_core.tools.skills`). ``skills_use`` lists every skill's name and description
in its own description, built once per engine from the catalog: the tool list, and so
what a request sends of the skills, is the same bytes on every request (the provider's
prompt cache keeps it). ``skills_use`` activates a skill: its instructions are the result,
and ``skill_activated`` (with the sha256 of the SKILL.md read) is committed with it, so a
resumed session knows which skills are active. ``skills_read`` and ``skills_run_script``
use only an active skill's files, in its folder: a script runs as ``shell`` runs a
command (the same runner: its timeout, its caps, the sandbox of what a model composes,
journaled like any call).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
from collections.abc import Callable
from typing import Any

from zagent_core.builtins import shell
from zagent_core.journal.events import SkillActivated
from zagent_core.tools.inprocess import Arguments, Builtin, BuiltinContext
from zagent_core.tools.results import ToolResult
from zagent_core.tools.skills import Catalog, Skill, SkillPathRefused, inside, listing, read_skill

USE, READ, RUN_SCRIPT = "skills_use", "skills_read", "skills_run_script"
#: What ``skills_read`` shows of a file at most.
MAX_READ_BYTES = 256 * 1024
#: How long a skill's script may run before it and everything it started are killed.
SCRIPT_TIMEOUT_SECONDS = 60
#: Arguments a script is given at most, and the length of each.
MAX_ARGS, MAX_ARG_CHARS = 64, 4096
#: What runs a script that is not executable, by its name's ending.
_INTERPRETERS = {".py": sys.executable, ".sh": shell.SHELL}

_USE = (
    "Activate a skill: a set of instructions (and files) for a kind of task. The result is its instructions; "
    "follow them. Use one when the task matches its description. Skills:\n"
)
_NAME = {"type": "string", "minLength": 1, "description": "The skill's name, as listed in skills_use."}


def _parameters(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {"name": _NAME, **properties},
            "required": ["name", *properties], "additionalProperties": False}


READ_PARAMETERS = _parameters(path={"type": "string", "minLength": 1,
                                    "description": "The file's path, relative to the skill's folder."})
RUN_PARAMETERS = _parameters(script={"type": "string", "minLength": 1,
                                     "description": "The script's path, relative to the skill's scripts/ folder."})
RUN_PARAMETERS["properties"]["args"] = {
    "type": "array", "maxItems": MAX_ARGS, "items": {"type": "string", "maxLength": MAX_ARG_CHARS},
    "description": "The script's arguments.",
}


def _known(catalog: Catalog, name: str) -> Skill | ToolResult:
    """The skill called ``name``, or the refusal that lists the skills there are."""
    skill = catalog.skills.get(name)
    if skill is not None:
        return skill
    return ToolResult(output=f'there is no skill "{name}"; skills: {", ".join(catalog.skills) or "(none)"}',
                      is_error=True)


def _active(catalog: Catalog, context: BuiltinContext, name: str) -> Skill | ToolResult:
    """The active skill called ``name``, or why it cannot be used yet."""
    skill = _known(catalog, name)
    if isinstance(skill, Skill) and name not in context.active_skills:
        return ToolResult(output=f'skill "{name}" is not active: call skills_use with it first', is_error=True)
    return skill


def use(catalog: Catalog, context: BuiltinContext, arguments: Arguments) -> ToolResult:
    """Activate a skill: its instructions, with ``skill_activated`` staged."""
    skill = _known(catalog, arguments["name"])
    if isinstance(skill, ToolResult):
        return skill
    try:
        text = read_skill(skill)
    except (OSError, ValueError) as exc:
        return ToolResult(output=f"skill {skill.name} could not be read: {exc}", is_error=True)
    context.staged.append(SkillActivated(call_id=context.call_id, name=skill.name, sha256=text.sha256))
    return ToolResult(output=f'Skill "{skill.name}" is active: read its files with skills_read and run its '
                             f"scripts/ with skills_run_script.\n\n{text.body}", is_error=False)


def read(catalog: Catalog, context: BuiltinContext, arguments: Arguments) -> ToolResult:
    """A file of an active skill, as text."""
    skill = _active(catalog, context, arguments["name"])
    if isinstance(skill, ToolResult):
        return skill
    path: str = arguments["path"]
    try:
        with open(inside(skill, path), "rb") as handle:
            data = handle.read(MAX_READ_BYTES + 1)
    except SkillPathRefused as exc:
        return ToolResult(output=str(exc), is_error=True)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return ToolResult(output=f"skill {skill.name} has no file {path}", is_error=True)
    except OSError as exc:  # unreadable (its mode): the model is told, the session goes on
        return ToolResult(output=f"{path} of skill {skill.name} could not be read: {exc.strerror}", is_error=True)
    if b"\x00" in data:
        return ToolResult(output=f"{path} of skill {skill.name} is not a text file: skills_read shows text only",
                          is_error=True)
    text = data[:MAX_READ_BYTES].decode("utf-8", "replace")
    if len(data) > MAX_READ_BYTES:
        text += f"\n[cut: skills_read shows the first {MAX_READ_BYTES // 1024} KiB of a file]"
    return ToolResult(output=text, is_error=False)


def _argv(script: str, args: list[str]) -> list[str] | None:
    """How ``script`` runs: itself when executable, else by the interpreter of its ending (None: none)."""
    if os.access(script, os.X_OK):
        return [script, *args]
    interpreter = _INTERPRETERS.get(os.path.splitext(script)[1])
    return None if interpreter is None else [interpreter, script, *args]


def run_script(catalog: Catalog, context: BuiltinContext, arguments: Arguments) -> ToolResult:
    """Run a script of an active skill's ``scripts/`` in the workspace, as shell runs a command."""
    skill = _active(catalog, context, arguments["name"])
    if isinstance(skill, ToolResult):
        return skill
    script: str = arguments["script"]
    args: list[str] = arguments.get("args", [])
    if any("\x00" in arg for arg in args):
        return ToolResult(output="an argument contains a NUL character, which no process can be given; remove it",
                          is_error=True)
    try:
        found = inside(skill, script, under="scripts")
    except SkillPathRefused as exc:
        return ToolResult(output=str(exc), is_error=True)
    if not found.is_file():
        scripts = sorted(p.name for p in (skill.folder / "scripts").glob("*") if p.is_file())
        return ToolResult(output=f"skill {skill.name} has no script {script}; its scripts: "
                                 f"{', '.join(scripts) or '(none)'}", is_error=True)
    argv = _argv(str(found), args)
    if argv is None:
        return ToolResult(output=f"{script} of skill {skill.name} is not executable and its name does not end in "
                                 f"{' or '.join(_INTERPRETERS)}: make it executable (chmod +x, with a #! line)",
                          is_error=True)
    outcome = context.host.run_call_process(context, argv, timeout=SCRIPT_TIMEOUT_SECONDS,
                                            capture_limit=shell.OUTPUT_CAP_BYTES)
    return shell.result_of(outcome, SCRIPT_TIMEOUT_SECONDS, explore=False,
                           marker=context.config.limits.truncation_marker)


def _always(arguments: Arguments) -> bool:
    return True


#: The three tools, as a catalog with no skill offers them (their names are reserved all the same).
TOOLS = (
    Builtin(name=USE, description=_USE, parameters=_parameters(), run=functools.partial(use, Catalog()),
            # It only reads: it runs beside other calls, and a read-only sub-agent is given it (and
            # skills_read). A skills_read of the same reply may run first: it says to activate the skill.
            concurrency_safe=True, replay="safe"),
    Builtin(name=READ, description="Read a file of an active skill (one skills_use activated), by its path in the "
                                   "skill's folder.",
            parameters=READ_PARAMETERS, run=functools.partial(read, Catalog()), concurrency_safe=True, replay="safe"),
    Builtin(name=RUN_SCRIPT, description=(
        f"Run a script of an active skill's scripts/ folder in the workspace, with args, and return its output "
        f"(stdout and stderr together, the end kept past 32 KiB); it is killed after {SCRIPT_TIMEOUT_SECONDS} s."),
            parameters=RUN_PARAMETERS, run=functools.partial(run_script, Catalog()),
            # A script may have written, sent or deleted anything before a crash cut it off.
            replay="unsafe", runs_process=_always),
)
_RUNS: dict[str, Callable[[Catalog, BuiltinContext, Arguments], ToolResult]] = {
    USE: use, READ: read, RUN_SCRIPT: run_script}


def for_catalog(catalog: Catalog) -> list[Builtin]:
    """The skill tools of ``catalog``, ``skills_use`` listing its skills; none when it has no skill."""
    if not catalog.skills:
        return []
    offered = [dataclasses.replace(tool, run=functools.partial(_RUNS[tool.name], catalog)) for tool in TOOLS]
    offered[0] = dataclasses.replace(offered[0], description=_USE + listing(catalog))
    return offered
