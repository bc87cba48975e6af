"""``zagent sessions show`` for a person: the header, then the conversation as it is read.

The header is the session's state as it opens (its newest snapshot and the events after
it), not a fold of the whole session; the conversation is read page by page and printed as
it is read (:mod:`zagent_cli.pager`: through a pager on a terminal), so the first screen
shows while the rest is read and a long session is never held whole. Only the events the
conversation shows are parsed. On a terminal, a session longer than a screen shows its
last turns, and says how many came before.
"""

from __future__ import annotations

import functools
import json
import re
import textwrap
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from zagent_cli.output import head, plural
from zagent_cli.pager import paged_lines
from zagent_cli.show import cost_facts, first_line
from zagent_core.journal.events import (
    EVENT_TYPES,
    ApprovalDecided,
    ApprovalRequested,
    ArtifactRecorded,
    ChildSpawned,
    ContextCleared,
    ContextCompacted,
    Event,
    InputAnswered,
    InputRequested,
    ModelReplied,
    NoteReceived,
    SessionEnded,
    SessionForked,
    SessionResumed,
    SessionStarted,
    TaskExited,
    TaskInterrupted,
    TaskKilled,
    TaskStarted,
    ToolCallFinished,
    ToolCallInterrupted,
    ToolCallRejected,
    ToolCallRequested,
    TurnEnded,
    TurnStarted,
    UserMessage,
    WakeRequested,
    dump_event,
)
from zagent_core.journal.protocol import EventLog, StoredEvent
from zagent_core.journal.views import ChildView, SessionState, TaskView

if TYPE_CHECKING:
    from zagent_core.history.costs import SessionCosts

#: Event bodies up to this long are printed on the event's line by ``sessions show --events``.
_BODY_ON_ONE_LINE = 100
#: Below an event line (itself indented by two), a long body is indented by four more.
_BODY_INDENT = " " * 6

#: Events the conversation never shows, nor needs (a background call is known by its
#: ``task_started``, not its ``tool_call_started``, the biggest events of a session): not
#: even parsed when only the conversation is printed.
_UNSHOWN = frozenset({"tool_call_started", "notes_delivered", "wake_answered", "child_ended",
                      "read_state_updated", "tool_state_written"})
#: The last events looked at first for the last turns (a few turns' worth).
_TAIL_WINDOW = 256
#: The turns a terminal shows of a session longer than a screen, unless told (--last, --all).
DEFAULT_LAST = 3
#: How the sections where the conversation the model is shown was cut down begin: the console marks them.
COMPACTION_TITLES = ("context compacted", "context cleared")


@dataclass(frozen=True)
class Part:
    """Which of a session's events ``sessions show`` prints: those after version ``after``,
    with ``earlier_turns`` turns before them."""

    after: int = 0
    earlier_turns: int = 0


def last_turns(journal: EventLog, state: SessionState, count: int) -> Part:
    """The part of the session that holds its last ``count`` turns, found from its end (a
    window of its last events, made larger until it holds them). A turn begins at the user
    message it took up (the first, when several waited), else at its ``turn_started``."""
    if state.turns <= count:
        return Part()
    window = _TAIL_WINDOW
    while True:
        tail = journal.read_last(state.session_id, window)
        starts: list[int] = []
        waiting: int | None = None  # the first user message no turn has taken up yet
        for stored in tail:
            if isinstance(stored.event, UserMessage):
                waiting = stored.version if waiting is None else waiting
            elif isinstance(stored.event, TurnStarted):
                starts.append(stored.version if waiting is None else waiting)
                waiting = None
        # One turn more than asked: its start proves the window holds the whole of the next one.
        if len(starts) > count:
            return Part(after=starts[-count] - 1, earlier_turns=state.turns - count)
        if len(tail) < window:  # the whole session, and no more turns than asked after all
            return Part()
        window *= 4


