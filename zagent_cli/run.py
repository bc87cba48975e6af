"""``zagent run``, ``resume``, ``answer``, ``approve`` and ``deny``: each a request to drive/, its conversation printed."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, NoReturn

import click

from zagent_cli.asking import ask_here
from zagent_cli.context import Context
from zagent_cli.inputs import prompt_text
from zagent_cli.output import ERROR, OK, emit_json, plural, say
from zagent_cli.params import SESSION, TEXT, complete_sessions, session_named
from zagent_cli.refusals import refusals_said, waiting_lines

if TYPE_CHECKING:
    from zagent_core.drive.display import Display
    from zagent_core.drive.driving import DriveOutcome, DriveRequest
    from zagent_core.session.engine import Session


#: What a drive prints: the conversation as it happens (``transcript``), only the final reply
#: (``-q``), or one JSON object at the end (``--json``).
Output = Literal["transcript", "quiet", "json"]


def output_options(command: Callable[..., None]) -> Callable[..., None]:
    """``-q/--quiet`` and ``--json``, for the commands that drive a session."""
    command = click.option("--json", "as_json", is_flag=True,
                           help="Print one JSON object at the end (session id, final reply, status, turns, "
                                "requests, tokens), and nothing else; questions and approvals wait.")(command)
    return click.option("-q", "--quiet", is_flag=True,
                        help="Print only the final reply, on stdout: no transcript, no status lines; "
                             "questions and approvals wait.")(command)


def output_of(quiet: bool, as_json: bool) -> Output:
    if quiet and as_json:
        raise click.UsageError("give -q (the final reply) or --json (one JSON object), not both")
    return "quiet" if quiet else "json" if as_json else "transcript"


def _drive(obj: Context, request: DriveRequest, output: Output = "transcript") -> NoReturn:
    """Shared by run, resume, answer, approve and deny: drive the session as asked, its
    conversation printed as it happens (or, ``-q``/``--json``, only what it came to), then
    say how it stopped."""
    from zagent_core.drive.driving import drive

    with obj.journal() as journal, refusals_said():
        outcome = drive(obj.engine(journal), request, _display(output))
    if output == "json":
        emit_json(_outcome_json(outcome))
    elif output == "quiet":
        _say_quietly(outcome)
    else:
        _say_stop(outcome)
    sys.exit(0 if outcome.fine else 1)


def _say_stop(outcome: DriveOutcome) -> None:
    """After the transcript: how the drive stopped, and what a parked session waits on."""
    session = outcome.session
    waiting = len(session.state.running_tasks)
    tail = f"; {plural(waiting, 'background task')} still running" if waiting else ""
    # Only the kind of a stop: its reason was printed with the turn's end, once is enough.
    say(f"[{outcome.reason.partition(':')[0]} after {plural(outcome.requests, 'model request')}{tail}; "
        f"session {session.session_id}]", err=True, colour=OK if outcome.fine else ERROR)
    for line in waiting_lines(session.state):
        say(line)


def _say_quietly(outcome: DriveOutcome) -> None:
    """``-q``: the final reply on stdout; on stderr only what a script's person must know (why a
    turn failed, what a parked session waits on)."""
    if outcome.tally.reply:
        say(outcome.tally.reply)
    if not outcome.fine:
        say(f"error: {outcome.reason}; session {outcome.session.session_id}", err=True, colour=ERROR)
    for line in waiting_lines(outcome.session.state):
        say(line, err=True)


def _outcome_json(outcome: DriveOutcome) -> dict[str, Any]:
    """``--json``: what the drive came to, in one object."""
    state, tally = outcome.session.state, outcome.tally
    return {"session_id": state.session_id, "status": outcome.reason.partition(":")[0], "reason": outcome.reason,
            "reply": tally.reply, "turns": tally.turns, "requests": outcome.requests, "tokens": tally.tokens,
            "running_tasks": len(state.running_tasks),
            "questions": [{"call_id": q.call_id, "question": q.question, "choices": q.choices}
                          for q in state.questions.values()],
            "approvals": [{"call_id": a.call_id, "tool": a.tool, "arguments": a.arguments, "why": a.why}
                          for a in state.waiting_approvals.values()]}


def _display(output: Output) -> Display:
    """The terminal's view of a drive: its steps on stderr, the conversation as it happens on
    stdout. Off a terminal, each reply is printed whole once it is journaled (not as it
    streams), so scripts and logs get the bytes they always did. ``-q`` and ``--json`` show
    nothing as it happens and ask nobody: a question or an approval parks the session."""
    from zagent_cli.show import LiveConversation
    from zagent_core.drive.display import Display

    if output != "transcript":
        return Display(attach=_stoppable)
    live = LiveConversation()
    return Display(status=lambda line: say(f"[{line}]", err=True),
                   problem=lambda problem: say(f"{problem.severity}: {problem}", err=True),
                   output=say, wake=lambda text: say(f"[info: {text}]"), events=live.event,
                   text=live.text if sys.stdout.isatty() else None, attach=_attach)


def _stoppable(session: Session) -> None:
    # SIGTERM stops a run the way Ctrl-C does: tools killed, the journal told.
    signal.signal(signal.SIGTERM, signal.default_int_handler)


def _attach(session: Session) -> None:
    _stoppable(session)
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
@output_options
@click.pass_obj
def run(obj: Context, prompt: str, model_spec: str | None, session_id: str | None, continue_latest: bool,
        detach: bool, quiet: bool, as_json: bool) -> None:
    """Run the agent on PROMPT ("-": read it from stdin), headless, printing the conversation
    as it happens. Text piped in is sent with PROMPT, after a blank line.

    Stays up while background tasks run (agent.max_background_wait_minutes), waking the
    agent when they end; the session stays resumable. Exit 0 when the agent is idle, 1
    when a turn was stopped (limit, model error), 130 on Ctrl-C. With --detach, only the
    message is journaled: a worker answers it.
    """
    output = output_of(quiet, as_json)
    if continue_latest:
        if session_id is not None:
            raise click.UsageError("give --session ID or -c (the latest session), not both")
        session_id = _latest_open_session(obj)
    elif session_id is not None:  # named once the options agree (SESSION would name it first)
        session_id = session_named(obj, session_id)
    if detach:
        _submit(obj, model_spec, session_id, prompt_text(prompt, obj.limits()), output)
    else:
        from zagent_core.drive.driving import DriveRequest

        _drive(obj, DriveRequest(session_id, prompt_text(prompt, obj.limits()), model_spec), output)


def _submit(obj: Context, model_spec: str | None, session_id: str | None, prompt: str | None,
            output: Output) -> None:
    """``run --detach``: the message journaled in a new (or the given) session, left to the workers."""
    from zagent_core.drive.driving import submit

    with obj.journal() as journal, refusals_said():
        session_id = submit(obj.engine(journal), session_id, prompt or "", model_spec)
    if output == "json":
        emit_json({"session_id": session_id, "status": "queued"})
    else:
        say(session_id)


@click.command()
@click.argument("session_id", type=TEXT, required=False, shell_complete=complete_sessions)
@click.argument("prompt", type=TEXT, required=False)
@click.option("--model", "model_spec", metavar="SPEC", help="scripted:PATH, openai:MODEL or anthropic:MODEL (default: config agent.model).")
@click.option("--last", is_flag=True, help="Resume the most recently active session that has not ended.")
@output_options
@click.pass_obj
def resume(obj: Context, session_id: str | None, prompt: str | None, model_spec: str | None, last: bool,
           quiet: bool, as_json: bool) -> None:
    """Settle SESSION_ID after a crash (cut-off calls, dead or finished tasks), deliver its
    pending wake-ups, and continue, with PROMPT if given ("-": read it from stdin; text
    piped in joins it, or is it). With --last, the one argument given is the PROMPT."""
    output = output_of(quiet, as_json)
    if last:
        if prompt is not None:
            raise click.UsageError("--last names the session: give at most a PROMPT")
        session_id, prompt = _latest_open_session(obj), session_id
    elif session_id is None:
        raise click.UsageError("name the SESSION_ID to resume, or give --last (the most recently active session)")
    else:  # named here, not by its type: with --last, this argument is the PROMPT
        session_id = session_named(obj, session_id)
    from zagent_core.drive.driving import DriveRequest

    _drive(obj, DriveRequest(session_id, prompt_text(prompt, obj.limits()), model_spec), output)


@click.command()
@click.argument("session_id", type=SESSION, shell_complete=complete_sessions)
@click.argument("text", type=TEXT)
@click.option("--call", "call_id", type=TEXT, metavar="ID",
              help="The ask_user call to answer, when the session waits on several questions.")
@click.option("--literal", is_flag=True,
              help="Answer with TEXT as written, even a number (without it, 2 picks the question's choice 2).")
@click.option("--model", "model_spec", metavar="SPEC", help="scripted:PATH, openai:MODEL or anthropic:MODEL (default: the session's).")
@output_options
@click.pass_obj
def answer(obj: Context, session_id: str, text: str, call_id: str | None, literal: bool, model_spec: str | None,
           quiet: bool, as_json: bool) -> None:
    """Answer the question SESSION_ID waits on (status "waiting on user") with TEXT
    ("-": read it from stdin), then continue the session as resume does. When the question
    offered choices, a number picks one ("2": the second). The answer is the ask_user
    call's result; it is taken once: a second answer is refused."""
    text = prompt_text(text, obj.limits(), "answer", piped=False) or ""
    if not text.strip():
        raise click.UsageError("the answer is empty: give the text to answer with")
    from zagent_core.drive.driving import DriveRequest, answering

    _drive(obj, DriveRequest(session_id, None, model_spec, answering(text, call_id, numbered=not literal)),
           output_of(quiet, as_json))


