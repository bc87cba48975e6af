"""MCP servers' tools as zagent tools (``config.json``: ``"mcp": {"servers": {NAME: ...}}``).

Each tool of a server is a :class:`~zagent_core.tools.inprocess.Builtin` named
``NAME__TOOL``, so the engine validates a call against the tool's ``inputSchema``,
journals it, schedules it, settles it after a crash and serves it in a replay exactly as
any built-in, and never knows it is MCP. Its identity is the server's name and the
version its ``initialize`` answered (``mcp:fs@0.2.0``), its definition hash the sha256 of
its input schema: an audit or a replay tells what ran. ``readOnlyHint`` (or the server's
``readonly`` in config) makes a tool read-only: concurrency-safe, replay-safe, and given to a
``readonly`` sub-agent preset; every other tool is none of these.

The SDK is async and the engine is threads: one asyncio loop runs in a daemon thread per
:class:`McpServers` (one per engine), each server's connection is a task on it that holds
the SDK's client open, and a call crosses into the loop with a thread-safe future, under
its timeout. A server starts the first time its tools are needed (listing them for a
session's offer, or a call), logs its stderr through zagent's log, and is stopped by
:meth:`McpServers.close` (the engine's ``close``; at the latest when the interpreter exits).

A server that dies is started again when next needed, once per death; a call cut off by
the death runs again on the new server when the tool is read-only, and otherwise its
result says the server died, since the request may have reached it. A server that cannot
start, or answers its listing badly, is a warning, never fatal: its tools are not offered.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import functools
import hashlib
import json
import os
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Collection, Coroutine
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from zagent_core.config import Config, LimitsConfig, McpServerConfig, SandboxConfig
from zagent_core.home import Home
from zagent_core.logs import get_logger
from zagent_core.problems import Problem
from zagent_core.tools import mcp_log
from zagent_core.tools.credentials import tool_environment, withhold_keys
from zagent_core.tools.inprocess import Arguments, Builtin, BuiltinContext
from zagent_core.tools.mcp_results import to_result
from zagent_core.tools.patterns import unreadable
from zagent_core.tools.results import ToolResult
from zagent_core.tools.runner import unstartable
from zagent_core.tools.sandbox import Confinement, SandboxRefused, grant_for
from zagent_core.version import install_command, zagent_version

if TYPE_CHECKING:
    import mcp_types
    from mcp import Client

log = get_logger(__name__)

#: Between the server's name and the tool's in the name the model is offered.
SEPARATOR = "__"
#: What OpenAI's and Anthropic's APIs take as a tool name.
MAX_TOOL_NAME = 64
_NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9_-]")
#: Lines of a server's stderr kept to explain why it could not start.
_STDERR_KEPT = 20
#: How long a server that failed to start may take to close its stderr (a child of it may hold it open).
_STDERR_SECONDS = 2.0
#: Pages of ``tools/list`` read at most (a server whose cursor never ends cannot hang a start).
_LIST_PAGES = 100
#: How long stopping the servers may take: the SDK closes stdin, waits 2 s, then SIGTERM, 2 s, SIGKILL.
_STOP_SECONDS = 10.0
#: The schema keywords that already say what else an object may hold: such a schema is kept as it is.
_OPEN_OR_COMBINED = ("additionalProperties", "patternProperties", "unevaluatedProperties", "allOf", "anyOf",
                     "oneOf", "not", "if", "$ref", "dependentSchemas")

T = TypeVar("T")


def offered_name(server: str, tool: str, taken: Collection[str]) -> str | None:
    """The name tool ``tool`` of ``server`` is offered as: ``SERVER__TOOL``, or, when that is not
    a name the model APIs take (over 64 characters, or other than letters, digits, ``_`` and
    ``-``) or is taken, its cleaned and shortened form with 8 hex digits of the tool name's
    sha256 (``fs__read_a_very_long_na_1f2e3d4c``). None when even that is taken."""
    plain = f"{server}{SEPARATOR}{tool}"
    if len(plain) <= MAX_TOOL_NAME and not _NOT_IN_A_NAME.search(tool) and plain not in taken:
        return plain
    digest = hashlib.sha256(tool.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    cleaned = f"{server}{SEPARATOR}{_NOT_IN_A_NAME.sub('_', tool)}"[:MAX_TOOL_NAME - len(digest) - 1]
    named = f"{cleaned}_{digest}"
    return named if named not in taken else None


def server_named(tool: str) -> str | None:
    """The server whose tool ``tool`` would be, by its name (``fs`` for ``fs__read_file``: a
    server's name holds no ``__``, and each of its tools is offered as ``SERVER__...``)."""
    server, separator, _ = tool.partition(SEPARATOR)
    return server if separator and server else None


def schema_hash(schema: Any) -> str:
    """The sha256 of a schema as canonical JSON (keys sorted, no spaces): the same schema, the same hash."""
    text = json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def closed(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema a call is validated against: the server's, with ``additionalProperties: false``
    added when it lists its properties and says nothing of others, so a misspelt argument is
    refused (``unknown argument "pth" (allowed: path)``) as for a folder tool, rather than
    dropped unseen by the server."""
    if schema.get("type") == "object" and isinstance(schema.get("properties"), dict) \
            and not any(key in schema for key in _OPEN_OR_COMBINED):
        return {**schema, "additionalProperties": False}
    return schema


def _leaf(exc: BaseException) -> BaseException:
    """An exception group's first leaf (any other exception: itself)."""
    while isinstance(getattr(exc, "exceptions", None), (list, tuple)) and exc.exceptions:  # type: ignore[attr-defined]
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    return exc


def _why(exc: BaseException) -> str:
    """An exception as one sentence (an exception group: its first leaf)."""
    exc = _leaf(exc)
    text = str(exc).strip()
    if isinstance(exc, TimeoutError):
        return text or "timed out"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# -- the event loop -------------------------------------------------------------------------


#: How often a call waiting for its server looks whether the session's calls are being stopped.
_STOP_POLL = 0.1


class _Loop:
    """One asyncio loop in a daemon thread, started on first use; threads run coroutines on it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=self._loop.run_forever, name="zagent-mcp", daemon=True)
                self._thread.start()
            return self._loop

    @property
    def running(self) -> bool:
        return self._loop is not None

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float,
            stopped: Callable[[], bool] | None = None) -> T:
        """Run ``coroutine`` on the loop and wait for it, at most ``timeout`` seconds (then it is
        cancelled and TimeoutError raised); Ctrl-C while waiting cancels it too, and so does
        ``stopped()`` turning true (the session's calls are being stopped: KeyboardInterrupt,
        which journals the call interrupted, as a folder tool's process stopped)."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self._started())
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    return future.result(min(_STOP_POLL, max(0.0, deadline - time.monotonic())))
                except concurrent.futures.TimeoutError:
                    if time.monotonic() >= deadline:
                        raise
                    if stopped is not None and stopped():
                        raise KeyboardInterrupt from None
        except BaseException:
            future.cancel()
            raise

    def stop(self) -> None:
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(_STOP_SECONDS)
        if not thread.is_alive():
            loop.close()


# -- one server ----------------------------------------------------------------------------


class _Watched(Generic[T]):
    """A transport's read stream that says when it ends: the server died (or was stopped)."""

    def __init__(self, stream: Any, ended: Callable[[], None]) -> None:
        self._stream = stream
        self._ended = ended

    async def receive(self) -> T:
        try:
            item: T = await self._stream.receive()
        except BaseException:
            self._ended()
            raise
        return item

    async def aclose(self) -> None:
        await self._stream.aclose()

    def __aiter__(self) -> _Watched[T]:
        return self

    async def __anext__(self) -> T:
        try:
            item: T = await self._stream.__anext__()
        except BaseException:  # StopAsyncIteration (the server closed its stdout), or the stream broke
            self._ended()
            raise
        return item

    async def __aenter__(self) -> _Watched[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stream.__aexit__(*exc)


class ServerDown(Exception):
    """A server that could not be started (again); the message says why."""


@dataclass
class Listed:
    """What a server said when it started: who it is, and its tools."""

    name: str
    version: str
    tools: list[mcp_types.Tool]


def _set_event() -> threading.Event:
    event = threading.Event()
    event.set()
    return event


@dataclass
class _Attempt:
    """One start of a server: its client, while the connection lives."""

    #: Set when the connection ended: the server died, or it is being stopped.
    done: asyncio.Event = field(default_factory=asyncio.Event)
    client: Client | None = None
    #: The holder's cancel scope: cancelling it leaves the client, which stops the server.
    scope: Any = None
    holder: asyncio.Task[None] | None = None
    #: Set when the server's stderr has been read to its end (set already: no stderr is read).
    stderr_read: threading.Event = field(default_factory=_set_event)

    @property
    def ended(self) -> bool:
        return self.done.is_set()


@dataclass
class Server:
    """One configured server: started on first use, started again once after each death."""

    name: str
    spec: McpServerConfig
    workspace: Path
    #: What the server runs inside: its sandbox (see :mod:`zagent_core.tools.sandbox`).
    wrapper: tuple[str, ...] = ()
    listed: Listed | None = None
    #: Why it is not running and will not be started again (it could not be started).
    down: str | None = None
    #: How many times it was started.
    starts: int = 0
    stderr_tail: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=_STDERR_KEPT))
    #: Set by :meth:`stop`: a connection that ends now is not started again.
    stopping: bool = False
    _attempt: _Attempt | None = None
    _lock: asyncio.Lock | None = None

    @property
    def label(self) -> str:
        return f'MCP server "{self.name}"'

    @property
    def cwd(self) -> Path:
        return self.workspace / (self.spec.cwd or ".")

    def _environment(self) -> dict[str, str]:
        # zagent's tool environment: never the model's key, nor zagent's own variables.
        return tool_environment() | self.spec.env

    @asynccontextmanager
    async def _transport(self, attempt: _Attempt) -> AsyncIterator[Any]:
        """The SDK's transport for this server, its read stream watched for its end."""
        def ended() -> None:
            attempt.done.set()

        if self.spec.url is not None:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            async with create_mcp_http_client(headers=dict(self.spec.headers) or None) as http, \
                    streamable_http_client(self.spec.url, http_client=http) as (read, write):
                yield _Watched(read, ended), write
            return
        from mcp.client.stdio import StdioServerParameters, stdio_client

        assert self.spec.command is not None  # the config has one or the other
        environment = self._environment()
        failure = unstartable(self.spec.command[0], self.cwd, environment) if self.wrapper else None
        if failure is not None:
            raise failure  # as the SDK would have, had it started the program itself
        reading, writing = os.pipe()
        errlog = os.fdopen(writing, "w")
        attempt.stderr_read = threading.Event()
        threading.Thread(target=self._log_stderr, args=(reading, attempt.stderr_read),
                         name=f"mcp-{self.name}-stderr", daemon=True).start()
        command = [*self.wrapper, *self.spec.command]
        params = StdioServerParameters(command=command[0], args=command[1:], env=environment, cwd=self.cwd)
        mcp_log.one_line()
        mcp_log.serving.set(self.name)  # this connection's task, and the SDK's tasks started in it
        try:
            async with stdio_client(params, errlog=errlog) as (read, write):
                errlog.close()  # the server has its own copy: its stderr ends when it does
                yield _Watched(read, ended), write
        finally:
            errlog.close()

    def _log_stderr(self, fd: int, read: threading.Event) -> None:
        try:
            with open(fd, "rb") as stream:
                for raw in stream:
                    line = raw.decode("utf-8", "replace").rstrip()
                    if line:
                        self.stderr_tail.append(line)
                        log.info("mcp_server_stderr", server=self.name, line=line)
        finally:
            read.set()

    async def _hold(self, attempt: _Attempt, ready: asyncio.Future[Client]) -> None:
        """The connection's own task: it enters the SDK's client, and leaves it (stopping the
        server) when the connection ends or :meth:`stop` cancels it."""
        import anyio
        from mcp import Client
        from mcp_types import Implementation

        try:
            with anyio.CancelScope() as scope:
                attempt.scope = scope
                if attempt.ended:
                    return  # stopped before it began
                async with AsyncExitStack() as stack:
                    transport = await stack.enter_async_context(self._transport(attempt))
                    client = Client(_Given(transport), cache=None,
                                    client_info=Implementation(name="zagent", version=zagent_version()))
                    await stack.enter_async_context(client)
                    attempt.client = client
                    ready.set_result(client)
                    await attempt.done.wait()  # the end of its read stream, or stop()
                    if not scope.cancel_called:
                        last = self.stderr_tail[-1] if self.stderr_tail else ""
                        log.warning("mcp_server_exited", server=self.name, stderr=last)
        except BaseException as exc:  # noqa: BLE001 - a server's failure is a result, never the loop's end
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else ServerDown("it was stopped"))
            else:
                log.debug("mcp_server_stop_failed", server=self.name, exc_info=True)
        finally:
            attempt.done.set()
            attempt.client = None
            if not ready.done():
                ready.set_exception(ServerDown("it was stopped"))
            elif ready.exception() is None:
                log.info("mcp_server_stopped", server=self.name)

    async def _start(self) -> Client:
        """Start the server and list its tools, within ``startup_timeout_seconds``; ServerDown says why not."""
        attempt = _Attempt()
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self._attempt = attempt
        self.starts += 1
        attempt.holder = asyncio.create_task(self._hold(attempt, ready))
        import anyio

        try:
            with anyio.fail_after(self.spec.startup_timeout_seconds):
                client = await asyncio.shield(ready)
                self.listed = await self._list(client)
        except asyncio.CancelledError:  # the caller gave up (Ctrl-C): stop what was started, and go
            await asyncio.shield(self._stop(attempt))
            if ready.done() and not ready.cancelled():
                ready.exception()  # retrieved: a start stopped on purpose is nothing for asyncio to report
            raise
        except BaseException as exc:
            await self._stop(attempt)
            if not ready.cancelled():
                ready.exception()  # retrieved: the failure is told below, not by asyncio at exit
            # Its last words say why it failed: read them to their end before quoting them.
            await asyncio.to_thread(attempt.stderr_read.wait, _STDERR_SECONDS)
            raise ServerDown(self._start_failure(exc, attempt)) from None
        log.info("mcp_server_started", server=self.name, version=self.listed.version, tools=len(self.listed.tools),
                 start=self.starts)
        return client

    def _start_failure(self, exc: BaseException, attempt: _Attempt) -> str:
        """Why a start failed, in a sentence, with the end of the server's stderr."""
        from mcp.shared.exceptions import MCPError

        exc = _leaf(exc)
        if isinstance(exc, TimeoutError):
            why = f"it did not answer within {self.spec.startup_timeout_seconds:g} s (startup_timeout_seconds)"
        elif isinstance(exc, OSError) and exc.strerror and exc.filename:
            why = f"cannot run it: {exc.strerror}: {exc.filename}"
        elif isinstance(exc, MCPError) and attempt.ended:
            why = "it exited (or closed its stdout) before it answered"
        else:
            why = _why(exc)
        tail = list(self.stderr_tail)[-5:]
        return f"{why}; its stderr ended with: {' | '.join(tail)}" if tail else why

    async def _list(self, client: Client) -> Listed:
        info = client.server_info
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        for _ in range(_LIST_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools += page.tools
            cursor = page.next_cursor
            if cursor is None:
                break
        return Listed(name=info.name if info else self.name, version=info.version if info else "unknown", tools=tools)

    async def _stop(self, attempt: _Attempt) -> None:
        """End the connection and wait until the SDK has stopped the server."""
        attempt.done.set()
        if attempt.scope is not None:
            attempt.scope.cancel()
        if attempt.holder is not None:
            await asyncio.wait([attempt.holder])

    async def stop(self) -> None:
        self.stopping = True
        if self._attempt is not None:
            await self._stop(self._attempt)

    async def connected(self) -> tuple[Client, _Attempt]:
        """The live connection: started now the first time, and started again (once) after it ended."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            attempt = self._attempt
            if attempt is not None and attempt.client is not None and not attempt.ended:
                return attempt.client, attempt
            if self.down is not None:
                raise ServerDown(self.down)
            if self.stopping:
                raise ServerDown("it was stopped (zagent is closing)")
            if attempt is not None:
                log.warning("mcp_server_died", server=self.name, restarting=True)
            try:
                client = await self._start()
            except ServerDown as exc:
                if attempt is not None:  # a restart that failed: not tried again
                    self.down = f"it died and could not be started again: {exc}"
                raise
            assert self._attempt is not None
            return client, self._attempt

    async def call(self, tool: str, arguments: Arguments, *, read_only: bool, timeout: float) -> Any:
        """``tools/call``: the result, or a :class:`ToolResult` that says why there is none."""
        import anyio
        from mcp.shared.exceptions import MCPError

        retried = False
        while True:
            try:
                client, attempt = await self.connected()
            except ServerDown as exc:
                return ToolResult(output=f"{self.label} is not running: {exc}", is_error=True)
            try:
                with anyio.fail_after(timeout):
                    return await client.call_tool(tool, arguments)
            except TimeoutError:
                return ToolResult(output=f"[timed out after {timeout:g} s: {self.label} did not answer; the request "
                                         "was cancelled]", is_error=True, timed_out=True)
            except MCPError as exc:
                if not attempt.ended:
                    return ToolResult(output=f"{self.label} refused the call: {exc.message} (error {exc.code})",
                                      is_error=True)
            except Exception as exc:  # noqa: BLE001 - what the SDK raises on a bad answer is a result
                if not attempt.ended:
                    return ToolResult(output=f"{self.label} answered badly: {_why(exc)}", is_error=True)
            # The connection ended under the call: the server died (or zagent is closing), the request sent.
            if self.stopping:
                return ToolResult(output=f"{self.label} was stopped during the call (zagent is closing): it may or "
                                         "may not have carried it out", is_error=True)
            if not read_only:
                return ToolResult(output=(
                    f"{self.label} died during the call: it may or may not have carried it out ({tool} is not "
                    "read-only, so it was not sent again); the server is started again for the next call"),
                    is_error=True)
            if retried:
                return ToolResult(output=f"{self.label} died during the call, and again when it was sent once more",
                                  is_error=True)
            retried = True
            log.warning("mcp_call_retried", server=self.name, tool=tool)


class _Given:
    """An already entered transport's streams, as the SDK's client takes a transport."""

    def __init__(self, streams: Any) -> None:
        self._streams = streams

    async def __aenter__(self) -> Any:
        return self._streams

    async def __aexit__(self, *exc: object) -> None:
        return None


# -- all servers ---------------------------------------------------------------------------


def definition_bytes(tool: Builtin) -> int:
    """What a tool's definition weighs in a request: its name, description and parameters as JSON."""
    definition = {"name": tool.name, "description": tool.description, "parameters": tool.parameters}
    return len(json.dumps(definition, ensure_ascii=False).encode("utf-8", "surrogatepass"))


def _named(names: list[str], shown: int = 5) -> str:
    """The first few ``names``, quoted, and how many more."""
    more = f" and {len(names) - shown:,} more" if len(names) > shown else ""
    return ", ".join(f'"{name}"' for name in names[:shown]) + more


def _left_out(server: Server, listed: list[str], too_big: list[str], limits: LimitsConfig) -> list[Problem]:
    """The warnings for the tools a server listed that its limits left out, naming the first of them."""
    problems: list[Problem] = []
    past = listed[limits.mcp_tools_per_server:]
    if past:
        problems.append(Problem(source=server.label, severity="warning", message=(
            f"it lists {len(listed):,} tools; the first {limits.mcp_tools_per_server:,} are offered "
            f"(limits.mcp_tools_per_server), {len(past):,} left out: {_named(past)}; raise "
            "limits.mcp_tools_per_server in config.json to offer more")))
    if too_big:
        problems.append(Problem(source=server.label, severity="warning", message=(
            f"{len(too_big):,} of its tools are not offered: their definitions would take its tool list past "
            f"limits.mcp_tool_list_bytes ({limits.mcp_tool_list_bytes:,} bytes): {_named(too_big)}; raise "
            "limits.mcp_tool_list_bytes in config.json to offer them")))
    return problems


def _always(arguments: Arguments) -> bool:
    return True


def _confined(server: Server, config: SandboxConfig, home: Home) -> Server:
    """The server run in its sandbox, as its entry's ``sandbox`` and config.json's ask (and, as
    every process zagent starts, in a PID namespace that dies with the engine); a server whose
    entry asks for more than config.json grants is down, saying why."""
    if server.spec.command is None:
        return server  # a server already running: not ours to confine
    try:
        grant = grant_for(config, server.spec.sandbox, composed=False, workspace=server.workspace, who=server.label)
    except SandboxRefused as exc:
        return dataclasses.replace(server, down=str(exc))
    confinement = Confinement.of(grant, config=config, workspace=server.workspace, home=home, own=[])
    return dataclasses.replace(server, wrapper=confinement.wrapper(server.cwd))


class McpServers:
    """The MCP servers of a config, for one engine: their tools as built-ins, started on first need."""

    def __init__(self, config: Config, workspace: Path, home: Home, *, names: Collection[str] | None = None,
                 started: Callable[[str, str | None], None] | None = None) -> None:
        """The servers of ``config`` (those of ``names`` alone, when given), each started in
        ``workspace``, in the sandbox of ``home``'s sessions; ``started(server, why_not)`` hears
        of each start as it ends (``why_not`` None: it started), in the servers' own thread."""
        # A server is a program zagent starts, like a tool: no model key may be in its environment
        # (nor in this process's initial one, which it could read), whatever command starts it.
        withhold_keys(config)
        self.servers = {name: _confined(Server(name, spec, workspace), config.sandbox, home)
                        for name, spec in config.mcp.servers.items() if names is None or name in names}
        self._started = started
        #: How many tools of a server are offered, and how big their definitions may be.
        self._limits = config.limits
        self._loop = _Loop()
        self._lock = threading.Lock()
        self._tools: dict[str, Builtin] | None = None
        self._problems: list[Problem] = []
        #: Which server each offered tool is of, by offered name (``zagent tools list``).
        self.server_of: dict[str, str] = {}
        self._closed = False

    def tools(self) -> tuple[dict[str, Builtin], list[Problem]]:
        """Every server's tools, by offered name, and what went wrong; the servers are started
        (all at once) the first time, the same answer given after."""
        with self._lock:
            if self._tools is None:
                self._tools, self._problems = self._load()
            return dict(self._tools), list(self._problems)

    def _load(self) -> tuple[dict[str, Builtin], list[Problem]]:
        if not self.servers or self._closed:
            return {}, []
        try:
            import mcp  # noqa: F401 - an optional dependency
        except ImportError:
            return {}, [Problem(source=s.label, severity="warning", message=(
                f"not started, its tools are not offered: the MCP SDK is not installed ({install_command('mcp')})"))
                for s in self.servers.values()]
        budget = max(s.spec.startup_timeout_seconds for s in self.servers.values()) + _STOP_SECONDS
        try:
            outcomes = self._loop.run(self._start_all(), budget)
        except concurrent.futures.TimeoutError:  # each start has its own deadline: only a wedged one gets here
            outcomes = [ServerDown(f"it did not start within {budget:g} s")] * len(self.servers)
        tools: dict[str, Builtin] = {}
        problems: list[Problem] = []
        for server, outcome in zip(self.servers.values(), outcomes):
            if isinstance(outcome, BaseException):
                server.down = str(outcome)
                problems.append(Problem(source=server.label, severity="warning",
                                        message=f"not started, its tools are not offered: {outcome}"))
                continue
            assert server.listed is not None
            problems += self._add_tools(server, server.listed, tools)
        return tools, problems

    async def _start_all(self) -> list[Any]:
        async def one(server: Server) -> Any:
            try:
                await server.connected()
            except ServerDown as exc:
                self._told(server, str(exc))
                return exc
            self._told(server, None)
            return None

        return list(await asyncio.gather(*(one(s) for s in self.servers.values())))

    def _told(self, server: Server, why_not: str | None) -> None:
        if self._started is not None:
            try:
                self._started(server.name, why_not)
            except Exception:  # noqa: BLE001 - a progress line's failure must not fail the start
                log.debug("mcp_start_not_told", server=server.name, exc_info=True)

    def _add_tools(self, server: Server, listed: Listed, into: dict[str, Builtin]) -> list[Problem]:
        """Offer the server's tools, the first in its order while they are within
        ``limits.mcp_tools_per_server`` and ``limits.mcp_tool_list_bytes``; a warning says what was left out."""
        limits = self._limits
        problems: list[Problem] = []
        too_big: list[str] = []
        size = 0
        for tool in listed.tools[:limits.mcp_tools_per_server]:
            offered, said = self._offered(server, listed, tool, into)
            cost = definition_bytes(offered) if offered is not None else 0
            if size + cost > limits.mcp_tool_list_bytes:
                too_big.append(tool.name)
                continue
            problems += said
            if offered is not None:
                size += cost
                into[offered.name] = offered
                self.server_of[offered.name] = server.name
        return problems + _left_out(server, [tool.name for tool in listed.tools], too_big, limits)

    def _offered(self, server: Server, listed: Listed, tool: mcp_types.Tool,
                 taken: Collection[str]) -> tuple[Builtin | None, list[Problem]]:
        """The tool as offered (None when it cannot be), and what to warn of: why not, or its new name."""
        from zagent_core.tools.manifest import outside_refs, schema_dialect

        def warning(message: str) -> list[Problem]:
            return [Problem(source=server.label, severity="warning", message=message)]

        name = offered_name(server.name, tool.name, taken)
        if name is None:
            return None, warning(f'tool "{tool.name}" is not offered: its name, made one the model APIs take, is taken')
        parameters = closed(tool.input_schema)
        try:
            schema_dialect(parameters).check_schema(parameters)
        except Exception as exc:  # noqa: BLE001 - the server's schema, not ours: the tool is left out
            return None, warning(f'tool "{tool.name}" is not offered: its inputSchema is not a JSON Schema zagent '
                                 f"can apply ({_why(exc)[:200]})")
        outside = outside_refs(parameters)
        if outside:
            return None, warning(f'tool "{tool.name}" is not offered: its inputSchema refers outside itself '
                                 f'("$ref": {json.dumps(outside[0])[:200]}), and zagent fetches no schema')
        renamed = [] if name == f"{server.name}{SEPARATOR}{tool.name}" else warning(
            f'tool "{tool.name}" is offered as "{name}": model APIs take tool names of at most {MAX_TOOL_NAME} '
            "letters, digits, _ and -")
        said = renamed
        for pattern in unreadable(parameters):
            said = said + warning(f'tool "{tool.name}": zagent does not check its arguments against the pattern '
                                  f"{json.dumps(pattern)[:200]} of its inputSchema (a lookaround or a backreference, "
                                  "which only a backtracking matcher reads, in unbounded time); the server checks them")
        return self._builtin(server, listed, tool, name, parameters), said

    def _builtin(self, server: Server, listed: Listed, tool: mcp_types.Tool, name: str,
                 parameters: dict[str, Any]) -> Builtin:
        # The config's word stands for a server that annotates nothing; the server's own claim for the rest.
        read_only = server.spec.readonly or bool(tool.annotations is not None and tool.annotations.read_only_hint)
        description = tool.description or tool.title or f"The {tool.name} tool of the MCP server {server.name}."
        return Builtin(
            name=name, description=description, parameters=parameters,
            run=functools.partial(self._run, server, tool.name, read_only),
            # A read-only tool changes nothing: calls run side by side, and a cut-off one runs again.
            concurrency_safe=read_only, replay="safe" if read_only else "unsafe",
            runs_process=_always,  # a call folder, for the images and files it returns
            source=f"mcp:{server.name}@{listed.version}", version=listed.version,
            definition_hash=schema_hash(tool.input_schema), origin=f"(mcp server {server.name})",
            deferrable=True,  # many servers offer dozens of tools: lazy disclosure sends those the model finds
            output_schema=tool.output_schema,
        )

    def _run(self, server: Server, tool: str, read_only: bool, context: BuiltinContext,
             arguments: Arguments) -> ToolResult:
        """One validated call of ``tool``, carried out by ``server``."""
        if self._closed:
            return ToolResult(output=f"{server.label} was stopped (zagent is closing); the call was not sent",
                              is_error=True)
        timeout = server.spec.timeout_seconds or context.config.limits.default_timeout_seconds
        started = time.monotonic()
        # Past the call's own timeout: a restart of the server, and stopping a dead one.
        budget = timeout + server.spec.startup_timeout_seconds + _STOP_SECONDS
        try:
            answer = self._loop.run(server.call(tool, arguments, read_only=read_only, timeout=timeout), budget,
                                    context.host.calls_stopped)
        except concurrent.futures.TimeoutError:  # the builtin TimeoutError from 3.11 on
            return ToolResult(output=f"[timed out after {budget:g} s waiting for {server.label}]", is_error=True,
                              timed_out=True)
        if isinstance(answer, ToolResult):
            return answer
        return to_result(answer, context, time.monotonic() - started)

    def close(self) -> None:
        """Stop every server that runs (waiting until each is gone), and the loop. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if not self._loop.running:
            return

        async def stop_all() -> None:
            await asyncio.gather(*(s.stop() for s in self.servers.values()), return_exceptions=True)

        try:
            self._loop.run(stop_all(), _STOP_SECONDS)
        except Exception:  # noqa: BLE001 - closing must not fail the caller; the servers' stdin is closed anyway
            log.warning("mcp_servers_not_stopped", exc_info=True)
        finally:
            self._loop.stop()
