"""The agent home: where tools, config, the journal and per-call folders live.

The engine writes only under its home (and the workspace a call is given), so every
path it creates is derived here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

DEFAULT_HOME = "~/.zagent"


class Home:
    """Paths inside one agent home; nothing is created until asked for."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser().resolve()

    @classmethod
    def locate(cls, explicit: str | os.PathLike[str] | None = None) -> Home:
        """``explicit`` (``--home``), else ``$ZAGENT_HOME``, else ``~/.zagent``."""
        return cls(explicit or os.environ.get("ZAGENT_HOME") or DEFAULT_HOME)

    @property
    def tools_dir(self) -> Path:
        return self.root / "tools"

    @property
    def skills_dir(self) -> Path:
        """One folder per skill, each with its ``SKILL.md`` (``zagent_core.tools.skills``)."""
        return self.root / "skills"

    @property
    def config_path(self) -> Path:
        return self.root / "config.json"

    @property
    def journal_path(self) -> Path:
        return self.root / "journal.db"

    def journal_location(self, explicit: str | None = None) -> str:
        """Where the journal is: ``explicit`` (``--journal``), else ``$ZAGENT_JOURNAL``, else
        ``journal.url`` in config.json, else this home's ``journal.db``.

        config.json is read as plain JSON here (a listing should not pay for validating it);
        ``zagent doctor`` is where a malformed one is reported.
        """
        found = explicit or os.environ.get("ZAGENT_JOURNAL")
        if not found and self.config_path.is_file():
            try:
                found = json.loads(self.config_path.read_text(encoding="utf-8"))["journal"]["url"]
            except (OSError, ValueError, KeyError, TypeError):
                found = None
        return str(found) if found else str(self.journal_path)

    @property
    def tmp_dir(self) -> Path:
        """Folders a command needs while it runs (a replay's copy of the workspace), each
        removed when it is done, or by the next such command if its process was killed."""
        return self.root / "tmp"

    def session_dir(self, session_id: str) -> Path:
        return self.root / "sessions" / session_id

    def scratch_dir(self, session_id: str) -> Path:
        return self.session_dir(session_id) / "scratch"

    def call_dir(self, session_id: str, call_id: str) -> Path:
        """Everything one call leaves: ``output/`` (the tool's), ``notify``, ``full_output.txt``."""
        return self.session_dir(session_id) / "calls" / call_id

    def __repr__(self) -> str:
        return f"Home({str(self.root)!r})"
