"""``zagent tools``: list the home's tools, and run one as an agent would."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from zagent_cli.asking import ask_here
from zagent_cli.context import Context
from zagent_cli.inputs import arguments_object
from zagent_cli.output import ERROR, OK, WARNING, emit_json, say, say_problem, say_table, terminal_safe
from zagent_cli.params import TEXT, complete_tools
from zagent_cli.refusals import refusals_said, waiting_lines

if TYPE_CHECKING:
    from zagent_core import Home, StoredEvent
    from zagent_core.drive.calling import ToolRun

#: The exit code of a ``tools run`` whose call waits on a person: neither done (0) nor failed (1).
WAITING = 3


@click.group()
def tools() -> None:
    """List the tools of the home and run one as an agent would."""


@tools.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_obj
def tools_list(obj: Context, as_json: bool) -> None:
    """Loaded tools, and the folders that did not load with the reason."""
    from zagent_cli.tools_cache import cached_listing

    home = obj.home
    listing = cached_listing(home.root, home.config_path, home.tools_dir) or _listing(obj, home)
    if as_json:
        emit_json(listing)
        return
    tools, builtins, mcp = listing["tools"], listing["builtins"], listing["mcp"]
    disabled = frozenset(row["name"] for row in [*tools, *builtins, *mcp] if row["disabled"])
    deferred = frozenset(row["name"] for row in [*tools, *builtins, *mcp] if row["deferred"])
    if not tools:
        say(f"no tools loaded from {home.tools_dir}")
    say_table([(t["name"], t["description"].splitlines()[0] if t["description"] else "",
                 f"tools/{Path(t['folder']).name}") for t in tools], disabled, deferred)
    say("")
    say_table([(b["name"], b["description"].split(". ")[0].rstrip("."), "built-in") for b in builtins], disabled,
              deferred)
    if mcp:
        say("")
        say_table([(m["name"], m["description"].split(". ")[0].rstrip("."), f"mcp server {m['server']}")
                    for m in mcp], disabled, deferred)
    if listing["problems"]:
        say("\nproblems:")
        for problem in listing["problems"]:
            say_problem(problem["severity"], f"{problem['source']}: {problem['message']}")


def _listing(obj: Context, home: Home) -> dict[str, Any]:
    """What ``tools list --json`` prints, from the home's files (kept for the next listing
    when it holds no tool that failed to load and no MCP server)."""
    from zagent_cli.tools_cache import keep_listing, watched
    from zagent_core.config import load_config
    from zagent_core.drive.offers import home_tools, mcp_tools
    from zagent_core.tools.folder import FolderTool

    before = watched(home.root, home.config_path, home.tools_dir)
    config, config_problems = load_config(home.config_path)
    with _StartLine(sorted(config.mcp.servers)) as line:
        mcp, mcp_problems, server_of = mcp_tools(config, obj.workspace, home, started=line.started)
    toolset, builtins, builtin_problems = home_tools(home, config, reserved=mcp.keys())
    problems = config_problems + builtin_problems + mcp_problems + toolset.problems
    listing = {
        "home": str(home.root),
        "tools": [
            {"name": t.name, "description": t.description, "folder": str(t.folder),
             "disabled": t.name in toolset.disabled, "input": t.manifest.input, "output": t.manifest.output,
             "background": t.manifest.background, "permission": t.manifest.permission,
             "deferred": FolderTool(t).deferred(config)}
            for t in sorted(toolset.tools.values(), key=lambda t: t.name)
        ],
        "builtins": [{"name": b.name, "description": b.description, "disabled": b.name in toolset.disabled,
                      "concurrency_safe": b.concurrency_safe if isinstance(b.concurrency_safe, bool)
                      else "depends on the arguments", "replay": b.replay, "deferred": b.deferred(config)}
                     for b in builtins.values()],
        "mcp": [{"name": t.name, "server": server_of[t.name], "description": t.description,
                 "disabled": t.name in toolset.disabled, "identity": t.identity, "schema_hash": t.definition_hash,
                 "concurrency_safe": t.concurrency_safe, "replay": t.replay, "deferred": t.deferred(config)}
                for t in mcp.values()],
        "problems": [p.model_dump() for p in problems],
    }
    if not config.mcp.servers and not any(p.severity == "error" for p in problems):
        keep_listing(home.root, before, listing, [t.argv_template[0] for t in toolset.tools.values()])
    return listing


class _StartLine:
    """On a terminal, one line that says which MCP servers are still starting, rewritten as
    each start ends and erased at the end; piped, nothing (the problems say what failed)."""

    def __init__(self, servers: list[str]) -> None:
        self.waiting = servers
        self.count = len(servers)
        self.shown = bool(servers) and sys.stdout.isatty() and sys.stderr.isatty()

    def __enter__(self) -> _StartLine:
        self._show()
        return self

    def __exit__(self, *_: object) -> None:
        if self.shown:
            click.echo("\r\x1b[K", nl=False, err=True)

    def started(self, server: str, why_not: str | None) -> None:
        """A server's start ended (the MCP servers' thread calls this)."""
        self.waiting = [name for name in self.waiting if name != server]
        self._show()

    def _show(self) -> None:
        if self.shown:
            done = self.count - len(self.waiting)
            waiting = f"; waiting for {', '.join(self.waiting)}" if self.waiting else ""
            line = f"[starting MCP servers: {done} of {self.count} done{waiting}]"
            click.echo(f"\r\x1b[K{terminal_safe(line)}", nl=False, err=True)


@tools.command("run")
@click.argument("name", type=TEXT, shell_complete=complete_tools)
@click.option("--args", "args_text", type=TEXT, metavar="JSON",
              help="The arguments, as one JSON object; @FILE reads it from FILE, @- from stdin "
                   "(default: stdin when a pipe or file is on it, else {}).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the result text.")
@click.pass_obj
def tools_run(obj: Context, name: str, args_text: str | None, as_json: bool) -> None:
    """Run tool NAME exactly as an agent would, journaled as a session.

    Prints what the model receives. Exit 0 when the call succeeded, 1 when its result
    is an error, 2 for a usage error, 3 when the call waits for an answer or an approval.
    """
    import signal
    from dataclasses import replace

    # SIGTERM stops the call the way Ctrl-C does: the tool killed, the journal told, exit 130.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    arguments = arguments_object(args_text)
    notes: list[str] = []

    from zagent_core.drive.calling import needed_servers, run_tool
    from zagent_core.drive.display import Display
    from zagent_core.journal.events import NoteReceived

    def show_note(stored: StoredEvent) -> None:
        # Printed as they arrive, the way the agent's next request would carry them.
        if isinstance(stored.event, NoteReceived):
            notes.append(stored.event.text)
            if not as_json:
                say(f"[info: {stored.event.text}]")

    display = Display(problem=lambda problem: say(f"{problem.severity}: {problem}", err=True), events=show_note,
                      attach=ask_here)
    if not as_json:
        display = replace(display, output=say, wake=lambda text: say(f"[info: {text}]"))
    with obj.journal() as journal, refusals_said():
        ran = run_tool(obj.engine(journal, mcp_servers=needed_servers(name)), name, arguments, display)
    sys.exit(_said(ran, notes, as_json))


def _said(ran: ToolRun, notes: list[str], as_json: bool) -> int:
    """Print how the call went (one JSON object, or a status line on stderr); the exit code."""
    result, parked = ran.result, ran.parked
    waiting = None if parked is None else "user" if ran.call_id in parked.questions else "approval"
    if as_json:
        emit_json({"output": result.output, "is_error": result.is_error,
                   "media": [m.model_dump() for m in result.media], "files": [f.model_dump() for f in result.files],
                   "structured": result.structured,
                   "outcome": result.outcome.model_dump() if result.outcome is not None else None,
                   "session_id": ran.session_id, "call_id": ran.call_id, "notes": notes, "waiting": waiting})
    elif parked is not None:
        for line in waiting_lines(parked):
            say(line, err=True, colour=WARNING)
    else:
        status = "error" if result.is_error else "ok"
        say(f"[{status} in {result.duration_ms} ms; journaled as session {ran.session_id}, call {ran.call_id}]",
            err=True, colour=ERROR if result.is_error else OK)
    return WAITING if parked is not None else 1 if result.is_error else 0
