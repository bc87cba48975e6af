"""Questions and approvals asked on the terminal a command runs in (``ask_user``, calls that need an approval)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zagent_core.config import LimitsConfig
    from zagent_core.journal.views import ApprovalView
    from zagent_core.session.engine import Session
    from zagent_core.session.typed import Kind


def _within_cap(text: str, kind: Kind, limits: LimitsConfig) -> bool:
    """Whether ``text`` is within its cap; if not, the person is told, and asked again."""
    from zagent_cli.output import ERROR, say
    from zagent_core.session.typed import InputTooLargeError, typed

    try:
        typed(text, kind, limits)
    except InputTooLargeError as exc:
        say(f"{exc}; or type a shorter one.", err=True, colour=ERROR)
        return False
    return True


def _ask_on_terminal(limits: LimitsConfig, question: str, choices: list[str] | None) -> str:
    """Ask on the terminal ``zagent run`` runs in (the question and its numbered choices are
    printed with the conversation); a choice may be answered by its number."""
    from zagent_cli.output import ERROR, say
    from zagent_core.session.engine import NoSuchChoiceError, chosen
    from zagent_core.tools.inprocess import Parked

    while True:
        try:
            answer = input("answer> ").strip()
        except EOFError:  # the terminal went away: the question waits for `zagent answer`
            raise Parked("waiting for the user's answer (the terminal closed)") from None
        try:
            answer = chosen(answer, choices)
        except NoSuchChoiceError as exc:
            say(f"{exc}; give a choice's number, or your own words.", err=True, colour=ERROR)
            continue
        if answer and _within_cap(answer, "answer", limits):
            return answer


def _approve_on_terminal(limits: LimitsConfig, approval: ApprovalView) -> tuple[bool, str]:
    """Ask y/n on the terminal ``zagent run`` runs in (the call was printed with the
    conversation); a no may say why, for the model."""
    from zagent_core.tools.inprocess import Parked

    while True:
        try:
            answer = input(f"approve {approval.tool}? [y/n] ").strip().lower()
        except EOFError:  # the terminal went away: the call waits for `zagent approve`/`deny`
            raise Parked("waiting for approval (the terminal closed)") from None
        if answer in ("y", "yes"):
            return True, ""
        if answer in ("n", "no"):
            return False, _reason(limits)


def _reason(limits: LimitsConfig) -> str:
    """Why a call was denied, for the model: asked again while it is over its cap."""
    while True:
        try:
            reason = input("why not? (the model is told; Enter: no reason) ").strip()
        except EOFError:
            return ""
        if _within_cap(reason, "reason", limits):
            return reason


def terminal_askers(limits: LimitsConfig) -> tuple[Callable[[str, list[str] | None], str],
                                                    Callable[[ApprovalView], tuple[bool, str]]]:
    """How a question is answered, and an approval decided, on this terminal."""
    return functools.partial(_ask_on_terminal, limits), functools.partial(_approve_on_terminal, limits)


def ask_here(session: Session) -> None:
    """On a terminal, questions and approvals are asked there; elsewhere they park the session."""
    if sys.stdin.isatty() and sys.stdout.isatty():
        session.ask_terminal, session.approve_terminal = terminal_askers(session.engine.config.limits)
