"""Sub-agents: the child sessions ``spawn`` gives a task to, driven to their end.

A child is a session of the same journal (``session_started`` with its ``parent``), with
its own conversation, read-state and tasks, driven by its own :class:`Agent` in the
thread of the parent's spawn call. The order of the journal is what makes it durable:

1. the parent journals ``child_spawned`` (label, the child's session id, its model);
2. the child's session starts with that id, or, after a crash, is resumed;
3. the child runs until it is idle (``completed``), fails, times out or is stopped;
4. the parent journals ``child_ended`` with the spawn call's result, in one transaction.

A crash anywhere leaves the spawn call open; driven again (:meth:`Session.continue_call`), it
finds its child by call id in the parent's ``children`` and goes on with that session,
so a child never runs twice and the call never gets a result its child did not give.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Literal

from zagent_core.agent.loop import Agent
from zagent_core.agent.models import Model, load_model, scripted
from zagent_core.config import SpawnConfig, SubagentConfig, Thinking, thinking_budget
from zagent_core.ids import new_session_id
from zagent_core.journal.events import (
    ChildEnded,
    ChildSpawned,
    ModelReplied,
    ParentLink,
    ReadStateUpdated,
    SpawnStats,
)
from zagent_core.journal.protocol import JournalError
from zagent_core.journal.views import SessionState
from zagent_core.logs import get_logger
from zagent_core.problems import did_you_mean
from zagent_core.session.crashpoints import crash_point
from zagent_core.session.engine import Session, SessionEndedError
from zagent_core.session.leases import SessionBusyError
from zagent_core.tools.inprocess import Arguments, BuiltinContext
from zagent_core.tools.model_catalog import EMBEDDED_CATALOG_MAX, known, model_settings, offered
from zagent_core.tools.results import ToolResult

log = get_logger(__name__)

Status = Literal["completed", "error", "aborted", "timeout"]

#: The preset a ``subagent_type`` that names none runs as, when config has one of this name
#: (the seed's, and the name models trained on Claude Code's tools use); else no preset.
GENERAL_PURPOSE = "general-purpose"

#: How a child's run ended (its last turn's end) -> the outcome's status.
_STATUS: dict[str, Status] = {"idle": "completed", "timeout": "timeout", "interrupted": "aborted"}


@dataclass
class _Plan:
    """Who the child is and how it runs: a new one, one given a new task, or one going on after a crash."""

    #: ``child-N``; a new child is named when it is admitted (:meth:`Session.add_child`).
    label: str
    session_id: str
    #: A new child's model as asked (a catalog id, a preset's spec) or None (its parent's),
    #: until it is admitted; then the spec it runs with.
    model_spec: str | None
    model: Model | None
    #: Its instruction for this run; None: it goes on where a crash stopped it.
    task: str | None
    system_prompt: str | None
    tools: list[str] | None
    subagent_type: str | None
    resumed: bool = False
    #: A new child's ``model_spec`` came from its preset (config may name a spec there, not a catalog id).
    model_from_preset: bool = False
    #: Told to the model under the result's first line: the preset it asked for is unknown.
    note: str = ""
    share_read_state: bool = False
    #: What spawn asked the child to think, within ``model.thinking``; None: ``model.thinking``.
    thinking: Thinking | None = None


class _Refused(Exception):  # noqa: N818 - a refusal for the model, not a failure
    """The spawn cannot run as asked; the message says why and what to do."""


class _NotItsChild(Exception):  # noqa: N818 - a refusal, told as the spawn call's outcome
    """The session a spawn names is no sub-agent of the session that spawned it (an edited journal)."""


def drive_child(parent: Session, context: BuiltinContext, arguments: Arguments) -> ToolResult:
    """Run (or go on with) the child of the spawn call ``context.call_id``; its outcome is the result."""
    going_on = next((child for child in parent.state.running_children if child.call_id == context.call_id), None)
    try:
        if going_on is not None:  # admitted before the crash: it needs no slot to go on
            plan = _going_on(parent, going_on.label)
            plan.note = _unknown_type_note(parent.engine.config.spawn, arguments)
            return _drive(parent, context, plan)
        plan = _plan(parent, arguments)
        plan.note = "\n".join(filter(None, [_unknown_type_note(parent.engine.config.spawn, arguments),
                                            _lowered_thinking(parent, arguments)]))
        parent.await_turn(context.call_id, context.tool)
        with _slot(parent) as admitted:
            if not admitted:
                raise _Refused(f"{parent.engine.config.spawn.max_concurrent} sub-agents are running already "
                               "(spawn.max_concurrent) and a sub-agent may not wait for a slot; do the task yourself "
                               "or answer so that your parent spawns it")
            _admit(parent, context, plan)
            crash_point("after_child_spawned")
            return _drive(parent, context, plan)
    except _Refused as refused:
        return ToolResult(output=f"spawn refused: {refused}", is_error=True)


@contextlib.contextmanager
def _slot(parent: Session) -> Iterator[bool]:
    """A place among the sub-agents running at once: waited for by a top-level session, else taken or not."""
    slots = parent.engine.child_slots
    if parent.depth > 0:
        admitted = slots.acquire(blocking=False)
    else:
        while not (admitted := slots.acquire(timeout=0.1)):
            if parent.interrupt_calls.is_set():
                raise KeyboardInterrupt  # the run is being stopped while this spawn waited
    try:
        yield admitted
    finally:
        if admitted:
            slots.release()


def _plan(parent: Session, arguments: Arguments) -> _Plan:
    """What a spawn call asks for, checked: a new child, or a stopped one given a new task."""
    config = parent.engine.config.spawn
    label = arguments.get("resume")
    if label is not None:
        child = parent.state.children.get(label)
        if child is None:
            known = list(parent.state.children)
            raise _Refused(f'this session has no sub-agent "{label}"{did_you_mean(label, known)}; '
                           + (f"its sub-agents: {', '.join(known)}" if known else "it has spawned none"))
        kept = [name for name in ("model", "subagent_type", "thinking") if name in arguments]
        if kept:
            raise _Refused(f"a resumed sub-agent keeps its model, preset and thinking: leave out {' and '.join(kept)}, "
                           "or spawn a new sub-agent")
        _check_resumable(parent, label)
        owner = parent.engine.session_state(child.session_id).parent
        if owner is not None and owner.session_id != parent.session_id:  # this session is a fork
            raise _Refused(f"{label} was spawned by the session this one was forked from, and goes on there; "
                           "spawn a new sub-agent")
        first = _spawns_of(parent, label)[0]
        return _Plan(label=label, session_id=child.session_id, model_spec=child.model,
                     model=_model(parent, child.model, first.thinking), task=arguments["task"],
                     system_prompt=arguments.get("system") or first.system_prompt, tools=first.tools,
                     subagent_type=child.subagent_type, resumed=True, share_read_state=first.share_read_state,
                     thinking=first.thinking)
    preset_name = arguments.get("subagent_type")
    if preset_name is not None and preset_name not in config.subagents:
        # As the seed does: models trained on other hosts name types this one lacks; they still get a sub-agent.
        preset_name = GENERAL_PURPOSE if GENERAL_PURPOSE in config.subagents else None
    preset = config.subagents[preset_name] if preset_name is not None else SubagentConfig()
    wanted = arguments.get("model") or preset.model
    if wanted is not None:  # checked now: a refusal must come before a slot is waited for
        _model(parent, _model_spec(parent, wanted, "child", "", from_preset="model" not in arguments))
    return _Plan(label="", session_id=new_session_id(), model_spec=wanted, model=None, task=arguments["task"],
                 system_prompt=arguments.get("system") or preset.system_prompt, tools=_tools(parent, preset),
                 subagent_type=preset_name, model_from_preset="model" not in arguments,
                 share_read_state=config.share_read_state if preset.share_read_state is None
                 else preset.share_read_state, thinking=_thinking(parent, arguments.get("thinking")))


def _thinking(parent: Session, asked: Thinking | None) -> Thinking | None:
    """What the child thinks: what spawn asked for, lowered to ``model.thinking`` (the ceiling) when more."""
    ceiling = parent.engine.config.model.thinking
    if asked is None or thinking_budget(asked) <= thinking_budget(ceiling):
        return asked
    return ceiling


def _lowered_thinking(parent: Session, arguments: Arguments) -> str:
    """What the model is told when the thinking it asked for was more than the config allows ("" when not)."""
    asked = arguments.get("thinking")
    if asked is None or "resume" in arguments or _thinking(parent, asked) == asked:
        return ""
    return (f"[thinking {asked!r} is more than model.thinking in config.json allows: the sub-agent thought at "
            f"{parent.engine.config.model.thinking!r}]")


def _unknown_type_note(config: SpawnConfig, arguments: Arguments) -> str:
    """What the model is told when the ``subagent_type`` it asked for is no preset ("" when it is one)."""
    asked = arguments.get("subagent_type")
    if asked is None or asked in config.subagents or "resume" in arguments:
        return ""
    ran = f'the "{GENERAL_PURPOSE}" preset' if GENERAL_PURPOSE in config.subagents else "no preset"
    return (f'[unknown subagent_type "{asked}"{did_you_mean(asked, config.subagents)}: it ran as a general-purpose '
            f"sub-agent ({ran}); the presets are: {', '.join(config.subagents)}]")


def _admit(parent: Session, context: BuiltinContext, plan: _Plan) -> None:
    """Journal ``child_spawned``, in one step with the checks it depends on: a new child gets
    its label, and its model (a scripted one depends on the label) is loaded first, so one
    that cannot run is refused, not journaled; a resumed one must not be running (two calls
    of one reply may resume the same child)."""
    def spawned(label: str) -> ChildSpawned:
        if plan.resumed:
            _check_resumable(parent, plan.label)
        else:
            plan.label = label
            plan.model_spec = _model_spec(parent, plan.model_spec, label, plan.task or "",
                                          from_preset=plan.model_from_preset)
            plan.model = _model(parent, plan.model_spec, plan.thinking)
        assert plan.model_spec is not None
        return ChildSpawned(call_id=context.call_id, label=plan.label, child_session_id=plan.session_id,
                            task=plan.task or "", subagent_type=plan.subagent_type, model=plan.model_spec,
                            resumed=plan.resumed,
                            from_version=parent.engine.journal.head(plan.session_id) if plan.resumed else 0,
                            system_prompt=plan.system_prompt, tools=plan.tools,
                            share_read_state=plan.share_read_state, thinking=plan.thinking)

    parent.add_child(spawned)


def _check_resumable(parent: Session, label: str) -> None:
    child = parent.state.children[label]
    if child.status == "running":
        raise _Refused(f"{label} is still running (spawn call {child.call_id}); its result comes with that call")


def _spawns_of(parent: Session, label: str) -> list[ChildSpawned]:
    """The ``child_spawned`` events of the child ``label``, the one that set it up first."""
    spawns = [stored.event for stored in parent.engine.journal.read(parent.session_id, types=("child_spawned",))
              if isinstance(stored.event, ChildSpawned) and stored.event.label == label]
    if not spawns or spawns[0].resumed:
        raise _Refused(f"{label}'s spawn is not in this session's journal")
    return spawns


def _going_on(parent: Session, label: str) -> _Plan:
    """The child a crash (or Ctrl-C) stopped, as it was: its model, the system prompt it was
    given, and its task if the crash came before the child journaled it."""
    child = parent.state.children[label]
    journal = parent.engine.journal
    spawned = _spawns_of(parent, label)
    first, latest = spawned[0], spawned[-1]
    told = next(iter(journal.read(child.session_id, after_version=child.from_version, types=("user_message",))), None)
    return _Plan(label=label, session_id=child.session_id, model_spec=child.model,
                 model=_model(parent, child.model, first.thinking),
                 task=None if told else child.task, system_prompt=latest.system_prompt or first.system_prompt,
                 tools=first.tools, subagent_type=child.subagent_type, resumed=child.from_version > 0,
                 share_read_state=first.share_read_state, thinking=first.thinking)


def _model_spec(parent: Session, wanted: str | None, label: str, task: str, *, from_preset: bool = False) -> str:
    """The child's model: a catalog id (``models``, as ``spawn.models`` offers them) or a spec, else its parent's.

    A scripted parent's children read their replies from the same script, under
    ``children`` (``scripted:PATH#KEY``; see :mod:`zagent_core.agent.models.scripted`).
    """
    config = parent.engine.config
    # The model picks among the offered models; a preset may name any model of the catalog.
    catalog = {entry.id: entry.spec for entry in (known(config) if from_preset else offered(config))}
    if wanted is not None:
        if wanted in catalog:
            return catalog[wanted]
        if ":" in wanted and (from_preset or not catalog):
            return wanted  # a preset's own spec (config's to get right, not the model's)
        raise _Refused(f'unknown model "{wanted}"{did_you_mean(wanted, catalog)}; '
                       + (_listed(list(catalog)) if catalog else
                          'no models are listed in config.json ("models": [...])'))
    inherited = parent.state.model or parent.engine.config.agent.model
    if not inherited:
        raise _Refused('there is no model to run a sub-agent on; set "agent": {"model": ...} in config.json')
    if inherited.startswith("scripted:"):
        path, _, child = inherited.removeprefix("scripted:").partition("#")
        try:
            key = scripted.child_key(path, child, label, task)
        except ValueError as exc:
            raise _Refused(f"the sub-agent's model cannot be used: {exc}") from None
        return f"scripted:{path}#{child + '/' if child else ''}{key}"
    return inherited


def _listed(ids: list[str]) -> str:
    """The ids a refusal names: a large catalog's first ones, and where the rest are."""
    if len(ids) <= EMBEDDED_CATALOG_MAX:
        return f"the models are: {', '.join(ids)}"
    return (f"the models include: {', '.join(ids[:EMBEDDED_CATALOG_MAX])} and {len(ids) - EMBEDDED_CATALOG_MAX} "
            "more (model_search finds them)")


def _model(parent: Session, spec: str, thinking: Thinking | None = None) -> Model:
    settings = model_settings(parent.engine.config, spec)
    try:
        return load_model(spec, settings if thinking is None else settings.model_copy(update={"thinking": thinking}))
    except ValueError as exc:
        raise _Refused(f"the sub-agent's model cannot be used: {exc}") from None


def _tools(parent: Session, preset: SubagentConfig) -> list[str] | None:
    """What the child may use: the preset's list, or the read-only tools; never more than its parent has."""
    if preset.tools is not None:
        wanted: list[str] | None = list(preset.tools)
    elif preset.readonly:
        wanted = [tool.name for tool in parent.offered() if tool.read_only]
    else:
        wanted = None
    limit = parent.state.parent.tools if parent.state.parent is not None else None
    if limit is None:
        return wanted
    return [name for name in (wanted if wanted is not None else limit) if name in limit]


def _drive(parent: Session, context: BuiltinContext, plan: _Plan) -> ToolResult:
    """Run the child to the end of its task; stage ``child_ended`` and return the outcome."""
    engine = parent.engine
    config = engine.config.spawn
    try:
        child = _open(parent, context, plan)
    except (SessionBusyError, SessionEndedError, _NotItsChild) as exc:
        return _ended(parent, context, plan, "error", f"the sub-agent's session could not be driven: {exc}")
    # Ctrl-C stops the whole tree: a child's calls and its agent loop watch the parent's signal.
    child.follow(parent, share_read_state=plan.share_read_state)
    agent_config = engine.config.agent.model_copy(update={
        "max_turns": config.child_max_turns,
        **({"system_prompt": plan.system_prompt} if plan.system_prompt else {}),
    })
    assert plan.model is not None and plan.model_spec is not None  # admitted
    agent = Agent(child, plan.model, agent_config, spec=plan.model_spec,
                  deadline=time.monotonic() + config.child_timeout_minutes * 60)
    log.info("child_running", session=parent.session_id, child=child.session_id, label=plan.label)
    stopped = child.state.last_turn_end or ""
    at_limit = plan.task is None and not child.state.in_turn and stopped in ("max_turns", "timeout")
    try:
        # Stopped at a limit when the crash came, it has its outcome: it does not run on. Else
        # its background tasks may run as long as it may; past its time they are stopped.
        reason = stopped if at_limit else agent.run(plan.task, wait_minutes=config.child_timeout_minutes).reason
        for task in child.state.running_tasks:  # its time is up: what it started stops with it
            child.kill_task(task.task_id)
    except (KeyboardInterrupt, JournalError):
        raise  # the tree is stopped (the spawn call stays open) or the journal failed
    except Exception as exc:  # noqa: BLE001 - a bug must not leave the spawn call without an outcome
        log.error("child_failed", exc_info=True, child=child.session_id)
        return _ended(parent, context, plan, "error", f"zagent failed while driving the sub-agent: {exc!r}", child)
    finally:
        child.release()  # never ended: `resume` with its label gives it a new task
    status = _STATUS.get(reason, "error")
    why = "" if status == "completed" else _why(reason, config.child_max_turns)
    return _ended(parent, context, plan, status, why, child)


def _open(parent: Session, context: BuiltinContext, plan: _Plan) -> Session:
    """The child's session: started with the id its parent journaled, or resumed, if it names this
    parent back (a journal edited or imported from elsewhere could name any session)."""
    engine = parent.engine
    state = engine.session_state(plan.session_id)
    if state.version == 0:  # new, or the crash came before it started
        session = engine.start_session("spawn", session_id=plan.session_id, parent=ParentLink(
            session_id=parent.session_id, call_id=context.call_id, label=plan.label, depth=parent.depth + 1,
            tools=plan.tools, subagent_type=plan.subagent_type, share_read_state=plan.share_read_state))
        crash_point("after_child_started")
        return session
    link = state.parent
    if link is None or (link.session_id, link.label) != (parent.session_id, plan.label):
        what = "no sub-agent" if link is None else f"{link.label} of session {link.session_id}"
        raise _NotItsChild(f"session {plan.session_id} is {what}, not {plan.label} of this session: it is left alone")
    return engine.resume(plan.session_id)


def _why(reason: str, max_turns: int) -> str:
    if reason == "timeout":
        return "it ran out of time (spawn.child_timeout_minutes)"
    if reason == "max_turns":
        return f"it reached its limit of {max_turns} model requests (spawn.child_max_turns)"
    return reason


def _ended(parent: Session, context: BuiltinContext, plan: _Plan, status: Status, why: str,
           child: Session | None = None) -> ToolResult:
    """Stage ``child_ended`` (committed with the spawn call's result) and say how the child did."""
    crash_point("before_child_ended")
    view = parent.state.children[plan.label]
    state = child.state if child is not None else SessionState()  # a child never driven took nothing
    stats = SpawnStats(
        turns=state.model_replies,
        input_tokens=state.input_tokens + sum(c.stats.input_tokens for c in state.children.values()),
        output_tokens=state.output_tokens + sum(c.stats.output_tokens for c in state.children.values()),
        duration_ms=max(0, round((datetime.now(timezone.utc) - view.spawned_at).total_seconds() * 1000)),
    )
    text = _capped(_last_reply(parent, plan.session_id), parent.engine.config.limits.child_reply_bytes,
                   plan.session_id) if status == "completed" else why
    if plan.share_read_state and child is not None:
        context.staged.extend(_reads_for_parent(parent, context.call_id, child))
    context.staged.append(ChildEnded(call_id=context.call_id, label=plan.label, child_session_id=plan.session_id,
                                     status=status, text=text, stats=stats))
    numbers = (f"{stats.turns} model request{'s' if stats.turns != 1 else ''}, {stats.input_tokens:,} tokens in, "
               f"{stats.output_tokens:,} out, {stats.duration_ms / 1000:.1f} s")
    header = f"[{plan.label} {status}: {numbers}; session {plan.session_id}]" + (f"\n{plan.note}" if plan.note else "")
    if status == "completed":
        return ToolResult(output=f"{header}\n{text}", is_error=False)
    return ToolResult(output=f"{header}\n{plan.label} did not complete: {why}", is_error=True)


def _reads_for_parent(parent: Session, call_id: str, child: Session) -> list[ReadStateUpdated]:
    """What the child read that its parent had not read since: the parent's reads from now on (journaled
    with the spawn call's result, so they hold after a crash as any call's reads do)."""
    mine = parent.state.read_state
    newer = [entry for path, entry in child.state.read_state.items() if path not in mine or mine[path].at < entry.at]
    return [ReadStateUpdated(call_id=call_id, entries=newer)] if newer else []


def _capped(text: str, cap: int, session_id: str) -> str:
    """A reply past ``limits.child_reply_bytes`` is cut there, its start kept (a report says what
    it found first), behind a marker; the child's session keeps it whole."""
    data = text.encode("utf-8")
    if len(data) <= cap:
        return text
    log.warning("child_reply_cut", child=session_id, size=len(data), cap=cap)
    return (data[:cap].decode("utf-8", "ignore") + f"\n[... {len(data) - cap:,} more bytes (limits.child_reply_bytes): "
            f"the whole reply is in zagent sessions show {session_id}]")


def _last_reply(parent: Session, session_id: str) -> str:
    """The child's final reply: the text of its last model reply."""
    journal = parent.engine.journal
    recent = [stored.event for stored in journal.read_last(session_id, 20)]
    replies = [event for event in recent if isinstance(event, ModelReplied)]
    if not replies:
        replies = [stored.event for stored in journal.read(session_id, types=("model_replied",))
                   if isinstance(stored.event, ModelReplied)]
    return replies[-1].text if replies else ""
