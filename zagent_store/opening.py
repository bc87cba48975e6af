"""Journal URLs: which store a location names, and opening it.

``sqlite:///journal.db`` (relative) and ``sqlite:////abs/journal.db`` (absolute), as
SQLAlchemy spells them, or a bare path, name a SQLite file; ``postgresql://...`` (or
``postgres://...``) a PostgreSQL database, in any form libpq takes
(``postgresql://user:secret@host:5432/db?sslmode=require``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from zagent_core.journal.protocol import AdminJournal, JournalError

if TYPE_CHECKING:
    from zagent_store.sqlite import Synchronous

_POSTGRES = ("postgresql://", "postgres://")


def is_postgres(location: str | os.PathLike[str]) -> bool:
    return str(location).startswith(_POSTGRES)


def sqlite_path(location: str | os.PathLike[str]) -> Path:
    """The file a SQLite location names (a ``sqlite:///`` URL or a bare path)."""
    text = str(location)
    if text.startswith("sqlite:///"):
        return Path(text.removeprefix("sqlite:///"))
    if text.startswith("sqlite:"):
        raise JournalError(f"{text} is not a SQLite journal URL: write sqlite:///relative/path or "
                           "sqlite:////absolute/path")
    if "://" in text:
        raise JournalError(f"{text}: journal URLs start with sqlite:/// or postgresql://")
    return Path(text)


def open_journal(location: str | os.PathLike[str], *, read_only: bool = False,
                 synchronous: Synchronous = "FULL") -> AdminJournal:
    """The journal at ``location``. ``read_only`` and ``synchronous`` concern SQLite's file;
    a PostgreSQL journal commits durably as its server is set up to."""
    if is_postgres(location):
        from zagent_store.postgres import PostgresJournal

        return PostgresJournal(str(location))
    from zagent_store.sqlite import SQLiteJournal

    return SQLiteJournal(sqlite_path(location), read_only=read_only, synchronous=synchronous)


def describe(location: str | os.PathLike[str]) -> str:
    """``location`` for messages: a path as it is, a URL without its password."""
    if is_postgres(location):
        from zagent_store.postgres_base import redacted

        return redacted(str(location))
    return str(sqlite_path(location))
