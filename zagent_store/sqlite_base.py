"""What every part of :class:`~zagent_store.sqlite.SQLiteJournal` shares: the file's connection,
its locks and its one write transaction, and the errors SQLite's failures leave as.

``SQLiteJournal`` is built from one class per capability of the journal protocols
(``sqlite_leases.py``: who drives a session; ``sqlite_admin.py``: audit, counts and health;
``sqlite.py``: the event log, its snapshots and the session index), each a subclass of
:class:`SQLiteBase`, and combined by inheritance, as eventsourcing combines its recorders
(a process recorder is a subclass of its tracking and application recorders, all over one
recorder base). Inheritance rather than parts that each hold the connection: every part
writes in the same transaction helper on the same connection and lock, and the append
path, which runs once per event, pays no extra hop to reach them.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import sqlite3
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from zagent_core.journal.protocol import JournalError

if TYPE_CHECKING:
    import sqlite_utils

DAMAGED = "run `zagent journal recover {path} NEW_FILE` to copy what can be read into a new journal"
_DAMAGE_SIGNS = ("malformed", "not a database", "corrupt", "decode", "codec")


def damage(path: Path, doing: str, exc: BaseException) -> JournalError:
    """The error for a journal SQLite cannot use: what failed, and what to do."""
    text = str(exc)
    doing = "cannot open" if doing == "open" else f"could not {doing}"
    if isinstance(exc, UnicodeDecodeError) or any(sign in text for sign in _DAMAGE_SIGNS):
        return JournalError(f"{doing} the journal {path}: {text}: the file is damaged; "
                            + DAMAGED.format(path=path))
    if "locked" in text or "busy" in text:
        return JournalError(f"{doing} the journal {path}: {text} (another process held it longer "
                            "than the busy timeout); try again")
    return JournalError(f"{doing} the journal {path}: {text}")


class _WriterLock:
    """One writer at a time across processes, taken before SQLite's own write lock.

    SQLite's busy handler sleeps with growing back-off while another connection writes,
    so under steady contention a writer can lose the race for seconds and then fail
    with "database is locked" (bench/journal_writers.py: 8 writers, one failed after
    5 s). zagent's writers first wait for an ``flock`` on ``<journal>-lock``, which the
    kernel hands over the moment it is released (and releases when its holder dies),
    so they take turns; SQLite's lock is then free but for raw writers, whom the busy
    timeout still covers. Only SQLite calls run under it. A home where the file cannot
    be made falls back to SQLite's busy handler alone.
    """

    def __init__(self, path: Path) -> None:
        try:
            self.fd: int | None = os.open(f"{path}-lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError:
            self.fd = None

    def __enter__(self) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def connect_read_only(path: Path) -> sqlite3.Connection:
    """A connection that writes nothing, not even WAL's shared-memory file when it cannot.

    ``mode=ro`` reads a WAL journal when its ``-shm`` file exists or can be made. In a
    folder nobody may write to, a journal closed cleanly has neither ``-wal`` nor
    ``-shm``; it is then read as ``immutable``. With a ``-wal`` left and no way to read it,
    that would silently skip committed events, so it is refused instead.
    """
    if not path.is_file():
        raise sqlite3.OperationalError(f"no journal file at {path}")
    location = f"file:{urllib.parse.quote(str(path))}"
    conn = sqlite3.connect(f"{location}?mode=ro", uri=True, isolation_level=None, check_same_thread=False)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return conn
    except sqlite3.OperationalError:
        conn.close()
        if Path(f"{path}-wal").exists():
            raise sqlite3.OperationalError(
                "its write-ahead log cannot be read here (the folder is read-only and the journal was not closed "
                "cleanly): open it once where it can be written") from None
    return sqlite3.connect(f"{location}?immutable=1", uri=True, isolation_level=None, check_same_thread=False)


def connect(path: Path, *, read_only: bool, busy_timeout_ms: int, synchronous: str | int) -> sqlite3.Connection:
    """A connection to the journal file as :class:`~zagent_store.sqlite.SQLiteJournal` uses it:
    autocommit (zagent says ``BEGIN`` itself), shared by the engine's threads under its lock, and
    for writing, in WAL mode at ``synchronous``."""
    conn = connect_read_only(path) if read_only else sqlite3.connect(path, isolation_level=None,
                                                                     check_same_thread=False)
    try:
        conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        if not read_only:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={synchronous}")
    except BaseException:
        conn.close()
        raise
    return conn


@contextlib.contextmanager
def reported(path: Path, doing: str) -> Iterator[None]:
    """SQLite's failures inside as the :func:`damage` they are, naming the journal and what it was doing."""
    try:
        yield
    except (sqlite3.Error, UnicodeDecodeError) as exc:
        raise damage(path, doing, exc) from exc


