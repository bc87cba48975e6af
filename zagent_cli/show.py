"""How the CLI prints sessions, events and audit rows for a person (``--json`` aside).

Every line goes through :func:`zagent_cli.output.say`: what tools and models wrote is shown,
never sent to the terminal as control sequences. Imported by the commands that read the
journal, so ``zagent --help`` does not load the event models.
"""

from __future__ import annotations

import json
import re
import textwrap
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from zagent_cli.output import head, plural, say, say_part, terminal_safe
from zagent_core.journal.events import (
    ApprovalDecided,
    ApprovalRequested,
    ArtifactRecorded,
    ChildEnded,
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
    ToolCallFinished,
    ToolCallInterrupted,
    ToolCallRejected,
    ToolCallRequested,
    ToolCallStarted,
    TurnEnded,
    TurnStarted,
    UserMessage,
    WakeRequested,
    dump_event,
)
from zagent_core.journal.protocol import SessionSummary, StoredEvent
from zagent_core.journal.views import ChildView, SessionState, TaskView

if TYPE_CHECKING:
    from zagent_core.history.trees import TreeNode

#: Event bodies up to this long are printed on the event's line by ``sessions show --events``.
_BODY_ON_ONE_LINE = 100
#: Below an event line (itself indented by two), a long body is indented by four more.
_BODY_INDENT = " " * 6


def _arguments(arguments: Any, width: int) -> str:
    return head(json.dumps(arguments, ensure_ascii=False), width)


def event_line(stored: StoredEvent) -> str | None:
    """The line ``zagent run`` prints for an event as it happens, if it prints one."""
    for line_of in (_message_line, _call_line, _task_or_child_line, _turn_line):
        line = line_of(stored.event)
        if line is not None:
            return line
    return None


def _message_line(event: Event) -> str | None:
    """What the user, the model, a note or a question said."""
    match event:
        case UserMessage(text=text):
            return f"user: {text}"
        case ModelReplied(text=text) if text:
            return f"assistant: {text}"
        case NoteReceived(text=text):
            return f"  [info: {text}]"
        case InputRequested(question=question, choices=choices):
            return f"  ? {question}" + "".join(f"\n    {n}. {choice}" for n, choice in enumerate(choices or [], 1))
        case InputAnswered(answer=answer, via=via):
            return f"  answered ({via}): {head(answer, 100)}"
    return None


def _call_line(event: Event) -> str | None:
    """A tool call asked for, approved or denied, and its result."""
    match event:
        case ToolCallRequested(tool=tool, arguments=arguments):
            return f"  -> {tool} {_arguments(arguments, 100)}"
        case ToolCallFinished(is_error=is_error, output=output):
            return f"  <- {'error' if is_error else 'ok'}: {head(output, 100)}"
        case ToolCallRejected(message=message) | ToolCallInterrupted(message=message):
            return f"  <- error: {head(message, 100)}"
        case ApprovalRequested(tool=tool, why=why):
            return f"  ? run {tool}? it needs approval ({why})"
        case ApprovalDecided(approved=approved, via=via, reason=reason):
            return f"  {'approved' if approved else 'denied'} ({via}){': ' + head(reason, 100) if reason else ''}"
    return None


def _task_or_child_line(event: Event) -> str | None:
    """How a background task ended, and how a sub-agent began or ended."""
    match event:
        case TaskExited(task_id=task_id, output=output):
            return f"  task #{task_id} exited: {head(output, 100)}"
        case TaskKilled(task_id=task_id, output=output):
            return f"  task #{task_id} killed: {head(output, 100)}"
        case TaskInterrupted(task_id=task_id, message=message):
            return f"  task #{task_id} interrupted: {head(message, 100)}"
        case ChildSpawned(label=label, task=task, resumed=resumed):
            return f"  [{label} {'resumed' if resumed else 'started'}: {head(task, 100)}]"
        case ChildEnded(label=label, status=status, stats=s):
            return f"  [{label} {status}: {spawn_numbers(s.turns, s.input_tokens, s.output_tokens, s.duration_ms)}]"
    return None


