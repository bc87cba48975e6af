"""``zagent chat``: a session as a conversation on the terminal.

The chat is a driver like ``run``: it holds the session's lease from start to leave, and
each message is a turn journaled exactly as ``run`` journals it. Between turns it waits at
a prompt_toolkit prompt (history, multi-line input, pasting); a wake-up from a background
task while it waits ends the wait, the agent's turn runs, and what was being typed comes
back. During a turn the terminal is in cbreak mode: nothing typed is echoed over the reply,
and what is typed (a Ctrl-D included) waits, in order, for the next prompt.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from zagent_cli.asking import terminal_askers
from zagent_cli.context import Context
from zagent_cli.output import ERROR, OK, plural, say
from zagent_cli.params import SESSION, complete_sessions
from zagent_cli.refusals import refusals_said, waiting_lines
from zagent_cli.run import NO_THINKING

if TYPE_CHECKING:
    from prompt_toolkit import PromptSession

    from zagent_core.agent.loop import Agent
    from zagent_core.agent.models import Model
    from zagent_core.session.engine import Engine, Session

_T = TypeVar("_T")
#: What a prompt returns when a wake-up ended it (the agent has a turn to take).
_WOKEN = "\0woken"
#: How often the prompt looks for wake-ups (the tasks' watcher journals them).
_WAKE_POLL_SECONDS = 0.2

HELP = """\
Type a message and press Enter. Alt-Enter (or Esc, then Enter) or Ctrl-J starts a new line;
pasted text keeps its lines. Ctrl-C stops a turn; at an empty prompt, Ctrl-C or Ctrl-D leaves.
Leaving never ends the session: zagent chat SESSION (or zagent resume) continues it.

