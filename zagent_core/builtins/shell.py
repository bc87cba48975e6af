"""The built-in ``shell`` tool: a command run by ``/bin/sh -c`` in the workspace.

This is the one place zagent runs a shell: the model writes shell, so ``/bin/sh`` reads
it. The command runs in its own process group with the engine's environment less its
credentials (as a tool folder's program), stdout and stderr merged; at the timeout the
whole group is killed (and any process of the call that left it). What the model sees is
capped at 32 KiB, keeping the end (errors and summaries come last) except for commands
that only explore, whose start matters as much; the output is kept in the call's
``full_output.txt`` (its start and end past ``limits.output_file_bytes``) and the marker says where.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from zagent_core.builtins.shell_parse import explores, is_read_only
from zagent_core.config import Config
from zagent_core.tools.inprocess import Arguments, Builtin, BuiltinContext

# One wording, for folder tools and shell alike, of how a process ended when it was not exit code 0.
from zagent_core.tools.results import ToolResult, _exit_note as ending_of, cut_marker
from zagent_core.tools.runner import ProcessOutcome

NAME = "shell"
SHELL = "/bin/sh"
#: What the model is shown of the output at most (stdout and stderr combined).
OUTPUT_CAP_BYTES = 32 * 1024
DEFAULT_TIMEOUT_SECONDS = 120
MAX_TIMEOUT_SECONDS = 3600
#: How far a cut may move to fall on a line boundary.
_LINE_SNAP = 256

_RUNS = (
    "Run a shell command (/bin/sh -c) in the workspace and return its output, stdout and stderr together, "
    "with the exit code when it is not 0. The command is killed with everything it started at the timeout. "
    "Output over 32 KiB keeps its end (for commands that only read, like cat, grep or git log, its start "
    "and end); the whole output is kept in a file the result names."
)
_BACKGROUND = (
    " With run_in_background the command runs as a background task: the result comes at once with its task "
    "number, you are woken when it ends, and terminal, wait_task and shell_kill manage it."
)
#: The file tools shell's description points to, in the order it names them.
_FILE_TOOLS = ("read_file", "edit", "grep", "glob")


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def describe(*, background: bool = True, file_tools: tuple[str, ...] = _FILE_TOOLS) -> str:
    """What the model is told of shell: run_in_background only when it is offered, and only the
    file tools the session offers (a model told of a tool it does not have calls it)."""
    text = _RUNS + (_BACKGROUND if background else "")
    if file_tools:
        text += f" Prefer {_listed(list(file_tools))} for files: they are safer and journaled with what you saw."
    return text


DESCRIPTION = describe()
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "minLength": 1, "description": "The command, as /bin/sh reads it."},
        "timeout": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_TIMEOUT_SECONDS,
                    "description": f"Seconds before the command and everything it started are killed (default "
                                   f"{DEFAULT_TIMEOUT_SECONDS}, at most {MAX_TIMEOUT_SECONDS}). In the background, "
                                   "no limit unless given."},
        "run_in_background": {"type": "boolean",
                              "description": "Run as a background task (servers, watchers, long builds) and "
                                             "answer at once with its task number."},
        "description": {"type": "string",
                        "description": "What the command does, in 5-10 words (journaled with the call)."},
    },
    "required": ["command"],
    "additionalProperties": False,
}


def _argv(command: str) -> list[str]:
    return [SHELL, "-c", command]


def _utf8_length(lead: int) -> int:
    """How many bytes the UTF-8 sequence starting with ``lead`` takes (1 for a stray byte)."""
    for length, prefix, bits in ((2, 0b110, 3), (3, 0b1110, 4), (4, 0b11110, 5)):
        if lead >> (8 - bits) == prefix:
            return length
    return 1


def _tail_start(data: bytes) -> bytes:
    """``data`` from its first line start when one is near, else from its first whole character."""
    newline = data.find(b"\n", 0, _LINE_SNAP)
    if newline != -1:
        return data[newline + 1:]
    skip = 0
    while skip < min(3, len(data)) and data[skip] & 0xC0 == 0x80:  # continuation bytes of a cut character
        skip += 1
    return data[skip:]


def _head_end(data: bytes) -> bytes:
    """``data`` up to its last line end when one is near, else up to its last whole character."""
    newline = data.rfind(b"\n", max(0, len(data) - _LINE_SNAP))
    if newline != -1:
        return data[:newline + 1]
    for back in range(1, min(4, len(data)) + 1):
        if data[-back] & 0xC0 != 0x80:  # the last character's first byte
            return data if _utf8_length(data[-back]) <= back else data[:-back]
    return data


def shown_output(outcome: ProcessOutcome, *, explore: bool, marker: str | None = None,
                 cap: int = OUTPUT_CAP_BYTES) -> tuple[str, int]:
    """What the model is shown of an output, and how many bytes of it were left out.

    ``outcome.stdout`` is the kept tail (``cap`` bytes at most); past the cap the runner
    spilled the whole output to a file, which the head of an exploring command is read from.
    Cuts fall on line starts when one is near, and never inside a character. ``marker``:
    ``limits.truncation_marker``.
    """
    total, tail = outcome.stdout_total, outcome.stdout
    if total <= cap:
        return tail.decode("utf-8", "replace"), 0
    full = "[full output: {path}]" if outcome.spilled else "[the full output could not be kept]"
    default = "…({bytes} bytes truncated from {where})… " + full
    if explore and outcome.spilled is not None:
        with open(outcome.spilled, "rb") as handle:
            head = _head_end(handle.read(cap // 2))
        tail = _tail_start(tail[-(cap - cap // 2):])
        dropped = total - len(head) - len(tail)
        head_text = head.decode("utf-8", "replace").removesuffix("\n")
        line = cut_marker(marker, default, dropped=dropped, where="middle", path=outcome.spilled)
        return f"{head_text}\n{line}\n{tail.decode('utf-8', 'replace')}", dropped
    tail = _tail_start(tail)
    dropped = total - len(tail)
    line = cut_marker(marker, default, dropped=dropped, where="head", path=outcome.spilled)
    return f"{line}\n{tail.decode('utf-8', 'replace')}", dropped


def _can_run(arguments: Arguments) -> bool:
    # No process can be given a NUL in its argv: such a call is refused before anything starts, so it
    # takes no call folder and no task number.
    return "\x00" not in arguments["command"]


def run(context: BuiltinContext, arguments: Arguments) -> ToolResult:
    """Run one validated shell call, in the foreground or as a background task."""
    command: str = arguments["command"]
    if not _can_run(arguments):
        return ToolResult(output="the command contains a NUL character, which no shell command can hold; remove it",
                          is_error=True)
    if arguments.get("run_in_background"):
        given = arguments.get("timeout")
        return context.host.start_call_task(context, _argv(command), timeout=None if given is None else float(given))
    timeout = float(arguments.get("timeout", DEFAULT_TIMEOUT_SECONDS))
    outcome = context.host.run_call_process(context, _argv(command), timeout=timeout,
                                            capture_limit=OUTPUT_CAP_BYTES)
    return result_of(outcome, timeout, explore=explores(command), marker=context.config.limits.truncation_marker)


def result_of(outcome: ProcessOutcome, timeout: float, *, explore: bool, marker: str | None = None) -> ToolResult:
    """What the model is told of a process a built-in ran (shell, a skill's script): its output as
    :func:`shown_output` cuts it, and how it ended when it was not exit code 0."""
    if outcome.start_error is not None:
        return ToolResult(output=outcome.start_error, is_error=True)
    text, dropped = shown_output(outcome, explore=explore, marker=marker)
    ending = ending_of(outcome, timeout)
    parts = [text.rstrip("\n") or ("(no output)" if ending is None else ""), ending or ""]
    return ToolResult(
        output="\n".join(part for part in parts if part), is_error=ending is not None,
        exit_code=outcome.exit_code, timed_out=outcome.timed_out, duration_ms=round(outcome.duration * 1000),
        truncated_bytes=dropped, full_output_path=str(outcome.spilled) if dropped and outcome.spilled else None,
        pid=outcome.pid,
    )


def _concurrency_safe(arguments: Arguments) -> bool:
    # A background start numbers a task: it stays in order with the calls around it.
    return not arguments.get("run_in_background") and is_read_only(arguments["command"])


TOOL = Builtin(
    name=NAME, description=DESCRIPTION, parameters=PARAMETERS, run=run,
    concurrency_safe=_concurrency_safe,
    # A command may have written, sent or deleted anything before a crash cut it off.
    replay="unsafe",
    runs_process=_can_run,
    background=lambda arguments: bool(arguments.get("run_in_background")) and _can_run(arguments),
)


def for_config(config: Config) -> Builtin:
    """shell as ``config`` sets it up: without ``run_in_background`` when ``builtins.shell.background``
    is off, its description naming only the file tools the session offers."""
    enabled, disabled = config.builtins.enabled, config.tools.disabled
    offered = tuple(name for name in _FILE_TOOLS if (enabled is None or name in enabled) and name not in disabled)
    background = config.builtins.shell.background
    if background and offered == _FILE_TOOLS:
        return TOOL
    properties = {key: value for key, value in PARAMETERS["properties"].items()
                  if background or key != "run_in_background"}
    return dataclasses.replace(TOOL, description=describe(background=background, file_tools=offered),
                               parameters={**PARAMETERS, "properties": properties})
