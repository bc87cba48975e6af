"""MCP servers' tools as zagent tools, against the reference servers published on npm.

``@modelcontextprotocol/server-everything`` and ``@modelcontextprotocol/server-filesystem``,
at the versions pinned below, are installed once per test session with ``npm install``
into a cache folder (pytest's cache, else ~/.cache/zagent-tests), reused when present,
and run as ``node <entry file>``: real processes, a real journal, no npx at run time.
Where Node.js or npm is missing, the tests skip and say so.

Server processes are found by a mark each test puts in its servers' environment
(``MCP_TEST_MARK``, read from ``/proc/PID/environ``), which also shows that a server's
``env`` reaches it.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import forked
from click.testing import CliRunner
from conftest import running, wait_for

from zagent_cli.main import cli
from zagent_core import Engine, Home
from zagent_core.agent.conversation import Conversation
from zagent_core.agent.loop import Agent
from zagent_core.config import Config, load_config
from zagent_core.journal.events import SessionStarted, ToolCallFinished, ToolCallInterrupted, ToolCallRejected, \
    ToolCallStarted
from zagent_core.journal.protocol import Journal
from zagent_core.tools.mcp import MAX_TOOL_NAME, closed, offered_name, schema_hash
from zagent_core.agent.models.scripted import ScriptedModel
from zagent_store import SQLiteJournal

pytest.importorskip("mcp", reason="the MCP SDK is not installed: pip install -e '.[test]'")


def _import_anyio() -> None:
    """Import all of anyio now, in this thread. anyio is a pytest plugin, so pytest rewrites
    (parses) its modules when they are imported, and anyio imports its asyncio backend, its
    streams and its subprocess support when first used: on zagent's MCP thread, while this
    one may be parsing too, which CPython 3.11 does not survive (see conftest's
    ``_import_every_module``)."""
    import importlib
    import pkgutil

    import anyio

    for module in pkgutil.walk_packages(anyio.__path__, prefix="anyio."):
        with contextlib.suppress(ImportError):  # the trio backend, without trio
            importlib.import_module(module.name)


_import_anyio()

#: The reference servers, pinned (``npm view @modelcontextprotocol/server-everything version``).
PACKAGES = {
    "@modelcontextprotocol/server-everything": "2026.8.31",
    "@modelcontextprotocol/server-filesystem": "2026.8.31",
}
#: What their ``initialize`` says they are, at those versions.
EVERYTHING_VERSION = "2.0.0"
FILESYSTEM_VERSION = "0.2.0"
MARK = "MCP_TEST_MARK"


# -- the servers, installed once -----------------------------------------------------------


def _cache_root(config: pytest.Config) -> Path:
    cache = getattr(config, "cache", None)
    if cache is not None:
        return Path(cache.mkdir("zagent-mcp-servers"))
    return Path.home() / ".cache" / "zagent-tests" / "mcp-servers"


def _entry(prefix: Path, package: str) -> Path | None:
    """The installed package's entry file (its ``bin``), if it is there at the pinned version."""
    manifest = prefix / "node_modules" / package / "package.json"
    try:
        data = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return None
    if data.get("version") != PACKAGES[package]:
        return None
    binary = data.get("bin")
    relative = next(iter(binary.values())) if isinstance(binary, dict) else binary
    entry = manifest.parent / str(relative)
    return entry if entry.is_file() else None


