"""What a driver of sessions refuses to do, and why: the errors of ``drive/``.

Each message is a sentence a person can act on; a driver shows it as it is (the CLI as a
usage error, exit 2, except a refused decision, exit 1)::

    DriveError
     ├── WorkspaceError           the workspace is not a folder
     ├── UnknownToolError         no loaded tool (nor built-in) of that name
     ├── NoModelError             no model to run with, or a spec that names none
     ├── SessionUnavailableError  no such session, one that ended, one another driver holds
     ├── WaitsForPersonError      a prompt for a session that waits on a person first
     ├── WaitedChildError         a sub-agent its parent's spawn call drives
     ├── NothingToContinueError   every session of the journal has ended
     ├── DecisionRefusedError     nothing waits for the answer or decision given
     └── CompactionError          the conversation could not be summarised

    Stopped                       a person stopped the drive (Ctrl-C, SIGTERM): no error
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zagent_core.errors import ZagentError

if TYPE_CHECKING:
    from zagent_core.journal.views import SessionState


class DriveError(ZagentError):
    """A driver was asked for something the session's rules refuse."""


class WorkspaceError(DriveError):
    """The workspace folder tools work in is not a folder."""


class UnknownToolError(DriveError):
    """The tool named is not one the home loaded (nor a built-in)."""


class NoModelError(DriveError):
    """No model to run with: none given, journaled or configured, or a spec that loads none."""


class SessionUnavailableError(DriveError):
    """The session cannot be driven here: unknown, ended, or held by another driver."""


class WaitsForPersonError(DriveError):
    """A prompt was given to a session that waits for an answer or an approval first."""

    def __init__(self, state: SessionState) -> None:
        first = "an answer to its question" if state.questions else "a decision on a call"
        super().__init__(f"session {state.session_id} waits for {first} first")
        #: The parked session, so a driver can say what answers it.
        self.state = state


class WaitedChildError(DriveError):
    """The session is a sub-agent its parent's spawn call waits on: the parent drives it."""


class NothingToContinueError(DriveError):
    """No top-level session of the journal is left open to continue."""


class DecisionRefusedError(DriveError):
    """Nothing waits for the answer or decision given (none asked, or it was taken already)."""


class CompactionError(DriveError):
    """The conversation could not be summarised (the model failed, or gave no summary)."""


class Stopped(Exception):
    """A person stopped the drive (Ctrl-C, SIGTERM); what ran is journaled as interrupted.

    ``resumable``: the session was let go with work that goes on (``zagent resume`` continues
    it); otherwise it was ended.
    """

    def __init__(self, session_id: str, *, resumable: bool) -> None:
        super().__init__(f"session {session_id} stopped")
        self.session_id = session_id
        self.resumable = resumable
