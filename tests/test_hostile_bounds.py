"""The bounds a hostile run broke (issue 23, items 1 to 3): the disk a flooding tool takes,
the memory a flood of notes, a huge file or a huge import takes, and the time a
catastrophic regular expression, a sparse file or a storm of wake-ups takes."""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
import forked
from conftest import python_tool, wait_for
from test_compaction import Recording

from zagent_core import Engine, Home
from zagent_core.agent.loop import Agent
from zagent_core.agent.models import ModelReply
from zagent_core.builtins import grep_python
from zagent_core.builtins.grep_python import Query
from zagent_core.config import Config, LimitsConfig
from zagent_core.history.exports import IMPORT_BATCH, ExportError, export_lines, import_file
from zagent_core.journal.events import (
    Event,
    SessionStarted,
    ToolCallRequested,
    ToolCallStarted,
    UserMessage,
    WakeRequested,
)
from zagent_core.journal.protocol import Journal, StoredEvent
from zagent_core.journal.views import HELD_NOTES
from zagent_core.tools.output_files import cut_middle, marker
from zagent_core.tools.supervisor import OUTPUT_FILE

#: A small cap, so a flood passes it in a fraction of a second.
FILE_LIMIT = 1 << 20
#: What the marker line between a kept file's head and tail says.
DROPPED = re.compile(rb"\n\[zagent: (\d+) bytes of output were dropped here: this file keeps the first (\d+) and the "
                     rb"last (\d+) bytes \(limits\.output_file_bytes\)\]\n")


@pytest.fixture
def capped(home_dir: Path, journal: Journal, workspace: Path) -> Engine:
    return Engine(Home(home_dir), journal, workspace=workspace,
                  config=Config(limits=LimitsConfig(kill_grace_seconds=0.3, output_file_bytes=FILE_LIMIT)))


def numbers(first: int, last: int) -> bytes:
    return b"".join(b"%d\n" % n for n in range(first, last + 1))


