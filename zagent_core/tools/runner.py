"""Running one tool process: no shell, bounded memory, and a timeout that always wins.

The process gets its own session (so its whole tree can be signalled as one process
group). Completion is the process's exit, never the pipes' close: a grandchild that
keeps stdout open does not hold the call. What the tool leaves running in its group
after it exits is stopped, SIGTERM first and SIGKILL after a grace period, so a call
never leaves processes behind. Output is read as it comes: the last ``capture_limit``
bytes stay in memory, the rest streams to ``spill_path``, which keeps its start and its
end past ``file_limit`` (:mod:`~zagent_core.tools.output_files`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import os
import selectors
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, BinaryIO, Callable

from zagent_core.tools.output_files import cut_middle
from zagent_core.tools.processes import create_fresh, stat_fields

if TYPE_CHECKING:  # the config's models: a background task's supervisor runs without pydantic
    from zagent_core.config import SandboxGrant


@functools.cache
def _log() -> Any:
    """The runner's logger, made when it first logs: a background task's supervisor runs the
    runner, and structlog's import was a third of its start-up (it logs only a timeout or a
    tool that escaped its group)."""
    from zagent_core.logs import get_logger

    return get_logger(__name__)


#: After the process exits, how long to wait for its pipes to close before treating
#: whoever still holds them as left behind.
DRAIN_SECONDS = 0.2
_CHUNK = 1 << 16
#: How often ``on_tick`` runs while a process is alive.
TICK_SECONDS = 0.1
#: After SIGKILL, how long to wait for the group to vanish (an init that does not reap
#: zombies would otherwise keep it "alive" forever).
_UNREAPED_SECONDS = 1.0
#: How late the loop may be to notice a deadline before a watchdog thread stops the tool.
_LATE_SECONDS = 0.5
#: Without pidfd (macOS), how often to look for the exit.
_POLL_SECONDS = 0.02


@dataclass(frozen=True)
class ProcessSpec:
    """What to run and how: one call's process (a folder tool's, a built-in's, a task's), and
    what the journal may record of it (``env_names``, never the values)."""

    argv: list[str]
    cwd: Path
    env: dict[str, str]
    #: Bytes written to stdin, which is then closed; ``None`` closes it at once.
    stdin: bytes | None
    timeout: float | None
    #: Names of the variables the engine set or the manifest added, for the journal.
    env_names: list[str] = dataclasses.field(default_factory=list)
    #: Send stderr into stdout (in order), as text-mode tools are read.
    merge_stderr: bool = False
    kill_grace: float = 2.0
    capture_limit: int = 0
    #: Where the whole of stdout goes once it outgrows ``capture_limit``.
    spill_path: Path | None = None
    #: Where the whole of stderr goes (when not merged); otherwise its tail is kept.
    stderr_path: Path | None = None
    #: Give the process this file as its stdout (and stderr, when merged) instead of a
    #: pipe: its output then outlives whoever runs it (background tasks).
    stdout_file: Path | None = None
    #: An environment entry (``NAME=value``) unique to this call, by which processes
    #: that left the process group (setsid) are found and stopped too.
    tag: str | None = None
    #: The most of each output kept on disk (``limits.output_file_bytes``): past it, its
    #: first and last halves, and a line between that says how much was dropped.
    file_limit: int | None = None
    #: What the process may reach in the sandbox (None: not confined, only its PID namespace);
    #: the session's host gives the spec its :attr:`wrapper` (``zagent_core.tools.sandbox``).
    sandbox: SandboxGrant | None = None
    #: What ``argv`` runs inside: bubblewrap and its arguments, up to ``--``
    #: (:func:`zagent_core.tools.sandbox.confine` sets it). Its end ends the whole sandbox at
    #: once, so a stop signals the tool's processes and spares it (the tool has its grace);
    #: and it reports a death by signal N as exit status 128+N.
    wrapper: tuple[str, ...] = ()


@dataclass(frozen=True)
class ProcessOutcome:
    """What happened. ``stdout``/``stderr`` are the kept tails; ``*_total`` the full sizes."""

    pid: int | None
    returncode: int | None
    timed_out: bool
    stdout: bytes
    stdout_total: int
    stderr: bytes
    stderr_total: int
    spilled: Path | None
    duration: float
    stderr_spilled: Path | None = None
    #: Why the program could not start at all (not found, not executable).
    start_error: str | None = None
    #: Stopped because the caller asked (``on_tick`` returned True), not by a timeout.
    stopped: bool = False
    #: Stopped because its output passed this many bytes (a background task's ``limits.output_file_bytes``).
    output_limit: int | None = None

    @property
    def exit_code(self) -> int | None:
        return self.returncode if self.returncode is not None and self.returncode >= 0 else None

    @property
    def signal(self) -> int | None:
        return -self.returncode if self.returncode is not None and self.returncode < 0 else None


class _Capture:
    """Keeps the tail of a stream in memory and, past the limit, the stream on disk: all of
    it up to ``file_limit``, its start and its end past that."""

    def __init__(self, limit: int, spill_path: Path | None, file_limit: int | None) -> None:
        self.limit = limit
        self.spill_path = spill_path
        self.file_limit = file_limit
        self.tail = bytearray()
        self.total = 0
        self._spill: BinaryIO | None = None
        self._on_disk = 0
        #: Bytes of the middle already cut out of the file.
        self._dropped = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        if self._spill is None and self.spill_path is not None and self.total > self.limit:
            self._spill = create_fresh(self.spill_path)
            self._write(self.tail)
        if self._spill is not None:
            self._write(chunk)
        self.tail += chunk
        if len(self.tail) > self.limit:
            del self.tail[: len(self.tail) - self.limit]

    def _write(self, data: bytes | bytearray) -> None:
        assert self._spill is not None
        self._spill.write(data)
        self._on_disk += len(data)
        # Cut when half as much again has come: each byte is moved once at most, and the
        # file never holds more than 1.5 times its limit.
        if self.file_limit is not None and self._on_disk > self.file_limit + self.file_limit // 2:
            self._cut(marked=False)

    def _cut(self, *, marked: bool) -> None:
        assert self._spill is not None and self.file_limit is not None
        self._spill.flush()
        self._dropped = cut_middle(self._spill.fileno(), self.file_limit, dropped=self._dropped, marked=marked)
        self._on_disk = self._spill.seek(0, os.SEEK_END)

    @property
    def spilled(self) -> bool:
        return self._spill is not None

    def close(self) -> None:
        if self._spill is not None:
            if self.file_limit is not None:
                self._cut(marked=True)
            self._spill.close()


def group_alive(pgid: int) -> bool:
    """Whether any process of the group is still running (zombies do not count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not os.path.isdir("/proc/self"):
        return True
    # Killed members stay as zombies until their new parent reaps them, and an init
    # that never reaps would make the group look alive forever: look at their state.
    return bool(_members(pgid))


def _members(pgid: int) -> list[int]:
    """The running (not zombie) processes of the group."""
    members = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = stat_fields(entry.name)
            if fields is not None and int(fields[2]) == pgid and fields[0] != b"Z":
                members.append(int(entry.name))
    return members


def _running(pid: int) -> bool:
    fields = stat_fields(pid)
    return fields is not None and fields[0] != b"Z"


def _tagged(tag: str) -> list[int]:
    """Processes whose environment holds ``tag`` (``NAME=value``): the call's, wherever they went."""
    needle = tag.encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as handle:
                if needle in handle.read().split(b"\0"):
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def _signal_group(pgid: int, signum: int, *, spare_leader: bool = False) -> None:
    """Signal the group; with ``spare_leader``, every member but its leader (bubblewrap, whose
    death would kill the rest at once, before they can use their grace)."""
    if not spare_leader or signum == signal.SIGKILL:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signum)
        return
    for pid in _members(pgid):
        if pid != pgid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)


