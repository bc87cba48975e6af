"""Named points where crash tests kill the engine with a real SIGKILL.

``ZAGENT_CRASH_AT=after_task_started`` makes the engine kill itself when it reaches that
point, the way DBOS's debug triggers do: tests can then prove that resume settles every
state a crash can leave. Unset (always, outside tests) it costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

#: The points the engine passes, in the order a call reaches them.
POINTS = (
    "after_tool_call_started",
    "before_tool_call_finished",
    "after_task_started",
    "before_note_journaled",
    "with_wake_pending",
)
#: The points of a question to a person (``ask_user``, ``zagent answer``), which the crash
#: driver's session never reaches: tests/test_ask_user.py kills a real CLI at each.
ASK_POINTS = ("after_input_requested", "before_input_answered", "after_input_answered")
#: The points of a call that needs approval (a run, ``zagent approve``/``deny``), in order:
#: tests/test_approvals.py kills a real CLI at each.
APPROVAL_POINTS = ("before_approval_requested", "after_approval_requested", "before_approval_decided",
                   "after_approval_decided")
#: The points of a sub-agent (tests/test_spawn_crash.py): its spawn journaled, its session
#: started, its run over but its outcome not journaled.
SPAWN_POINTS = ("after_child_spawned", "after_child_started", "before_child_ended")
#: The points of a compaction (tests/test_compaction.py): its summary asked for, and journaled.
COMPACTION_POINTS = ("before_compaction_request", "after_context_compacted")


def crash_point(name: str) -> None:
    """SIGKILL this process if ``ZAGENT_CRASH_AT`` names this point."""
    if os.environ.get("ZAGENT_CRASH_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
