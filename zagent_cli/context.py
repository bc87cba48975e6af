"""What the global options chose: the home, the journal and the engine, each made on demand.

Every command module gets this object (``@click.pass_obj``); it imports the engine only when
a command asks for one, so ``zagent --help`` does not pay for it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from zagent_cli.output import terminal_safe

if TYPE_CHECKING:
    from collections.abc import Collection

    from zagent_core import Engine, Home
    from zagent_core.config import Config, LimitsConfig
    from zagent_core.journal.protocol import AdminJournal


def home_problem(root: Path) -> str | None:
    """Why ``root`` cannot be an agent home (a file, or under one), if it cannot."""
    for path in (root, *root.parents):
        if path.exists():
            if path.is_dir():
                return None
            where = "is a file" if path == root else f"cannot be made: {path} is a file"
            return f"the home {root} {where}, not a folder; give a folder with --home or $ZAGENT_HOME"
    return None


class Context:
    """What the global options chose; the home, journal and engine are made on demand."""

    def __init__(self, home_arg: str | None, workspace: str | None, verbosity: int,
                 journal_arg: str | None = None) -> None:
        self.home_arg = home_arg
        self.journal_arg = journal_arg
        self.workspace = workspace
        self.verbosity = verbosity

    def locate_home(self) -> Home:
        """The home, even one that cannot be used (doctor reports why)."""
        from zagent_core.home import Home

        return Home.locate(self.home_arg)

    @property
    def home(self) -> Home:
        home = self.locate_home()
        problem = home_problem(home.root)
        if problem:
            raise click.UsageError(problem)
        return home

    @property
    def journal_location(self) -> str:
        """Where the journal is (``--journal``, ``$ZAGENT_JOURNAL``, config.json, the home's file)."""
        return self.home.journal_location(self.journal_arg)

    def journal_exists(self) -> bool:
        """Whether there is a journal to read: a SQLite file is made by the first session; a
        PostgreSQL database is there once its URL is given."""
        from zagent_core.journal.protocol import JournalError
        from zagent_store.opening import is_postgres, sqlite_path

        location = self.journal_location
        try:
            return is_postgres(location) or sqlite_path(location).exists()
        except JournalError as exc:
            raise click.UsageError(str(exc)) from None

    def existing_journal(self, *, read_only: bool = True) -> AdminJournal:
        """The journal, never created by a mistyped --home; read-only unless told (so reading
        commands work in a home nobody may write to)."""
        if not self.journal_exists():
            from zagent_store.opening import describe

            raise click.UsageError(f"no journal at {describe(self.journal_location)} (no session has run in this "
                                   "home yet; check --home or $ZAGENT_HOME, --journal or $ZAGENT_JOURNAL)")
        return self.journal(read_only=read_only)

    def limits(self) -> LimitsConfig:
        """config.json's ``limits``: what a prompt is bounded by while it is read, before any session opens."""
        return self.config().limits

    def config(self) -> Config:
        """config.json, its bad values replaced by their defaults (``zagent doctor`` reports them)."""
        from zagent_core.config import load_config

        return load_config(self.home.config_path)[0]

    def journal(self, *, read_only: bool = False) -> AdminJournal:
        from zagent_core.journal.protocol import JournalError
        from zagent_store.opening import is_postgres, open_journal

        location = self.journal_location
        try:
            if read_only or is_postgres(location):  # no durability setting to read from config.json
                return open_journal(location, read_only=read_only)
            from zagent_core.config import load_config

            config, _ = load_config(self.home.config_path)
            return open_journal(location, synchronous=config.journal.synchronous)
        except (JournalError, OSError) as exc:
            raise click.ClickException(str(exc)) from None

    def engine(self, journal: AdminJournal, *, mcp_servers: Collection[str] | None = None) -> Engine:
        """The engine, with its logs set up (only commands that run tools pay for them);
        ``mcp_servers``: the MCP servers it may start (default: all of config.json's)."""
        from zagent_core.drive.engine import open_engine
        from zagent_core.drive.errors import WorkspaceError
        from zagent_core.logs import configure

        configure(self.verbosity)
        _engine_logs_shown(self.verbosity)
        command = click.get_current_context().command_path.partition(" ")[2]
        try:
            engine = open_engine(self.home, journal, workspace=self.workspace, command=command,
                                 mcp_servers=mcp_servers)
        except WorkspaceError as exc:
            raise click.UsageError(str(exc)) from None
        click.get_current_context().call_on_close(engine.close)  # the MCP servers it started stop with the command
        return engine


def _engine_logs_shown(verbosity: int) -> None:
    """Engine log lines as the terminal gets them: control characters shown (a log may quote
    what a tool wrote), and at the default verbosity an error is one line, what failed and
    why; -v adds the traceback (a full disk would otherwise print several before the error)."""
    import logging

    def shown(record: logging.LogRecord) -> bool:
        text = record.getMessage()
        event, sep, trace = text.partition("\nTraceback (most recent call last):")
        if sep and verbosity == 0:
            lines = [line for line in trace.splitlines() if line.strip()]
            text = f"{event.rstrip()}: {lines[-1] if lines else '?'} (-v shows the traceback)"
        record.msg, record.args = terminal_safe(text), ()
        return True

    for handler in logging.getLogger().handlers:
        handler.addFilter(shown)