@click.command()
@click.argument("session_id", type=SESSION, shell_complete=complete_sessions)
@click.argument("call_id", type=TEXT, required=False)
@click.option("--model", "model_spec", metavar="SPEC", help="scripted:PATH, openai:MODEL or anthropic:MODEL (default: the session's).")
@output_options
@click.pass_obj
def approve(obj: Context, session_id: str, call_id: str | None, model_spec: str | None, quiet: bool,
            as_json: bool) -> None:
    """Approve the call SESSION_ID waits on (status "waiting on approval"): run it here,
    then continue the session as resume does. Name its CALL_ID when several calls wait. A
    decision is taken once: a second approve or deny is refused."""
    from zagent_core.drive.driving import DriveRequest, approving

    _drive(obj, DriveRequest(session_id, None, model_spec, approving(call_id)), output_of(quiet, as_json))


@click.command()
@click.argument("session_id", type=SESSION, shell_complete=complete_sessions)
@click.argument("call_id", type=TEXT, required=False)
@click.option("--reason", type=TEXT, default="", metavar="TEXT",
              help="Why not: the model is told, with the denial, as the call's result.")
@click.option("--model", "model_spec", metavar="SPEC", help="scripted:PATH, openai:MODEL or anthropic:MODEL (default: the session's).")
@output_options
@click.pass_obj
def deny(obj: Context, session_id: str, call_id: str | None, reason: str, model_spec: str | None, quiet: bool,
         as_json: bool) -> None:
    """Deny the call SESSION_ID waits on (status "waiting on approval"): it is not run, and
    its result for the model says so, with the reason. Then continue the session as resume
    does. Name its CALL_ID when several calls wait. A decision is taken once."""
    from zagent_core.drive.driving import DriveRequest, denying

    _drive(obj, DriveRequest(session_id, None, model_spec, denying(call_id, reason)), output_of(quiet, as_json))