@pytest.fixture(scope="session")
def entries(pytestconfig: pytest.Config) -> dict[str, list[str]]:
    """``node`` and each reference server's entry file, by package (installed the first time)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("Node.js and npm are needed to run the reference MCP servers (node or npm is not on PATH)")
    tag = hashlib.sha256(json.dumps(PACKAGES, sort_keys=True).encode()).hexdigest()[:12]
    prefix = _cache_root(pytestconfig) / tag
    prefix.mkdir(parents=True, exist_ok=True)
    import fcntl

    with open(prefix / ".lock", "w") as lock:  # test workers (xdist) install once between them
        fcntl.flock(lock, fcntl.LOCK_EX)
        if any(_entry(prefix, package) is None for package in PACKAGES):
            done = subprocess.run(
                [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--ignore-scripts",
                 "--loglevel=error", *(f"{name}@{version}" for name, version in PACKAGES.items())],
                capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
            assert done.returncode == 0, f"npm install failed:\n{done.stdout}\n{done.stderr}"
    found = {package: _entry(prefix, package) for package in PACKAGES}
    missing = [package for package, entry in found.items() if entry is None]
    assert not missing, f"npm installed no entry file for {missing} in {prefix}"
    return {package: [node, str(entry)] for package, entry in found.items()}


@pytest.fixture
def mark(tmp_path: Path) -> str:
    return f"zagent-test-{tmp_path.name}-{os.getpid()}"


def server_config(entries: dict[str, list[str]], mark: str, *names: str, **more: Any) -> dict[str, Any]:
    """config.json's ``mcp`` section: ``everything`` and ``fs`` (the workspace, ``.``) as asked, then ``more``."""
    known = {
        "everything": {"command": [*entries["@modelcontextprotocol/server-everything"], "stdio"],
                       "env": {MARK: mark}},
        "fs": {"command": [*entries["@modelcontextprotocol/server-filesystem"], "."], "env": {MARK: mark}},
    }
    return {"mcp": {"servers": {**{name: known[name] for name in names}, **more}}}


def servers_running(mark: str) -> dict[int, str]:
    """The live processes whose environment holds ``mark``, with their command lines (not the
    sandbox's bubblewrap around a server, which has it too)."""
    if not Path("/proc/self/environ").exists():
        pytest.skip("finding the servers' processes reads /proc (Linux)")
    found: dict[int, str] = {}
    wanted = f"{MARK}={mark}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        sandbox = Path(command.split(b"\0")[0].decode(errors="replace")).name == "bwrap"
        if wanted in environ.split(b"\0") and running(int(entry.name)) and not sandbox:
            found[int(entry.name)] = command.replace(b"\0", b" ").decode(errors="replace")
    return found


def server_pid(mark: str, package: str) -> int:
    pids = [pid for pid, command in servers_running(mark).items() if package in command]
    assert len(pids) == 1, servers_running(mark)
    return pids[0]


@contextlib.contextmanager
def engine_with(home: Path, journal: Journal, workspace: Path, config: dict[str, Any]) -> Iterator[Engine]:
    engine = Engine(Home(home), journal, workspace=workspace, config=Config.model_validate(config))
    try:
        yield engine
    finally:
        engine.close()


