"""``zagent``: list and run tools, check a home, and read the journal.

This module holds the group and its global options; each command group is a module of
its own (``tools.py``, ``run.py``, ``sessions.py``...), added to the group here. Imports
of the engine happen inside commands, so ``zagent --help`` and ``zagent tools list`` do
not pay for what they do not use. Exit codes: 0 success, 1 the thing asked
for failed (a tool's result is an error, doctor found problems), 2 a usage error, 3 a
``tools run`` call that waits on a person, 130 stopped by Ctrl-C.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from zagent_cli.audit import audit
from zagent_cli.chat import chat
from zagent_cli.compact import compact
from zagent_cli.context import Context
from zagent_cli.doctor import doctor
from zagent_cli.journal_cmd import journal_group
from zagent_cli.mcp import mcp_group
from zagent_cli.output import terminal_safe
from zagent_cli.replay import replay
from zagent_cli.run import answer, approve, deny, resume, run
from zagent_cli.sessions import sessions
from zagent_cli.stop import exit_stopped, interrupted
from zagent_cli.tools import tools
from zagent_cli.worker import worker


class ZagentGroup(click.Group):
    """The top-level group: errors that reach the user are one clean line, shown safely."""

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except KeyboardInterrupt:  # reading the options: click would say "Aborted!" and exit 1
            exit_stopped("[stopped]")

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            # Ctrl-C before a command got to anything it journals (those say what they stopped):
            # the shell's convention, exit 130, rather than click's "Aborted!" and 1.
            exit_stopped("[stopped]")
        except click.ClickException as exc:
            # Messages quote tool names, session ids, export files: nothing may drive the terminal.
            # (click declares the attribute Final; the exception is ours to amend before it is shown.)
            setattr(exc, "message", terminal_safe(exc.message))  # noqa: B010
            raise
        except Exception as exc:
            if interrupted(exc):
                exit_stopped("[stopped]")
            # Imported only now: --help and tools list do not pay for the journal's modules.
            from zagent_core.journal.events import EventSchemaError
            from zagent_core.journal.fold import InconsistentJournalError
            from zagent_core.journal.protocol import JournalError

            if not isinstance(exc, (JournalError, EventSchemaError, InconsistentJournalError)):
                raise
            # The journal went bad under a command (locked too long, corrupt, disk full): say so.
            raise click.ClickException(terminal_safe(str(exc))) from None


@click.group(cls=ZagentGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--home", metavar="DIR", help="Agent home (default: $ZAGENT_HOME, else ~/.zagent).")
@click.option("--journal", "journal_url", metavar="URL",
              help="The journal: sqlite:///PATH or postgresql://... (default: $ZAGENT_JOURNAL, else journal.url "
                   "in config.json, else the home's journal.db).")
@click.option("--workspace", metavar="DIR", help="Folder tools work in (default: the current folder).")
@click.option("-v", "--verbose", count=True, help="Log the engine's own steps to stderr (-vv: debug).")
@click.version_option(package_name="zagent")
@click.pass_context
def cli(ctx: click.Context, home: str | None, journal_url: str | None, workspace: str | None, verbose: int) -> None:
    """zagent runs an AI agent's tools and journals every session in SQLite (or PostgreSQL)."""
    ctx.obj = Context(home_arg=home, workspace=workspace, verbosity=verbose, journal_arg=journal_url)


# Each command group is a module of its own; none imports the engine before its command runs.
for command in (tools, run, chat, resume, answer, approve, deny, compact, worker, doctor, replay, audit, mcp_group,
                journal_group, sessions):
    cli.add_command(command)


#: Said, in one line, where zagent cannot run: the journal's locks need ``fcntl``, stopping a
#: tool's whole process tree ``os.killpg``, knowing a process again ``/proc``; native Windows has none.
NOT_ON_WINDOWS = ("zagent runs on Linux and macOS, not on Windows: it needs fcntl, os.killpg and /proc, which Windows "
                  "lacks; run it inside WSL (https://learn.microsoft.com/windows/wsl/install)")


def main() -> None:
    # Before anything runs: importing this module loads no engine, so the line is said where the
    # first command would otherwise die with a traceback about a missing module.
    if sys.platform == "win32":
        sys.exit(NOT_ON_WINDOWS)
    cli(prog_name="zagent")


if __name__ == "__main__":
    main()
