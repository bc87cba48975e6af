"""What commands' arguments are made of: storable text, and shell completion of tool names and session ids."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from zagent_cli.context import home_problem
from zagent_cli.output import head, plural

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

    from zagent_core import Home


class StorableText(click.ParamType):
    """A text argument, made storable: an argv byte like ``\\xff`` reaches Python as a lone
    surrogate, which SQLite and JSON cannot encode, so it becomes U+FFFD as other bad bytes do.
    (Paths stay as given: the OS needs their exact bytes.)"""

    name = "text"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from zagent_core.tools.text import storable

        return storable(str(value))


TEXT = StorableText()


def _completion_home(ctx: click.Context) -> Home:
    """The home as typed so far on the command line being completed (``--home``, else the default)."""
    from zagent_core.home import Home

    return Home.locate(ctx.find_root().params.get("home"))


def complete_tools(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Shell completion of a tool name: the home's loaded tools and the built-in terminal."""
    from click.shell_completion import CompletionItem

    try:
        from zagent_core.config import load_config
        from zagent_core.drive.offers import home_tools

        home = _completion_home(ctx)
        if home_problem(home.root):
            return []
        toolset, builtins, _ = home_tools(home, load_config(home.config_path)[0])
        described = {name: tool.description for name, tool in toolset.tools.items()}
        described.update((name, f"built-in: {builtin.description}") for name, builtin in builtins.items())
    except Exception:  # noqa: BLE001 - completing offers nothing rather than print a traceback into the shell
        return []
    return [CompletionItem(name, help=head(text, 60)) for name, text in sorted(described.items())
            if name.startswith(incomplete)]


def complete_sessions(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Shell completion of a session id: the journal's most recently active sessions."""
    from click.shell_completion import CompletionItem

    try:
        from zagent_store.opening import is_postgres, open_journal

        location = _completion_home(ctx).journal_location(ctx.find_root().params.get("journal_url"))
        if not is_postgres(location) and not Path(location.removeprefix("sqlite:///")).is_file():
            return []
        with open_journal(location, read_only=True) as journal:
            summaries = journal.sessions(_COMPLETED_SESSIONS)
    except Exception:  # noqa: BLE001 - as for tools
        return []
    return [CompletionItem(s.session_id, help=f"last active {s.last_at:%Y-%m-%d %H:%M}Z, {plural(s.calls, 'call')}")
            for s in summaries if s.session_id.startswith(incomplete)]


#: How many session ids completion offers, the most recently active first.
_COMPLETED_SESSIONS = 200