def zagent(home: Path, workspace: Path, *args: str,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return forked.run([sys.executable, "-m", "zagent_cli", "--home", str(home), "--workspace", str(workspace),
                       *args], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                      env={**os.environ, **(env or {})})


def write_home(home: Path, config: dict[str, Any], replies: list[dict[str, Any]]) -> Path:
    (home / "config.json").write_text(json.dumps(config))
    script = home / "script.json"
    script.write_text(json.dumps(replies))
    return script


def session_of(output: str) -> str:
    found = re.search(r"\[session (\S+), model", output)
    assert found, output
    return found.group(1)


def of_type(journal: Journal, session_id: str, kind: type) -> list[Any]:
    return [e.event for e in journal.read(session_id) if isinstance(e.event, kind)]


class Stall:
    """An HTTP server whose answers wait until the test lets them go: a call known to be inside
    the MCP server (``everything``'s ``gzip-file-as-resource`` fetches a URL) at the moment the
    test chooses."""

    def __init__(self) -> None:
        self.arrived = threading.Event()
        self.release = threading.Event()
        stall = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server API
                stall.arrived.set()
                stall.release.wait(30)
                with contextlib.suppress(OSError):  # the server that asked may be gone: the point of a stall
                    self.send_response(200)
                    self.send_header("Content-Length", "7")
                    self.end_headers()
                    self.wfile.write(b"stalled")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/file.txt"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stall() -> Iterator[Stall]:
    server = Stall()
    yield server
    server.close()


# -- names, schemas, config ----------------------------------------------------------------


def test_tools_are_offered_as_server__tool_and_names_the_model_apis_refuse_are_made_fit() -> None:
    assert offered_name("fs", "read_file", ()) == "fs__read_file"
    cleaned = offered_name("fs", "files.read/all", ())
    assert cleaned is not None and re.fullmatch(r"fs__files_read_all_[0-9a-f]{8}", cleaned)
    long = offered_name("everything", "x" * 80, ())
    assert long is not None and len(long) == MAX_TOOL_NAME and re.fullmatch(r"[A-Za-z0-9_-]+", long)
    assert offered_name("fs", "read_file", {"fs__read_file"}) != "fs__read_file"  # taken: its own, distinct name
    assert offered_name("fs", "a.b", ()) != offered_name("fs", "a/b", ())


def test_a_schema_that_lists_its_properties_is_closed_and_one_that_says_more_is_kept() -> None:
    listed = {"type": "object", "properties": {"path": {"type": "string"}}}
    assert closed(listed) == {**listed, "additionalProperties": False}
    for kept in ({**listed, "additionalProperties": True}, {**listed, "anyOf": [{"required": ["path"]}]},
                 {"type": "object"}):
        assert closed(kept) == kept
    assert schema_hash({"b": 1, "a": [2]}) == schema_hash({"a": [2], "b": 1})


def test_bad_mcp_entries_are_reported_and_left_out_without_quoting_their_secrets(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"mcp": {"servers": {
        "ok": {"command": ["node", "server.js"], "env": {"TOKEN": "s3cret"}},
        "string": {"command": "node server.js"},
        "both": {"command": ["x"], "url": "http://127.0.0.1/mcp", "headers": {"Authorization": "Bearer s3cret"}},
        "bad name": {"command": ["x"]},
        "a__b": {"command": ["x"]},
        "typo": {"command": ["x"], "envv": {}},
    }}}))
    config, problems = load_config(path)
    assert sorted(config.mcp.servers) == ["ok", "typo"]
    said = "\n".join(str(p) for p in problems)
    assert '"mcp.servers.string.command": "command" is a list' in said
    assert '"mcp.servers.both": an MCP server needs "command"' in said
    assert '"mcp.servers.bad name": the name must be' in said and '"mcp.servers.a__b": the name must be' in said
    assert 'unknown field "mcp.servers.typo.envv" is ignored' in said
    assert said.count("that server is left out") == 4
    assert "s3cret" not in said


# -- a run of zagent, journaled ------------------------------------------------------------


