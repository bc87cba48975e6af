"""Journal implementations for zagent: SQLite (embedded, the default), PostgreSQL and in-memory."""

from zagent_store.memory import MemoryJournal
from zagent_store.opening import open_journal
from zagent_store.sqlite import SQLiteJournal

__all__ = ["MemoryJournal", "SQLiteJournal", "open_journal"]
