"""The journal protocols stack by capability, and each store says which one it keeps."""

from __future__ import annotations

from pathlib import Path

import pytest

from zagent_core import Journal
from zagent_core.journal.protocol import AdminJournal, EventLog, Leases, SessionIndex, SnapshotLog
from zagent_store import MemoryJournal, SQLiteJournal


def test_each_protocol_asks_for_the_one_below_it() -> None:
    assert issubclass(SnapshotLog, EventLog) and issubclass(SessionIndex, SnapshotLog)
    assert issubclass(Journal, SessionIndex) and issubclass(Journal, Leases) and issubclass(AdminJournal, Journal)


def test_the_sql_stores_are_admin_journals_and_memory_a_journal(tmp_path: Path) -> None:
    from zagent_store.postgres import PostgresJournal

    assert issubclass(SQLiteJournal, AdminJournal) and issubclass(PostgresJournal, AdminJournal)
    with SQLiteJournal(tmp_path / "journal.db") as journal:
        assert isinstance(journal, AdminJournal)
    memory = MemoryJournal()
    assert isinstance(memory, Journal) and not isinstance(memory, AdminJournal)


def test_a_store_that_lacks_a_method_cannot_be_made() -> None:
    class Unfinished(Journal):
        def check(self) -> list[str]:
            return []

    with pytest.raises(TypeError, match="abstract"):
        Unfinished()  # type: ignore[abstract]


def test_anything_with_the_methods_is_an_event_log_without_subclassing() -> None:
    class Events:
        def append(self, *args: object, **kwargs: object) -> None: ...
        def read(self, *args: object, **kwargs: object) -> None: ...
        def read_last(self, *args: object) -> None: ...
        def head(self, *args: object) -> None: ...
        def has_call(self, *args: object) -> None: ...

    assert isinstance(Events(), EventLog) and not isinstance(Events(), SnapshotLog)
