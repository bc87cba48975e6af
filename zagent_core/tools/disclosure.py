"""Lazy disclosure (config.json's ``tools.disclosure: "lazy"``): which tools a request sends.

Deferred tools (MCP servers' tools, and folder tools with ``tools.lazy_folder_tools``) stay
out of requests until ``tool_search`` unlocks them (``tools_unlocked``, folded into the
session's ``unlocked``). Unlocked tools come after all the others, in the order they were
unlocked: the tool list a request sent before them is sent again byte for byte, so a
provider's cache of its start holds (the seed's rule; an unlock still changes the tools,
which providers cache before the conversation).
"""

from __future__ import annotations

from collections.abc import Sequence

from zagent_core.config import Config
from zagent_core.tools.inprocess import Findable
from zagent_core.tools.shown import Shown
from zagent_core.tools.toolbox import ToolEntry


def disclosed(offered: Sequence[ToolEntry], config: Config, unlocked: Sequence[str]) -> list[ToolEntry]:
    """The tools of ``offered`` a request sends: the deferred ones only once ``unlocked``, last, in
    that order; the tool that finds deferred tools only while some are."""
    deferred = {entry.name: entry for entry in offered if entry.deferred(config)}
    sent = [entry for entry in offered if entry.name not in deferred and (deferred or not entry.finds_deferred)]
    return sent + [deferred[name] for name in unlocked if name in deferred]


def findable(offered: Sequence[ToolEntry], config: Config, shown: Shown, unlocked: Sequence[str]) -> list[Findable]:
    """The deferred tools of ``offered``, as ``tool_search`` finds them: as the model is shown them."""
    done = set(unlocked)
    return [Findable(name=entry.name, shown_name=shown.name(entry.name),
                     description=shown.description(entry.name, entry.description),
                     parameters=entry.parameters, unlocked=entry.name in done)
            for entry in offered if entry.deferred(config)]
