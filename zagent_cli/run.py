"""``zagent run``, ``resume``, ``answer``, ``approve`` and ``deny``: each a request to drive/, its conversation printed."""

from __future__ import annotations

import signal
import sys
from typing import TYPE_CHECKING, NoReturn

import click

from zagent_cli.asking import ask_here
from zagent_cli.context import Context
from zagent_cli.inputs import prompt_text
from zagent_cli.output import ERROR, OK, plural, say
from zagent_cli.params import TEXT, complete_sessions
from zagent_cli.refusals import refusals_said, waiting_lines

if TYPE_CHECKING:
    from zagent_cli.show import LiveConversation
    from zagent_core.drive.display import Display
    from zagent_core.drive.driving import DriveRequest
    from zagent_core.session.engine import Session


def _drive(obj: Context, request: DriveRequest) -> NoReturn:
    """Shared by run, resume, answer, approve and deny: drive the session as asked, its
    conversation printed as it happens, then say how it stopped."""
    from zagent_cli.show import LiveConversation
    from zagent_core.drive.driving import drive

    live = LiveConversation()
    with obj.journal() as journal, refusals_said():
        outcome = drive(obj.engine(journal), request, _display(live))
    session = outcome.session
    waiting = len(session.state.running_tasks)
    tail = f"; {plural(waiting, 'background task')} still running" if waiting else ""
    # Only the kind of a stop: its reason was printed with the turn's end, once is enough.
    say(f"[{outcome.reason.partition(':')[0]} after {plural(outcome.requests, 'model request')}{tail}; "
        f"session {session.session_id}]", err=True, colour=OK if outcome.fine else ERROR)
    for line in waiting_lines(session.state):
        say(line)
    sys.exit(0 if outcome.fine else 1)


def _display(live: LiveConversation) -> Display:
    """The terminal's view of a drive: its steps on stderr, the conversation as it happens on
    stdout. Off a terminal, each reply is printed whole once it is journaled (not as it
    streams), so scripts and logs get the bytes they always did."""
    from zagent_core.drive.display import Display

    return Display(status=lambda line: say(f"[{line}]", err=True),
                   problem=lambda problem: say(f"{problem.severity}: {problem}", err=True),
                   output=say, wake=lambda text: say(f"[info: {text}]"), events=live.event,
                   text=live.text if sys.stdout.isatty() else None, attach=_attach)


def _attach(session: Session) -> None:
    # SIGTERM stops a run the way Ctrl-C does: tools killed, the journal told.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    ask_here(session)


def _latest_open_session(obj: Context) -> str:
    """What ``-c``/``--last`` continue."""
    from zagent_core.drive.driving import latest_open_session

    with obj.existing_journal() as journal, refusals_said():
        return latest_open_session(journal)


@click.command()
@click.argument("prompt", type=TEXT)
@click.option("--model", "model_spec", metavar="SPEC", help="scripted:PATH, openai:MODEL or anthropic:MODEL (default: config agent.model).")
@click.option("--session", "session_id", type=TEXT, metavar="ID", shell_complete=complete_sessions,
              help="Continue this session instead of starting one.")
@click.option("-c", "--continue", "continue_latest", is_flag=True,
              help="Continue the most recently active session that has not ended.")
@click.option("--detach", is_flag=True,
              help="Journal the message and leave the session to the workers (zagent worker); print its id.")
@click.pass_obj
def run(obj: Context, prompt: str, model_spec: str | None, session_id: str | None, continue_latest: bool,
        detach: bool) -> None:
    """Run the agent on PROMPT ("-": read it from stdin), headless, printing the conversation
    as it happens.

    Stays up while background tasks run (agent.max_background_wait_minutes), waking the
    agent when they end; the session stays resumable. Exit 0 when the agent is idle, 1
    when a turn was stopped (limit, model error), 130 on Ctrl-C. With --detach, only the
    message is journaled: a worker answers it.
    """
    if continue_latest:
        if session_id is not None:
            raise click.UsageError("give --session ID or -c (the latest session), not both")
        session_id = _latest_open_session(obj)
    if detach:
        _submit(obj, model_spec, session_id, prompt_text(prompt))
    else:
        from zagent_core.drive.driving import DriveRequest

        _drive(obj, DriveRequest(session_id, prompt_text(prompt), model_spec))