def kept_ends(path: Path, total: bytes) -> None:
    """``path`` holds the head and tail of ``total`` within the cap, and a marker that says how much went."""
    kept = path.read_bytes()
    marker = DROPPED.search(kept)
    assert marker is not None, kept[FILE_LIMIT // 2 - 100:FILE_LIMIT // 2 + 200]
    head, tail = kept[:marker.start()], kept[marker.end():]
    assert len(head) + len(tail) == FILE_LIMIT
    assert (int(marker[1]), int(marker[2]), int(marker[3])) == (len(total) - FILE_LIMIT, len(head), len(tail))
    assert total.startswith(head) and total.endswith(tail)


# -- 1. disk -----------------------------------------------------------------------------


def test_a_flooding_shell_keeps_its_head_and_tail_within_the_file_cap(capped: Engine) -> None:
    with capped.start_session("test") as session:
        result = session.call("shell", {"command": "seq 1 3000000"})
    assert not result.is_error and result.output.endswith("\n2999999\n3000000")
    assert result.full_output_path is not None
    kept_ends(Path(result.full_output_path), numbers(1, 3_000_000))


def test_a_flooding_folder_tool_keeps_its_head_and_tail_within_the_file_cap(home_dir: Path, capped: Engine) -> None:
    python_tool(home_dir, "flood", "import sys\nfor n in range(1, 3000001):\n    sys.stdout.write(f'{n}\\n')\n")
    with capped.start_session("test") as session:
        result = session.call("flood", {})
    assert result.full_output_path is not None
    kept_ends(Path(result.full_output_path), numbers(1, 3_000_000))


def test_a_background_flood_is_stopped_at_the_file_cap_and_keeps_its_head_and_tail(capped: Engine) -> None:
    with capped.start_session("test") as session:
        session.call("shell", {"command": "yes", "run_in_background": True})
        task = session.wait_task("1", 60)
        assert task.status == "exited", task.status
        assert task.is_error
        assert f"its output passed {FILE_LIMIT} bytes (limits.output_file_bytes)" in task.output
    kept = (Path(task.task_dir) / OUTPUT_FILE).read_bytes()
    marker = DROPPED.search(kept)
    assert marker is not None
    assert len(kept) - len(marker[0]) == FILE_LIMIT
    assert kept[:marker.start()].strip(b"y\n") == b"" and kept[marker.end():].strip(b"y\n") == b""


@pytest.mark.parametrize("first, more", [(1600, 0), (1600, 3), (1600, 700), (2600, 40), (1001, 1), (999, 0)])
def test_a_file_cut_while_written_and_when_done_keeps_the_true_head_and_tail(tmp_path: Path, first: int,
                                                                             more: int) -> None:
    """Cut once while written (unmarked), written on, then cut for good: the tail moves up to
    its place whether the marker makes it overlap itself or not."""
    written = bytes(range(256)) * 20
    path = tmp_path / "out"
    path.write_bytes(written[:first])
    with open(path, "r+b") as handle:
        dropped = cut_middle(handle.fileno(), 1000, marked=False)
        handle.seek(0, 2)
        handle.write(written[first:first + more])
        handle.flush()
        dropped = cut_middle(handle.fileno(), 1000, dropped=dropped, marked=True)
    total = written[:first + more]
    assert dropped == max(0, len(total) - 1000)
    expected = total if not dropped else total[:500] + marker(dropped, 500, 500) + total[-500:]
    assert path.read_bytes() == expected


# -- 2. memory ---------------------------------------------------------------------------


def test_a_flood_of_notes_holds_a_bounded_number_and_the_model_is_told_the_rest(home_dir: Path,
                                                                                 engine: Engine) -> None:
    flood = HELD_NOTES + 5000
    python_tool(home_dir, "chatty", "import os\nwith open(os.environ['ZAGENT_NOTIFY_FILE'], 'w') as f:\n"
                                    f"    f.write(''.join(f'note {{i}}\\n' for i in range({flood})))\n")
    model = Recording([ModelReply(text="ok")])
    session = engine.start_session("run")
    session.call("chatty", {})
    assert session.state.notes_received == flood
    assert (len(session.state.pending_notes), session.state.notes_not_held) == (HELD_NOTES, 5000)
    session.release()
    resumed = engine.resume(session.session_id)  # from the snapshot and the events after it: the same bound
    assert (len(resumed.state.pending_notes), resumed.state.notes_not_held) == (HELD_NOTES, 5000)
    Agent(resumed, model).run("go")
    assert not resumed.state.pending_notes and resumed.state.notes_not_held == 0
    last = model.requests[0][-1].content.splitlines()[-1]
    assert last.startswith("[info: ") and "more notes and wake-ups" in last
    shown = model.requests[0][-1].content.count("[info: note ")
    assert f"[info: {flood - shown:,} more notes" in last
    resumed.end()


def zagent(home: Path, workspace: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ZAGENT_RG": "none"}  # the Python search: no ripgrep
    return forked.run([sys.executable, "-m", "zagent_cli", "--home", str(home), "--workspace", str(workspace),
                       *args], stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=timeout)


def test_the_python_grep_reads_a_huge_file_in_bounded_memory(home_dir: Path, workspace: Path, engine: Engine,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    line = b"x" * 99 + b"\n"
    with open(workspace / "huge.log", "wb") as handle:
        for _ in range(150):
            handle.write(line * 10_000)  # 1 MB at a time: 150 MB in all
        handle.write(b"the needle\n")
    (workspace / "one_line.min.js").write_bytes(b"y" * (12 << 20) + b" needle")  # no line end at all
    monkeypatch.setenv("ZAGENT_RG", "none")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    with engine.start_session("test") as session:
        found = session.call("grep", {"pattern": "needle", "output_mode": "content"})
    growth_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert found.output.splitlines() == ["huge.log:1500001:the needle",
                                         f"one_line.min.js:1:{'y' * 500}… [line clipped: {(12 << 20) + 7 - 500} "
                                         "more characters]"]
    assert growth_mib < 50, f"the engine grew by {growth_mib:.0f} MiB"
    # The search's own process, held to 200 MiB of address space, finds the same.
    folder = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY)
    query = Query(pattern="needle", root=str(workspace), root_is_file=False, folder=folder, mode="count")

    def held() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (200 << 20, 200 << 20))

    try:
        done = subprocess.run([sys.executable, "-m", grep_python.__name__], input=query.to_json().encode(),
                              capture_output=True, preexec_fn=held, pass_fds=(folder,), timeout=120)
    finally:
        os.close(folder)
    assert done.returncode == 0, done.stderr[-2000:]
    assert [json.loads(line) for line in done.stdout.splitlines()] == [["huge.log", 1], ["one_line.min.js", 1]]


@pytest.mark.parametrize("mode", ["files_with_matches", "content", "count"])
@pytest.mark.parametrize("context", [(0, 0), (1, 0), (0, 2), (3, 1)])
def test_the_python_grep_reads_in_batches_what_it_would_read_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    mode: str, context: tuple[int, int]) -> None:
    text = "\n".join(["foo bar", "", "x" * 30, "bar", "a foo", "zzz", "foo", "q" * 70 + " foo", "", "end"] * 3)
    for name, data in {"lf.txt": text + "\n", "none.txt": text, "crlf.txt": text.replace("\n", "\r\n")}.items():
        (tmp_path / name).write_text(data)
    folder = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    query = Query(pattern="foo|^bar$", root=str(tmp_path), root_is_file=False, folder=folder,
                  mode=mode, before=context[0], after=context[1])  # type: ignore[arg-type]
    try:
        whole = list(grep_python.search(query))
        monkeypatch.setattr(grep_python, "READ_BYTES", 7)  # many batches, and lines that run over several
        assert list(grep_python.search(query)) == whole
        monkeypatch.setattr(grep_python, "LINE_BYTES", 40)  # long lines searched in their first 40 bytes
        cut = list(grep_python.search(query))
    finally:
        os.close(folder)
    assert (mode == "files_with_matches") == (cut == whole)


