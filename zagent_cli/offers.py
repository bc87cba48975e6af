"""What a session of the home offers: its tool folders, the built-ins and the MCP servers' tools, with their problems."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING

from zagent_cli.context import Context
from zagent_cli.output import ERROR, WARNING, say

if TYPE_CHECKING:
    from zagent_core import Config, Home, Problem, ToolSet
    from zagent_core.tools.inprocess import Builtin


def say_problems(problems: list[Problem]) -> None:
    for problem in problems:
        say(f"  {problem.severity}: {problem}", colour=ERROR if problem.severity == "error" else WARNING)


def home_tools(home: Home, config: Config, reserved: Collection[str] = ()) -> tuple[ToolSet, dict[str, Builtin],
                                                                                    list[Problem]]:
    """The home's tool folders (no folder may take a built-in's name, nor one of ``reserved``),
    the built-ins the config turns on, and what is wrong with ``builtins.enabled``: what a
    session of this home offers."""
    from zagent_core.builtins import registry
    from zagent_core.tools.manifest import load_tools

    builtins, problems = registry.enabled(config)
    return load_tools(home, config, reserved=registry.names() | set(reserved)), builtins, problems


def mcp_tools(obj: Context, config: Config) -> tuple[dict[str, Builtin], list[Problem], dict[str, str]]:
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
