"""``zagent mcp serve``: the home's tools, validated, run and journaled, for any MCP client.

Each MCP connection is one zagent session (origin ``mcp``), opened when the client first
lists or calls tools and ended when the connection closes; ``session_started`` names the
client (its ``clientInfo``). A ``tools/call`` is :meth:`Session.call`, exactly as ``zagent
run`` makes it: refusals come back as tool errors with the same messages, a crash of the
server leaves a session that ``zagent resume`` settles like any other.

Over stdio the process serves one connection, in whichever protocol era the client opens
with. Over streamable HTTP a connection is an ``Mcp-Session-Id`` of the handshake era: a
2026-07-28 request stands alone (no connection, nothing to end a session), so HTTP does
not answer ``server/discover`` and clients fall back to ``initialize``.

The engine is synchronous (threads), the SDK asynchronous (anyio). Every call into a
session runs in a worker thread; what the session appends reaches the event loop through
its listener (:meth:`Session.subscribe`), which hands notes to a memory stream with
``anyio.from_thread`` and never waits on the client.
"""

from __future__ import annotations

import base64
import contextlib
import math
import os
import signal
import sys
import warnings
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
import mcp_types as types
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

from zagent_cli.output import say
from zagent_core.agent.engine import Engine
from zagent_core.drive.settle import end_or_park
from zagent_core.ids import new_call_id
from zagent_core.journal.events import NoteReceived, WakeRequested
from zagent_core.journal.protocol import JournalError, StoredEvent
from zagent_core.logs import get_logger
from zagent_core.session.engine import Session
from zagent_core.tools.results import ToolResult
from zagent_core.version import zagent_version

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from zagent_cli.context import Context
    from zagent_core.history.telemetry import LiveTrace

log = get_logger(__name__)

#: The session origin the journal records for an MCP connection.
ORIGIN = "mcp"
#: What ``serverInfo`` calls this server.
SERVER_NAME = "zagent"
#: Where streamable HTTP is served.
HTTP_PATH = "/mcp"
#: How long uvicorn waits for open requests (a tool running, an SSE stream) when stopped.
HTTP_GRACE_SECONDS = 5
INSTRUCTIONS = (
    "zagent runs these tools and journals every call. A background tool answers 'started as task #N' at once: "
    "use the terminal tool to wait for the task, read its output or kill it."
)
#: Log levels, least severe first (notes are sent at ``info``).
LEVELS: tuple[types.LoggingLevel, ...] = ("debug", "info", "notice", "warning", "error", "critical", "alert",
                                          "emergency")
_HANDSHAKE_ONLY = ("zagent mcp serve keeps one journaled session per connection; over HTTP a connection is an "
                   "Mcp-Session-Id, which only the initialize handshake opens (protocol 2025-11-25 and earlier). "
                   "Connect with the handshake (the SDK client's mode='legacy' or 'auto').")


# -- what the client is told -------------------------------------------------------------


def tool_listing(session: Session) -> list[types.Tool]:
    """What ``tools/list`` answers: what the session offers, as the model of ``zagent run`` is told
    (name, description, parameters), with hints from the manifest: ``readOnlyHint`` when calls
    may run beside others (``concurrency_safe``), ``idempotentHint`` when a call may be run again
    (``replay: "safe"``), by config.json's names and descriptions (``tools.aliases``, ``tools.descriptions``)."""
    shown = session.engine.shown
    return [types.Tool(name=shown.name(tool.name), description=shown.description(tool.name, tool.description),
                       input_schema=tool.parameters, output_schema=_object_schema(tool.output_schema),
                       annotations=types.ToolAnnotations(read_only_hint=tool.safe_beside_others,
                                                         idempotent_hint=tool.replay == "safe"))
            for tool in session.offered()]