def _returncode(status: int, confined: bool) -> int:
    """The tool's status as Popen gives it (-N: killed by signal N). bubblewrap says 128+N for
    that, as a shell does, so a tool that exits 128+N itself is taken as killed by N too."""
    if confined and status > 128 and status - 128 in signal.valid_signals():
        return -(status - 128)
    return status


class _Run:
    """The event loop of one process: pipes, exit and deadlines in a single selector."""

    def __init__(self, spec: ProcessSpec, proc: subprocess.Popen[bytes], started: float,
                 on_tick: Callable[[], bool] | None) -> None:
        self.spec = spec
        self.on_tick = on_tick
        self.next_tick = started
        self.stopped = False
        self.proc = proc
        self.pgid = proc.pid
        self.started = started
        self.selector = selectors.DefaultSelector()
        self.stdout = _Capture(spec.capture_limit, spec.spill_path, spec.file_limit)
        self.stderr = _Capture(spec.capture_limit, spec.stderr_path, spec.file_limit)
        self.exited_at: float | None = None
        self.timed_out = False
        #: When the next escalation (SIGTERM -> SIGKILL) is due, once stopping began.
        self.kill_at: float | None = None
        self.stopping = False
        self.killed_at: float | None = None
        #: Processes of the call that left its process group (found by ``spec.tag``).
        self.escaped: list[int] = []
        self.searched = False
        self._pending = memoryview(spec.stdin or b"")

        if proc.stdout is not None:
            self._register(proc.stdout, self.stdout)
        if proc.stderr is not None:
            self._register(proc.stderr, self.stderr)
        if proc.stdin is not None:
            os.set_blocking(proc.stdin.fileno(), False)
            self.selector.register(proc.stdin, selectors.EVENT_WRITE, "stdin")
        self.pidfd: int | None = None
        if hasattr(os, "pidfd_open"):
            try:
                self.pidfd = os.pidfd_open(proc.pid)
                self.selector.register(self.pidfd, selectors.EVENT_READ, "exit")
            except OSError:
                self.pidfd = None

    def _register(self, stream: IO[bytes], capture: _Capture) -> None:
        os.set_blocking(stream.fileno(), False)
        self.selector.register(stream, selectors.EVENT_READ, capture)

    def _close(self, fileobj: Any) -> None:  # a pipe or the pidfd, as the selector hands them back
        self.selector.unregister(fileobj)
        if isinstance(fileobj, int):
            os.close(fileobj)
        else:
            fileobj.close()

    def _pipes_open(self) -> bool:
        return any(key.data != "exit" for key in self.selector.get_map().values())

    def _on_ready(self, key: selectors.SelectorKey) -> None:
        if key.data == "exit":
            self._close(key.fileobj)
            self._reap()
        elif key.data == "stdin":
            try:
                written = os.write(key.fd, self._pending[:_CHUNK])
                self._pending = self._pending[written:]
            except (BrokenPipeError, OSError):
                self._pending = memoryview(b"")
            if not self._pending:
                self._close(key.fileobj)
        else:
            try:
                chunk = os.read(key.fd, _CHUNK)
            except BlockingIOError:
                return
            if chunk:
                key.data.feed(chunk)
            else:
                self._close(key.fileobj)

    def _reap(self) -> None:
        if self.exited_at is None and self.proc.poll() is not None:
            self.exited_at = time.monotonic()

    def _signal(self, signum: int) -> None:
        _signal_group(self.pgid, signum, spare_leader=bool(self.spec.wrapper))
        for pid in self.escaped:
            try:
                os.kill(pid, signum)
            except (ProcessLookupError, PermissionError):
                pass

    def _escalate(self, now: float) -> None:
        """Stop what is left: SIGTERM now, SIGKILL when the grace is over."""
        if not self.stopping:
            self.stopping = True
            self._signal(signal.SIGTERM)
            self.kill_at = now + self.spec.kill_grace
        elif self.kill_at is not None and now >= self.kill_at:
            self._signal(signal.SIGKILL)
            self.kill_at = None
            self.killed_at = now

    def _alive(self) -> bool:
        return group_alive(self.pgid) or any(_running(pid) for pid in self.escaped)

    def _finished(self, now: float) -> bool:
        """Decide, once the tool has exited, whether anything is still worth waiting for."""
        assert self.exited_at is not None
        if self._pipes_open() and now < self.exited_at + DRAIN_SECONDS and not self.stopping:
            return False  # the last output may still be in flight
        # A sandbox ends with its program: what is left in it (bubblewrap's init, what the tool
        # left running) is being killed by the kernel, and nothing of it can be anywhere else.
        if self.spec.wrapper or not self._alive():
            holders = not self.spec.wrapper and (self._pipes_open() or self.spec.stdout_file is not None)
            if holders and self.spec.tag and not self.searched:
                # Someone outside the group holds the pipes (or, writing to files, may be
                # anywhere): a process that left it with setsid. It still carries the
                # call's environment, so it can be found.
                self.searched = True
                self.escaped = _tagged(self.spec.tag) if os.path.isdir("/proc/self") else []
                if self.escaped:
                    _log().info("tool_left_process_group", pids=self.escaped)
                    self.stopping, self.kill_at, self.killed_at = False, None, None
                    self._escalate(now)
                    return False
            return True
        if self.killed_at is not None and now > self.killed_at + _UNREAPED_SECONDS:
            _log().warning("tool_processes_unreaped", pgid=self.pgid, pids=self.escaped)
            return True
        self._escalate(now)  # left behind: stop it
        return False

    def _watchdog(self, deadline: float, done: threading.Event) -> None:
        """Stop the tool at its deadline even while ``on_tick`` holds the loop (a flood of notes).

        It steps in only when the loop is late, so the loop's own escalation stays the rule.
        """
        if done.wait(max(0.0, deadline + _LATE_SECONDS - time.monotonic())) or self.timed_out:
            return
        self.timed_out = True
        _log().info("tool_timed_out", pid=self.proc.pid, timeout=self.spec.timeout, loop_busy=True)
        self._signal(signal.SIGTERM)
        if not done.wait(self.spec.kill_grace):
            self._signal(signal.SIGKILL)

    def run(self) -> ProcessOutcome:
        done = threading.Event()
        if self.on_tick is not None and self.spec.timeout is not None:
            threading.Thread(target=self._watchdog, args=(self.started + self.spec.timeout, done), daemon=True,
                             name=f"zagent-deadline-{self.proc.pid}").start()
        try:
            self._loop()
        except BaseException:
            # Our failure (or Ctrl-C) must not leave the tool running unwatched.
            self._signal(signal.SIGKILL)
            with contextlib.suppress(Exception):
                self.proc.wait(timeout=1)
            raise
        finally:
            done.set()
            for key in list(self.selector.get_map().values()):
                self._close(key.fileobj)
            self.selector.close()
            for capture in (self.stdout, self.stderr):
                capture.close()
        self.proc.wait()
        ended = self.exited_at or time.monotonic()
        return ProcessOutcome(
            pid=self.proc.pid,
            returncode=_returncode(self.proc.returncode, bool(self.spec.wrapper)),
            timed_out=self.timed_out,
            stdout=bytes(self.stdout.tail),
            stdout_total=self.stdout.total,
            stderr=bytes(self.stderr.tail),
            stderr_total=self.stderr.total,
            stderr_spilled=self.stderr.spill_path if self.stderr.spilled else None,
            spilled=self.stdout.spill_path if self.stdout.spilled else None,
            duration=ended - self.started,
            stopped=self.stopped,
        )

    def _loop(self) -> None:
        deadline = self.started + self.spec.timeout if self.spec.timeout is not None else None
        while True:
            now = time.monotonic()
            self._tick(now)
            if self.exited_at is None:
                if deadline is not None and now >= deadline and not self.timed_out:
                    self.timed_out = True
                    _log().info("tool_timed_out", pid=self.proc.pid, timeout=self.spec.timeout)
                if self.timed_out or self.stopped:
                    self._escalate(now)
            elif self._finished(now):
                break

            for key, _ in self.selector.select(self._wait_seconds(deadline, now)):
                self._on_ready(key)
            if self.pidfd is None or self.stopping:
                self._reap()

    def _tick(self, now: float) -> None:
        """Call ``on_tick`` when it is due, and stop the process if it asks to."""
        if self.on_tick is None or now < self.next_tick:
            return
        self.next_tick = now + TICK_SECONDS
        if self.on_tick() and not self.stopped and self.exited_at is None:
            self.stopped = True
            _log().info("tool_stop_requested", pid=self.proc.pid)

    def _wait_seconds(self, deadline: float | None, now: float) -> float:
        """How long the loop may wait for the pipes before something else is due."""
        polling = self.stopping or (self.pidfd is None and self.exited_at is None)
        waits = [_POLL_SECONDS if polling else (TICK_SECONDS if self.on_tick else 1.0)]
        if deadline is not None and not self.timed_out:
            waits.append(deadline - now)
        if self.kill_at is not None:
            waits.append(self.kill_at - now)
        if self.exited_at is not None:
            waits.append(self.exited_at + DRAIN_SECONDS - now)
        return max(0.0, min(waits))


