"""Tool calls: what a session may call, and :meth:`CallRunner.execute`, the one path every kind of tool runs by.

A call is journaled as it happens: ``tool_call_requested`` with ``tool_call_rejected`` or
``tool_call_started`` (committed before anything runs), then what the call staged (its
effects) with ``tool_call_finished``. A call of a tool that needs approval is journaled
with ``approval_requested`` and starts only after ``approval_decided`` says yes (see
:mod:`zagent_core.session.people`). Nothing a tool does, and no mistake in a call, raises here.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from zagent_core.config import Config
from zagent_core.ids import new_call_id
from zagent_core.journal.events import (
    CallClock,
    RejectReason,
    ToolCallFinished,
    ToolCallInterrupted,
    ToolCallRejected,
    ToolCallRequested,
    ToolCallStarted,
    dump_event,
)
from zagent_core.journal.protocol import JournalError
from zagent_core.journal.views import MODELLESS_ORIGINS
from zagent_core.logs import get_logger
from zagent_core.problems import did_you_mean
from zagent_core.session.background import Background, state_written
from zagent_core.session.crashpoints import crash_point
from zagent_core.session.host import SessionHost
from zagent_core.session.people import People
from zagent_core.session.writer import Writer
from zagent_core.tools.clock import fresh_clock, stamp
from zagent_core.tools.disclosure import findable
from zagent_core.tools.inprocess import BuiltinContext, Findable, Parked, ToolState
from zagent_core.tools.results import ToolResult
from zagent_core.tools.shown import Shown
from zagent_core.tools.text import storable_json
from zagent_core.tools.toolbox import Toolbox, ToolEntry
from zagent_core.tools.validation import Validated, dropped_line, validate_arguments

log = get_logger(__name__)

#: Call ids name folders: no separators, no leading dot.
CALL_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:~-]{0,127}")


class CallOutcome(ToolResult):
    """What a call gave the model, with the call's id in the journal and the task it started, if any.

    It is the call's :class:`~zagent_core.tools.results.ToolResult` (``.output``, ``.is_error``...):
    nobody has to read ``state.last_call_id`` or scan ``state.tasks`` after a call.
    """

    call_id: str
    task_id: str | None = None

    def event_fields(self) -> dict[str, Any]:
        """The result's fields as an event records them (the ids are the event's own)."""
        return {k: v for k, v in super().event_fields().items() if k not in _IDS}


_IDS = ("call_id", "task_id")


def outcome(call_id: str, result: ToolResult, task_id: str | None = None) -> CallOutcome:
    """``result`` as the outcome of call ``call_id`` (and of the task it started)."""
    return CallOutcome(**{k: v for k, v in result if k not in _IDS}, call_id=call_id, task_id=task_id)


def journal_call_id(model_id: str, taken: Callable[[str], bool]) -> str:
    """The model's id when it can name a folder and is new in the session; else one derived from it."""
    base = model_id if CALL_ID.fullmatch(model_id) else "call_" + re.sub(r"[^A-Za-z0-9_.:-]", "_", model_id)[:100]
    if not CALL_ID.fullmatch(base):
        base = new_call_id()
    candidate, n = base, 1
    while taken(candidate):  # some servers number calls per reply: call_0 again and again
        n += 1
        candidate = f"{base[:120]}~{n}"
    return candidate


def _unrecordable(requested: ToolCallRequested) -> str | None:
    """Why the arguments cannot be journaled (and so cannot be run), or None."""
    try:
        json.dumps(requested.arguments, allow_nan=False)
        dump_event(requested)
    except (ValueError, RecursionError, TypeError):
        try:
            surrogates = storable_json(requested.arguments) != requested.arguments
        except RecursionError:
            surrogates = False
        if surrogates:
            return ("the arguments hold a lone surrogate (such as \\ud800), which is not valid Unicode; "
                    "send the text as UTF-8")
        return ("the arguments are not plain JSON (NaN or Infinity, or nested too deeply); "
                "send finite numbers and flatter objects")
    return None


