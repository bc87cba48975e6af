"""``zagent run``, ``resume``, ``answer``, ``approve`` and ``deny``: drive a session and print its conversation."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import click

from zagent_cli.asking import ask_here
from zagent_cli.context import Context
from zagent_cli.inputs import prompt_text
from zagent_cli.output import ERROR, OK, head, plural, say
from zagent_cli.params import TEXT, complete_sessions

if TYPE_CHECKING:
    from zagent_cli.show import LiveConversation
    from zagent_core import Engine, SessionState
    from zagent_core.agent.models import Model
    from zagent_core.journal.protocol import Journal
    from zagent_core.session.engine import Session


def _model_choice(engine: Engine, model_spec: str | None,
              state: SessionState | None) -> tuple[str | None, str | None]:
    """The model spec to run with and its endpoint: ``--model``, else what the session
    journaled, else config (``(None, None)``: a session that never had a model)."""
    if model_spec is not None:
        return model_spec, None
    if state is not None and state.model:
        return state.model, state.model_base_url
    if state is not None and state.origin in ("tools run", "mcp"):  # a person's or a client's calls: no model
        return None, None
    return engine.config.agent.model, None


def _model_for(engine: Engine, model_spec: str | None, state: SessionState | None,
               prompt: str | None) -> tuple[Model | None, str]:
    """The model to run with, and its spec as journaled for ``resume`` (a script's path made
    absolute, so it is found from anywhere); no model for a session that never had one."""
    from zagent_core.agent.models import load_model

    spec, base_url = _model_choice(engine, model_spec, state)
    if not spec:
        if state is None or prompt is not None or state.origin == "run":
            # A run cut off before its first turn journaled its model cannot guess it.
            raise click.UsageError('no model: give --model (scripted:PATH, openai:MODEL or anthropic:MODEL) or set '
                                   '"agent": {"model": ...} in config.json')
        return None, ""
    config = engine.config.model
    if base_url is not None:
        config = config.model_copy(update={"base_url": base_url})
    try:
        model = load_model(spec, config)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    kind, _, path = spec.partition(":")
    return model, f"scripted:{Path(path).resolve()}" if kind == "scripted" and path else spec


def _settle_only(session: Session) -> str:
    """A session no model drives (``tools run`` cut off): settled, its calls that go on (a
    spawn's child) finished, its tasks waited for, then ended (unless its call waits for a
    person: it stays parked)."""
    for call in session.continuing_calls():
        say(f"[going on with {call.tool} ({call.call_id})]", err=True)
        say(session.go_on(call).output)
    if session.state.questions or session.state.waiting_approvals:
        return "waiting_on_user" if session.state.questions else "waiting_on_approval"
    for task in session.state.running_tasks:
        say(f"[waiting for task #{task.task_id} ({task.tool})]", err=True)
        session.wait_task(task.task_id, None)
    for wake in session.state.pending_wakes.values():
        if wake.reason != "note":
            say(f"[info: {wake.text}]")
    session.end()
    return "ended"


def _waiting_lines(state: SessionState) -> list[str]:
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


@dataclass(frozen=True)
class _Decision:
    """What ``answer``, ``approve`` and ``deny`` give a parked session before it goes on."""

    #: What it decides: a question's answer, or an approval.
    kind: Literal["answer", "approval"]
    call_id: str | None
    give: Callable[[Session], object]

    def refusal(self, journal: Journal, state: SessionState) -> str | None:
        """Why nothing waits for this decision (checked before the session is resumed), or None."""
        from zagent_core.session.engine import why_no_approval, why_no_question

        waiting, why = ((state.questions, why_no_question) if self.kind == "answer"
                        else (state.waiting_approvals, why_no_approval))
        if not waiting or (self.call_id is not None and self.call_id not in waiting):
            return why(journal, state.session_id, self.call_id)
        return None


def _drive(obj: Context, model_spec: str | None, session_id: str | None, prompt: str | None, *,
           decision: _Decision | None = None) -> None:
    """Shared by run, resume, answer, approve and deny: open or resume the session (and
    give it the decision it waits for), run the agent, report."""
    import signal

    from zagent_cli.show import LiveConversation
    from zagent_core.agent.loop import Agent
    from zagent_core.session.engine import NoApprovalError, NoQuestionError, SessionEndedError, UnknownSessionError
    from zagent_core.session.leases import SessionBusyError

    with obj.journal() as journal:
        engine = obj.engine(journal)
        state = engine.session_state(session_id) if session_id is not None else None
        if decision is not None and state is not None and state.version and state.status != "ended":
            refusal = decision.refusal(journal, state)
            if refusal is not None:
                raise click.ClickException(refusal)
        if state is not None and (state.questions or state.waiting_approvals) and decision is None \
                and prompt is not None:
            first = "an answer to its question" if state.questions else "a decision on a call"
            raise click.UsageError(f"session {session_id} waits for {first} first: " + " ".join(_waiting_lines(state)))
        if state is not None and state.parent is not None:
            _refuse_a_waited_child(engine, state)
        model, spec = _model_for(engine, model_spec, state, prompt)
        live = LiveConversation()
        show_event = live.event
        try:
            if session_id is None:
                for problem in engine.config_problems + engine.load_tools().problems:
                    say(f"{problem.severity}: {problem}", err=True)
                session = engine.start_session(origin="run")
                session.subscribe(show_event)
            else:
                say(f"[resuming {session_id}]", err=True)
                session = engine.resume(session_id, listener=show_event, state=state)
        except (UnknownSessionError, SessionEndedError, SessionBusyError) as exc:
            raise click.UsageError(str(exc)) from None
        # SIGTERM stops a run the way Ctrl-C does: tools killed, the journal told.
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        ask_here(session)
        try:
            if decision is not None:
                try:
                    decision.give(session)
                except (NoQuestionError, NoApprovalError) as exc:
                    raise click.ClickException(str(exc)) from None
            if model is None:
                reason, requests = _settle_only(session), 0
            else:
                say(f"[session {session.session_id}, model {model.name}]", err=True)
                result = Agent(session, model, spec=spec, on_text=_streamed_here(live)).run(prompt)
                reason, requests = result.reason, result.requests
        except KeyboardInterrupt:
            say(f"\n[stopped; resume with: zagent resume {session.session_id}]", err=True)
            sys.exit(130)
        finally:
            session.release()
    waiting = len(session.state.running_tasks)
    tail = f"; {plural(waiting, 'background task')} still running" if waiting else ""
    fine = reason in ("idle", "ended", "waiting_on_user", "waiting_on_approval")  # a person asked is no failure
    # Only the kind of a stop: its reason was printed with the turn's end, once is enough.
    say(f"[{reason.partition(':')[0]} after {plural(requests, 'model request')}{tail}; session {session.session_id}]",
        err=True, colour=OK if fine else ERROR)
    for line in _waiting_lines(session.state):
        say(line)
    sys.exit(0 if fine else 1)


def _streamed_here(live: LiveConversation) -> Callable[[str], None] | None:
    """The agent's ``on_text``: the replies' text printed as it streams, on a terminal. Off a
    terminal (None) each reply is printed whole once it is journaled, so scripts and logs
    get the bytes they always did."""
    return live.text if sys.stdout.isatty() else None


def _refuse_a_waited_child(engine: Engine, state: SessionState) -> None:
    """A sub-agent its parent's spawn call waits on is driven by that call: driven here, the
    parent would take whatever it answered here for its outcome."""
    assert state.parent is not None
    link = state.parent
    child = engine.session_state(link.session_id).children.get(link.label)
    if child is not None and child.session_id == state.session_id and child.status == "running":
        raise click.UsageError(
            f"session {state.session_id} is {link.label} of session {link.session_id}, whose spawn call "
            f"{child.call_id} waits on it; resume the parent, which goes on with it: zagent resume {link.session_id}")


def _latest_open_session(obj: Context) -> str:
    """The most recently active top-level session that has not ended (what ``-c``/``--last``
    continue; a sub-agent is never ended, and is driven by its parent)."""
    with obj.existing_journal() as journal:
        for limit in (20, None):
            found = next((s.session_id for s in journal.sessions(limit, top_level=True) if not s.ended), None)
            if found is not None:
                return found
    raise click.UsageError("no session to continue: every session of the journal has ended "
                           "(`zagent sessions list` shows them); start one with zagent run PROMPT")


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
    """Run the agent on PROMPT (``-``: read it from stdin), headless, printing the conversation
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
        _drive(obj, model_spec, session_id, prompt_text(prompt))


