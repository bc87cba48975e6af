"""What commands' arguments are made of: storable text, moments in time, and shell completion of tool
names and session ids."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from zagent_cli.context import Context, home_problem
from zagent_cli.output import head, plural

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

    from zagent_core import Home
    from zagent_core.journal.protocol import SessionIndex


class StorableText(click.ParamType):
    """A text argument, made storable: an argv byte like ``\\xff`` reaches Python as a lone
    surrogate, which SQLite and JSON cannot encode, so it becomes U+FFFD as other bad bytes do.
    (Paths stay as given: the OS needs their exact bytes.)"""

    name = "text"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from zagent_core.tools.text import storable

        return storable(str(value))


TEXT = StorableText()


class SessionName(StorableText):
    """A session id as a person gives it: the whole id, or its start or its end when no other
    session's id has it (see :mod:`zagent_core.journal.naming`), resolved in the journal of
    the global options; one that names no session, or several, is a usage error."""

    name = "session"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = super().convert(value, param, ctx)
        obj = ctx.find_object(Context) if ctx is not None else None
        if obj is None or ctx is None or ctx.resilient_parsing:  # completing a command line: no journal is read
            return text
        return session_named(obj, text)


SESSION = SessionName()


def session_named(obj: Context, given: str) -> str:
    """The id of the session ``given`` names in the journal (:class:`SessionName`); ``given`` as
    it is when there is no journal yet, for the command to say so."""
    if not obj.journal_exists():
        return given
    with obj.existing_journal() as journal:
        return named_in(journal, given)


def named_in(journal: SessionIndex, given: str) -> str:
    """The id of the session ``given`` names in ``journal``; none or several: a usage error."""
    from zagent_core.journal.naming import SessionNameError, resolve_session

    try:
        return resolve_session(journal, given)
    except SessionNameError as exc:
        raise click.UsageError(str(exc)) from None


_SPANS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def moment(text: str, option: str) -> datetime:
    """``2026-11-30``, ``2026-11-30T05:00`` (UTC unless it has an offset), or a span back from now:
    ``30m``, ``2h``, ``7d``. Anything else is a usage error naming ``option`` and saying what it takes."""
    if text[:-1].isdigit() and text[-1:] in _SPANS:
        try:
            return datetime.now(timezone.utc) - timedelta(**{_SPANS[text[-1]]: int(text[:-1])})
        except OverflowError:
            raise click.BadParameter(f"{text} reaches back before the year 1", param_hint=option) from None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        # A date's own mistake (a month 13) is said; for text that is no date at all, the forms taken say it.
        wrong = "" if str(exc).startswith("Invalid isoformat") else f"{text}: {exc}; "
        raise click.BadParameter(f"{wrong}use a date or time (2026-11-30, 2026-11-30T05:00) or a span: 30m, 2h, 7d",
                                 param_hint=option) from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


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
