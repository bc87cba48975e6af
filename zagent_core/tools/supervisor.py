"""The supervisor of one background task: ``python -m zagent_core.tools.supervisor TASK_DIR``.

It runs in its own process session, so it outlives the engine. The engine records who
it is (``supervisor.json``) before it sends what to run on stdin (a JSON object: the
tool's environment travels this way, never through a file): a supervisor whose engine
died before that gets no request and runs nothing, so a task that runs is always one
resume can find. It runs the tool with its output going straight to files in the task
folder, and enforces the timeout and the output cap: a tool whose output passes
``limits.output_file_bytes`` is stopped (it has no timeout unless given one, and a flood
would fill the disk), and its output files keep their start and their end
(:mod:`~zagent_core.tools.output_files`). The tool's sandbox (bubblewrap, ``--die-with-parent``)
hangs off the supervisor: the task outlives the engine, and all it started dies with it. Its last act is to write ``exit.json`` atomically, with
the time the tool ended, so an exit that happens while the engine is down is still known
when the engine comes back. SIGTERM, SIGINT or SIGHUP make it stop the tool's whole tree
and record that it was stopped; it starts with them blocked, so one sent while it is
still starting up waits for it instead of killing it before it can record anything.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from zagent_core.tools.output_files import cut_file
from zagent_core.tools.processes import write_identity, write_json
from zagent_core.tools.runner import ProcessSpec, run_process

SUPERVISOR_FILE = "supervisor.json"
TOOL_FILE = "tool.json"
EXIT_FILE = "exit.json"
OUTPUT_FILE = "output.log"
STDERR_FILE = "stderr.log"
#: What asks a supervisor to stop; blocked from its start until it can handle them.
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP})


def main(task_dir: Path, request: dict[str, Any]) -> int:
    stop = {"requested": False}

    def request_stop(signum: int, _frame: object) -> None:
        stop["requested"] = True

    for signum in STOP_SIGNALS:
        signal.signal(signum, request_stop)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # one sent during start-up arrives now
    if stop["requested"]:
        write_json(task_dir / EXIT_FILE, durable=True, value={
            "stopped": True, "start_error": "the task was stopped before its tool started", "ended_at": time.time()})
        return 0

    def started(pid: int) -> None:
        write_identity(task_dir / TOOL_FILE, pid)

    merge = bool(request["merge_stderr"])
    limit: int | None = request.get("output_file_bytes")
    outputs = [task_dir / OUTPUT_FILE] + ([] if merge else [task_dir / STDERR_FILE])
    capped = {"at": False}

    def tick() -> bool:
        # Looked at every tick (0.1 s): what the tool writes past the cap until it stops is cut after.
        if limit is not None and not capped["at"]:
            capped["at"] = any(_size(path) > limit for path in outputs)
        return stop["requested"] or capped["at"]

    spec = ProcessSpec(
        argv=request["argv"],
        cwd=Path(request["cwd"]),
        env=request["env"],
        stdin=request["stdin"].encode() if request.get("stdin") is not None else None,
        merge_stderr=merge,
        timeout=request["timeout"],
        kill_grace=request["kill_grace"],
        capture_limit=0,
        stdout_file=task_dir / OUTPUT_FILE,
        stderr_path=None if merge else task_dir / STDERR_FILE,
        tag=request.get("tag"),
        wrapper=tuple(request.get("wrapper") or ()),
    )
    began = time.time()
    outcome = run_process(spec, on_tick=tick, on_start=started)
    if limit is not None:
        for path in outputs:
            cut_file(path, limit)
    write_json(task_dir / EXIT_FILE, durable=True, value={
        "pid": outcome.pid,
        "returncode": outcome.returncode,
        "timed_out": outcome.timed_out,
        "timeout": spec.timeout,  # a built-in's task has it only here (its call journals none)
        "stopped": outcome.stopped and not capped["at"],
        "output_limit": limit if outcome.stopped and capped["at"] else None,
        "duration": outcome.duration,
        "start_error": outcome.start_error,
        "ended_at": began + outcome.duration,  # when the tool exited, not when this was written
    })
    return 0


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


if __name__ == "__main__":
    folder = Path(sys.argv[1])
    try:
        given = json.loads(sys.stdin.buffer.read())
    except ValueError:
        sys.exit("zagent supervisor: no request on stdin (the engine stopped before sending it); nothing was run")
    sys.exit(main(folder, given))