def _submit(obj: Context, model_spec: str | None, session_id: str | None, prompt: str | None) -> None:
    """``run --detach``: the message journaled in a new (or the given) session, left to the workers."""
    from zagent_core.session.engine import SessionEndedError, UnknownSessionError
    from zagent_core.session.leases import SessionBusyError

    if model_spec is not None:
        raise click.UsageError("--detach takes no --model: the worker drives the session with the model it "
                               "journaled, else the worker's --model, else agent.model in config.json")
    with obj.journal() as journal:
        engine = obj.engine(journal)
        try:
            session = engine.start_session(origin="run") if session_id is None else engine.resume(session_id)
        except (UnknownSessionError, SessionEndedError, SessionBusyError) as exc:
            raise click.UsageError(str(exc)) from None
        try:
            session.record_user_message(prompt or "")
        finally:
            session.release()
    say(session.session_id)


@click.command()
@click.argument("session_id", type=TEXT, required=False, shell_complete=complete_sessions)
@click.argument("prompt", type=TEXT, required=False)
@click.option("--model", "model_spec", metavar="SPEC", help="scripted:PATH, openai:MODEL or anthropic:MODEL (default: config agent.model).")
@click.option("--last", is_flag=True, help="Resume the most recently active session that has not ended.")
@click.pass_obj
def resume(obj: Context, session_id: str | None, prompt: str | None, model_spec: str | None, last: bool) -> None:
    """Settle SESSION_ID after a crash (cut-off calls, dead or finished tasks), deliver its
    pending wake-ups, and continue, with PROMPT if given (``-``: read it from stdin). With
    --last, the one argument given is the PROMPT."""
    if last:
        if prompt is not None:
            raise click.UsageError("--last names the session: give at most a PROMPT")
        session_id, prompt = _latest_open_session(obj), session_id
    elif session_id is None:
        raise click.UsageError("name the SESSION_ID to resume, or give --last (the most recently active session)")
    _drive(obj, model_spec, session_id, prompt_text(prompt))


