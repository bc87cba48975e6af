"""``zagent mcp serve``: real servers (subprocesses) driven by the MCP SDK's own client."""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
import forked
from click.testing import CliRunner
from conftest import EXAMPLES, PYTHON, python_tool, wait_for, write_tool
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from zagent_cli.main import cli
from zagent_core.journal.events import (
    Event,
    SessionEnded,
    SessionStarted,
    ToolCallFinished,
    ToolCallInterrupted,
    ToolCallRejected,
    ToolCallRequested,
)
from zagent_store import SQLiteJournal

CLIENT = types.Implementation(name="pytest-client", version="1.2.3")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A home with the example tools (this interpreter for "python"); echo_stdin made
    concurrency-safe and replay-safe, so its hints can be seen; grep disabled."""
    root = tmp_path / "home"
    for name in ("echo_stdin", "slow_count", "image_maker", "slow_report"):
        shutil.copytree(EXAMPLES / "tools" / name, root / "tools" / name)
        manifest = root / "tools" / name / f"{name}.json"
        data = json.loads(manifest.read_text())
        data["command"][0] = PYTHON
        if name == "echo_stdin":
            data |= {"concurrency_safe": True, "replay": "safe"}
        manifest.write_text(json.dumps(data))
    (root / "config.json").write_text(json.dumps({"tools": {"disabled": ["grep"]}}))
    (tmp_path / "workspace").mkdir()
    return root


def serve_argv(home: Path, *extra: str) -> list[str]:
    return [PYTHON, "-m", "zagent_cli", "--home", str(home), "--workspace", str(home.parent / "workspace"),
            "mcp", "serve", *extra]


def over_stdio(home: Path, **options: Any) -> Client:
    args = serve_argv(home)
    return Client(StdioServerParameters(command=args[0], args=args[1:]), client_info=CLIENT, **options)


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    anyio.run(scenario)


# -- what the journal says ---------------------------------------------------------------


def sessions(home: Path) -> list[tuple[str, list[Event]]]:
    """Every session of the home's journal, oldest first, with its events."""
    with SQLiteJournal(home / "journal.db", read_only=True) as journal:
        found = sorted(journal.sessions(), key=lambda s: s.started_at)
        return [(s.session_id, [stored.event for stored in journal.read(s.session_id)]) for s in found]


def ended(home: Path, count: int = 1) -> bool:
    return (home / "journal.db").exists() and len(found := sessions(home)) >= count and all(
        isinstance(events[-1], SessionEnded) for _, events in found)


def assert_journaled_as_an_mcp_session(events: list[Event], tools: list[str]) -> None:
    """Origin mcp, the client named, the calls of ``tools`` in order, each with exactly one result, then the end."""
    started = events[0]
    assert isinstance(started, SessionStarted)
    assert started.origin == "mcp" and started.client == {"name": "pytest-client", "version": "1.2.3"}
    requested = [e for e in events if isinstance(e, ToolCallRequested)]
    assert [r.tool for r in requested] == tools
    for request in requested:
        results = [e for e in events if isinstance(e, (ToolCallFinished, ToolCallRejected, ToolCallInterrupted))
                   and e.call_id == request.call_id]
        assert len(results) == 1, (request, results)
    assert isinstance(events[-1], SessionEnded)


async def until(condition: Callable[[], bool]) -> None:
    """Wait for what ``condition`` looks for to happen (the journal read again and again)."""
    with anyio.fail_after(30):
        while not condition():
            await anyio.sleep(0.02)


def text_of(result: types.CallToolResult) -> str:
    first = result.content[0]
    assert isinstance(first, types.TextContent)
    return first.text


# -- over stdio ----------------------------------------------------------------------------


def test_a_stdio_client_is_offered_the_home_tools_with_hints_and_gets_refusals_as_tool_errors(home: Path) -> None:
    async def scenario() -> None:
        async with over_stdio(home) as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            called = await client.call_tool("echo_stdin", {"name": "Ada"})
            misspelt = await client.call_tool("echo_stdin", {"nam": "Ada"})
            disabled = await client.call_tool("grep", {"pattern": "x"})
            unknown = await client.call_tool("echo_stdn", {"name": "Ada"})

        assert {"echo_stdin", "slow_count", "image_maker", "slow_report", "terminal", "read_file"} <= set(listed)
        assert "grep" not in listed  # tools.disabled
        echo, report, read_file = listed["echo_stdin"], listed["slow_report"], listed["read_file"]
        assert echo.input_schema["required"] == ["name"] and echo.description.startswith("Echo the arguments")
        assert echo.annotations == types.ToolAnnotations(read_only_hint=True, idempotent_hint=True)
        assert report.annotations == types.ToolAnnotations(read_only_hint=False, idempotent_hint=False)
        assert read_file.annotations == types.ToolAnnotations(read_only_hint=True, idempotent_hint=True)

        assert not called.is_error and "Hello, Ada!" in text_of(called)
        assert misspelt.is_error and 'unknown argument "nam" (allowed: name, times)' in text_of(misspelt)
        assert disabled.is_error and text_of(disabled).startswith('tool "grep" is disabled in config.json')
        assert unknown.is_error and 'unknown tool "echo_stdn" (did you mean "echo_stdin"?)' in text_of(unknown)

    run(scenario)
    wait_for(lambda: ended(home), "the session to end")
    ((_, events),) = sessions(home)
    assert_journaled_as_an_mcp_session(events, ["echo_stdin"] * 2 + ["grep", "echo_stdn"])


