"""The shell built-ins (shell, shell_kill, wait_task) and record_artifact, through a real engine.

Real processes, a real SQLite journal, real SIGKILLs; the model is the scripted one where
the scheduling of a reply is the point.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import NAMESPACED, PYTHON, crashed_shell_session, running, wait_for
from hypothesis import example, given, settings
from hypothesis import strategies as st

from zagent_core import Engine, Home

from zagent_core.tools import sandbox, tasks
from zagent_core.agent.conversation import conversation
from zagent_core.agent.loop import Agent
from zagent_core.builtins.shell import shown_output
from zagent_core.builtins.shell_parse import explores, is_read_only
from zagent_core.builtins.wait_task import TIMED_OUT
from zagent_core.config import Config
from zagent_core.journal.events import ArtifactRecorded, ToolCallFinished, ToolCallInterrupted, ToolCallStarted
from zagent_core.agent.models import ModelReply, ToolCallRequest
from zagent_core.agent.models.scripted import ScriptedModel
from zagent_core.tools.runner import ProcessOutcome
from zagent_store import SQLiteJournal


def events(engine: Engine, session_id: str, kind: type) -> list[Any]:
    return [stored.event for stored in engine.journal.read(session_id) if isinstance(stored.event, kind)]


def read_pid(path: Path) -> str:
    """A pid a command wrote down (``echo "$NAMESPACED$!"``), as ``conftest.running`` takes it."""
    wait_for(lambda: path.exists() and path.read_text().strip(), f"{path.name} to be written", seconds=10)
    return path.read_text().strip()


# -- foreground ------------------------------------------------------------------------------

def test_a_command_runs_in_the_workspace_with_stdout_and_stderr_together(engine: Engine, workspace: Path) -> None:
    session = engine.start_session("test")
    result = session.call("shell", {"command": "pwd; echo out; echo err >&2", "description": "where am I"})
    assert result.output == f"{workspace}\nout\nerr"
    assert not result.is_error and result.exit_code == 0


def test_a_non_zero_exit_is_an_error_that_says_the_code(engine: Engine) -> None:
    session = engine.start_session("test")
    result = session.call("shell", {"command": "echo failing; exit 2"})
    assert result.is_error and result.exit_code == 2
    assert result.output == "failing\n[exit code 2]"
    assert session.call("shell", {"command": "true"}).output == "(no output)"


def test_a_timeout_kills_the_command_and_everything_it_started(engine: Engine, workspace: Path) -> None:
    session = engine.start_session("test")
    command = (f'sleep 300 & echo "{NAMESPACED}$!" > child.pid; setsid sleep 300 & echo "{NAMESPACED}$!" > escaped.pid; '
               "echo started; wait")
    result = session.call("shell", {"command": command, "timeout": 1})
    assert result.is_error and result.timed_out
    assert result.output.startswith("started\n[timed out after 1 s: the tool and its child processes were stopped")
    for name in ("child.pid", "escaped.pid"):
        pid = (workspace / name).read_text().strip()
        wait_for(lambda pid=pid: not running(pid), f"{name} ({pid}) to be gone", seconds=5)


def test_a_command_with_a_nul_character_is_refused_saying_so(engine: Engine) -> None:
    session = engine.start_session("test")
    result = session.call("shell", {"command": "echo a\x00b"})
    assert result.is_error and result.output.startswith("the command contains a NUL character")


def test_a_background_command_with_a_nul_character_is_refused_without_taking_a_task_number(engine: Engine) -> None:
    session = engine.start_session("test")
    refused = session.call("shell", {"command": "sleep 1\x00", "run_in_background": True})
    assert refused.is_error and refused.output.startswith("the command contains a NUL character")
    assert session.state.tasks == {}
    assert [e.task_id for e in events(engine, session.session_id, ToolCallStarted)] == [None]
    started = session.call("shell", {"command": "true", "run_in_background": True})
    assert started.output.startswith("started as task #1;")
    assert not session.call("wait_task", {"task_id": 1, "timeout": 10}).is_error


def test_a_workspace_that_is_gone_is_said_not_crashed_on(engine: Engine, workspace: Path) -> None:
    session = engine.start_session("test")
    workspace.rmdir()
    result = session.call("shell", {"command": "ls"})
    assert (result.output, result.is_error) == (
        f"could not start /bin/sh: its working folder {workspace} does not exist", True)


def test_a_call_that_asks_too_long_a_timeout_is_refused_saying_the_limit(engine: Engine) -> None:
    session = engine.start_session("test")
    result = session.call("shell", {"command": "true", "timeout": 99999})
    assert result.is_error and "3600" in result.output


# -- what the model is shown -----------------------------------------------------------------

def test_a_long_output_keeps_its_tail_behind_a_marker_and_all_of_it_in_a_file(engine: Engine) -> None:
    session = engine.start_session("test")
    result = session.call("shell", {"command": "seq 1 20000; echo the-end"})
    lines = result.output.splitlines()
    assert lines[0].startswith("…(") and " bytes truncated from head)… [full output: " in lines[0]
    assert lines[1].isdigit() and lines[-1] == "the-end"  # cut at a line start
    full = Path(result.full_output_path or "")
    assert full.name == "full_output.txt" and str(full) in lines[0]
    assert full.read_text() == "".join(f"{n}\n" for n in range(1, 20001)) + "the-end\n"
    dropped = int(lines[0][2:].split(" ")[0])
    assert dropped == result.truncated_bytes == full.stat().st_size - len("\n".join(lines[1:]) + "\n")
    assert len(result.output.encode()) <= 32 * 1024 + 200


def test_an_exploring_command_keeps_its_head_and_its_tail(engine: Engine, workspace: Path) -> None:
    (workspace / "big.txt").write_text("".join(f"line {n}\n" for n in range(1, 20001)))
    session = engine.start_session("test")
    result = session.call("shell", {"command": "cat big.txt"})
    lines = result.output.splitlines()
    assert lines[0] == "line 1" and lines[-1] == "line 20000"
    (marker,) = [line for line in lines if line.startswith("…(")]
    assert " bytes truncated from middle)… [full output: " in marker
    kept = [line for line in lines if line.startswith("line ")]
    numbers = [int(line.split()[1]) for line in kept]
    assert numbers == sorted(numbers) and all(b == a + 1 for a, b in zip(numbers, numbers[1:]) if b - a < 100)
    assert Path(result.full_output_path or "").read_text() == (workspace / "big.txt").read_text()
    # the same bytes through a command that does more than read: the tail only
    other = session.call("shell", {"command": "cat big.txt; true"})
    assert other.output.startswith("…(") and "truncated from head" in other.output


def test_output_under_the_cap_is_whole_and_keeps_no_file(engine: Engine) -> None:
    session = engine.start_session("test")
    result = session.call("shell", {"command": "seq 1 1000"})
    assert result.output.splitlines() == [str(n) for n in range(1, 1001)]
    assert result.full_output_path is None and result.truncated_bytes == 0


# -- the read-only reading -------------------------------------------------------------------

READ_ONLY = [
    "ls -la", "cat a.txt | grep -n x", "git rev-parse --short HEAD", "git ls-tree -r HEAD", "sort -u --reverse a",
    "tree -L 2 -a", "file -b a.txt", "rg --pre-glob '*.gz' x", "git --no-pager cat-file -p HEAD", "git show-ref",
    "sed -n 1,20p f.py", "sed -n '/start/,/end/p' f", "head -n 5 a; tail -n 5 b", "ls 2>/dev/null",
    "grep -rn TODO src >/dev/null 2>&1", "find . -name '*.py' -type f", "cd src && rg -n 'def main'",
    "grep -rn TODO --include=*.py .", "wc -l < a.txt", "cat 'a b.txt' \"c d.txt\"", "echo '$HOME `x`'",
    "ls # a comment; rm -rf x", "sort a | uniq -c", "git branch -a", "jq .name package.json",
]
WRITES = [
    "echo hi > f", "echo hi >> f", "ls >| f", "ls 2> err.txt", "cat a >&/tmp/x", "ls &> out", "rm -rf x",
    "ls; rm x", "ls && touch x", "ls || mkdir x", "ls | tee x", "ls | sh", "ls\nrm x", "cat $(which x)",
    "cat `which x`", 'cat "$(which x)"', "echo $HOME", "ls &", "(ls)", "{ ls; }", "cat <<EOF\nx\nEOF",
    "cat <<< x", "ls <> f", "find . -delete", "find . -exec rm {} +", "find . -execdir rm {} ;",
    "find . -fprint out", "find *", "sed -i s/a/b/ f", "sed -n 1w/tmp/x f", "sed -e 's/a/b/w out' f",
    "sed -f script f", "sed --in-place=.bak s/a/b/ f", "sort -o out in", "sort -uo out in",
    "sort --output=out in", "git diff --output=x", "git log --output x", "git -c core.pager=x log",
    "git commit -m x", "git push", "git branch new", "git tag v1", "git grep -Ovim x", "rg --pre ./x foo",
    "rg --pre=./x foo", "rg --hostname-bin ./x foo", "rg foo *", "A=1 ls", "env ls", "xargs rm < list", "uniq a b", "tree -o out",
    "python3 -c 'print(1)'", "./cat a", "/bin/rm x", "cp a b", "mv a b", "ls | xargs rm", "cat a | sh -c x",
    "tar -xf a.tar", "curl -o x http://h",
    # GNU getopt and git take an unambiguous abbreviation of a long option for the whole of it.
    "sort --out=sorted.txt in.txt", "sort --o sorted.txt in.txt", "sort --compress=gzip in",
    "git grep --open='rm -f' a", "git grep --open-files=vim a", "git grep --o=vim a", "git grep -iOvim a",
    "git log --out=x", "git diff --o x", "git show --outp=x HEAD", "git --no-pager log --ou x",
    "file --comp -m mymagic", "file --compile -m mymagic", "file -C -m mymagic", "file -bC -m mymagic",
    "tree -R -H . -L 1", "tree -H .", "tree -aR", "ls 'unterminated", "",
]


#: git readers a repository's config can make run a program (core.fsmonitor, diff.external, a textconv or
#: filter driver, gpg.program): they run alone.
GIT_RUNS_CONFIGURED = [
    "git status", "git diff", "git --no-pager diff HEAD~1", "git log --oneline -5", "git show HEAD",
    "git grep -n --heading x", "git blame a.txt", "git ls-files -m", "git -C sub status --short",
    "git rev-list --format=%G? HEAD", "git rev-list --pre=x HEAD", "git describe --dirty",
    "git cat-file --textconv HEAD:a.txt", "git cat-file --filters HEAD:a.txt", "ls && git status",
]


@pytest.mark.parametrize("command", READ_ONLY)
def test_commands_that_only_read_may_run_beside_others(command: str) -> None:
    assert is_read_only(command)


@pytest.mark.parametrize("command", WRITES + GIT_RUNS_CONFIGURED)
def test_every_form_that_may_write_or_run_anything_is_a_barrier(command: str) -> None:
    assert not is_read_only(command)


def test_git_status_and_diff_run_what_the_repositorys_config_names_so_they_run_alone(engine: Engine,
                                                                                    workspace: Path) -> None:
    # Any process of the workspace may write .git/config: these hooks are its to choose.
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    (workspace / "a.txt").write_text("one\n")
    subprocess.run(["git", "-C", str(workspace), "add", "a.txt"], check=True)
    (workspace / "a.txt").write_text("two\n")
    hooks = {"core.fsmonitor": workspace / "fsmonitor-ran", "diff.external": workspace / "external-diff-ran"}
    for key, marker in hooks.items():
        script = workspace / f"{key}.sh"
        script.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
        script.chmod(0o755)
        subprocess.run(["git", "-C", str(workspace), "config", key, str(script)], check=True)
    session = engine.start_session("test")
    shell = engine.builtins["shell"]
    for command, marker in (("git status", hooks["core.fsmonitor"]), ("git diff", hooks["diff.external"])):
        assert not shell.is_concurrency_safe({"command": command})
        assert not session.concurrency_safe("shell", {"command": command})
        session.call("shell", {"command": command})
        assert marker.exists(), f"{command} ran no program: the test proves nothing"
        marker.unlink()
    assert shell.is_concurrency_safe({"command": "git rev-parse --show-toplevel"})
    assert explores("git diff") and explores("git log -p")


_SAFE_WORDS = st.sampled_from(["ls", "cat a", "grep -n x f", "git rev-parse HEAD", "head -5 f", "wc -l f"])
_JOINS = st.sampled_from([" | ", " && ", " || ", "; ", "\n"])


@settings(max_examples=300, deadline=None)
@given(st.lists(_SAFE_WORDS, min_size=1, max_size=4), _JOINS, st.sampled_from(WRITES[:-1]),
       st.integers(min_value=0, max_value=4))
def test_a_writer_anywhere_in_a_chain_of_readers_makes_it_a_barrier(readers: list[str], join: str, writer: str,
                                                                   at: int) -> None:
    assert is_read_only(join.join(readers))
    parts = list(readers)
    parts.insert(min(at, len(parts)), writer)
    assert not is_read_only(join.join(parts))


def test_only_reading_explorers_keep_their_head() -> None:
    assert explores("cat a") and explores("git log -p") and explores("grep -rn x . | head -50")
    assert not explores("wc -l a") and not explores("git rev-parse HEAD") and not explores("cat a > /tmp/b")


def test_background_shells_and_writers_are_barriers_read_only_ones_are_not(engine: Engine) -> None:
    shell = engine.builtins["shell"]
    assert shell.is_concurrency_safe({"command": "ls"})
    assert not shell.is_concurrency_safe({"command": "ls", "run_in_background": True})
    assert not shell.is_concurrency_safe({"command": "touch x"})
    assert shell.replay == "unsafe"


# -- scheduling in an agent's reply ------------------------------------------------------------

def test_a_reply_runs_its_read_only_shells_together_and_the_writer_alone_results_in_order(
        engine: Engine, workspace: Path) -> None:
    # /proc/uptime is a clock a reader can read: each command prints when it started and ended.
    reader = "cat /proc/uptime; sleep 0.5; cat /proc/uptime"
    writer = "cat /proc/uptime; sleep 0.3; touch written; cat /proc/uptime"
    calls = [("r1", reader), ("r2", reader), ("w", writer), ("r3", reader), ("r4", reader)]
    shell = engine.builtins["shell"]
    assert [shell.is_concurrency_safe({"command": c}) for _, c in calls] == [True, True, False, True, True]
    model = ScriptedModel([
        ModelReply(text="", stop_reason="tool_use", tool_calls=[
            ToolCallRequest(id=name, name="shell", arguments={"command": command}) for name, command in calls]),
        ModelReply(text="done", stop_reason="end_turn", tool_calls=[]),
    ])
    session = engine.start_session("run")
    Agent(session, model).run("go")
    messages = [m for m in conversation(engine.journal.read(session.session_id), "sys") if m.role == "tool"]
    assert [m.tool_call_id for m in messages] == [name for name, _ in calls]  # the order asked
    spans = [tuple(float(line.split()[0]) for line in str(m.content).splitlines()) for m in messages]
    r1, r2, w, r3, r4 = spans
    assert max(r1[0], r2[0]) < min(r1[1], r2[1])  # the first fleet ran together
    assert max(r3[0], r4[0]) < min(r3[1], r4[1])  # so did the second
    assert max(r1[1], r2[1]) <= w[0] and w[1] <= min(r3[0], r4[0])  # the writer ran alone between them
    assert (workspace / "written").exists()


# -- background tasks --------------------------------------------------------------------------

def test_a_background_shell_is_a_task_with_notes_a_wake_up_and_terminal(engine: Engine, workspace: Path) -> None:
    session = engine.start_session("test")
    command = ("note() { printf '%s\\n' \"$1\" >> \"$ZAGENT_NOTIFY_FILE\"; }; note 'building'; echo compiled; "
               "while [ ! -f go ]; do sleep 0.05; done; note 'linking'; echo linked")
    started = session.call("shell", {"command": command, "run_in_background": True, "description": "build"})
    assert started.output.startswith("started as task #1;") and not started.is_error
    wait_for(lambda: any(n.text == "building" for n in _notes(engine, session.session_id)), "the first note")
    output = Path(session.state.tasks["1"].task_dir) / tasks.OUTPUT_FILE
    wait_for(lambda: output.read_bytes() == b"compiled\n", "the first output")
    read = session.call("terminal", {"action": "read", "task": 1})
    assert read.output == "compiled\n\n[bytes 0-9 of 9]"
    (workspace / "go").touch()
    ended = session.call("terminal", {"action": "wait", "task": 1, "timeout_seconds": 10})
    assert ended.output.startswith("#1 shell: exited") and ended.output.endswith("compiled\nlinked")
    assert [n.text for n in _notes(engine, session.session_id)] == ["building", "linking"]
    # its end was told by terminal: no wake-up repeats it
    assert not session.outlook()[0]


def test_an_idle_agent_is_woken_by_its_background_shells_end(engine: Engine) -> None:
    model = ScriptedModel([
        ModelReply(text="", stop_reason="tool_use", tool_calls=[ToolCallRequest(
            id="bg", name="shell", arguments={"command": "sleep 0.3; echo background done", "run_in_background": True})]),
        ModelReply(text="waiting", stop_reason="end_turn", tool_calls=[]),
        ModelReply(text="seen it", stop_reason="end_turn", tool_calls=[]),
    ])
    session = engine.start_session("run")
    result = Agent(session, model).run("go")
    assert result.reason == "idle"
    woken = [m.content for m in conversation(engine.journal.read(session.session_id), "sys") if m.role == "user"]
    assert any("background done" in str(content) for content in woken), woken


def test_terminal_lists_and_kills_a_background_shell_with_its_children(engine: Engine, workspace: Path) -> None:
    session = engine.start_session("test")
    session.call("shell", {"command": f'sleep 300 & echo "{NAMESPACED}$!" > child.pid; wait', "run_in_background": True})
    child = read_pid(workspace / "child.pid")
    assert session.call("terminal", {"action": "list"}).output.startswith("#1 shell: running since ")
    killed = session.call("terminal", {"action": "kill", "task": 1})
    assert killed.output.startswith("#1 shell: killed")
    wait_for(lambda: not running(child), "the task's child to be gone")


def test_shell_kill_stops_a_background_shell_and_its_children(engine: Engine, workspace: Path) -> None:
    session = engine.start_session("test")
    session.call("shell", {"command": f'sleep 300 & echo "{NAMESPACED}$!" > child.pid; echo up; wait', "run_in_background": True})
    child = read_pid(workspace / "child.pid")
    killed = session.call("shell_kill", {"task_id": 1})
    assert killed.output.startswith("#1 shell: killed") and "up" in killed.output
    wait_for(lambda: not running(child), "the task's child to be gone")
    assert not session.outlook()[0]  # told by shell_kill, not again by a wake-up
    again = session.call("shell_kill", {"task_id": 1})
    assert again.output.startswith("#1 shell: killed")
    missing = session.call("shell_kill", {"task_id": 7})
    assert missing.is_error and missing.output == "there is no task #7 (tasks: #1)"


def test_wait_task_times_out_with_its_prefix_and_the_task_keeps_running(engine: Engine, workspace: Path) -> None:
    session = engine.start_session("test")
    session.call("shell", {"command": "while [ ! -f go ]; do sleep 0.05; done; echo finished",
                           "run_in_background": True})
    waited = session.call("wait_task", {"task_id": 1, "timeout": 0.2})
    assert waited.output.startswith(TIMED_OUT) and not waited.is_error
    assert session.state.tasks["1"].status == "running"
    (workspace / "go").touch()
    done = session.call("wait_task", {"task_id": "1", "timeout": 10})  # "1": coerced, as a model may send it
    assert done.output.startswith("#1 shell: exited") and done.output.endswith("finished")
    assert not session.outlook()[0]


def test_a_background_shell_is_killed_at_its_timeout_only_when_one_is_given(engine: Engine) -> None:
    session = engine.start_session("test")
    session.call("shell", {"command": "echo begun; sleep 30", "run_in_background": True, "timeout": 0.5})
    session.call("shell", {"command": "sleep 1.5; echo slow but fine", "run_in_background": True})
    limited = session.call("wait_task", {"task_id": 1, "timeout": 20})
    assert limited.is_error and limited.output.startswith("#1 shell: timed out") and "begun" in limited.output
    assert "[timed out after 0.5 s: the tool and its child processes were stopped" in limited.output
    unlimited = session.call("wait_task", {"task_id": 2, "timeout": 20})
    assert not unlimited.is_error and unlimited.output.endswith("slow but fine")


def _notes(engine: Engine, session_id: str) -> list[Any]:
    from zagent_core.journal.events import NoteReceived

    return [n for n in events(engine, session_id, NoteReceived) if n.offset >= 0]


def test_the_cli_keeps_zagents_variables_and_the_model_key_from_the_command(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "tools").mkdir(parents=True)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (home / "config.json").write_text(json.dumps({"model": {"api_key_env": "MY_MODEL_KEY"}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZAGENT_")}
    env.update(MY_MODEL_KEY="sk-shell-model-key", ZAGENT_API_KEY="sk-shell-zagent-key",
               ZAGENT_DEPLOY_TOKEN="zt-shell-deploy-token")
    command = "env; echo PARENT; tr '\\0' '\\n' < /proc/$PPID/environ; echo NOTIFY=$ZAGENT_NOTIFY_FILE"
    done = subprocess.run([PYTHON, "-m", "zagent_cli", "--home", str(home), "--workspace", str(workspace),
                           "tools", "run", "shell", "--args", json.dumps({"command": command})],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    own, parent = done.stdout.split("PARENT\n")
    for secret in ("sk-shell-model-key", "sk-shell-zagent-key", "zt-shell-deploy-token"):
        assert secret not in own
    # The keys zagent took are blanked where a command could read its parent's first environment.
    for secret in ("sk-shell-model-key", "sk-shell-zagent-key"):
        assert secret not in parent
    assert "NOTIFY=" + str(home) in parent  # zagent's own variables for the call are there


# -- a crash mid-shell -------------------------------------------------------------------------

def test_a_sigkill_mid_shell_then_resume_kills_the_orphan_and_reports_the_call_interrupted(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    command = f'echo "{NAMESPACED}$$" > sh.pid; sleep 300 & echo "{NAMESPACED}$!" > child.pid; wait'
    # Killed once the engine recorded who the command is (until then a crash cannot know it).
    recorded = lambda: any((tmp_path / "home" / "sessions").glob(f"*/calls/*/{tasks.TOOL_FILE}"))  # noqa: E731
    engine, session_id = crashed_shell_session(tmp_path, {"command": command}, lambda: recorded() and (
        workspace / "child.pid").is_file() and (workspace / "child.pid").read_text())
    orphans = [read_pid(workspace / "sh.pid"), read_pid(workspace / "child.pid")]
    if sandbox.unavailable() is None:  # a call's processes die with the engine that runs them
        for pid in orphans:
            wait_for(lambda pid=pid: not running(pid), f"{pid} to die with the engine")
    else:
        assert all(running(pid) for pid in orphans)  # the crash left them running
    with engine.resume(session_id):
        (interrupted,) = events(engine, session_id, ToolCallInterrupted)
        assert "zagent stopped while shell was running" in interrupted.message
        assert "effect may or may not have happened" in interrupted.message
        for pid in orphans:
            wait_for(lambda pid=pid: not running(pid), f"orphan {pid} to be gone")


@pytest.mark.parametrize("ends_while_down", [False, True])
def test_a_background_shell_survives_a_sigkill_and_is_finished_after_resume(tmp_path: Path,
                                                                         ends_while_down: bool) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    command = "echo waiting; while [ ! -f go ]; do sleep 0.05; done; echo finished"
    engine, session_id = crashed_shell_session(tmp_path, {"command": command, "run_in_background": True})
    if ends_while_down:
        (workspace / "go").touch()
        task_dir = Path(engine.session_state(session_id).tasks["1"].task_dir)
        wait_for(lambda: (task_dir / tasks.EXIT_FILE).exists(), "the task's exit record", seconds=10)
    with engine.resume(session_id) as session:
        if not ends_while_down:
            assert session.state.tasks["1"].status == "running"  # re-attached
            (workspace / "go").touch()
        done = session.call("wait_task", {"task_id": 1, "timeout": 10})
        assert done.output.startswith("#1 shell: exited") and done.output.endswith("waiting\nfinished")


# -- record_artifact ---------------------------------------------------------------------------

def test_record_artifact_journals_each_kind_with_its_result(engine: Engine, workspace: Path) -> None:
    (workspace / "report.md").write_text("# report\n")
    session = engine.start_session("test")
    calls = [
        ({"kind": "pull_request", "title": "Fix the parser", "url": "https://github.com/o/r/pull/7", "ref": "fix-parser"},
         'Recorded pull request "Fix the parser": https://github.com/o/r/pull/7'),
        ({"kind": "branch", "title": "Parser work", "ref": "fix-parser"}, 'Recorded branch "Parser work": fix-parser'),
        ({"kind": "commit", "title": "Parser fix", "ref": "0123abc"}, 'Recorded commit "Parser fix": 0123abc'),
        ({"kind": "file", "title": "The report", "path": "./report.md", "description": "what was found"},
         f'Recorded file "The report": {workspace / "report.md"}'),
        ({"kind": "custom", "title": "Deployed to staging"}, 'Recorded custom "Deployed to staging"'),
    ]
    for arguments, said in calls:
        result = session.call("record_artifact", arguments)
        assert (result.output, result.is_error) == (said, False)
    recorded = events(engine, session.session_id, ArtifactRecorded)
    assert [a.kind for a in recorded] == ["pull_request", "branch", "commit", "file", "custom"]
    assert recorded[0].ref == "fix-parser" and recorded[3].path == str(workspace / "report.md")
    assert recorded[3].description == "what was found"
    # committed in the same append as the call's result
    stored = list(engine.journal.read(session.session_id))
    for artifact in recorded:
        (at,) = [s for s in stored if s.event is artifact or s.event == artifact]
        following = next(s for s in stored if s.seq == at.seq + 1)
        assert isinstance(following.event, ToolCallFinished) and following.event.call_id == artifact.call_id


@pytest.mark.parametrize(("arguments", "message"), [
    ({"kind": "pull_request", "title": "x"}, 'nothing recorded: a pull request needs "url"'),
    ({"kind": "pull_request", "title": "x", "url": "github.com/o/r/pull/1"},
     "nothing recorded: \"url\" must be a web address (http:// or https://, no spaces), not 'github.com/o/r/pull/1'"),
    ({"kind": "pull_request", "title": "x", "url": "http://[::1"},
     "nothing recorded: \"url\" is not a valid URL (Invalid IPv6 URL): 'http://[::1'"),
    ({"kind": "pull_request", "title": "x", "url": "https://github.com:99999/o/r/pull/1"},
     "nothing recorded: \"url\" is not a valid URL (Port out of range 0-65535): "),
    ({"kind": "commit", "title": "x", "ref": "HEAD"},
     "nothing recorded: \"ref\" of a commit is its hash (7 to 64 hex digits), not 'HEAD'"),
    ({"kind": "branch", "title": "x", "ref": "my branch"},
     "nothing recorded: \"ref\" must be a branch or tag name without spaces, not 'my branch'"),
    ({"kind": "file", "title": "x", "path": "missing.txt"}, "nothing recorded: no such file: missing.txt (looked for "),
    ({"kind": "custom", "title": "   "}, 'nothing recorded: "title" is empty: give the artifact a short title'),
])
def test_record_artifact_refuses_what_points_nowhere_and_records_nothing(
        engine: Engine, arguments: dict[str, Any], message: str) -> None:
    session = engine.start_session("test")
    result = session.call("record_artifact", arguments)
    assert result.is_error and result.output.startswith(message)
    assert events(engine, session.session_id, ArtifactRecorded) == []


def test_record_artifact_refuses_a_file_outside_a_confined_workspace(home_dir: Path, journal: SQLiteJournal,
                                                                    workspace: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("x")
    config = Config.model_validate({"builtins": {"confine_to_workspace": True}})
    session = Engine(Home(home_dir), journal, workspace=workspace, config=config).start_session("test")
    result = session.call("record_artifact", {"kind": "file", "title": "x", "path": str(outside)})
    assert result.is_error and "is outside the workspace" in result.output


_LINE = st.text(alphabet=st.sampled_from(["a", "é", "€", "𝄞", " "]), max_size=300)


@settings(max_examples=150, deadline=None)
@given(st.lists(_LINE, min_size=1, max_size=400), st.booleans(), st.integers(min_value=64, max_value=2048))
# The head cut after the first byte of a 2-byte and of a 4-byte character.
@example(lines=["a" * 31 + "é" * 20], explore=True, cap=64)
@example(lines=["aaaaaaaaaaééééééé€€𝄞€𝄞𝄞𝄞𝄞𝄞𝄞𝄞"], explore=True, cap=64)
def test_a_cut_output_shows_a_true_head_and_tail_and_counts_what_it_left_out(
        tmp_path_factory: pytest.TempPathFactory, lines: list[str], explore: bool, cap: int) -> None:
    data = "\n".join(lines).encode()
    spilled = tmp_path_factory.mktemp("out") / "full_output.txt"
    spilled.write_bytes(data)
    outcome = ProcessOutcome(pid=1, returncode=0, timed_out=False, stdout=data[-cap:], stdout_total=len(data),
                             stderr=b"", stderr_total=0, spilled=spilled if len(data) > cap else None, duration=0.0)
    shown, dropped = shown_output(outcome, explore=explore, cap=cap)
    if len(data) <= cap:
        assert (shown, dropped) == (data.decode(), 0)
        return
    assert "\ufffd" not in shown  # no cut inside a character
    kind = "middle" if explore else "head"
    before, marker, after = re.match(r"(?s)(.*?)\n?(…\((\d+) bytes truncated from \w+\)… \[full output: .*?\])\n(.*)",
                                     shown).group(1, 3, 4)  # type: ignore[union-attr]
    assert f"truncated from {kind})" in shown and int(marker) == dropped
    assert data.endswith(after.encode())
    if explore:
        assert data.startswith(before.encode())
        head_bytes = len(data) - dropped - len(after.encode())  # its line end is the marker's line start
        assert head_bytes - len(before.encode()) in (0, 1)
    else:
        assert before == "" and dropped + len(after.encode()) == len(data)
