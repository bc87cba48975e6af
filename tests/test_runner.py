"""The runner through the engine: timeouts, process trees, the output cap, hostile tools.

Every test that stops a tool checks that nothing of it is left running: the tools write
the pid of every process they start to ``<workspace>/pids.txt`` and the test looks each
one up in ``/proc`` (a zombie counts as gone: it no longer runs and only waits for a
parent to reap it).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import stat
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import NAMESPACED_PID, PYTHON, host_pid, python_tool, running, write_tool

from zagent_core import Engine, Home
from zagent_core.config import Config, LimitsConfig
from zagent_core.tools.output_files import marker

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="process checks read /proc")

# -- helpers ----------------------------------------------------------------------------

#: Prepended to every tool that starts processes: ``record(pid)`` notes a pid in the workspace
#: (with its PID namespace: the tool may run in one of its own, see ``conftest.host_pid``).
RECORD = f"""
import os, signal, subprocess, sys, time
PIDS = os.path.join(os.environ["ZAGENT_WORKSPACE"], "pids.txt")
def record(pid):
    with open(PIDS, "a") as f:
        f.write(({NAMESPACED_PID})(pid) + "\\n")
record(os.getpid())
"""

SLEEPER = [PYTHON, "-c", "import time; time.sleep(30)"]
STUBBORN = [PYTHON, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(30)"]


def recorded_pids(workspace: Path, expected: int) -> list[str]:
    path = workspace / "pids.txt"
    pids = path.read_text().split() if path.exists() else []
    assert len(pids) == expected, f"the tool recorded {pids}, expected {expected} pids"
    return pids


def assert_none_left(workspace: Path, expected: int) -> None:
    pids = recorded_pids(workspace, expected)
    alive = [pid for pid in pids if running(pid)]
    for pid in alive:  # do not leak them into other tests, then fail
        kill(pid)
    assert not alive, f"processes left running after the call: {alive}"


def kill(recorded: str) -> None:
    found = host_pid(recorded)
    if found is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(found, signal.SIGKILL)


def events_of(engine: Engine, session_id: str) -> list[Any]:
    return [stored.event for stored in engine.journal.read(session_id)]


def finished_of(engine: Engine, session_id: str) -> list[Any]:
    return [e for e in events_of(engine, session_id) if e.type == "tool_call_finished"]


def assert_tail_kept(result: Any, full: str, cap: int) -> None:
    """The result is a marker saying how many bytes were cut, then exactly the rest of ``full``.

    At most ``cap`` bytes are kept; the cut may move a little forward to a line start.
    """
    total = len(full.encode())
    dropped = result.truncated_bytes
    assert total - cap <= dropped <= total - cap + 300, (dropped, total, cap)
    marker, rest = result.output.split("\n", 1)
    assert f"{dropped} bytes" in marker and "cut" in marker
    assert rest.startswith(full.encode()[dropped:].decode().rstrip("\n"))


@pytest.fixture
def make_engine(home_dir: Path, journal, workspace: Path):
    def make(**limits: Any) -> Engine:
        config = Config(limits=LimitsConfig(**{"kill_grace_seconds": 0.3, **limits}))
        return Engine(Home(home_dir), journal, workspace=workspace, config=config)

    return make


# -- timeouts ---------------------------------------------------------------------------


def test_timeout_kills_the_tool_and_keeps_its_output(home_dir: Path, workspace: Path, engine: Engine) -> None:
    code = RECORD + "print('step 1 done', flush=True)\nsys.stderr.write('warming up\\n'); sys.stderr.flush()\n" \
                    "time.sleep(30)\nprint('never printed')"
    python_tool(home_dir, "slow", code, timeout_seconds=0.5)
    started = time.monotonic()
    with engine.start_session("test") as session:
        result = session.call("slow", {})
    elapsed = time.monotonic() - started
    assert elapsed < 5
    assert result.timed_out and result.is_error
    assert "timed out" in result.output and "0.5" in result.output
    assert "step 1 done" in result.output and "warming up" in result.output
    assert "never printed" not in result.output
    assert result.output.index("step 1 done") < result.output.index("timed out")
    assert 400 <= result.duration_ms < 4000
    finished = finished_of(engine, session.session_id)[0]
    assert finished.timed_out and finished.is_error
    assert_none_left(workspace, 1)


def test_timeout_zero_uses_the_configured_default(home_dir: Path, workspace: Path, make_engine) -> None:
    engine = make_engine(default_timeout_seconds=0.5)
    python_tool(home_dir, "slow_default", RECORD + "time.sleep(30)", timeout_seconds=0)
    started = time.monotonic()
    with engine.start_session("test") as session:
        result = session.call("slow_default", {})
    assert time.monotonic() - started < 5
    assert result.timed_out and "timed out" in result.output
    started_event = [e for e in events_of(engine, session.session_id) if e.type == "tool_call_started"][0]
    assert started_event.timeout_seconds == 0.5
    assert_none_left(workspace, 1)


def test_json_tool_timeout_keeps_what_it_printed(home_dir: Path, workspace: Path, engine: Engine) -> None:
    code = RECORD + "sys.stderr.write('loading model\\n'); sys.stderr.flush()\ntime.sleep(30)"
    python_tool(home_dir, "slow_json", code, output="json", timeout_seconds=0.5)
    with engine.start_session("test") as session:
        result = session.call("slow_json", {})
    assert result.timed_out and result.is_error
    assert "timed out" in result.output
    assert "loading model" in result.output
    assert_none_left(workspace, 1)


def test_a_tool_ignoring_sigterm_is_killed(home_dir: Path, workspace: Path, engine: Engine) -> None:
    code = RECORD + """
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ignoring SIGTERM", flush=True)
while True:
    time.sleep(0.05)