def write_export(path: Path, events: int, *, bad_at: int | None = None) -> None:
    """An export of session ``s1`` of ``events`` events (user messages), written as it is made; with
    ``bad_at``, the call started there names a folder outside the session's (refused on import)."""
    now = datetime.now(timezone.utc)

    def made() -> list[Event]:
        yield SessionStarted(origin="test", workspace="/w", zagent_version="0")
        for version in range(2, events + 1):
            if version == bad_at:
                yield ToolCallRequested(call_id="c1", tool="x", arguments={})
            elif bad_at is not None and version == bad_at + 1:
                yield ToolCallStarted(call_id="c1", tool="x", arguments={}, argv=["x"], cwd="/w", input_mode="stdin_json",
                                      output_mode="text", output_dir="/etc", timeout_seconds=None)
            else:
                yield UserMessage(text=f"message {version} " + "." * 200)

    with open(path, "w", encoding="utf-8") as handle:
        for line in export_lines(StoredEvent(0, "s1", version, now, event)
                                 for version, event in enumerate(made(), start=1)):
            handle.write(line + "\n")


def test_an_import_streams_a_long_export_in_bounded_memory(tmp_path: Path, home_dir: Path, journal: Journal) -> None:
    export = tmp_path / "long.jsonl"
    write_export(export, 150_000)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    assert import_file(journal, export, home=Home(home_dir)) == "s1"
    growth_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert journal.head("s1") == 150_000
    assert growth_mib < 40, f"importing grew the process by {growth_mib:.0f} MiB"
    assert journal.lease("s1") is None  # held while it was written, let go after


