"""``replay --tools rerun`` copies the workspace safely, into the home, and cleans up after kills.

A session is recorded with a tool that lists its workspace; the replay reruns it in the
copy, so what the tool sees is what the copy holds. FIFOs, links out of the workspace and
sparse giants are real files in a real folder; the killed replay is a real process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import forked
from conftest import PYTHON, python_tool

from zagent_core import Engine, Home
from zagent_core.agent.loop import Agent
from zagent_core.agent.models import ModelReply, ToolCallRequest
from zagent_core.agent.models.scripted import ScriptedModel
from zagent_core.history.replay import replay
from zagent_core.history.replay_report import ReplayReport
from zagent_core.history.replay_workspace import MAX_WORKSPACE_BYTES, replay_folder
from zagent_core.tools.processes import ProcessIdentity
from zagent_store import SQLiteJournal

#: Lists the workspace without following links: each entry's kind, and a file's content.
LOOK = """
import os
from pathlib import Path
for root, dirs, files in os.walk("."):
    dirs.sort()
    for name in sorted(dirs + files):
        path = Path(root, name)
        if path.is_symlink():
            kind = "link to " + os.readlink(path) + (" (reads " + path.read_text() + ")" if path.is_file() else "")
        elif path.is_dir():
            kind = "folder"
        elif path.is_file():
            kind = "file " + (path.read_text() if path.stat().st_size < 100 else str(path.stat().st_size))
        else:
            kind = "special"
        print(path, kind)
