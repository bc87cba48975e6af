"""CLI start-up: ``zagent --home H tools list`` with 50 tools, beside bare Python start-up.

A temp home gets 50 tool folders with realistic manifests (descriptions, parameter
schemas with types, enums, bounds, patterns, arrays and nested objects, every input and
output mode, "python"/"sh"/"node" programs found on PATH). The console script next to
``sys.executable`` is run as a subprocess, round-robin with the baselines
``python -c pass`` and ``python -c "import click"``, and the median of the runs is shown:

* with ``PYTHONDONTWRITEBYTECODE=1`` (as this environment sets it): zagent's own modules
  have no ``__pycache__`` and are compiled on every start (the stdlib and site-packages
  have theirs from installation), and
* without it (``env -u PYTHONDONTWRITEBYTECODE``), after a warm-up run that writes the
  bytecode cache.

To make both cases certain whatever the working tree holds, each runs a copy of zagent's
packages (in the temp dir, first on PYTHONPATH, so the editable install is not used and
nothing is written to the repo): one copy never gets a cache, the other gets one.

Then where the time goes, measured inside one process (imports vs loading the
manifests), and the top imports by cumulative time from ``python -X importtime``.

    /root/.pyenv/versions/3.11.7/bin/python bench/tools_list.py [--quick] [-n RUNS] [--tools N]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_MS = 250.0
BIN = Path(sys.executable).parent
ZAGENT = BIN / "zagent"

# -- a realistic home ---------------------------------------------------------------------

_SCHEMAS = [
    {  # text in, numbers out
        "type": "object",
        "properties": {
            "text": {"type": "string", "description": "The text to analyse."},
            "top": {"type": "integer", "minimum": 1, "maximum": 100, "description": "How many to list (default 5)."},
        },
        "required": ["text"],
        "additionalProperties": False,
    },
    {  # file access
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path, relative to the workspace."},
            "offset": {"type": "integer", "minimum": 0, "description": "First line to read (0-based)."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 2000, "description": "Lines to read."},
            "encoding": {"type": "string", "enum": ["utf-8", "latin-1", "utf-16"], "default": "utf-8"},
        },
        "required": ["path"],
        "additionalProperties": False,
    },
    {  # search with a pattern and a list of globs
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "minLength": 1, "description": "Regular expression to search for."},
            "globs": {"type": "array", "items": {"type": "string"}, "maxItems": 20,
                      "description": "File globs to include, e.g. [\"*.py\"]."},
            "case_sensitive": {"type": "boolean", "description": "Match case (default false)."},
            "max_results": {"type": "integer", "minimum": 1, "maximum": 500},
        },
        "required": ["pattern"],
        "additionalProperties": False,
    },
    {  # an HTTP request with nested headers
        "type": "object",
        "properties": {
            "url": {"type": "string", "pattern": "^https?://", "description": "The URL to fetch."},
            "method": {"type": "string", "enum": ["GET", "POST", "PUT", "DELETE", "HEAD"]},
            "headers": {"type": "object", "additionalProperties": {"type": "string"},
                        "description": "Extra request headers."},
            "body": {"type": ["string", "null"], "description": "Request body, for POST and PUT."},
            "timeout": {"type": "number", "exclusiveMinimum": 0, "maximum": 60},
        },
        "required": ["url"],
        "additionalProperties": False,
    },
    {  # structured records
        "type": "object",
        "properties": {
            "rows": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "quantity": {"type": "integer", "minimum": 0},
                        "price": {"type": "number", "minimum": 0},
                        "tags": {"type": "array", "items": {"type": "string"}},
                    },
                    "required": ["name", "quantity"],
                },
                "description": "The records to process.",
            },
            "format": {"type": "string", "enum": ["csv", "json", "markdown"]},
        },
        "required": ["rows"],
        "additionalProperties": False,
    },
    {  # no arguments
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    },
    {  # image options
        "type": "object",
        "properties": {
            "color": {"type": "string", "pattern": "^#[0-9a-fA-F]{6}$", "description": "Colour as #rrggbb."},
            "width": {"type": "integer", "minimum": 1, "maximum": 1024},
            "height": {"type": "integer", "minimum": 1, "maximum": 1024},
            "style": {"type": "string", "enum": ["solid", "gradient"]},
            "name": {"type": "string", "pattern": "^[a-z0-9_-]{1,40}$"},
        },
        "required": ["color"],
        "additionalProperties": False,
    },
    {  # a choice of shapes
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to look up."},
            "filters": {
                "type": "object",
                "properties": {
                    "since": {"type": "string", "format": "date", "description": "YYYY-MM-DD."},
                    "until": {"type": "string", "format": "date"},
                    "kind": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
                },
                "additionalProperties": False,
            },
            "page": {"type": "integer", "minimum": 1, "default": 1},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
]

_NAMES = [
    "word_count", "read_text", "grep_files", "http_fetch", "table_render", "list_processes", "image_maker",
    "search_notes", "line_count", "tail_file", "find_todo", "http_post", "csv_summary", "disk_usage",
    "make_badge", "search_issues", "char_count", "head_file", "find_symbol", "url_status", "invoice_total",
    "git_status", "make_thumbnail", "search_mail", "sentence_split", "stat_file", "find_large_files",
    "dns_lookup", "json_format", "uptime_info", "make_chart", "search_calendar", "spell_check", "diff_files",
    "regex_test", "rss_read", "yaml_to_json", "env_report", "qr_code", "search_docs", "slugify", "hash_file",
    "count_imports", "weather_now", "sort_records", "git_log", "color_swatch", "search_contacts", "translate",
    "archive_list",
]


def make_home(root: Path, count: int) -> Path:
    home = root / "home"
    modes = [("stdin_json", "json"), ("stdin_json", "text"), ("args_json", "text"), ("env", "text")]
    for i in range(count):
        name = _NAMES[i % len(_NAMES)] + ("" if i < len(_NAMES) else f"_{i // len(_NAMES)}")
        folder = home / "tools" / name
        folder.mkdir(parents=True)
        schema = _SCHEMAS[i % len(_SCHEMAS)]
        input_mode, output_mode = modes[i % len(modes)]
        if i % 10 == 7:
            program, script = "sh", f"{name}.sh"
            (folder / script).write_text('#!/bin/sh\necho "$ZAGENT_ARGS_JSON"\n')
        elif i % 10 == 9:
            program, script = "node", f"{name}.js"
            (folder / script).write_text("process.stdout.write(JSON.stringify({output: 'ok'}))\n")
        else:
            program, script = "python", f"{name}.py"
            (folder / script).write_text("import json, sys\nprint(json.dumps({'output': 'ok'}))\n")
        manifest = {
            "name": name,
            "description": (
                f"{name.replace('_', ' ').capitalize()}: does one small, well-defined job and prints the "
                "result. Use when the user asks for it by name or describes this job; do not use it for "
                "anything that needs the network unless the tool says so."
            ),
            "parameters": schema,
            "command": [program, script],
            "input": input_mode,
            "output": output_mode,
        }
        if i % 3 == 0:
            manifest["timeout_seconds"] = 30
        if i % 5 == 0:
            manifest["cwd"] = "tool_dir"
        if i % 7 == 0:
            manifest["env"] = {"TOOL_CACHE": "{scratch}/cache", "LANG": "C.UTF-8"}
        if i % 11 == 0:
            manifest["platforms"] = ["linux", "darwin"]
        if i % 13 == 0:
            manifest["attach_outputs"] = True
        (folder / f"{name}.json").write_text(json.dumps(manifest, indent=2))
    (home / "config.json").write_text(json.dumps({"tools": {"disabled": [_NAMES[5]]}}, indent=2))
    # Written a while ago, as a user's tools are: `tools list` keeps its listing only of files that
    # have settled (zagent_cli/tools_cache.py), so the warm-up run keeps it and the timed runs use it.
    then = time.time() - 3600
    for path in [home, *home.rglob("*")]:
        os.utime(path, (then, then))
    return home


# -- timing -------------------------------------------------------------------------------


PACKAGES = ("zagent_core", "zagent_store", "zagent_cli")
SET, UNSET = "PYTHONDONTWRITEBYTECODE=1", "unset (bytecode cached)"


def copy_sources(dest: Path) -> Path:
    """A copy of zagent's packages without ``__pycache__``, to put first on PYTHONPATH.

    Whether zagent's own modules start from bytecode depends on whether a ``__pycache__``
    happens to exist next to them; the copies make both cases certain, and leave the
    working tree alone. (The editable install's finder comes after PYTHONPATH.)
    """
    for package in PACKAGES:
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.origin is not None, package
        shutil.copytree(Path(spec.origin).parent, dest / package, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def environments(tmp: Path) -> dict[str, dict[str, str]]:
    """SET: the flag, and sources that never get a bytecode cache (as in this environment).
    UNSET: no flag, sources whose cache the warm-up run writes."""
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
    extra = os.environ.get("PYTHONPATH")
    envs = {}
    for name, folder in ((SET, "src-nocache"), (UNSET, "src-cached")):
        path = str(copy_sources(tmp / folder)) + (os.pathsep + extra if extra else "")
        envs[name] = dict(base, PYTHONPATH=path, BENCH_CWD=str(tmp))
    envs[SET]["PYTHONDONTWRITEBYTECODE"] = "1"
    for name, env in envs.items():  # make sure the copies are what runs
        where = subprocess.run([sys.executable, "-c", "import zagent_cli; print(zagent_cli.__file__)"],
                               env=env, cwd=tmp, capture_output=True, text=True, check=True).stdout
        assert where.startswith(str(tmp)), (name, where)
    return envs


def time_run(argv: list[str], env: dict[str, str]) -> float:
    """Milliseconds for one run. (The cwd is the temp dir: ``-c`` puts it first on sys.path,
    and the repo's own packages must not shadow the copies.)"""
    start = time.perf_counter_ns()
    done = subprocess.run(argv, env=env, cwd=env["BENCH_CWD"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    elapsed = (time.perf_counter_ns() - start) / 1e6
    if done.returncode != 0:
        raise SystemExit(f"{argv} failed ({done.returncode}):\n{done.stderr.decode()}")
    return elapsed


BREAKDOWN = r"""
import json, sys, time
t0 = time.perf_counter()
import click
t1 = time.perf_counter()
import zagent_cli.main
t2 = time.perf_counter()
import zagent_core, zagent_core.config, zagent_core.tools.manifest, zagent_core.home  # what `tools list` imports
t3 = time.perf_counter()
home = zagent_core.home.Home(sys.argv[1])
config, _ = zagent_core.config.load_config(home.config_path)
first = zagent_core.tools.manifest.load_tools(home, config)
t4 = time.perf_counter()
again = zagent_core.tools.manifest.load_tools(home, config)
t5 = time.perf_counter()
from jsonschema.validators import validator_for
for tool in again.tools.values():
    validator_for(tool.manifest.parameters).check_schema(tool.manifest.parameters)
t6 = time.perf_counter()
print(json.dumps({
    "import click": t1 - t0,
    "import zagent_cli.main": t2 - t1,
    "import zagent_core, .config, .manifest (pydantic...)": t3 - t2,
    "first load_tools (incl. lazy jsonschema import)": t4 - t3,
    "load_tools again (manifests only, all imported)": t5 - t4,
    "  of which JSON Schema metaschema checks (check_schema)": t6 - t5,
    "tools": len(first.tools), "problems": len(first.problems),
}))
"""


def importtime(argv: list[str], env: dict[str, str], runs: int = 3) -> tuple[list[tuple[str, int, int, int]], int]:
    """Top-level picture of ``-X importtime``: (module, depth, self µs, cumulative µs), min over runs."""
    best: dict[str, tuple[int, int, int]] = {}
    order: list[str] = []
    for _ in range(runs):
        done = subprocess.run([sys.executable, "-X", "importtime", *argv], env=env, cwd=env["BENCH_CWD"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for line in done.stderr.splitlines():
            if not line.startswith("import time:") or "cumulative" in line:
                continue
            self_us, cumulative_us, name = line[len("import time:"):].split("|")
            depth = (len(name) - len(name.lstrip(" "))) // 2
            module = name.strip()
            value = (depth, int(self_us), int(cumulative_us))
            if module not in best:
                order.append(module)
                best[module] = value
            else:
                old = best[module]
                best[module] = (old[0], min(old[1], value[1]), min(old[2], value[2]))
    rows = [(m, *best[m]) for m in order]
    total = sum(c for _, depth, _, c in rows if depth == 0)
    return rows, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="5 runs of each instead of 11")
    parser.add_argument("-n", "--runs", type=int, help="runs of each command per environment (default 11, quick 5)")
    parser.add_argument("--tools", type=int, default=50, help="tool folders in the home (default 50)")
    parser.add_argument("--top", type=int, default=15, help="imports to list (default 15)")
    args = parser.parse_args()
    runs = args.runs or (5 if args.quick else 11)

    if ZAGENT.exists():
        zagent = [str(ZAGENT)]
        how = str(ZAGENT)
    else:
        zagent = [sys.executable, "-m", "zagent_cli"]
        how = f"{sys.executable} -m zagent_cli"

    with tempfile.TemporaryDirectory(prefix="zagent-bench-") as tmp:
        home = make_home(Path(tmp), args.tools)
        listing = [*zagent, "--home", str(home), "tools", "list"]
        commands = {
            "zagent tools list": listing,
            "zagent --help": [*zagent, "--help"],
            'python -c "pass"': [sys.executable, "-c", "pass"],
            'python -c "import click"': [sys.executable, "-c", "import click"],
        }
        envs = environments(Path(tmp))

        # Check the home loads as intended, and write the bytecode cache (warm-up, unset env).
        out = subprocess.run(listing, env=envs[UNSET], cwd=tmp, capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(out.stderr)
        loaded = [line for line in out.stdout.splitlines() if line.strip() and "[tools/" in line]
        if len(loaded) != args.tools or "problems:" in out.stdout:
            raise SystemExit(f"expected {args.tools} tools and no problems, got:\n{out.stdout}")
        for argv in commands.values():  # warm-up of every command in both environments
            for env in envs.values():
                time_run(argv, env)
        assert not list((Path(tmp) / "src-nocache").rglob("__pycache__")), "bytecode was written with the flag set"
        assert list((Path(tmp) / "src-cached").rglob("__pycache__")), "the warm-up wrote no bytecode"

        timings: dict[tuple[str, str], list[float]] = {(e, c): [] for e in envs for c in commands}
        for _ in range(runs):  # round-robin, so drift hits every command alike
            for env_name, env in envs.items():
                for name, argv in commands.items():
                    timings[(env_name, name)].append(time_run(argv, env))

        inside = json.loads(subprocess.run(
            [sys.executable, "-c", BREAKDOWN, str(home)], env=envs[UNSET], cwd=tmp,
            capture_output=True, text=True, check=True,
        ).stdout)
        # -X importtime needs the interpreter first: run the console script (a Python file) or -m.
        script = zagent[1:] if zagent[0] == sys.executable else zagent
        imports, imports_total = importtime([*script, "--home", str(home), "tools", "list"],
                                            envs[UNSET])

    print(f"zagent tools list start-up (Python {sys.version.split()[0]}, {os.cpu_count()} cpus)")
    print(f"{args.tools} tools in the home; median of {runs} runs, round-robin; command: {how}; target <= {TARGET_MS:.0f} ms")
    print("zagent's packages run from temp copies: without __pycache__ when the flag is set, with it when unset")
    print()
    env_names = list(envs)
    header = f"{'command':<28}" + "".join(f"{name:>28}" for name in env_names)
    print(header)
    print("-" * len(header))
    medians = {key: statistics.median(values) for key, values in timings.items()}
    for name in commands:
        print(f"{name:<28}" + "".join(f"{medians[(e, name)]:>25.1f} ms" for e in env_names))
    print()
    for e in env_names:
        listing_ms = medians[(e, "zagent tools list")]
        base = medians[(e, 'python -c "pass"')]
        click_ms = medians[(e, 'python -c "import click"')]
        verdict = "ok" if listing_ms <= TARGET_MS else f"MISSED by {listing_ms - TARGET_MS:.0f} ms ({(listing_ms / TARGET_MS - 1) * 100:.0f}%)"
        print(f"{e}: tools list {listing_ms:.0f} ms = {listing_ms / base:.1f}x python start-up, "
              f"{listing_ms / click_ms:.1f}x import click, {listing_ms - base:.0f} ms above bare start-up; "
              f"target {TARGET_MS:.0f} ms: {verdict}")

    print()
    print("inside one process (bytecode cached), where the time goes:")
    for label, seconds in inside.items():
        if label in ("tools", "problems"):
            continue
        print(f"  {label:<54} {seconds * 1000:7.1f} ms")
    print(f"  ({inside['tools']} tools loaded, {inside['problems']} problems)")

    print()
    print(f"python -X importtime, zagent tools list, bytecode cached, min of 3 runs: {imports_total / 1000:.1f} ms of imports")
    print(f"top {args.top} by cumulative time (depth 0 = imported by zagent itself or the console script):")
    print(f"  {'cumulative ms':>13} {'self ms':>8}  depth  module")
    for module, depth, self_us, cumulative_us in sorted(imports, key=lambda r: -r[3])[: args.top]:
        print(f"  {cumulative_us / 1000:>13.1f} {self_us / 1000:>8.1f}  {depth:>5}  {'  ' * depth}{module}")
    print()
    print(f"top {args.top} by self time (the module's own code, not what it imports):")
    for module, _depth, self_us, cumulative_us in sorted(imports, key=lambda r: -r[2])[: args.top]:
        print(f"  {cumulative_us / 1000:>13.1f} {self_us / 1000:>8.1f}  {module}")
    top_level = sorted((r for r in imports if r[1] == 0), key=lambda r: -r[3])[: args.top]
    print()
    print(f"top-level imports (depth 0) by cumulative time (site is in every start-up):")
    for module, _depth, self_us, cumulative_us in top_level:
        print(f"  {cumulative_us / 1000:>13.1f} {self_us / 1000:>8.1f}  {module}")


if __name__ == "__main__":
    main()