def test_an_import_that_fails_half_way_takes_out_what_it_wrote(tmp_path: Path, home_dir: Path,
                                                               journal: Journal) -> None:
    export = tmp_path / "crafted.jsonl"
    write_export(export, 3 * IMPORT_BATCH, bad_at=2 * IMPORT_BATCH + 10)  # two appends in when it is found
    with pytest.raises(ExportError, match=f"event {2 * IMPORT_BATCH + 11} \\(tool_call_started\\): output_dir"):
        import_file(journal, export, home=Home(home_dir))
    assert journal.head("s1") == 0 and journal.lease("s1") is None
    assert [s.session_id for s in journal.sessions()] == []


def test_reading_a_long_session_holds_a_page_of_it_at_a_time(journal: Journal) -> None:
    journal.append("long", [SessionStarted(origin="test", workspace="/w", zagent_version="0")], 0)
    for start in range(1, 300_001, 10_000):
        journal.append("long", [UserMessage(text=f"message {n} " + "." * 100) for n in range(10_000)], start)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    count = sum(1 for _ in journal.read("long"))
    growth_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert count == 300_001
    assert growth_mib < 20, f"reading grew the process by {growth_mib:.0f} MiB"


# -- 3. time -----------------------------------------------------------------------------


def test_the_python_grep_stops_a_catastrophic_pattern_at_its_timeout(home_dir: Path, workspace: Path) -> None:
    (home_dir / "config.json").write_text(json.dumps({"limits": {"default_timeout_seconds": 2}}))
    (workspace / "a.txt").write_text("a" * 40 + "!\n")
    done = zagent(home_dir, workspace, "tools", "run", "grep", "--args", json.dumps({"pattern": "^(a+)+$"}))
    assert done.returncode == 1, done.stderr
    assert "the search took longer than 2 s and was stopped" in done.stdout


def test_read_file_answers_a_huge_sparse_file_from_its_head(workspace: Path, engine: Engine) -> None:
    with open(workspace / "sparse.img", "wb") as handle:
        handle.truncate(20 << 30)  # 20 GiB of holes: nothing on disk, zeros to read
    with engine.start_session("test") as session:
        started = time.monotonic()
        result = session.call("read_file", {"path": "sparse.img"})
        took = time.monotonic() - started
        again = session.call("read_file", {"path": "sparse.img"})
    assert result.output == f"[binary file: sparse.img ({20 << 30} bytes); not shown as text]"
    assert again.output.startswith("sparse.img: unchanged since your read")  # known again without a hash
    assert took < 5, f"read_file took {took:.1f} s"


PATTERNED = textwrap.dedent("""\
    import anyio
    from mcp import types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    SCHEMA = {"type": "object", "properties": {
        "name": {"type": "string", "pattern": "^(a+)+$"},
        "tag": {"type": "string", "pattern": "^(?!draft)\\\\w+$"}}}

    async def list_tools(ctx, params):
        return types.ListToolsResult(tools=[types.Tool(name="greet", description="Greets.", input_schema=SCHEMA)])

    async def call_tool(ctx, params):
        return types.CallToolResult(content=[types.TextContent(type="text", text=f"hello {params.arguments}")])

    async def main():
        server = Server("patterned", version="1.0.0", on_list_tools=list_tools, on_call_tool=call_tool)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)
""")


def test_a_catastrophic_pattern_in_an_mcp_schema_is_checked_in_linear_time(tmp_path: Path, home_dir: Path,
                                                                           workspace: Path) -> None:
    pytest.importorskip("mcp", reason="the MCP SDK is not installed: pip install -e '.[test]'")
    (tmp_path / "patterned.py").write_text(PATTERNED)
    (home_dir / "config.json").write_text(json.dumps({"mcp": {"servers": {"p": {
        "command": [sys.executable, str(tmp_path / "patterned.py")]}}}}))
    hostile = "a" * 5000 + "!"  # Python's re: 2^5000 steps
    refused = zagent(home_dir, workspace, "tools", "run", "p__greet", "--args", json.dumps({"name": hostile}))
    assert refused.returncode == 1, refused.stderr
    assert 'argument "name": must match the pattern ^(a+)+$' in refused.stdout
    ran = zagent(home_dir, workspace, "tools", "run", "p__greet", "--args", json.dumps({"name": "aaa", "tag": "x"}))
    assert ran.returncode == 0 and "hello" in ran.stdout, ran.stdout + ran.stderr
    # The lookahead RE2 cannot read is left to the server, and said once.
    assert "zagent does not check its arguments against the pattern" in ran.stderr
    assert "Traceback" not in ran.stderr + refused.stderr


