"""How the CLI prints sessions, events and audit rows for a person (``--json`` aside).

Every line goes through :func:`zagent_cli.output.say`: what tools and models wrote is shown,
never sent to the terminal as control sequences. Imported by the commands that read the
journal, so ``zagent --help`` does not load the event models.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from zagent_cli.output import head, plural, say, say_part, terminal_safe
from zagent_core.journal.events import (
    ApprovalDecided,
    ApprovalRequested,
    ChildEnded,
    ChildSpawned,
    ContextCleared,
    ContextCompacted,
    Event,
    InputAnswered,
    InputRequested,
    ModelReplied,
    NoteReceived,
    SessionResumed,
    SessionStarted,
    TaskExited,
    TaskInterrupted,
    TaskKilled,
    ToolCallFinished,
    ToolCallInterrupted,
    ToolCallRejected,
    ToolCallRequested,
    TurnEnded,
    TurnStarted,
    UserMessage,
)
from zagent_core.journal.protocol import SessionSummary, StoredEvent
from zagent_core.tools.model_catalog import known

if TYPE_CHECKING:
    from zagent_core.config import Config
    from zagent_core.history.costs import SessionCosts, Spend
    from zagent_core.history.trees import TreeNode


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

    A sub-agent's events come too: each line under its ``[child-1 started: ...]``, indented
    one step deeper than its parent's and led by its label, a grandchild's with its parent's
    (``[child-1/child-2]``: children of one reply run at once, so their lines interleave; one
    going on after a crash is led by ``[sub-agent]``). Its task is its started line. Its replies are printed whole once journaled: only
    the session driven streams its text.

    Called from the agent's thread, the task watcher's and the sub-agents', hence the lock.
    """

    def __init__(self, *, thinking: bool = True) -> None:
        self._thinking = thinking  # show the model's thinking (dimmed)
        self._lock = threading.Lock()
        self._streamed = ""  # the current reply's text, as printed
        self._open = False  # an assistant line is begun and not ended
        #: A sub-agent's session -> its depth under the session driven and its label (from its ``child_spawned``).
        self._children: dict[str, tuple[int, str]] = {}
        #: The session driven: the first one heard, or one that starts or resumes.
        self._driven: str | None = None

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
            if self._driven is None or (isinstance(event, (SessionStarted, SessionResumed))
                                        and stored.session_id not in self._children):
                self._driven = stored.session_id
            # One going on after a crash was spawned before this display heard: its label is not known here.
            child = None if stored.session_id == self._driven else self._children.get(stored.session_id, (1, "sub-agent"))
            if isinstance(event, ChildSpawned):
                self._children[event.child_session_id] = (child[0] + 1, f"{child[1]}/{event.label}") if child \
                    else (1, event.label)
            if child is not None:  # a sub-agent's: never part of what streams here
                self._child_line(child, stored)
                return
            if isinstance(event, ModelReplied) and self._thinking:
                self._show_thinking(event)
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

    def _show_thinking(self, reply: ModelReplied) -> None:
        """A reply's thinking, dimmed, once the reply is journaled: under a streamed reply's text."""
        for block in reply.thinking:
            self._end_line()
            say(f"thinking: {block.readable()}", dim=True)

    def _child_line(self, child: tuple[int, str], stored: StoredEvent) -> None:
        line = event_line(stored)
        if line is not None and not isinstance(stored.event, UserMessage):  # its task: the started line says it
            self._end_line()
            depth, label = child
            lead = f"{'    ' * depth}[{label}] "
            say("\n".join(lead + part for part in line.split("\n")))

    def _end_line(self) -> None:
        if self._open:
            say_part("\n")
            self._open = False


def first_line(text: str, width: int = 60) -> str:
    """A task's first line (a task may be a whole brief), shortened."""
    return head(text.strip().split("\n")[0], width)


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
        outcome = call_outcome(row)
        say(f"{row['requested_at']}  {row['session_id']}  {row['tool']:<14} {outcome:<11} {took:>9}  "
            f"{_arguments(row['arguments'], 50)}")
        say(f"    {head(row['output_head'], 110)}")
        if row.get("outcome"):
            because = f": {head(row['outcome_reason'], 100)}" if row.get("outcome_reason") else ""
            say(f"    outcome: {row['outcome']}{because}")
        if row.get("asked"):
            say(f"    {asked_line(row['asked'])}")