"""


def record(tmp_path: Path, workspace: Path) -> tuple[Home, str]:
    home = Home(tmp_path / "home")
    python_tool(home.root, "look", LOOK, replay="safe")
    model = ScriptedModel([
        ModelReply(tool_calls=[ToolCallRequest(id="c1", name="look", arguments={})], stop_reason="tool_use"),
        ModelReply(text="seen"),
    ])
    with SQLiteJournal(home.journal_path) as journal:
        session = Engine(home, journal, workspace=workspace).start_session("run")
        Agent(session, model).run("look")
    return home, session.session_id


def rerun(home: Home, session_id: str, tmp_path: Path) -> ReplayReport:
    with SQLiteJournal(home.journal_path) as journal, SQLiteJournal(tmp_path / "replay.db") as into:
        return replay(journal, session_id, home, into, tools="rerun")


def test_a_fifo_and_links_out_of_the_workspace_are_left_out_with_a_note(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "sub").mkdir(parents=True)
    (workspace / "sub" / "data.txt").write_text("mine")
    os.mkfifo(workspace / "pipe")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("theirs")
    (workspace / "out").symlink_to(outside)
    (workspace / "usr").symlink_to("/usr")
    (workspace / "data").symlink_to("sub/data.txt")  # inside: copied as a link
    (workspace / "absolute").symlink_to(workspace / "sub")  # inside too, though absolute
    home, session_id = record(tmp_path, workspace)
    report = rerun(home, session_id, tmp_path)
    seen = report.actual[0].output.splitlines()
    assert "data link to sub/data.txt (reads mine)" in seen
    assert "absolute link to sub" in seen
    assert "sub/data.txt file mine" in seen
    assert not [line for line in seen if line.startswith(("pipe", "out", "usr"))], seen
    (note,) = report.notes
    assert note.startswith(f"left out of the copy of the workspace {workspace}: ")
    assert "pipe (not a file, folder or link: a FIFO, socket or device)" in note
    assert f"out (a link to {outside}, outside the workspace)" in note and "usr (a link to /usr, " in note


def test_size_is_counted_on_what_is_copied(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    big = tmp_path / "big"
    big.mkdir()
    with open(big / "huge", "wb") as handle:  # sparse: no disk used
        handle.truncate(MAX_WORKSPACE_BYTES + 1)
    (workspace / "big").symlink_to(big)  # the link is small; what it leads to is not copied
    (workspace / "small.txt").write_text("ok")
    home, session_id = record(tmp_path, workspace)
    report = rerun(home, session_id, tmp_path / "1")
    assert "small.txt file ok" in report.actual[0].output.splitlines()
    (workspace / "huge").hardlink_to(big / "huge")  # a real file of the workspace now
    report = rerun(home, session_id, tmp_path / "2")
    assert report.notes == [f"the recorded workspace {workspace} is over {MAX_WORKSPACE_BYTES} bytes; not copied"]
    assert report.actual[0].output == "(the tool printed nothing)"  # an empty workspace


def test_a_home_inside_the_workspace_is_not_copied_and_does_not_stop_the_copy(tmp_path: Path) -> None:
    workspace = tmp_path
    (workspace / "notes.txt").write_text("n")
    home, session_id = record(tmp_path, workspace)
    report = rerun(home, session_id, tmp_path / "r")
    seen = report.actual[0].output.splitlines()
    assert "notes.txt file n" in seen and not [line for line in seen if line.startswith("home")], seen


def _replay_folders(home: Home) -> list[Path]:
    return sorted(home.tmp_dir.glob("replay-*")) if home.tmp_dir.exists() else []


def test_a_killed_replay_leaves_a_folder_in_the_home_that_the_next_replay_removes(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    pid_file = tmp_path / "tool.pid"
    home, session_id = record(tmp_path, workspace)
    # The recording ran quickly; make the rerun block, so the replay can be killed mid-way.
    script = home.tools_dir / "look" / "main.py"
    script.write_text(f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(120)\n")
    before = set(Path("/tmp").glob("zagent-replay-*"))
    proc = forked.Popen([PYTHON, "-m", "zagent_cli", "--home", str(home.root), "replay", session_id,
                         "--tools", "rerun"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    tool = int(pid_file.read_text())
    proc.kill()
    proc.wait()
    os.kill(tool, signal.SIGKILL)
    (left,) = _replay_folders(home)
    assert (left / "replay-1" / "workspace").is_dir()
    assert set(Path("/tmp").glob("zagent-replay-*")) == before

    # A replay still running keeps its folder: this process stands for it.
    me = ProcessIdentity.of(os.getpid())
    assert me is not None
    alive = home.tmp_dir / f"replay-{me.pid}-{me.start_ticks}-live"
    alive.mkdir()
    script.write_text("print('done')\n")
    done = forked.run([PYTHON, "-m", "zagent_cli", "--home", str(home.root), "replay", session_id,
                       "--tools", "rerun"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr  # the tool changed: a divergence
    assert _replay_folders(home) == [alive]


def test_a_replay_folder_is_removed_when_done_even_if_a_tool_made_it_read_only(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    with replay_folder(home) as folder:
        (folder / "locked" / "deep").mkdir(parents=True)
        (folder / "locked" / "deep" / "f").write_text("x")
        (folder / "locked").chmod(0o500)
        assert folder.parent == home.tmp_dir
    assert _replay_folders(home) == []


def test_a_replay_report_names_at_most_ten_things_left_out(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    for number in range(12):
        os.mkfifo(workspace / f"pipe{number:02}")
    home, session_id = record(tmp_path, workspace)
    (note,) = rerun(home, session_id, tmp_path).notes
    assert "pipe09" in note and "pipe10" not in note and note.endswith(" and 2 more")
    assert json.dumps(note)  # plain text, for --json too


def test_a_git_repository_is_copied_with_the_workspace_and_a_repository_outside_it_is_not(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / ".git").mkdir(parents=True)
    (workspace / ".git" / "HEAD").write_text("ref: main")
    (workspace / "module").mkdir()
    (workspace / "module" / ".git").write_text("gitdir: ../.git/modules/module\n")  # a submodule's: inside
    (workspace / "checkout").mkdir()
    (workspace / "checkout" / ".git").write_text(f"gitdir: {tmp_path / 'main' / '.git' / 'worktrees' / 'x'}\n")
    home, session_id = record(tmp_path, workspace)
    report = rerun(home, session_id, tmp_path / "1")
    seen = report.actual[0].output.splitlines()
    assert ".git/HEAD file ref: main" in seen and "module/.git file gitdir: ../.git/modules/module" in seen
    assert not [line for line in seen if line.startswith("checkout/.git")], seen
    (note,) = report.notes  # the rerun's git would write to another repository through it
    assert f"checkout/.git (names the repository {tmp_path / 'main' / '.git' / 'worktrees' / 'x'}, outside " in note


def test_a_repository_that_would_take_the_copy_past_its_bound_is_left_out_and_the_rest_copied(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / ".git" / "objects").mkdir(parents=True)
    with open(workspace / ".git" / "objects" / "pack", "wb") as handle:  # sparse: no disk used
        handle.truncate(MAX_WORKSPACE_BYTES)
    (workspace / "small.txt").write_text("ok")
    home, session_id = record(tmp_path, workspace)
    report = rerun(home, session_id, tmp_path / "r")
    seen = report.actual[0].output.splitlines()
    assert "small.txt file ok" in seen and not [line for line in seen if line.startswith(".git")], seen
    assert report.notes == [f"left out of the copy of the workspace {workspace}: .git (the repository would take "
                            f"the copy past {MAX_WORKSPACE_BYTES} bytes: a rerun's git sees none)"]


#: An MCP server that serves only in a git repository, as mcp-server-git --repository . does.
GIT_SERVER = """\
import pathlib, sys
if not pathlib.Path(".git").is_dir():
    sys.exit("fatal: not a git repository (or any of the parent directories): .git")
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("git")