def _submit(obj: Context, model_spec: str | None, session_id: str | None, prompt: str | None) -> None:
    """``run --detach``: the message journaled in a new (or the given) session, left to the workers."""
    from zagent_core.drive.driving import submit

    if model_spec is not None:
        raise click.UsageError("--detach takes no --model: the worker drives the session with the model it "
                               "journaled, else the worker's --model, else agent.model in config.json")
    with obj.journal() as journal, refusals_said():
        session_id = submit(obj.engine(journal), session_id, prompt or "")
    say(session_id)


@click.command()
@click.argument("session_id", type=TEXT, required=False, shell_complete=complete_sessions)
@click.argument("prompt", type=TEXT, required=False)
@click.option("--model", "model_spec", metavar="SPEC", help="scripted:PATH, openai:MODEL or anthropic:MODEL (default: config agent.model).")
@click.option("--last", is_flag=True, help="Resume the most recently active session that has not ended.")
@click.pass_obj
def resume(obj: Context, session_id: str | None, prompt: str | None, model_spec: str | None, last: bool) -> None:
    """Settle SESSION_ID after a crash (cut-off calls, dead or finished tasks), deliver its
    pending wake-ups, and continue, with PROMPT if given ("-": read it from stdin). With
    --last, the one argument given is the PROMPT."""
    if last:
        if prompt is not None:
            raise click.UsageError("--last names the session: give at most a PROMPT")
        session_id, prompt = _latest_open_session(obj), session_id
    elif session_id is None:
        raise click.UsageError("name the SESSION_ID to resume, or give --last (the most recently active session)")
    from zagent_core.drive.driving import DriveRequest

    _drive(obj, DriveRequest(session_id, prompt_text(prompt), model_spec))


@click.command()
@click.argument("session_id", type=TEXT, shell_complete=complete_sessions)
@click.argument("text", type=TEXT)
@click.option("--call", "call_id", type=TEXT, metavar="ID",
              help="The ask_user call to answer, when the session waits on several questions.")
@click.option("--model", "model_spec", metavar="SPEC", help="scripted:PATH, openai:MODEL or anthropic:MODEL (default: the session's).")
@click.pass_obj
def answer(obj: Context, session_id: str, text: str, call_id: str | None, model_spec: str | None) -> None:
    """Answer the question SESSION_ID waits on (status "waiting on user") with TEXT
    ("-": read it from stdin), then continue the session as resume does. The answer is
    the ask_user call's result; it is taken once: a second answer is refused."""
    text = prompt_text(text) or ""
    if not text.strip():
        raise click.UsageError("the answer is empty: give the text to answer with")
    from zagent_core.drive.driving import Decision, DriveRequest

    _drive(obj, DriveRequest(session_id, None, model_spec,
                             Decision("answer", call_id, lambda session: session.answer(text, call_id), text)))


@click.command()
@click.argument("session_id", type=TEXT, shell_complete=complete_sessions)
@click.argument("call_id", type=TEXT, required=False)
@click.option("--model", "model_spec", metavar="SPEC", help="scripted:PATH, openai:MODEL or anthropic:MODEL (default: the session's).")
@click.pass_obj
def approve(obj: Context, session_id: str, call_id: str | None, model_spec: str | None) -> None:
    """Approve the call SESSION_ID waits on (status "waiting on approval"): run it here,
    then continue the session as resume does. Name its CALL_ID when several calls wait. A
    decision is taken once: a second approve or deny is refused."""
    from zagent_core.drive.driving import Decision, DriveRequest

    _drive(obj, DriveRequest(session_id, None, model_spec,
                             Decision("approval", call_id, lambda session: session.approve(call_id))))


@click.command()
@click.argument("session_id", type=TEXT, shell_complete=complete_sessions)
@click.argument("call_id", type=TEXT, required=False)
@click.option("--reason", type=TEXT, default="", metavar="TEXT",
              help="Why not: the model is told, with the denial, as the call's result.")
@click.option("--model", "model_spec", metavar="SPEC", help="scripted:PATH, openai:MODEL or anthropic:MODEL (default: the session's).")
@click.pass_obj
def deny(obj: Context, session_id: str, call_id: str | None, reason: str, model_spec: str | None) -> None:
    """Deny the call SESSION_ID waits on (status "waiting on approval"): it is not run, and
    its result for the model says so, with the reason. Then continue the session as resume
    does. Name its CALL_ID when several calls wait. A decision is taken once."""
    from zagent_core.drive.driving import Decision, DriveRequest

    _drive(obj, DriveRequest(session_id, None, model_spec,
                             Decision("approval", call_id, lambda session: session.deny(call_id, reason=reason),
                                      reason)))