def print_session(journal: EventLog, state: SessionState, status: str, *, fmt: str = "text",
                  show_events: bool = False, part: Part = Part(), page: bool = False,
                  costs: SessionCosts | None = None) -> None:
    """``zagent sessions show``: the header (status, model, workspace, tools, tasks, pending
    wake-ups, ``costs``, artifacts), then the conversation of ``part`` in order (``fmt``:
    ``text`` or ``md``) as it is read, then its stored events if asked; through a pager if
    ``page`` and on a terminal."""
    from zagent_core.session.status import turn_failure

    sid = state.session_id
    facts = header_facts(state, status, turn_failure(state)) + (cost_facts(costs) if costs else [])
    skipped = (f"({plural(part.earlier_turns, 'earlier turn')} not shown: --all shows the whole session, "
               "--last N the last N turns)")
    fact = "- **{}:** {}" if fmt == "md" else "{}: {}"
    with paged_lines(page=page) as out:
        if fmt == "md":
            out.say(f"# Session {sid}\n")
            for name, value in facts:
                out.say(fact.format(name, value))
        else:
            out.say(f"session {sid} ({facts[0][1]}), {facts[1][1]}")
            for name, value in facts[2:]:
                out.say(fact.format(name, value))
        out.flush()  # on the screen while the artifacts are looked for, the whole session through
        for stored in journal.read(sid, types=("artifact_recorded",)):
            if isinstance(stored.event, ArtifactRecorded):
                out.say(fact.format("artifact", artifact_line(stored.event)))
        if part.earlier_turns:
            out.say(f"\n*{skipped}*" if fmt == "md" else f"\n{skipped}")
        for entry in conversation(journal, state, part):
            out.say("\n".join(["", *_md_entry(entry)]).rstrip("\n") if fmt == "md" else "\n".join(_text_entry(entry)))
        if show_events:
            lines = [f"#{stored.seq} v{stored.version} {stored.at:%H:%M:%S.%f}"[:-3]
                     + f" {stored.event.type}" + _event_body(stored)
                     for stored in journal.read(sid, after_version=part.after)]
            if fmt == "md":
                out.say("\n".join(["", "## Events", "", *_fenced("\n".join(lines))]).rstrip("\n"))
            else:
                out.say("\nevents:")
                for line in lines:
                    out.say(f"  {line}")


# -- the conversation -----------------------------------------------------------------------


def conversation(journal: EventLog, state: SessionState, part: Part = Part(), *,
                 numbered: bool = False) -> Iterator[Entry]:
    """The conversation of ``part`` of the session, in order, as it is read (only the events
    it shows are parsed): what ``sessions show`` prints and the web console draws (``numbered``:
    each section with its event's global position, where a fork can be made)."""
    return _Conversation(state.origin or "session").entries(
        journal.read(state.session_id, after_version=part.after, types=sorted(EVENT_TYPES.keys() - _UNSHOWN)),
        numbered=numbered)


class Entry(NamedTuple):  # a tuple: made once per event shown, a frozen dataclass costs twice as much
    """One thing of a session's conversation, as ``sessions show`` prints it.

    A ``section`` starts a new part (who speaks, or what happened to the session); an
    ``item`` belongs to the section before it (a call, its result, a note). ``text`` is
    prose (what the user or the model said, a reason); ``code`` is shown verbatim (the
    arguments, an output)."""

    at: datetime
    section: bool
    title: str
    text: str = ""
    code: str | None = None
    language: str = ""
    #: How deep the call it is about nests in others (0: a call of the model's, 1: a call its tool made...).
    depth: int = 0
    #: A reply's thinking, a block each (``(redacted)`` for a redacted one): the console folds it away.
    thinking: tuple[str, ...] = ()
    #: A section's event's global position (``#N``), when numbered; 0 otherwise.
    seq: int = 0

    @property
    def said(self) -> str:
        """The text after its thinking, as ``sessions show`` prints them (``[thinking: ...]`` a line per block)."""
        if not self.thinking:
            return self.text
        return "\n".join([*(f"[thinking: {thought}]" for thought in self.thinking), self.text])