def test_a_wake_storm_under_a_worker_stops_at_max_turns(tmp_path: Path, home_dir: Path, journal: Journal,
                                                        workspace: Path) -> None:
    python_tool(home_dir, "storm", "import json, os, time\nwith open(os.environ['ZAGENT_NOTIFY_FILE'], 'a') as f:\n"
                "    for n in range(100):\n"
                "        f.write(json.dumps({'text': f'wake {n}', 'wake': True}) + '\\n'); f.flush(); time.sleep(0.04)\n"
                "print('calm')\n", background=True, timeout_seconds=120)
    (home_dir / "config.json").write_text(json.dumps({"agent": {"max_turns": 6}}))
    script = tmp_path / "storm.json"
    script.write_text(json.dumps([{"text": "A storm.", "tool_calls": [{"name": "storm", "arguments": {}}]},
                                  *({"text": "Noted."} for _ in range(500))]))
    session = Engine(Home(home_dir), journal, workspace=workspace).start_session("run")
    session.record_user_message("weather it")
    session.release()
    worker = forked.Popen([sys.executable, "-m", "zagent_cli", "--home", str(home_dir), "--workspace",
                           str(workspace), "worker", "--model", f"scripted:{script}", "--poll", "0.1"],
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: any(e.event.type == "task_started" for e in journal.read(session.session_id)),
                 "the storm to start", seconds=60)
        (started,) = [e.event for e in journal.read(session.session_id) if e.event.type == "task_started"]
        wait_for(lambda: (Path(started.task_dir) / "exit.json").exists(), "the storm to end", seconds=60)
    finally:
        worker.send_signal(signal.SIGINT)
        _, said = worker.communicate(timeout=60)
    replies = [e for e in journal.read(session.session_id) if e.event.type == "model_replied"]
    assert len(replies) == 6, said
    # Let go at its limit, nothing more of the session is journaled: no worker takes it up again.
    assert "[worker stopped: 1 session claimed" in said, said


def test_a_worker_counts_max_turns_across_claims_since_a_person_last_acted(tmp_path: Path, home_dir: Path,
                                                                          journal: Journal, workspace: Path) -> None:
    (home_dir / "config.json").write_text(json.dumps({"agent": {"max_turns": 3}}))
    script = tmp_path / "chatty.json"
    script.write_text(json.dumps([{"text": "Noted."} for _ in range(10)]))
    session = Engine(Home(home_dir), journal, workspace=workspace).start_session("run")
    session.record_user_message("hello")
    # Three replies since the message (a driver killed after them), and a wake-up nobody answered.
    session.record([ModelReply(text="Noted.").journaled(1) for _ in range(3)])
    session.record([WakeRequested(wake_id="w1", reason="note", text="wake up")])
    session.release()
    done = forked.run([sys.executable, "-m", "zagent_cli", "--home", str(home_dir), "--workspace", str(workspace),
                       "worker", "--model", f"scripted:{script}", "--poll", "0.1", "--until-idle"],
                      capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert [e.event.type for e in journal.read(session.session_id)].count("model_replied") == 3
    assert (f"session {session.session_id}: left for a person: it made agent.max_turns (3) model requests since "
            "a person last gave it a message, an answer or a decision") in done.stderr
    assert "1 left for a person" in done.stderr