def _start_error(spec: ProcessSpec, exc: OSError) -> str:
    """Why the program did not start, naming what was missing (the program or the folder)."""
    if exc.filename is not None and str(exc.filename) == str(spec.cwd):
        return f"could not start {spec.argv[0]}: its working folder {spec.cwd} does not exist"
    return f"could not start {spec.argv[0]}: {exc.strerror or exc}"


def unstartable(program: str, cwd: Path, env: dict[str, str]) -> OSError | None:
    """What starting ``program`` in ``cwd`` would fail with, looked for as ``execvp`` would:
    inside a wrapper (the sandbox), the wrapper starts, and only then finds that the program
    cannot; this says it as starting the program itself would have."""
    if not cwd.is_dir():
        return FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(cwd))
    if os.sep not in program:
        return None if shutil.which(program, path=env.get("PATH", os.defpath)) else FileNotFoundError(
            errno.ENOENT, os.strerror(errno.ENOENT), program)
    path = cwd / program
    if not path.is_file():
        return FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
    return None if os.access(path, os.X_OK) else PermissionError(errno.EACCES, os.strerror(errno.EACCES), program)


def run_process(spec: ProcessSpec, on_tick: Callable[[], bool] | None = None,
                on_start: Callable[[int], None] | None = None) -> ProcessOutcome:
    """Run ``spec`` to completion (or its timeout) and report what happened.

    ``on_start`` gets the pid once the process runs. ``on_tick`` is called about every
    ``TICK_SECONDS`` while it runs (to tail its notes, say); returning True stops the
    process tree as a timeout would. Never raises for the tool's behaviour: a program
    that cannot start comes back with ``start_error`` set.
    """
    started = time.monotonic()
    stdout: int | BinaryIO = subprocess.PIPE
    stderr: int | BinaryIO = subprocess.STDOUT if spec.merge_stderr else subprocess.PIPE
    with contextlib.ExitStack() as files:
        if spec.stdout_file is not None:
            stdout = files.enter_context(spec.stdout_file.open("ab"))
            if not spec.merge_stderr and spec.stderr_path is not None:
                stderr = files.enter_context(spec.stderr_path.open("ab"))
        try:
            failure = unstartable(spec.argv[0], spec.cwd, spec.env) if spec.wrapper else None
            if failure is not None:
                raise failure
            proc = subprocess.Popen(
                [*spec.wrapper, *spec.argv],
                cwd=spec.cwd,
                env=spec.env,
                stdin=subprocess.PIPE if spec.stdin is not None else subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,
            )
        except (OSError, ValueError) as exc:
            return ProcessOutcome(
                pid=None, returncode=None, timed_out=False, stdout=b"", stdout_total=0, stderr=b"", stderr_total=0,
                spilled=None, duration=time.monotonic() - started,
                start_error=_start_error(spec, exc) if isinstance(exc, OSError) else f"could not start: {exc}",
            )
    if on_start is not None:
        on_start(proc.pid)
    outcome = _Run(spec, proc, started, on_tick).run()
    if spec.stdout_file is None:
        return outcome
    return dataclasses.replace(
        outcome,
        stdout_total=spec.stdout_file.stat().st_size,
        spilled=spec.stdout_file,
        stderr_total=spec.stderr_path.stat().st_size if spec.stderr_path and spec.stderr_path.exists() else 0,
        stderr_spilled=spec.stderr_path,
    )