def test_notes_reach_a_stdio_client_as_progress_or_log_messages_and_images_as_image_content(home: Path) -> None:
    progress: list[tuple[float, str | None]] = []
    logged: list[types.LoggingMessageNotificationParams] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, message))

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logged.append(params)

    async def scenario() -> None:
        async with over_stdio(home, logging_callback=on_log, log_level="info") as client:
            counted = await client.call_tool("slow_count", {"n": 3, "delay": 0}, progress_callback=on_progress)
            assert not counted.is_error and text_of(counted).endswith("Done: counted to 3.")
            await client.call_tool("slow_count", {"n": 2, "delay": 0})
            image = await client.call_tool("image_maker", {"color": "#ff8800", "width": 3, "height": 2})
        assert not image.is_error
        text, picture = image.content
        assert isinstance(picture, types.ImageContent) and picture.mime_type == "image/png"
        path = Path(text_of(image).split()[1].rstrip(":"))
        assert picture.data == base64.b64encode(path.read_bytes()).decode()

    run(scenario)
    # Notes come before the result, each once, in order.
    assert progress == [(1, "1/3 counted"), (2, "2/3 counted"), (3, "3/3 counted")]
    assert [(p.level, p.logger, p.data) for p in logged] == [("info", "slow_count", "1/2 counted"),
                                                            ("info", "slow_count", "2/2 counted")]


def test_a_background_tool_answers_started_as_task_and_terminal_waits_for_it(home: Path) -> None:
    async def scenario() -> None:
        async with over_stdio(home) as client:
            started = await client.call_tool("slow_report", {"topic": "mcp", "seconds": 1})
            waited = await client.call_tool("terminal", {"action": "wait", "task": 1, "timeout_seconds": 60})
        assert not started.is_error and text_of(started).startswith("started as task #1;")
        assert not waited.is_error
        assert text_of(waited).startswith("#1 slow_report: exited with code 0") and "report on mcp" in text_of(waited)

    run(scenario)
    wait_for(lambda: ended(home), "the session to end")
    ((_, events),) = sessions(home)
    assert_journaled_as_an_mcp_session(events, ["slow_report", "terminal"])


def test_output_files_come_back_as_file_resource_links(home: Path) -> None:
    python_tool(home, "writer", "import os\nopen(os.environ['ZAGENT_OUTPUT_DIR'] + '/notes.txt', 'w').write('hi')\n"
                "print('wrote notes.txt')\n", attach_outputs=True)

    async def scenario() -> None:
        async with over_stdio(home) as client:
            result = await client.call_tool("writer", {})
        text, link = result.content
        assert isinstance(link, types.ResourceLink) and link.name == "notes.txt" and link.mime_type == "text/plain"
        assert str(link.uri).startswith("file:///") and Path(str(link.uri)[len("file://"):]).read_text() == "hi"

    run(scenario)


def test_a_call_cancelled_is_journaled_interrupted_and_a_disconnect_kills_the_tasks(home: Path) -> None:
    async def scenario() -> None:
        async with over_stdio(home) as client:
            await client.call_tool("slow_report", {"topic": "long", "seconds": 60})
            counting = anyio.Event()

            async def on_progress(value: float, total: float | None, message: str | None) -> None:
                counting.set()

            async with anyio.create_task_group() as calls:
                calls.start_soon(lambda: client.call_tool("slow_count", {"n": 20, "delay": 2},
                                                          progress_callback=on_progress))
                await counting.wait()  # it runs: its first note was journaled and sent
                calls.cancel_scope.cancel()  # notifications/cancelled
            async with anyio.create_task_group() as calls:  # leave while terminal waits for the task
                calls.start_soon(lambda: client.call_tool("terminal", {"action": "wait", "task": 1,
                                                                       "timeout_seconds": 60}))
                await until(lambda: any(e.type == "tool_call_started" and e.tool == "terminal"
                                        for _, events in sessions(home) for e in events))
                calls.cancel_scope.cancel()

    started = time.monotonic()
    run(scenario)
    wait_for(lambda: ended(home), "the session to end")
    assert time.monotonic() - started < 30  # neither the count nor the wait ran out
    ((_, events),) = sessions(home)
    assert_journaled_as_an_mcp_session(events, ["slow_report", "slow_count", "terminal"])
    calls = {e.call_id: e.tool for e in events if isinstance(e, ToolCallRequested)}
    stopped = {calls[e.call_id]: e.message for e in events if isinstance(e, ToolCallInterrupted)}
    # A cancel, journaled as one: not "zagent was stopped", which the journal says of a Ctrl-C.
    assert stopped["slow_count"] == ("the MCP client cancelled the call while the tool ran; its effect may or may "
                                     "not have happened")
    assert [e.type for e in events if e.type.startswith("task_")] == ["task_started", "task_killed"]