def _turn_line(event: Event) -> str | None:
    """A turn a wake-up began, or one that ended other than idle."""
    match event:
        case TurnStarted(reason="wake"):
            return "(woken)"
        case TurnEnded(reason="waiting_on_user"):
            return "(waiting on user)"
        case TurnEnded(reason="waiting_on_approval"):
            return "(waiting on approval)"
        case TurnEnded(reason=reason) if reason != "idle":
            return f"(turn stopped: {reason})"
        case ContextCompacted(trigger=trigger, tokens_before=before, tokens_after=after, model=model):
            return f"(context compacted, {trigger}: about {before:,} tokens -> {after:,}; summary by {model})"
        case ContextCleared(results=results, tokens_before=before, tokens_after=after):
            return f"(context cleared: {plural(results, 'old tool result')}, about {before:,} tokens -> {after:,})"
    return None


def spawn_numbers(requests: int, input_tokens: int, output_tokens: int, duration_ms: int | None) -> str:
    """What a sub-agent used, in a line: ``2 model requests, 1,234 tokens in, 56 out, 1.2 s``."""
    took = f", {duration_ms / 1000:.1f} s" if duration_ms is not None else ""
    return f"{plural(requests, 'model request')}, {input_tokens:,} tokens in, {output_tokens:,} out{took}"


def show_event(stored: StoredEvent) -> None:
    """Print the conversation as it happens: what the user, the model and the tools said."""
    line = event_line(stored)
    if line is not None:
        say(line)


