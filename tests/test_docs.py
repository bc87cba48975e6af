"""The documentation says what zagent does.

- ``docs/tutorial.md`` runs as written: its ```sh blocks, in order, in one ``bash -e``
  process, exit 0, and the output each ```text block shows after a command block is what
  that block prints (:func:`shown_mismatch`: every line, ``...`` standing for lines left
  out; ids, pids, times, durations and temporary paths aside). The ``$ zagent`` transcripts
  of docs/cli.md and others are checked the same way by test_doc_transcripts.py.
- Every ``zagent`` command and option that ``docs/cli.md`` (or ``docs/audit.md``) mentions
  exists (checked against ``zagent ... --help``), and every command and option of
  ``--help`` is documented in ``docs/cli.md``; no help text holds reStructuredText markup.
- The reference pages name what zagent has: every setting of ``Config`` in manifest.md's
  config.json table, every built-in among the reserved names, every audit view (listed,
  counted, and each column in order); no table row strays outside its table.
- The Python examples of ``docs/python-api.md`` run, and the first prints what the page says.

In the tutorial, ```sh blocks are commands and a ```text block right after one is its
output; other blocks (plain ```, ```json, ```python) are not run.
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from functools import cache
from pathlib import Path
from typing import get_args

import forked
import pytest
from pydantic import BaseModel

DOCS = Path(__file__).resolve().parent.parent / "docs"
BIN = Path(sys.executable).parent
MARKER = "@@zagent-docs-block-end@@"
#: A fenced block: its fence (three backticks or more, closed by the same), language and body.
FENCE = re.compile(r"^(`{3,})([\w-]*)\n(.*?)^\1[ \t]*$", re.S | re.M)


def fenced_blocks(path: Path) -> list[tuple[str, str]]:
    """``(language, body)`` of every fenced block of a Markdown file, in order."""
    return [(m.group(2), m.group(3)) for m in FENCE.finditer(path.read_text(encoding="utf-8"))]


def command_steps(blocks: Iterable[tuple[str, str]]) -> list[tuple[str, str | None]]:
    """Each ```sh block of ``(language, body)`` blocks with the ```text block right after it, if any."""
    steps: list[tuple[str, str | None]] = []
    for language, body in blocks:
        if language == "sh":
            steps.append((body, None))
        elif language == "text" and steps and steps[-1][1] is None:
            steps[-1] = (steps[-1][0], body)
    return steps


def tutorial_steps() -> list[tuple[str, str | None]]:
    """Each ```sh block of the tutorial with the ```text block right after it, if any."""
    return command_steps(fenced_blocks(DOCS / "tutorial.md"))


def sections(path: Path) -> dict[str, str]:
    """The ``## `` sections of a Markdown file, by title."""
    parts = re.split(r"^## ", path.read_text(encoding="utf-8"), flags=re.M)
    return {part.split("\n", 1)[0]: part for part in parts}


def section_steps(path: Path, titles: Iterable[str]) -> list[tuple[str, str | None]]:
    """:func:`command_steps` of the ``## `` sections of a Markdown file with these titles, in this order."""
    by_title = sections(path)
    return command_steps((m.group(2), m.group(3)) for title in titles for m in FENCE.finditer(by_title[title]))


def run_steps(steps: list[tuple[str, str | None]], cwd: Path, env: dict[str, str], *,
              errexit: bool = True) -> tuple[int, list[str], str]:
    """Run the command blocks in order in one bash, as a reader would type them.

    Returns (exit status, the output of each block, all output). ``errexit``: run it with
    ``bash -e``, stopping at the first command that fails.
    """
    script = "".join(f"{body}echo '{MARKER}'\n" for body, _ in steps)
    proc = subprocess.run(
        ["bash", *(["-e"] if errexit else []), "-c", script], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300,
    )
    return proc.returncode, proc.stdout.split(MARKER + "\n"), proc.stdout


