"""One call of one tool, as an agent would make it, journaled as a session of its own: ``zagent tools run``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from zagent_core.drive.display import Display
from zagent_core.drive.errors import Stopped, UnknownToolError

if TYPE_CHECKING:
    from zagent_core.history.telemetry import LiveTrace
    from zagent_core.journal.views import SessionState
    from zagent_core.session.engine import Engine, Session
    from zagent_core.tools.manifest import ToolSet
    from zagent_core.tools.results import ToolResult


@dataclass(frozen=True)
class ToolRun:
    """What one call gave: its result (a background call's, once its task ended) and where it is journaled."""

    result: ToolResult
    session_id: str
    call_id: str
    #: The session, when the call waits on a person (its question, or its approval): it has
    #: no result yet, and ``result`` says what answers it. None: the call has its result.
    parked: SessionState | None = None


def run_tool(engine: Engine, name: str, arguments: dict[str, Any], display: Display | None = None) -> ToolRun:
    """Run tool ``name`` in a new session (origin ``tools run``), and wait for it if it runs in
    the background; the session ends with the call (or stays parked on a person:
    :attr:`ToolRun.parked`).

    Raises :class:`UnknownToolError` when no tool of that name is loaded, and :class:`Stopped`
    on Ctrl-C (or SIGTERM made one): the call is journaled as interrupted.
    """
    from zagent_core.drive.driving import display_traced

    display = display or Display()
    toolset = _loaded_tool(engine, name, display)
    trace: LiveTrace | None = None
    try:
        with engine.start_session(origin="tools run", tools=toolset) as session:
            if display.events is not None:
                session.subscribe(display.events, descendants=True)
            display.attach(session)
            trace = display_traced(engine, session, 0, display)
            result, call_id = _call_once(session, name, arguments, display)
    finally:
        if trace is not None:  # once the session has ended (or is parked): its span ends there
            trace.close()
    state = session.state
    parked = call_id in state.questions or call_id in state.waiting_approvals
    return ToolRun(result, session.session_id, call_id, state if parked else None)


def needed_servers(name: str) -> frozenset[str]:
    """The MCP servers a call of tool ``name`` needs started: ``fs`` for ``fs__read_file``, none
    for a built-in or a folder tool (give them to :func:`~zagent_core.drive.engine.open_engine`:
    a call of ``read_file`` then waits for no server)."""
    from zagent_core.tools.mcp import server_named

    server = server_named(name)
    return frozenset({server}) if server else frozenset()


def _loaded_tool(engine: Engine, name: str, display: Display) -> ToolSet:
    """The home's tools, once ``name`` is known to be one of them (or a built-in)."""
    toolset = engine.load_tools()
    if engine.toolbox(toolset).get(name) is None:
        raise UnknownToolError(_unknown(engine, toolset, name))
    for problem in engine.config_problems + toolset.problems:
        display.problem(problem)
    return toolset


def _unknown(engine: Engine, toolset: ToolSet, name: str) -> str:
    """Why no tool is called ``name``, and the names it may have meant: the home's tools, the
    built-ins and the tools of the MCP server its name begins with (the others are not started)."""
    from zagent_core.problems import did_you_mean
    from zagent_core.tools.mcp import server_named

    reasons = [str(p) for p in toolset.broken if p.source == f"tools/{name}"]
    if reasons:
        return f'tool "{name}" is not loaded:\n' + "\n".join(reasons)
    known = sorted(toolset.tools)
    said = f'unknown tool "{name}"{did_you_mean(name, [*known, *engine.builtins])}'
    server, servers = server_named(name), sorted(engine.config.mcp.servers)
    started = engine.mcp.servers.get(server or "") if engine.mcp is not None else None
    if started is not None:  # the one server of the name was started (or tried)
        down = [p.message for p in toolset.problems if p.source == started.label]
        return f"{said}; {started.label} " + ("; ".join(down) if down else
                                              "offers no such tool (zagent tools list lists its tools)")
    if server is not None:
        return said + f'; no MCP server "{server}" in config.json{did_you_mean(server, servers)}' + (
            f"; its servers: {', '.join(servers)}" if servers else "")
    builtins = sum(1 for name in engine.builtins if server_named(name) is None)
    mcp = f"; MCP servers' tools are named SERVER__TOOL (servers: {', '.join(servers)})" if servers else ""
    return said + (f"; loaded tools: {', '.join(known) or 'none'}, and {builtins} built-ins (zagent tools list "
                   f"shows them){mcp}")


def _call_once(session: Session, name: str, arguments: dict[str, Any], display: Display) -> tuple[ToolResult, str]:
    """Run the call, and wait for it if it runs in the background: its result and call id."""
    try:
        result = session.call(name, arguments)
        call_id = result.call_id
        if result.task_id is not None and not result.is_error:
            return _background_result(session, result.task_id, result, display), call_id
    except KeyboardInterrupt:
        # The tool (or task) was stopped with us and its call journaled as interrupted; a
        # call that goes on (a spawn, with its child) stays open for resume.
        if session.continuing_calls():
            session.release()
            raise Stopped(session.session_id, resumable=True) from None
        if session.state.status == "open":
            session.end("interrupted")
        raise Stopped(session.session_id, resumable=False) from None
    display.output(result.output)
    return result, call_id


def _background_result(session: Session, task_id: str, started: ToolResult, display: Display) -> ToolResult:
    """A background call lived as the agent would: its notes, then its wake-up, as one result."""
    display.output(started.output)
    task = session.wait_task(task_id, None)
    # Shown, not delivered: no agent turn took them, so they stay pending in the journal.
    wake_ups = [w.text for w in session.state.pending_wakes.values() if w.reason != "note"]
    for text in wake_ups:
        display.wake(text)
    return started.model_copy(update={
        "output": "\n".join(wake_ups) or task.output or "", "is_error": bool(task.is_error),
        "duration_ms": task.duration_ms or 0, "files": task.files, "media": task.media})