class LiveConversation:
    """What ``zagent run`` prints as the session happens: :func:`show_event`'s lines, and the
    model's text as it streams (:meth:`text`, the agent's ``on_text``).

    A streamed reply is printed piece by piece on the ``assistant:`` line its
    ``model_replied`` would have printed whole, and that event then prints nothing (its
    calls are events of their own). Another event's line while the text streams (a note of
    a background task) ends the line, and the text goes on on a new ``assistant:`` line. A
    request asked again (the provider's ``""``: the reply starts over) voids what streamed
    of it: its line ends there. Should what was printed still differ from the reply the
    journal kept, the reply is printed whole as well, so what was kept is what was shown last.
    The provider hands on text as the journal keeps it (a key the server echoes redacted).

    Called from the agent's thread and the task watcher's, hence the lock.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._streamed = ""  # the current reply's text, as printed
        self._open = False  # an assistant line is begun and not ended

    def text(self, piece: str) -> None:
        with self._lock:
            if not piece:  # asked again: what came of the reply is void
                self._end_line()
                self._streamed = ""
                return
            if not self._open:
                say_part("assistant: ")
                self._open = True
            self._streamed += piece
            say_part(piece)

    def event(self, stored: StoredEvent) -> None:
        with self._lock:
            event = stored.event
            if isinstance(event, ModelReplied) and self._streamed:
                self._end_line()
                shown, self._streamed = self._streamed, ""
                if terminal_safe(shown) == terminal_safe(event.text):
                    return
            elif isinstance(event, (TurnStarted, TurnEnded)):
                self._streamed = ""  # a reply that never came (the model failed): what streamed of it is void
            line = event_line(stored)
            if line is not None:
                self._end_line()
                say(line)

    def _end_line(self) -> None:
        if self._open:
            say_part("\n")
            self._open = False


# -- sessions show: the conversation --------------------------------------------------------


@dataclass(frozen=True)
class Entry:
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


def _result_title(result: ToolCallFinished | TaskExited | TaskKilled) -> str:
    status = f"{'error' if result.is_error else 'ok'}, {result.duration_ms} ms"
    if result.exit_code is not None:
        status += f", exit {result.exit_code}"
    return status + (", timed out" if result.timed_out else "")


def _with_files(output: str, result: ToolCallFinished | TaskExited | TaskKilled) -> str:
    listed = [f"file: {item.path}" for item in result.files if item.path not in output]
    return "\n".join([output, *listed]) if listed else output


class _Conversation:
    """Turns a session's events, in order, into :class:`Entry` items."""

    def __init__(self) -> None:
        self.tools: dict[str, str] = {}  # call id -> tool
        self.background: set[str] = set()  # calls that started a task
        self.origin = "session"
        self.unanswered: dict[str, datetime] = {}  # calls without a result so far, and when asked
        self.parked: dict[str, str] = {}  # calls waiting for a person, and what answers them

    def entries(self, events: Iterable[StoredEvent]) -> Iterator[Entry]:
        opened = False
        for stored in events:
            if isinstance(stored.event, SessionStarted):
                self.origin = stored.event.origin or self.origin
            entry = self.entry(stored.event, stored.at)
            if entry is None:
                continue
            if not entry.section and not opened:  # a call nobody's reply asked for: a tools run
                yield Entry(entry.at, True, self.origin)
            opened = True
            yield entry
        for call_id in self.unanswered:
            yield Entry(self.unanswered[call_id], False, f"<- {self.tools[call_id]} ({call_id}): no result yet",
                        text=self.parked.get(call_id, "it runs, or was cut off (zagent resume settles it)"))

    def _task(self, task_id: str, call_id: str) -> str:
        return f"task #{task_id} ({self.tools.get(call_id, '?')})"

    def entry(self, event: Event, at: datetime) -> Entry | None:  # noqa: C901 - one case per event type
        if isinstance(event, (ToolCallFinished, ToolCallRejected, ToolCallInterrupted)):
            self.unanswered.pop(event.call_id, None)
        match event:
            case UserMessage(text=text):
                return Entry(at, True, "user", text=text)
            case ModelReplied(text=text):
                return Entry(at, True, "assistant", text=text)
            case ToolCallRequested(call_id=call_id, tool=tool, arguments=arguments):
                self.tools[call_id] = tool
                self.unanswered[call_id] = at
                return Entry(at, False, f"-> {tool} ({call_id})",
                             code=json.dumps(arguments, ensure_ascii=False), language="json")
            case ToolCallStarted(call_id=call_id, task_id=task_id) if task_id is not None:
                self.background.add(call_id)
            case ToolCallFinished(call_id=call_id) as result if call_id in self.background and not result.is_error:
                return Entry(at, False, f"<- {self.tools.get(call_id, '?')}: {head(result.output, 60)}")
            case ToolCallFinished(call_id=call_id) as result:
                return Entry(at, False, f"<- {self.tools.get(call_id, '?')}: {_result_title(result)}",
                             code=_with_files(result.output, result))
            case ToolCallRejected(call_id=call_id, message=message):
                return Entry(at, False, f"<- {self.tools.get(call_id, '?')}: rejected", code=message)
            case ToolCallInterrupted(call_id=call_id, message=message):
                return Entry(at, False, f"<- {self.tools.get(call_id, '?')}: interrupted", code=message)
            case NoteReceived(call_id=call_id, task_id=task_id, text=text):
                source = self._task(task_id, call_id) if task_id else self.tools.get(call_id, "?")
                return Entry(at, False, f"note from {source}", text=text)
            case TaskExited(task_id=task_id, call_id=call_id) | TaskKilled(task_id=task_id, call_id=call_id) as ended:
                verb = "exited" if isinstance(ended, TaskExited) else "was killed"
                return Entry(at, True, f"{self._task(task_id, call_id)} {verb}: {_result_title(ended)}",
                             code=_with_files(ended.output, ended))
            case TaskInterrupted(task_id=task_id, call_id=call_id, message=message):
                return Entry(at, True, f"{self._task(task_id, call_id)} was interrupted", code=message)
            case WakeRequested(text=text):
                return Entry(at, False, "wake-up queued", text=head(text, 100))
            case TurnStarted(reason="wake", wakes=wakes, notes=notes):
                return Entry(at, True, "woken", text=f"{len(wakes)} wake-up(s) and {len(notes)} note(s) delivered")
            case TurnStarted(reason="resume"):
                return Entry(at, True, "resumed turn", text="the turn that was cut off goes on")
            case InputRequested(call_id=call_id, question=question, choices=choices):
                self.parked[call_id] = "it waits for the user's answer (zagent answer)"
                return Entry(at, True, "asked the user", text=question,
                             code="\n".join(choices) if choices else None)
            case InputAnswered(call_id=call_id, answer=answer, via=via):
                self.parked.pop(call_id, None)
                return Entry(at, True, f"the user answered ({via})", text=answer)
            case ApprovalRequested(call_id=call_id, tool=tool, why=why):  # the call's arguments are shown with it
                self.parked[call_id] = "it waits for approval (zagent approve, or zagent deny)"
                return Entry(at, True, f"asked the user to approve {tool}", text=why)
            case ApprovalDecided(call_id=call_id, approved=approved, via=via, reason=reason):
                self.parked.pop(call_id, None)
                return Entry(at, True, f"the call was {'approved' if approved else 'denied'} ({via})", text=reason)
            case TurnEnded(reason=reason) if reason != "idle":
                return Entry(at, True, "turn stopped", text=reason)
            case SessionResumed(taken_over_from=taken):
                return Entry(at, True, "session resumed", text="from a dead driver" if taken else "")
            case ChildSpawned(label=label, child_session_id=child, task=task, resumed=resumed):
                return Entry(at, False, f"{label} {'resumed' if resumed else 'started'} as session {child}",
                             text=head(task, 100))
            case SessionForked(parent_session_id=parent, parent_seq=seq):
                return Entry(at, True, "forked", text=f"from session {parent} at #{seq}")
            case SessionEnded(reason=reason):
                return Entry(at, True, "session ended", text=reason)
            case ArtifactRecorded() as artifact:
                return Entry(at, False, f"artifact recorded: {artifact_line(artifact)}")
            case ContextCompacted() as compacted:
                return Entry(at, True, f"context compacted ({compacted.trigger}): about {compacted.tokens_before:,} "
                                       f"tokens -> {compacted.tokens_after:,}, summary by {compacted.model}",
                             text=f"the model is shown this summary and what follows; everything above stays in the "
                                  f"journal\n\n{compacted.summary}")
            case ContextCleared() as cleared:
                return Entry(at, True, f"context cleared: {cleared.results} old tool results ({cleared.bytes:,} bytes) "
                                       f"no longer shown to the model, about {cleared.tokens_before:,} tokens -> "
                                       f"{cleared.tokens_after:,}")
        return None


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
        title = f"{entry.at:%H:%M:%S}Z  {entry.title}"
        if entry.title not in _SPEAKERS and entry.code is None and "\n" not in entry.text:
            return ["", title + (f": {entry.text}" if entry.text else "")]  # what happened, on one line
        lines = ["", title + (":" if entry.text or entry.code else "")]
        lines += [f"  {line}" for line in entry.text.split("\n")] if entry.text else []
        return lines + (_text_block(entry.code, "  ") if entry.code is not None else [])
    if entry.code is not None and entry.language == "json":
        return [f"  {entry.title} {head(entry.code, 100)}"]
    lines = [f"  {entry.title}" + (f": {entry.text}" if entry.text else "")]
    return lines + (_text_block(entry.code, "     ") if entry.code is not None else [])