@click.command()
@click.argument("session_id", type=TEXT, shell_complete=complete_sessions)
@click.argument("text", type=TEXT)
@click.option("--call", "call_id", type=TEXT, metavar="ID",
              help="The ask_user call to answer, when the session waits on several questions.")
@click.option("--model", "model_spec", metavar="SPEC", help="scripted:PATH, openai:MODEL or anthropic:MODEL (default: the session's).")
@click.pass_obj
def answer(obj: Context, session_id: str, text: str, call_id: str | None, model_spec: str | None) -> None:
    """Answer the question SESSION_ID waits on (status ``waiting on user``) with TEXT
    (``-``: read it from stdin), then continue the session as resume does. The answer is
    the ask_user call's result; it is taken once: a second answer is refused."""
    text = prompt_text(text) or ""
    if not text.strip():
        raise click.UsageError("the answer is empty: give the text to answer with")
    _drive(obj, model_spec, session_id, None,
           decision=_Decision("answer", call_id, lambda session: session.answer(text, call_id)))


@click.command()
@click.argument("session_id", type=TEXT, shell_complete=complete_sessions)
@click.argument("call_id", type=TEXT, required=False)
@click.option("--model", "model_spec", metavar="SPEC", help="scripted:PATH, openai:MODEL or anthropic:MODEL (default: the session's).")
@click.pass_obj
def approve(obj: Context, session_id: str, call_id: str | None, model_spec: str | None) -> None:
    """Approve the call SESSION_ID waits on (status ``waiting on approval``): run it here,
    then continue the session as resume does. Name its CALL_ID when several calls wait. A
    decision is taken once: a second approve or deny is refused."""
    _drive(obj, model_spec, session_id, None,
           decision=_Decision("approval", call_id, lambda session: session.approve(call_id)))


@click.command()
@click.argument("session_id", type=TEXT, shell_complete=complete_sessions)
@click.argument("call_id", type=TEXT, required=False)
@click.option("--reason", type=TEXT, default="", metavar="TEXT",
              help="Why not: the model is told, with the denial, as the call's result.")
@click.option("--model", "model_spec", metavar="SPEC", help="scripted:PATH, openai:MODEL or anthropic:MODEL (default: the session's).")
@click.pass_obj
def deny(obj: Context, session_id: str, call_id: str | None, reason: str, model_spec: str | None) -> None:
    """Deny the call SESSION_ID waits on (status ``waiting on approval``): it is not run, and
    its result for the model says so, with the reason. Then continue the session as resume
    does. Name its CALL_ID when several calls wait. A decision is taken once."""
    _drive(obj, model_spec, session_id, None,
           decision=_Decision("approval", call_id, lambda session: session.deny(call_id, reason=reason)))
