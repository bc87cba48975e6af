"""``python -m zagent_cli`` (and the tests' own drivers) in a real process, without the interpreter's start-up.

A command the tests start costs ~0.3 s of imports before it does anything (more on a loaded
machine), and the suite starts hundreds. The test process has all of zagent imported already
(conftest.py imports every module), so :class:`Popen` forks it and runs the command in the
fork: a real process with its own pid, stdin, stdout, stderr, exit status and signals (a
SIGKILL, a crash point's, a Ctrl-C's SIGINT, a SIGTERM), as ``subprocess.Popen`` gives, in a
few milliseconds; so do the crash tests' drivers (``python tests/crash_driver.py``, ``python -c
CODE``). The fork is made to look like a fresh interpreter: stdio built
as the interpreter builds it, signal handlers, logging and warnings as a new interpreter has
them, the test process's descriptors out of reach, its exit handlers not run.

What a fork cannot be is a fresh interpreter: tests of start-up itself (imports, a Ctrl-C while
they load), of the environment block a process started with (``/proc/PID/environ``, the model
keys taken out of it) or of interpreter variables (``PYTHON*``, the locale) exec as before.
An ``env`` that changes an interpreter variable execs on its own.
"""

from __future__ import annotations

import atexit
import gc
import io
import logging
import os
import runpy
import signal
import sqlite3
import subprocess
import sys
import threading
import traceback
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from zagent_store.sqlite_base import SQLiteBase, connect

#: The command line this module forks instead of executing.
CLI = [sys.executable, "-m", "zagent_cli"]
#: Variables the interpreter reads at start-up: a fork has them as the test process started.
_INTERPRETER_VARIABLES = ("PYTHON", "LC_", "LANG")
#: ... but PYTHONPATH, which a fork puts on sys.path as the interpreter would.
_PATH_VARIABLE = "PYTHONPATH"
#: The warnings filters of a new interpreter started without ``-W`` (a release build).
_FRESH_FILTERS = [("default", None, DeprecationWarning, "__main__", 0),
                  ("ignore", None, DeprecationWarning, None, 0),
                  ("ignore", None, PendingDeprecationWarning, None, 0),
                  ("ignore", None, ImportWarning, None, 0),
                  ("ignore", None, ResourceWarning, None, 0)]


def _interpreter_variables(env: Mapping[str, str]) -> dict[str, str]:
    return {key: value for key, value in env.items()
            if key.startswith(_INTERPRETER_VARIABLES) and key != _PATH_VARIABLE}


class Popen(subprocess.Popen):  # type: ignore[type-arg]
    """``subprocess.Popen``; ``python -m zagent_cli ...``, ``python tests/SCRIPT.py ...`` and
    ``python -c CODE ...`` run in a fork of this process, any other command line as usual."""

    def _execute_child(self, args: Any, executable: Any, preexec_fn: Any, close_fds: bool, pass_fds: Sequence[int],
                       cwd: Any, env: Mapping[str, str] | None, startupinfo: Any, creationflags: int, shell: bool,
                       p2cread: int, p2cwrite: int, c2pread: int, c2pwrite: int, errread: int, errwrite: int,
                       restore_signals: bool, gid: Any, gids: Any, uid: Any, umask: int, start_new_session: bool,
                       *rest: Any) -> None:
        process_group = rest[0] if rest else -1  # Python 3.11 and later
        plain = (executable is None and preexec_fn is None and not shell and gid is None and gids is None
                 and uid is None and umask < 0 and close_fds
                 and (env is None or _interpreter_variables(env) == _interpreter_variables(os.environ)))
        program = _program(args) if plain else None
        if program is None:
            super()._execute_child(  # type: ignore[misc]
                args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo, creationflags, shell,
                p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite, restore_signals, gid, gids, uid, umask,
                start_new_session, *rest)
            return
        with _sqlite_closed() as closed:
            if not closed:  # SQLite is busy in another thread, or a connection could not be let go
                super()._execute_child(  # type: ignore[misc]
                    args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo, creationflags, shell,
                    p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite, restore_signals, gid, gids, uid, umask,
                    start_new_session, *rest)
                return
            pid = os.fork()
            if pid == 0:  # pragma: no cover (the fork's own coverage is not collected)
                try:
                    _run_here(program, cwd, env, (p2cread, c2pwrite, errwrite), tuple(pass_fds),
                              start_new_session, process_group)
                finally:
                    os._exit(1)  # never back into pytest, whatever happened
        self.pid = pid
        self._child_created = True
        self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)  # type: ignore[attr-defined]


#: Every SQLite journal this process opened (the tests', and their engines' heartbeat threads').
_journals: weakref.WeakSet[SQLiteBase] = weakref.WeakSet()
_open_journal = SQLiteBase.__init__


def _tracked(self: SQLiteBase, *args: Any, **kwargs: Any) -> None:
    _open_journal(self, *args, **kwargs)
    _journals.add(self)


SQLiteBase.__init__ = _tracked  # type: ignore[method-assign]