def call_outcome(row: dict[str, Any]) -> str:
    """How a call of the ``tool_calls`` view came out, in a word or two: ``ok``, ``error exit 2``, ``running``..."""
    outcome = str(row["status"]) if row["status"] != "finished" else ("error" if row["is_error"] else "ok")
    return outcome + (f" exit {row['exit_code']}" if row["exit_code"] not in (None, 0) else "")


def asked_line(asked: dict[str, Any]) -> str:
    """Who was asked what about a call, and the answer: a row of the ``decisions`` view."""
    if asked["kind"] == "question":
        answer = f"{head(asked['answer'], 60)!r} ({asked['via']})" if asked["decision"] else "no answer yet"
        return f"asked the user {head(asked['asked'], 60)!r}: {answer}"
    if asked["decision"] is None:
        return f"asked the user to approve ({asked['why']}): no decision yet"
    because = f": {head(asked['reason'], 60)}" if asked["reason"] else ""
    return f"asked the user to approve ({asked['why']}): {asked['decision']} ({asked['via']}){because}"


def print_tree(root: TreeNode, costs: dict[str, SessionCosts] | None = None) -> None:
    """``zagent sessions show --tree``: a line per session, its children below it. The numbers
    are the subtree's (the session's and its sub-agents'; with ``costs``, their cost too), the time its own."""
    def lines(node: TreeNode, lead: str, branch: str) -> Iterator[str]:
        numbers = spawn_numbers(node.total("requests"), node.total("input_tokens"), node.total("output_tokens"),
                                node.duration_ms)
        if costs is not None:
            usd = costs[node.session_id].subtree.usd
            numbers += ", cost unknown" if usd is None else f", ${usd:.4f}"
        task = first_line(node.task) if node.task else "-"
        name = f"{node.label}  {node.session_id}" if node.label else node.session_id
        yield f"{lead}{branch}{name}  {node.outcome}  {numbers}  {task}"
        below = lead + {"": "", "├─ ": "│  ", "└─ ": "   "}[branch]
        for number, child in enumerate(node.children, start=1):
            yield from lines(child, below, "└─ " if number == len(node.children) else "├─ ")

    for line in lines(root, "", ""):
        say(line)


def spend_line(spend: Spend) -> str:
    """Tokens and cost in a line: ``$0.0123: 1,200 tokens in, 80 out, 5,000 cache read, 0 cache write``."""
    usage = spend.usage
    tokens = (f"{usage.input_tokens:,} tokens in, {usage.output_tokens:,} out, {usage.cache_read_tokens:,} cache read, "
              f"{usage.cache_write_tokens:,} cache write")
    if spend.usd is None:
        return (f"unknown ({', '.join(spend.unpriced)} not priced in config.json's models): {tokens}")
    return f"${spend.usd:.4f}: {tokens}"


#: The turns whose cost ``sessions show`` and ``audit`` print, the latest (``--json`` gives every one).
TURN_COSTS_SHOWN = 10


def cost_facts(costs: SessionCosts) -> list[tuple[str, str]]:
    """The cost lines of a session: its own, with its sub-agents (if any), and its latest turns'."""
    facts = [("cost", spend_line(costs.session))]
    if costs.descendants:
        facts.append((f"cost with {plural(costs.descendants, 'sub-agent')}", spend_line(costs.subtree)))
    first = max(0, len(costs.turns) - TURN_COSTS_SHOWN)
    if first:
        facts.append(("earlier turns", f"{first} more (--json gives the cost of each)"))
    facts += [(f"turn {number} cost", spend_line(spend))
              for number, spend in enumerate(costs.turns[first:], start=first + 1)]
    return facts


_Shown = TypeVar("_Shown")


def shown_costs(config: Config, costs: _Shown) -> _Shown | None:
    """The costs to print: none without a model catalog in config.json, where every cost would
    be unknown (the token counts are printed anyway; ``--json`` still has them)."""
    return costs if known(config) else None
