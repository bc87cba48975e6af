"""drive/'s refusals and stops, said as click says errors; and what a parked session waits on."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import click

from zagent_cli.output import head, say

if TYPE_CHECKING:
    from zagent_core import SessionState


@contextmanager
def refusals_said() -> Iterator[None]:
    """A refused decision is a failure (exit 1), anything else drive/ refuses was asked wrongly
    (a usage error, exit 2), as are a text over its cap in ``limits`` and an answer's number no choice has; a
    drive a person stopped exits 130, saying how to go on."""
    from zagent_core.drive.errors import DecisionRefusedError, DriveError, Stopped, WaitsForPersonError
    from zagent_core.session.engine import NoSuchChoiceError
    from zagent_core.session.typed import InputTooLargeError

    try:
        yield
    except DecisionRefusedError as exc:
        raise click.ClickException(str(exc)) from None
    except NoSuchChoiceError as exc:
        raise click.UsageError(f"{exc}; answer with a choice's number, or give --literal to answer with the "
                               "number as written") from None
    except WaitsForPersonError as exc:
        raise click.UsageError(f"{exc}: " + " ".join(waiting_lines(exc.state))) from None
    except (DriveError, InputTooLargeError) as exc:
        raise click.UsageError(str(exc)) from None
    except Stopped as stop:
        if stop.resumable:
            say(f"\n[stopped; resume with: zagent resume {stop.session_id}]", err=True)
        else:
            say(f"\n[stopped; the call is journaled in session {stop.session_id}]", err=True)
        sys.exit(130)


def waiting_lines(state: SessionState) -> list[str]:
    """The questions and approvals a parked session waits on, and the commands that answer each."""
    several = len(state.questions) > 1
    lines = [f"[waiting on user: {question.question!r}; answer with: zagent answer {state.session_id} "
             f"{'--call ' + question.call_id + ' ' if several else ''}\"TEXT\"]"
             for question in state.questions.values()]
    approvals = state.waiting_approvals
    for approval in approvals.values():
        which = f"{state.session_id} {approval.call_id}" if len(approvals) > 1 else state.session_id
        lines.append(f"[waiting on approval: {approval.tool} {head(json.dumps(approval.arguments), 100)} "
                     f"({approval.why}); approve with: zagent approve {which}; deny with: zagent deny {which} "
                     '--reason "TEXT"]')
    return lines
