"""``zagent``: list and run tools, check a home, and read the journal.

Imports of the engine happen inside commands, so ``zagent --help`` and ``zagent tools
list`` do not pay for what they do not use. Exit codes: 0 success, 1 the thing asked
for failed (a tool's result is an error, doctor found problems), 2 a usage error.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import click

from zagent_cli.context import Context, home_problem
from zagent_cli.output import ERROR, JSON_ESCAPES, OK, WARNING, emit_json, head, plural, say, terminal_safe, utc_ms

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

    from zagent_cli.show import LiveConversation
    from zagent_core import Config, Engine, Home, Problem, SessionState, StoredEvent, ToolResult, ToolSet
    from zagent_core.agent.models import Model
    from zagent_core.journal.protocol import Journal
    from zagent_core.journal.views import ApprovalView
    from zagent_core.session.engine import Session
    from zagent_core.tools.inprocess import Builtin
    from zagent_store.locate import AnyJournal


class StorableText(click.ParamType):
    """A text argument, made storable: an argv byte like ``\\xff`` reaches Python as a lone
    surrogate, which SQLite and JSON cannot encode, so it becomes U+FFFD as other bad bytes do.
    (Paths stay as given: the OS needs their exact bytes.)"""

    name = "text"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from zagent_core.tools.text import storable

        return storable(str(value))


TEXT = StorableText()


def _completion_home(ctx: click.Context) -> Home:
    """The home as typed so far on the command line being completed (``--home``, else the default)."""
    from zagent_core.home import Home

    return Home.locate(ctx.find_root().params.get("home"))


def complete_tools(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Shell completion of a tool name: the home's loaded tools and the built-in terminal."""
    from click.shell_completion import CompletionItem

    try:
        from zagent_core.config import load_config

        home = _completion_home(ctx)
        if home_problem(home.root):
            return []
        toolset, builtins, _ = _home_tools(home, load_config(home.config_path)[0])
        described = {name: tool.description for name, tool in toolset.tools.items()}
        described.update((name, f"built-in: {builtin.description}") for name, builtin in builtins.items())
    except Exception:  # noqa: BLE001 - completing offers nothing rather than print a traceback into the shell
        return []
    return [CompletionItem(name, help=head(text, 60)) for name, text in sorted(described.items())
            if name.startswith(incomplete)]


