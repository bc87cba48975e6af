"""One error tree: every error zagent reports is a ``ZagentError`` and keeps the built-in base
callers caught it by (the tree is drawn in ``zagent_core/errors.py``)."""

from __future__ import annotations

import pytest

from zagent_core.agent.conversation import OrphanedCallError
from zagent_core.agent.models import ModelError
from zagent_core.errors import ZagentError
from zagent_core.history.exports import ExportError
from zagent_core.journal.events import EventSchemaError
from zagent_core.journal.protocol import ConcurrencyError, JournalError, LeaseHeldError
from zagent_store.copy import CopyError, CopyMismatchError, CopyRefusedError, TargetHasSessionsError
from zagent_store.recover import RecoverError
from zagent_store.sql import JournalVersionError


@pytest.mark.parametrize("error, kept", [
    (JournalError, RuntimeError), (ConcurrencyError, RuntimeError), (EventSchemaError, ValueError),
    (ExportError, ValueError), (ModelError, RuntimeError), (OrphanedCallError, RuntimeError),
])
def test_each_error_is_a_zagent_error_and_keeps_its_builtin_base(error: type[Exception], kept: type[Exception]) -> None:
    assert issubclass(error, ZagentError) and issubclass(error, kept)


@pytest.mark.parametrize("error", [LeaseHeldError, JournalVersionError, RecoverError, CopyError, CopyRefusedError,
                                   TargetHasSessionsError, CopyMismatchError])
def test_the_stores_errors_are_journal_errors(error: type[Exception]) -> None:
    assert issubclass(error, JournalError)


def test_one_except_catches_what_a_store_raises() -> None:
    with pytest.raises(ZagentError, match="version 2"):
        raise ConcurrencyError("s", 1, 2)


def test_the_sessions_errors_are_zagent_errors_and_keep_their_builtin_bases() -> None:
    from zagent_core.session.engine import (
        InputTooLargeError,
        NoApprovalError,
        NoQuestionError,
        SessionEndedError,
        UnknownSessionError,
    )
    from zagent_core.session.leases import SessionBusyError

    for error, kept in [(SessionEndedError, RuntimeError), (SessionBusyError, RuntimeError),
                        (UnknownSessionError, LookupError), (NoQuestionError, LookupError),
                        (NoApprovalError, LookupError), (InputTooLargeError, ValueError)]:
        assert issubclass(error, ZagentError) and issubclass(error, kept), error


def test_a_damaged_journal_and_a_refused_drive_are_zagent_errors() -> None:
    from zagent_core.drive.errors import DriveError, NoModelError
    from zagent_core.journal.fold import InconsistentJournalError

    assert issubclass(InconsistentJournalError, ZagentError) and issubclass(InconsistentJournalError, ValueError)
    assert issubclass(NoModelError, DriveError) and issubclass(DriveError, ZagentError)
