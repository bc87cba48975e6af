"""The sandbox, for real: bubblewrap confines what a model composes, a call's processes die
with it however they try to get away, and a host without bubblewrap says so and runs as before.

Every test runs real processes in a real bubblewrap (CI installs it); where there is none,
the tests that need one skip, saying why.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import forked
from conftest import NAMESPACED, PYTHON, crashed_shell_session, host_pid, python_tool, running, wait_for

from zagent_core import Engine, Home
from zagent_core.config import Config, LimitsConfig, SandboxConfig
from zagent_core.journal.protocol import Journal
from zagent_core.tools import sandbox
from zagent_store import SQLiteJournal

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None or not os.path.isdir("/proc/self"),
                                 reason="bubblewrap (bwrap) is not installed: apt-get install bubblewrap")

#: A daemon as a hostile command starts one: its own session, no output, an empty environment
#: (nothing of the call left to find it by), recording its pid where the test can find it.
DAEMON = (f"setsid env -i /bin/sh -c 'echo \"{NAMESPACED}$$\" > daemon.pid; exec sleep 300' "
          "</dev/null >/dev/null 2>&1 &")


def engine_with(home: Path, journal: Journal, workspace: Path, **sandbox_config: Any) -> Engine:
    config = Config(limits=LimitsConfig(kill_grace_seconds=0.3), sandbox=SandboxConfig(**sandbox_config))
    return Engine(Home(home), journal, workspace=workspace, config=config)


def shell(engine: Engine, command: str, **arguments: Any) -> Any:
    with engine.start_session("test") as session:
        return session.call("shell", {"command": command, **arguments})


def zagent(home: Path, workspace: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return forked.run([PYTHON, "-m", "zagent_cli", "--home", str(home), "--workspace", str(workspace), *args],
                      capture_output=True, text=True, timeout=120, env=env)


# -- the file system ------------------------------------------------------------------------------

@needs_bwrap
def test_a_shell_command_writes_the_workspace_and_nothing_else(home_dir: Path, journal: Journal, workspace: Path,
                                                              tmp_path: Path) -> None:
    engine = engine_with(home_dir, journal, workspace, private_tmp=True)
    result = shell(engine, f'echo made > made.txt; echo private > /tmp/private; touch "$ZAGENT_HOME/planted" '
                           f'{tmp_path}/outside /usr/zagent-planted')
    assert (workspace / "made.txt").read_text() == "made\n"
    assert "Read-only file system" in result.output and result.is_error
    assert not (home_dir / "planted").exists() and not Path("/usr/zagent-planted").exists()
    # /tmp is the call's own (private_tmp): what it wrote there never reached the host's
    assert not (tmp_path / "outside").exists() and not Path("/tmp/private").exists()


@needs_bwrap
def test_tmp_stays_writable_by_default(home_dir: Path, journal: Journal, workspace: Path, tmp_path: Path) -> None:
    engine = engine_with(home_dir, journal, workspace)
    result = shell(engine, f"echo kept > {tmp_path}/scratch.txt")
    assert not result.is_error, result.output
    assert (tmp_path / "scratch.txt").read_text() == "kept\n"


@needs_bwrap
def test_read_only_writes_only_the_calls_own_folder(home_dir: Path, journal: Journal, workspace: Path) -> None:
    engine = engine_with(home_dir, journal, workspace, mode="read-only")
    result = shell(engine, 'echo x > in-workspace.txt; echo report > "$ZAGENT_OUTPUT_DIR/report.txt" && echo wrote')
    assert "Read-only file system" in result.output and "wrote" in result.output
    assert not (workspace / "in-workspace.txt").exists()
    assert list(home_dir.glob("sessions/*/calls/*/output/report.txt"))


@needs_bwrap
def test_writable_paths_from_config_are_writable(home_dir: Path, journal: Journal, workspace: Path,
                                                 tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    engine = engine_with(home_dir, journal, workspace, writable=[str(shared)], private_tmp=True)
    result = shell(engine, f"echo shared > {shared}/note.txt")
    assert not result.is_error, result.output
    assert (shared / "note.txt").read_text() == "shared\n"


@needs_bwrap
def test_the_journal_config_and_other_sessions_folders_are_hidden(home_dir: Path, workspace: Path) -> None:
    (home_dir / "config.json").write_text(json.dumps({"model": {"base_url": "https://user:secret@example.com/v1"}}))
    with SQLiteJournal(home_dir / "journal.db") as journal:
        engine = Engine(Home(home_dir), journal, workspace=workspace)
        first = shell(engine, 'echo "first session\'s output" > "$ZAGENT_OUTPUT_DIR/result.txt"')
        assert not first.is_error, first.output
        (other,) = home_dir.glob("sessions/*/calls/*/output/result.txt")
        assert other.read_text() == "first session's output\n"
        probe = shell(engine, f"cat {other}; cat {home_dir}/journal.db {home_dir}/journal.db-wal {home_dir}/config.json; "
                              f"echo LISTED; ls -a {home_dir}; ls {home_dir}/sessions")
    assert "first session's output" not in probe.output and "secret" not in probe.output
    assert "SQLite format" not in probe.output
    assert f"cat: {other}: No such file or directory" in probe.output
    assert f"cat: {home_dir}/journal.db: No such file or directory" in probe.output
    first_session = other.parents[3].name
    listed = probe.output.split("LISTED\n")[1].split()
    assert first_session not in listed and listed[:3] == [".", "..", "sessions"]  # the home shows only the call's own


@needs_bwrap
def test_the_engines_processes_are_not_visible_inside(engine: Engine) -> None:
    result = shell(engine, 'for p in /proc/[0-9]*; do tr "\\0" " " < $p/cmdline; echo; done; echo "ppid=$PPID"')
    ours = Path("/proc/self/cmdline").read_bytes().replace(b"\0", b" ").decode()
    seen = result.output.splitlines()
    assert ours not in seen and len(seen) < 10  # bubblewrap, the shell, the loop: not the engine
    assert "ppid=1" in seen  # the namespace's init (bubblewrap), not zagent


# -- the network ----------------------------------------------------------------------------------

@pytest.fixture
def loopback_server() -> Iterator[str]:
    """An HTTP server on 127.0.0.1 that answers every GET with "hello from the host"."""
    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the standard library's name
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"hello from the host")

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def fetch(url: str) -> str:
    return (f"{PYTHON} -c 'import urllib.request; "
            f"print(urllib.request.urlopen(\"{url}\", timeout=5).read().decode())'")


@needs_bwrap
@pytest.mark.parametrize("network", [False, True])
def test_a_loopback_server_is_reachable_only_with_the_network(home_dir: Path, journal: Journal, workspace: Path,
                                                              loopback_server: str, network: bool) -> None:
    result = shell(engine_with(home_dir, journal, workspace, network=network), fetch(loopback_server))
    if network:
        assert result.output == "hello from the host", result.output
    else:
        assert result.is_error and "hello from the host" not in result.output
        assert "Connection refused" in result.output


@needs_bwrap
def test_a_folder_tool_runs_in_the_sandbox_its_manifest_asks_for(home_dir: Path, journal: Journal, workspace: Path,
                                                                 loopback_server: str) -> None:
    code = ("import os, urllib.request\n"
            "open('from-tool.txt', 'w').write('written')\n"
            f"print(urllib.request.urlopen({loopback_server!r}, timeout=5).read().decode())\n")
    python_tool(home_dir, "fetcher", code, sandbox={"mode": "workspace-write", "network": True})
    python_tool(home_dir, "reader", "open('from-reader.txt', 'w').write('written')", sandbox="read-only")
    with engine_with(home_dir, journal, workspace).start_session("test") as session:
        fetched = session.call("fetcher", {})
        read = session.call("reader", {})
    assert fetched.output.strip() == "hello from the host" and (workspace / "from-tool.txt").exists()
    assert read.is_error and "Read-only file system" in read.output and not (workspace / "from-reader.txt").exists()


@needs_bwrap
def test_with_tools_all_a_tool_asking_for_more_than_the_config_grants_is_refused(
        home_dir: Path, journal: Journal, workspace: Path) -> None:
    python_tool(home_dir, "plain", "import os\nopen('plain.txt', 'w').write('x')\nopen(os.environ['ZAGENT_HOME'] + '/x', 'w')")
    python_tool(home_dir, "greedy", "print('ran')", sandbox={"mode": "workspace-write", "network": True,
                                                             "writable": ["/srv"]})
    with engine_with(home_dir, journal, workspace, tools="all").start_session("test") as session:
        plain = session.call("plain", {})
        greedy = session.call("greedy", {})
    assert (workspace / "plain.txt").exists() and "Read-only file system" in plain.output
    assert greedy.is_error
    assert greedy.output == (
        'tools/greedy asks its sandbox for the network, writing to /srv, which config.json does not grant '
        '(sandbox.tools is "all"): add it to config.json\'s "sandbox" (network, writable, readable) or take it '
        'out of its "sandbox"')


@needs_bwrap
def test_an_mcp_server_that_asks_runs_in_the_sandbox(home_dir: Path, journal: Journal, workspace: Path,
                                                     tmp_path: Path) -> None:
    pytest.importorskip("mcp", reason="the MCP SDK is not installed: pip install -e '.[mcp]'")
    (tmp_path / "server.py").write_text(
        "import os\nfrom mcp.server.mcpserver import MCPServer\nserver = MCPServer('writer')\n\n"
        "@server.tool()\ndef write(name: str) -> str:\n    \"\"\"Write a file.\"\"\"\n"
        "    try:\n        open(name, 'w').write('x')\n    except OSError as exc:\n        return str(exc)\n"
        "    return 'written'\n\nserver.run()\n")
    servers = {"ro": {"command": [PYTHON, str(tmp_path / "server.py")], "sandbox": "read-only"},
               "rw": {"command": [PYTHON, str(tmp_path / "server.py")]},
               "greedy": {"command": [PYTHON, str(tmp_path / "server.py")],
                          "sandbox": {"mode": "workspace-write", "network": True}}}
    config = Config(mcp={"servers": servers}, sandbox=SandboxConfig(tools="all"))
    with Engine(Home(home_dir), journal, workspace=workspace, config=config) as engine:
        with engine.start_session("test") as session:
            refused = session.call("ro__write", {"name": "ro.txt"})
            written = session.call("rw__write", {"name": "rw.txt"})
        started = next(e.event for e in engine.journal.read(session.session_id))
    assert "Read-only file system" in refused.output and not (workspace / "ro.txt").exists()
    assert written.output == "written" and (workspace / "rw.txt").exists()
    assert any('MCP server "greedy" asks its sandbox for the network' in warning for warning in started.warnings)


# -- a call's processes die with it ---------------------------------------------------------------

@needs_bwrap
@pytest.mark.parametrize("mode", ["workspace-write", "off"])
def test_a_setsid_daemon_dies_when_its_call_ends(home_dir: Path, journal: Journal, workspace: Path, mode: str) -> None:
    result = shell(engine_with(home_dir, journal, workspace, mode=mode), f"{DAEMON} sleep 0.2; echo done")
    assert result.output == "done" and not result.is_error
    daemon = (workspace / "daemon.pid").read_text()
    wait_for(lambda: not running(daemon), f"the daemon ({daemon}) to die with its call")


@needs_bwrap
def test_a_setsid_daemon_dies_when_its_call_times_out(engine: Engine, workspace: Path) -> None:
    result = shell(engine, f"{DAEMON} echo started; sleep 300", timeout=1)
    assert result.timed_out and result.output.startswith("started\n[timed out after 1 s")
    daemon = (workspace / "daemon.pid").read_text()
    wait_for(lambda: not running(daemon), f"the daemon ({daemon}) to die with its call")


@needs_bwrap
def test_a_stopped_command_still_gets_its_grace(engine: Engine, workspace: Path) -> None:
    """The stop's SIGTERM reaches the command, not bubblewrap (whose end would SIGKILL it at once)."""
    result = shell(engine, "trap 'echo cleaned > cleaned.txt; exit 3' TERM; echo started; sleep 300 & wait",
                   timeout=1)
    assert result.timed_out
    assert (workspace / "cleaned.txt").read_text() == "cleaned\n"