class _Transaction:
    """:meth:`SQLiteBase._transaction`'s context manager. A class, not a generator under
    ``contextlib.contextmanager``: an append runs once per event, and the generator's
    machinery cost about 2 of the 10 µs of Python an append takes (``bench/journal_append.py``)."""

    __slots__ = ("_base", "_doing")

    def __init__(self, base: SQLiteBase, doing: str) -> None:
        self._base = base
        self._doing = doing

    def __enter__(self) -> sqlite3.Connection:
        base = self._base
        base._lock.acquire()
        try:
            base._writer.__enter__()
        except BaseException:
            base._lock.release()
            raise
        try:
            base._conn.execute("BEGIN IMMEDIATE")
        except BaseException as exc:
            self._fail(exc)
            raise
        return base._conn

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if exc is None:
            try:
                self._base._conn.execute("COMMIT")
            except BaseException as failed:
                self._fail(failed)
                raise
            self._release()
        else:
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        """Roll back and let go; raise ``exc`` as a :class:`JournalError` if it is one to map
        (else the caller lets it go on as it is)."""
        conn = self._base._conn
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        finally:
            self._release()
        if isinstance(exc, sqlite3.Error) and not self._base._is_unique_violation(exc):
            raise damage(self._base.path, self._doing, exc) from exc

    def _release(self) -> None:
        self._base._writer.__exit__()
        self._base._lock.release()


class SQLiteBase:
    """The journal file as every part of the journal uses it: one connection, used under a lock
    (the engine's threads take turns), and writes under the writer lock too."""

    def __init__(self, path: Path, conn: sqlite3.Connection, *, read_only: bool) -> None:
        self.path = path
        #: Opened for reading only (``mode=ro``): appends, snapshots and leases fail; nothing
        #: is created, migrated or changed, so it works in a home nobody may write to.
        self.read_only = read_only
        self._conn = conn
        self._lock = threading.Lock()
        self._writer = _WriterLock(path)

    @functools.cached_property
    def db(self) -> sqlite_utils.Database:
        """The journal as a sqlite-utils Database, for schema work and ad-hoc queries.

        Imported on first use: sqlite-utils' import (numpy, where installed) would
        otherwise add tens of milliseconds to every command.
        """
        import sqlite_utils

        return sqlite_utils.Database(self._conn)

    def _transaction(self, doing: str = "write to") -> _Transaction:
        """One write transaction under the lock: committed on success, rolled back otherwise.

        ``sqlite3`` errors leave as :class:`JournalError`; a unique violation is left to
        the caller (see :meth:`_is_unique_violation`), as is any non-SQLite exception.
        """
        return _Transaction(self, doing)

    @staticmethod
    def _version(conn: sqlite3.Connection, session_id: str) -> int:
        """The session's last version as its events say (0: it has none)."""
        row = conn.execute("SELECT max(version) FROM events WHERE session_id = ?", (session_id,)).fetchone()
        return int(row[0] or 0)

    @staticmethod
    def _is_unique_violation(exc: BaseException) -> bool:
        """Whether ``exc`` is the database refusing a second row at the same key."""
        return isinstance(exc, sqlite3.IntegrityError) and "UNIQUE" in str(exc)

    def _opened_by(self, session_id: str, version: int) -> str | None:
        """The zagent that last started or resumed the session, as of its event ``version``, as the
        event's raw body says (it may be of a schema this zagent cannot load); None if none says."""
        with self._lock, reported(self.path, "read"):
            return self._last_opener(session_id, version)

    def _last_opener(self, session_id: str, version: int) -> str | None:
        """:meth:`_opened_by`, for a caller that holds the lock."""
        from zagent_core.journal.events import OPENERS

        row = self._conn.execute(
            "SELECT json_extract(data, '$.zagent_version') FROM events WHERE session_id = ? AND version <= ?"
            f" AND type IN ({', '.join('?' * len(OPENERS))}) AND json_valid(data) ORDER BY version DESC LIMIT 1",
            (session_id, version, *OPENERS)).fetchone()
        return row[0] if row is not None and isinstance(row[0], str) else None

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            self._writer.close()
