"""A folder tool (a manifest and its program, in the home's ``tools/``) as a :class:`~zagent_core.tools.toolbox.ToolEntry`.

:class:`FolderTool` adapts a loaded :class:`~zagent_core.tools.manifest.Tool`: the manifest
answers what the session asks of every tool (its parameters, whether a call may run
beside others, what a resume does with one), and a call runs the tool's process in the
call's folder, in the foreground or as a background task, through the call's host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from zagent_core.config import Config
from zagent_core.journal.events import ToolOffer
from zagent_core.tools.inprocess import Arguments, BuiltinContext, PreparedCall
from zagent_core.tools.invocation import build_invocation, delivery_problems
from zagent_core.tools.manifest import Tool
from zagent_core.tools.processes import write_json
from zagent_core.tools.results import CallPaths, ToolResult, build_result
from zagent_core.tools.sandbox import SandboxRefused, grant_for


@dataclass(frozen=True)
class FolderTool:
    """A folder tool, offered and run like any other tool."""

    tool: Tool

    @property
    def name(self) -> str:
        return self.tool.name

    @property
    def description(self) -> str:
        return self.tool.description

    @property
    def parameters(self) -> dict[str, Any]:
        return self.tool.manifest.parameters

    @property
    def validator(self) -> Any:
        return self.tool.validator

    @property
    def output_schema(self) -> dict[str, Any] | None:
        return self.tool.manifest.output_schema

    @property
    def replay(self) -> Literal["safe", "unsafe"]:
        return self.tool.manifest.replay

    @property
    def permission(self) -> Literal["allow", "ask"]:
        return self.tool.manifest.permission

    @property
    def continues(self) -> bool:
        return False  # a process cut off is gone: resume settles its call

    @property
    def served_in_replay(self) -> bool:
        return False

    @property
    def read_only(self) -> bool:
        return self.tool.manifest.replay == "safe"

    @property
    def safe_beside_others(self) -> bool:
        return self.tool.manifest.concurrency_safe

    @property
    def finds_deferred(self) -> bool:
        return False

    def offered(self, config: Config, depth: int) -> bool:
        return True

    def deferred(self, config: Config) -> bool:
        return config.tools.lazy_folder_tools and config.tools.defers(self.name)

    def is_concurrency_safe(self, arguments: Any) -> bool:
        return self.tool.manifest.concurrency_safe

    def runs_process(self, arguments: Arguments) -> bool:
        return True

    def background(self, arguments: Arguments) -> bool:
        return self.tool.manifest.background

    def offer(self) -> ToolOffer:
        return ToolOffer(name=self.name, description=self.description, folder=str(self.tool.folder),
                         manifest_hash=self.tool.manifest_hash)

    def delivery_problems(self, arguments: Arguments) -> list[str]:
        return delivery_problems(self.tool, arguments)

    def prepare(self, context: BuiltinContext, arguments: Arguments) -> PreparedCall:
        """The call's process, with the tool's state in ``state.json`` of its folder."""
        assert context.call_dir is not None, "a folder tool always runs a process"
        tool, manifest, call_dir = self.tool, self.tool.manifest, context.call_dir
        state_file = call_dir / "state.json"
        write_json(state_file, dict(context.state.before))
        refused: str | None = None
        try:
            grant = grant_for(context.config.sandbox, manifest.sandbox, composed=False, workspace=context.workspace,
                              who=f"tools/{tool.folder.name}")
        except SandboxRefused as exc:
            grant, refused = None, str(exc)
        spec = build_invocation(tool, arguments, context.host.call_context(context, state_file),
                                limits=context.config.limits, sandbox=grant)

        def run() -> ToolResult:
            if refused is not None:
                return ToolResult(output=refused, is_error=True)
            if context.task_id is not None:
                return context.host.start_task(context, spec)
            outcome = context.host.run_process(context, spec)
            return build_result(
                outcome, output_mode=manifest.output, timeout=spec.timeout, attach_outputs=manifest.attach_outputs,
                paths=CallPaths(call_dir=call_dir, output_dir=call_dir / "output"), cwd=spec.cwd,
                caps=context.host.capabilities(), limits=context.config.limits, output_validator=tool.output_validator,
            )

        return PreparedCall(started={
            "argv": spec.argv, "cwd": str(spec.cwd), "input_mode": manifest.input, "output_mode": manifest.output,
            "attach_outputs": manifest.attach_outputs, "output_dir": str(call_dir / "output"),
            "notify_file": str(call_dir / "notify"), "env_names": spec.env_names, "timeout_seconds": spec.timeout,
            "manifest_hash": tool.manifest_hash, "files_hash": tool.files_hash(),
        }, run=run, crash_before_finished=context.task_id is None)