/help              this help
/exit              leave (as Ctrl-D)
/model SPEC        talk to another model from the next message on (scripted:PATH, openai:M, anthropic:M)
/tools             the tools the model is offered
/sessions          the most recently active sessions
/compact [TEXT]    summarise the conversation now (TEXT: what the summary must keep)
/show              this session's conversation, as zagent sessions show prints it
/tree              this session and its sub-agents
/cost              the tokens this session used"""


@click.command()
@click.argument("session_id", type=SESSION, required=False, shell_complete=complete_sessions)
@click.option("--model", "model_spec", metavar="SPEC",
              help="scripted:PATH, openai:MODEL or anthropic:MODEL (default: the session's, else agent.model).")
@NO_THINKING
@click.pass_obj
def chat(obj: Context, session_id: str | None, model_spec: str | None, no_thinking: bool) -> None:
    """Talk to an agent on this terminal: start a session, or continue SESSION_ID.

    Replies stream as they come, each tool call and its result on a line; questions and
    approvals are asked inline. /help lists the commands.
    """
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise click.UsageError("zagent chat needs a terminal; in a script or a pipe, use zagent run "
                               "(and zagent resume SESSION to go on)")
    with obj.journal() as journal, refusals_said():
        Chat(obj, obj.engine(journal), session_id, model_spec, thinking=not no_thinking).run()


class Chat:
    """One chat: the session it holds, the agent that answers, the prompt between turns."""

    def __init__(self, obj: Context, engine: Engine, session_id: str | None, model_spec: str | None,
                 *, thinking: bool = True) -> None:
        from zagent_cli.show import LiveConversation
        from zagent_core.drive.driving import traced

        self.obj = obj
        self.engine = engine
        self.live = LiveConversation(thinking=thinking)
        self.model, self.spec, before = self._model(model_spec, session_id)
        self.session = self._open(session_id)
        try:
            self.trace = traced(engine, self.session, before, lambda why: say(f"warning: {why}", err=True))
        except BaseException:
            self.session.release()
            raise
        self.agent = self._agent()
        self._draft = ""

    def _model(self, spec: str | None, session_id: str | None) -> tuple[Model, str, int]:
        """The model and its spec, and the session's version before this chat (its live trace starts there)."""
        from zagent_core.drive.errors import SessionUnavailableError
        from zagent_core.drive.model import choose_model

        state = self.engine.session_state(session_id) if session_id is not None else None
        if state is not None and state.version == 0:
            raise SessionUnavailableError(f'no session "{session_id}" in the journal; `zagent sessions list` '
                                          "shows them")
        model, chosen = choose_model(self.engine, spec, state, "")
        assert model is not None  # a prompt to answer makes choose_model find one, or refuse
        return model, chosen, state.version if state is not None else 0

    def _open(self, session_id: str | None) -> Session:
        from zagent_core.drive.errors import SessionUnavailableError
        from zagent_core.session.engine import SessionEndedError, UnknownSessionError
        from zagent_core.session.leases import SessionBusyError

        try:
            if session_id is None:
                session = self.engine.start_session(origin="chat")
                session.subscribe(self.live.event, descendants=True)
            else:
                session = self.engine.resume(session_id, listener=self.live.event)
        except (UnknownSessionError, SessionEndedError, SessionBusyError) as exc:
            raise SessionUnavailableError(str(exc)) from None
        ask, approve = terminal_askers(self.engine.config.limits)
        session.ask_terminal, session.approve_terminal = _cooked(ask), _cooked(approve)
        return session

    def _agent(self) -> Agent:
        from zagent_core.agent.loop import Agent

        return Agent(self.session, self.model, spec=self.spec, on_text=self.live.text)

    def run(self) -> None:
        """Converse until the person leaves; the session is let go, not ended."""
        from zagent_core.drive.driving import let_go

        session = self.session
        say(f"[chat in session {session.session_id} with {self.model.name}; /help for commands, Ctrl-D to leave]",
            err=True)
        try:
            self._turn(None)  # a resumed session may have a turn to finish, or wake-ups waiting
            prompt = _prompt_session(self.engine.home.root / "chat_history")
            while True:
                text = self._ask(prompt)
                if text is None:
                    break
                if text == _WOKEN:
                    self._turn(None)
                elif text.startswith("/"):
                    if not self._command(text):
                        break
                elif text.strip():
                    self._turn(text)
        finally:
            let_go(session, self.trace)
        say(f"[left session {session.session_id}; continue with: zagent chat {session.session_id}]", err=True)

    def _ask(self, prompt: PromptSession[str]) -> str | None:
        """The next message (or :data:`_WOKEN`); None when the person leaves."""
        from prompt_toolkit.patch_stdout import patch_stdout

        with patch_stdout(raw=True), self._woken_ends(prompt):
            try:
                text = prompt.prompt("you> ", default=self._draft)
            except (EOFError, KeyboardInterrupt):
                return None
        if text != _WOKEN:
            self._draft = ""  # sent (a wake-up keeps it for the prompt after its turn)
        return text

    @contextlib.contextmanager
    def _woken_ends(self, prompt: PromptSession[str]) -> Iterator[None]:
        """While the prompt waits, a wake-up ends it (keeping what was typed, for the next one)."""
        done = threading.Event()

        def watch() -> None:
            while not done.wait(_WAKE_POLL_SECONDS):
                woken, _ = self.session.outlook()
                app = prompt.app
                if woken and app.is_running:
                    def wake() -> None:
                        self._draft = app.current_buffer.text
                        app.exit(result=_WOKEN)
                    app.loop.call_soon_threadsafe(wake)  # type: ignore[union-attr]
                    return

        watcher = threading.Thread(target=watch, daemon=True, name="zagent-chat-wakes")
        watcher.start()
        try:
            yield
        finally:
            done.set()
            watcher.join()

    def _turn(self, prompt: str | None) -> None:
        """A turn for ``prompt`` (None: whatever the session has to go on with), then the
        turns its background tasks' wake-ups call for while it runs; Ctrl-C stops it."""
        from zagent_core.agent.models import ModelError

        with _quiet_terminal():
            try:
                result = self.agent.run(prompt, wait_minutes=0)
            except KeyboardInterrupt:
                say("\n[stopped: the turn was cut off, and what it ran is journaled as interrupted]",
                    err=True, colour=ERROR)
                return
            except ModelError as exc:
                say(f"[model error: {exc}]", err=True, colour=ERROR)
                return
        if result.reason not in ("idle", "waiting_on_user", "waiting_on_approval"):
            say(f"[{result.reason}]", err=True, colour=ERROR)
        for line in waiting_lines(self.session.state):
            say(line, err=True)
        running = len(self.session.state.running_tasks)
        if running:
            say(f"[{plural(running, 'background task')} running; the agent is woken when they end]", err=True)

    def _command(self, text: str) -> bool:
        """Carry out a slash command; False when it is the one that leaves."""
        name, _, rest = text[1:].partition(" ")
        rest = rest.strip()
        handlers: dict[str, Callable[[str], Any]] = {
            "help": lambda _: say(HELP), "model": self._switch_model, "tools": self._tools,
            "sessions": self._sessions, "compact": self._compact, "show": self._show, "tree": self._show,
            "cost": self._cost,
        }
        if name in ("exit", "quit"):
            return False
        handler = handlers.get(name)
        if handler is None:
            say(f"[unknown command /{name}; /help lists them]", err=True, colour=ERROR)
        else:
            handler(name if name == "tree" else rest)
        return True

    def _switch_model(self, spec: str) -> None:
        from zagent_core.drive.errors import NoModelError
        from zagent_core.drive.model import choose_model

        if not spec:
            say(f"[the model is {self.model.name}; /model SPEC changes it]", err=True)
            return
        try:
            model, chosen = choose_model(self.engine, spec, self.session.state, "")
        except NoModelError as exc:
            say(f"[{exc}]", err=True, colour=ERROR)
            return
        assert model is not None
        self.model, self.spec = model, chosen
        self.agent = self._agent()
        say(f"[from the next message on: {model.name}]", err=True, colour=OK)

    def _tools(self, _: str) -> None:
        for tool in self.session.offered():
            say(f"  {tool.name}: {tool.description.splitlines()[0] if tool.description else ''}"[:120])

    def _sessions(self, _: str) -> None:
        from zagent_cli.sessions import sessions_list

        click.get_current_context().invoke(sessions_list, limit=10, show_all=False, as_json=False)

    def _show(self, what: str) -> None:
        from zagent_cli.sessions import sessions_show

        # Printed in the chat's own flow, never through a pager (which would take the terminal from it).
        click.get_current_context().invoke(sessions_show, session_id=self.session.session_id, as_json=False,
                                           show_events=False, fmt="text", tree=what == "tree", no_pager=True)

    def _compact(self, instructions: str) -> None:
        from zagent_core.agent.conversation import OrphanedCallError
        from zagent_core.agent.models import ModelError

        try:
            with _quiet_terminal():
                event = self.agent.compact("manual", instructions=instructions or None)
        except (ModelError, OrphanedCallError) as exc:
            say(f"[not compacted: {exc}]", err=True, colour=ERROR)
            return
        except KeyboardInterrupt:
            say("\n[stopped: not compacted]", err=True, colour=ERROR)
            return
        say(f"[compacted: about {event.tokens_before:,} tokens -> {event.tokens_after:,}]", err=True, colour=OK)

    def _cost(self, _: str) -> None:
        state = self.session.state
        say(f"[{plural(state.model_replies, 'model reply', 'model replies')}, {state.input_tokens:,} tokens in, "
            f"{state.output_tokens:,} out (prices come with a model catalog in config.json; none is set)]")


