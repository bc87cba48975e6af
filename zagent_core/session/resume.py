"""Settling a session after its engine stopped: what a resume decides for everything left open.

It keeps three of the journal's invariants (design.md):

2. Every ``tool_call_started`` is followed, after any crash and resume, by exactly one of
   ``tool_call_finished`` or ``tool_call_interrupted``; every ``task_started`` by exactly
   one of ``task_exited``, ``task_killed``, ``task_interrupted``. A call cut off runs again
   when its tool is ``replay: safe`` (once), else is reported interrupted; one whose tool
   continues (a spawn waiting on its child) stays open and goes on when driven
   (:meth:`Settler.continue_call`); a task is re-attached, finished from its exit record,
   or reported interrupted.
3. Every line a tool appended to its notify file becomes exactly one ``note_received``:
   reading starts at the offset journaled with the last note.
4. A persisted ``wake_requested`` is delivered exactly once: resume leaves pending
   wake-ups pending, for :meth:`Session.deliver`.
"""

from __future__ import annotations

from pathlib import Path

from zagent_core.journal.events import Event, ToolCallFinished, ToolCallInterrupted, ToolCallRequested
from zagent_core.journal.views import ApprovalView, CallView
from zagent_core.session.background import Background, started_result, task_started
from zagent_core.session.calls import CallOutcome, CallRunner
from zagent_core.session.turns import Turns
from zagent_core.session.writer import Writer
from zagent_core.tools import nested, tasks
from zagent_core.tools.validation import validate_arguments


class Settler:
    """Gives every open call a result and every running task an owner, after a restart."""

    def __init__(self, writer: Writer, calls: CallRunner, background: Background, turns: Turns) -> None:
        self._writer = writer
        self._calls = calls
        self._background = background
        self._turns = turns

    def settle(self) -> None:
        """Settle everything the session left open (invariants 2-4 of the module's docstring)."""
        state = self._writer.state
        self._turns.settle_unrequested("zagent stopped before it ran")
        if state.in_turn:
            # A turn cut off after the model's final answer is over: asking again would answer twice.
            # Any other is continued by the agent in a new turn.
            self._turns.end_turn("idle" if state.turn_answered else "interrupted")
        continuing = {call.call_id for call in self.continuing_calls()}
        for call in list(state.calls.values()):
            if call.call_id in state.questions or call.call_id in state.waiting_approvals or call.call_id in continuing:
                continue  # parked (its answer or decision gives it its result), or it goes on when driven
            approval = state.approvals.get(call.call_id)
            if approval is not None:  # approved, and the crash came before it started: it never ran
                self.run_approved(approval)
                continue
            if call.status in ("requested", "running") and call.task_id is None:
                self._settle_call(call)
            elif call.status == "running":
                self._settle_task_start(call)
        for call in list(state.calls.values()):
            if call.notify_file is not None:
                self._background.collect_notes(call.call_id)  # lines written while no engine was reading
        for task in state.running_tasks:
            self._background.poll_task(task.task_id)
        if state.running_tasks:
            self._background.watch()

    def continuing_calls(self) -> list[CallView]:
        """Calls cut off that go on where they were, not settled (a ``spawn`` waiting on its child)."""
        return [call for call in list(self._writer.state.calls.values())
                if call.status in ("requested", "running") and call.task_id is None
                and self._calls.continues(call.tool)]

    def continue_call(self, call: CallView) -> CallOutcome:
        """Carry on with a call of :meth:`continuing_calls`: it gets its real result (or, if the
        config changed under it, a preset gone, the refusal any call would get)."""
        return self._calls.run_journaled(ToolCallRequested(call_id=call.call_id, tool=call.tool,
                                                           arguments=call.arguments))

    def run_approved(self, approval: ApprovalView) -> CallOutcome:
        """Start an approved call (it never started: a crash may have come between)."""
        return self._calls.run_journaled(ToolCallRequested(call_id=approval.call_id, tool=approval.tool,
                                                           arguments=approval.arguments))

    def _settle_call(self, call: CallView) -> None:
        """A foreground call the crash cut off: run it again if that is safe, else say so."""
        writer = self._writer
        if call.notify_file is not None:
            tasks.stop(Path(call.notify_file).parent, wait=True)  # its tool, if it outlived us
            nested.remove_left(writer.session_id, call.call_id)  # the socket it reached us by
            self._background.collect_notes(call.call_id)  # then every line it wrote
        # Run again once: a call that a crash cut off twice may be what brings the engine down.
        if call.attempt < 2 and self._rerun(call):
            return
        when = f"at {call.started_at:%H:%M:%S}Z" if call.started_at else "before it started"
        again = (" It had already been run again once after a crash, so it was not run a third time."
                 if call.attempt > 1 else "")
        writer.append([ToolCallInterrupted(call_id=call.call_id, message=(
            f"zagent stopped while {call.tool} was running (started {when}); the call was cut off and its "
            f"effect may or may not have happened. Check before calling it again.{again}"))])

    def _rerun(self, call: CallView) -> bool:
        """Run a cut-off call of a replay-safe tool again, if its arguments still hold; whether it ran."""
        entry = self._calls.toolbox.get(call.tool)
        if entry is None or entry.replay != "safe" or not isinstance(call.arguments, dict):
            return False
        validated = validate_arguments(entry.validator, call.arguments)
        if not validated.ok:
            return False
        offset = self._writer.state.calls[call.call_id].notify_offset
        if call.status == "running":  # the attempt that was cut off gets its own end
            self._writer.append([ToolCallInterrupted(call_id=call.call_id, message=(
                f"zagent stopped while {call.tool} was running; it is replay-safe, so it runs again"))])
        requested = ToolCallRequested(call_id=call.call_id, tool=call.tool, arguments=call.arguments)
        self._calls.execute(entry, requested, validated, again=True,
                            notify_offset=offset, attempt=call.attempt + 1 if call.status == "running"
                            else call.attempt)
        return True

    def _settle_task_start(self, call: CallView) -> None:
        """A background call whose start was cut off: find its supervisor, if it ever ran."""
        assert call.task_id is not None and call.notify_file is not None
        task_dir = Path(call.notify_file).parent
        events: list[Event] = []
        if call.task_id not in self._writer.state.tasks:
            who = tasks.identity(task_dir)
            if who is None:
                self._writer.append([ToolCallInterrupted(call_id=call.call_id, message=(
                    f"zagent stopped while starting {call.tool} in the background; the task never started"))])
                return
            events.append(task_started(call.task_id, call.call_id, call.tool, who, task_dir))
        self._writer.append([*events, ToolCallFinished(call_id=call.call_id,
                                                       **started_result(call.task_id).event_fields())])