def test_a_scripted_run_journals_mcp_calls_with_their_identity_and_the_model_gets_their_results(
        entries: dict[str, list[str]], mark: str, home_dir: Path, workspace: Path) -> None:
    (workspace / "notes.txt").write_text("hello from the notes\n")
    script = write_home(home_dir, server_config(entries, mark, "fs", "everything"), [
        {"text": "reading", "tool_calls": [
            {"name": "fs__read_text_file", "arguments": {"path": str(workspace / "notes.txt")}},
            {"name": "everything__get-sum", "arguments": {"a": 2, "b": 3}},
            {"name": "everything__get-tiny-image", "arguments": {}}]},
        {"text": "done"},
    ])
    done = zagent(home_dir, workspace, "run", "--model", f"scripted:{script}", "read the notes")
    assert done.returncode == 0, done.stderr
    session_id = session_of(done.stderr)
    with SQLiteJournal(home_dir / "journal.db") as journal:
        offers = {o.name: o for o in of_type(journal, session_id, SessionStarted)[0].tools}
        started = {e.tool: e for e in of_type(journal, session_id, ToolCallStarted)}
        for name, server, version in (("fs__read_text_file", "fs", FILESYSTEM_VERSION),
                                      ("everything__get-sum", "everything", EVERYTHING_VERSION)):
            assert offers[name].identity == started[name].identity == f"mcp:{server}@{version}"
            assert started[name].tool_version == version
            assert offers[name].folder == f"(mcp server {server})"
            assert re.fullmatch(r"[0-9a-f]{64}", started[name].manifest_hash)
            assert offers[name].manifest_hash == started[name].manifest_hash
        # What the next request sent the model, as the agent builds it from the journal.
        messages = Conversation("", journal.read(session_id, types=Conversation.TYPES)).messages()
    tool_messages = [m for m in messages if m.role == "tool"]
    assert [m.content for m in tool_messages[:2]] == ["hello from the notes", "The sum of 2 and 3 is 5."]
    assert not any(m.is_error for m in tool_messages)
    [image] = tool_messages[2].media  # the image the tool returned goes to the model with its result
    assert image.mime == "image/png" and Path(image.path).is_file()
    audit = CliRunner().invoke(cli, ["--home", str(home_dir), "audit", "--session", session_id],
                               catch_exceptions=False)
    assert re.search(r"fs__read_text_file\s+ok", audit.output) and re.search(r"everything__get-sum\s+ok", audit.output)
    assert servers_running(mark) == {}