def test_stdout_carries_only_protocol_messages(home: Path) -> None:
    write_tool(home, "broken", '{"description": "x"')  # a warning, on stderr
    python_tool(home, "noisy", "import sys\nprint('to stdout')\nprint('to stderr', file=sys.stderr)\n")
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "noisy", "arguments": {}}},
    ]
    argv = serve_argv(home)
    argv.insert(3, "-vv")  # the engine's logs too
    log = home.parent / "stderr.txt"
    with log.open("wb") as stderr:
        server = forked.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write("".join(json.dumps(m) + "\n" for m in messages).encode())
    server.stdin.flush()
    lines = []
    while not any(json.loads(line).get("id") == 2 for line in lines):
        lines.append(server.stdout.readline())
    server.stdin.close()  # the client goes away: the session ends, the server exits
    lines += server.stdout.read().splitlines()
    assert server.wait(timeout=30) == 0
    errors = log.read_bytes()
    replies = [json.loads(line) for line in lines]  # each line one JSON-RPC message, nothing else
    assert all(reply["jsonrpc"] == "2.0" for reply in replies)
    (answer,) = [r for r in replies if r.get("id") == 2]
    assert sorted(answer["result"]["content"][0]["text"].splitlines()) == ["to stderr", "to stdout"]
    assert b"tools/broken" in errors and b"session_started" in errors  # the warning and -vv logs: stderr


def test_a_call_cut_off_by_the_client_leaving_is_journaled_so(home: Path) -> None:
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "slow_count", "arguments": {"n": 20, "delay": 2}, "_meta": {"progressToken": "p"}}},
    ]
    server = forked.Popen(serve_argv(home), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL)
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write("".join(json.dumps(m) + "\n" for m in messages).encode())
    server.stdin.flush()
    while True:  # until the count runs: its first note was sent
        message = json.loads(server.stdout.readline())
        assert message.get("id") != 2, message  # answered before it ran (refused)
        if message.get("method") in ("notifications/progress", "notifications/message"):
            break
    server.stdin.close()  # the client goes away mid-call, without cancelling it
    assert server.wait(timeout=30) == 0
    ((_, events),) = sessions(home)
    (stopped,) = [e for e in events if isinstance(e, ToolCallInterrupted)]
    assert stopped.message == "the MCP client went away while the tool ran; its effect may or may not have happened"


# -- over HTTP -----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def http_server(home: Path) -> Iterator[str]:
    port = free_port()
    server = forked.Popen(serve_argv(home, "--http", f"127.0.0.1:{port}"), stderr=subprocess.PIPE)
    try:
        def accepts() -> bool:
            assert server.poll() is None, server.communicate()[1]
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except OSError:
                return False
            return True

        wait_for(accepts, "the server to listen", seconds=30)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=30)


