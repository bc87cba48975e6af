"""zagent's domain: tool manifests, validation, the runner, events, projections and the engine.

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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zagent_core.config import Config, load_config
    from zagent_core.engine import Engine, Session
    from zagent_core.home import Home
    from zagent_core.journal import ConcurrencyError, Journal, SessionSummary, StoredEvent
    from zagent_core.manifest import Manifest, Tool, ToolSet, load_tools
    from zagent_core.problems import Problem
    from zagent_core.results import ToolResult
    from zagent_core.state import CallView, SessionState, apply, rebuild

# Where each public name lives. Imported on first use, so a command that only lists
# tools does not pay for the runner, the journal or the event models.
_EXPORTS = {
    "Config": "config", "load_config": "config",
    "Engine": "engine", "Session": "engine",
    "Home": "home",
    "ConcurrencyError": "journal", "Journal": "journal", "SessionSummary": "journal", "StoredEvent": "journal",
    "Manifest": "manifest", "Tool": "manifest", "ToolSet": "manifest", "load_tools": "manifest",
    "Problem": "problems",
    "ToolResult": "results",
    "CallView": "state", "SessionState": "state", "apply": "state", "rebuild": "state",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'zagent_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"zagent_core.{module}"), name)
    globals()[name] = value
    return value
