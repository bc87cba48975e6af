"""What a tool may ask of its session: :class:`SessionHost`, the session's side of
:class:`zagent_core.tools.inprocess.Host`.

A call of any kind of tool is handed a context whose host runs its processes (journaling
their notes as they run), starts its background tasks, asks a person, or starts a
sub-agent. The host calls down into the session's parts; what needs the agent wing (a
sub-agent's driver) is given to it.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from zagent_core.config import CapabilitiesConfig, Config
from zagent_core.home import Home
from zagent_core.journal.events import ReadEntry
from zagent_core.journal.views import TaskView
from zagent_core.session.background import Background
from zagent_core.session.people import People
from zagent_core.session.writer import Writer
from zagent_core.tools import sandbox, tasks
from zagent_core.tools.credentials import tool_environment
from zagent_core.tools.inprocess import Arguments, BuiltinContext
from zagent_core.tools.invocation import CallContext
from zagent_core.tools.nested import CallSocket, socket_folder
from zagent_core.tools.processes import write_identity
from zagent_core.tools.results import FULL_OUTPUT_NAME, ToolResult
from zagent_core.tools.runner import ProcessOutcome, ProcessSpec, run_process


class CallsStop(threading.Event):
    """Set, a session's running foreground calls stop and are journaled interrupted; it also
    says why, for each call's ``tool_call_interrupted``: zagent was stopped (Ctrl-C,
    SIGTERM), unless :meth:`stop` said otherwise (an MCP client cancelled a call)."""

    def __init__(self) -> None:
        super().__init__()
        self._why: tuple[str, str | None] | None = None

    def stop(self, why: str, *, call: str | None = None) -> None:
        """Stop the running calls, because of ``why`` (``the MCP client cancelled the call``);
        ``call`` is the one call it was said of, when one was: those beside it stop with it."""
        self._why = (why, call)
        self.set()

    def clear(self) -> None:
        self._why = None
        super().clear()

    def message(self, call_id: str) -> str:
        """What the ``tool_call_interrupted`` of ``call_id``, stopped, says."""
        why, call = self._why or ("zagent was stopped", None)
        if call is not None and call != call_id:
            why = f"stopped with call {call} ({why})"
        return f"{why} while the tool ran; its effect may or may not have happened"


#: Starts (or goes on with) the sub-agent of a spawn call; its outcome is the call's result.
Spawner = Callable[[BuiltinContext, Arguments], ToolResult]
#: Runs a call of a tool by name, nested in the running call of the given id.
Caller = Callable[[str, str, Any], ToolResult]


class SessionHost:
    """Runs what a call asks for, on behalf of one session."""

    def __init__(self, writer: Writer, background: Background, people: People, *, home: Home, config: Config,
                 spawner: Spawner, caller: Caller) -> None:
        self._writer = writer
        self._background = background
        self._people = people
        self._home = home
        self._config = config
        self._spawner = spawner
        self._caller = caller
        #: Set, running foreground calls stop their process trees and are journaled interrupted
        #: (Ctrl-C reaches the main thread only: the agent sets this for calls running beside each other).
        self.interrupt_calls = CallsStop()
        #: A child spawned with ``share_read_state``: its parent's read-state, read at each call, under its own.
        self.shared_read_state: Callable[[], Mapping[str, ReadEntry]] | None = None

    def follow(self, parent: SessionHost, *, share_read_state: bool) -> None:
        """Run as ``parent``'s sub-agent: its calls stop with the parent's (Ctrl-C stops the whole tree), its
        events reach the parent's listeners of the whole tree, and, with ``share_read_state``, the read-before-edit gate counts what the parent read, as it stands at each call."""
        self.interrupt_calls = parent.interrupt_calls
        self._writer.subscribe(parent._writer.heard, descendants=True)  # a person watching the parent sees it too
        if share_read_state:
            self.shared_read_state = lambda: parent._writer.state.read_state

    def read_state(self) -> Mapping[str, ReadEntry]:
        """What the read-before-edit gate knows the model saw: the session's own reads, then its parent's
        when it shares them (both folds of a journal, so a crash changes nothing)."""
        own = self._writer.state.read_state
        return own if self.shared_read_state is None else {**self.shared_read_state(), **own}

    def calls_stopped(self) -> bool:
        return self.interrupt_calls.is_set()

    def capabilities(self) -> CapabilitiesConfig:
        return self._background.capabilities()

    def kept_tasks(self) -> tuple[list[TaskView], int]:
        return self._background.kept_tasks()

    def wait_task(self, task_id: str, timeout: float | None) -> TaskView:
        return self._background.wait_task(task_id, timeout)

    def kill_task(self, task_id: str) -> TaskView:
        return self._background.kill_task(task_id)

    def answer_wakes(self, task_id: str) -> None:
        self._background.answer_wakes(task_id)

    def ask_user(self, context: BuiltinContext, question: str, choices: list[str] | None) -> str:
        return self._people.ask_user(context, question, choices)

    def spawn(self, context: BuiltinContext, arguments: Arguments) -> ToolResult:
        return self._spawner(context, arguments)

    def call_tool(self, context: BuiltinContext, name: str, arguments: Any) -> ToolResult:
        return self._caller(context.call_id, name, arguments)

    def call_folder(self, call_id: str) -> Path:
        """The call's folder, with its ``output/`` and its (empty) notify file, made."""
        call_dir = self._home.call_dir(self._writer.session_id, call_id)
        (call_dir / "output").mkdir(parents=True, exist_ok=True)
        (call_dir / "notify").touch()
        return call_dir

    def call_context(self, context: BuiltinContext, state_file: Path | None = None) -> CallContext:
        assert context.call_dir is not None, f"{context.tool} runs a process: its runs_process must say so"
        scratch = self._home.scratch_dir(self._writer.session_id)
        scratch.mkdir(parents=True, exist_ok=True)
        return CallContext(
            session_id=self._writer.session_id, home=self._home.root, workspace=context.workspace, scratch=scratch,
            output_dir=context.call_dir / "output", notify_file=context.call_dir / "notify",
            caps=self.capabilities().as_env(), clock=context.clock, state_file=state_file,
        )

    def run_process(self, context: BuiltinContext, spec: ProcessSpec) -> ProcessOutcome:
        call_id, call_dir = context.call_id, context.call_dir
        assert call_dir is not None

        def tick() -> bool:
            self._background.collect_notes(call_id)
            return self.interrupt_calls.is_set()

        def started(pid: int) -> None:
            # Who the tool is, so a resume after a crash can stop it if it still runs.
            write_identity(call_dir / tasks.TOOL_FILE, pid)

        # What the process runs through `zagent call` nests in this call, while it runs.
        with CallSocket(lambda name, arguments: self._caller(call_id, name, arguments),
                        socket_folder(self._writer.session_id, call_id)) as sockets:
            spec = dataclasses.replace(spec, env=spec.env | sockets.variables())
            outcome = run_process(self._confined(context, spec, sockets.folder), on_tick=tick, on_start=started)
        self._background.collect_notes(call_id)  # what it wrote last
        if outcome.stopped and self.interrupt_calls.is_set():
            raise KeyboardInterrupt  # as in the main thread: the call is journaled interrupted
        return outcome

    def start_task(self, context: BuiltinContext, spec: ProcessSpec) -> ToolResult:
        assert context.call_dir is not None and context.task_id is not None, (
            f"{context.tool} starts a task: its runs_process and background must say so")
        result, started = self._background.launch(context.tool, context.call_id, context.task_id, context.call_dir,
                                                  self._confined(context, spec))
        if started is not None:
            context.staged.append(started)
        return result

    def _confined(self, context: BuiltinContext, spec: ProcessSpec, sockets: Path | None = None) -> ProcessSpec:
        """``spec`` in its sandbox: its grant's, with the call's folder, the session's scratch and
        the folder of the call's socket (``sockets``) writable (and, whatever the grant, in a PID
        namespace of its own)."""
        assert context.call_dir is not None
        own = [context.call_dir, self._home.scratch_dir(self._writer.session_id), *([sockets] if sockets else [])]
        return sandbox.confine(spec, sandbox.Confinement.of(spec.sandbox, config=self._config.sandbox,
                                                            workspace=context.workspace, home=self._home, own=own))

    def _builtin_spec(self, context: BuiltinContext, argv: list[str], timeout: float | None,
                      capture_limit: int) -> ProcessSpec:
        """A built-in's process: the engine's environment, less its credentials, plus the call's variables."""
        assert context.call_dir is not None, f"{context.tool} runs a process: its runs_process must say so"
        added = self.call_context(context).variables(context.tool)
        # PWD is where the process runs (the workspace, links resolved), so paths the model
        # copies from `pwd` are the ones the read-before-edit gate knows.
        env = tool_environment() | added | {"PWD": str(context.workspace)}
        return ProcessSpec(
            argv=argv, cwd=context.workspace, env=env, stdin=None, timeout=timeout, env_names=sorted(added),
            merge_stderr=True, kill_grace=self._config.limits.kill_grace_seconds, capture_limit=capture_limit,
            spill_path=context.call_dir / FULL_OUTPUT_NAME, tag=f"ZAGENT_OUTPUT_DIR={context.call_dir / 'output'}",
            file_limit=self._config.limits.output_file_bytes,
            # What a model composes runs in the sandbox config.json describes.
            sandbox=sandbox.grant_for(self._config.sandbox, None, composed=True, workspace=context.workspace,
                                      who=context.tool),
        )

    def run_call_process(self, context: BuiltinContext, argv: list[str], *, timeout: float | None,
                         capture_limit: int) -> ProcessOutcome:
        return self.run_process(context, self._builtin_spec(context, argv, timeout, capture_limit))

    def start_call_task(self, context: BuiltinContext, argv: list[str], *, timeout: float | None) -> ToolResult:
        return self.start_task(context, self._builtin_spec(context, argv, timeout, 0))
