"""``zagent tools``: list the home's tools, and run one as an agent would."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from zagent_cli.asking import ask_here
from zagent_cli.context import Context
from zagent_cli.inputs import arguments_object
from zagent_cli.offers import home_tools, mcp_tools, say_problems
from zagent_cli.output import ERROR, OK, emit_json, head, say, terminal_safe
from zagent_cli.params import TEXT, complete_tools

if TYPE_CHECKING:
    from zagent_core import Engine, StoredEvent, ToolResult, ToolSet
    from zagent_core.session.engine import Session


@click.group()
def tools() -> None:
    """List the tools of the home and run one as an agent would."""


@tools.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_obj
def tools_list(obj: Context, as_json: bool) -> None:
    """Loaded tools, and the folders that did not load with the reason."""
    from zagent_core.config import load_config

    home = obj.home
    config, config_problems = load_config(home.config_path)
    mcp, mcp_problems, server_of = mcp_tools(obj, config)
    toolset, builtins, builtin_problems = home_tools(home, config, reserved=mcp.keys())
    problems = config_problems + builtin_problems + mcp_problems + toolset.problems
    if as_json:
        emit_json({
            "home": str(home.root),
            "tools": [
                {"name": t.name, "description": t.description, "folder": str(t.folder),
                 "disabled": t.name in toolset.disabled, "input": t.manifest.input, "output": t.manifest.output,
                 "background": t.manifest.background, "permission": t.manifest.permission}
                for t in sorted(toolset.tools.values(), key=lambda t: t.name)
            ],
            "builtins": [{"name": b.name, "description": b.description, "disabled": b.name in toolset.disabled,
                          "concurrency_safe": b.concurrency_safe if isinstance(b.concurrency_safe, bool)
                          else "depends on the arguments", "replay": b.replay} for b in builtins.values()],
            "mcp": [{"name": t.name, "server": server_of[t.name], "description": t.description,
                     "disabled": t.name in toolset.disabled, "identity": t.identity, "schema_hash": t.definition_hash,
                     "concurrency_safe": t.concurrency_safe, "replay": t.replay} for t in mcp.values()],
            "problems": [p.model_dump() for p in problems],
        })
        return
    if not toolset.tools:
        say(f"no tools loaded from {home.tools_dir}")
    folders = [(name, tool.description.splitlines()[0] if tool.description else "", f"tools/{tool.folder.name}")
               for name, tool in sorted(toolset.tools.items())]
    _say_table(folders, toolset.disabled)
    say("")
    _say_table([(name, builtin.description.split(". ")[0].rstrip("."), "built-in")
                for name, builtin in builtins.items()], toolset.disabled)
    if mcp:
        say("")
        _say_table([(name, tool.description.split(". ")[0].rstrip("."), f"mcp server {server_of[name]}")
                    for name, tool in mcp.items()], toolset.disabled)
    if problems:
        say("\nproblems:")
        say_problems(problems)


def _say_table(rows: list[tuple[str, str, str]], disabled: frozenset[str]) -> None:
    """One line per tool: name, summary and where it comes from, in columns padded to their
    widest cell (after terminal_safe, which may lengthen a name)."""
    rows = [(terminal_safe(name), terminal_safe(head(summary, 72)), where) for name, summary, where in rows]
    names = max((len(name) for name, _, _ in rows), default=0)
    summaries = max((len(summary) for _, summary, _ in rows), default=0)
    for name, summary, where in rows:
        say(f"{name:<{names}}  {summary:<{summaries}}  [{where}]{'  (disabled)' if name in disabled else ''}")


def _loaded_tool(engine: Engine, name: str) -> ToolSet:
    """The home's tools, once ``name`` is known to be one of them (or a built-in)."""
    toolset = engine.load_tools()
    if name not in toolset.tools and name not in engine.builtins:
        from zagent_core.problems import did_you_mean

        reasons = [str(p) for p in toolset.broken if p.source == f"tools/{name}"]
        if reasons:
            raise click.UsageError(f'tool "{name}" is not loaded:\n' + "\n".join(reasons))
        known = ", ".join(sorted(toolset.tools)) or "none"
        raise click.UsageError(f'unknown tool "{name}"{did_you_mean(name, toolset.tools)}; loaded tools: {known}')
    for problem in engine.config_problems + toolset.problems:
        say(f"{problem.severity}: {problem}", err=True)
    return toolset


def _background_result(session: Session, task_id: str, started: ToolResult, as_json: bool) -> ToolResult:
    """A background call lived as the agent would: its notes, then its wake-up, as one result."""
    if not as_json:
        say(started.output)
    task = session.wait_task(task_id, None)
    # Shown, not delivered: no agent turn took them, so they stay pending in the journal.
    wake_ups = [w.text for w in session.state.pending_wakes.values() if w.reason != "note"]
    if not as_json:
        for text in wake_ups:
            say(f"[info: {text}]")
    return started.model_copy(update={
        "output": "\n".join(wake_ups) or task.output or "", "is_error": bool(task.is_error),
        "duration_ms": task.duration_ms or 0, "files": task.files, "media": task.media})


def _call_once(session: Session, name: str, arguments: dict[str, Any], as_json: bool) -> tuple[ToolResult, str]:
    """Run the call in ``session``, and wait for it if it runs in the background: its result and
    call id. Ctrl-C (or SIGTERM) ends the session as interrupted, exit 130."""
    try:
        result = session.call(name, arguments)
        call_id = session.state.last_call_id or ""
        task_id = next((t.task_id for t in session.state.tasks.values() if t.call_id == call_id), None)
        if task_id is not None and not result.is_error:
            return _background_result(session, task_id, result, as_json), call_id
    except KeyboardInterrupt:
        # The tool (or task) was stopped with us and its call journaled as interrupted; a
        # call that goes on (a spawn, with its child) stays open for resume.
        if session.continuing_calls():
            session.release()
            say(f"\n[stopped; resume with: zagent resume {session.session_id}]", err=True)
            sys.exit(130)
        if session.state.status == "open":
            session.end("interrupted")
        say(f"\n[stopped; the call is journaled in session {session.session_id}]", err=True)
        sys.exit(130)
    if not as_json:
        say(result.output)
    return result, call_id


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
    is an error, 2 for a usage error.
    """
    import signal

    # SIGTERM stops the call the way Ctrl-C does: the tool killed, the journal told, exit 130.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    arguments = arguments_object(args_text)
    notes: list[str] = []

    from zagent_core.journal.events import NoteReceived

    def show_note(stored: StoredEvent) -> None:
        # Printed as they arrive, the way the agent's next request would carry them.
        if isinstance(stored.event, NoteReceived):
            notes.append(stored.event.text)
            if not as_json:
                say(f"[info: {stored.event.text}]")

    with obj.journal() as journal:
        engine = obj.engine(journal)
        toolset = _loaded_tool(engine, name)
        with engine.start_session(origin="tools run", tools=toolset) as session:
            session.subscribe(show_note)
            ask_here(session)
            result, call_id = _call_once(session, name, arguments, as_json)
    if as_json:
        emit_json({"output": result.output, "is_error": result.is_error,
                   "media": [m.model_dump() for m in result.media], "files": [f.model_dump() for f in result.files],
                   "session_id": session.session_id, "call_id": call_id, "notes": notes})
    else:
        status = "error" if result.is_error else "ok"
        say(f"[{status} in {result.duration_ms} ms; journaled as session {session.session_id}, call {call_id}]",
            err=True, colour=ERROR if result.is_error else OK)
    sys.exit(1 if result.is_error else 0)
