"""Journal implementations for zagent: SQLite (embedded, the default)."""

from zagent_store.sqlite import SQLiteJournal

__all__ = ["SQLiteJournal"]
