"""``zagent``: list and run tools, check a home, and read the journal.

This module holds the group and its global options; each command group is a module of
its own (``tools.py``, ``run.py``, ``sessions.py``...), named in :data:`COMMANDS` and
imported only when its command runs. Imports of the engine happen inside commands, so
``zagent --help`` and ``zagent tools list`` do not pay for what they do not use. Exit codes: 0 success, 1 the thing asked
for failed (a tool's result is an error, doctor found problems), 2 a usage error, 3 a
``tools run`` call that waits on a person, 130 stopped by Ctrl-C.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from zagent_cli.context import Context
from zagent_cli.output import terminal_safe
from zagent_cli.stop import exit_stopped, interrupted

#: Every command: its module, the name it has there, and the first sentence of its help (what
#: ``zagent --help`` lists). A command's module is imported when the command is run (or its
#: help asked for), never to list it: ``zagent --help`` and ``zagent tools list`` load one
#: module of commands at most. tests/test_cli.py holds the sentences to the commands' own help.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "answer": ("run", "answer", 'Answer the question SESSION_ID waits on (status "waiting on user") with TEXT ("-": '
                                "read it from stdin), then continue the session as resume does."),
    "approve": ("run", "approve", 'Approve the call SESSION_ID waits on (status "waiting on approval"): run it here, '
                                  "then continue the session as resume does."),
    "audit": ("audit", "audit", "What the tools did: one entry per call, from the journal's tool_calls view, with who "
                                "was asked about it and the answer (the decisions view)."),
    "call": ("call", "call", "Call tool NAME from inside a tool's call: a nested call of that call, journaled with it, "
                             "its result printed as tools run prints it."),
    "chat": ("chat", "chat", "Talk to an agent on this terminal: start a session, or continue SESSION_ID."),
    "compact": ("compact", "compact", "Summarise SESSION's conversation: from now on its model is shown the summary "
                                      "and what follows."),
    "deny": ("run", "deny", 'Deny the call SESSION_ID waits on (status "waiting on approval"): it is not run, and '
                            "its result for the model says so, with the reason."),
    "doctor": ("doctor", "doctor", "Check the home: manifests, config, effective limits and the journal."),
    "journal": ("journal_cmd", "journal_group", "The journal itself: recover a damaged file, copy a journal to "
                                                "another store, vacuum it."),
    "mcp": ("mcp", "mcp_group", "MCP: zagent's journaled tools for any MCP client (needs the mcp extra)."),
    "replay": ("replay", "replay", "Drive a recorded session again and report, step by step, what differs."),
    "resume": ("run", "resume", "Settle SESSION_ID after a crash (cut-off calls, dead or finished tasks), deliver its "
                                'pending wake-ups, and continue, with PROMPT if given ("-": read it from stdin; text '
                                "piped in joins it, or is it)."),
    "run": ("run", "run", 'Run the agent on PROMPT ("-": read it from stdin), headless, printing the conversation as '
                          "it happens."),
    "sessions": ("sessions", "sessions", "Sessions in the journal."),
    "skills": ("skills", "skills", "The home's skills (skills/NAME/SKILL.md), which the model activates with "
                                   "skills_use."),
    "tools": ("tools", "tools", "List the tools of the home and run one as an agent would."),
    "ui": ("ui.command", "ui", "Serve a web console for the home's journal: sessions, their conversations and calls "
                               "live, questions and approvals answered, the audit."),
    "worker": ("worker", "worker", "Drive the sessions that want a driver: wake-ups, messages left with run --detach, "
                                   "turns and tasks a stopped driver left."),
}


class ZagentGroup(click.Group):
    """The top-level group: errors that reach the user are one clean line, shown safely.

    Its commands are :data:`COMMANDS`, each loaded from its module when first asked for.
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            import importlib

            module, name, _ = COMMANDS[cmd_name]
            self.add_command(getattr(importlib.import_module(f"zagent_cli.{module}"), name), cmd_name)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # As click lists them, from each command's first sentence, without loading the commands.
        limit = formatter.width - 6 - max(len(name) for name in COMMANDS)
        rows = [(name, click.Command(name, help=summary).get_short_help_str(limit))
                for name, (_, _, summary) in sorted(COMMANDS.items())]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

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
            from zagent_core.tools.shown import AliasError

            if not isinstance(exc, (JournalError, EventSchemaError, InconsistentJournalError, AliasError)):
                raise
            # The journal went bad under a command (locked too long, corrupt, disk full), or config.json's
            # aliases would mislead the model (no session starts): say so.
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
