"""``zagent ui``: the web console (docs/console.md). Its server and framework are the ``ui``
extra: without them, the command says how to install it."""

from __future__ import annotations

import click

from zagent_cli.context import Context
from zagent_cli.output import WARNING, say


@click.command()
@click.option("--port", type=click.IntRange(0, 65535), default=8631, show_default=True,
              help="The port to serve on (0: a free one, named in the URL printed).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="The address to serve on; other than loopback, anyone who can reach it may try the token.")
@click.pass_obj
def ui(obj: Context, port: int, host: str) -> None:
    """Serve a web console for the home's journal: sessions, their conversations and calls live,
    questions and approvals answered, the audit. Prints its URL, with its access token, first."""
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ModuleNotFoundError as exc:
        from zagent_core.version import install_command

        raise click.ClickException(f"zagent ui needs a web server and framework (uvicorn, starlette), which the ui "
                                   f"extra installs ({exc.name or '?'} is missing): {install_command('ui')}") from None
    import secrets

    from zagent_cli.ui.server import bound, is_loopback, serve

    obj.existing_journal().close()  # no journal: said now, before anything is bound
    try:
        sock = bound(host, port)
    except OSError as exc:
        raise click.UsageError(f"cannot serve on {host}:{port}: {exc.strerror or exc}; give another --port "
                               "(0 picks a free one) or --host") from None
    if not is_loopback(host):
        say(f"warning: the console serves on {host}, not only this machine: anyone who can reach it may try its "
            "token, and HTTP is not encrypted (put it behind TLS, or use --host 127.0.0.1 and an SSH tunnel)",
            err=True, colour=WARNING)
    serve(obj, sock, secrets.token_urlsafe(24))
