"""The home's skills: ``<home>/skills/NAME/SKILL.md``, loaded into a catalog, with what is wrong with them.

A skill is the Agent Skills layout Claude Code reads: a folder whose ``SKILL.md`` starts with
YAML front matter (``name``, ``description``, optional ``allowed-tools``) followed by
instructions, beside ``scripts/`` and any other files. The model is told each skill's name
and description (:func:`listing`); ``skills_use`` reads the instructions (:func:`read_skill`),
and a skill's files are reached only through :func:`inside`, which keeps them in its folder.

Loading never raises on a user's mistake: a skill that cannot be used is left out with a
:class:`~zagent_core.problems.Problem` (``zagent skills list``, ``zagent doctor``, the
session's warnings say it).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from zagent_core.home import Home
from zagent_core.problems import Problem

#: The file a skill folder must hold.
SKILL_FILE = "SKILL.md"
#: A SKILL.md larger than this is not loaded: its instructions become a tool result whole.
MAX_SKILL_BYTES = 256 * 1024
#: Skills offered at most, and the characters their listing takes at most (every request
#: carries it, in skills_use's description): the skills past either, in name order, are
#: reported and left out.
MAX_SKILLS = 100
MAX_LISTING_CHARS = 16 * 1024
#: The Agent Skills limits on what each request carries of a skill.
MAX_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 1024
#: Lowercase letters, digits and single hyphens, as the Agent Skills layout names skills.
_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


class SkillPathRefused(ValueError):
    """A path that would leave a skill's folder (or the part of it asked for); the message is the model's."""


@dataclass(frozen=True)
class Skill:
    """A loaded skill: what the model is told of it, and where it is."""

    name: str
    description: str
    folder: Path
    #: ``allowed-tools`` of its front matter, as written (shown; zagent grants nothing by it).
    allowed_tools: tuple[str, ...] = ()


@dataclass(frozen=True)
class SkillText:
    """A SKILL.md as one read found it: its instructions, and the sha256 of the whole file."""

    body: str
    sha256: str


@dataclass(frozen=True)
class Catalog:
    """The skills of a home by name, in name order, with what was wrong loading them."""

    skills: dict[str, Skill] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)


def _front_matter(text: str) -> tuple[str, str] | None:
    """The YAML between the opening and the closing ``---`` lines, and the body after; None without them."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        return None
    for index, line in enumerate(lines[1:], start=1):
        if line.strip() == "---":
            return "".join(lines[1:index]), "".join(lines[index + 1:])
    return None


