"""What a session of the home offers, looked at without a session: its tool folders, the
built-ins config turns on and the MCP servers' tools, each with what is wrong with them
(``zagent tools list``, ``doctor``, shell completion)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zagent_core.config import Config
    from zagent_core.home import Home
    from zagent_core.problems import Problem
    from zagent_core.tools.inprocess import Builtin
    from zagent_core.tools.manifest import ToolSet


def home_tools(home: Home, config: Config, reserved: Collection[str] = ()) -> tuple[ToolSet, dict[str, Builtin],
                                                                                    list[Problem]]:
    """The home's tool folders (no folder may take a built-in's name, nor one of ``reserved``),
    the built-ins the config turns on (the skill tools when the home has skills), and what is wrong
    with ``builtins.enabled``, the skills, ``tools.aliases`` and ``tools.descriptions`` (``reserved``
    names tools too, an MCP server's): what a session of this home offers."""
    from zagent_core.builtins import registry
    from zagent_core.tools import shown
    from zagent_core.tools.manifest import load_tools
    from zagent_core.tools.skills import load_skills

    skills = load_skills(home)
    builtins, problems = registry.enabled(config, skills)
    toolset = load_tools(home, config, reserved=registry.names() | set(reserved))
    named = shown.problems(config, toolset.tools.keys() | builtins.keys() | set(reserved))
    return toolset, builtins, problems + skills.problems + named


def mcp_tools(config: Config, workspace: str | Path | None, home: Home,
              started: Callable[[str, str | None], None] | None = None) -> tuple[dict[str, Builtin], list[Problem],
                                                                                dict[str, str]]:
    """The tools of config.json's MCP servers (all started at once, each in ``workspace``,
    default the current folder, in the sandbox of ``home``'s sessions, listed and stopped),
    what went wrong with them, and each tool's server: what a session offers besides the
    home's own. ``started(server, why_not)`` hears of each start as it ends (``why_not``
    None: it started)."""
    if not config.mcp.servers:
        return {}, [], {}
    from zagent_core.tools.mcp import McpServers

    servers = McpServers(config, Path(workspace or Path.cwd()).resolve(), home, started=started)
    try:
        tools, problems = servers.tools()
    finally:
        servers.close()
    return tools, problems, servers.server_of
