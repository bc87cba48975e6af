"""Settling a session no model drives (a ``tools run`` cut off, say), and ending it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zagent_core.drive.display import Display
    from zagent_core.session.engine import Session


def settle_without_model(session: Session, display: Display) -> str:
    """Its calls that go on (a spawn's child) finished, its tasks waited for, then the session
    ended; one whose call waits for a person stays parked. Returns why it stopped:
    ``ended``, ``waiting_on_user`` or ``waiting_on_approval``."""
    for call in session.continuing_calls():
        display.status(f"going on with {call.tool} ({call.call_id})")
        display.output(session.continue_call(call).output)
    if session.state.questions or session.state.waiting_approvals:
        return "waiting_on_user" if session.state.questions else "waiting_on_approval"
    for task in session.state.running_tasks:
        display.status(f"waiting for task #{task.task_id} ({task.tool})")
        session.wait_task(task.task_id, None)
    for wake in session.state.pending_wakes.values():
        if wake.reason != "note":
            display.wake(wake.text)
    session.end()
    return "ended"


def end_or_park(session: Session, reason: str) -> None:
    """End an open session with ``reason``, as leaving ``with session:`` does; one that waits
    for a person is only let go, for them to answer."""
    if session.state.status != "open":
        return
    if session.state.questions or session.state.waiting_approvals:
        session.release()
    else:
        session.end(reason)
