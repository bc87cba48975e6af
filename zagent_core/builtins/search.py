"""What the search built-ins share: glob patterns, ``.gitignore`` rules and the tree walk
(``glob`` and ``grep``), their parameters, how a path they are given is checked, and how a
long listing is cut (with ``list_files``).

The walk decides what to look at exactly as ripgrep does (its ``ignore`` crate), so the
Python fallback of ``grep`` and the ``rg`` path give the same files:

- ``--glob`` overrides come first: the last matching one decides (``!`` excludes);
  with any including glob, a file that matches none is skipped (folders are not).
  An override beats ``.gitignore`` and hidden-file rules.
- then ``.gitignore`` files, inside a git repository only (a folder holding ``.git``, a
  folder or a file, in the searched folder or above it), the deepest folder's first (last
  matching line wins within a file; ``!`` re-includes), up to the repository's top: those
  above it do not count (a ``.gitignore`` in a home folder does not hide a project's files);
- then a file type filter (``--type``);
- then hidden names (starting with ``.``) are skipped unless a rule above included them.

Symbolic links are not followed (a linked folder is not entered, a linked file is not
read), and ignored folders are not entered. Entries are visited sorted by name within
each folder, depth first: the order ``rg --sort path`` prints. The walk goes from folder
descriptor to folder descriptor, never by a path's name (see ``beneath.py``): a folder
swapped for a link while it runs is not entered, and it holds two descriptors at most,
however deep the tree (nor does it recurse).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, TypeVar

from zagent_core.builtins import beneath
from zagent_core.builtins.beneath import Identity, Place
from zagent_core.tools.inprocess import BuiltinContext, PathRefused, unusable_path
from zagent_core.tools.results import ToolResult
from zagent_core.tools.text import storable

Item = TypeVar("Item")

Decision = Literal["ignore", "include"] | None

#: File types ``grep``'s ``type`` accepts, with the globs of each. Both search paths use this
#: table (it is handed to ripgrep with ``--type-add``), so a type means the same in both.
FILE_TYPES: dict[str, tuple[str, ...]] = {
    "c": ("*.c", "*.h"),
    "cpp": ("*.cpp", "*.cc", "*.cxx", "*.hpp", "*.hh", "*.hxx", "*.h"),
    "cs": ("*.cs",),
    "css": ("*.css", "*.scss", "*.sass", "*.less"),
    "go": ("*.go",),
    "html": ("*.html", "*.htm"),
    "java": ("*.java",),
    "js": ("*.js", "*.mjs", "*.cjs", "*.jsx"),
    "json": ("*.json", "*.jsonl"),
    "kotlin": ("*.kt", "*.kts"),
    "lua": ("*.lua",),
    "md": ("*.md", "*.markdown"),
    "php": ("*.php",),
    "py": ("*.py", "*.pyi"),
    "rb": ("*.rb",),
    "rust": ("*.rs",),
    "sh": ("*.sh", "*.bash", "*.zsh"),
    "sql": ("*.sql",),
    "swift": ("*.swift",),
    "toml": ("*.toml",),
    "ts": ("*.ts", "*.tsx", "*.mts", "*.cts"),
    "txt": ("*.txt",),
    "xml": ("*.xml",),
    "yaml": ("*.yaml", "*.yml"),
}

_GLOB_SPECIAL = frozenset("*?[{")


class GlobError(ValueError):
    """A glob pattern that cannot be read; the message says where."""


def has_glob_chars(text: str) -> bool:
    return any(char in _GLOB_SPECIAL for char in text)


def glob_regex(pattern: str) -> str:
    """The regular expression (for ``fullmatch``) of a glob over ``/``-separated paths.

    ``*`` and ``?`` stay within a path component, ``**`` as a whole component crosses
    folders (``**/x``, ``a/**``, ``a/**/b``), ``[...]`` is a class (``[!...]`` negated) and
    ``{a,b}`` alternatives; ``\\`` escapes the next character.
    """
    out: list[str] = []
    i, n = 0, len(pattern)
    in_braces = False
    while i < n:
        char = pattern[i]
        if char == "*":
            regex, i = _glob_star(pattern, i)
            out.append(regex)
        elif char == "?":
            out.append("[^/]")
            i += 1
        elif char == "[":
            regex, i = _glob_class(pattern, i)
            out.append(regex)
        elif char == "{" and not in_braces:
            if "}" not in pattern[i:]:
                raise GlobError(f"unclosed {{ at position {i} in glob {pattern!r}")
            in_braces = True
            out.append("(?:")
            i += 1
        elif char == "," and in_braces:
            out.append("|")
            i += 1
        elif char == "}" and in_braces:
            in_braces = False
            out.append(")")
            i += 1
        elif char == "\\" and i + 1 < n:
            out.append(re.escape(pattern[i + 1]))
            i += 2
        else:
            out.append(re.escape(char))
            i += 1
    return "".join(out)


def _glob_star(pattern: str, i: int) -> tuple[str, int]:
    """The regular expression of the ``*`` or ``**`` at ``i``, and where the glob goes on after it."""
    if not pattern.startswith("**", i):
        return "[^/]*", i + 1
    end = i + 2
    # ``**`` crosses folders only as a whole component; elsewhere (``a**``) it is a ``*``.
    at_start = i == 0 or pattern[i - 1] == "/"
    if at_start and end == len(pattern):
        # ``a/**`` matches everything under a (not a itself); ``**`` alone matches all.
        return ".*", end
    if at_start and pattern[end] == "/":
        return "(?:[^/]*/)*", end + 1
    return "[^/]*", end


def _glob_class(pattern: str, i: int) -> tuple[str, int]:
    """The regular expression of the ``[...]`` class at ``i``, and where the glob goes on after it."""
    close = pattern.find("]", i + 2 if pattern[i + 1:i + 2] in ("!", "^") else i + 1)
    if close < 0:
        raise GlobError(f"unclosed [ at position {i} in glob {pattern!r}")
    body = pattern[i + 1:close]
    negated = body[:1] in ("!", "^")
    body = body[1:] if negated else body
    escaped = body.replace("\\", "\\\\").replace("[", "\\[")
    return (f"[^/{escaped}]" if negated else f"[{escaped}]"), close + 1


@lru_cache(maxsize=4096)
def compile_glob(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(glob_regex(pattern), re.DOTALL)
    except re.error as exc:
        raise GlobError(f"glob {pattern!r} cannot be read: {exc}") from None


@dataclass(frozen=True)
class Rule:
    """One line of a ``.gitignore`` (or one ``--glob``)."""

    regex: re.Pattern[str]
    negated: bool
    dir_only: bool


def parse_rule(line: str) -> Rule | None:
    """A ``.gitignore`` line as a rule matched against a path relative to its folder; ``None`` for
    blank lines, comments and lines that cannot be read (git skips those too)."""
    if not line.strip() or line.startswith("#"):
        return None
    # Trailing spaces are dropped unless escaped.
    stripped = line.rstrip(" ")
    if stripped.endswith("\\") and len(stripped) < len(line):
        stripped += " "
    line = stripped
    negated = line.startswith("!")
    if negated:
        line = line[1:]
    elif line.startswith(("\\!", "\\#")):
        line = line[1:]
    dir_only = line.endswith("/")
    line = line.rstrip("/")
    if not line:
        return None
    anchored = "/" in line
    line = line.lstrip("/")
    if not anchored and not line.startswith("**"):
        line = "**/" + line
    try:
        return Rule(compile_glob(line), negated, dir_only)
    except GlobError:
        return None


@dataclass(frozen=True)
class RuleSet:
    """The rules of one ``.gitignore``, and the folder they are relative to."""

    base: str
    rules: tuple[Rule, ...]
    #: The folder holds ``.git``: it is the top of a repository for what is below it.
    has_git: bool

    def decide(self, path: str, is_dir: bool) -> Decision:
        relative = path[len(self.base) + 1:] if self.base != "/" else path[1:]
        for rule in reversed(self.rules):
            if rule.dir_only and not is_dir:
                continue
            if rule.regex.fullmatch(relative):
                return "include" if rule.negated else "ignore"
        return None


def load_rules(folder: str, fd: int) -> RuleSet:
    """The ``.gitignore`` rules of ``folder``, open at ``fd``: read from there, a link not followed, a FIFO
    not waited on."""
    try:
        os.stat(".git", dir_fd=fd, follow_symlinks=False)
        has_git = True
    except OSError:
        has_git = False
    try:
        opened = os.open(".gitignore", os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
    except OSError:
        return RuleSet(folder, (), has_git)
    try:
        data = os.read(opened, _GITIGNORE_BYTES) if stat.S_ISREG(os.fstat(opened).st_mode) else b""
    except OSError:
        data = b""
    finally:
        os.close(opened)
    rules = tuple(rule for line in _gitignore_lines(data) if (rule := parse_rule(line)) is not None)
    return RuleSet(folder, rules, has_git)


#: Bytes of a ``.gitignore`` read at most (one read): no project's comes near.
_GITIGNORE_BYTES = 4 * 1024 * 1024


def _rules_above(folder: str) -> RuleSet:
    """The ``.gitignore`` rules of a folder above the searched one (ripgrep reads those too), opened by its path."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return RuleSet(folder, (), False)
    try:
        return load_rules(folder, fd)
    finally:
        os.close(fd)