def parse(text: str, folder_name: str) -> tuple[Skill | None, str, list[str]]:
    """A SKILL.md's skill (None when it cannot be used), its body, and what is wrong with it."""
    import yaml

    parts = _front_matter(text)
    if parts is None:
        return None, "", ['does not start with YAML front matter: begin it with a "---" line, then name: and '
                          'description:, then a closing "---" line']
    matter, body = parts
    try:
        # libyaml's loader where PyYAML was built with it: a tenth of the pure-Python one's time.
        data = yaml.load(matter, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (line {where.line + 2})" if where is not None else ""
        return None, body, [f"its front matter is not valid YAML{line}: {getattr(exc, 'problem', None) or exc}"]
    if not isinstance(data, dict):
        return None, body, ["its front matter is not a mapping: write name: and description: lines"]
    problems = [f'the front matter has no "{key}"; add {key}: ...' for key in ("name", "description")
                if not isinstance(data.get(key), str) or not data[key].strip()]
    if problems:
        return None, body, problems
    name, description = data["name"].strip(), " ".join(data["description"].split())
    if name != folder_name:
        problems.append(f'its name "{name}" is not its folder\'s ("{folder_name}"): rename one so they match')
    if not _NAME.match(name) or len(name) > MAX_NAME_CHARS:
        problems.append(f'its name "{name}" is not lowercase letters, digits and hyphens of at most '
                        f"{MAX_NAME_CHARS} characters: rename it")
    if len(description) > MAX_DESCRIPTION_CHARS:
        problems.append(f"its description is {len(description)} characters, over {MAX_DESCRIPTION_CHARS}: shorten it")
    allowed = data.get("allowed-tools")
    if isinstance(allowed, str):
        tools = tuple(part for part in re.split(r"[,\s]+", allowed) if part)
    elif isinstance(allowed, list) and all(isinstance(item, str) for item in allowed):
        tools = tuple(allowed)
    elif allowed is None:
        tools = ()
    else:
        problems.append('its "allowed-tools" is neither a string nor a list of strings: write tool names')
        tools = ()
    if problems:
        return None, body, problems
    return Skill(name=name, description=description, folder=Path(), allowed_tools=tools), body, []


def _read(path: Path) -> bytes:
    """SKILL.md's bytes; ValueError past :data:`MAX_SKILL_BYTES` (read once: no size check before the read)."""
    with open(path, "rb") as handle:
        data = handle.read(MAX_SKILL_BYTES + 1)
    if len(data) > MAX_SKILL_BYTES:
        raise ValueError(f"{SKILL_FILE} is over {MAX_SKILL_BYTES // 1024} KiB: make it shorter and move the rest "
                         "into files beside it (skills_read reads them)")
    return data


def read_skill(skill: Skill) -> SkillText:
    """The instructions of ``skill``'s SKILL.md as it is now, and its sha256.

    Raises ``OSError`` or ``ValueError`` (a message for the model) when it cannot be read or
    no longer parses."""
    data = _read(skill.folder / SKILL_FILE)
    _, body, problems = parse(data.decode("utf-8", "replace"), skill.folder.name)
    if problems:
        raise ValueError(f"{SKILL_FILE} of skill {skill.name} changed and " + "; ".join(problems))
    return SkillText(body=body.strip("\n"), sha256=hashlib.sha256(data).hexdigest())


def load_skills(home: Home) -> Catalog:
    """Every skill folder of ``home``'s ``skills/``, in name order, reporting (never raising on) broken ones."""
    root = home.skills_dir
    if not root.is_dir():
        return Catalog()
    skills: dict[str, Skill] = {}
    problems: list[Problem] = []
    listed = 0
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        source = f"skills/{folder.name}"
        try:
            text = _read(folder / SKILL_FILE).decode("utf-8", "replace")
        except FileNotFoundError:
            problems.append(Problem(source=source, message=f"not loaded: it has no {SKILL_FILE}; add one"))
            continue
        except (OSError, ValueError) as exc:
            problems.append(Problem(source=source, message=f"not loaded: {exc}"))
            continue
        skill, _, found = parse(text, folder.name)
        problems += [Problem(source=f"{source}/{SKILL_FILE}", message=f"not loaded: {message}") for message in found]
        if skill is None:
            continue
        if len(skills) == MAX_SKILLS:
            problems.append(Problem(source=source, message=f"not loaded: a home offers at most {MAX_SKILLS} skills"))
            continue
        listed += len(_line(skill)) + 1
        if listed > MAX_LISTING_CHARS:
            problems.append(Problem(source=source, message=(
                f"not loaded: the skills before it (in name order) and it would take over {MAX_LISTING_CHARS} "
                "characters of every request to list; shorten their descriptions or remove some")))
            continue
        skills[skill.name] = Skill(name=skill.name, description=skill.description, folder=folder.resolve(),
                                   allowed_tools=skill.allowed_tools)
    return Catalog(skills=skills, problems=problems)


def _line(skill: Skill) -> str:
    return f"- {skill.name}: {skill.description}"


def listing(catalog: Catalog) -> str:
    """The skills as the model is told of them, one line each: the same text on every request."""
    return "\n".join(_line(skill) for skill in catalog.skills.values())


def inside(skill: Skill, path: str, *, under: str = "") -> Path:
    """``path`` (relative to ``skill``'s folder, or to its ``under`` folder) resolved, links followed:
    :class:`SkillPathRefused` when it is absolute, has a ``..``, or leads out of that folder."""
    where = f"{under}/ of skill {skill.name}" if under else f"the folder of skill {skill.name}"
    if not path or "\x00" in path:
        raise SkillPathRefused(f"give a path relative to {where}")
    if path.startswith("/") or ".." in Path(path).parts:
        raise SkillPathRefused(f"{path} is not a path inside {where}: give one relative to it, without \"..\"")
    root = (skill.folder / under).resolve()
    resolved = (root / path).resolve()
    if resolved == root:
        raise SkillPathRefused(f"{path} is {where} itself: give the path of a file in it")
    if root not in resolved.parents:
        raise SkillPathRefused(f"{path} leads out of {where} (a symbolic link): only the skill's own files "
                               "can be used")
    return resolved
