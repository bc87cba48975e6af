"""What a person watching a drive sees, and how they are asked: the callbacks a driver gives.

``drive/`` never prints: the CLI gives a :class:`Display` that writes to the terminal, a
worker gives none (the default shows nothing and asks nobody).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zagent_core.journal.protocol import StoredEvent
    from zagent_core.problems import Problem
    from zagent_core.session.engine import Session


def _unseen(_: object) -> None:
    return None


@dataclass(frozen=True)
class Display:
    """Where a drive's steps go; each part is optional."""

    #: A step of the drive itself, in a line ("resuming X", "waiting for task #2 (build)").
    status: Callable[[str], None] = _unseen
    #: What is wrong with the config or the home's tools, when a session starts.
    problem: Callable[[Problem], None] = _unseen
    #: What the session says to the person: a call's output.
    output: Callable[[str], None] = _unseen
    #: The text of a wake-up the session got (a background task ended).
    wake: Callable[[str], None] = _unseen
    #: Every event the session and its sub-agents append, once committed: the live conversation
    #: (an event's ``session_id`` says whose; a sub-agent's ``child_spawned`` in its parent comes first).
    events: Callable[[StoredEvent], None] | None = None
    #: The model's reply text as it streams; None: each reply is seen once journaled.
    text: Callable[[str], None] | None = None
    #: Given the session once it is open: where its questions and approvals are asked.
    attach: Callable[[Session], None] = _unseen