@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def head() -> str:
    "What HEAD names."
    return pathlib.Path(".git/HEAD").read_text()

server.run()
"""


def test_an_mcp_server_of_the_workspaces_repository_runs_in_a_replay_and_one_that_cannot_start_is_named(
        tmp_path: Path) -> None:
    import pytest

    pytest.importorskip("mcp", reason="the MCP SDK is not installed: pip install -e '.[test]'")
    home, workspace = tmp_path / "home", tmp_path / "ws"
    (workspace / ".git").mkdir(parents=True)
    (workspace / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (tmp_path / "git_server.py").write_text(GIT_SERVER)
    (home / "tools").mkdir(parents=True)
    (home / "config.json").write_text(json.dumps({"mcp": {"servers": {
        "git": {"command": [PYTHON, str(tmp_path / "git_server.py")]}}}}))
    (tmp_path / "script.json").write_text(json.dumps([{"tool_calls": [{"name": "git__head", "arguments": {}}]},
                                                      {"text": "on main"}]))

    def zagent(*args: str) -> subprocess.CompletedProcess[str]:
        return forked.run([PYTHON, "-m", "zagent_cli", "--home", str(home), *args], capture_output=True,
                          text=True, cwd=workspace, stdin=subprocess.DEVNULL, timeout=120)

    ran = zagent("run", "--model", f"scripted:{tmp_path / 'script.json'}", "which branch?")
    assert ran.returncode == 0 and "ref: refs/heads/main" in ran.stdout, ran.stdout + ran.stderr
    with SQLiteJournal(home / "journal.db") as journal:
        (summary,) = journal.sessions()
    for tools in ("rerun", "recorded"):  # the server starts in the copy of the workspace, which has .git
        replayed = zagent("replay", summary.session_id, "--tools", tools)
        assert replayed.returncode == 0 and "matches" in replayed.stdout, replayed.stdout + replayed.stderr
    (workspace / ".git" / "HEAD").unlink()
    (workspace / ".git").rmdir()
    failed = zagent("replay", summary.session_id, "--tools", "rerun")
    assert failed.returncode == 1 and "DIVERGES" in failed.stdout, failed.stdout + failed.stderr
    assert ('note: MCP server "git" did not start in the replay, so its tools were not offered: it exited (or '
            "closed its stdout) before it answered; its stderr ended with: fatal: not a git repository") \
        in failed.stdout, failed.stdout