class _Connection(sqlite3.Connection):
    """A connection this process opened, weakly referenced (``sqlite3.Connection`` itself cannot be)."""


#: Every SQLite connection this process opened: its journals', the tests' raw ones, sqlite-utils'.
_connections: weakref.WeakSet[_Connection] = weakref.WeakSet()
_connect = sqlite3.connect


def _connect_tracked(*args: Any, **kwargs: Any) -> sqlite3.Connection:
    if "factory" not in kwargs:
        kwargs["factory"] = _Connection
    connection = _connect(*args, **kwargs)
    if isinstance(connection, _Connection):
        _connections.add(connection)
    return connection


sqlite3.connect = _connect_tracked  # type: ignore[assignment]
#: How long a fork waits for a journal's query in another thread to end before it execs instead.
_REST_WAIT_S = 2.0


def _is_open(connection: sqlite3.Connection) -> bool:
    try:
        connection.total_changes  # noqa: B018 - raises once the connection is closed
    except sqlite3.ProgrammingError:
        return False
    return True


@contextmanager
def _sqlite_closed() -> Iterator[bool]:
    """No SQLite connection open in this process across the fork; yields False if that cannot be.

    SQLite must not be carried across a fork: the fork's SQLite remembers this process's open
    files and their locks, so the command's own connection to the same journal shares that
    memory, and its locks go through descriptors the fork points at /dev/null: they lock
    nothing, and two processes wrote the journal at once ("database disk image is malformed",
    seen under ``test_worker``'s SIGKILLs). So every journal's connection is closed before the
    fork and opened again after, in this process alone; any other open connection (a test's
    raw one) makes the command exec instead. Each journal's lock is held meanwhile, so no other
    thread of this process (a lease heartbeat) uses it, or is inside SQLite when it forks.
    """
    held: list[SQLiteBase] = []
    reopen: list[tuple[SQLiteBase, int, int]] = []
    try:
        for journal in list(_journals):
            if not journal._lock.acquire(timeout=_REST_WAIT_S):
                yield False
                return
            held.append(journal)
        owned = {id(journal._conn) for journal in held}
        if any(_is_open(connection) and id(connection) not in owned for connection in list(_connections)):
            yield False
            return
        for journal in held:
            if _is_open(journal._conn):
                timeout = journal._conn.execute("PRAGMA busy_timeout").fetchone()[0]
                synchronous = journal._conn.execute("PRAGMA synchronous").fetchone()[0]
                journal._conn.close()
                reopen.append((journal, timeout, synchronous))
        yield True
    finally:
        for journal, timeout, synchronous in reopen:  # here only: the fork never leaves the with block
            journal._conn = connect(journal.path, read_only=journal.read_only, busy_timeout_ms=timeout,
                                    synchronous=synchronous)
            journal.__dict__.pop("db", None)  # sqlite-utils' view of the closed connection
        for journal in held:
            journal._lock.release()


