"""From a tool, its arguments and a call's folders to the exact process to run (a :class:`ProcessSpec`).

This is where the manifest's ``command``, ``input``, ``cwd``, ``env`` and
``timeout_seconds`` meet one call: per-call placeholders are expanded, arguments are
delivered (stdin JSON, last argument, or environment), and the environment is built
from the machine's minus every ``ZAGENT_*`` variable the engine itself holds and every
variable the model's key was taken from (:func:`zagent_core.tools.credentials.tool_environment`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zagent_core.config import LimitsConfig, SandboxGrant
from zagent_core.journal.events import CallClock
from zagent_core.tools.credentials import tool_environment
from zagent_core.tools.manifest import Tool, expand
from zagent_core.tools.results import FULL_OUTPUT_NAME, JSON_STDOUT_LIMIT
from zagent_core.tools.runner import ProcessSpec

#: Variables that describe the call to the tool; the seed's table.
CALL_VARIABLES = (
    "ZAGENT_WORKSPACE", "ZAGENT_HOME", "ZAGENT_SCRATCH", "ZAGENT_SESSION", "ZAGENT_TOOL_NAME",
    "ZAGENT_TOOL_DIR", "ZAGENT_OUTPUT_DIR", "ZAGENT_NOTIFY_FILE", "ZAGENT_CAPS", "ZAGENT_STATE_FILE", "ZAGENT_NOW",
    "ZAGENT_CALL_SEED",
)


@dataclass(frozen=True)
class CallContext:
    """Where one call runs and what it is told about itself."""

    session_id: str
    home: Path
    workspace: Path
    scratch: Path
    output_dir: Path
    notify_file: Path
    caps: str
    clock: CallClock
    #: The tool's durable state as the call starts (a JSON object); changes come back in a JSON
    #: result's ``state``. None for a built-in, which has its state in its context.
    state_file: Path | None = None

    def variables(self, tool: str) -> dict[str, str]:
        """The ``ZAGENT_*`` variables that tell a process of tool ``tool`` about its call."""
        variables = {
            "ZAGENT_WORKSPACE": str(self.workspace),
            "ZAGENT_HOME": str(self.home),
            "ZAGENT_SCRATCH": str(self.scratch),
            "ZAGENT_SESSION": self.session_id,
            "ZAGENT_TOOL_NAME": tool,
            "ZAGENT_OUTPUT_DIR": str(self.output_dir),
            "ZAGENT_NOTIFY_FILE": str(self.notify_file),
            "ZAGENT_CAPS": self.caps,
            "ZAGENT_NOW": self.clock.now,
            "ZAGENT_CALL_SEED": self.clock.seed,
        }
        if self.state_file is not None:
            variables["ZAGENT_STATE_FILE"] = str(self.state_file)
        return variables


def _arg_variable(name: str) -> str:
    return "ZAGENT_ARG_" + re.sub(r"[^A-Z0-9_]", "_", name.upper())


def delivery_problems(tool: Tool, arguments: dict[str, Any]) -> list[str]:
    """Valid arguments that the tool's input mode still cannot carry, worded for the model."""
    if tool.manifest.input != "env":
        return []  # JSON escapes everything on stdin and in argv
    return [
        f"argument {json.dumps(name)}: contains a NUL character, which cannot be passed in an environment variable"
        for name, value in arguments.items()
        if isinstance(value, str) and "\x00" in value
    ]


def build_invocation(
    tool: Tool,
    arguments: dict[str, Any],
    context: CallContext,
    *,
    limits: LimitsConfig,
    environ: Mapping[str, str] | None = None,
    sandbox: SandboxGrant | None = None,
) -> ProcessSpec:
    """Everything needed to start ``tool`` for one call, in the folder of ``context``'s
    ``output_dir``: the output beyond what is kept spills there; ``sandbox`` is the grant it runs under."""
    manifest = tool.manifest
    placeholders = {
        "{dir}": str(tool.folder),
        "{home}": str(context.home),
        "{workspace}": str(context.workspace),
        "{scratch}": str(context.scratch),
        "{output_dir}": str(context.output_dir),
    }
    argv = [expand(arg, placeholders) for arg in tool.argv_template]
    arguments_json = json.dumps(arguments, ensure_ascii=False)

    env = tool_environment(environ)
    added = {key: expand(value, placeholders) for key, value in manifest.env.items()}
    added.update(context.variables(tool.name), ZAGENT_TOOL_DIR=str(tool.folder))

    stdin: bytes | None = None
    if manifest.input == "stdin_json":
        stdin = arguments_json.encode("utf-8")
    elif manifest.input == "args_json":
        argv.append(arguments_json)
    else:
        for name, value in arguments.items():
            added[_arg_variable(name)] = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        added["ZAGENT_ARGS_JSON"] = arguments_json
    env.update(added)

    if manifest.timeout_seconds == -1:
        timeout = None
    else:
        timeout = manifest.timeout_seconds or limits.default_timeout_seconds
    cwd = tool.folder if manifest.cwd == "tool_dir" else context.workspace
    # The working folder as the process sees it: an inherited PWD would name zagent's own.
    env["PWD"] = str(cwd)
    text_mode = manifest.output == "text"
    call_dir = context.output_dir.parent
    return ProcessSpec(
        argv=argv,
        cwd=cwd,
        env=env,
        stdin=stdin,
        timeout=timeout,
        env_names=sorted(added),
        merge_stderr=text_mode,
        kill_grace=limits.kill_grace_seconds,
        capture_limit=limits.output_cap_bytes if text_mode else JSON_STDOUT_LIMIT,
        spill_path=call_dir / (FULL_OUTPUT_NAME if text_mode else "stdout.txt"),
        tag=f"ZAGENT_OUTPUT_DIR={context.output_dir}",
        file_limit=limits.output_file_bytes,
        sandbox=sandbox,
    )