def _gitignore_lines(data: bytes) -> Iterator[str]:
    """The lines of a ``.gitignore`` as ripgrep reads them: split at ``\n`` only (less a ``\r``
    before it), a byte order mark dropped, and none from the first line that is not UTF-8 on."""
    for raw in data.removeprefix(b"\xef\xbb\xbf").split(b"\n"):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            return
        yield line.removesuffix("\r")


def parent_rules(root: str) -> list[RuleSet]:
    """The ``.gitignore`` rule sets above ``root`` up to the top of its repository, nearest first."""
    found: list[RuleSet] = []
    folder = root
    while not os.path.exists(os.path.join(folder, ".git")):
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
        found.append(_rules_above(folder))
    return found


@dataclass(frozen=True)
class Filters:
    """What the walk skips besides ``.gitignore`` and hidden names: ``--glob`` and ``--type``."""

    globs: tuple[str, ...] = ()
    file_type: str | None = None

    def override_rules(self) -> tuple[tuple[Rule, ...], bool]:
        """The ``--glob`` overrides, and whether any of them includes."""
        rules: list[Rule] = []
        for glob in self.globs:
            # An override is a .gitignore line with the meaning inverted: ``!x`` excludes x.
            rule = parse_rule(glob)
            if rule is None:
                raise GlobError(f"glob {glob!r} matches nothing")
            rules.append(Rule(rule.regex, not rule.negated, rule.dir_only))
        return tuple(rules), any(rule.negated for rule in rules)