def _object_schema(schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """An ``output_schema`` as MCP can list it: MCP's ``outputSchema`` describes an object, so another is not listed."""
    return schema if schema is not None and schema.get("type") == "object" else None


def call_result(result: ToolResult) -> types.CallToolResult:
    """A result as MCP content: the text the model of ``zagent run`` reads, the images it would
    see (read from the call folder now), and every other file as a ``file://`` resource link."""
    content: list[types.ContentBlock] = [types.TextContent(text=result.output)]
    shown: set[str] = set()
    for media in result.media:
        if not media.mime.startswith("image/"):
            continue
        try:
            data = Path(media.path).read_bytes()
        except OSError:
            continue  # gone since the call: linked below like any file
        content.append(types.ImageContent(data=base64.b64encode(data).decode("ascii"), mime_type=media.mime))
        shown.add(media.path)
    links: list[tuple[str, str | None, int | None]] = [(f.path, f.mime, f.size) for f in result.files
                                                       if f.path not in shown]
    if result.full_output_path:
        links.append((result.full_output_path, "text/plain", None))
    for path, mime, size in links:
        if Path(path).is_absolute():
            content.append(types.ResourceLink(uri=Path(path).as_uri(), name=Path(path).name, mime_type=mime,
                                              size=size))
    # MCP's structuredContent is an object: a tool's other structured values stay in the journal.
    structured = result.structured if isinstance(result.structured, dict) else None
    return types.CallToolResult(content=content, is_error=result.is_error, structured_content=structured)


def stopped_result(name: str) -> ToolResult:
    return ToolResult(output=f"{name} was stopped: the request was cancelled or the client went away; the call "
                      "is journaled as interrupted, and its effect may or may not have happened", is_error=True)


# -- one connection ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Note:
    text: str
    #: The log message's ``logger`` (a call's notes are logged under its tool's name).
    logger: str = "zagent"


class _Turns:
    """Calls of one session as the agent runs a reply's calls: concurrency-safe ones together,
    any other alone."""

    def __init__(self) -> None:
        self._changed = anyio.Condition()
        self._shared = 0
        self._exclusive = False

    @property
    def idle(self) -> bool:
        return not self._shared and not self._exclusive

    @contextlib.asynccontextmanager
    async def hold(self, *, shared: bool) -> AsyncIterator[None]:
        async with self._changed:
            while self._exclusive or (not shared and self._shared):
                await self._changed.wait()
            if shared:
                self._shared += 1
            else:
                self._exclusive = True
        try:
            yield
        finally:
            with anyio.CancelScope(shield=True):
                async with self._changed:
                    if shared:
                        self._shared -= 1
                    else:
                        self._exclusive = False
                    self._changed.notify_all()


@dataclass
class _Call:
    """A call in flight: it runs in the bridge's task group, so a request that goes away
    (cancelled, or its connection closed) leaves it to finish and be journaled."""

    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    done: anyio.Event = field(default_factory=anyio.Event)
    started: bool = False
    result: types.CallToolResult | None = None
    error: BaseException | None = None


class _Link:
    """One MCP connection and its zagent session."""

    def __init__(self, key: str | None, session: Session) -> None:
        self.key = key
        self.session = session
        #: The session's spans, sent as its calls run when telemetry is configured (docs/telemetry.md).
        self.trace: LiveTrace | None = None
        self.turns = _Turns()
        #: Where a call's notes go while its request is open: call id -> the request's stream.
        self.routes: dict[str, MemoryObjectSendStream[_Note]] = {}
        #: Notes of background tasks, and their ends, for the connection's own channel.
        self.to_background, self.background = anyio.create_memory_object_stream[_Note](math.inf)
        #: The latest request's session: what the connection's own channel is reached through.
        self.latest: ServerSession | None = None
        self.closing = False


class Bridge:
    """The MCP server's side of the engine: one :class:`_Link` (and session) per connection."""

    def __init__(self, engine: Engine, *, http: bool) -> None:
        self.engine = engine
        self.http = http
        self._links: dict[str | None, _Link] = {}
        self._opening = anyio.Lock()
        #: ``logging/setLevel`` per connection (handshake era): the least severe level sent.
        self._levels: dict[str | None, types.LoggingLevel] = {}
        self._group: TaskGroup | None = None
        self._token: anyio.lowlevel.EventLoopToken | None = None
        #: ``tools/call`` requests not yet answered, and what waits for there to be none.
        self._answering = 0
        self._answered: anyio.Event | None = None

    # -- the server's lifetime -----------------------------------------------------

    @contextlib.asynccontextmanager
    async def lifespan(self, server: Server[Any]) -> AsyncIterator[dict[str, Any]]:
        """The server's lifespan: calls and relays run in its task group; at its end every
        connection's session is ended (a server stopped while connected)."""
        async with anyio.create_task_group() as group:
            self._group, self._token = group, anyio.lowlevel.current_token()
            try:
                yield {}
            finally:
                with anyio.CancelScope(shield=True):
                    # Over stdio the server ends when the client closes its stdin; over HTTP, when it is stopped.
                    await self.close_all(left=not self.http)
                group.cancel_scope.cancel()

    async def close_all(self, reason: str = "completed", *, left: bool = False) -> None:
        for key in list(self._links):
            await self.close(key, reason, left=left)

    async def close(self, key: str | None, reason: str = "completed", *, left: bool = True) -> None:
        """The connection is gone: stop its calls (journaled interrupted: ``left``, the client
        went away; else zagent is stopping) and tasks, then end its session with ``reason``
        (one parked on a question or an approval is only let go)."""
        link = self._links.get(key)
        if link is None or link.closing:
            return
        link.closing = True
        session = link.session
        if left:  # foreground tools stop, their calls journaled interrupted, saying why
            session.interrupt_calls.stop("the MCP client went away")
        else:
            session.interrupt_calls.set()
        try:
            await anyio.to_thread.run_sync(_stop_tasks, session)  # a `terminal wait` ends with them
            async with link.turns.hold(shared=False):  # every call in flight has its result
                await anyio.to_thread.run_sync(end_or_park, session, reason)
        except JournalError:
            log.error("mcp_session_end_failed", exc_info=True, session=session.session_id)
        finally:
            if link.trace is not None:  # its end journaled, the session's span goes with the last batch
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(link.trace.close)
            link.to_background.close()  # the relay sends what is left, then ends
            self._links.pop(key, None)
        log.info("mcp_connection_closed", session=session.session_id)

    # -- connections -----------------------------------------------------------------

    def _key(self, ctx: ServerRequestContext[Any, Any]) -> str | None:
        """Which connection a request is of: over stdio there is one; over HTTP, its Mcp-Session-Id."""
        if not self.http:
            return None
        request = ctx.request
        key = request.headers.get("mcp-session-id") if request is not None else None
        if not key:
            raise MCPError(code=types.INVALID_REQUEST, message=_HANDSHAKE_ONLY)
        return str(key)

    async def link(self, ctx: ServerRequestContext[Any, Any]) -> _Link:
        """The connection's session, begun on its first request that needs one."""
        key = self._key(ctx)
        async with self._opening:
            link = self._links.get(key)
            if link is None:
                params = ctx.session.client_params
                client = None
                if params is not None:
                    info = params.client_info
                    client = {"name": info.name, "version": info.version} | (
                        {"title": info.title} if info.title else {})
                try:
                    session = await anyio.to_thread.run_sync(
                        lambda: self.engine.start_session(ORIGIN, client=client))
                except JournalError as exc:
                    raise MCPError(code=types.INTERNAL_ERROR, message=f"zagent could not start a session: {exc}"
                                   ) from None
                link = _Link(key, session)
                link.trace = await anyio.to_thread.run_sync(self._traced, session)
                session.subscribe(lambda stored: self._heard(link, stored))
                self._links[key] = link
                assert self._group is not None
                self._group.start_soon(self._relay_background, link)
                log.info("mcp_session_started", session=session.session_id, client=client)
        if link.closing:
            raise MCPError(code=types.INVALID_REQUEST, message="the connection is closing")
        link.latest = ctx.session
        return link

    def _traced(self, session: Session) -> LiveTrace | None:
        """The session's live trace, as every driver has one (stdout is the protocol's: a warning is logged)."""
        from zagent_core.drive.driving import traced

        try:
            return traced(self.engine, session, 0, lambda why: log.warning("telemetry_unavailable", reason=why))
        except JournalError:  # the connection's calls go on untraced: telemetry never fails one
            log.error("telemetry_start_failed", exc_info=True, session=session.session_id)
            return None

    def _logs(self, key: str | None, level: types.LoggingLevel) -> bool:
        return LEVELS.index(level) >= LEVELS.index(self._levels.get(key, "debug"))

    # -- notes: engine threads -> event loop ------------------------------------------

    def _heard(self, link: _Link, stored: StoredEvent) -> None:
        """The session's listener (an engine thread): a note goes to its call's request while
        that is open, else (a background task's) to the connection, as does a task's end."""
        event = stored.event
        if isinstance(event, NoteReceived):
            route = link.routes.get(event.call_id)
            if route is not None:
                self._post(route, _Note(text=event.text))
            else:
                self._post(link.to_background, _Note(text=f"task #{event.task_id}: {event.text}"
                                                      if event.task_id else event.text))
        elif isinstance(event, WakeRequested) and event.reason != "note":
            self._post(link.to_background, _Note(text=event.text))

    def _post(self, stream: MemoryObjectSendStream[_Note], note: _Note) -> None:
        try:
            anyio.from_thread.run_sync(stream.send_nowait, note, token=self._token)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, RuntimeError):
            pass  # the request or connection is gone (or the loop is): the note is in the journal all the same

    async def _relay_call(self, ctx: ServerRequestContext[Any, Any], link: _Link, tool: str,
                          notes: MemoryObjectReceiveStream[_Note]) -> None:
        """A call's notes, as progress when its request asked for progress, else as log messages."""
        progress = ctx.meta is not None and ctx.meta.get("progress_token") is not None
        count = 0
        async with notes:
            async for note in notes:
                count += 1
                try:
                    if progress:
                        await ctx.session.report_progress(count, None, note.text)
                    elif self._logs(link.key, "info"):
                        await ctx.session.send_log_message("info", note.text, logger=tool,
                                                           related_request_id=ctx.request_id)
                except Exception:  # noqa: BLE001 - the client went away; the note is journaled
                    log.debug("mcp_note_not_sent", exc_info=True)

    async def _relay_background(self, link: _Link) -> None:
        async with link.background:
            async for note in link.background:
                if link.latest is None or not self._logs(link.key, "info"):
                    continue
                try:
                    await link.latest.send_log_message("info", note.text, logger=note.logger)
                except Exception:  # noqa: BLE001 - as for a call's notes
                    log.debug("mcp_note_not_sent", exc_info=True)

    # -- handlers ----------------------------------------------------------------------

    async def list_tools(self, ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        link = await self.link(ctx)
        return types.ListToolsResult(tools=tool_listing(link.session))

    async def call_tool(self, ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        self._answering += 1
        try:
            return await self._call_tool(ctx, params)
        finally:
            self._answering -= 1
            if not self._answering and self._answered is not None:
                self._answered.set()

    async def all_answered(self) -> None:
        """Wait until every ``tools/call`` received has been answered."""
        if self._answering:
            self._answered = self._answered if self._answered and not self._answered.is_set() else anyio.Event()
            await self._answered.wait()

    async def _call_tool(self, ctx: ServerRequestContext[Any, Any],
                         params: types.CallToolRequestParams) -> types.CallToolResult:
        link = await self.link(ctx)
        # A call by an alias is journaled by the tool's own name.
        name = link.session.engine.shown.canonical(params.name)
        arguments = params.arguments if params.arguments is not None else {}
        call_id = new_call_id()
        route, notes = anyio.create_memory_object_stream[_Note](math.inf)
        call = _Call()
        link.routes[call_id] = route
        try:
            async with anyio.create_task_group() as relays:
                relays.start_soon(self._relay_call, ctx, link, name, notes)
                assert self._group is not None
                self._group.start_soon(self._run_call, link, call, name, arguments, call_id)
                try:
                    await call.done.wait()
                except anyio.get_cancelled_exc_class():
                    # Cancelled, or the connection closed: the tool is stopped (and journaled so).
                    call.scope.cancel()
                    if call.started and not call.done.is_set():
                        link.session.interrupt_calls.stop("the MCP client cancelled the call", call=call_id)
                    raise
                finally:
                    link.routes.pop(call_id, None)
                    route.close()  # the relay sends what is left, then ends: notes before the result
        finally:
            notes.close()
        if call.error is not None:
            raise MCPError(code=types.INTERNAL_ERROR, message=f"zagent could not run {name}: {call.error}")
        assert call.result is not None
        return call.result

    async def _run_call(self, link: _Link, call: _Call, name: str, arguments: Any, call_id: str) -> None:
        session = link.session
        try:
            with call.scope:
                async with link.turns.hold(shared=session.concurrency_safe(name, arguments)):
                    if link.closing:  # it waited its turn while the connection closed
                        raise RuntimeError("the connection closed before the call ran")
                    call.started = True
                    call.result = await anyio.to_thread.run_sync(_call, session, name, arguments, call_id)
        except Exception as exc:  # noqa: BLE001 - the journal failed: said to the client as an MCP error
            log.error("mcp_call_failed", exc_info=True, session=session.session_id, tool=name)
            call.error = exc
        finally:
            if link.turns.idle and not link.closing:
                session.interrupt_calls.clear()  # a cancelled call was stopped; the next ones run
            call.done.set()

    async def set_level(self, ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams
                        ) -> types.EmptyResult:
        self._levels[self._key(ctx)] = params.level
        return types.EmptyResult()


def _call(session: Session, name: str, arguments: Any, call_id: str) -> types.CallToolResult:
    """One call, in a worker thread: run and journaled as ``zagent run`` does, then made MCP content."""
    try:
        result: ToolResult = session.call(name, arguments, call_id=call_id)
    except KeyboardInterrupt:  # interrupt_calls: the tool was stopped and its call journaled interrupted
        result = stopped_result(name)
    return call_result(result)


def _stop_tasks(session: Session) -> None:
    for task in session.state.running_tasks:
        session.kill_task(task.task_id)


# -- the server ----------------------------------------------------------------------------


async def _no_discover(ctx: ServerRequestContext[Any, Any], params: types.RequestParams) -> types.EmptyResult:
    raise MCPError(code=types.METHOD_NOT_FOUND, message=_HANDSHAKE_ONLY)


def build_server(bridge: Bridge) -> Server[dict[str, Any]]:
    with warnings.catch_warnings():
        # logging/setLevel is deprecated in 2026-07-28, and how handshake-era clients ask for less.
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        server: Server[dict[str, Any]] = Server(
            SERVER_NAME, version=zagent_version(), instructions=INSTRUCTIONS, lifespan=bridge.lifespan,
            on_list_tools=bridge.list_tools, on_call_tool=bridge.call_tool, on_set_logging_level=bridge.set_level)
    if bridge.http:
        server.add_request_handler("server/discover", types.RequestParams, _no_discover)
    return server


def http_address(text: str, allow_remote: bool) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6), refused off loopback unless ``allow_remote``."""
    import click

    host, sep, port_text = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise click.UsageError(f"--http takes HOST:PORT, such as 127.0.0.1:8765, not {text!r}")
    # Only the spellings the SDK guards against DNS rebinding (Host and Origin checked): another
    # loopback address (127.0.0.2, [0::1]) would serve a foreign web page's requests.
    loopback = host in ("127.0.0.1", "localhost", "::1")
    if not loopback and not allow_remote:
        raise click.UsageError(
            f"--http {text} would serve the home's tools, which run programs on this machine, to other machines, "
            "with no authentication; give a loopback address (127.0.0.1:PORT, [::1]:PORT or localhost:PORT), or "
            "add --allow-remote if that is what you want")
    return host, int(port_text)


async def _stop_on_signals(bridge: Bridge) -> None:
    """SIGTERM or Ctrl-C: end every session as a closed connection does, then exit 130 (as
    ``zagent run`` does). Exiting is the only way out: the SDK reads stdin in a worker thread,
    which no cancellation reaches while the client keeps stdin open."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for number in signals:
            log.info("mcp_serve_stopped", signal=signal.Signals(number).name)
            with anyio.CancelScope(shield=True):
                await bridge.close_all("interrupted")
                # The calls stopped have their answers: give them a moment to reach the client.
                with anyio.move_on_after(1):
                    await bridge.all_answered()
                await anyio.sleep(0.1)
            bridge.engine.close()
            sys.stderr.flush()
            os._exit(130)  # every session's end is committed (and durable): nothing is left to flush


async def _serve_stdio(server: Server[dict[str, Any]], bridge: Bridge) -> None:
    from mcp.server.stdio import stdio_server

    async with anyio.create_task_group() as group:
        group.start_soon(_stop_on_signals, bridge)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
        group.cancel_scope.cancel()


def _ends_sessions(app: ASGIApp, bridge: Bridge) -> ASGIApp:
    """The HTTP app, ending a connection's session when its Mcp-Session-Id ends: the client's
    DELETE, or a 404 (the SDK dropped it, idle)."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        key = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"mcp-session-id"), None)
        status: int | None = None

        async def watched(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await app(scope, receive, watched)
        finally:
            if key is not None and (scope["method"] == "DELETE" or status == 404):
                with anyio.CancelScope(shield=True):
                    await bridge.close(key)

    return wrapped


async def _serve_http(server: Server[dict[str, Any]], bridge: Bridge, host: str, port: int, verbose: bool) -> None:
    import uvicorn

    app = server.streamable_http_app(streamable_http_path=HTTP_PATH, host=host)
    config = uvicorn.Config(_ends_sessions(app, bridge), host=host, port=port, log_config=None,
                            access_log=verbose, timeout_graceful_shutdown=HTTP_GRACE_SECONDS, lifespan="on")
    await uvicorn.Server(config).serve()


def serve(obj: Context, http: str | None, allow_remote: bool) -> None:
    """``zagent mcp serve``: serve until stdin closes (stdio) or SIGTERM / Ctrl-C."""
    address = http_address(http, allow_remote) if http is not None else None
    warnings.filterwarnings("ignore", category=MCPDeprecationWarning)  # notes as log messages: see set_level
    with obj.journal() as journal:
        engine = obj.engine(journal)
        try:
            # The folder tools' problems are shown now; the MCP servers config.json names start with
            # the first connection's session, not here: one of them may be a `zagent mcp serve`
            # that would then start its own before it reads its stdin, and never see its client leave.
            from zagent_core.tools.manifest import load_tools

            for problem in engine.config_problems + load_tools(engine.home, engine.config).problems:
                say(f"{problem.severity}: {problem}", err=True)
            bridge = Bridge(engine, http=address is not None)
            server = build_server(bridge)
            if address is None:
                say(f"[zagent mcp serve: stdio; home {engine.home.root}]", err=True)
                anyio.run(_serve_stdio, server, bridge)
            else:
                host, port = address
                shown = f"[{host}]" if ":" in host else host
                say(f"[zagent mcp serve: http://{shown}:{port}{HTTP_PATH}; home {engine.home.root}]", err=True)
                anyio.run(_serve_http, server, bridge, host, port, obj.verbosity > 0)
        finally:
            engine.close()  # the MCP servers config.json names, if it started them
