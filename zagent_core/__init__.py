"""zagent's domain, in wings: the journal, tools, built-ins, sessions, the agent, history, drivers.

Typical use (the CLI does the same)::

    from zagent_core import Engine, Home
    from zagent_store import SQLiteJournal

    home = Home.locate()                       # --home, $ZAGENT_HOME or ~/.zagent
    with SQLiteJournal(home.journal_path) as journal:
        engine = Engine(home, journal, workspace=".")
        with engine.start_session(origin="script") as session:
            result = session.call("word_count", {"text": "the cat and the hat"})
            print(result.output)
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from importlib.abc import Loader

    from zagent_core.agent.engine import Engine as Engine
    from zagent_core.config import Config as Config, load_config as load_config
    from zagent_core.home import Home as Home
    from zagent_core.journal.fold import (
        apply as apply,
        rebuild as rebuild,
    )
    from zagent_core.journal.protocol import (
        ConcurrencyError as ConcurrencyError,
        Journal as Journal,
        SessionSummary as SessionSummary,
        StoredEvent as StoredEvent,
    )
    from zagent_core.journal.views import (
        CallView as CallView,
        SessionState as SessionState,
    )
    from zagent_core.problems import Problem as Problem
    from zagent_core.session.engine import Session as Session
    from zagent_core.tools.manifest import (
        Manifest as Manifest,
        Tool as Tool,
        ToolSet as ToolSet,
        load_tools as load_tools,
    )
    from zagent_core.tools.results import ToolResult as ToolResult

__all__ = [
    "CallView", "ConcurrencyError", "Config", "Engine", "Home", "Journal", "Manifest", "Problem", "Session",
    "SessionState", "SessionSummary", "StoredEvent", "Tool", "ToolResult", "ToolSet", "apply", "load_config",
    "load_tools", "rebuild",
]

# Where each public name lives. Imported on first use, so a command that only lists
# tools does not pay for the runner, the journal or the event models.
_EXPORTS = {
    "Config": "zagent_core.config", "load_config": "zagent_core.config",
    "Engine": "zagent_core.agent.engine", "Session": "zagent_core.session.engine",
    "Home": "zagent_core.home",
    "ConcurrencyError": "zagent_core.journal.protocol", "Journal": "zagent_core.journal.protocol",
    "SessionSummary": "zagent_core.journal.protocol", "StoredEvent": "zagent_core.journal.protocol",
    "Manifest": "zagent_core.tools.manifest", "Tool": "zagent_core.tools.manifest", "ToolSet": "zagent_core.tools.manifest",
    "load_tools": "zagent_core.tools.manifest",
    "Problem": "zagent_core.problems",
    "ToolResult": "zagent_core.tools.results",
    "CallView": "zagent_core.journal.views", "SessionState": "zagent_core.journal.views",
    "apply": "zagent_core.journal.fold", "rebuild": "zagent_core.journal.fold",
}

#: Module paths that code outside the project imports (benchmarks, users' scripts), kept
#: where they were before the wings: each names the module's home now, imported on first use.
MODULE_PATHS = {"zagent_core.events": "zagent_core.journal.events"}


def __getattr__(name: str) -> Any:
    if f"{__name__}.{name}" in MODULE_PATHS:
        return importlib.import_module(MODULE_PATHS[f"{__name__}.{name}"])
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'zagent_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


class _KeptPaths:
    """Imports a kept path (``import zagent_core.events``) as the very module it names now.

    A finder and loader by the import system's protocol, not by subclassing importlib.abc:
    importing that costs ~13 ms at every start.
    """

    def find_spec(self, fullname: str, path: Any = None, target: ModuleType | None = None
                  ) -> importlib.machinery.ModuleSpec | None:
        return importlib.machinery.ModuleSpec(fullname, cast("Loader", self)) if fullname in MODULE_PATHS else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(MODULE_PATHS[spec.name])

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module was imported under its own name."""


sys.meta_path.append(_KeptPaths())
