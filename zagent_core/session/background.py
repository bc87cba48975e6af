"""A session's background: its tasks, the notes its calls write, and the watcher that follows them.

Every line a tool appends to its notify file becomes exactly one ``note_received`` (the
offset is journaled with the note), and a task's end is journaled with the wake-up it
asks for, in one step: an idle agent never sees the one without the other.
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from zagent_core.config import CapabilitiesConfig, Config
from zagent_core.ids import new_wake_id
from zagent_core.journal.events import (
    Event,
    NoteReceived,
    TaskExited,
    TaskInterrupted,
    TaskKilled,
    TaskStarted,
    ToolStateWritten,
    WakeAnswered,
    WakeRequested,
)
from zagent_core.journal.protocol import JournalError
from zagent_core.journal.views import TaskView
from zagent_core.logs import get_logger
from zagent_core.session.crashpoints import crash_point
from zagent_core.session.writer import Writer
from zagent_core.tools import tasks
from zagent_core.tools.manifest import ToolSet
from zagent_core.tools.notes import STOPPED, read_notes
from zagent_core.tools.processes import ProcessIdentity
from zagent_core.tools.results import ToolResult
from zagent_core.tools.runner import ProcessSpec

log = get_logger(__name__)

#: How often running background tasks are looked at for notes and their end.
WATCH_SECONDS = 0.1


def started_result(task_id: str) -> ToolResult:
    """What a background call answers at once (and, after a crash, what resume answers for it)."""
    return ToolResult(output=f"started as task #{task_id}; its notes reach you as it runs and you are woken with "
                      "its result when it exits (terminal tool: list, read, wait, kill)", is_error=False)


def task_started(task_id: str, call_id: str, tool: str, who: ProcessIdentity, task_dir: Path) -> TaskStarted:
    return TaskStarted(task_id=task_id, call_id=call_id, tool=tool, pid=who.pid, start_ticks=who.start_ticks,
                       boot_id=who.boot_id, task_dir=str(task_dir))


def state_written(call_id: str, tool: str, result: ToolResult) -> list[Event]:
    """The tool-state writes a result carries, as the event committed with it."""
    return [ToolStateWritten(call_id=call_id, tool=tool, values=result.state_writes)] if result.state_writes else []


class Background:
    """Starts a session's tasks, journals their notes and ends, and watches them while they run."""

    def __init__(self, writer: Writer, config: Config, workspace: Path, tools: ToolSet) -> None:
        self._writer = writer
        #: The session's folder tools: a task's result is checked against its tool's ``output_schema``.
        self._tools = tools
        self._config = config
        self._workspace = workspace
        self._supervisors: dict[str, subprocess.Popen[bytes]] = {}
        self._watcher: threading.Thread | None = None

    def capabilities(self) -> CapabilitiesConfig:
        """What the model of the session's latest turn can take (``config.json`` first)."""
        return self._config.capabilities.for_model(self._writer.state.model)

    # -- notes -----------------------------------------------------------------------

    def collect_notes(self, call_id: str) -> int:
        """Journal the complete lines a call's notify file gained since its last note.

        Returns how many notes were added. Safe to call from any thread, any number of
        times: the offset is read and moved under the session's lock. One look reads only
        what the file held when it began, so it ends however fast the tool writes.
        """
        writer, added = self._writer, 0
        with writer.lock:
            call = writer.state.calls.get(call_id)
            if call is None or call.notify_file is None or call.notify_offset == STOPPED:
                return 0  # closed (its last lines were read before its result), or reading was stopped
            until = None
            while True:  # one transaction per batch, so a flood is journaled in bounded steps
                batch = read_notes(Path(call.notify_file), writer.state.calls[call_id].notify_offset, until=until,
                                   max_bytes=self._config.limits.notify_max_bytes)
                until = batch.until
                events: list[Event] = []
                for note in batch.notes:
                    events.append(NoteReceived(call_id=call_id, task_id=call.task_id, text=note.text,
                                               wake=note.wake, offset=note.offset))
                    if note.wake:
                        events.append(WakeRequested(wake_id=new_wake_id(), reason="note", text=note.text,
                                                    call_id=call_id, task_id=call.task_id))
                if batch.stop is not None:  # said once: the offset it is journaled with ends reading
                    events.append(NoteReceived(call_id=call_id, task_id=call.task_id, text=batch.stop,
                                               wake=False, offset=STOPPED))
                if events:
                    crash_point("before_note_journaled")
                    writer.append(events)
                    added += len(batch.notes)
                if not batch.more:
                    return added

    def wakes_and_running(self) -> tuple[bool, list[TaskView]]:
        """Whether a wake-up is pending, and the tasks still running, in one consistent look.

        Under the session's lock: a task's end and its wake-up are folded in one step, so
        an idle agent never sees the task gone and its wake-up not there yet.
        """
        with self._writer.lock:
            return bool(self._writer.state.pending_wakes), self._writer.state.running_tasks

    def answer_wakes(self, task_id: str) -> None:
        """Take a task's pending wake-ups off the list: the agent got its end another way."""
        state = self._writer.state
        with self._writer.lock:
            wakes = [w.wake_id for w in state.pending_wakes.values() if w.task_id == task_id and w.reason != "note"]
            if wakes:
                self._writer.append([WakeAnswered(wakes=wakes, call_id=state.last_call_id or "")])

    def kept_tasks(self) -> tuple[list[TaskView], int]:
        """The tasks the session keeps (running, then the latest ended), and how many were numbered."""
        with self._writer.lock:
            return list(self._writer.state.tasks.values()), self._writer.state.tasks_numbered

    # -- tasks -----------------------------------------------------------------------

    def launch(self, tool: str, call_id: str, task_id: str, task_dir: Path,
               spec: ProcessSpec) -> tuple[ToolResult, TaskStarted | None]:
        """Start a task's supervisor; returns the call's result and the ``task_started`` to journal with it."""
        try:
            proc = tasks.launch(task_dir, spec, merge_stderr=spec.merge_stderr,
                                kill_grace=self._config.limits.kill_grace_seconds, tag=spec.tag or "")
        except OSError as exc:
            return ToolResult(output=f"could not start the background task: {exc}", is_error=True), None
        self._supervisors[task_id] = proc
        who = ProcessIdentity.of(proc.pid) or ProcessIdentity(pid=proc.pid, start_ticks=0, boot_id="")
        return started_result(task_id), task_started(task_id, call_id, tool, who, task_dir)

    def poll_task(self, task_id: str) -> TaskView:
        """Journal what a running task did since the last look: notes, and its end."""
        state = self._writer.state
        with self._writer.lock:
            task = state.tasks[task_id]
            if task.status != "running":
                return task
            self.collect_notes(task.call_id)
            supervisor = self._supervisors.get(task_id)
            if supervisor is not None:
                supervisor.poll()  # reap it if it is done
            task_dir = Path(task.task_dir)
            record = tasks.exit_record(task_dir)
            if record is None:
                if ProcessIdentity(pid=task.pid, start_ticks=task.start_ticks, boot_id=task.boot_id).alive():
                    return task
                record = tasks.exit_record(task_dir)  # it may have written it just before it went
            if record is None:
                self.interrupt_task(task, "its supervisor stopped without recording how the tool ended")
            else:
                self.collect_notes(task.call_id)  # the lines it wrote last
                self._finish_task(task, record)
            return self._writer.state.tasks[task_id]

    def _finish_task(self, task: TaskView, record: dict[str, Any]) -> None:
        call = self._writer.state.calls[task.call_id]
        tool = self._tools.tools.get(task.tool)
        result = tasks.result_of(
            record, Path(task.task_dir), output_mode=call.output_mode or "text", timeout=call.timeout_seconds,
            attach_outputs=call.attach_outputs, cwd=Path(call.cwd or self._workspace),
            caps=self.capabilities(), limits=self._config.limits,
            output_validator=tool.output_validator if tool is not None else None,
        )
        fields = result.event_fields() | {"ended_at": tasks.ended_at(record)}
        written = state_written(task.call_id, task.tool, result)
        if record.get("stopped"):
            # The kill was asked for (terminal, or the session ending): its answer says so.
            self._writer.append([*written, TaskKilled(task_id=task.task_id, call_id=task.call_id, **fields)])
            return
        ended = "timed out" if result.timed_out else "failed" if result.is_error else "finished"
        log.info("task_ended", session=self._writer.session_id, task_id=task.task_id, how=ended,
                 exit_code=result.exit_code)
        self._writer.append([
            *written,
            TaskExited(task_id=task.task_id, call_id=task.call_id, **fields),
            WakeRequested(wake_id=new_wake_id(), reason="task_exited", call_id=task.call_id, task_id=task.task_id,
                          text=f"task #{task.task_id} ({task.tool}) {ended}:\n{result.output}"),
        ])
        crash_point("with_wake_pending")

    def interrupt_task(self, task: TaskView, why: str) -> None:
        """Journal a task as interrupted (stopping what of it still runs), with its wake-up."""
        tasks.stop(Path(task.task_dir))  # whatever of it still runs without its supervisor
        output = Path(task.task_dir) / tasks.OUTPUT_FILE
        message = f"task #{task.task_id} ({task.tool}) was interrupted: {why}. Its output so far is in {output}."
        self._writer.append([
            TaskInterrupted(task_id=task.task_id, call_id=task.call_id, message=message, output_path=str(output)),
            WakeRequested(wake_id=new_wake_id(), reason="task_interrupted", call_id=task.call_id,
                          task_id=task.task_id, text=message),
        ])

    def wait_task(self, task_id: str, timeout: float | None) -> TaskView:
        """Block until the task ends or ``timeout`` seconds pass; returns its view."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            task = self.poll_task(task_id)
            if task.status != "running" or (deadline is not None and time.monotonic() >= deadline):
                return task
            time.sleep(WATCH_SECONDS / 2)

    def kill_task(self, task_id: str) -> TaskView:
        """Stop a task's whole tree; returns its view once its end is journaled."""
        task = self.poll_task(task_id)
        if task.status != "running":
            return task
        tasks.stop(Path(task.task_dir), supervisor=ProcessIdentity(pid=task.pid, start_ticks=task.start_ticks,
                                                                    boot_id=task.boot_id))
        task = self.wait_task(task_id, self._config.limits.kill_grace_seconds + 5)
        if task.status == "running":
            with self._writer.lock:
                self.interrupt_task(task, "it did not stop when asked")
            task = self._writer.state.tasks[task_id]
        return task

    def watch(self) -> None:
        """Make sure a thread is following the running tasks."""
        with self._writer.lock:
            if self._watcher is None:
                self._watcher = threading.Thread(target=self._watch_loop, daemon=True,
                                                 name=f"zagent-tasks-{self._writer.session_id}")
                self._watcher.start()

    def _watch_loop(self) -> None:
        writer = self._writer
        try:
            while True:
                with writer.lock:
                    running = [t.task_id for t in writer.state.running_tasks]
                    if not running or writer.state.status == "ended" or writer.released:
                        self._watcher = None
                        return
                for task_id in running:
                    self.poll_task(task_id)
                time.sleep(WATCH_SECONDS)
        except Exception as exc:  # noqa: BLE001 - the journal failed: the session can no longer record
            if isinstance(exc, JournalError):  # away, or closed: its message says it all
                log.error("task_watch_failed", error=str(exc), session=writer.session_id)
            else:  # a bug of ours: its traceback
                log.error("task_watch_failed", exc_info=True, session=writer.session_id)
            with writer.lock:
                self._watcher = None
