"""Opening the engine a driver runs sessions with: the home, its journal, its workspace."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from zagent_core.drive.errors import WorkspaceError

if TYPE_CHECKING:
    from collections.abc import Collection

    from zagent_core.agent.engine import Engine
    from zagent_core.home import Home
    from zagent_core.journal.protocol import Journal


def open_engine(home: Home, journal: Journal, *, workspace: str | Path | None = None, command: str = "",
                mcp_servers: Collection[str] | None = None) -> Engine:
    """The engine over ``journal`` (sub-agents driven by the agent loop), its folder tools run in
    ``workspace`` (default: the current folder); ``command`` names the driver in its leases;
    ``mcp_servers``, the MCP servers of config.json it may start (default: all).

    The model's API keys are withheld from the tools' environment from now on. Raises
    :class:`WorkspaceError` when the workspace is not a folder.
    """
    from zagent_core.agent.engine import Engine
    from zagent_core.tools.credentials import withhold_keys

    folder = Path(workspace) if workspace else Path.cwd()
    if not folder.is_dir():
        raise WorkspaceError(f"workspace {folder} is not a folder")
    engine = Engine(home, journal, workspace=folder, command=command, mcp_servers=mcp_servers)
    withhold_keys(engine.config)
    return engine