class CallRunner:
    """Decides what a session may call, and runs calls: validated, approved, journaled and executed."""

    def __init__(self, writer: Writer, toolbox: Toolbox, host: SessionHost, people: People, background: Background,
                 *, config: Config, workspace: Path, shown: Shown,
                 served: Callable[[str, ToolCallRequested], ToolResult | None]) -> None:
        self._writer = writer
        self.toolbox = toolbox
        self._host = host
        self._people = people
        self._background = background
        self._config = config
        self._workspace = workspace
        self._shown = shown
        #: The last number given to a nested call of each call (see :meth:`nested`).
        self._nested_numbers: dict[str, int] = {}
        #: Serves a nested call instead of running it (a replay's recorded one), or says to run it (None).
        self._served = served

    # -- what the session may call ---------------------------------------------------

    @property
    def depth(self) -> int:
        """0 for a top-level session, 1 for its sub-agents, 2 for theirs..."""
        parent = self._writer.state.parent
        return parent.depth if parent is not None else 0

    def refusal(self, name: str) -> tuple[RejectReason, str] | None:
        """Why tool ``name`` cannot run in this session at all, whatever the arguments."""
        toolbox = self.toolbox
        if toolbox.get(name) is None:
            known = [entry.name for entry in toolbox.listed()]
            listing = f"; available tools: {', '.join(known)}" if known else "; no tools are loaded"
            return "unknown_tool", f'unknown tool "{name}"{did_you_mean(name, known)}{listing}'
        if toolbox.is_disabled(name):
            return "disabled", f'tool "{name}" is disabled in config.json ("tools": {{"disabled": [...]}}), so it was not run'
        if not self.offers(name):
            offered = [entry.name for entry in self.offered()]
            return "not_offered", (f'tool "{name}" is not offered to this sub-agent, so it was not run; its tools: '
                                   f"{', '.join(offered) or 'none'}")
        entry, state = toolbox.get(name), self._writer.state
        # A person or an MCP client calls what it sees listed: only a model is told to search first.
        if entry is not None and entry.deferred(self._config) and name not in state.unlocked and \
                state.origin not in MODELLESS_ORIGINS:
            finder = next((self._shown.name(e.name) for e in self.offered() if e.finds_deferred), "tool_search")
            return "deferred", (f'tool "{name}" is not loaded yet (config.json says "tools": {{"disclosure": "lazy"}}), '
                                f"so it was not run: call {finder} with words from its name or description first, "
                                "which loads it, then call it")
        return None

    def needs_approval(self, name: str) -> bool:
        """Whether a person decides each call of ``name``."""
        entry = self.toolbox.get(name)
        return entry is not None and entry.permission == "ask" and name not in self._config.approvals.allow

    def served_in_replay(self, name: str) -> bool:
        entry = self.toolbox.get(name)
        return (entry is not None and entry.served_in_replay) or self.needs_approval(name)

    def concurrency_safe(self, name: str, arguments: Any) -> bool:
        entry = self.toolbox.get(name)
        # A person answers one approval at a time: such a call runs alone.
        return entry is not None and entry.is_concurrency_safe(arguments) and not self.needs_approval(name)

    def validator_of(self, name: str) -> Any | None:
        entry = self.toolbox.get(name)
        return entry.validator if entry is not None else None

    def replay_policy(self, name: str) -> Literal["safe", "unsafe"] | None:
        entry = self.toolbox.get(name)
        return entry.replay if entry is not None else None

    def continues(self, name: str) -> bool:
        entry = self.toolbox.get(name)
        return entry is not None and entry.continues

    def offers(self, name: str) -> bool:
        """Whether this session may use tool ``name`` at all: a sub-agent only has what its parent gave it."""
        entry = self.toolbox.get(name)
        if entry is not None and not entry.offered(self._config, self.depth):
            return False
        if self.depth > 0 and self.needs_approval(name):
            return False  # no person is in a sub-agent's loop: only tools approvals.allow pre-approves
        parent = self._writer.state.parent
        return parent is None or parent.tools is None or name in parent.tools

    def offered(self) -> list[ToolEntry]:
        """The tools the session may use: the folder tools, then the built-ins."""
        return [entry for entry in self.toolbox.listed() if self.offers(entry.name)]

    def findable(self) -> list[Findable]:
        """The deferred tools, as ``tool_search`` finds them."""
        return findable(self.offered(), self._config, self._shown, self._writer.state.unlocked)

    # -- calls -----------------------------------------------------------------------

    def call(self, name: str, arguments: Any, call_id: str | None, parent_call_id: str | None = None,
             clock: CallClock | None = None) -> CallOutcome:
        """Validate, run and journal one call of tool ``name``; returns what the model receives
        (or, for a call nested in running call ``parent_call_id``, what that call's tool receives).
        ``clock``: what the call is told of the time and its seed instead of its own (a replay's recorded one)."""
        call_id = call_id or new_call_id()
        if not CALL_ID.fullmatch(call_id):
            raise ValueError(f"call id {call_id!r} must be 1-128 letters, digits, '_', '-', '.', ':' or '~' "
                             "(it names the call's folder)")
        if self._writer.has_call(call_id):
            raise ValueError(f"call id {call_id!r} is already used in session {self._writer.session_id}")
        requested = ToolCallRequested(call_id=call_id, tool=name, arguments=arguments, parent_call_id=parent_call_id)
        unrecordable = _unrecordable(requested)
        if unrecordable:
            # Journal what can be journaled, and tell the model why nothing ran.
            requested = requested.model_copy(update={"arguments": f"<not recorded: {unrecordable}>"})
            message = f"{name} was not run: {unrecordable}"
            self._writer.append([requested, ToolCallRejected(call_id=call_id, reason="invalid_arguments",
                                                             message=message, problems=[unrecordable])])
            return outcome(call_id, ToolResult(output=message, is_error=True))
        return self.run_requested(requested, clock)

    def nested(self, parent_call_id: str, name: str, arguments: Any) -> CallOutcome:
        """A call of tool ``name`` that the tool of running call ``parent_call_id`` asks for
        (``zagent call``, ``context.call_tool``): run as any call, journaled with its parent,
        its result for that tool. Its id is the parent's, numbered: ``call_7.1``, ``call_7.2``..."""
        number = self._nested_numbers.get(parent_call_id, 0)
        call_id = ""
        while not call_id or self._writer.has_call(call_id):
            number += 1
            call_id = f"{parent_call_id}.{number}"
            if not CALL_ID.fullmatch(call_id):  # a parent's id too long to number
                call_id = new_call_id()
        self._nested_numbers[parent_call_id] = number
        requested = ToolCallRequested(call_id=call_id, tool=name, arguments=arguments, parent_call_id=parent_call_id)
        served = self._served(self._writer.session_id, requested)
        if served is not None:
            return outcome(call_id, served)
        return self.call(name, arguments, call_id, parent_call_id)

    def _nesting(self, requested: ToolCallRequested) -> tuple[RejectReason, str] | None:
        """Why a nested call may not run, whatever its arguments: too deep, one too many, or it would wait on a person."""
        state, limit = self._writer.state, self._config.limits.nested_call_depth
        depth, parent = 1, state.calls.get(requested.parent_call_id or "")
        while parent is not None and parent.parent_call_id is not None:
            depth, parent = depth + 1, state.calls.get(parent.parent_call_id)
        name = requested.tool
        most = self._config.limits.nested_calls_per_call
        if self._nested_numbers.get(requested.parent_call_id or "", 0) > most:
            return "limit", (f"{name} was not run: call {requested.parent_call_id} has made the {most} nested calls "
                             "a call may make (limits.nested_calls_per_call in config.json)")
        if depth > limit:
            if limit == 0:
                return "limit", (f"{name} was not run: nested calls are turned off (limits.nested_call_depth is 0 in "
                                 "config.json), so a tool cannot call another tool")
            return "limit", (f"{name} was not run: calls nest at most {limit} deep (limits.nested_call_depth in "
                             f"config.json), and this one, asked for by call {requested.parent_call_id}, would be "
                             f"{depth} deep")
        if self.needs_approval(name):
            return "permission", (f'{name} was not run: it needs a person\'s approval ("permission": "ask"), which a '
                                  "nested call cannot wait for; add it to approvals.allow in config.json to let tools "
                                  "call it")
        return None

    def _admitted(self, requested: ToolCallRequested) -> tuple[ToolEntry, Validated] | ToolCallRejected:
        """The tool and the validated arguments of a call, or why it is rejected (validated against the tool as it is now)."""
        name = requested.tool
        refusal = self.refusal(name)
        if refusal is None and requested.parent_call_id is not None:
            refusal = self._nesting(requested)
        if refusal is not None:
            reason, message = refusal
            return ToolCallRejected(call_id=requested.call_id, reason=reason, message=message, problems=[])
        entry = self.toolbox.get(name)
        assert entry is not None  # not refused: the tool exists
        validated = validate_arguments(entry.validator, requested.arguments)
        problems = validated.problems or entry.delivery_problems(validated.arguments)
        if problems:
            message = f"{name} was not run: its arguments do not match its parameters.\n" + "\n".join(problems)
            return ToolCallRejected(call_id=requested.call_id, reason="invalid_arguments", message=message,
                                    problems=problems)
        return entry, validated

    def run_requested(self, requested: ToolCallRequested, clock: CallClock | None = None) -> CallOutcome:
        """A new call: journal its request with its rejection, its approval asked, or its start, and run it."""
        admitted = self._admitted(requested)
        if isinstance(admitted, ToolCallRejected):
            self._writer.append([requested, admitted])
            return outcome(requested.call_id, ToolResult(output=admitted.message, is_error=True))
        entry, validated = admitted
        if entry.permission == "ask":
            waiting = self._people.ask_approval(requested)
            if waiting is not None:
                return outcome(requested.call_id, waiting)
            return self.run_journaled(requested)
        return self.execute(entry, requested, validated, clock=clock)

    def run_journaled(self, requested: ToolCallRequested) -> CallOutcome:
        """A call whose request is in the journal already, because a person approved it (with its
        approval: it runs now) or it was cut off and goes on; checked against the tool as it is now."""
        admitted = self._admitted(requested)
        if isinstance(admitted, ToolCallRejected):
            self._writer.append([admitted])
            return outcome(requested.call_id, ToolResult(output=admitted.message, is_error=True))
        entry, validated = admitted
        return self.execute(entry, requested, validated, again=True)

    def execute(self, entry: ToolEntry, requested: ToolCallRequested, validated: Validated, *,
                again: bool = False, notify_offset: int = 0, attempt: int = 1,
                clock: CallClock | None = None) -> CallOutcome:
        """Run a validated call of any kind of tool: ``tool_call_started``, then the run, then what
        it staged committed with ``tool_call_finished`` (one step: a crash keeps both or neither).

        ``again``: the call was journaled before (approved, or a crash cut it off); one that
        had started already and :attr:`~ToolEntry.continues` goes on without being started again.
        ``notify_offset``: where the cut-off attempt's journaled notes end in the call's notify
        file, which the new attempt appends to. ``clock``: what the call is told instead of its start
        time and seed (journaled with its start); a call that goes on is told its first start.
        """
        writer, call_id, name, arguments = self._writer, requested.call_id, entry.name, validated.arguments
        call_dir = self._host.call_folder(call_id) if entry.runs_process(arguments) else None
        cut_off = writer.state.calls.get(call_id)
        going_on = again and entry.continues and cut_off is not None and cut_off.status == "running"
        started_at, own_clock = fresh_clock(writer.session_id, call_id)
        if going_on and cut_off is not None and cut_off.started_at is not None:
            own_clock = own_clock.model_copy(update={"now": stamp(cut_off.started_at)})
        with writer.lock:  # the task number is taken and journaled in one step
            state = writer.state
            task_id = str(state.tasks_numbered + 1) if entry.background(arguments) else None
            context = BuiltinContext(
                session_id=writer.session_id, call_id=call_id, tool=name, workspace=self._workspace,
                config=self._config, host=self._host, origin=state.origin, read_state=self._host.read_state(),
                state=ToolState(state.tool_state.get(name, {})), clock=clock or own_clock, call_dir=call_dir,
                task_id=task_id, active_skills=state.active_skills, findable=self.findable,
            )
            prepared = entry.prepare(context, arguments)
            writer.append([] if going_on else [
                *([] if again else [requested]),
                ToolCallStarted(call_id=call_id, task_id=task_id, tool=name, arguments=arguments,
                                coercions=validated.coercions, dropped=validated.dropped,
                                notify_offset=notify_offset, attempt=attempt, clock=clock,
                                **prepared.started),
            ], at=started_at)
        log.info("tool_call_started", session=writer.session_id, call_id=call_id, tool=name, task_id=task_id)
        crash_point("after_tool_call_started")
        started = time.monotonic()
        try:
            result = prepared.run()
        except JournalError:
            raise  # the journal itself failed (disk full): no result can be recorded; the caller says so
        except Parked as parked:  # no result yet: the answer brings it (see People.answer)
            log.info("tool_call_parked", session=writer.session_id, call_id=call_id, tool=name)
            return outcome(call_id, ToolResult(output=str(parked), is_error=False), task_id)
        except Exception as exc:  # a bug of ours must not leave the call without a result
            log.error("tool_call_failed", exc_info=True, call_id=call_id, tool=name)
            result = ToolResult(output=f"zagent failed while running {name}: {exc!r}", is_error=True,
                                duration_ms=round((time.monotonic() - started) * 1000))
        except BaseException:  # Ctrl-C, SystemExit: the tool was stopped with us; say so
            if not entry.continues:  # one that continues stays open, to go on when driven again
                self._stopped(call_id)
            raise
        log.info("tool_call_finished", call_id=call_id, is_error=result.is_error, exit_code=result.exit_code,
                 duration_ms=result.duration_ms, timed_out=result.timed_out)
        if validated.dropped:
            result = result.model_copy(update={"output": f"{result.output}\n{dropped_line(validated.dropped)}"})
        if prepared.crash_before_finished:
            crash_point("before_tool_call_finished")
        return outcome(call_id, self._finish(context, result), task_id)

    def _finish(self, context: BuiltinContext, result: ToolResult) -> ToolResult:
        """Journal a call's result with what it staged; a task it started is watched from now on."""
        writer, call_id, name = self._writer, context.call_id, context.tool
        try:
            writer.append([*context.effects(), *state_written(call_id, name, result),
                           ToolCallFinished(call_id=call_id, **result.event_fields())])
        except (ValueError, TypeError) as exc:  # what it staged cannot be journaled: a bug of the tool
            log.error("tool_call_unrecordable", exc_info=True, call_id=call_id, tool=name)
            result = ToolResult(output=f"zagent could not record what {name} returned: {exc}", is_error=True,
                                duration_ms=result.duration_ms)
            writer.append([ToolCallFinished(call_id=call_id, **result.event_fields())])
        if context.task_id is not None and context.task_id in writer.state.tasks:
            crash_point("after_task_started")
            self._background.watch()
        return result

    def _stopped(self, call_id: str) -> None:
        """Ctrl-C or SystemExit while a call ran (or its calls were stopped: a client's cancel):
        the tool was stopped with us; say so, and why."""
        with contextlib.suppress(Exception):
            self._writer.append([ToolCallInterrupted(call_id=call_id,
                                                     message=self._host.interrupt_calls.message(call_id))])