def _decide(path: str, relative: str, name: str, is_dir: bool, chain: Sequence[RuleSet] | None,
            overrides: tuple[Rule, ...], any_include: bool, type_globs: tuple[re.Pattern[str], ...] | None) -> bool:
    """Whether the walk keeps an entry (see the module docstring for the order of the rules)."""
    if overrides:
        for rule in reversed(overrides):
            if (not rule.dir_only or is_dir) and rule.regex.fullmatch(relative):
                return rule.negated
        if any_include and not is_dir:
            return False
    included = False
    for rules in chain or ():
        decision = rules.decide(path, is_dir)
        if decision == "ignore":
            return False
        if decision == "include":
            included = True
            break
        if rules.has_git:
            break
    if type_globs is not None and not is_dir:
        if not any(glob.fullmatch(name) for glob in type_globs):
            return False
        included = True
    return included or not name.startswith(".")


@dataclass(frozen=True)
class Found:
    """A file the walk looks at: its path relative to the searched folder, and where it is, to be opened
    or looked at before the walk goes on: its ``name`` in ``folder``, a descriptor the walk holds until then."""

    relative: str
    folder: int
    name: str


@dataclass
class _Level:
    """A folder the walk is in: where, what is left of its entries, the rules over them, and its identity
    (the walk comes back up to it through ``..``, checked to be it)."""

    path: str
    relative: str
    depth: int
    chain: list[RuleSet]
    identity: Identity
    entries: Iterator[tuple[str, bool]] = field(default_factory=lambda: iter(()))

    @property
    def rules(self) -> list[RuleSet] | None:
        # .gitignore files count inside a repository only (ripgrep's default).
        return self.chain if any(ruleset.has_git for ruleset in self.chain) else None


def _level(fd: int, path: str, relative: str, above: list[RuleSet], depth: int) -> _Level:
    """Folder ``fd`` (at ``path``) as the walk enters it: its rules, and its files and folders by name."""
    level = _Level(path, relative, depth, [load_rules(path, fd), *above], beneath.identity(fd))
    listed: list[tuple[str, bool]] = []
    try:
        with os.scandir(fd) as scan:
            entries = sorted(scan, key=lambda entry: entry.name)
    except OSError:
        return level
    for entry in entries:  # told apart now, while ``fd`` is open: a DirEntry of a descriptor asks it again
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
            is_file = not is_dir and entry.is_file(follow_symlinks=False)
        except OSError:
            continue
        if is_dir or is_file:
            listed.append((entry.name, is_dir))
    level.entries = iter(listed)
    return level