def _result_title(result: ToolCallFinished | TaskExited | TaskKilled) -> str:
    status = f"{'error' if result.is_error else 'ok'}, {result.duration_ms} ms"
    if result.exit_code is not None:
        status += f", exit {result.exit_code}"
    return status + (", timed out" if result.timed_out else "")


def _with_files(output: str, result: ToolCallFinished | TaskExited | TaskKilled) -> str:
    """The result's text, then what it holds beside it: the files its text does not name, the
    outcome its tool reported, and its structured value (shortened to a line)."""
    listed = [f"file: {item.path}" for item in result.files if item.path not in output]
    if result.outcome is not None:
        reason = f": {result.outcome.reason}" if result.outcome.reason else ""
        listed.append(f"outcome: {result.outcome.status}{reason}")
    if result.structured is not None:
        listed.append(f"structured: {head(json.dumps(result.structured, ensure_ascii=False), 200)}")
    return "\n".join([output, *listed]) if listed else output


class _Conversation:
    """Turns a session's events, in order, into :class:`Entry` items: one handler per event
    type (:data:`_HANDLERS`), each saying what the event shows, if anything."""

    def __init__(self, origin: str = "session") -> None:
        self.tools: dict[str, str] = {}  # call id -> tool
        self.background: set[str] = set()  # calls that started a task
        self.origin = origin
        self.unanswered: dict[str, datetime] = {}  # calls without a result so far, and when asked
        self.parked: dict[str, str] = {}  # calls waiting for a person, and what answers them
        self.depths: dict[str, int] = {}  # nested calls, and how deep (the model's calls are not in it)

    def entries(self, events: Iterable[StoredEvent], *, numbered: bool = False) -> Iterator[Entry]:
        opened = False
        handlers = _HANDLERS
        for stored in events:
            handler = handlers.get(type(stored.event))
            entry = handler(self, stored.event, stored.at) if handler is not None else None
            if entry is None:
                continue
            if not entry.section and not opened:  # a call nobody's reply asked for: a tools run
                yield Entry(entry.at, True, self.origin, seq=stored.seq if numbered else 0)
            opened = True
            # Numbered only when asked: the copy costs ``sessions show``, which prints no numbers.
            yield entry._replace(seq=stored.seq) if numbered and entry.section else entry
        for call_id in self.unanswered:
            yield Entry(self.unanswered[call_id], False, f"<- {self.tools[call_id]} ({call_id}): no result yet",
                        text=self.parked.get(call_id, "it runs, or was cut off (zagent resume settles it)"),
                        depth=self.depths.get(call_id, 0))

    def _task(self, task_id: str, call_id: str) -> str:
        return f"task #{task_id} ({self.tools.get(call_id, '?')})"

    def _tool(self, call_id: str) -> str:
        """The tool of a call that got its result: the call has no result still to come."""
        self.unanswered.pop(call_id, None)
        return self.tools.get(call_id, "?")

    def _result(self, call_id: str, at: datetime, title: str, code: str | None = None) -> Entry:
        """The entry of a call's result ``<- TOOL: title``, as deep as the call nests."""
        return Entry(at, False, f"<- {self._tool(call_id)}: {title}", code=code, depth=self.depths.get(call_id, 0))

    def _started(self, event: SessionStarted, at: datetime) -> None:
        self.origin = event.origin or self.origin

    def _user(self, event: UserMessage, at: datetime) -> Entry:
        return Entry(at, True, "user", text=event.text)

    def _reply(self, event: ModelReplied, at: datetime) -> Entry:
        return Entry(at, True, "assistant", text=event.text,
                     thinking=tuple(block.readable() for block in event.thinking))

    def _requested(self, event: ToolCallRequested, at: datetime) -> Entry:
        self.tools[event.call_id] = event.tool
        self.unanswered[event.call_id] = at
        parent, called = event.parent_call_id, ""
        if parent is not None:
            self.depths[event.call_id] = self.depths.get(parent, 0) + 1
            called = f", called by {self.tools.get(parent, '?')} ({parent})"
        return Entry(at, False, f"-> {event.tool} ({event.call_id}{called})",
                     code=json.dumps(event.arguments, ensure_ascii=False), language="json",
                     depth=self.depths.get(event.call_id, 0))

    def _task_started(self, event: TaskStarted, at: datetime) -> None:
        self.background.add(event.call_id)  # journaled before the call's result, which it makes short

    def _finished(self, event: ToolCallFinished, at: datetime) -> Entry:
        if event.call_id in self.background and not event.is_error:
            return self._result(event.call_id, at, head(event.output, 60))
        return self._result(event.call_id, at, _result_title(event), _with_files(event.output, event))

    def _rejected(self, event: ToolCallRejected, at: datetime) -> Entry:
        return self._result(event.call_id, at, "rejected", event.message)

    def _interrupted(self, event: ToolCallInterrupted, at: datetime) -> Entry:
        return self._result(event.call_id, at, "interrupted", event.message)

    def _note(self, event: NoteReceived, at: datetime) -> Entry:
        source = self._task(event.task_id, event.call_id) if event.task_id else self.tools.get(event.call_id, "?")
        return Entry(at, False, f"note from {source}", text=event.text)

    def _task_ended(self, event: TaskExited | TaskKilled, at: datetime) -> Entry:
        verb = "exited" if isinstance(event, TaskExited) else "was killed"
        return Entry(at, True, f"{self._task(event.task_id, event.call_id)} {verb}: {_result_title(event)}",
                     code=_with_files(event.output, event))

    def _task_interrupted(self, event: TaskInterrupted, at: datetime) -> Entry:
        return Entry(at, True, f"{self._task(event.task_id, event.call_id)} was interrupted", code=event.message)

    def _wake(self, event: WakeRequested, at: datetime) -> Entry:
        return Entry(at, False, "wake-up queued", text=head(event.text, 100))

    def _turn_started(self, event: TurnStarted, at: datetime) -> Entry | None:
        if event.reason == "wake":
            return Entry(at, True, "woken",
                         text=f"{len(event.wakes)} wake-up(s) and {len(event.notes)} note(s) delivered")
        if event.reason == "resume":
            return Entry(at, True, "resumed turn", text="the turn that was cut off goes on")
        return None

    def _turn_ended(self, event: TurnEnded, at: datetime) -> Entry | None:
        return Entry(at, True, "turn stopped", text=event.reason) if event.reason != "idle" else None

    def _asked(self, event: InputRequested, at: datetime) -> Entry:
        self.parked[event.call_id] = "it waits for the user's answer (zagent answer)"
        return Entry(at, True, "asked the user", text=event.question,
                     code="\n".join(event.choices) if event.choices else None)

    def _answered(self, event: InputAnswered, at: datetime) -> Entry:
        self.parked.pop(event.call_id, None)
        return Entry(at, True, f"the user answered ({event.via})", text=event.answer)

    def _approval_asked(self, event: ApprovalRequested, at: datetime) -> Entry:  # its arguments are shown with it
        self.parked[event.call_id] = "it waits for approval (zagent approve, or zagent deny)"
        return Entry(at, True, f"asked the user to approve {event.tool}", text=event.why)

    def _decided(self, event: ApprovalDecided, at: datetime) -> Entry:
        self.parked.pop(event.call_id, None)
        return Entry(at, True, f"the call was {'approved' if event.approved else 'denied'} ({event.via})",
                     text=event.reason)

    def _resumed(self, event: SessionResumed, at: datetime) -> Entry:
        return Entry(at, True, "session resumed", text="from a dead driver" if event.taken_over_from else "")

    def _spawned(self, event: ChildSpawned, at: datetime) -> Entry:
        return Entry(at, False, f"{event.label} {'resumed' if event.resumed else 'started'} as session "
                                f"{event.child_session_id}", text=head(event.task, 100))

    def _forked(self, event: SessionForked, at: datetime) -> Entry:
        return Entry(at, True, "forked", text=f"from session {event.parent_session_id} at #{event.parent_seq}")

    def _ended(self, event: SessionEnded, at: datetime) -> Entry:
        return Entry(at, True, "session ended", text=event.reason)

    def _artifact(self, event: ArtifactRecorded, at: datetime) -> Entry:
        return Entry(at, False, f"artifact recorded: {artifact_line(event)}")

    def _compacted(self, event: ContextCompacted, at: datetime) -> Entry:
        return Entry(at, True, f"context compacted ({event.trigger}): about {event.tokens_before:,} tokens -> "
                               f"{event.tokens_after:,}, summary by {event.model}",
                     text=f"the model is shown this summary and what follows; everything above stays in the "
                          f"journal\n\n{event.summary}")

    def _cleared(self, event: ContextCleared, at: datetime) -> Entry:
        return Entry(at, True, f"context cleared: {event.results} old tool results ({event.bytes:,} bytes) no longer "
                               f"shown to the model, about {event.tokens_before:,} tokens -> {event.tokens_after:,}")


