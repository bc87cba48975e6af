"""What a session asks of people: the answers to ``ask_user`` questions, and the decisions on calls
that need approval (tools whose manifest says ``"permission": "ask"``).

Each is journaled before it is asked, and taken once: an answer (with its call's result)
or a decision is one transaction, under the session's lock, so two deciders never both win.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from zagent_core.config import LimitsConfig
from zagent_core.errors import ZagentError
from zagent_core.journal.events import (
    ApprovalDecided,
    ApprovalRequested,
    InputAnswered,
    InputRequested,
    ToolCallFinished,
    ToolCallRejected,
    ToolCallRequested,
)
from zagent_core.journal.protocol import Journal
from zagent_core.journal.views import ApprovalView, QuestionView
from zagent_core.logs import get_logger
from zagent_core.session.crashpoints import crash_point
from zagent_core.session.typed import InputTooLargeError, typed
from zagent_core.session.writer import Writer
from zagent_core.tools.inprocess import BuiltinContext, Parked
from zagent_core.tools.results import ToolResult
from zagent_core.tools.text import storable

log = get_logger(__name__)

#: Why a call of an ``ask`` tool waits for a person, as ``approval_requested`` says.
ASK_WHY = 'its manifest says "permission": "ask"'


class NoQuestionError(ZagentError, LookupError):
    """An answer for a session (or call) with no question waiting; the message says which."""


class NoApprovalError(ZagentError, LookupError):
    """A decision for a session (or call) with no call waiting for approval; the message says which."""


class NoSuchChoiceError(ZagentError, ValueError):
    """An answer that is a number no choice of the question has; nothing was answered."""


def chosen(text: str, choices: list[str] | None) -> str:
    """What ``text`` answers a question that offers ``choices``: a number among them (``2``, as
    they are shown, from 1) is that choice; any other text is itself (the person may answer in
    their own words). A number past them is refused (:class:`NoSuchChoiceError`): it is more
    likely a slip than an answer, and an answer is taken once."""
    number = text.strip()
    if not choices or not (number.isascii() and number.isdigit()):
        return text
    if 1 <= int(number) <= len(choices):
        return choices[int(number) - 1]
    offered = ", ".join(f"{n}. {choice}" for n, choice in enumerate(choices, start=1))
    raise NoSuchChoiceError(f"{number} is not one of the question's choices ({offered}); nothing was answered")


def why_no_question(journal: Journal, session_id: str, call_id: str | None) -> str:
    """Why an answer finds nothing to answer (the journal is read: only on this error)."""
    answers = [stored.event for stored in journal.read(session_id, types=("input_answered",))
               if isinstance(stored.event, InputAnswered) and call_id in (None, stored.event.call_id)]
    if answers:
        answered = answers[-1]
        return (f"the question of call {answered.call_id} in session {session_id} was already answered "
                f"({answered.via}: {answered.answer!r}); an answer is taken once, so nothing was changed")
    which = f"no question of call {call_id}" if call_id else "no question"
    return f"session {session_id} has {which} waiting for an answer; nothing was changed"


def why_no_approval(journal: Journal, session_id: str, call_id: str | None) -> str:
    """Why a decision finds no call waiting for one (the journal is read: only on this error)."""
    decisions = [stored.event for stored in journal.read(session_id, types=("approval_decided",))
                 if isinstance(stored.event, ApprovalDecided) and call_id in (None, stored.event.call_id)]
    if decisions:
        decided = decisions[-1]
        how = "approved" if decided.approved else "denied"
        because = f": {decided.reason!r}" if decided.reason else ""
        return (f"call {decided.call_id} in session {session_id} was already {how} ({decided.via}{because}); "
                "a decision is taken once, so nothing was changed")
    which = f"no call {call_id}" if call_id else "no call"
    return f"session {session_id} has {which} waiting for approval; nothing was changed"


def denial_message(tool: str, via: str, reason: str) -> str:
    """The result a denied call gives the model: what was not run, by whom, and why."""
    because = f": {reason}" if reason.strip() else "; no reason was given"
    return f"{tool} was not run: the user denied this call ({via}){because}. Do not call it again the same way."


_Waiting = TypeVar("_Waiting")


def _the_one_waiting(waiting: dict[str, _Waiting], call_id: str | None, error: type[LookupError],
                     several: str) -> _Waiting | None:
    """What waits for call ``call_id``, or the one thing waiting when it is None (None: nothing
    such waits). Several waiting and none named: ``error``, ``several`` (its ``{n}`` the count)
    followed by their call ids."""
    if call_id is None and len(waiting) > 1:
        raise error(several.replace("{n}", str(len(waiting))) + ", ".join(waiting))
    call_id = call_id or next(iter(waiting), None)
    return waiting.get(call_id) if call_id else None


class People:
    """Journals questions and approvals, asks them on a terminal when there is one, and takes the answers."""

    def __init__(self, writer: Writer, allowed: Callable[[str], bool], limits: LimitsConfig) -> None:
        self._writer = writer
        #: Whether config.json's ``approvals.allow`` names a tool (its calls are approved by it).
        self._allowed = allowed
        #: ``answer_bytes`` and ``denial_reason_bytes``: an answer or a reason over them is refused.
        self._limits = limits
        #: How to ask a person now (``zagent run`` on a terminal): question, choices -> answer.
        #: None: an ``ask_user`` call parks the session until ``zagent answer``.
        self.ask_terminal: Callable[[str, list[str] | None], str] | None = None
        #: How to ask a person for approval now: the call -> (approved, reason); may raise
        #: :class:`Parked`. None: a call that needs approval parks until ``zagent approve``/``deny``.
        self.approve_terminal: Callable[[ApprovalView], tuple[bool, str]] | None = None

    # -- questions -------------------------------------------------------------------

    def ask_user(self, context: BuiltinContext, question: str, choices: list[str] | None) -> str:
        """Journal the question, then ask it on the terminal, or park the call (:class:`Parked`) for :meth:`answer`."""
        writer = self._writer
        writer.append([InputRequested(call_id=context.call_id, question=storable(question), choices=choices)])
        crash_point("after_input_requested")
        if self.ask_terminal is None:
            raise Parked(f"waiting for the user's answer (zagent answer {writer.session_id} TEXT)")
        try:
            answer = typed(self.ask_terminal(question, choices), "answer", self._limits)
        except InputTooLargeError as exc:  # the question stays open: a shorter answer may come later
            raise Parked(f"waiting for the user's answer (zagent answer {writer.session_id} TEXT); the one typed "
                         f"was refused: {exc}") from None
        context.staged.append(InputAnswered(call_id=context.call_id, answer=answer, via="terminal"))
        return answer

    def answer(self, text: str, call_id: str | None, via: str, *, numbered: bool = False) -> QuestionView:
        """Answer a waiting question: the answer and its call's result in one transaction, once.
        ``numbered``: a number picks the question's choice of that number (:func:`chosen`)."""
        writer = self._writer
        with writer.lock:
            question = _the_one_waiting(writer.state.questions, call_id, NoQuestionError,
                                        f"session {writer.session_id} waits on {{n}} questions; name the one to "
                                        "answer with --call: ")
            if question is None:
                raise NoQuestionError(why_no_question(writer.journal, writer.session_id, call_id))
            answer = typed(chosen(text, question.choices) if numbered else text, "answer", self._limits)
            crash_point("before_input_answered")
            writer.append([InputAnswered(call_id=question.call_id, answer=answer, via=via),
                           ToolCallFinished(call_id=question.call_id,
                                            **ToolResult(output=answer, is_error=False).event_fields())])
        crash_point("after_input_answered")
        return question

    # -- approvals -------------------------------------------------------------------

    def ask_approval(self, requested: ToolCallRequested) -> ToolResult | None:
        """Journal the call and that it needs approval (one step), then take the decision:
        config.json's, the terminal's, or none yet. Returns None when the call is approved (it
        runs now), else its result: the denial, or that it waits for :meth:`decide`."""
        writer, call_id, name = self._writer, requested.call_id, requested.tool
        asked = ApprovalRequested(call_id=call_id, tool=name, arguments=requested.arguments, why=ASK_WHY)
        crash_point("before_approval_requested")
        if self._allowed(name):  # pre-approved: the audit still says why it ran
            writer.append([requested, asked, ApprovalDecided(
                call_id=call_id, approved=True, via="config",
                reason=f'config.json "approvals": {{"allow": [...]}} names {name}')])
            crash_point("after_approval_decided")
            return None
        writer.append([requested, asked])
        crash_point("after_approval_requested")
        if self.approve_terminal is not None:
            try:
                approved, reason = self.approve_terminal(writer.state.approvals[call_id])
                _, denied = self.decide(call_id, approved, reason, via="terminal")
            except Parked:
                pass  # no one at the terminal after all: the call waits as below
            except InputTooLargeError as exc:  # the reason given is over its cap: the call waits as below
                log.warning("approval_reason_refused", session=writer.session_id, call_id=call_id, why=str(exc))
            else:
                return denied
        log.info("tool_call_parked", session=writer.session_id, call_id=call_id, tool=name)
        return ToolResult(output=f"waiting for approval (zagent approve {writer.session_id} {call_id})",
                          is_error=False)

    def decide(self, call_id: str | None, approved: bool, reason: str, *,
               via: str) -> tuple[ApprovalView, ToolResult | None]:
        """Decide a waiting call, once; returns it, and its result when denied (the denial and
        its ``reason``, journaled with the decision). An approved call is the caller's to run.

        ``call_id`` may be left out when one call waits. :class:`NoApprovalError` says why
        nothing was decided (none waits, it was decided already, several wait).
        """
        writer = self._writer
        with writer.lock:  # decided once: the check and the decision in one step
            approval = _the_one_waiting(writer.state.waiting_approvals, call_id, NoApprovalError,
                                        f"session {writer.session_id} waits on {{n}} approvals; name the call to "
                                        "decide: ")
            if approval is None:
                raise NoApprovalError(why_no_approval(writer.journal, writer.session_id, call_id))
            reason = typed(reason, "reason", self._limits)
            decided = ApprovalDecided(call_id=approval.call_id, approved=approved, via=via, reason=reason)
            crash_point("before_approval_decided")
            denied = None
            if approved:
                writer.append([decided])
            else:
                message = denial_message(approval.tool, via, reason)
                writer.append([decided, ToolCallRejected(call_id=approval.call_id, reason="denied", message=message)])
                denied = ToolResult(output=message, is_error=True)
        crash_point("after_approval_decided")
        return approval, denied