def _prompt_session(history: Path) -> PromptSession[str]:
    """The prompt between turns: a history kept in the home, Enter sends, Alt-Enter and
    Ctrl-J start a new line, Ctrl-C clears what was typed (at an empty prompt, leaves)."""
    from prompt_toolkit import PromptSession
    from prompt_toolkit.history import FileHistory
    from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent

    keys = KeyBindings()

    @keys.add("escape", "enter")
    @keys.add("c-j")
    def _new_line(event: KeyPressEvent) -> None:
        event.current_buffer.insert_text("\n")

    @keys.add("c-c")
    def _clear_or_leave(event: KeyPressEvent) -> None:
        if event.current_buffer.text:
            event.current_buffer.reset()
        else:
            event.app.exit(exception=EOFError())

    history.parent.mkdir(parents=True, exist_ok=True)
    return PromptSession(history=FileHistory(str(history)), key_bindings=keys, multiline=False,
                         prompt_continuation="...> ")


@contextlib.contextmanager
def _quiet_terminal() -> Iterator[None]:
    """cbreak mode for a turn: no echo, keys kept for the next prompt, Ctrl-C still a signal.

    An Enter typed ahead stays a carriage return (no ICRNL), as the prompt reads it, not a
    newline (Ctrl-J: a new line in the message). TCSANOW, never TCSAFLUSH: a flush would
    drop what was typed ahead.
    """
    import termios

    fd = sys.stdin.fileno()
    before = termios.tcgetattr(fd)
    quiet = list(before)
    quiet[0] &= ~termios.ICRNL
    quiet[3] &= ~(termios.ICANON | termios.ECHO)
    quiet[6] = list(before[6])
    quiet[6][termios.VMIN], quiet[6][termios.VTIME] = 1, 0
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSANOW, before)


def _cooked(ask: Callable[..., _T]) -> Callable[..., _T]:
    """``ask``, run with the terminal as it was before the turn (echo, line editing)."""
    def asked(*args: Any) -> _T:
        import termios

        fd = sys.stdin.fileno()
        during = termios.tcgetattr(fd)
        cooked = list(during)
        cooked[0] |= termios.ICRNL
        cooked[3] |= termios.ICANON | termios.ECHO
        termios.tcsetattr(fd, termios.TCSANOW, cooked)
        try:
            return ask(*args)
        finally:
            termios.tcsetattr(fd, termios.TCSANOW, during)
    return asked

