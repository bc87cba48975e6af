"""``zagent tools run`` and ``tools list`` as people use them (issue 26): a call starts only
the MCP server it needs, the list starts them all at once and says so on a terminal, an
unknown name is matched against every tool, a call that waits on a person says so with
its own exit code, and a Ctrl-C at any moment of the start is one line and exit 130.

The MCP servers here are stand-ins: programs that say they started (a file each) and then
exit with a sentence on stderr, as a server that cannot start does. Real processes, the
real CLI, a real journal.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
import forked
from conftest import NAMESPACED_PID, PYTHON, python_tool, read_terminal, running, wait_for

from zagent_store import SQLiteJournal

pytest.importorskip("mcp", reason="the MCP SDK is not installed: pip install -e '.[test]'")

#: A server that marks its start, waits (at most 30 s) until the servers named after it have
#: started too, then exits saying which of them it saw: started one after another, it would
#: see none of the later ones.
STAND_IN = """\
import pathlib, sys, time
name, folder, others = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3:]
(folder / f"started-{name}").touch()
deadline = time.monotonic() + 30
while time.monotonic() < deadline and not all((folder / f"started-{o}").exists() for o in others):
    time.sleep(0.01)
seen = [o for o in others if (folder / f"started-{o}").exists()]
sys.exit(f"{name} cannot serve here; it saw {' and '.join(seen) or 'no other server'} start")
"""


def home_with_servers(tmp_path: Path, servers: dict[str, list[str]]) -> Path:
    """A home whose config.json names a stand-in server per key, each waiting for the ones listed."""
    home = tmp_path / "home"
    (home / "tools").mkdir(parents=True)
    (tmp_path / "stand_in.py").write_text(STAND_IN)
    (home / "config.json").write_text(json.dumps({"mcp": {"servers": {
        name: {"command": [PYTHON, str(tmp_path / "stand_in.py"), name, str(tmp_path), *others]}
        for name, others in servers.items()}}}))
    return home


def zagent(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return forked.run([PYTHON, "-m", "zagent_cli", "--home", str(home), *args], capture_output=True, text=True,
                      stdin=subprocess.DEVNULL, cwd=home.parent, timeout=120)


def started(tmp_path: Path) -> list[str]:
    return sorted(path.name.removeprefix("started-") for path in tmp_path.glob("started-*"))


def test_tools_run_starts_only_the_mcp_server_its_tool_is_of(tmp_path: Path) -> None:
    home = home_with_servers(tmp_path, {"a": [], "b": [], "c": []})
    (tmp_path / "notes.txt").write_text("hello\n")
    built_in = zagent(home, "tools", "run", "read_file", "--args", '{"path": "notes.txt"}')
    assert built_in.returncode == 0 and "hello" in built_in.stdout, built_in.stderr
    assert started(tmp_path) == [] and "MCP server" not in built_in.stderr
    of_b = zagent(home, "tools", "run", "b__anything")
    assert started(tmp_path) == ["b"]
    # It could not start: the error says so, with what it wrote on stderr.
    assert of_b.returncode == 2 and 'unknown tool "b__anything"; MCP server "b" not started' in of_b.stderr
    assert "its stderr ended with: b cannot serve here; it saw no other server start" in of_b.stderr


def test_an_unknown_tool_name_is_matched_against_the_built_ins_and_the_mcp_servers(tmp_path: Path) -> None:
    home = home_with_servers(tmp_path, {"fs": []})
    python_tool(home, "greet", "print('hi')")
    typo = zagent(home, "tools", "run", "reed_file")
    assert typo.returncode == 2 and 'unknown tool "reed_file" (did you mean "read_file"' in typo.stderr
    assert "loaded tools: greet, and 15 built-ins (zagent tools list shows them)" in typo.stderr
    assert "MCP servers' tools are named SERVER__TOOL (servers: fs)" in typo.stderr
    server = zagent(home, "tools", "run", "fss__read_file")
    assert server.returncode == 2 and 'no MCP server "fss" in config.json (did you mean "fs"?)' in server.stderr
    assert started(tmp_path) == []  # neither name is of a configured server's tools


def test_tools_list_starts_the_mcp_servers_together_and_prints_no_progress_when_piped(tmp_path: Path) -> None:
    home = home_with_servers(tmp_path, {"a": ["b", "c"], "b": ["a", "c"], "c": ["a", "b"]})
    listed = zagent(home, "tools", "list")
    assert listed.returncode == 0, listed.stderr
    for name, others in (("a", "b and c"), ("b", "a and c"), ("c", "a and b")):
        assert f"{name} cannot serve here; it saw {others} start" in listed.stdout  # each waited for the others
    assert "starting MCP servers" not in listed.stdout + listed.stderr and "\x1b" not in listed.stderr


def test_tools_list_on_a_terminal_shows_which_mcp_servers_are_still_starting(tmp_path: Path) -> None:
    import os
    import pty

    home = home_with_servers(tmp_path, {"a": ["b"], "b": ["a"]})
    controller, terminal = pty.openpty()
    listing = forked.Popen([PYTHON, "-m", "zagent_cli", "--home", str(home), "tools", "list"], stdin=terminal,
                           stdout=terminal, stderr=terminal, cwd=tmp_path)
    os.close(terminal)
    shown = read_terminal(controller).decode()
    assert listing.wait(timeout=60) == 0, shown
    assert "\r\x1b[K[starting MCP servers: 0 of 2 done; waiting for a, b]" in shown
    assert "[starting MCP servers: 2 of 2 done]\r\x1b[K" in shown  # erased before the list is printed
    assert shown.index("\r\x1b[K", shown.index("2 of 2 done")) < shown.index("[built-in]")


def test_tools_run_of_a_call_that_waits_on_a_person_says_so_and_exits_3(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    asked = zagent(home, "tools", "run", "ask_user", "--json", "--args", '{"question": "Ship it?"}')
    assert asked.returncode == 3, asked.stderr
    body = json.loads(asked.stdout)
    assert body["waiting"] == "user" and body["is_error"] is False
    assert f"zagent answer {body['session_id']}" in body["output"]
    done = zagent(home, "tools", "run", "read_file", "--json", "--args", '{"path": "nowhere.txt"}')
    assert done.returncode == 1 and json.loads(done.stdout)["waiting"] is None


@pytest.mark.parametrize("delay", [0.0, 0.05, 0.1, 0.2, 0.3, 0.5])
def test_ctrl_c_in_the_first_half_second_of_tools_run_is_one_line_and_exit_130(tmp_path: Path,
                                                                               delay: float) -> None:
    home = tmp_path / "home"
    # The pid as the tool sees it in its PID namespace (a sandbox's), with that namespace: running() finds it.
    python_tool(home, "sleepy", f"import os, pathlib, time\npathlib.Path({str(tmp_path / 'pid')!r}).write_text("
                                f"({NAMESPACED_PID})(os.getpid()))\ntime.sleep(60)")
    # -X importtime says (on stderr) when each import is done: the delay counts from the moment
    # zagent loads its CLI (click is its first import), before which Python's own start-up runs
    # and no program can catch a Ctrl-C.
    run = subprocess.Popen([PYTHON, "-X", "importtime", "-m", "zagent_cli", "--home", str(home), "tools", "run",
                            "sleepy"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    assert run.stderr is not None
    for line in run.stderr:
        if line.startswith("import time:") and line.split("|")[-1].strip() == "click":
            break
    time.sleep(delay)  # the moment of the Ctrl-C is what is tested: loading, starting, or the call
    run.send_signal(signal.SIGINT)
    _, rest = run.communicate(timeout=60)
    err = "".join(line for line in rest.splitlines(keepends=True) if not line.startswith("import time:"))
    assert run.returncode == 130, err
    assert err.startswith("[stopped") and len(err.splitlines()) == 1, err  # no traceback, no KeyboardInterrupt
    pid = tmp_path / "pid"
    assert not pid.exists() or not running(pid.read_text()), "the tool was left running"
    if (home / "journal.db").exists():
        with SQLiteJournal(home / "journal.db") as journal:
            assert all(summary.ended for summary in journal.sessions()), [
                (e.event.type, getattr(e.event, "status", None)) for s in journal.sessions() for e in journal.read(s.session_id)]


def test_ctrl_c_while_the_mcp_server_of_tools_run_starts_is_one_line_and_exit_130(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "tools").mkdir(parents=True)
    mute = "import pathlib, sys, time\npathlib.Path(sys.argv[1]).touch()\ntime.sleep(60)\n"  # never answers
    (tmp_path / "mute.py").write_text(mute)
    (home / "config.json").write_text(json.dumps({"mcp": {"servers": {
        "mute": {"command": [PYTHON, str(tmp_path / "mute.py"), str(tmp_path / "started")]}}}}))
    run = forked.Popen([PYTHON, "-m", "zagent_cli", "--home", str(home), "tools", "run", "mute__anything"],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       cwd=tmp_path)
    wait_for(lambda: (tmp_path / "started").exists() or run.poll() is not None, "the server to start", 60)
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=60)
    assert run.returncode == 130 and err == "[stopped]\n", err  # nothing logged of the start it stopped
