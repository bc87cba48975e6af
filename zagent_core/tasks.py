"""Background tasks, the engine's side: start a supervisor, read its records, stop it.

A task's folder is its call's folder: the tool's ``output/`` folder and ``notify`` file,
plus what the supervisor (``zagent_core.supervisor``) writes: ``supervisor.json`` and
``tool.json`` (who they are), ``output.log`` (and ``stderr.log`` for JSON tools) and,
last, ``exit.json``. Everything the engine needs to settle a task after a crash is in
those files; the journal says which folder belongs to which task.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from zagent_core.config import CapabilitiesConfig, LimitsConfig
from zagent_core.credentials import tool_environment
from zagent_core.invocation import Invocation
from zagent_core.processes import ProcessIdentity, read_json
from zagent_core.results import JSON_STDOUT_LIMIT, CallPaths, ToolResult, build_result
from zagent_core.runner import ProcessOutcome
from zagent_core.supervisor import EXIT_FILE, OUTPUT_FILE, STDERR_FILE, SUPERVISOR_FILE, TOOL_FILE


def launch(task_dir: Path, invocation: Invocation, *, merge_stderr: bool, kill_grace: float,
           tag: str) -> subprocess.Popen[bytes]:
    """Start the task's supervisor in its own session; returns once it has its request."""
    request = {
        "argv": invocation.argv,
        "cwd": str(invocation.cwd),
        "env": invocation.env,
        "stdin": invocation.stdin.decode() if invocation.stdin is not None else None,
        "merge_stderr": merge_stderr,
        "timeout": invocation.timeout,
        "kill_grace": kill_grace,
        "tag": tag,
    }
    # The supervisor's own environment is the engine's, less its credentials; the
    # tool's environment travels in the request, on a pipe, never in a file.
    env = tool_environment()
    with (task_dir / "supervisor.log").open("ab") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "zagent_core.supervisor", str(task_dir)],
            stdin=subprocess.PIPE, stdout=log_file, stderr=subprocess.STDOUT, env=env,
            start_new_session=True, cwd=task_dir,
        )
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(request).encode())
    proc.stdin.close()
    return proc


def exit_record(task_dir: Path) -> dict | None:
    """What the supervisor recorded when the tool ended, or None while it runs."""
    record = read_json(task_dir / EXIT_FILE)
    return record if isinstance(record, dict) else None


def identity(task_dir: Path, name: str = SUPERVISOR_FILE) -> ProcessIdentity | None:
    """The supervisor's (or with ``TOOL_FILE``, the tool's) identity as it recorded it."""
    record = read_json(task_dir / name)
    try:
        return ProcessIdentity.model_validate(record)
    except ValueError:
        return None


def _read(path: Path, offset: int | None, limit: int) -> tuple[bytes, int, int]:
    """``(data, start, size)``: up to ``limit`` bytes of ``path`` from ``offset``, or its
    last ``limit`` bytes when ``offset`` is None; nothing if it cannot be read."""
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            start = max(0, size - limit) if offset is None else min(offset, size)
            handle.seek(start)
            return handle.read(limit), start, size
    except OSError:
        return b"", 0, 0


def result_of(record: dict, task_dir: Path, *, output_mode: str, timeout: float | None, attach_outputs: bool,
              cwd: Path, caps: CapabilitiesConfig, limits: LimitsConfig) -> ToolResult:
    """The task's result from its exit record and output files, as a foreground call's would be."""
    text_mode = output_mode == "text"
    limit = limits.output_cap_bytes if text_mode else JSON_STDOUT_LIMIT
    stdout, _, stdout_total = _read(task_dir / OUTPUT_FILE, None, limit)
    stderr, _, stderr_total = _read(task_dir / STDERR_FILE, None, limits.output_cap_bytes)
    outcome = ProcessOutcome(
        pid=record.get("pid"), returncode=record.get("returncode"), timed_out=bool(record.get("timed_out")),
        stdout=stdout, stdout_total=stdout_total, stderr=stderr, stderr_total=stderr_total,
        spilled=task_dir / OUTPUT_FILE if stdout_total > limit else None,
        duration=float(record.get("duration") or 0), start_error=record.get("start_error"),
        stopped=bool(record.get("stopped")),
    )
    return build_result(outcome, output_mode=output_mode, timeout=timeout, attach_outputs=attach_outputs,
                        paths=CallPaths(call_dir=task_dir, output_dir=task_dir / "output"), cwd=cwd, caps=caps,
                        limits=limits)


def stop(task_dir: Path, *, wait: bool = False) -> bool:
    """Ask a task (or a foreground call's tool) in ``task_dir`` to stop.

    A supervisor is asked (SIGTERM: it stops the tool's tree and records the exit).
    Without one, the tool's process group is killed directly, and ``wait`` waits (up to
    a second) until it is gone. Returns whether anything was signalled.
    """
    supervisor = identity(task_dir)
    if supervisor is not None and supervisor.alive():
        os.kill(supervisor.pid, signal.SIGTERM)
        return True
    tool = identity(task_dir, TOOL_FILE)
    if tool is None or not tool.alive():
        return False
    try:
        os.killpg(tool.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    deadline = time.monotonic() + 1.0
    while wait and tool.alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    return True


def read_output(task_dir: Path, offset: int | None, limit: int) -> tuple[bytes, int, int]:
    """``(data, start, size)``: up to ``limit`` bytes of the task's output from ``offset``
    (or its last ``limit`` bytes when ``offset`` is None)."""
    return _read(task_dir / OUTPUT_FILE, offset, limit)