def test_no_mcp_server_outlives_zagent_run(entries: dict[str, list[str]], mark: str, home_dir: Path,
                                           workspace: Path, stall: Stall) -> None:
    script = write_home(home_dir, server_config(entries, mark, "fs", "everything"), [
        {"tool_calls": [{"name": "everything__gzip-file-as-resource", "arguments": {"data": stall.url}}]},
        {"text": "done"},
    ])
    run = forked.Popen([sys.executable, "-m", "zagent_cli", "--home", str(home_dir), "--workspace",
                        str(workspace), "run", "--model", f"scripted:{script}", "go"],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert stall.arrived.wait(60), "the call never reached the server"
        seen = servers_running(mark)  # while the call is inside the server: both are up
        assert len(seen) == 2, seen
        stall.release.set()
        out, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 0, err
    assert [pid for pid in seen if running(pid)] == [], "an MCP server outlived zagent run"


def test_replay_serves_mcp_results_from_the_recording_and_reruns_them(
        entries: dict[str, list[str]], mark: str, home_dir: Path, journal: Journal, workspace: Path) -> None:
    config = server_config(entries, mark, "everything")
    script = write_home(home_dir, config, [
        {"tool_calls": [{"name": "everything__echo", "arguments": {"message": "recorded"}}]},
        {"text": "done"},
    ])
    with engine_with(home_dir, journal, workspace, config) as engine, engine.start_session("run") as session:
        Agent(session, ScriptedModel.from_file(script), spec=f"scripted:{script}").run("go")
    session_id = session.session_id
    served = zagent(home_dir, workspace, "replay", session_id)
    assert served.returncode == 0 and "matches" in served.stdout and "served from the recording" in served.stdout
    rerun = zagent(home_dir, workspace, "replay", session_id, "--tools", "rerun")
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "matches" in rerun.stdout and "all run again" in rerun.stdout
    assert servers_running(mark) == {}


def test_a_server_at_a_url_is_reached_over_streamable_http(
        entries: dict[str, list[str]], mark: str, home_dir: Path, journal: Journal, workspace: Path) -> None:
    import socket

    with socket.socket() as probe:  # a free port, which the server is told (it cannot report one it picked)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([*entries["@modelcontextprotocol/server-everything"], "streamableHttp"],
                              env={**os.environ, "PORT": str(port), MARK: mark}, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stderr is not None
        for line in server.stderr:  # until it says it listens
            if f"listening on port {port}" in line:
                break
        else:
            pytest.fail(f"the HTTP server did not start (exit {server.wait()})")
        config = {"mcp": {"servers": {"web": {"url": f"http://127.0.0.1:{port}/mcp",
                                              "headers": {"X-Zagent-Test": "yes"}}}}}
        with engine_with(home_dir, journal, workspace, config) as engine, engine.start_session() as session:
            assert session.call("web__echo", {"message": "over http"}).output == "Echo: over http"
        offer = next(o for o in session.state.tools if o.name == "web__echo")
        assert offer.identity == f"mcp:web@{EVERYTHING_VERSION}"
    finally:
        server.kill()
        server.wait()


# -- calls ---------------------------------------------------------------------------------


def test_arguments_that_do_not_match_the_input_schema_are_refused_and_never_sent(
        entries: dict[str, list[str]], mark: str, home_dir: Path, journal: Journal, workspace: Path) -> None:
    with engine_with(home_dir, journal, workspace, server_config(entries, mark, "everything")) as engine, \
            engine.start_session() as session:
        refused = session.call("everything__get-sum", {"a": 1, "b": "x", "c": 3})
        assert refused.is_error
        assert 'unknown argument "c" (allowed: a, b)' in refused.output
        assert 'argument "b": expected number, got string' in refused.output
        coerced = session.call("everything__get-sum", {"a": "2", "b": 3})
        assert (coerced.is_error, coerced.output) == (False, "The sum of 2 and 3 is 5.")
        events = [e.event for e in journal.read(session.session_id)]
    rejected = [e for e in events if isinstance(e, ToolCallRejected)]
    assert [r.reason for r in rejected] == ["invalid_arguments"]
    # Only the valid call started: the refused one never reached the server.
    assert [(e.tool, e.arguments, [c.path for c in e.coercions]) for e in events if isinstance(e, ToolCallStarted)] \
        == [("everything__get-sum", {"a": 2, "b": 3}, ["a"])]


def test_an_image_result_becomes_an_attached_media_file_of_the_call(
        entries: dict[str, list[str]], mark: str, home_dir: Path, journal: Journal, workspace: Path) -> None:
    with engine_with(home_dir, journal, workspace, server_config(entries, mark, "everything")) as engine, \
            engine.start_session() as session:
        result = session.call("everything__get-tiny-image", {})
    assert not result.is_error
    [image] = result.media
    call_dir = home_dir / "sessions" / session.session_id / "calls" / session.state.last_call_id
    path = Path(image.path)
    assert path.parent == call_dir / "output" and image.mime == "image/png"
    assert path.read_bytes().startswith(b"\x89PNG") and image.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert f"{path} (image/png, {image.size} bytes, attached)" in result.output
    finished = [e.event for e in journal.read(session.session_id) if isinstance(e.event, ToolCallFinished)]
    assert finished[0].media == [image]


def test_links_resources_and_structured_content_are_described_in_the_text(
        entries: dict[str, list[str]], mark: str, home_dir: Path, journal: Journal, workspace: Path) -> None:
    with engine_with(home_dir, journal, workspace, server_config(entries, mark, "everything")) as engine, \
            engine.start_session() as session:
        links = session.call("everything__get-resource-links", {"count": 1})
        embedded = session.call("everything__get-resource-reference", {"resourceType": "Text", "resourceId": 2})
        blob = session.call("everything__gzip-file-as-resource",
                            {"data": "data:text/plain,hello", "outputType": "resource"})
        weather = session.call("everything__get-structured-content", {"location": "Chicago"})
    assert re.search(r"\[resource link: demo://resource/dynamic/\w+/1 \(\w+ Resource 1, text/plain", links.output)
    assert "[resource demo://resource/dynamic/text/2 (text/plain):]\nResource 2:" in embedded.output
    assert re.search(r"\[resource demo://resource/session/README\.md\.gz \(application/gzip\): saved as \S+"
                     r"/output/01-README\.md\.gz\]", blob.output)
    assert json.loads(weather.output)["conditions"]  # its text part, which is the structured content as JSON
    assert weather.structured == json.loads(weather.output)  # kept as data, and journaled
    finished = [e.event for e in journal.read(session.session_id) if isinstance(e.event, ToolCallFinished)]
    assert finished[-1].structured == weather.structured
    assert not any(r.is_error for r in (links, embedded, blob, weather))


def test_a_servers_environment_is_the_tool_environment_and_its_env_never_the_model_key(
        entries: dict[str, list[str]], mark: str, home_dir: Path, journal: Journal, workspace: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-never-for-a-tool")
    monkeypatch.setenv("ZAGENT_TEST_OWN", "zagent's own")
    monkeypatch.setenv("SOME_TOOL_SETTING", "for tools")
    with engine_with(home_dir, journal, workspace, server_config(entries, mark, "everything")) as engine, \
            engine.start_session() as session:
        environment = json.loads(session.call("everything__get-env", {}).output)
    assert environment[MARK] == mark and environment["SOME_TOOL_SETTING"] == "for tools"
    assert "OPENAI_API_KEY" not in environment and "ZAGENT_TEST_OWN" not in environment


def test_a_call_past_its_timeout_is_cancelled_and_says_so(
        entries: dict[str, list[str]], mark: str, home_dir: Path, journal: Journal, workspace: Path) -> None:
    config = server_config(entries, mark, "everything")
    config["mcp"]["servers"]["everything"]["timeout_seconds"] = 0.3
    with engine_with(home_dir, journal, workspace, config) as engine, engine.start_session() as session:
        # The server goes on with it after the cancellation: short, so closing finds it idle.
        slow = session.call("everything__trigger-long-running-operation", {"duration": 1, "steps": 1})
        assert slow.is_error and slow.timed_out
        assert slow.output.startswith('[timed out after 0.3 s: MCP server "everything" did not answer')
        assert session.call("everything__echo", {"message": "still here"}).output == "Echo: still here"


def test_a_server_error_is_an_error_result_never_an_exception(
        entries: dict[str, list[str]], mark: str, home_dir: Path, journal: Journal, workspace: Path) -> None:
    with engine_with(home_dir, journal, workspace, server_config(entries, mark, "everything")) as engine, \
            engine.start_session() as session:
        # The server's own validation (zod) refuses what JSON Schema let through: a URL it cannot parse.
        failed = session.call("everything__gzip-file-as-resource", {"data": "not a url"})
    assert failed.is_error and failed.output


# -- servers that fail or die --------------------------------------------------------------


def test_a_server_that_cannot_start_is_a_warning_and_the_rest_works(
        entries: dict[str, list[str]], mark: str, home_dir: Path, journal: Journal, workspace: Path) -> None:
    config = server_config(entries, mark, "everything", broken={"command": [str(workspace / "no-such-server")]})
    with engine_with(home_dir, journal, workspace, config) as engine, engine.start_session() as session:
        assert session.call("everything__echo", {"message": "fine"}).output == "Echo: fine"
        assert not any(name.startswith("broken__") for name in engine.builtins)
    [warning] = session.state.warnings
    assert warning.startswith('MCP server "broken": not started, its tools are not offered: cannot run it: '
                              "No such file or directory")
    (home_dir / "config.json").write_text(json.dumps(config))
    home = ["--home", str(home_dir), "--workspace", str(workspace)]
    doctor = CliRunner().invoke(cli, [*home, "doctor"], catch_exceptions=False)
    assert doctor.exit_code == 0, doctor.output  # a warning, not a broken home
    assert 'warning: MCP server "broken": not started' in doctor.output
    assert "mcp: 1 of 2 servers started, 13 tools offered" in doctor.output
    listing = CliRunner().invoke(cli, [*home, "tools", "list"], catch_exceptions=False)
    assert re.search(r"everything__echo\s+Echoes back the input string\s+\[mcp server everything\]", listing.output)
    assert 'warning: MCP server "broken": not started' in listing.output
    listed = json.loads(CliRunner().invoke(cli, [*home, "tools", "list", "--json"], catch_exceptions=False).output)
    echo = next(t for t in listed["mcp"] if t["name"] == "everything__echo")
    assert (echo["server"], echo["identity"], echo["replay"]) == ("everything", f"mcp:everything@{EVERYTHING_VERSION}",
                                                                    "safe")
    assert servers_running(mark) == {}  # doctor and tools list stop what they started


def test_a_server_killed_mid_session_is_started_again_and_the_next_call_works(
        entries: dict[str, list[str]], mark: str, home_dir: Path, journal: Journal, workspace: Path) -> None:
    with engine_with(home_dir, journal, workspace, server_config(entries, mark, "everything")) as engine, \
            engine.start_session() as session:
        assert session.call("everything__echo", {"message": "one"}).output == "Echo: one"
        first = server_pid(mark, "server-everything")
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: not running(first), "the killed server to be gone")
        assert session.call("everything__echo", {"message": "two"}).output == "Echo: two"
        second = server_pid(mark, "server-everything")
        assert second != first
        assert engine.mcp is not None and engine.mcp.servers["everything"].starts == 2
    assert not running(second)  # closing the engine stops the new one too


def test_an_unsafe_call_cut_off_by_the_servers_death_says_so_and_is_not_sent_again(
        entries: dict[str, list[str]], mark: str, home_dir: Path, journal: Journal, workspace: Path,
        stall: Stall) -> None:
    with engine_with(home_dir, journal, workspace, server_config(entries, mark, "everything")) as engine, \
            engine.start_session() as session:
        results: list[Any] = []
        call = threading.Thread(target=lambda: results.append(
            session.call("everything__gzip-file-as-resource", {"data": stall.url})))
        call.start()
        assert stall.arrived.wait(30), "the call never reached the server"
        os.kill(server_pid(mark, "server-everything"), signal.SIGKILL)
        call.join(30)
        [died] = results
        assert died.is_error
        assert 'MCP server "everything" died during the call: it may or may not have carried it out' in died.output
        assert "not read-only, so it was not sent again" in died.output
        assert session.call("everything__echo", {"message": "after"}).output == "Echo: after"


# -- scheduling and crashes ----------------------------------------------------------------


def test_read_only_tools_are_concurrency_safe_and_replay_safe_and_the_others_are_neither(
        entries: dict[str, list[str]], mark: str, home_dir: Path, journal: Journal, workspace: Path) -> None:
    with engine_with(home_dir, journal, workspace, server_config(entries, mark, "fs", "everything")) as engine:
        engine.load_tools()
        tools = engine.builtins
        for name in ("everything__echo", "fs__read_text_file", "fs__list_directory"):  # readOnlyHint: true
            assert (tools[name].is_concurrency_safe({}), tools[name].replay) == (True, "safe"), name
        for name in ("everything__gzip-file-as-resource", "fs__write_file", "fs__move_file"):
            assert (tools[name].is_concurrency_safe({}), tools[name].replay) == (False, "unsafe"), name


@pytest.mark.parametrize("readonly", [False, True], ids=["annotated", "server-readonly"])
def test_a_readonly_preset_gets_the_read_only_mcp_tools_only_unless_the_server_is_marked_readonly(
        entries: dict[str, list[str]], mark: str, home_dir: Path, workspace: Path, readonly: bool) -> None:
    config = server_config(entries, mark, "fs")
    config["mcp"]["servers"]["fs"]["readonly"] = readonly
    config["spawn"] = {"subagents": {"explore": {"readonly": True}}}
    script = write_home(home_dir, config, [])
    script.write_text(json.dumps({
        "replies": [{"tool_calls": [{"name": "spawn", "arguments": {"task": "look", "subagent_type": "explore"}}]},
                    {"text": "ok"}],
        "children": {"look": [{"text": "looked"}]}}))
    ran = zagent(home_dir, workspace, "run", "--model", f"scripted:{script}", "go")
    assert ran.returncode == 0, ran.stderr
    with SQLiteJournal(home_dir / "journal.db") as journal:
        (child,) = [s for s in journal.sessions() if s.label == "child-1"]
        (started,) = of_type(journal, child.session_id, SessionStarted)
    given = set(started.parent.tools)
    assert {"fs__read_text_file", "fs__list_directory", "read_file"} <= given  # readOnlyHint: true
    assert ({"fs__write_file", "fs__move_file"} <= given) is readonly
    assert "write_file" not in given and "shell" not in given  # the built-ins that change things, either way


@pytest.mark.parametrize(("tool", "arguments", "settled"), [
    ("everything__gzip-file-as-resource", {"data": "data:text/plain,hello"}, "interrupted"),
    ("everything__echo", {"message": "again"}, "run again"),
], ids=["not-read-only", "read-only"])
def test_a_call_cut_off_by_a_crash_follows_the_replay_rule_of_its_tool(
        entries: dict[str, list[str]], mark: str, home_dir: Path, workspace: Path, tool: str,
        arguments: dict[str, Any], settled: str) -> None:
    script = write_home(home_dir, server_config(entries, mark, "everything"), [
        {"tool_calls": [{"name": tool, "arguments": arguments}]}, {"text": "done"}])
    crashed = zagent(home_dir, workspace, "run", "--model", f"scripted:{script}", "go",
                     env={"ZAGENT_CRASH_AT": "after_tool_call_started"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    session_id = session_of(crashed.stderr)
    # The killed zagent's server sees its stdin close, and goes.
    wait_for(lambda: not servers_running(mark), "the orphaned server to exit", seconds=10)
    resumed = zagent(home_dir, workspace, "resume", session_id)
    assert resumed.returncode == 0, resumed.stderr
    with SQLiteJournal(home_dir / "journal.db") as journal:
        interrupted = of_type(journal, session_id, ToolCallInterrupted)
        finished = of_type(journal, session_id, ToolCallFinished)
        attempts = [e.attempt for e in of_type(journal, session_id, ToolCallStarted)]
    if settled == "interrupted":
        [cut] = interrupted
        assert "the call was cut off and its effect may or may not have happened" in cut.message
        assert (finished, attempts) == ([], [1])
    else:
        assert "it is replay-safe, so it runs again" in interrupted[0].message
        assert attempts == [1, 2] and [f.output for f in finished] == ["Echo: again"]
    assert servers_running(mark) == {}


def test_an_mcp_tool_is_shown_by_its_configured_alias_and_description_and_journaled_by_its_own_name(
        entries: dict[str, list[str]], mark: str, home_dir: Path, journal: Journal, workspace: Path) -> None:
    from test_tool_names import Seeing

    config = {**server_config(entries, mark, "everything"),
              "tools": {"aliases": {"everything__echo": "echo"}, "descriptions": {"everything__echo": "Say it back."}}}
    model = Seeing({"tool_calls": [{"name": "echo", "arguments": {"message": "hi"}}]}, {"text": "done"})
    with engine_with(home_dir, journal, workspace, config) as engine, engine.start_session("run") as session:
        Agent(session, model).run("go")
    assert model.seen("echo").description == "Say it back."
    assert "everything__echo" not in [spec.name for spec in model.tools[0]]
    [finished] = [e.event for e in journal.read(session.session_id) if isinstance(e.event, ToolCallFinished)]
    assert finished.output == "Echo: hi"
    assert [e.event.tool for e in journal.read(session.session_id) if isinstance(e.event, ToolCallStarted)] == [
        "everything__echo"]
