"""A session as a person names it: its whole id, or a part of it that no other session's id has.

Ids read ``20261130-044600-3fa2c1``: a person types the start (``20261130-0446``, as git
takes a short hash) or the random end (``3fa2c1``). One that names several sessions is
refused with the candidates, never guessed at: a command given the wrong session could
answer or approve the wrong call.
"""

from __future__ import annotations

from zagent_core.errors import ZagentError
from zagent_core.journal.protocol import SessionIndex

#: Candidates named in the refusal of a part that names several sessions.
SHOWN = 10


class SessionNameError(ZagentError, LookupError):
    """No session of the journal has that id, nor one that starts or ends with it; or several do."""


def resolve_session(journal: SessionIndex, given: str) -> str:
    """The id of the one session ``given`` names: its id, or the start or end of its id
    (:class:`SessionNameError` when none or several do; an id of its own always wins)."""
    found = journal.find_sessions(given, SHOWN + 1) if given else []
    if found and (found[0] == given or len(found) == 1):
        return found[0]
    if not found:
        raise SessionNameError(f'no session "{given}" in the journal (no id is, starts or ends with it); '
                               "`zagent sessions list` shows them")
    lines = "".join(f"\n  {candidate}" for candidate in found[:SHOWN]) + ("\n  ..." if len(found) > SHOWN else "")
    raise SessionNameError(f'"{given}" names more than one session; give more of its id:{lines}')