@needs_bwrap
def test_a_command_killed_by_a_signal_is_said_so(engine: Engine) -> None:
    result = shell(engine, "echo before; kill -KILL $$")
    assert result.output == "before\n[killed by SIGKILL]" and result.exit_code is None


@needs_bwrap
def test_a_foreground_call_dies_with_a_killed_engine(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    pid = workspace / "daemon.pid"
    crashed_shell_session(tmp_path, {"command": f"{DAEMON} sleep 300"}, lambda: pid.exists() and pid.read_text())
    daemon = pid.read_text()
    wait_for(lambda: not running(daemon), f"the daemon ({daemon}) to die with the engine")


@needs_bwrap
def test_a_background_task_outlives_the_engine_and_dies_when_killed(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    pid = workspace / "daemon.pid"
    command = f"{DAEMON} echo up; while [ ! -f go ]; do sleep 0.05; done; echo finished"
    engine, session_id = crashed_shell_session(tmp_path, {"command": command, "run_in_background": True})
    wait_for(lambda: pid.exists() and pid.read_text(), "the task's daemon to start")
    daemon = pid.read_text()
    assert running(daemon)  # the engine is gone, the task and all it started run on under its supervisor
    with engine.resume(session_id) as session:
        assert session.state.tasks["1"].status == "running"
        (workspace / "go").touch()
        done = session.call("wait_task", {"task_id": 1, "timeout": 10})
        assert done.output.startswith("#1 shell: exited") and done.output.endswith("up\nfinished"), done.output
        wait_for(lambda: not running(daemon), "the daemon to end with its task")
        session.call("shell", {"command": f"{DAEMON} while true; do sleep 0.05; done", "run_in_background": True})
        wait_for(lambda: pid.read_text() != daemon, "the second task's daemon to start")
        second = pid.read_text()
        killed = session.call("shell_kill", {"task_id": 2})
        assert killed.output.startswith("#2 shell: killed")
        wait_for(lambda: not running(second), "the killed task's daemon to die with it")


# -- no sandbox -----------------------------------------------------------------------------------

def without_bwrap(tmp_path: Path) -> dict[str, str]:
    """An environment whose PATH has no bubblewrap (nor anything else: the tests run /bin/sh's builtins)."""
    empty = tmp_path / "bin"
    empty.mkdir(exist_ok=True)
    return {**os.environ, "PATH": str(empty)}


def test_without_bubblewrap_a_session_says_so_once_and_runs_as_before(home_dir: Path, workspace: Path,
                                                                      tmp_path: Path) -> None:
    env = without_bwrap(tmp_path)
    done = zagent(home_dir, workspace, "tools", "run", "shell", "--json", "--args",
                  json.dumps({"command": "echo ran > ran.txt"}), env=env)
    assert done.returncode == 0, done.stderr
    assert (workspace / "ran.txt").read_text() == "ran\n"
    with SQLiteJournal(home_dir / "journal.db") as journal:
        started = next(iter(journal.read(json.loads(done.stdout)["session_id"]))).event
    said = [warning for warning in started.warnings if warning.startswith("sandbox: ")]
    assert said == ["sandbox: not active: bubblewrap (bwrap) is not installed (Debian, Ubuntu: apt-get install "
                    "bubblewrap). Shell commands and tools run unconfined, with the user's rights, and what a call "
                    "leaves running outside its process group is found by its environment only"]


def test_doctor_says_whether_the_sandbox_is_active_and_why_not(home_dir: Path, workspace: Path,
                                                              tmp_path: Path) -> None:
    missing = zagent(home_dir, workspace, "doctor", env=without_bwrap(tmp_path))
    assert missing.returncode == 0, missing.stdout  # a warning: the exit code is unchanged
    assert "  warning: sandbox: not active: bubblewrap (bwrap) is not installed" in missing.stdout
    assert "sandbox: not active (bubblewrap (bwrap) is not installed" in missing.stdout
    report = json.loads(zagent(home_dir, workspace, "doctor", "--json", env=without_bwrap(tmp_path)).stdout)
    assert report["ok"] and report["sandbox"]["active"] is False
    assert report["sandbox"]["why_not"].startswith("bubblewrap (bwrap) is not installed")
    if shutil.which("bwrap") is not None and sandbox.unavailable() is None:
        present = zagent(home_dir, workspace, "doctor")
        assert present.returncode == 0, present.stdout
        assert ("sandbox: active (bubblewrap): shell commands (and tools whose manifest asks) run workspace-write, "
                "no network") in present.stdout
        assert "warning: sandbox" not in present.stdout


@pytest.fixture(autouse=True)
def _no_daemon_left(workspace: Path) -> Iterator[None]:
    """Whatever a test asserts, no daemon it started outlives it."""
    yield
    for pid_file in workspace.parent.glob("*/daemon.pid"):
        with contextlib.suppress(ValueError, OSError):
            found = host_pid(pid_file.read_text())
            if found is not None:
                os.kill(found, signal.SIGKILL)
