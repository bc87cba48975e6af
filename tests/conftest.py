"""Shared fixtures: a real agent home in a temporary folder, a real journal.

The journal is SQLite's, and in the modules marked ``stores`` each test runs twice: on
SQLite and on PostgreSQL (a throwaway server per test worker, a new database per test),
as eventsourcing runs its recorder tests per database.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import forked

from zagent_core import Engine, Home
from zagent_core.config import Config, LimitsConfig
from zagent_core.journal.protocol import Journal
from zagent_store import SQLiteJournal

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "home"
PYTHON = sys.executable


def _import_every_module(packages: tuple[str, ...] = ("zagent_core", "zagent_store", "zagent_cli", "anyio")) -> None:
    """Import all of zagent, and of anyio, now, while the test process has one thread.

    pytest rewrites the asserts of the modules of every distribution that holds a pytest11
    plugin (zagent's, and anyio's, which the MCP SDK brings), with ``ast.parse`` at import
    time. CPython 3.11 keeps the AST constructor's recursion depth in state shared by the
    interpreter's threads, so a module imported lazily in a thread (the CLI's commands, the
    MCP client's event loop) while another thread parses another fails with ``SystemError:
    AST constructor recursion depth mismatch`` (CI saw it once in 1,100 tests;
    cpython#106905). Imported up front, none of them is parsed once a test has started threads.
    """
    import importlib
    import pkgutil

    for name in packages:
        package = importlib.import_module(name)
        for module in pkgutil.walk_packages(package.__path__, prefix=f"{name}.", onerror=lambda _: None):
            if module.name.endswith(".__main__"):  # running it would run the CLI
                continue
            try:
                importlib.import_module(module.name)
            except ImportError:  # an optional backend that is not installed (anyio's trio)
                if name.startswith("zagent"):
                    raise


_import_every_module()

# A suite started in the background by a script (``.ci/run &``) inherits SIGINT ignored, and so
# would every command the tests start: each Ctrl-C test's SIGINT would then do nothing. The
# tests' processes start as from a terminal, with Python's own handler (reset by exec).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _stdin_not_handed_on() -> None:
    """Commands read a stdin that is a pipe or a file (``cat f | zagent run PROMPT``), and wait a
    few seconds for a pipe that sends nothing: a runner whose own stdin is such a pipe (an
    agent's harness, ``docker run -i``) must not hand it to every command a test starts. A
    terminal is kept: zagent never reads one, and a debugger does. (pytest-xdist's workers
    already have /dev/null there: execnet moved its channel off descriptor 0.)"""
    if not os.isatty(0):
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)


_stdin_not_handed_on()


#: How a tool's shell command writes down a pid the test can find (``echo "$NAMESPACED$!"``): a
#: call's processes run in a PID namespace of their own (the sandbox), where pids are not the test's.
NAMESPACED = "$(readlink /proc/self/ns/pid):"
#: The same in a Python tool: ``NAMESPACED_PID(pid)`` (``os`` imported).
NAMESPACED_PID = "lambda pid: f\"{os.readlink('/proc/self/ns/pid')}:{pid}\""


def host_pid(recorded: int | str) -> int | None:
    """The pid, as this process sees it, of a pid a tool wrote down (as :data:`NAMESPACED` says),
    or None when no such process runs."""
    if isinstance(recorded, int) or ":" not in recorded:
        return int(recorded)
    namespace, _, inner = recorded.strip().rpartition(":")
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry.name}/ns/pid") != namespace:
                continue
            with open(f"/proc/{entry.name}/status") as handle:
                nspid = next(line for line in handle if line.startswith("NSpid:")).split()
        except (OSError, StopIteration):
            continue
        if nspid[-1] == inner:
            return int(entry.name)
    return None


def running(pid: int | str) -> bool:
    """Whether ``pid`` (or a pid a tool wrote down, see :func:`host_pid`) is a live process
    (zombies, which only wait to be reaped, are not)."""
    found = host_pid(pid)
    if found is None:
        return False
    try:
        with open(f"/proc/{found}/stat", "rb") as handle:
            state = handle.read().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in (b"Z", b"X")


def wait_for(condition: Callable[[], Any], what: str = "the condition", seconds: float = 5.0) -> None:
    """Poll ``condition`` until it holds; fail, saying ``what``, after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def read_terminal(leader: int, on_output: Callable[[bytes], None] | None = None) -> bytes:
    """All that a pty's programs write, read from its ``leader`` end until every one of them
    closed it (the end is then closed too); ``on_output`` sees the output as it grows."""
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # EIO: it ended, the terminal has no other end any more
            break
        if not chunk:
            break
        shown += chunk
        if on_output is not None:
            on_output(shown)
    os.close(leader)
    return shown


def run_on_terminal(argv: list[str], cwd: Path, typed: bytes) -> bytes:
    """Run ``argv`` with a terminal (a pty) for stdin, stdout and stderr, ``typed`` already
    waiting in its input; returns all it printed, once it exited with status 0."""
    import pty
    import subprocess

    controller, terminal = pty.openpty()
    run = forked.Popen(argv, stdin=terminal, stdout=terminal, stderr=terminal, cwd=cwd)
    os.close(terminal)
    os.write(controller, typed)  # waits in the terminal's buffer until the program reads it
    shown = read_terminal(controller)
    assert run.wait(timeout=60) == 0, shown
    return shown


def write_tool(home: Path, folder: str, manifest: dict[str, Any] | str, files: dict[str, str] | None = None) -> Path:
    """Create ``<home>/tools/<folder>/`` with a manifest (dict or raw text) and files."""
    tool_dir = home / "tools" / folder
    tool_dir.mkdir(parents=True, exist_ok=True)
    text = manifest if isinstance(manifest, str) else json.dumps(manifest)
    (tool_dir / f"{folder}.json").write_text(text)
    for name, content in (files or {}).items():
        (tool_dir / name).write_text(textwrap.dedent(content))
    return tool_dir


def python_tool(home: Path, name: str, code: str, **manifest: Any) -> Path:
    """A tool whose program is ``code`` run by this interpreter (absolute path: no PATH shim)."""
    fields: dict[str, Any] = {
        "description": f"test tool {name}",
        "parameters": {"type": "object", "properties": {}, "additionalProperties": True},
        "command": [PYTHON, "main.py"],
    }
    fields.update(manifest)
    return write_tool(home, name, fields, {"main.py": code})


#: Starts a session, runs ``argv[3]`` (JSON arguments of a shell call), prints ``CALLED`` once
#: the call returned, then waits to be killed, as an engine a crash stops.
SHELL_DRIVER = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from zagent_core import Engine, Home
    from zagent_core.config import Config, LimitsConfig
    from zagent_store import SQLiteJournal
    home, workspace = Path(sys.argv[1]), Path(sys.argv[2])
    engine = Engine(Home(home), SQLiteJournal(home / "journal.db"), workspace=workspace,
                    config=Config(limits=LimitsConfig(kill_grace_seconds=0.3)))
    session = engine.start_session("crash")
    print("SESSION", session.session_id, flush=True)
    session.call("shell", json.loads(sys.argv[3]))
    print("CALLED", flush=True)
    time.sleep(300)
""")


def crashed_shell_session(tmp_path: Path, arguments: dict[str, Any],
                     ready: Callable[[], Any] | None = None) -> tuple[Engine, str]:
    """Run the driver until ``ready()`` holds (or its call returned), SIGKILL it, and open its journal again."""
    home, workspace = tmp_path / "home", tmp_path / "ws"
    (home / "tools").mkdir(parents=True)
    workspace.mkdir(exist_ok=True)
    driver = forked.Popen([PYTHON, "-c", SHELL_DRIVER, str(home), str(workspace), json.dumps(arguments)],
                          stdout=subprocess.PIPE, text=True)
    try:
        assert driver.stdout is not None
        session_id = driver.stdout.readline().split()[1]
        if ready is None:
            assert driver.stdout.readline() == "CALLED\n"
        else:
            wait_for(ready, "the driver to get there", seconds=20)
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    engine = Engine(Home(home), SQLiteJournal(home / "journal.db"), workspace=workspace,
                    config=Config(limits=LimitsConfig(kill_grace_seconds=0.3)))
    return engine, session_id


@pytest.fixture
def home_dir(tmp_path: Path) -> Path:
    root = tmp_path / "home"
    (root / "tools").mkdir(parents=True)
    return root


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    return path


STORES = ["sqlite", "postgres"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """The tests of modules marked ``stores`` run once per store (each that uses the ``store``
    fixture, directly or through ``journal``, ``engine`` or ``journal_url``)."""
    if metafunc.definition.get_closest_marker("stores") and "store" in metafunc.fixturenames:
        metafunc.parametrize("store", STORES, indirect=True)


@pytest.fixture
def store(request: pytest.FixtureRequest) -> str:
    """Which journal the test runs on: ``sqlite`` unless its module is marked ``stores``."""
    return str(getattr(request, "param", "sqlite"))


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A throwaway PostgreSQL server for this test process; skips where none is installed."""
    from pg_cluster import server_binaries, throwaway_cluster

    pytest.importorskip("psycopg", reason="psycopg is not installed: pip install -e '.[test,postgres]'")
    if server_binaries() is None:
        pytest.skip("no PostgreSQL server is installed (initdb and pg_ctl not found; set ZAGENT_PG_BIN)")
    with throwaway_cluster() as url:
        yield url


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """The URL of a new, empty database on the throwaway server, dropped after the test."""
    from pg_cluster import fresh_database

    with fresh_database(postgres_server) as url:
        yield url


@pytest.fixture
def journal_url(store: str, home_dir: Path, request: pytest.FixtureRequest) -> str:
    """Where the test's journal is, as ``--journal`` and ``ZAGENT_JOURNAL`` take it."""
    if store == "postgres":
        return str(request.getfixturevalue("postgres_url"))
    return f"sqlite:///{home_dir / 'journal.db'}"


def sql(journal_url: str, query: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    """The rows of ``query`` (``?`` placeholders) on the journal at ``journal_url``, as a
    person's own SQL client sees them: ``sqlite3`` on a SQLite journal, psycopg on PostgreSQL."""
    if journal_url.startswith("sqlite:///"):
        import sqlite3

        # Autocommit, as the sqlite3 shell: a raw write is kept (psycopg's block below commits it).
        db = sqlite3.connect(journal_url.removeprefix("sqlite:///"), isolation_level=None)
        try:
            db.row_factory = sqlite3.Row
            return [dict(row) for row in db.execute(query, params)]
        finally:
            db.close()
    import psycopg
    from psycopg.rows import dict_row

    with psycopg.connect(journal_url, row_factory=dict_row) as db:
        return list(db.execute(query.replace("?", "%s"), params))


@pytest.fixture
def journal(journal_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Journal]:
    """The test's journal; commands the test starts find it through ``ZAGENT_JOURNAL``."""
    from zagent_store import open_journal

    if not journal_url.startswith("sqlite:"):
        monkeypatch.setenv("ZAGENT_JOURNAL", journal_url)
    with open_journal(journal_url) as j:
        yield j


@pytest.fixture
def fast_config() -> Config:
    """Short kill grace so tests of stubborn tools stay quick."""
    return Config(limits=LimitsConfig(kill_grace_seconds=0.3))


@pytest.fixture
def engine(home_dir: Path, journal: Journal, workspace: Path, fast_config: Config) -> Engine:
    return Engine(Home(home_dir), journal, workspace=workspace, config=fast_config)
