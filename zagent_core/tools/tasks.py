"""Background tasks, the engine's side: start a supervisor, read its records, stop it.

A task's folder is its call's folder: the tool's ``output/`` folder and ``notify`` file,
plus what the supervisor (``zagent_core.tools.supervisor``) writes: ``supervisor.json`` and
``tool.json`` (who they are), ``output.log`` (and ``stderr.log`` for JSON tools) and,
last, ``exit.json``. Everything the engine needs to settle a task after a crash is in
those files; the journal says which folder belongs to which task.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zagent_core.config import CapabilitiesConfig, LimitsConfig
from zagent_core.logs import get_logger
from zagent_core.tools.credentials import tool_environment
from zagent_core.tools.processes import (
    ProcessIdentity,
    boot_id,
    open_regular,
    read_json,
    stat_fields,
    write_identity,
)
from zagent_core.tools.results import JSON_STDOUT_LIMIT, CallPaths, ToolResult, build_result
from zagent_core.tools.runner import ProcessOutcome, ProcessSpec, group_alive
from zagent_core.tools.supervisor import EXIT_FILE, OUTPUT_FILE, STDERR_FILE, STOP_SIGNALS, SUPERVISOR_FILE, TOOL_FILE
from zagent_core.tools.text import storable

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

log = get_logger(__name__)


def launch(task_dir: Path, invocation: ProcessSpec, *, merge_stderr: bool, kill_grace: float,
           tag: str) -> subprocess.Popen[bytes]:
    """Start the task's supervisor in its own session; returns once it has its request.

    Its identity is written before its request is sent, so a task that runs can always
    be found (and stopped) from its folder, even if the engine dies in between.
    """
    request = {
        "argv": invocation.argv,
        "cwd": str(invocation.cwd),
        "env": invocation.env,
        "stdin": invocation.stdin.decode() if invocation.stdin is not None else None,
        "merge_stderr": merge_stderr,
        "timeout": invocation.timeout,
        "kill_grace": kill_grace,
        "tag": tag,
        "output_file_bytes": invocation.file_limit,
        "wrapper": list(invocation.wrapper),
    }
    # The supervisor's own environment is the engine's, less its credentials; the
    # tool's environment travels in the request, on a pipe, never in a file.
    env = tool_environment()
    # The child inherits this thread's signal mask: a stop sent before the supervisor
    # can handle it stays pending instead of killing it unrecorded.
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        with (task_dir / "supervisor.log").open("ab") as log_file:
            proc = subprocess.Popen(
                [sys.executable, "-m", "zagent_core.tools.supervisor", str(task_dir)],
                stdin=subprocess.PIPE, stdout=log_file, stderr=subprocess.STDOUT, env=env,
                start_new_session=True, cwd=task_dir,
            )
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    write_identity(task_dir / SUPERVISOR_FILE, proc.pid)
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
    return ProcessIdentity.from_record(read_json(task_dir / name))


def _read(path: Path, offset: int | None, limit: int) -> tuple[bytes, int, int]:
    """``(data, start, size)``: up to ``limit`` bytes of ``path`` from ``offset``, or its
    last ``limit`` bytes when ``offset`` is None; nothing if it cannot be read."""
    handle = open_regular(path)  # the tool can reach its task folder: a FIFO there must not hang us
    if handle is None:
        return b"", 0, 0
    try:
        with handle:
            size = handle.seek(0, os.SEEK_END)
            start = max(0, size - limit) if offset is None else min(offset, size)
            handle.seek(start)
            return handle.read(limit), start, size
    except OSError:
        return b"", 0, 0


def _of_type(record: dict[str, Any], key: str, kind: type[Any]) -> Any:
    value = record.get(key)
    return value if isinstance(value, kind) and not isinstance(value, bool) else None


def _seconds(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
        return float(value)
    return None


def ended_at(record: dict[str, Any]) -> datetime | None:
    """When the task's tool ended, as its supervisor recorded it (None in records without it)."""
    seconds = _seconds(record.get("ended_at"))
    try:
        return None if seconds is None else datetime.fromtimestamp(seconds, timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None


def result_of(record: dict, task_dir: Path, *, output_mode: str, timeout: float | None, attach_outputs: bool,
              cwd: Path, caps: CapabilitiesConfig, limits: LimitsConfig,
              output_validator: Validator | None = None) -> ToolResult:
    """The task's result from its exit record and output files, as a foreground call's would be
    (``output_validator``: the tool's ``output_schema``, which its ``structured`` must match)."""
    text_mode = output_mode == "text"
    limit = limits.output_cap_bytes if text_mode else JSON_STDOUT_LIMIT
    stdout, _, stdout_total = _read(task_dir / OUTPUT_FILE, None, limit)
    stderr, _, stderr_total = _read(task_dir / STDERR_FILE, None, limits.output_cap_bytes)
    # The record sits where the tool can reach it: take only what has the right type.
    outcome = ProcessOutcome(
        pid=_of_type(record, "pid", int), returncode=_of_type(record, "returncode", int),
        timed_out=record.get("timed_out") is True, stdout=stdout, stdout_total=stdout_total, stderr=stderr,
        stderr_total=stderr_total, spilled=task_dir / OUTPUT_FILE if stdout_total > limit else None,
        duration=_seconds(record.get("duration")) or 0.0, start_error=_of_type(record, "start_error", str),
        stopped=record.get("stopped") is True, output_limit=_of_type(record, "output_limit", int),
    )
    try:
        return build_result(outcome, output_mode=output_mode, attach_outputs=attach_outputs,
                            timeout=timeout if timeout is not None else _seconds(record.get("timeout")),
                            paths=CallPaths(call_dir=task_dir, output_dir=task_dir / "output"), cwd=cwd, caps=caps,
                            limits=limits, output_validator=output_validator)
    except Exception as exc:  # noqa: BLE001 - a bug of ours must not leave the task without an end
        log.error("task_result_failed", exc_info=True, task_dir=str(task_dir))
        return ToolResult(output=storable(f"zagent failed while reading the task's result: {exc!r}"), is_error=True)


def stop(task_dir: Path, *, supervisor: ProcessIdentity | None = None, wait: bool = False) -> bool:
    """Ask a task (or a foreground call's tool) in ``task_dir`` to stop.

    A supervisor (``supervisor``, as journaled, else as its folder records it) is asked
    (SIGTERM: it stops the tool's tree and records the exit; one still starting up gets
    it once it can). Without one, the tool's process group is killed directly, and
    ``wait`` waits (up to a second) until it is gone. Returns whether anything was signalled.
    """
    supervisor = supervisor or identity(task_dir)
    if supervisor is not None and supervisor.alive():
        try:
            os.kill(supervisor.pid, signal.SIGTERM)
            return True
        except ProcessLookupError:
            pass
    tool = identity(task_dir, TOOL_FILE)
    if tool is None or not _leads_its_group(tool) or not group_alive(tool.pid):
        return False
    try:
        os.killpg(tool.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    deadline = time.monotonic() + 1.0
    while wait and group_alive(tool.pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    return True


def _leads_its_group(tool: ProcessIdentity) -> bool:
    """Whether the process group named by the tool's pid is still the tool's: the tool is there
    (running or a zombie), or no process has its pid now. Then what is in that group was
    started by the tool: a pid cannot be given again while a group is named by it. (In the
    sandbox, bubblewrap dies first when its parent does, and what is inside goes a moment later.)"""
    fields = stat_fields(tool.pid)
    return fields is None or (int(fields[19]) == tool.start_ticks and tool.boot_id == boot_id())


def read_output(task_dir: Path, offset: int | None, limit: int) -> tuple[bytes, int, int]:
    """``(data, start, size)``: up to ``limit`` bytes of the task's output from ``offset``
    (or its last ``limit`` bytes when ``offset`` is None)."""
    return _read(task_dir / OUTPUT_FILE, offset, limit)