def test_over_http_on_loopback_each_connection_is_a_session_ended_when_the_client_leaves(home: Path) -> None:
    progress: list[str | None] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message)

    async def scenario(url: str) -> None:
        async with Client(url, client_info=CLIENT) as client:  # auto: the handshake, as over HTTP it must be
            assert client.protocol_version == "2025-11-25"
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert listed["echo_stdin"].annotations == types.ToolAnnotations(read_only_hint=True,
                                                                             idempotent_hint=True)
            counted = await client.call_tool("slow_count", {"n": 2, "delay": 0}, progress_callback=on_progress)
            assert not counted.is_error
            misspelt = await client.call_tool("slow_count", {"n": 2, "dely": 0})
            assert misspelt.is_error and 'unknown argument "dely"' in text_of(misspelt)
            image = await client.call_tool("image_maker", {"color": "#000000"})
            assert isinstance(image.content[1], types.ImageContent)
            started = await client.call_tool("slow_report", {"topic": "http", "seconds": 1})
            assert text_of(started).startswith("started as task #1;")
            waited = await client.call_tool("terminal", {"action": "wait", "task": 1, "timeout_seconds": 60})
            assert "report on http" in text_of(waited)
        async with Client(url, client_info=CLIENT) as second:
            assert not (await second.call_tool("echo_stdin", {"name": "two"})).is_error
        # A 2026-07-28 request stands alone: no connection, so no session to journal it in.
        async with Client(url, mode="2026-07-28") as modern:
            with pytest.raises(MCPError, match="one journaled session per connection"):
                await modern.call_tool("echo_stdin", {"name": "three"})

    with http_server(home) as url:
        anyio.run(scenario, url)
        wait_for(lambda: ended(home, 2), "both sessions to end")
    first, second = sessions(home)
    assert_journaled_as_an_mcp_session(first[1], ["slow_count"] * 2 + ["image_maker", "slow_report", "terminal"])
    assert_journaled_as_an_mcp_session(second[1], ["echo_stdin"])
    assert progress == ["1/2 counted", "2/2 counted"]


def test_http_refuses_an_address_other_machines_reach_without_allow_remote(home: Path) -> None:
    def serve(address: str) -> Any:
        return CliRunner().invoke(cli, ["--home", str(home), "mcp", "serve", "--http", address])

    refused = serve("0.0.0.0:8765")
    assert refused.exit_code == 2 and refused.stdout == ""
    assert "would serve the home's tools" in refused.stderr and "--allow-remote" in refused.stderr
    assert serve("8765").exit_code == 2 and "--http takes HOST:PORT" in serve("8765").stderr
    assert not (home / "journal.db").exists()


def server_pid(home: Path) -> int:
    """The pid of the process driving the home's one session, as its lease says."""
    with SQLiteJournal(home / "journal.db", read_only=True) as journal:
        (summary,) = journal.sessions()
        lease = journal.lease(summary.session_id)
    assert lease is not None
    return int(lease.owner["pid"])


def signal_at_first_note(home: Path, number: int) -> Callable[[float, float | None, str | None], Awaitable[None]]:
    """A progress callback that sends the server signal ``number`` once, when the call's first
    note arrives (so the call runs, and its note was journaled and sent). Made in the event loop."""
    sent = anyio.Event()

    async def callback(value: float, total: float | None, message: str | None) -> None:
        if not sent.is_set():
            os.kill(server_pid(home), number)
            sent.set()

    return callback


def test_sigterm_ends_the_session_with_its_calls_interrupted_and_its_tasks_killed(home: Path) -> None:
    async def scenario() -> None:
        stop_the_server = signal_at_first_note(home, signal.SIGTERM)
        async with over_stdio(home) as client:
            await client.call_tool("slow_report", {"topic": "long", "seconds": 60})
            try:
                counted = await client.call_tool("slow_count", {"n": 20, "delay": 2},
                                                 progress_callback=stop_the_server)
            except MCPError:
                pass  # the server exited before its answer was written (it tries to wait for it)
            else:
                assert counted.is_error and text_of(counted).startswith("slow_count was stopped")

    started = time.monotonic()
    run(scenario)
    assert time.monotonic() - started < 30  # neither the count nor the report ran out
    ((_, events),) = sessions(home)
    assert_journaled_as_an_mcp_session(events, ["slow_report", "slow_count"])
    assert [e.type for e in events if e.type.startswith("task_")] == ["task_started", "task_killed"]
    assert isinstance(events[-1], SessionEnded) and events[-1].reason == "interrupted"


# -- a crash -------------------------------------------------------------------------------


def test_a_server_killed_mid_call_leaves_a_session_that_resume_settles(home: Path) -> None:
    async def scenario() -> None:
        kill_the_server = signal_at_first_note(home, signal.SIGKILL)
        async with over_stdio(home) as client:
            with pytest.raises(MCPError):
                await client.call_tool("slow_count", {"n": 20, "delay": 2}, progress_callback=kill_the_server)

    run(scenario)
    ((session_id, events),) = sessions(home)
    assert events[-1].type == "note_received"  # cut off: no result, no end
    resumed = forked.run([PYTHON, "-m", "zagent_cli", "--home", str(home), "resume", session_id],
                         capture_output=True, text=True, timeout=60)
    assert resumed.returncode == 0, resumed.stderr
    assert "zagent stopped while slow_count was running" in resumed.stdout
    ((_, events),) = sessions(home)
    interrupted = [e for e in events if isinstance(e, ToolCallInterrupted)]
    assert len(interrupted) == 1 and "the call was cut off" in interrupted[0].message
    assert [e.type for e in events[-2:]] == ["tool_call_interrupted", "session_ended"]