#: What each event type shows (the others show nothing): looked up by the event's class, one
#: dict lookup per event where a ``match`` tried the cases in turn.
_HANDLERS: dict[type[Event], Callable[[_Conversation, Any, datetime], Entry | None]] = {
    SessionStarted: _Conversation._started, UserMessage: _Conversation._user, ModelReplied: _Conversation._reply,
    ToolCallRequested: _Conversation._requested, TaskStarted: _Conversation._task_started,
    ToolCallFinished: _Conversation._finished, ToolCallRejected: _Conversation._rejected,
    ToolCallInterrupted: _Conversation._interrupted, NoteReceived: _Conversation._note,
    TaskExited: _Conversation._task_ended, TaskKilled: _Conversation._task_ended,
    TaskInterrupted: _Conversation._task_interrupted, WakeRequested: _Conversation._wake,
    TurnStarted: _Conversation._turn_started, TurnEnded: _Conversation._turn_ended,
    InputRequested: _Conversation._asked, InputAnswered: _Conversation._answered,
    ApprovalRequested: _Conversation._approval_asked, ApprovalDecided: _Conversation._decided,
    SessionResumed: _Conversation._resumed, ChildSpawned: _Conversation._spawned,
    SessionForked: _Conversation._forked, SessionEnded: _Conversation._ended,
    ArtifactRecorded: _Conversation._artifact, ContextCompacted: _Conversation._compacted,
    ContextCleared: _Conversation._cleared,
}