"""
    python_tool(home_dir, "stubborn", code, timeout_seconds=0.5)
    started = time.monotonic()
    with engine.start_session("test") as session:
        result = session.call("stubborn", {})
    elapsed = time.monotonic() - started
    assert result.timed_out and result.is_error
    assert "ignoring SIGTERM" in result.output
    assert 0.5 + 0.3 <= elapsed < 5  # SIGTERM, the grace, then SIGKILL
    assert_none_left(workspace, 1)


def test_timeout_kills_the_whole_tree(home_dir: Path, workspace: Path, engine: Engine) -> None:
    code = RECORD + f"""
children = [subprocess.Popen({SLEEPER!r}), subprocess.Popen({STUBBORN!r}, stdout=subprocess.DEVNULL)]
for child in children:
    record(child.pid)
# a grandchild too
grand = subprocess.Popen([sys.executable, "-c", "import os, subprocess, sys, time; "
    "p = subprocess.Popen({SLEEPER!r}); open(sys.argv[1], 'a').write(os.readlink('/proc/self/ns/pid') + f':{{p.pid}}\\\\n'); "
    "time.sleep(30)", PIDS])
record(grand.pid)
while open(PIDS).read().count("\\n") < 5:
    time.sleep(0.01)
print("tree started", flush=True)
time.sleep(30)
"""
    python_tool(home_dir, "tree", code, timeout_seconds=1)
    with engine.start_session("test") as session:
        result = session.call("tree", {})
    assert result.timed_out, result.output
    assert "tree started" in result.output
    assert_none_left(workspace, 5)


def test_grandchild_holding_stdout_does_not_hold_the_call(home_dir: Path, workspace: Path, engine: Engine) -> None:
    # The tool exits at once; its child inherited stdout and sleeps 30 s with it open.
    code = RECORD + f"""
child = subprocess.Popen({SLEEPER!r})
record(child.pid)
print("tool done", flush=True)
"""
    python_tool(home_dir, "leaver", code, timeout_seconds=20)
    started = time.monotonic()
    with engine.start_session("test") as session:
        result = session.call("leaver", {})
    elapsed = time.monotonic() - started
    assert elapsed < 5, "the call waited for the pipe to close instead of the tool's exit"
    assert not result.timed_out
    assert "tool done" in result.output
    assert_none_left(workspace, 2)


def test_grandchild_holding_stdout_through_a_timeout(home_dir: Path, workspace: Path, engine: Engine) -> None:
    code = RECORD + f"""
child = subprocess.Popen({STUBBORN!r})
record(child.pid)
print("waiting", flush=True)
time.sleep(30)
"""
    python_tool(home_dir, "holder", code, timeout_seconds=0.5)
    started = time.monotonic()
    with engine.start_session("test") as session:
        result = session.call("holder", {})
    assert time.monotonic() - started < 5
    assert result.timed_out
    assert "waiting" in result.output
    assert_none_left(workspace, 2)


def test_background_child_left_in_the_group_is_stopped_after_the_call(home_dir: Path, workspace: Path,
                                                                      engine: Engine) -> None:
    code = RECORD + f"""