def _path_with_zagent(bin_dir: Path) -> str:
    """PATH with this environment's ``zagent``, ``python3`` and ``sqlite-utils`` first.

    They are the scripts beside ``sys.executable`` when zagent is installed there (pip,
    a venv); any that is missing gets a small shim in ``bin_dir`` running this interpreter.
    """
    shims = {"zagent": "-m zagent_cli", "python3": "", "sqlite-utils": "-m sqlite_utils"}
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, args in shims.items():
        if not (BIN / name).exists():
            shim = bin_dir / name
            shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" {args} "$@"\n')
            shim.chmod(0o755)
    return os.pathsep.join([str(bin_dir), str(BIN), os.environ.get("PATH", "")])


def _clean_env(tmp: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("ZAGENT_")}
    env["PATH"] = _path_with_zagent(tmp / "bin")
    env["TMPDIR"] = str(tmp)  # the tutorial's mktemp folders end up under pytest's tmp_path
    env["HOME"] = str(tmp)  # a page that sets no ZAGENT_HOME uses ~/.zagent: never the real one
    return env


@pytest.fixture(scope="module")
def tutorial_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, list[str], str]:
    """Run the tutorial once: (exit status, the output of each command block, all output).

    Once per test run, not per worker: pytest-xdist may hand its two tests to two workers, and
    the first to get here runs it while the other waits for what it printed.
    """
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:  # one test process
        tmp = tmp_path_factory.mktemp("tutorial")
        return run_steps(tutorial_steps(), tmp, _clean_env(tmp))
    import fcntl
    import json

    shared = tmp_path_factory.getbasetemp().parent / f"tutorial-{run}"  # the run's folder, above each worker's
    with open(f"{shared}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not Path(f"{shared}.json").exists():
            tmp = tmp_path_factory.mktemp("tutorial")
            Path(f"{shared}.json").write_text(json.dumps(run_steps(tutorial_steps(), tmp, _clean_env(tmp))))
        status, blocks, output = json.loads(Path(f"{shared}.json").read_text())
    return status, blocks, output


def test_tutorial_has_command_blocks() -> None:
    steps = tutorial_steps()
    assert len(steps) >= 10
    assert steps[0][0].startswith("export ZAGENT_HOME=$(mktemp -d)")


def test_tutorial_runs_as_written(tutorial_run: tuple[int, list[str], str]) -> None:
    status, blocks, output = tutorial_run
    assert status == 0, f"the tutorial failed (exit {status}) in block {len(blocks)}:\n{output}"
    assert len(blocks) == len(tutorial_steps()) + 1  # every block ran to its marker
    for line in [
        "Hello, Ada!",
        "greet was not run: its arguments do not match its parameters.",
        'unknown argument "nmae" (allowed: name, times)',
        'missing argument "name"',
        'argument "times": must be <= 3 (got 5)',
        '[exit code 2]',
        "exit status: 1",
        "exit status: 2",
        "notes.txt: 2 of 4 lines contain 'todo':",
        "no such file: todo.txt",
        "coerced: greet [{'path': 'times', 'before': '2', 'after': 2}]",
        'unknown field "descripton" is ignored (did you mean "description"?)',
        'error: tools/shout: not loaded: missing required field "description"',
        "doctor exit status: 1",
        "all good",
        "IT WORKS",
        "started as task #1; its notes reach you as it runs and you are woken with its result when it exits "
        "(terminal tool: list, read, wait, kill)",
        "[info: indexed notes.txt (1 of 2)]",
        "[info: task #1 (index_files) finished:",
        "  <- error: greet was not run: its arguments do not match its parameters. argument \"times\": must be <= 3 (got 5)",
        "  <- ok: Hello, Ada! Hello, Ada!",
        "assistant: Done: Ada was greeted twice.",
    ]:
        assert line in output, f"{line!r} is not in the tutorial's output:\n{output}"


# -- the outputs shown are the outputs printed ---------------------------------------------

_VARIABLE = [
    (re.compile(r"(?:/[^\s/\"'()]+)*/tmp\.[A-Za-z0-9]+"), "<tmp>"),  # mktemp -d folders
    (re.compile(r"\b\d{8}-\d{6}-[0-9a-f]{6}\b"), "<session>"),
    (re.compile(r"\bcall_[0-9a-f]{12}\b"), "<call>"),
    (re.compile(r"\bwake_[0-9a-f]{12}\b"), "<wake>"),
    (re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:\.\d+)?Z?"), "<date>"),
    (re.compile(r"\b\d\d:\d\d:\d\d\.\d{3}\b"), "<time>"),
    (re.compile(r"\b\d\d:\d\d:\d\dZ"), "<time>Z"),  # task start and end times
    (re.compile(r"\bpid \d+\b"), "pid <pid>"),
    (re.compile(r" *\b\d+ ms\b"), " <n> ms"),  # right-aligned in columns: the padding varies too
    (re.compile(r"\b\d+\.\d s\b"), "<n> s"),  # a sub-agent's time
    (re.compile(r"\bzagent \d+\.\d+[^\s,]*"), "zagent <version>"),
    (re.compile(r"^(\s*)#\d+ (v\d+ )"), r"\1#<seq> \2"),  # an event of --events: its global position varies
    (re.compile(r'"(pid|start_ticks|offset|duration_ms)": \d+'), r'"\1": <n>'),
    (re.compile(r'"boot_id": "[^"]*"'), '"boot_id": "<boot>"'),
    (re.compile(r'"[^"\s]*/python[\d.]*"'), '"<python>"'),  # the interpreter a tool ran with
    (re.compile(r"grep runs (?:ripgrep \([^)]*\)|its Python search \(no rg on PATH\))"), "grep runs <its search>"),
]


def _normalize(line: str) -> str:
    for pattern, replacement in _VARIABLE:
        line = pattern.sub(replacement, line)
    return line.rstrip()


def _matches(shown: str, line: str) -> bool:
    """Whether a line shown (normalised) stands for a line printed (normalised)."""
    if shown.endswith("...") and len(shown) > 23:
        # A line zagent shortened: where it was cut depends on the length of what came
        # before (durations, paths), so compare its start only.
        return line.startswith(shown[:-23])
    return line == shown


def shown_mismatch(shown: str, printed: str, *, excerpts: bool = False) -> str | None:
    """How the output ``shown`` differs from the output ``printed``, as a diff; None if it does not.

    Every line printed must be shown, in order, blank lines aside; a line ``...`` alone
    (indented or not) stands for any number of lines left out, and a line ending in
    ``...`` for a line zagent shortened. With ``excerpts``, the lines shown need only be
    among those printed, in order (as if a ``...`` stood between any two of them).
    """
    wanted = [_normalize(line) for line in shown.splitlines() if line.strip()]
    if excerpts:
        wanted = ["...", *(part for line in wanted for part in (line, "..."))]
    actual = [_normalize(line) for line in printed.splitlines() if line.strip()]
    # seen[i][j]: wanted[:i] stands for actual[:j] (a glob match, "..." the star).
    seen = [[False] * (len(actual) + 1) for _ in range(len(wanted) + 1)]
    seen[0][0] = True
    for i, line in enumerate(wanted, start=1):
        for j in range(len(actual) + 1):
            if line.strip() == "...":
                seen[i][j] = seen[i - 1][j] or (j > 0 and seen[i][j - 1])
            else:
                seen[i][j] = j > 0 and seen[i - 1][j - 1] and _matches(line, actual[j - 1])
    if seen[len(wanted)][len(actual)]:
        return None
    placed = max(i for i in range(len(wanted) + 1) if any(seen[i]))
    where = (f"the first line shown that is not printed where it stands: {wanted[placed]!r}" if placed < len(wanted)
             else "every line shown is printed, and more after them")
    return where + "\n" + "\n".join(difflib.unified_diff(wanted, actual, "shown", "printed", lineterm="", n=2))


def test_tutorial_outputs_are_what_it_prints(tutorial_run: tuple[int, list[str], str]) -> None:
    status, blocks, output = tutorial_run
    assert status == 0, output
    assert assert_shown_is_printed("docs/tutorial.md", tutorial_steps(), blocks) >= 10


def assert_shown_is_printed(where: str, steps: list[tuple[str, str | None]], blocks: list[str],
                            normalize: Callable[[str], str] = lambda text: text, *, excerpts: bool = False) -> int:
    """Assert that each block of ``steps`` that shows an output shows what it printed
    (:func:`shown_mismatch`; ``excerpts``: some of it).

    ``blocks`` is the output of each block (:func:`run_steps`); ``normalize`` rewrites both
    sides first. Returns how many blocks show an output.
    """
    checked = 0
    for number, ((command, shown), printed) in enumerate(zip(steps, blocks), start=1):
        if shown is None:
            continue
        checked += 1
        mismatch = shown_mismatch(normalize(shown), normalize(printed), excerpts=excerpts)
        assert mismatch is None, (
            f"command block {number} of {where}:\n{command}\nshows another output than it prints:\n{mismatch}"
            f"\n\nit printed:\n{printed}"
        )
    return checked


def test_normalization_keeps_what_matters() -> None:
    line = "[ok in 34 ms; journaled as session 20261130-050611-6ee3d4, call call_f1027e046eaa]"
    assert _normalize(line) == "[ok in <n> ms; journaled as session <session>, call <call>]"
    assert _normalize("no such file: x (in /tmp/pytest-of-u/pytest-1/t0/tmp.AbC123xyZ9)") == "no such file: x (in <tmp>)"
    assert (_normalize("task #1 index_files: exited, exit 0, pid 11873, started 05:06:17Z, ended 05:06:18Z")
            == "task #1 index_files: exited, exit 0, pid <pid>, started <time>Z, ended <time>Z")
    assert _normalize("model: 3 replies in 1 turns, 197 tokens in, 22 out") == "model: 3 replies in 1 turns, 197 tokens in, 22 out"
    assert _normalize("  #38 v2 06:01:07.569 user_message") == "  #<seq> v2 <time> user_message"
    assert shown_mismatch("a\n\nc\n", "a\nc\n\n") is None
    assert shown_mismatch("a\nc\n", "a\nb\nc\n") is not None  # a line printed and not shown
    assert shown_mismatch("a\n  ...\nc\n", "a\nb\nb\nc\n") is None and shown_mismatch("a\n...\nc", "a\nc") is None
    assert shown_mismatch("c\n...\na\n", "a\nb\nc\n") is not None
    assert shown_mismatch("a\nc\n", "a\nb\nc\nd\n", excerpts=True) is None
    assert shown_mismatch("c\na\n", "a\nb\nc\n", excerpts=True) is not None
    assert shown_mismatch("a long line that zagent cut short befo...", "a long line that zagent cut short at a point") is None


# -- docs/cli.md names only real commands and options -----------------------------------------


def _zagent_argv() -> list[str]:
    script = BIN / "zagent"
    return [str(script)] if script.exists() else [sys.executable, "-m", "zagent_cli"]


@cache
def _help_text(path: tuple[str, ...]) -> str:
    """What ``zagent *path --help`` prints."""
    proc = forked.run([*forked.CLI, *path, "--help"], capture_output=True, text=True, timeout=60,
                      env={k: v for k, v in os.environ.items() if not k.startswith("ZAGENT_")})
    assert proc.returncode == 0, f"zagent {' '.join(path)} --help failed:\n{proc.stdout}{proc.stderr}"
    return proc.stdout


@cache
def _help(path: tuple[str, ...]) -> tuple[dict[str, tuple[str, bool]], frozenset[str]]:
    """``({spelling: (option, takes a value)}, subcommands)`` of ``zagent *path --help``.

    An option is named by its last spelling (``-v, --verbose`` is ``--verbose``).
    """
    options: dict[str, tuple[str, bool]] = {}
    commands: set[str] = set()
    section = None
    for line in _help_text(path).splitlines():
        if re.match(r"^\S.*:$", line):
            section = line[:-1]
            continue
        if not line.startswith("  ") or not line.strip():
            continue
        first_column = re.split(r"\s{2,}", line.strip())[0]
        if section == "Options" and first_column.startswith("-"):
            spellings = [spelling.partition(" ") for spelling in first_column.split(", ")]
            for name, _, metavar in spellings:
                options[name] = (spellings[-1][0], bool(metavar))
        elif section == "Commands":
            commands.add(first_column.split()[0])
    return options, frozenset(commands)


def _cli_doc_mentions(page: str = "cli.md") -> list[str]:
    """Every ``zagent ...`` command line of a page of docs/ (docs/cli.md by default).

    Code spans of the prose, ``$ zagent ...`` lines of ```text blocks (the rest of them is
    output), and ``zagent ...`` lines of other blocks (synopses).
    """
    text = (DOCS / page).read_text(encoding="utf-8")
    mentions: list[str] = []
    for language, body in fenced_blocks(DOCS / page):
        for line in body.splitlines():
            if language == "text":
                if line.startswith("$ zagent"):
                    mentions.append(line[2:])
            elif line == "zagent" or line.startswith("zagent "):
                mentions.append(line)
    prose = FENCE.sub("", text)
    for span in re.findall(r"`([^`\n]+)`", prose):
        found = re.search(r"(?:^|\s)(zagent(?: .*)?)$", span)
        if found:
            mentions.append(found.group(1))
    return mentions


_PLACEHOLDER = re.compile(r"^(?:[A-Z][A-Z_]*|\.\.\.)$")
_SHELL_STOP = {"|", "||", "&&", ";", ">", ">>", "2>&1", "<"}


def _walk(mention: str) -> tuple[list[tuple[tuple[str, ...], str]], list[tuple[str, ...]], list[str]]:
    """(options used with their command path, command paths reached, problems) of one mention."""
    tokens = shlex.split(mention.replace("[", " ").replace("]", " ").replace("|", " | "), comments=True)
    path: tuple[str, ...] = ()
    used: list[tuple[tuple[str, ...], str]] = []
    reached = [path]
    problems: list[str] = []
    skip_value = False
    for token in tokens[1:]:
        if token in _SHELL_STOP:
            break
        if skip_value:
            skip_value = False
            continue
        options, commands = _help(path)
        if token.startswith("-") and token != "-":
            name = token.split("=", 1)[0]
            names = [f"-{c}" for c in name[1:]] if re.fullmatch(r"-[A-Za-z]{2,}", name) else [name]
            for option in names:
                if option not in options:
                    problems.append(f"{mention!r}: `zagent {' '.join(path)}` has no option {option}")
                else:
                    canonical, takes_value = options[option]
                    used.append((path, canonical))
                    skip_value = takes_value and "=" not in token
        elif token in commands:
            path = (*path, token)
            reached.append(path)
        elif commands and not _PLACEHOLDER.match(token):
            problems.append(f"{mention!r}: `zagent {' '.join(path)}` has no command {token!r}")
            break
    return used, reached, problems


def _all_commands(path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [path]
    for command in sorted(_help(path)[1]):
        found += _all_commands((*path, command))
    return found


def test_cli_doc_mentions_only_real_commands_and_options() -> None:
    mentions = _cli_doc_mentions()
    assert len(mentions) > 20
    problems = [problem for mention in mentions for problem in _walk(mention)[2]]
    assert not problems, "docs/cli.md mentions what zagent does not have:\n" + "\n".join(problems)


def test_audit_doc_mentions_only_real_commands_and_options() -> None:
    mentions = _cli_doc_mentions("audit.md")
    assert len(mentions) > 10
    problems = [problem for mention in mentions for problem in _walk(mention)[2]]
    assert not problems, "docs/audit.md mentions what zagent does not have:\n" + "\n".join(problems)


def test_cli_doc_covers_every_command_and_option() -> None:
    used: set[tuple[tuple[str, ...], str]] = set()
    reached: set[tuple[str, ...]] = set()
    for mention in _cli_doc_mentions():
        options, paths, _ = _walk(mention)
        used.update(options)
        reached.update(paths)
    undocumented = []
    for path in _all_commands():
        if path not in reached:
            undocumented.append(f"zagent {' '.join(path)}")
        for option in sorted({canonical for canonical, _ in _help(path)[0].values()}):
            if option != "--help" and (path, option) not in used:
                undocumented.append(f"zagent {' '.join(path)} {option}".replace("  ", " "))
    assert not undocumented, "docs/cli.md does not mention:\n" + "\n".join(undocumented)


def test_help_is_plain_text() -> None:
    # click prints docstrings as they are: reStructuredText's ``x`` reaches the user as is.
    marked = [f"{' '.join(('zagent', *path))} --help: {line.strip()}" for path in _all_commands()
              for line in _help_text(path).splitlines() if "``" in line]
    assert not marked, "help texts with reStructuredText markup (write `x`, or plain words):\n" + "\n".join(marked)


def test_cli_doc_walk_catches_mistakes() -> None:
    assert _walk("zagent --home DIR tools run NAME --args '{}' --json")[2] == []
    assert _walk("zagent -vv sessions show --events")[2] == []
    assert _walk("zagent tools list --home DIR")[2]
    assert _walk("zagent tools frobnicate")[2]
    assert _walk("zagent sessions show --event")[2]


# -- the reference pages name what zagent has ------------------------------------------------


def _rows(page: str, title: str) -> dict[str, str]:
    """Each table row of a section, by its first cell's code span (``| `key` | ...``)."""
    return {m.group(1): m.group(0) for m in re.finditer(r"^\| `([^`]+)` \|.*$", sections(DOCS / page)[title], re.M)}


def test_manifest_doc_reserves_every_built_in_name() -> None:
    from zagent_core.builtins.registry import all_builtins

    row = _rows("manifest.md", "Fields")["name"]
    reserved = re.search(r"are reserved[^:]*:(.*?)\(", row)
    assert reserved, row
    assert set(re.findall(r"`(\w+)`", reserved.group(1))) == set(all_builtins())


def _models_in(annotation: object) -> list[type[BaseModel]]:
    """The pydantic models inside a type (``dict[str, McpServerConfig]``, ``list[NormaliseRule]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for argument in get_args(annotation) for model in _models_in(argument)]


def _settings(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, list[type[BaseModel]]]]:
    """Every setting of a config model, dotted (``agent.max_turns``), with the models of its entries:
    a section (a model field) is walked into; a map or list of models is one setting."""
    for name, field in model.model_fields.items():
        inner = _models_in(field.annotation)
        if inner == [field.annotation]:
            yield from _settings(inner[0], f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", inner


def test_the_config_reference_documents_every_setting() -> None:
    from zagent_core.config import Config

    rows = _rows("manifest.md", "config.json")
    missing = []
    for key, entries in _settings(Config):
        if key not in rows:
            missing.append(key)
        # A map or list of entries (mcp.servers, spawn.subagents) names each field of an entry.
        missing += [f"{key}: {field}" for entry in entries for field in entry.model_fields
                    if not re.search(rf'[`"]{field}[`"]', rows.get(key, ""))]
    assert not missing, "docs/manifest.md's config.json table lacks:\n" + "\n".join(missing)
    assert len(rows) >= 50


def test_the_config_reference_example_loads_without_a_problem(tmp_path: Path) -> None:
    from zagent_core.config import load_config

    example = next(body for language, body in fenced_blocks(DOCS / "manifest.md") if language == "json"
                   and body.startswith('{\n  "agent"'))
    (tmp_path / "config.json").write_text(example)
    config, problems = load_config(tmp_path / "config.json")
    assert problems == []
    assert {key for key, _ in _settings(type(config))} >= {"agent.max_concurrent_tools", "spawn.subagents"}


def _table_rows_outside_tables(text: str) -> list[str]:
    """Lines that start with ``|`` outside code blocks and outside a table: Markdown shows
    their pipes as text (a table ends at the first line that is not a row)."""
    stray = []
    in_table = in_fence = False
    lines = text.splitlines()
    for number, line in enumerate(lines):
        if line.startswith("```"):
            in_fence = not in_fence
        is_row = not in_fence and line.startswith("|")
        starts = is_row and number + 1 < len(lines) and re.match(r"^\|(?: *:?-+:? *\|)+$", lines[number + 1])
        if is_row and not in_table and not starts:
            stray.append(line)
        in_table = is_row and (in_table or bool(starts))
    return stray


def test_every_table_row_is_inside_a_table() -> None:
    assert _table_rows_outside_tables("a\n| x |\n\n| h |\n| --- |\n| y |\n") == ["| x |"]
    for page in [*sorted(DOCS.glob("*.md")), DOCS.parent / "README.md"]:
        stray = _table_rows_outside_tables(page.read_text(encoding="utf-8"))
        assert not stray, f"{page.name}: rows outside a table (shown with their pipes):\n" + "\n".join(stray)


# -- docs/audit.md documents the views as they are ------------------------------------------


def _documented_columns(view: str) -> list[str]:
    """The first column of the table right under the ``### `view``` heading of docs/audit.md."""
    text = (DOCS / "audit.md").read_text(encoding="utf-8")
    section = text.split(f"### `{view}`\n", 1)[1].split("\n#", 1)[0]
    return re.findall(r"^\| `(\w+)` \|", section, re.M)


def test_audit_doc_lists_every_column_of_every_view(tmp_path: Path) -> None:
    from zagent_store import SQLiteJournal
    from zagent_store.views import VIEWS

    with SQLiteJournal(tmp_path / "journal.db") as journal:
        for view in [*VIEWS, "artifacts", "decisions"]:
            columns = [row[1] for row in journal.db.execute(f"PRAGMA table_info({view})").fetchall()]
            assert columns, view
            assert _documented_columns(view) == columns, f"docs/audit.md: the columns of {view}"


_NUMBERS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}


def test_audit_doc_lists_and_counts_every_view(tmp_path: Path) -> None:
    from zagent_store import SQLiteJournal

    with SQLiteJournal(tmp_path / "journal.db") as journal:
        views = {row[0] for row in journal.db.execute("SELECT name FROM sqlite_master WHERE type = 'view'")}
    text = (DOCS / "audit.md").read_text(encoding="utf-8")
    intro = text.split("\n## ", 1)[0]
    assert set(re.findall(r"^\| \[`(\w+)`\]", intro, re.M)) == views
    counted = re.findall(r"\b(" + "|".join(_NUMBERS) + r") (?:SQL \*\*)?views\b", text)
    assert counted and all(_NUMBERS[word] == len(views) for word in counted), counted


def test_postgres_doc_set_up_shows_what_doctor_prints(postgres_url: str, tmp_path: Path) -> None:
    set_up = next(body for language, body in fenced_blocks(DOCS / "postgres.md") if "zagent doctor" in body)
    url = re.search(r"^export ZAGENT_JOURNAL=(\S+)", set_up, re.M)
    shown = re.search(r"^zagent doctor +# (.*)$", set_up, re.M)
    assert url and shown, set_up
    env = _clean_env(tmp_path) | {"ZAGENT_JOURNAL": postgres_url, "ZAGENT_HOME": str(tmp_path / "home")}
    doctor = subprocess.run([*_zagent_argv(), "doctor"], env=env, capture_output=True, text=True, timeout=60)
    assert shown.group(1).replace(url.group(1), postgres_url) in doctor.stdout.splitlines(), doctor.stdout


# -- docs/python-api.md ----------------------------------------------------------------------


def test_python_api_examples_run(tmp_path: Path) -> None:
    blocks = fenced_blocks(DOCS / "python-api.md")
    examples = [body for language, body in blocks if language == "python"]
    assert len(examples) >= 2
    env = _clean_env(tmp_path)
    env["ZAGENT_HOME"] = str(tmp_path / "home")
    outputs = []
    for number, code in enumerate(examples, start=1):
        proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, f"example {number} of docs/python-api.md failed:\n{code}\n{proc.stderr}"
        outputs.append(proc.stdout)
    # The complete example is followed by what it prints.
    first = next(i for i, (language, _) in enumerate(blocks) if language == "python")
    language, shown = blocks[first + 1]
    assert language == "text"
    assert outputs[0] == shown
