"""Questions and approvals asked on the terminal a command runs in (``ask_user``, calls that need an approval)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zagent_core.journal.views import ApprovalView
    from zagent_core.session.engine import Session


def _ask_on_terminal(question: str, choices: list[str] | None) -> str:
    """Ask on the terminal ``zagent run`` runs in (the question and its numbered choices are
    printed with the conversation); a choice may be answered by its number."""
    from zagent_core.tools.inprocess import Parked

    while True:
        try:
            answer = input("answer> ").strip()
        except EOFError:  # the terminal went away: the question waits for `zagent answer`
            raise Parked("waiting for the user's answer (the terminal closed)") from None
        if answer.isdigit() and choices and 1 <= int(answer) <= len(choices):
            return choices[int(answer) - 1]
        if answer:
            return answer


def _approve_on_terminal(approval: ApprovalView) -> tuple[bool, str]:
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
            try:
                return False, input("why not? (the model is told; Enter: no reason) ").strip()
            except EOFError:
                return False, ""


def ask_here(session: Session) -> None:
    """On a terminal, questions and approvals are asked there; elsewhere they park the session."""
    if sys.stdin.isatty() and sys.stdout.isatty():
        session.ask_terminal = _ask_on_terminal
        session.approve_terminal = _approve_on_terminal