child = subprocess.Popen({STUBBORN!r}, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
record(child.pid)
time.sleep(0.1)
print("started a daemon and exited", flush=True)
"""
    python_tool(home_dir, "daemonizer", code, timeout_seconds=20)
    started = time.monotonic()
    with engine.start_session("test") as session:
        result = session.call("daemonizer", {})
    assert time.monotonic() - started < 5
    assert not result.timed_out
    assert result.exit_code == 0
    assert "started a daemon and exited" in result.output
    assert_none_left(workspace, 2)


def test_a_setsid_grandchild_holding_stdout_does_not_hold_the_call(home_dir: Path, workspace: Path,
                                                                   engine: Engine) -> None:
    """A process that left the tool's session still holds its stdout: the call ends when the
    tool exits, not when the pipe closes, and the escaped process is found and stopped."""
    code = RECORD + f"""
child = subprocess.Popen({SLEEPER!r}, start_new_session=True)
record(child.pid)
print("escaped child started", flush=True)
"""
    python_tool(home_dir, "escaper", code, timeout_seconds=20)
    started = time.monotonic()
    try:
        with engine.start_session("test") as session:
            result = session.call("escaper", {})
        assert time.monotonic() - started < 5
        assert not result.timed_out
        assert "escaped child started" in result.output
        assert not any(running(pid) for pid in recorded_pids(workspace, 2))
    finally:
        for pid in recorded_pids(workspace, 2):
            kill(pid)


# -- output cap and memory ------------------------------------------------------------------


def test_text_output_over_the_cap_keeps_the_tail_and_the_full_file(home_dir: Path, make_engine) -> None:
    engine = make_engine(output_cap_bytes=1024)
    python_tool(home_dir, "chatty", "for i in range(500):\n    print(f'line {i:04d}')\nprint('SUMMARY: 500 lines')")
    with engine.start_session("test") as session:
        result = session.call("chatty", {})
    full_text = "".join(f"line {i:04d}\n" for i in range(500)) + "SUMMARY: 500 lines\n"
    total = len(full_text)
    assert not result.is_error
    assert_tail_kept(result, full_text, cap=1024)
    assert result.full_output_path is not None
    assert result.full_output_path in result.output
    assert Path(result.full_output_path).read_text() == full_text
    assert "SUMMARY: 500 lines" in result.output  # the tail is kept
    assert "line 0000" not in result.output  # the head is cut
    assert "line 0499" in result.output
    assert len(result.output.encode()) < 1024 + 400
    finished = finished_of(engine, session.session_id)[0]
    assert finished.truncated_bytes == result.truncated_bytes
    assert finished.full_output_path == result.full_output_path


def test_json_output_over_the_cap_is_cut_too(home_dir: Path, make_engine) -> None:
    engine = make_engine(output_cap_bytes=1024)
    code = "import json\nprint(json.dumps({'output': 'HEAD ' + 'x' * 5000 + ' TAIL'}))"
    python_tool(home_dir, "big_json", code, output="json")
    with engine.start_session("test") as session:
        result = session.call("big_json", {})
    assert not result.is_error
    assert_tail_kept(result, "HEAD " + "x" * 5000 + " TAIL", cap=1024)
    assert "TAIL" in result.output and "HEAD" not in result.output
    assert result.full_output_path and Path(result.full_output_path).read_text().startswith("HEAD ")


def test_hundreds_of_megabytes_of_output_keep_memory_bounded(home_dir: Path, make_engine) -> None:
    engine = make_engine(output_cap_bytes=4096)
    mib = 300
    code = f"""
import os
block = memoryview(b"y" * ((1 << 20) - 1) + b"\\n")
for _ in range({mib}):
    view = block
    while view:
        view = view[os.write(1, view):]
os.write(1, b"END OF FLOOD\\n")
"""
    python_tool(home_dir, "flood", code, timeout_seconds=60)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    with engine.start_session("test") as session:
        result = session.call("flood", {})
    growth_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    try:
        assert not result.is_error and not result.timed_out, result.output[-500:]
        assert growth_mib < 100, f"the engine grew by {growth_mib:.0f} MiB"
        total = mib * (1 << 20) + len(b"END OF FLOOD\n")
        assert total - 4096 <= result.truncated_bytes <= total - 4096 + 300
        assert f"[{result.truncated_bytes} bytes cut" in result.output
        assert "END OF FLOOD" in result.output
        assert len(result.output) < 4096 + 400
        assert result.full_output_path is not None
        # The file keeps the first and last 32 MiB (limits.output_file_bytes), and a line between.
        limit = LimitsConfig().output_file_bytes
        kept = os.path.getsize(result.full_output_path)
        assert kept == limit + len(marker(total - limit, limit // 2, limit - limit // 2))
    finally:
        if result.full_output_path:
            Path(result.full_output_path).unlink(missing_ok=True)


def test_json_tool_printing_more_than_its_stdout_limit(home_dir: Path, engine: Engine) -> None:
    from zagent_core.tools.results import JSON_STDOUT_LIMIT

    code = f"import os\nblock = b'q' * (1 << 20)\nfor _ in range({JSON_STDOUT_LIMIT // (1 << 20) + 1}):\n" \
           "    os.write(1, block)"
    python_tool(home_dir, "json_flood", code, output="json", timeout_seconds=20)
    with engine.start_session("test") as session:
        result = session.call("json_flood", {})
    assert result.is_error and not result.timed_out
    assert "limit" in result.output
    assert len(result.output) < engine.config.limits.output_cap_bytes + 1000


# -- hostile tools ----------------------------------------------------------------------------


def test_flood_of_ten_thousand_lines(home_dir: Path, engine: Engine) -> None:
    python_tool(home_dir, "lines", "import sys\nfor i in range(10000):\n    print(f'row {i}')\nsys.exit(0)")
    python_tool(home_dir, "lines_json", "for i in range(10000):\n    print(f'row {i}')", output="json")
    with engine.start_session("test") as session:
        text = session.call("lines", {})
        as_json = session.call("lines_json", {})
    assert not text.is_error
    assert text.output.rstrip().endswith("row 9999")
    assert text.truncated_bytes > 0
    assert Path(text.full_output_path).read_text().count("\n") == 10000
    assert as_json.is_error
    assert "invalid JSON" in as_json.output and "row 0" in as_json.output
    assert len(as_json.output) < engine.config.limits.output_cap_bytes + 1000
    assert engine.session_state(session.session_id) == session.state


def test_invalid_utf8_output(home_dir: Path, engine: Engine) -> None:
    code = "import os\nos.write(1, b'before \\xff\\xfe\\xc3 after\\n')\nos.write(2, b'\\x80err\\n')"
    python_tool(home_dir, "binary", code)
    python_tool(home_dir, "binary_json", "import os\nos.write(1, b'{\"output\": \"ok\"} \\xff')", output="json")
    with engine.start_session("test") as session:
        result = session.call("binary", {})
        as_json = session.call("binary_json", {})
    assert not result.is_error
    assert "before" in result.output and "after" in result.output and "err" in result.output
    assert "\ufffd" in result.output
    assert as_json.is_error  # not one JSON object
    # the journal took it and reads back
    assert engine.session_state(session.session_id) == session.state
    outputs = [e.output for e in finished_of(engine, session.session_id)]
    assert outputs == [result.output, as_json.output]


def test_closing_stdout_early_and_running_on(home_dir: Path, workspace: Path, engine: Engine) -> None:
    code = RECORD + """
print("last words", flush=True)
os.close(1)
os.close(2)
time.sleep(30)
"""
    python_tool(home_dir, "closer", code, timeout_seconds=0.5)
    started = time.monotonic()
    with engine.start_session("test") as session:
        result = session.call("closer", {})
    assert time.monotonic() - started < 5
    assert result.timed_out and result.is_error
    assert "last words" in result.output
    assert_none_left(workspace, 1)


def test_tool_that_never_reads_a_large_stdin(home_dir: Path, engine: Engine) -> None:
    python_tool(home_dir, "deaf", "print('not listening')", timeout_seconds=5)
    with engine.start_session("test") as session:
        result = session.call("deaf", {"blob": "z" * (2 << 20)})
    assert not result.is_error and not result.timed_out
    assert "not listening" in result.output


def test_tool_killed_by_a_signal(home_dir: Path, engine: Engine) -> None:
    python_tool(home_dir, "segv", "import os, signal\nprint('about to crash', flush=True)\n"
                                  "os.kill(os.getpid(), signal.SIGKILL)")
    with engine.start_session("test") as session:
        result = session.call("segv", {})
    assert result.is_error and not result.timed_out
    assert "about to crash" in result.output
    assert "SIGKILL" in result.output


# -- tools that cannot start -------------------------------------------------------------------


def test_program_that_is_not_executable(home_dir: Path, tmp_path: Path, engine: Engine) -> None:
    script = tmp_path / "not_executable.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    write_tool(home_dir, "noexec", {"description": "cannot run", "command": [str(script)]})
    with engine.start_session("test") as session:
        assert "noexec" in session.tools.tools  # it loaded: the file exists
        result = session.call("noexec", {})
    assert result.is_error
    assert str(script) in result.output
    assert "ermission" in result.output  # "Permission denied"
    events = events_of(engine, session.session_id)
    assert [e.type for e in events if e.type.startswith("tool_call")] == [
        "tool_call_requested", "tool_call_started", "tool_call_finished"]
    assert engine.session_state(session.session_id) == session.state


def test_program_deleted_after_load(home_dir: Path, engine: Engine) -> None:
    tool_dir = write_tool(home_dir, "vanishing", {"description": "gone soon", "command": ["run.sh"]},
                          {"run.sh": "#!/bin/sh\necho hi\n"})
    program = tool_dir / "run.sh"
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    with engine.start_session("test") as session:
        first = session.call("vanishing", {})
        program.unlink()
        second = session.call("vanishing", {})
        third = session.call("vanishing", {})  # the session keeps working
    assert not first.is_error and first.output.strip() == "hi"
    assert second.is_error and third.is_error
    assert "run.sh" in second.output
    finished = finished_of(engine, session.session_id)
    assert len(finished) == 3
    assert finished[1].exit_code is None and finished[1].is_error
    assert engine.session_state(session.session_id) == session.state


def test_missing_working_directory_is_named(home_dir: Path, workspace: Path, engine: Engine) -> None:
    """The workspace vanished: the error must say so, not blame the (present) interpreter."""
    python_tool(home_dir, "here", "print('hi')")
    with engine.start_session("test") as session:
        workspace.rmdir()
        result = session.call("here", {})
    assert result.is_error
    assert str(workspace.resolve()) in result.output, result.output
    assert engine.session_state(session.session_id) == session.state


def test_scripts_cwd_and_args_survive_a_json_roundtrip(home_dir: Path, engine: Engine) -> None:
    """Arguments with shell metacharacters reach the tool verbatim: there is no shell."""
    code = "import json, sys\nprint(json.dumps(sys.argv[1:]))"
    python_tool(home_dir, "noshell", code, command=[PYTHON, "main.py", "$HOME", "*", "a;b", "`id`"],
                input="args_json")
    with engine.start_session("test") as session:
        result = session.call("noshell", {"q": "$(rm -rf /) && echo pwned"})
    argv = json.loads(result.output)
    assert argv[:4] == ["$HOME", "*", "a;b", "`id`"]
    assert json.loads(argv[4]) == {"q": "$(rm -rf /) && echo pwned"}


def test_the_timeout_holds_while_on_tick_is_busy(tmp_path: Path) -> None:
    # on_tick journals notes; a tool flooding them must not hold off its own timeout.
    from zagent_core.tools.runner import ProcessSpec, run_process

    started: list[int] = []
    died_during_tick: list[bool] = []

    def busy_tick() -> bool:
        if started and not died_during_tick:
            deadline = time.monotonic() + 10
            while running(started[0]) and time.monotonic() < deadline:
                time.sleep(0.02)
            died_during_tick.append(not running(started[0]))
        return False

    spec = ProcessSpec(argv=SLEEPER, cwd=tmp_path, env={}, stdin=None, merge_stderr=True, timeout=0.5,
                       kill_grace=0.3, capture_limit=1024)
    outcome = run_process(spec, on_tick=busy_tick, on_start=started.append)
    assert died_during_tick == [True]
    assert outcome.timed_out
