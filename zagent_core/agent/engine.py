"""The engine with sub-agents: a session engine whose spawn calls this wing's loop drives.

:class:`zagent_core.session.engine.Engine` runs tools and journals sessions; a spawn call
needs an agent loop, which lives above sessions. This engine is given that driver at
construction, so ``zagent_core.Engine`` can spawn while sessions never import the agent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zagent_core.agent.children import drive_child
from zagent_core.session import engine

if TYPE_CHECKING:
    from collections.abc import Collection
    from pathlib import Path

    from zagent_core.config import Config
    from zagent_core.home import Home
    from zagent_core.journal.protocol import Journal


class Engine(engine.Engine):
    """:class:`zagent_core.session.engine.Engine`, its sub-agents driven by :func:`drive_child`."""

    def __init__(self, home: Home, journal: Journal, *, workspace: str | Path | None = None,
                 config: Config | None = None, command: str = "",
                 children: engine.ChildDriver = drive_child, mcp_servers: Collection[str] | None = None) -> None:
        super().__init__(home, journal, workspace=workspace, config=config, command=command, children=children,
                         mcp_servers=mcp_servers)
