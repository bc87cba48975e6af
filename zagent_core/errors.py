"""The root of zagent's errors: catch :class:`ZagentError` to catch any failure zagent reports.

Each error lives beside the code that raises it and keeps the built-in base that callers
caught it by before (``except RuntimeError`` still catches a ``JournalError``). The tree::

    ZagentError
     ├ JournalError (RuntimeError) ........ zagent_core.journal.protocol: the journal cannot be read or written
     │  ├ LeaseHeldError .................. zagent_core.journal.protocol: another owner drives the session
     │  ├ LeaseLostError .................. zagent_core.session.leases: another driver took an expired lease over
     │  ├ JournalVersionError ............. zagent_store.sql: a newer zagent made the journal
     │  ├ RecoverError .................... zagent_store.recover: nothing can be recovered from the source
     │  └ CopyError ....................... zagent_store.copy: a journal copy failed its check
     │     ├ CopyRefusedError ............. nothing written: the target is the source, or holds its sessions
     │     │  └ TargetHasSessionsError
     │     └ CopyMismatchError
     ├ ConcurrencyError (RuntimeError) .... zagent_core.journal.protocol: another writer appended first
     ├ EventSchemaError (ValueError) ...... zagent_core.journal.events: an event this zagent cannot read
     │  └ NewerEventError ................. an event type or schema version a newer zagent wrote
     ├ InconsistentJournalError (ValueError) zagent_core.journal.fold: an unknown call or task, a hole in versions
     ├ ExportError (ValueError) ........... zagent_core.history.exports: a file that is not a zagent export
     ├ ModelError (RuntimeError) .......... zagent_core.agent.models: the model could not be asked
     ├ OrphanedCallError (RuntimeError) ... zagent_core.agent.conversation: a tool call without a result
     ├ SessionEndedError (RuntimeError) ... zagent_core.session.writer: the session has ended
     ├ SessionBusyError (RuntimeError) .... zagent_core.session.leases: a live process drives the session
     ├ UnknownSessionError (LookupError) .. zagent_core.session.engine: no such session in the journal
     ├ NoQuestionError (LookupError) ...... zagent_core.session.people: no open question to answer
     ├ NoApprovalError (LookupError) ...... zagent_core.session.people: no call waiting for approval
 ├ InputTooLargeError (ValueError) .... zagent_core.session.typed: a message, answer or reason over its cap
     └ DriveError ......................... zagent_core.drive.errors: what a session's rules refuse a driver
        ├ WorkspaceError, UnknownToolError, NoModelError, SessionUnavailableError
        └ WaitsForPersonError, WaitedChildError, NothingToContinueError, DecisionRefusedError, CompactionError

Not in the tree: exceptions a tool call turns into its result for the model (``PathRefused``,
``StateValueError``, ``SearchError``, ``GlobError``, ``FileProblem``, ``ServerDown``), the
retry signal of a broken model stream (``StreamCut``) and control flow (``Parked``, and
``Stopped``: a person stopped a drive): none
of them reaches a caller of zagent.
"""

from __future__ import annotations


class ZagentError(Exception):
    """A failure zagent reports; the subclass and its message say what failed and what to do."""
