"""A session and the sub-agents below it, as their journals tell (``zagent sessions show --tree``).

A parent's state names its children (``SessionState.children``: label, session, task, and
how each spawn ended); each child's own journal gives its status and what it used. The
tree is read from the session asked for down, each session from its latest snapshot and
the events after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from zagent_core.journal.snapshots import open_state
from zagent_core.session.status import first_prompt, session_status

if TYPE_CHECKING:
    from zagent_core.journal.protocol import Journal
    from zagent_core.journal.views import ChildView, SessionState

#: The status of a child its parent journaled (``child_spawned``) but whose session does not
#: exist yet: the crash came before it started (``zagent resume PARENT`` starts it).
NOT_STARTED = "not started"


@dataclass(frozen=True)
class TreeNode:
    """One session of a tree, with what it used itself and its children, in the order spawned."""

    session_id: str
    #: Its parent's name for it (``child-1``...); None for a top-level session (and a fork of a child).
    label: str | None
    #: As ``sessions list`` says it (``running``, ``idle``, ``interrupted``...), or :data:`NOT_STARTED`.
    status: str
    #: The child as its parent sees it: its (latest) task, and how that spawn ended; None for a top-level session.
    view: ChildView | None
    #: The child's task, or a top-level session's first prompt.
    task: str | None
    #: Its own model requests and tokens (its sub-agents' are in theirs).
    requests: int
    input_tokens: int
    output_tokens: int
    #: How long its spawn ran (a child whose spawn ended), or from its first event to its last
    #: (a top-level session); None while its spawn runs.
    duration_ms: int | None
    children: tuple[TreeNode, ...]

    @property
    def outcome(self) -> str:
        """How the spawn ended (``completed``, ``error``, ``aborted``, ``timeout``) when it did,
        else the session's status."""
        return self.view.status if self.view is not None and self.view.status != "running" else self.status

    def total(self, field: str) -> int:
        """``requests``, ``input_tokens`` or ``output_tokens`` of the subtree: this session and all below it."""
        return int(getattr(self, field)) + sum(child.total(field) for child in self.children)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, as ``zagent sessions show --tree --json`` prints it."""
        return {
            "session_id": self.session_id, "label": self.label, "status": self.status, "outcome": self.outcome,
            "task": self.task, "call_id": self.view.call_id if self.view else None,
            "subagent_type": self.view.subagent_type if self.view else None,
            "model": self.view.model if self.view else None,
            "requests": self.requests, "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
            "subtree": {field: self.total(field) for field in ("requests", "input_tokens", "output_tokens")},
            "duration_ms": self.duration_ms,
            "children": [child.to_dict() for child in self.children],
        }


def session_tree(journal: Journal, session_id: str) -> TreeNode | None:
    """The tree from ``session_id`` down; None when the journal has no such session."""
    state = open_state(journal, session_id)
    if state.version == 0:
        return None
    view = None
    if state.parent is not None:  # a child asked for itself: its parent says how its spawn went
        seen = open_state(journal, state.parent.session_id).children.get(state.parent.label)
        view = seen if seen is not None and seen.session_id == session_id else None
    return _node(journal, state, view, {session_id})


def _node(journal: Journal, state: SessionState, view: ChildView | None, seen: set[str]) -> TreeNode:
    children = []
    for child in state.children.values():
        if child.session_id in seen:  # a journal edited into a loop: each session is shown once
            continue
        seen.add(child.session_id)
        child_state = open_state(journal, child.session_id)
        children.append(_node(journal, child_state, child, seen) if child_state.version else _unstarted(child))
    if view is not None:
        task: str | None = view.task
        duration = view.stats.duration_ms if view.status != "running" else None
    else:
        task = first_prompt(journal, state.session_id)
        duration = (round((state.last_at - state.started_at).total_seconds() * 1000)
                    if state.started_at and state.last_at else None)
    return TreeNode(session_id=state.session_id, label=view.label if view else None,
                    status=session_status(journal, state.session_id, state), view=view, task=task,
                    requests=state.model_replies, input_tokens=state.input_tokens,
                    output_tokens=state.output_tokens, duration_ms=duration, children=tuple(children))


def _unstarted(view: ChildView) -> TreeNode:
    return TreeNode(session_id=view.session_id, label=view.label, status=NOT_STARTED, view=view, task=view.task,
                    requests=0, input_tokens=0, output_tokens=0, duration_ms=None, children=())