def walk(root: int, root_path: str, filters: Filters = Filters(), max_depth: int | None = None) -> Iterator[Found]:
    """The files under folder ``root`` (a descriptor, the caller's; ``root_path`` its path) a search looks at,
    in ``rg --sort path`` order (at most ``max_depth`` folders deep: 1 is ``root``'s own files).

    The paths are the names on disk, to be opened: one that is not UTF-8 holds a lone
    surrogate (``os.fsdecode``), which :func:`listing` and ``grep`` show as U+FFFD. A folder
    moved while it is walked ends the walk with :class:`~zagent_core.builtins.beneath.FolderMoved`."""
    overrides, any_include = filters.override_rules()
    type_globs = (tuple(compile_glob(glob) for glob in FILE_TYPES[filters.file_type])
                  if filters.file_type is not None else None)
    path = root_path.rstrip("/") or "/"
    current = os.open(".", beneath.LISTED, dir_fd=root)
    try:
        # Folders being listed, deepest last: a loop over a stack, not a recursion, so a tree of
        # any depth is walked (generators nested 1,000 deep hit Python's recursion limit).
        levels = [_level(current, path, "", parent_rules(path), 1)]
        while levels:
            level = levels[-1]
            entry = next(level.entries, None)
            if entry is None:
                levels.pop()
                if levels:
                    above = beneath.parent(current, levels[-1].identity, level.path)
                    os.close(current)
                    current = above
                continue
            name, is_dir = entry
            child = f"{level.relative}/{name}" if level.relative else name
            if not _decide(os.path.join(level.path, name), child, name, is_dir, level.rules, overrides, any_include,
                           type_globs):
                continue
            if not is_dir:
                yield Found(child, current, name)
                continue
            if max_depth is not None and level.depth >= max_depth:
                continue
            try:
                below = os.open(name, beneath.LISTED, dir_fd=current)
            except OSError:
                continue  # gone, swapped for a link (never followed), or not ours to read
            os.close(current)
            current = below
            levels.append(_level(current, os.path.join(level.path, name), child, level.chain, level.depth + 1))
    finally:
        os.close(current)


def sort_key(path: str) -> tuple[str, ...]:
    """Paths in the walk's order: by name within each folder, depth first."""
    return tuple(path.split("/"))


def shown_path(workspace: Path, path: str) -> str:
    """``path`` (absolute) as the model is shown it: relative to the workspace when inside it."""
    root = str(workspace)
    if path == root:
        return "."
    if path.startswith(root.rstrip("/") + "/"):
        return path[len(root.rstrip("/")) + 1:]
    return path


def iso_time(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def describe_missing(given: str, resolved: Path) -> str:
    """Why ``resolved`` cannot be searched: it does not exist, or it is a broken link."""
    if resolved.is_symlink():
        return f"{given} is a symbolic link to {os.readlink(resolved)}, which does not exist"
    return f"no such file or folder: {given} (looked at {resolved})"


def pattern_parameters(pattern: str, path: str, others: dict[str, Any]) -> dict[str, Any]:
    """The JSON schema of ``glob``'s and ``grep``'s arguments: ``pattern`` (required) and ``path``,
    with these descriptions, then ``others``."""
    return {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "minLength": 1, "description": pattern},
            "path": {"type": "string", "description": path},
            **others,
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }


def cannot(given: str, exc: OSError, doing: str) -> ToolResult:
    """The error result of a path the file system refuses (said plainly when the path itself is unusable: a
    name too long, a loop of links)."""
    return ToolResult(output=unusable_path(exc) or f"{given} cannot be {doing}: {exc.strerror or exc}", is_error=True)


def existing_path(context: BuiltinContext, given: str) -> Place | ToolResult:
    """Where the path ``given`` leads (the caller closes it), or the error result that says it is refused or
    not there."""
    try:
        found = beneath.place(context, given)
    except PathRefused as exc:
        return ToolResult(output=str(exc), is_error=True)
    except FileNotFoundError:
        return ToolResult(output=describe_missing(given, context.resolve(given)), is_error=True)
    except OSError as exc:
        return cannot(given, exc, "searched")
    if not found.exists():
        found.close()
        return ToolResult(output=describe_missing(given, found.key), is_error=True)
    return found


def listing(items: Sequence[Item], row: Callable[[Item], str], most: int, left_out: str) -> ToolResult:
    """The rows of the first ``most`` items, a line each; where there are more, a last line counts
    them: ``[most of N left_out]`` (``left_out`` names the rows and says how to find the others).
    A name that is not UTF-8 is shown with U+FFFD: a lone surrogate cannot be journaled."""
    lines = [storable(row(item)) for item in items[:most]]
    if len(items) > most:
        lines.append(f"[{most} of {len(items)} {left_out}]")
    return ToolResult(output="\n".join(lines), is_error=False)
