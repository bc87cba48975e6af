"""``zagent doctor``: check the home's manifests, config, limits and journal."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from zagent_cli.context import Context, home_problem
from zagent_cli.output import ERROR, OK, emit_json, plural, say, say_problems

if TYPE_CHECKING:
    from zagent_core import Config, Home, Problem, ToolSet
    from zagent_core.tools.skills import Catalog


def _journal_report(obj: Context, home: Home) -> dict[str, Any]:
    """Doctor's look at the journal: where it is, whether it exists, its problems and counts."""
    from zagent_store.opening import describe, is_postgres, sqlite_path
    from zagent_store.wal import vanished_wal

    report: dict[str, Any] = {"path": describe(obj.journal_location), "exists": obj.journal_exists(), "problems": []}
    if report["exists"] and not is_postgres(obj.journal_location):
        # Not opened then: an open makes a new, empty write-ahead log, and the signs of the old one are gone.
        vanished = vanished_wal(sqlite_path(obj.journal_location))
        if vanished:
            report["problems"] = [vanished]
            return report
    if report["exists"]:
        try:
            # Where it may, doctor opens the journal as every command does (upgrading its schema).
            import os

            with obj.journal(read_only=not os.access(home.root, os.W_OK)) as journal:
                report["problems"] = journal.check()
                report.update(journal.stats())
        except click.ClickException as exc:
            report["problems"] = [exc.message]
    return report


def _sandbox_report(config: Config) -> dict[str, Any]:
    """Whether processes run in the sandbox here, and if not why; its settings."""
    from zagent_core.tools import sandbox

    return {"active": sandbox.unavailable() is None, "why_not": sandbox.unavailable(), **config.sandbox.model_dump()}


def _sandbox_line(report: dict[str, Any]) -> str:
    if not report["active"]:
        return f"sandbox: not active ({report['why_not']})"
    if report["mode"] == "off":
        confined = "no command confined (sandbox.mode is off); each call's processes die with it"
    else:
        whose = "every tool's" if report["tools"] == "all" else "shell commands (and tools whose manifest asks)"
        network = "network on" if report["network"] else "no network"
        confined = f"{whose} run {report['mode']}, {network}"
    return f"sandbox: active (bubblewrap): {confined}"


def _print_doctor(home: Home, config: Config, toolset: ToolSet, problems: list[Problem], journal: dict[str, Any],
                  builtins: str, skills: Catalog) -> None:
    from zagent_core.version import zagent_version

    limits = config.limits
    say(f"zagent {zagent_version()}, home {home.root}")
    not_loaded = len({p.source for p in toolset.broken})
    say(f"tools: {len(toolset.tools)} loaded, {not_loaded} not loaded, "
        f"{len(toolset.disabled & toolset.tools.keys())} disabled")
    say(builtins)
    if home.skills_dir.is_dir():  # a home without skills is not told of them
        say(f"skills: {len(skills.skills)} loaded, {len({p.source for p in skills.problems})} not loaded")
    if problems:
        say_problems(problems)
    say(f"limits: default timeout {limits.default_timeout_seconds:g} s, output cap "
        f"{limits.output_cap_bytes} bytes, kill grace {limits.kill_grace_seconds:g} s, "
        f"media up to {limits.media_max_bytes} bytes")
    say(f"capabilities: {config.capabilities.as_env()}")
    say(_sandbox_line(_sandbox_report(config)))
    if not journal["exists"]:
        say(f"journal: {journal['path']} (not created yet)")
    elif journal["problems"]:
        say(f"journal: {journal['path']}: {'; '.join(journal['problems'])}")
    else:
        say(f"journal: {journal['path']}: ok ({journal['events']} events, "
            f"{journal['sessions']} sessions, schema {journal['schema_version']})")


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_obj
def doctor(obj: Context, as_json: bool) -> None:
    """Check the home: manifests, config, effective limits and the journal.

    Exits 1 when anything is broken.
    """
    import os

    from zagent_core.builtins.grep import find_rg
    from zagent_core.config import load_config
    from zagent_core.drive.offers import home_tools, mcp_tools
    from zagent_core.problems import Problem
    from zagent_core.tools import sandbox
    from zagent_core.tools.manifest import start_problem
    from zagent_core.tools.skills import load_skills
    from zagent_core.version import zagent_version

    home = obj.locate_home()
    unusable = home_problem(home.root)
    config, config_problems = load_config(home.config_path)
    mcp, mcp_problems, server_of = mcp_tools(config, obj.workspace, home) if not unusable else ({}, [], {})
    toolset, builtins, builtin_problems = home_tools(home, config, reserved=mcp.keys())
    skills = load_skills(home)  # what home_tools reported of them, counted here
    unstartable = [Problem(source=f"tools/{tool.folder.name}", message=f"cannot start: {why}")
                   for _, tool in sorted(toolset.tools.items()) if (why := start_problem(tool))]
    # No sandbox is a warning: zagent runs as it always did, and says so.
    problems = config_problems + builtin_problems + mcp_problems + toolset.problems + unstartable + sandbox.problems()
    offered = [name for name in builtins if name not in toolset.disabled]
    if unusable:
        problems.insert(0, Problem(source="home", message=unusable))
    elif home.root.is_dir() and not os.access(home.root, os.W_OK):
        problems.insert(0, Problem(source="home", severity="warning", message=(
            f"the home {home.root} is read-only: nothing can run here (tools run, run and resume write the "
            "journal and the sessions folder)")))
    journal = _journal_report(obj, home) if not unusable else {
        "path": str(home.journal_path), "exists": False, "problems": []}
    broken = any(p.severity == "error" for p in problems) or bool(journal["problems"])
    if as_json:
        emit_json({
            "ok": not broken,
            "zagent_version": zagent_version(),
            "home": str(home.root),
            "tools": {"loaded": sorted(toolset.tools), "disabled": sorted(toolset.disabled)},
            "builtins": {"offered": offered, "ripgrep": find_rg()},
            "skills": {"loaded": list(skills.skills)},
            "mcp": {"servers": sorted(config.mcp.servers), "started": sorted(set(server_of.values())),
                    "tools": [name for name in mcp if name not in toolset.disabled]},
            "problems": [p.model_dump() for p in problems],
            "limits": config.limits.model_dump(),
            "capabilities": config.capabilities.model_dump(),
            "sandbox": _sandbox_report(config),
            "journal": journal,
        })
    else:
        rg = find_rg()
        started = len(set(server_of.values()))
        mcp_line = (f"\nmcp: {started} of {plural(len(config.mcp.servers), 'server')} started, "
                    f"{plural(len([n for n in mcp if n not in toolset.disabled]), 'tool')} offered"
                    if config.mcp.servers else "")
        _print_doctor(home, config, toolset, problems, journal,
                      f"built-ins: {len(offered)} offered; grep runs "
                      + (f"ripgrep ({rg})" if rg else "its Python search (no rg on PATH)") + mcp_line, skills)
        say("broken: see the problems above" if broken else "all good", colour=ERROR if broken else OK)
    sys.exit(1 if broken else 0)
