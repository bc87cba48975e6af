"""Every built-in tool, by name, and which of them a config turns on."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from types import ModuleType

from zagent_core.builtins import skills
from zagent_core.config import Config
from zagent_core.problems import Problem, did_you_mean
from zagent_core.tools.inprocess import Builtin
from zagent_core.tools.skills import Catalog

#: One module per built-in, each with a ``TOOL``; the order is the order they are offered in.
_MODULES = (
    "read_file",
    "write_file",
    "edit",
    "multi_edit",
    "list_files",
    "glob",
    "grep",
    "shell",
    "shell_kill",
    "wait_task",
    "record_artifact",
    "terminal",
    "ask_user",
    "spawn",
    "model_search",
    "tool_search",
    "fetch_url",
    "web_search",
    "generate_image",
)


@functools.cache
def _loaded() -> dict[str, ModuleType]:
    """Each built-in's module by the tool's name: its ``TOOL``, and optionally ``for_config``
    (how a config sets it up, None: not offered) and ``config_problems`` (what is wrong with
    its settings, said by ``zagent doctor`` and the session's warnings)."""
    found: dict[str, ModuleType] = {}
    for name in _MODULES:
        module = importlib.import_module(f"zagent_core.builtins.{name}")
        found[module.TOOL.name] = module
    return found


def all_builtins() -> dict[str, Builtin]:
    """Every built-in zagent has, by name (the skill tools as a home without skills has them)."""
    return {name: module.TOOL for name, module in _loaded().items()} | {tool.name: tool for tool in skills.TOOLS}


def names() -> frozenset[str]:
    """The names folder tools may not take."""
    return frozenset(all_builtins())


def enabled(config: Config, catalog: Catalog | None = None) -> tuple[dict[str, Builtin], list[Problem]]:
    """The built-ins ``config`` turns on (``builtins.enabled``, default all), and what is wrong with it.

    The skill tools are among them when ``catalog`` (the home's skills) has a skill.

    ``tools.disabled`` applies to built-ins too, as to folder tools: a disabled built-in
    stays known (a call is refused saying it is disabled), it is only not offered.
    """
    every = all_builtins()
    wanted = config.builtins.enabled
    problems = [] if wanted is None else [
        Problem(source="config.json", severity="warning",
                message=f'builtins.enabled names "{name}", which is not a built-in tool{did_you_mean(name, every)}; '
                        f"built-ins: {', '.join(every)}")
        for name in wanted if name not in every
    ]
    chosen: dict[str, Builtin] = {}
    for name, module in _loaded().items():
        if wanted is not None and name not in wanted:
            continue
        for_config: Callable[[Config], Builtin | None] | None = getattr(module, "for_config", None)
        configured = module.TOOL if for_config is None else for_config(config)
        if configured is not None:
            chosen[name] = configured
            checked: Callable[[Config], list[Problem]] | None = getattr(module, "config_problems", None)
            problems += checked(config) if checked is not None else []
    for tool in skills.for_catalog(catalog or Catalog()):
        if wanted is None or tool.name in wanted:
            chosen[tool.name] = tool
    if config.tools.disclosure == "lazy" and not any(tool.finds_deferred for tool in chosen.values()):
        problems.append(Problem(source="config.json", severity="warning",
                                message='tools.disclosure is "lazy" but builtins.enabled leaves out tool_search, so the '
                                        'model cannot find the deferred tools: add "tool_search" to builtins.enabled'))
    return chosen, problems