def run(args: list[str], *, input: Any = None, capture_output: bool = False, timeout: float | None = None,
        check: bool = False, **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run`` with :class:`Popen`."""
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    with Popen(args, **kwargs) as process:
        try:
            stdout, stderr = process.communicate(input, timeout=timeout)
        except BaseException:
            process.kill()
            raise
        returncode = process.poll()
        assert returncode is not None
    if check and returncode:
        raise subprocess.CalledProcessError(returncode, args, output=stdout, stderr=stderr)
    return subprocess.CompletedProcess(args, returncode, stdout, stderr)


@dataclass(frozen=True)
class _Program:
    argv: list[str]  # sys.argv, as the interpreter sets it
    path: str | None  # what the interpreter puts first on sys.path (None: the current folder, as -m and -c do)
    main: Callable[[], object]


def _program(args: object) -> _Program | None:
    """What a command line runs, if a fork can run it: zagent's CLI, a script of the tests, code."""
    if not isinstance(args, (list, tuple)) or not all(isinstance(arg, str) for arg in args) or len(args) < 2:
        return None
    if args[0] != sys.executable:
        return None
    if list(args[:3]) == CLI:
        cli = os.path.join(os.path.dirname(__import__("zagent_cli").__file__), "__main__.py")
        return _Program([cli, *args[3:]], None, _zagent_cli_main)
    if args[1] == "-c" and len(args) >= 3:
        code = args[2]
        return _Program(["-c", *args[3:]], None, lambda: exec(compile(code, "<string>", "exec"),  # noqa: S102
                                                              {"__name__": "__main__", "__builtins__": __builtins__}))
    script = os.path.abspath(args[1])
    if os.path.dirname(script) == _TESTS and script.endswith(".py"):
        return _Program([args[1], *args[2:]], _TESTS, lambda: runpy.run_path(script, run_name="__main__"))
    return None


_TESTS = os.path.dirname(os.path.abspath(__file__))


def _zagent_cli_main() -> None:
    from zagent_cli.entry import main  # what zagent_cli/__main__.py runs

    main()


#: The test process's objects the fork replaces, kept referenced: none may be finalised there.
_kept: list[object] = []


def _run_here(program: _Program, cwd: Any, env: Mapping[str, str] | None, stdio: tuple[int, int, int],
              pass_fds: tuple[int, ...], start_new_session: bool, process_group: int) -> None:
    """In the fork: become the interpreter running ``program``, then exit with its status."""
    gc.freeze()  # the test process's objects stay as they are: no finaliser of theirs runs here
    atexit._clear()  # pytest's exit handlers are not this process's
    _descriptors(stdio, pass_fds)
    if start_new_session:
        os.setsid()
    if process_group >= 0:
        os.setpgid(0, process_group)
    if cwd is not None:
        os.chdir(cwd)
    if env is not None:
        os.environ.clear()
        os.environ.update(env)
    _fresh_interpreter_state()
    sys.argv = program.argv
    extra = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    sys.path[:0] = [program.path or os.getcwd(), *[entry for entry in extra if entry not in sys.path]]
    status = 0
    try:
        program.main()
    except SystemExit as stop:
        status = _exit_status(stop.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        _flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # as the interpreter dies of an unhandled Ctrl-C
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        traceback.print_exc()
        status = 1
    threading._shutdown()  # type: ignore[attr-defined]  # the interpreter waits for non-daemon threads
    atexit._run_exitfuncs()
    if not _flush() and status == 0:
        status = 120  # as the interpreter exits when flushing stdout fails
    os._exit(status)


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _flush() -> bool:
    flushed = True
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            flushed = False
    return flushed


def _descriptors(stdio: tuple[int, int, int], pass_fds: tuple[int, ...]) -> None:
    """Descriptors 0 to 2 as Popen set them up; every other one of the test process (pipes of
    other commands, journals, sockets) let go, as ``close_fds`` does. They are pointed at
    /dev/null rather than closed, so that no number is reused under an object that owns it."""
    sources = [os.dup(fd) if fd != -1 else -1 for fd in stdio]
    for target, source in enumerate(sources):
        if source != -1:
            os.dup2(source, target)
    devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd != devnull and fd not in pass_fds:
            try:
                os.dup2(devnull, fd, inheritable=False)
            except OSError:  # the listing's own descriptor, gone by now
                pass
    for fd in pass_fds:
        os.set_inheritable(fd, True)


def _fresh_interpreter_state() -> None:
    """Signals, stdio, logging, warnings and the temporary folder as a new interpreter has them."""
    import faulthandler
    import tempfile

    faulthandler.disable()
    tempfile.tempdir = None  # found again from the command's $TMPDIR, not the test process's
    signal.set_wakeup_fd(-1)
    for number in signal.valid_signals():
        try:
            handler = signal.getsignal(number)
        except (OSError, ValueError):
            continue
        if callable(handler) and number != signal.SIGINT:
            signal.signal(number, signal.SIG_DFL)
    if signal.getsignal(signal.SIGINT) != signal.SIG_IGN:  # an ignored SIGINT is inherited through exec
        signal.signal(signal.SIGINT, signal.default_int_handler)
    _kept.extend([sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__, sys.__stderr__])
    reference = sys.__stdout__ or sys.stdout
    encoding, errors = reference.encoding, reference.errors
    stdin = io.TextIOWrapper(io.open(0, "rb", closefd=False), encoding=encoding, errors=errors, newline="\n")
    stdout = io.TextIOWrapper(io.open(1, "wb", closefd=False), encoding=encoding, errors=errors, newline="\n",
                              line_buffering=os.isatty(1))
    stderr = io.TextIOWrapper(io.open(2, "wb", closefd=False), encoding=encoding, errors="backslashreplace",
                              newline="\n", line_buffering=True)
    sys.stdin = sys.__stdin__ = stdin
    sys.stdout = sys.__stdout__ = stdout
    sys.stderr = sys.__stderr__ = stderr
    root = logging.getLogger()
    for handler in root.handlers[:]:  # pytest's capture handlers
        root.removeHandler(handler)
    root.setLevel(logging.WARNING)
    logging.disable(logging.NOTSET)
    warnings.filters[:] = _FRESH_FILTERS
    warnings._filters_mutated()  # type: ignore[attr-defined]
    warnings.showwarning = warnings._showwarning_orig  # type: ignore[attr-defined]
    warnings._showwarnmsg_impl = _show_warning  # type: ignore[attr-defined]
    _forget_what_this_process_learned()


def _forget_what_this_process_learned() -> None:
    """zagent's per-process caches (whether bubblewrap runs here, found on the PATH) and the
    model keys it took: a new process has learned nothing yet."""
    from zagent_core.tools import credentials

    credentials._taken.clear()
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] in ("zagent_core", "zagent_store", "zagent_cli"):
            for value in list(vars(module).values()):
                if callable(getattr(value, "cache_clear", None)):
                    value.cache_clear()


def _show_warning(message: warnings.WarningMessage) -> None:
    try:
        sys.stderr.write(warnings._formatwarnmsg(message))  # type: ignore[attr-defined]
    except OSError:
        pass