@functools.lru_cache(maxsize=16)
def _clock(at: datetime) -> str:
    """``14:13:20Z``: the events of one append share their time, and a format costs more than a look-up."""
    return f"{at:%H:%M:%S}Z"


#: How much of a call's output the text format shows (--format md shows all of it).
_TEXT_LINES = 12
_TEXT_WIDTH = 200


def _text_block(code: str, indent: str) -> list[str]:
    lines = code.split("\n")
    shown = [indent + (line if len(line) <= _TEXT_WIDTH else line[: _TEXT_WIDTH - 3] + "...")
             for line in lines[:_TEXT_LINES]]
    if len(lines) > _TEXT_LINES:
        shown.append(f"{indent}... ({len(lines) - _TEXT_LINES} more lines)")
    return shown


#: Sections whose text is what someone said: shown as a block, even when short.
_SPEAKERS = ("user", "assistant")


def _text_entry(entry: Entry) -> list[str]:
    if entry.section:
        title, text = f"{_clock(entry.at)}  {entry.title}", entry.said
        if entry.title not in _SPEAKERS and entry.code is None and "\n" not in text:
            return ["", title + (f": {text}" if text else "")]  # what happened, on one line
        lines = ["", title + (":" if text or entry.code else "")]
        lines += [f"  {line}" for line in text.split("\n")] if text else []
        return lines + (_text_block(entry.code, "  ") if entry.code is not None else [])
    indent = "  " * (entry.depth + 1)  # a nested call's lines under its caller's
    if entry.code is not None and entry.language == "json":
        return [f"{indent}{entry.title} {head(entry.code, 100)}"]
    lines = [f"{indent}{entry.title}" + (f": {entry.text}" if entry.text else "")]
    return lines + (_text_block(entry.code, indent + "   ") if entry.code is not None else [])


