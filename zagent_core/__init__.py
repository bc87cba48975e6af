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

from zagent_core.config import Config, load_config
from zagent_core.engine import Engine, Session
from zagent_core.home import Home
from zagent_core.journal import ConcurrencyError, Journal, SessionSummary, StoredEvent
from zagent_core.manifest import Manifest, Tool, ToolSet, load_tools
from zagent_core.problems import Problem
from zagent_core.results import ToolResult
from zagent_core.state import CallView, SessionState, apply, rebuild

__all__ = [
    "CallView", "ConcurrencyError", "Config", "Engine", "Home", "Journal", "Manifest", "Problem", "Session",
    "SessionState", "SessionSummary", "StoredEvent", "Tool", "ToolResult", "ToolSet", "apply", "load_config",
    "load_tools", "rebuild",
]