def _fenced(code: str, language: str = "") -> list[str]:
    # A fence longer than any run of backticks in the content, so the content cannot close it.
    longest = max((len(run) for run in re.findall(r"`+", code)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}{language}", *code.split("\n"), fence, ""]


def _md_entry(entry: Entry) -> list[str]:
    title = entry.title.replace("-> ", "Call: ", 1).replace("<- ", "Result of ", 1)
    title = title[:1].upper() + title[1:]
    lines = [f"## {title} · {entry.at:%H:%M:%S}Z", ""] if entry.section else [f"**{title}**", ""]
    if entry.text:
        lines += [entry.text, ""]
    return lines + (_fenced(entry.code, entry.language) if entry.code is not None else [])


def artifact_line(artifact: ArtifactRecorded) -> str:
    """An artifact in a line: its kind, title, and where it is."""
    where = [value for value in (artifact.url, artifact.path, artifact.ref) if value]
    return f"{artifact.kind.replace('_', ' ')} {artifact.title}" + (f" ({', '.join(where)})" if where else "")


def _header_facts(state: SessionState, status: str, failure: str | None,
                  artifacts: list[ArtifactRecorded]) -> list[tuple[str, str]]:
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
    facts += [("pending wake-up", head(wake.text)) for wake in state.pending_wakes.values()]
    facts += [("artifact", artifact_line(artifact)) for artifact in artifacts]
    return facts


def _child_line(child: ChildView) -> str:
    return f"session {child.session_id}, {child.status}: {_first_line(child.task)}"


def _first_line(text: str, width: int = 60) -> str:
    """A task's first line (a task may be a whole brief), shortened."""
    return head(text.strip().split("\n")[0], width)


def _task_line(task: TaskView) -> str:
    ended = f", ended {task.ended_at:%H:%M:%S}Z" if task.ended_at else ""
    code = f", exit {task.exit_code}" if task.exit_code is not None else ""
    error = ", error" if task.is_error and task.status == "exited" else ""
    return (f"{task.status}{error}{code}, pid {task.pid}, "
            f"started {task.started_at:%H:%M:%S}Z{ended}")


def print_session(state: SessionState, status: str, events: list[StoredEvent], *, fmt: str = "text",
                  show_events: bool = False) -> None:
    """``zagent sessions show``: the header (status, model, workspace, tools, tasks, pending
    wake-ups), then the conversation in order (``fmt``: ``text`` or ``md``), then the
    stored events if asked."""
    from zagent_core.session.status import turn_failure

    facts = _header_facts(state, status, turn_failure(state),
                          [e.event for e in events if isinstance(e.event, ArtifactRecorded)])
    if fmt == "md":
        say(f"# Session {state.session_id}\n")
        for name, value in facts:
            say(f"- **{name}:** {value}")
        for entry in _Conversation().entries(events):
            say("\n".join(["", *_md_entry(entry)]).rstrip("\n"))
    else:
        say(f"session {state.session_id} ({facts[0][1]}), {facts[1][1]}")
        for name, value in facts[2:]:
            say(f"{name}: {value}")
        for entry in _Conversation().entries(events):
            say("\n".join(_text_entry(entry)))
    if show_events:
        lines = [f"#{stored.seq} v{stored.version} {stored.at:%H:%M:%S.%f}"[:-3]
                 + f" {stored.event.type}" + _event_body(stored) for stored in events]
        if fmt == "md":
            say("\n".join(["", "## Events", "", *_fenced("\n".join(lines))]).rstrip("\n"))
        else:
            say("\nevents:")
            for line in lines:
                say(f"  {line}")


def _event_body(stored: StoredEvent) -> str:
    """An event's body as stored: on its line when short, else as indented JSON below it."""
    body = dump_event(stored.event)
    if len(body) <= _BODY_ON_ONE_LINE:
        return f" {body}"
    return "\n" + textwrap.indent(json.dumps(json.loads(body), indent=2, ensure_ascii=False), _BODY_INDENT)


def print_sessions(summaries: list[SessionSummary], statuses: dict[str, str], prompts: dict[str, str | None]) -> None:
    """``zagent sessions list``: one line per session, its first prompt last (shortened). A
    sub-agent (``--all``) comes under the session that spawned it, indented, its label before
    its task; one whose parent is not listed (past ``--limit``) names that parent."""
    listed = {s.session_id for s in summaries}
    rows = list(_tree_order(summaries))
    names = ["  " * indent + s.session_id for s, indent in rows]
    ids = max([22, *(len(name) for name in names)])
    width = max([len("STATUS"), *(len(status) for status in statuses.values())])
    say(f"{'SESSION':<{ids}}  {'STARTED':<20}  {'LAST EVENT':<20}  {'EVENTS':>6}  {'CALLS':>5}  "
        f"{'STATUS':<{width}}  FIRST PROMPT")
    for (s, _), name in zip(rows, names):
        prompt = head(prompts[s.session_id], 50) if prompts[s.session_id] is not None else "-"
        if s.label is not None:
            parent = f" of {s.parent_session_id}" if s.parent_session_id not in listed else ""
            prompt = f"{s.label}{parent}: {prompt}"
        say(f"{name:<{ids}}  {s.started_at:%Y-%m-%d %H:%M:%S}Z  {s.last_at:%Y-%m-%d %H:%M:%S}Z  "
            f"{s.events:>6}  {s.calls:>5}  {statuses[s.session_id]:<{width}}  {prompt}".rstrip())


def _tree_order(summaries: list[SessionSummary]) -> Iterator[tuple[SessionSummary, int]]:
    """The sessions with how deep each is shown: those without a listed parent in the order
    given, each followed by its listed descendants (children in the order they started)."""
    listed = {s.session_id for s in summaries}
    children: dict[str, list[SessionSummary]] = {}
    for summary in sorted(summaries, key=lambda s: s.started_at):
        if summary.parent_session_id in listed:
            children.setdefault(summary.parent_session_id or "", []).append(summary)

    shown: set[str] = set()

    def below(summary: SessionSummary, indent: int) -> Iterator[tuple[SessionSummary, int]]:
        shown.add(summary.session_id)
        yield summary, indent
        for child in children.pop(summary.session_id, []):
            yield from below(child, indent + 1)

    for summary in summaries:
        if summary.parent_session_id not in listed:
            yield from below(summary, 0)
    # Sessions that name each other as parents (a journal edited into a loop) are listed all the same.
    yield from ((summary, 0) for summary in summaries if summary.session_id not in shown)


def print_audit(rows: list[dict[str, Any]]) -> None:
    """``zagent audit``: two lines per call, the call and the head of its output."""
    if not rows:
        say("no calls match")
    for row in rows:
        took = f"{row['duration_ms']} ms" if row["duration_ms"] is not None else "-"
        outcome = row["status"] if row["status"] != "finished" else ("error" if row["is_error"] else "ok")
        if row["exit_code"] not in (None, 0):
            outcome += f" exit {row['exit_code']}"
        say(f"{row['requested_at']}  {row['session_id']}  {row['tool']:<14} {outcome:<11} {took:>9}  "
            f"{_arguments(row['arguments'], 50)}")
        say(f"    {head(row['output_head'], 110)}")
        if row.get("asked"):
            say(f"    {asked_line(row['asked'])}")


def asked_line(asked: dict[str, Any]) -> str:
    """Who was asked what about a call, and the answer: a row of the ``decisions`` view."""
    if asked["kind"] == "question":
        answer = f"{head(asked['answer'], 60)!r} ({asked['via']})" if asked["decision"] else "no answer yet"
        return f"asked the user {head(asked['asked'], 60)!r}: {answer}"
    if asked["decision"] is None:
        return f"asked the user to approve ({asked['why']}): no decision yet"
    because = f": {head(asked['reason'], 60)}" if asked["reason"] else ""
    return f"asked the user to approve ({asked['why']}): {asked['decision']} ({asked['via']}){because}"


def print_tree(root: TreeNode) -> None:
    """``zagent sessions show --tree``: a line per session, its children below it. The numbers
    are the subtree's (the session's and its sub-agents'), the time its own."""
    def lines(node: TreeNode, lead: str, branch: str) -> Iterator[str]:
        numbers = spawn_numbers(node.total("requests"), node.total("input_tokens"), node.total("output_tokens"),
                                node.duration_ms)
        task = _first_line(node.task) if node.task else "-"
        name = f"{node.label}  {node.session_id}" if node.label else node.session_id
        yield f"{lead}{branch}{name}  {node.outcome}  {numbers}  {task}"
        below = lead + {"": "", "├─ ": "│  ", "└─ ": "   "}[branch]
        for number, child in enumerate(node.children, start=1):
            yield from lines(child, below, "└─ " if number == len(node.children) else "├─ ")

    for line in lines(root, "", ""):
        say(line)