def complete_sessions(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Shell completion of a session id: the journal's most recently active sessions."""
    from click.shell_completion import CompletionItem

    try:
        from zagent_store.locate import is_postgres, open_journal

        location = _completion_home(ctx).journal_location(ctx.find_root().params.get("journal_url"))
        if not is_postgres(location) and not Path(location.removeprefix("sqlite:///")).is_file():
            return []
        with open_journal(location, read_only=True) as journal:
            summaries = journal.sessions(_COMPLETED_SESSIONS)
    except Exception:  # noqa: BLE001 - as for tools
        return []
    return [CompletionItem(s.session_id, help=f"last active {s.last_at:%Y-%m-%d %H:%M}Z, {plural(s.calls, 'call')}")
            for s in summaries if s.session_id.startswith(incomplete)]


#: How many session ids completion offers, the most recently active first.
_COMPLETED_SESSIONS = 200


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (use a number or null)")


def _say_problems(problems: list[Problem]) -> None:
    for problem in problems:
        say(f"  {problem.severity}: {problem}", colour=ERROR if problem.severity == "error" else WARNING)


class ZagentGroup(click.Group):
    """The top-level group: errors that reach the user are one clean line, shown safely."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            # Ctrl-C before a command got to anything it journals (those say what they stopped):
            # the shell's convention, exit 130, rather than click's "Aborted!" and 1.
            say("\n[stopped]", err=True)
            sys.exit(130)
        except click.ClickException as exc:
            # Messages quote tool names, session ids, export files: nothing may drive the terminal.
            # (click declares the attribute Final; the exception is ours to amend before it is shown.)
            setattr(exc, "message", terminal_safe(exc.message))  # noqa: B010
            raise
        except Exception as exc:
            # Imported only now: --help and tools list do not pay for the journal's modules.
            from zagent_core.journal.events import EventSchemaError
            from zagent_core.journal.fold import InconsistentJournalError
            from zagent_core.journal.protocol import JournalError

            if not isinstance(exc, (JournalError, EventSchemaError, InconsistentJournalError)):
                raise
            # The journal went bad under a command (locked too long, corrupt, disk full): say so.
            raise click.ClickException(terminal_safe(str(exc))) from None


@click.group(cls=ZagentGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--home", metavar="DIR", help="Agent home (default: $ZAGENT_HOME, else ~/.zagent).")
@click.option("--journal", "journal_url", metavar="URL",
              help="The journal: sqlite:///PATH or postgresql://... (default: $ZAGENT_JOURNAL, else journal.url "
                   "in config.json, else the home's journal.db).")
@click.option("--workspace", metavar="DIR", help="Folder tools work in (default: the current folder).")
@click.option("-v", "--verbose", count=True, help="Log the engine's own steps to stderr (-vv: debug).")
@click.version_option(package_name="zagent")
@click.pass_context
def cli(ctx: click.Context, home: str | None, journal_url: str | None, workspace: str | None, verbose: int) -> None:
    """zagent runs an AI agent's tools and journals every session in SQLite (or PostgreSQL)."""
    ctx.obj = Context(home_arg=home, workspace=workspace, verbosity=verbose, journal_arg=journal_url)


# -- tools ---------------------------------------------------------------------------


@cli.group()
def tools() -> None:
    """List the tools of the home and run one as an agent would."""


@tools.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_obj
def tools_list(obj: Context, as_json: bool) -> None:
    """Loaded tools, and the folders that did not load with the reason."""
    from zagent_core.config import load_config

    home = obj.home
    config, config_problems = load_config(home.config_path)
    mcp, mcp_problems, server_of = _mcp_tools(obj, config)
    toolset, builtins, builtin_problems = _home_tools(home, config, reserved=mcp.keys())
    problems = config_problems + builtin_problems + mcp_problems + toolset.problems
    if as_json:
        emit_json({
            "home": str(home.root),
            "tools": [
                {"name": t.name, "description": t.description, "folder": str(t.folder),
                 "disabled": t.name in toolset.disabled, "input": t.manifest.input, "output": t.manifest.output,
                 "background": t.manifest.background, "permission": t.manifest.permission}
                for t in sorted(toolset.tools.values(), key=lambda t: t.name)
            ],
            "builtins": [{"name": b.name, "description": b.description, "disabled": b.name in toolset.disabled,
                          "concurrency_safe": b.concurrency_safe if isinstance(b.concurrency_safe, bool)
                          else "depends on the arguments", "replay": b.replay} for b in builtins.values()],
            "mcp": [{"name": t.name, "server": server_of[t.name], "description": t.description,
                     "disabled": t.name in toolset.disabled, "identity": t.identity, "schema_hash": t.definition_hash,
                     "concurrency_safe": t.concurrency_safe, "replay": t.replay} for t in mcp.values()],
            "problems": [p.model_dump() for p in problems],
        })
        return
    if not toolset.tools:
        say(f"no tools loaded from {home.tools_dir}")
    folders = [(name, tool.description.splitlines()[0] if tool.description else "", f"tools/{tool.folder.name}")
               for name, tool in sorted(toolset.tools.items())]
    _say_table(folders, toolset.disabled)
    say("")
    _say_table([(name, builtin.description.split(". ")[0].rstrip("."), "built-in")
                for name, builtin in builtins.items()], toolset.disabled)
    if mcp:
        say("")
        _say_table([(name, tool.description.split(". ")[0].rstrip("."), f"mcp server {server_of[name]}")
                    for name, tool in mcp.items()], toolset.disabled)
    if problems:
        say("\nproblems:")
        _say_problems(problems)


def _home_tools(home: Home, config: Config, reserved: Collection[str] = ()) -> tuple[ToolSet, dict[str, Builtin],
                                                                                    list[Problem]]:
    """The home's tool folders (no folder may take a built-in's name, nor one of ``reserved``),
    the built-ins the config turns on, and what is wrong with ``builtins.enabled``: what a
    session of this home offers."""
    from zagent_core.builtins import registry
    from zagent_core.tools.manifest import load_tools

    builtins, problems = registry.enabled(config)
    return load_tools(home, config, reserved=registry.names() | set(reserved)), builtins, problems


def _mcp_tools(obj: Context, config: Config) -> tuple[dict[str, Builtin], list[Problem], dict[str, str]]:
    """The tools of config.json's MCP servers (each started, listed and stopped), what went
    wrong with them, and each tool's server: what a session offers besides the home's own."""
    if not config.mcp.servers:
        return {}, [], {}
    from zagent_core.tools.mcp import McpServers

    servers = McpServers(config, Path(obj.workspace or Path.cwd()).resolve())
    try:
        tools, problems = servers.tools()
    finally:
        servers.close()
    return tools, problems, servers.server_of


def _say_table(rows: list[tuple[str, str, str]], disabled: frozenset[str]) -> None:
    """One line per tool: name, summary and where it comes from, in columns padded to their
    widest cell (after terminal_safe, which may lengthen a name)."""
    rows = [(terminal_safe(name), terminal_safe(head(summary, 72)), where) for name, summary, where in rows]
    names = max((len(name) for name, _, _ in rows), default=0)
    summaries = max((len(summary) for _, summary, _ in rows), default=0)
    for name, summary, where in rows:
        say(f"{name:<{names}}  {summary:<{summaries}}  [{where}]{'  (disabled)' if name in disabled else ''}")


def _stdin_text() -> str:
    """All of stdin, as text (bytes that are not UTF-8 become U+FFFD, as argv's do)."""
    return sys.stdin.buffer.read().decode("utf-8", "replace") if sys.stdin else ""


def _stdin_piped() -> bool:
    """Whether something was piped or redirected into stdin: a pipe or a file. Not a terminal,
    and not a socket or device a harness left open, which could keep a read waiting forever."""
    import os
    import stat

    stream = sys.stdin
    if stream is None:  # started with descriptor 0 closed
        return False
    try:
        mode = os.fstat(stream.fileno()).st_mode
    except (OSError, ValueError):  # no descriptor: an in-memory stream (click's test runner) was given
        return not stream.isatty()
    return stat.S_ISFIFO(mode) or stat.S_ISREG(mode)


def _arguments_text(args_text: str | None) -> tuple[str, str]:
    """``--args`` as curl's ``-d`` takes data: ``@FILE`` reads a file, ``@-`` stdin; without
    ``--args``, a pipe into stdin is the arguments (a terminal or nothing piped: ``{}``).
    Returns the JSON text and where it came from, for the error message."""
    if args_text is None:
        if not _stdin_piped():
            return "{}", "--args"
        return _stdin_text().strip() or "{}", "the arguments on stdin"
    if not args_text.startswith("@"):
        return args_text, "--args"
    if args_text == "@-":
        return _stdin_text(), "the arguments on stdin"
    try:
        return Path(args_text[1:]).read_bytes().decode("utf-8", "replace"), f"--args {args_text}"
    except OSError as exc:
        raise click.UsageError(f"--args {args_text}: cannot read {args_text[1:]}: {exc.strerror or exc}; "
                               "@FILE names a file holding one JSON object") from None


def _arguments_object(args_text: str | None) -> dict[str, Any]:
    """The call's arguments (see :func:`_arguments_text`): one JSON object, its strings storable."""
    from zagent_core.tools.text import storable_json

    text, source = _arguments_text(args_text)
    try:
        arguments = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise click.UsageError(f"{source} is not valid JSON: {exc}; give one object, e.g. --args '{{\"text\": \"hi\"}}'")
    if not isinstance(arguments, dict):
        raise click.UsageError(f"{source} must be a JSON object like '{{\"text\": \"hi\"}}', not {head(text, 60)!r}")
    return storable_json(arguments)  # type: ignore[no-any-return]


def _prompt_text(prompt: str | None) -> str | None:
    """PROMPT, or stdin for ``-`` (as llm and most Unix tools read it)."""
    if prompt != "-":
        return prompt
    text = _stdin_text().strip()
    if not text:
        raise click.UsageError("the prompt on stdin is empty; pipe the prompt in, e.g. echo 'hi' | zagent run -")
    return text


def _loaded_tool(engine: Engine, name: str) -> ToolSet:
    """The home's tools, once ``name`` is known to be one of them (or a built-in)."""
    toolset = engine.load_tools()
    if name not in toolset.tools and name not in engine.builtins:
        from zagent_core.problems import did_you_mean

        reasons = [str(p) for p in toolset.broken if p.source == f"tools/{name}"]
        if reasons:
            raise click.UsageError(f'tool "{name}" is not loaded:\n' + "\n".join(reasons))
        known = ", ".join(sorted(toolset.tools)) or "none"
        raise click.UsageError(f'unknown tool "{name}"{did_you_mean(name, toolset.tools)}; loaded tools: {known}')
    for problem in engine.config_problems + toolset.problems:
        say(f"{problem.severity}: {problem}", err=True)
    return toolset


def _background_result(session: Session, task_id: str, started: ToolResult, as_json: bool) -> ToolResult:
    """A background call lived as the agent would: its notes, then its wake-up, as one result."""
    if not as_json:
        say(started.output)
    task = session.wait_task(task_id, None)
    # Shown, not delivered: no agent turn took them, so they stay pending in the journal.
    wake_ups = [w.text for w in session.state.pending_wakes.values() if w.reason != "note"]
    if not as_json:
        for text in wake_ups:
            say(f"[info: {text}]")
    return started.model_copy(update={
        "output": "\n".join(wake_ups) or task.output or "", "is_error": bool(task.is_error),
        "duration_ms": task.duration_ms or 0, "files": task.files, "media": task.media})


def _call_once(session: Session, name: str, arguments: dict[str, Any], as_json: bool) -> tuple[ToolResult, str]:
    """Run the call in ``session``, and wait for it if it runs in the background: its result and
    call id. Ctrl-C (or SIGTERM) ends the session as interrupted, exit 130."""
    try:
        result = session.call(name, arguments)
        call_id = session.state.last_call_id or ""
        task_id = next((t.task_id for t in session.state.tasks.values() if t.call_id == call_id), None)
        if task_id is not None and not result.is_error:
            return _background_result(session, task_id, result, as_json), call_id
    except KeyboardInterrupt:
        # The tool (or task) was stopped with us and its call journaled as interrupted; a
        # call that goes on (a spawn, with its child) stays open for resume.
        if session.continuing_calls():
            session.release()
            say(f"\n[stopped; resume with: zagent resume {session.session_id}]", err=True)
            sys.exit(130)
        if session.state.status == "open":
            session.end("interrupted")
        say(f"\n[stopped; the call is journaled in session {session.session_id}]", err=True)
        sys.exit(130)
    if not as_json:
        say(result.output)
    return result, call_id


@tools.command("run")
@click.argument("name", type=TEXT, shell_complete=complete_tools)
@click.option("--args", "args_text", type=TEXT, metavar="JSON",
              help="The arguments, as one JSON object; @FILE reads it from FILE, @- from stdin "
                   "(default: stdin when a pipe or file is on it, else {}).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the result text.")
@click.pass_obj
def tools_run(obj: Context, name: str, args_text: str | None, as_json: bool) -> None:
    """Run tool NAME exactly as an agent would, journaled as a session.

    Prints what the model receives. Exit 0 when the call succeeded, 1 when its result
    is an error, 2 for a usage error.
    """
    import signal

    # SIGTERM stops the call the way Ctrl-C does: the tool killed, the journal told, exit 130.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    arguments = _arguments_object(args_text)
    notes: list[str] = []

    from zagent_core.journal.events import NoteReceived

    def show_note(stored: StoredEvent) -> None:
        # Printed as they arrive, the way the agent's next request would carry them.
        if isinstance(stored.event, NoteReceived):
            notes.append(stored.event.text)
            if not as_json:
                say(f"[info: {stored.event.text}]")

    with obj.journal() as journal:
        engine = obj.engine(journal)
        toolset = _loaded_tool(engine, name)
        with engine.start_session(origin="tools run", tools=toolset) as session:
            session.subscribe(show_note)
            _ask_here(session)
            result, call_id = _call_once(session, name, arguments, as_json)
    if as_json:
        emit_json({"output": result.output, "is_error": result.is_error,
                   "media": [m.model_dump() for m in result.media], "files": [f.model_dump() for f in result.files],
                   "session_id": session.session_id, "call_id": call_id, "notes": notes})
    else:
        status = "error" if result.is_error else "ok"
        say(f"[{status} in {result.duration_ms} ms; journaled as session {session.session_id}, call {call_id}]",
            err=True, colour=ERROR if result.is_error else OK)
    sys.exit(1 if result.is_error else 0)


# -- run and resume ----------------------------------------------------------------------


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


def _ask_here(session: Session) -> None:
    """On a terminal, questions and approvals are asked there; elsewhere they park the session."""
    if sys.stdin.isatty() and sys.stdout.isatty():
        session.ask_terminal = _ask_on_terminal
        session.approve_terminal = _approve_on_terminal


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
        _ask_here(session)
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


@cli.command()
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
        _submit(obj, model_spec, session_id, _prompt_text(prompt))
    else:
        _drive(obj, model_spec, session_id, _prompt_text(prompt))


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


@cli.command()
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
    _drive(obj, model_spec, session_id, _prompt_text(prompt))


@cli.command()
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
    text = _prompt_text(text) or ""
    if not text.strip():
        raise click.UsageError("the answer is empty: give the text to answer with")
    _drive(obj, model_spec, session_id, None,
           decision=_Decision("answer", call_id, lambda session: session.answer(text, call_id)))


@cli.command()
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


@cli.command()
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


# -- worker ----------------------------------------------------------------------------


@cli.command()
@click.option("--concurrency", type=click.IntRange(1, 256), default=4, show_default=True,
              help="Sessions driven at once by this worker.")
@click.option("--model", "model_spec", metavar="SPEC",
              help="The model for sessions that journaled none (default: config agent.model).")
@click.option("--poll", "poll_seconds", type=click.FloatRange(0.05, 3600), default=5.0, show_default=True,
              help="Seconds between looks for work when the journal cannot tell (SQLite), or for leases expiring.")
@click.option("--until-idle", is_flag=True, help="Stop when nothing is left to claim and every session is let go.")
@click.pass_obj
def worker(obj: Context, concurrency: int, model_spec: str | None, poll_seconds: float, until_idle: bool) -> None:
    """Drive the sessions that want a driver: wake-ups, messages left with run --detach,
    turns and tasks a stopped driver left. Runs until Ctrl-C or SIGTERM.

    Any number of workers, on any number of hosts, can share a journal (PostgreSQL; SQLite:
    one host): each session is driven by one at a time, and the sessions of a worker that
    died are taken over once their leases expire (journal.lease_seconds).
    """
    import os
    import signal
    import socket

    from zagent_core.drive.worker import Worker

    with obj.journal() as journal:
        engine = obj.engine(journal)

        def model_for(state: SessionState) -> tuple[Model | None, str]:
            try:
                return _model_for(engine, None if state.model else model_spec, state, None)
            except click.UsageError as exc:
                raise ValueError(exc.message) from None

        pool = Worker(engine, model_for, concurrency=concurrency, poll_seconds=poll_seconds,
                      report=lambda line: say(f"[{line}]", err=True))
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        say(f"[worker pid {os.getpid()} on {socket.gethostname()}: {concurrency} at a time]", err=True)
        try:
            stats = pool.run(until_idle=until_idle)
        except KeyboardInterrupt:
            pool.stop()
            say("[stopping: the sessions being driven are let go]", err=True)
            stats = pool.run()
    say(f"[worker stopped: {plural(stats.claimed, 'session')} claimed, {stats.taken_over} taken over, "
        f"{stats.finished} driven to a stop, {len(stats.failed)} left for a person]", err=True)


# -- doctor ----------------------------------------------------------------------------


def _journal_report(obj: Context, home: Home) -> dict[str, Any]:
    """Doctor's look at the journal: where it is, whether it exists, its problems and counts."""
    from zagent_store.locate import describe

    report: dict[str, Any] = {"path": describe(obj.journal_location), "exists": obj.journal_exists(), "problems": []}
    if report["exists"]:
        try:
            # Where it may, doctor opens the journal as every command does (upgrading its schema).
            import os

            with obj.journal(read_only=not os.access(home.root, os.W_OK)) as journal:
                report["problems"] = journal.check()
                report.update(journal.stats())
        except click.ClickException as exc:
            report["problems"] = [exc.message]
    return report


def _print_doctor(home: Home, config: Config, toolset: ToolSet, problems: list[Problem], journal: dict[str, Any],
                  builtins: str) -> None:
    from zagent_core.version import zagent_version

    limits = config.limits
    say(f"zagent {zagent_version()}, home {home.root}")
    not_loaded = len({p.source for p in toolset.broken})
    say(f"tools: {len(toolset.tools)} loaded, {not_loaded} not loaded, "
        f"{len(toolset.disabled & toolset.tools.keys())} disabled")
    say(builtins)
    if problems:
        _say_problems(problems)
    say(f"limits: default timeout {limits.default_timeout_seconds:g} s, output cap "
        f"{limits.output_cap_bytes} bytes, kill grace {limits.kill_grace_seconds:g} s, "
        f"media up to {limits.media_max_bytes} bytes")
    say(f"capabilities: {config.capabilities.as_env()}")
    if not journal["exists"]:
        say(f"journal: {journal['path']} (not created yet)")
    elif journal["problems"]:
        say(f"journal: {journal['path']}: {'; '.join(journal['problems'])}")
    else:
        say(f"journal: {journal['path']}: ok ({journal['events']} events, "
            f"{journal['sessions']} sessions, schema {journal['schema_version']})")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_obj
def doctor(obj: Context, as_json: bool) -> None:
    """Check the home: manifests, config, effective limits and the journal.

    Exits 1 when anything is broken.
    """
    import os

    from zagent_core.builtins.grep import find_rg
    from zagent_core.config import load_config
    from zagent_core.problems import Problem
    from zagent_core.tools.manifest import start_problem
    from zagent_core.version import zagent_version

    home = obj.locate_home()
    unusable = home_problem(home.root)
    config, config_problems = load_config(home.config_path)
    mcp, mcp_problems, server_of = _mcp_tools(obj, config) if not unusable else ({}, [], {})
    toolset, builtins, builtin_problems = _home_tools(home, config, reserved=mcp.keys())
    unstartable = [Problem(source=f"tools/{tool.folder.name}", message=f"cannot start: {why}")
                   for _, tool in sorted(toolset.tools.items()) if (why := start_problem(tool))]
    problems = config_problems + builtin_problems + mcp_problems + toolset.problems + unstartable
    offered = [name for name in builtins if name not in toolset.disabled]
    if unusable:
        problems.insert(0, Problem(source="home", message=unusable))
    elif home.root.is_dir() and not os.access(home.root, os.W_OK):
        problems.insert(0, Problem(source="home", severity="warning", message=(
            f"the home {home.root} is read-only: nothing can run here (tools run, run and resume write the "
            "journal and the sessions folder)")))
    journal = _journal_report(obj, home) if not unusable else {
        "path": str(home.journal_path), "exists": False, "problems": []}
    broken = any(p.severity == "error" for p in problems) or bool(journal["problems"])
    if as_json:
        emit_json({
            "ok": not broken,
            "zagent_version": zagent_version(),
            "home": str(home.root),
            "tools": {"loaded": sorted(toolset.tools), "disabled": sorted(toolset.disabled)},
            "builtins": {"offered": offered, "ripgrep": find_rg()},
            "mcp": {"servers": sorted(config.mcp.servers), "started": sorted(set(server_of.values())),
                    "tools": [name for name in mcp if name not in toolset.disabled]},
            "problems": [p.model_dump() for p in problems],
            "limits": config.limits.model_dump(),
            "capabilities": config.capabilities.model_dump(),
            "journal": journal,
        })
    else:
        rg = find_rg()
        started = len(set(server_of.values()))
        mcp_line = (f"\nmcp: {started} of {plural(len(config.mcp.servers), 'server')} started, "
                    f"{plural(len([n for n in mcp if n not in toolset.disabled]), 'tool')} offered"
                    if config.mcp.servers else "")
        _print_doctor(home, config, toolset, problems, journal,
                      f"built-ins: {len(offered)} offered; grep runs "
                      + (f"ripgrep ({rg})" if rg else "its Python search (no rg on PATH)") + mcp_line)
        say("broken: see the problems above" if broken else "all good", colour=ERROR if broken else OK)
    sys.exit(1 if broken else 0)


# -- replay --------------------------------------------------------------------------------


def _is_journal(path: Path) -> bool:
    """Whether ``path`` is a zagent journal: looked at read-only, so nothing is written to it."""
    import contextlib
    import sqlite3

    try:
        with contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as conn:
            return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'events'").fetchone() \
                is not None
    except sqlite3.Error:
        return False


def _rule(text: str) -> tuple[str, str]:
    import re

    pattern, sep, replacement = text.partition("=")
    if not sep or not pattern:
        raise click.BadParameter("write REGEX=REPLACEMENT, e.g. 'build-[0-9]+=build-N'", param_hint="--normalize")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise click.BadParameter(f"{pattern!r} is not a regular expression: {exc}", param_hint="--normalize") from None
    return pattern, replacement


@cli.command()
@click.argument("session_id", type=TEXT, required=False, shell_complete=complete_sessions)
@click.option("--tools", type=click.Choice(["recorded", "rerun"]), default="recorded", show_default=True,
              help="recorded: serve tool results from the journal (does the host decide the same?); "
                   "rerun: run the tools again in a copy of the workspace (do they give the same results?).")
@click.option("--file", "export_file", type=click.Path(exists=True, dir_okay=False),
              help="Replay the session of this export (zagent sessions export).")
@click.option("--journal", "journal_path", type=click.Path(exists=True, dir_okay=False),
              help="Replay from this journal file instead of the home's.")
@click.option("--all", "replay_all", is_flag=True,
              help="Replay every session of the journal (a sub-agent's in its parent's tree).")
@click.option("--allow-unsafe", is_flag=True, help="With --tools rerun, also rerun tools marked replay: unsafe.")
@click.option("--normalize", "rules", multiple=True, metavar="REGEX=REPL", callback=lambda c, p, v: [_rule(x) for x in v],
              help="Replace what REGEX matches before outputs are compared (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_obj
def replay(obj: Context, session_id: str | None, tools: Literal["recorded", "rerun"], export_file: str | None, journal_path: str | None,
           replay_all: bool, allow_unsafe: bool, rules: list[tuple[str, str]], as_json: bool) -> None:
    """Drive a recorded session again and report, step by step, what differs.

    Model replies always come from the recording. With --tools rerun, the tools run in a
    copy of the recorded workspace, or of the global --workspace DIR when given. A spawn
    call is served from the recording and its sub-agent's session is replayed too: the
    report is the tree. Exit 0 when every session of it matches, 1 on a divergence (or a
    rerun that ran nothing again), 2 on a usage error.
    """
    from zagent_core.config import load_config
    from zagent_core.history.exports import ExportError, import_session, parse_export
    from zagent_core.history.replay import replay as replay_session
    from zagent_core.history.replay import replay_folder, tree_roots
    from zagent_core.home import Home
    from zagent_store import SQLiteJournal

    if bool(session_id) + bool(export_file) + replay_all != 1:
        raise click.UsageError("name one SESSION_ID, or give --file EXPORT, or --all")
    if obj.workspace is not None and not Path(obj.workspace).is_dir():
        raise click.UsageError(f"workspace {obj.workspace} is not a folder (--workspace: the folder a rerun copies)")
    config, _ = load_config(obj.home.config_path)
    if tools == "rerun":  # tools run again: the key is no more theirs than in a live run
        from zagent_core.tools.credentials import withhold_model_keys

        withhold_model_keys(config.model)
    normalisers = [(r.pattern, r.replacement) for r in config.replay.normalize] + list(rules)
    with replay_folder(obj.home) as tmp:
        if export_file:
            try:
                with open(export_file, encoding="utf-8") as handle:
                    imported = parse_export(handle, source=export_file)
            except (ExportError, UnicodeDecodeError) as exc:
                raise click.UsageError(str(exc)) from None
            source: AnyJournal = SQLiteJournal(Path(tmp) / "recorded.db")
            try:
                session_id = import_session(source, imported, home=Home(tmp))
            except ExportError as exc:
                raise click.UsageError(str(exc)) from None
        elif journal_path:
            if not _is_journal(Path(journal_path)):
                raise click.UsageError(f"{journal_path} is not a zagent journal (no events table)")
            source = SQLiteJournal(journal_path)
        else:
            source = obj.existing_journal()
        with source:
            # A sub-agent is replayed in its parent's tree, not once more on its own.
            ids = tree_roots(source, [s.session_id for s in source.sessions()][::-1]) if replay_all \
                else [session_id or ""]
            reports = []
            for number, sid in enumerate(ids, start=1):
                workdir = Path(tmp) / f"replay-{number}"
                workdir.mkdir()
                try:
                    with SQLiteJournal(workdir / "replay.db") as into:
                        report = replay_session(source, sid, obj.home, into, tools=tools, allow_unsafe=allow_unsafe,
                                                normalisers=normalisers, config=config, workdir=workdir,
                                                workspace=obj.workspace)
                except LookupError as exc:
                    raise click.UsageError(str(exc)) from None
                reports.append(report)
                if replay_all and not as_json:
                    say(f"[{number}/{len(ids)}] {sid}: {report.tree_verdict}", err=True)
    if as_json:
        emit_json({"matched": all(r.tree_matched for r in reports), "replays": [r.to_dict() for r in reports]})
    else:
        for report in reports:
            if not replay_all or not report.tree_matched:
                say(report.text())
        if replay_all:
            sessions = [session for r in reports for _, session in r.sessions()]
            say(f"{sum(s.matched for s in sessions)} of {len(sessions)} sessions match")
    sys.exit(0 if all(r.tree_matched for r in reports) else 1)


# -- audit ---------------------------------------------------------------------------------


def _since(text: str) -> str:
    """``2026-11-30``, ``2026-11-30T05:00``, or a span back from now: ``30m``, ``2h``, ``7d``."""
    from datetime import datetime, timedelta, timezone

    units = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
    if text[:-1].isdigit() and text[-1:] in units:
        try:
            when = datetime.now(timezone.utc) - timedelta(**{units[text[-1]]: int(text[:-1])})
        except OverflowError:
            raise click.BadParameter(f"{text} reaches back before the year 1", param_hint="--since") from None
    else:
        try:
            when = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise click.BadParameter("use a date or time (2026-11-30, 2026-11-30T05:00) or a span: 30m, 2h, 7d",
                                     param_hint="--since") from None
        when = when if when.tzinfo else when.replace(tzinfo=timezone.utc)
    return utc_ms(when)


@cli.command()
@click.option("--session", "session_id", type=TEXT, metavar="ID", shell_complete=complete_sessions,
              help="Only this session's calls.")
@click.option("--tool", type=TEXT, metavar="NAME", shell_complete=complete_tools, help="Only calls of this tool.")
@click.option("--since", type=TEXT, metavar="TIME", help="Only calls since TIME: a date/time (UTC) or a span back (30m, 2h, 7d).")
@click.option("--errors", is_flag=True, help="Only calls that failed, were refused or were cut off.")
@click.option("--asked", is_flag=True, help="Only calls a person was asked about (ask_user, approvals).")
@click.option("--descendants", is_flag=True,
              help="With --session: also the calls of the sub-agents it spawned, and of theirs.")
@click.option("--slowest", metavar="N", type=click.IntRange(min=1), help="The N slowest calls, slowest first.")
@click.option("--limit", metavar="N", type=click.IntRange(min=0), default=100, show_default=True,
              help="At most the N most recent calls (0: all).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_obj
def audit(obj: Context, session_id: str | None, tool: str | None, since: str | None, errors: bool, asked: bool,
          descendants: bool, slowest: int | None, limit: int, as_json: bool) -> None:
    """What the tools did: one entry per call, from the journal's tool_calls view, with who
    was asked about it and the answer (the decisions view)."""
    if descendants and session_id is None:
        raise click.UsageError("--descendants adds the calls of a session's sub-agents: name the session with "
                               "--session ID")
    with obj.existing_journal() as journal:
        rows = journal.audit(session=session_id, tool=tool, since=_since(since) if since else None, errors=errors,
                             asked=asked, slowest=slowest, limit=limit or None, descendants=descendants)
    if as_json:
        emit_json({"calls": rows})
        return
    from zagent_cli.show import print_audit

    print_audit(rows)


# -- mcp -------------------------------------------------------------------------------


@cli.group("mcp")
def mcp_group() -> None:
    """MCP: zagent's journaled tools for any MCP client (needs the mcp extra)."""


@mcp_group.command("serve")
@click.option("--http", "http", metavar="HOST:PORT",
              help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (a loopback address, unless "
                   "--allow-remote).")
@click.option("--allow-remote", is_flag=True, help="Let --http listen on an address other machines can reach.")
@click.pass_obj
def mcp_serve(obj: Context, http: str | None, allow_remote: bool) -> None:
    """Serve the home's tools to an MCP client.

    The home's tools and the built-ins, on stdio (default) or streamable HTTP. Each
    connection is a session (origin mcp), every call journaled as zagent run journals it;
    the session ends when the connection closes, and one cut off resumes with zagent resume.
    """
    try:
        from zagent_cli.mcp_serve import serve
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in ("mcp", "mcp_types"):
            raise
        raise click.ClickException("zagent mcp serve needs the MCP SDK: pip install 'zagent[mcp]'") from None
    serve(obj, http, allow_remote)


# -- journal ---------------------------------------------------------------------------


@cli.group("journal")
def journal_group() -> None:
    """The journal itself: recover a damaged file, copy a journal to another store."""


@journal_group.command("recover")
@click.argument("source", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("target", type=click.Path(dir_okay=False, path_type=Path))
def journal_recover(source: Path, target: Path) -> None:
    """Copy every readable event of the damaged journal SOURCE into a new journal TARGET.

    Sessions keep their ids, versions and times; what cannot be read is listed. TARGET
    must not exist. Then use TARGET as the home's journal.db.
    """
    from zagent_store.recover import recover_journal

    if target.exists():
        raise click.BadParameter(f"{target} already exists: name a new file", param_hint="TARGET")
    report = recover_journal(source, target)  # a RecoverError is a JournalError: main() prints it, exit 1
    for line in report.skipped[:50]:
        click.echo(f"skipped: {line}")
    if len(report.skipped) > 50:
        click.echo(f"skipped: ... and {len(report.skipped) - 50} more")
    click.echo(f"recovered {report.events} events of {report.sessions} sessions into {target}; "
               f"{report.unreadable} unreadable, {report.after_gaps} left out after a gap")


def _open_for_copy(location: str, role: str, *, read_only: bool) -> AnyJournal:
    """The journal at ``location`` for ``journal copy``: a missing SQLite source is a usage error, never made."""
    from zagent_core.journal.protocol import JournalError
    from zagent_store.locate import is_postgres, open_journal, sqlite_path

    if not is_postgres(location):
        try:
            path = sqlite_path(location)
        except JournalError as exc:
            raise click.BadParameter(str(exc), param_hint=role) from None
        if read_only and not path.is_file():
            raise click.BadParameter(f"no journal at {path}: give a journal file, or a postgresql:// URL",
                                     param_hint=role)
        if path.is_dir():
            raise click.BadParameter(f"{path} is a folder: give a journal file (made if it does not exist)",
                                     param_hint=role)
    try:
        return open_journal(location, read_only=read_only)
    except (JournalError, OSError) as exc:
        raise click.ClickException(f"{role}: {exc}") from None


@journal_group.command("copy")
@click.argument("source", metavar="SRC")
@click.argument("target", metavar="DST")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
def journal_copy(source: str, target: str, as_json: bool) -> None:
    """Copy every session of the journal SRC into the journal DST, then check it event by event.

    SRC and DST are journal URLs (sqlite:///PATH, postgresql://...) or paths of SQLite files.
    Sessions keep their ids, versions and times. DST must not hold any of SRC's sessions
    (nothing is written then); a DST file that does not exist is made.
    """
    from zagent_core.session import leases
    from zagent_store.copy import CopyProgress, CopyRefusedError, copy_journal

    progress: Callable[[CopyProgress], None] | None = None
    if not as_json and sys.stderr.isatty():
        import time

        shown = [0.0]

        def progress(step: CopyProgress) -> None:
            # A journal of many small sessions reports thousands of steps a second: a few are shown.
            if time.monotonic() - shown[0] >= 0.2 or step.sessions_done == step.sessions:
                shown[0] = time.monotonic()
                click.echo(f"\rcopying: {step.sessions_done}/{step.sessions} sessions, "
                           f"{step.events_done}/{step.events} events", err=True, nl=False)

    with _open_for_copy(source, "SRC", read_only=True) as src, _open_for_copy(target, "DST", read_only=False) as dst:
        try:
            report = copy_journal(src, dst, progress=progress, is_driven=leases.is_driven)
        except CopyRefusedError as exc:  # other CopyErrors are JournalErrors: exit 1, as a failed check
            raise click.UsageError(str(exc)) from None
        finally:
            if progress is not None:
                click.echo(err=True)
    if as_json:
        emit_json(report.to_dict())
        return
    for session_id in report.nul_replaced:
        say(f"note: session {session_id} held U+0000 in a string, which PostgreSQL cannot store: the copy has "
            "U+FFFD there (its only difference)", colour=WARNING)
    for session_id, version in report.driven.items():
        say(f"note: session {session_id} was being driven while it was copied: the copy has its events up to "
            f"version {version}, not those appended since", colour=WARNING)
    say(f"copied {plural(report.sessions, 'session')} ({plural(report.events, 'event')}, "
        f"{plural(report.snapshots, 'snapshot')}) from {report.source} to {report.target} in "
        f"{report.copy_seconds:.2f} s; checked event by event in {report.verify_seconds:.2f} s", colour=OK)
    say(f"sha256 {report.digest}")


# -- sessions --------------------------------------------------------------------------


@cli.group()
def sessions() -> None:
    """Sessions in the journal."""


@sessions.command("list")
@click.option("--limit", metavar="N", type=click.IntRange(min=0), default=50, show_default=True,
              help="The N most recently active sessions (0: all).")
@click.option("--all", "show_all", is_flag=True,
              help="Also the sub-agents' sessions, each under the session that spawned it.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_obj
def sessions_list(obj: Context, limit: int, show_all: bool, as_json: bool) -> None:
    """Top-level sessions, most recently active first, with their status (--all: sub-agents too)."""
    if not obj.journal_exists():  # nothing ran in this home yet: no sessions, which is no error
        if as_json:
            emit_json({"sessions": []})
        else:
            say("no sessions yet")
        return
    with obj.existing_journal() as journal:
        from zagent_core.session.status import first_prompt, listed_status

        summaries = journal.sessions(limit or None, top_level=not show_all)
        statuses = {s.session_id: listed_status(journal, s) for s in summaries}
        prompts = {s.session_id: first_prompt(journal, s.session_id) for s in summaries}
    if as_json:
        emit_json({"sessions": [s.model_dump() | {"status": statuses[s.session_id],
                                                  "first_prompt": prompts[s.session_id]}
                                 for s in summaries]})
        return
    if not summaries:
        say("no sessions yet")
        return
    from zagent_cli.show import print_sessions

    print_sessions(summaries, statuses, prompts)


@sessions.command("export")
@click.argument("session_id", type=TEXT, shell_complete=complete_sessions)
@click.option("--format", "fmt", type=click.Choice(["jsonl"]), default="jsonl", show_default=True,
              help="One event per line.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), help="Write here, not to stdout.")
@click.pass_obj
def sessions_export(obj: Context, session_id: str, fmt: str, output: str | None) -> None:
    """Write SESSION_ID's events as JSON Lines: a replay fixture, an audit record."""
    from zagent_core.history.exports import export_lines

    with obj.existing_journal() as journal:
        lines = list(export_lines(journal.read(session_id)))
    if not lines:
        raise click.UsageError(f'no session "{session_id}" in the journal; `zagent sessions list` shows them')
    text = "\n".join(lines) + "\n"
    if output:
        Path(output).write_text(text, encoding="utf-8")
        say(f"{len(lines)} events written to {output}", err=True)
    else:
        # JSON Lines: C0 is escaped already; DEL and C1 get the \\u form (the same string).
        click.echo(text.translate(JSON_ESCAPES), nl=False)


@sessions.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--as", "as_id", type=TEXT, metavar="ID", help="Store it under this session id.")
@click.pass_obj
def sessions_import(obj: Context, file: str, as_id: str | None) -> None:
    """Add the session of an export FILE to this home's journal."""
    from zagent_core.history.exports import ExportError, import_session, parse_export
    from zagent_core.journal.protocol import ConcurrencyError

    try:
        with open(file, encoding="utf-8") as handle:
            imported = parse_export(handle, source=file)
    except (ExportError, UnicodeDecodeError) as exc:
        raise click.UsageError(str(exc)) from None
    with obj.journal() as journal:
        try:
            session_id = import_session(journal, imported, home=obj.home, as_id=as_id)
        except ExportError as exc:
            raise click.UsageError(str(exc).replace("the session id", "--as")) from None
        except ConcurrencyError:
            raise click.UsageError(f"the journal already has a session {as_id or imported.session_id}; "
                                   "import it under another id with --as") from None
    say(session_id)


@sessions.command("fork")
@click.argument("session_id", type=TEXT, shell_complete=complete_sessions)
@click.option("--at", "at_seq", type=int, required=True, metavar="SEQ",
              help="Copy the events up to this global position (the #N of sessions show --events).")
@click.pass_obj
def sessions_fork(obj: Context, session_id: str, at_seq: int) -> None:
    """A new session from SESSION_ID's first events; resume it to take another path."""
    from zagent_core.history.exports import fork_session
    from zagent_core.ids import new_session_id

    with obj.existing_journal(read_only=False) as journal:
        try:
            say(fork_session(journal, session_id, at_seq, new_session_id()))
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None


@sessions.command("show")
@click.argument("session_id", type=TEXT, required=False, shell_complete=complete_sessions)
@click.option("--json", "as_json", is_flag=True, help="Print the session state as one JSON object.")
@click.option("--events", "show_events", is_flag=True, help="Also print the session's events as stored.")
@click.option("--format", "fmt", type=click.Choice(["text", "md"]), default="text", show_default=True,
              help="text for a terminal, md for Markdown.")
@click.option("--tree", is_flag=True, help="The session and its sub-agents, at any depth: a line each.")
@click.pass_obj
def sessions_show(obj: Context, session_id: str | None, as_json: bool, show_events: bool, fmt: str,
                  tree: bool) -> None:
    """The conversation of SESSION_ID, in order (default: the most recent top-level session)."""
    from zagent_core import rebuild
    from zagent_core.journal.events import EventSchemaError
    from zagent_core.session.status import session_status

    if as_json and fmt != "text":
        raise click.UsageError("give --json or --format, not both")
    if tree and (show_events or fmt != "text"):
        raise click.UsageError("--tree prints a line per session: give it alone, or with --json")

    with obj.existing_journal() as journal:
        if session_id is None:
            summaries = journal.sessions(1, top_level=True)
            if not summaries:
                raise click.UsageError("the journal has no sessions yet")
            session_id = summaries[0].session_id
        if tree:
            return _show_tree(journal, session_id, as_json)
        try:
            events = list(journal.read(session_id))
        except EventSchemaError as exc:
            raise click.ClickException(str(exc)) from None
        state = rebuild(events, history=True)
        status = session_status(journal, session_id, state)
    if state.version == 0:
        raise click.UsageError(f'no session "{session_id}" in the journal; `zagent sessions list` shows them')
    if as_json:
        emit_json(state.model_dump() | {"status_detail": status}
                  | ({"events": [e.to_dict() | {"at": e.at} for e in events]} if show_events else {}))
        return
    from zagent_cli.show import print_session

    print_session(state, status, events, fmt=fmt, show_events=show_events)


def _show_tree(journal: AnyJournal, session_id: str, as_json: bool) -> None:
    """``sessions show --tree``: the session and the sub-agents below it."""
    from zagent_core.history.trees import session_tree

    root = session_tree(journal, session_id)
    if root is None:
        raise click.UsageError(f'no session "{session_id}" in the journal; `zagent sessions list` shows them')
    if as_json:
        emit_json({"tree": root.to_dict()})
        return
    from zagent_cli.show import print_tree

    print_tree(root)


def main() -> None:
    cli(prog_name="zagent")


if __name__ == "__main__":
    main()