def _fenced(code: str, language: str = "") -> list[str]:
    # A fence longer than any run of backticks in the content, so the content cannot close it.
    longest = max((len(run) for run in re.findall(r"`+", code)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}{language}", *code.split("\n"), fence, ""]


def _md_entry(entry: Entry) -> list[str]:
    title = entry.title.replace("-> ", "Call: ", 1).replace("<- ", "Result of ", 1)
    title = title[:1].upper() + title[1:]
    lines = [f"## {title} · {_clock(entry.at)}", ""] if entry.section else [f"**{title}**", ""]
    if entry.said:
        lines += [entry.said, ""]
    return lines + (_fenced(entry.code, entry.language) if entry.code is not None else [])


def artifact_line(artifact: ArtifactRecorded) -> str:
    """An artifact in a line: its kind, title, and where it is."""
    where = [value for value in (artifact.url, artifact.path, artifact.ref) if value]
    return f"{artifact.kind.replace('_', ' ')} {artifact.title}" + (f" ({', '.join(where)})" if where else "")


def header_facts(state: SessionState, status: str, failure: str | None) -> list[tuple[str, str]]:
    """The header's lines, as (name, value), but the artifacts (they take a read of the whole session)."""
    started = f"{state.started_at:%Y-%m-%d %H:%M:%S}Z" if state.started_at else "?"
    facts = [("status", status + (f": {failure}" if failure and status == "failed" else "")),
             ("origin", f"{state.origin}, started {started}")]
    if state.model_replies:
        facts.append(("model", f"{state.model + ', ' if state.model else ''}"
                               f"{plural(state.model_replies, 'reply', 'replies')} in {plural(state.turns, 'turn')}, "
                               f"{state.input_tokens} tokens in, {state.output_tokens} out"))
    facts.append(("workspace", str(state.workspace)))
    if state.forked_from:
        facts.append(("forked from", state.forked_from))
    if state.parent is not None:
        facts.append(("spawned by", f"{state.parent.session_id} as {state.parent.label} (call "
                                     f"{state.parent.call_id}, depth {state.parent.depth})"))
    facts += [(child.label, _child_line(child)) for child in state.children.values()]
    facts.append(("tools offered", ", ".join(t.name for t in state.tools) or "none"))
    facts += [("warning", warning) for warning in state.warnings]
    facts += [(f"task #{task.task_id} {task.tool}", _task_line(task)) for task in sorted(
        state.tasks.values(), key=lambda t: int(t.task_id) if t.task_id.isdigit() else 0)]
    if state.tasks_numbered > len(state.tasks):  # the state keeps the latest ended tasks only
        facts.append(("earlier tasks", f"{state.tasks_numbered - len(state.tasks)} more, ended (the conversation "
                                       "has them, --json lists them)"))
    facts += [("pending wake-up", head(wake.text)) for wake in state.pending_wakes.values()]
    return facts


def _child_line(child: ChildView) -> str:
    return f"session {child.session_id}, {child.status}: {first_line(child.task)}"


def _task_line(task: TaskView) -> str:
    ended = f", ended {task.ended_at:%H:%M:%S}Z" if task.ended_at else ""
    code = f", exit {task.exit_code}" if task.exit_code is not None else ""
    error = ", error" if task.is_error and task.status == "exited" else ""
    return (f"{task.status}{error}{code}, pid {task.pid}, "
            f"started {task.started_at:%H:%M:%S}Z{ended}")


def _event_body(stored: StoredEvent) -> str:
    """An event's body as stored: on its line when short, else as indented JSON below it."""
    body = dump_event(stored.event)
    if len(body) <= _BODY_ON_ONE_LINE:
        return f" {body}"
    return "\n" + textwrap.indent(json.dumps(json.loads(body), indent=2, ensure_ascii=False), _BODY_INDENT)
