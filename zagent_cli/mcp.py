"""``zagent mcp``: the home's journaled tools for any MCP client (the server is mcp_serve.py)."""

from __future__ import annotations

import click

from zagent_cli.context import Context


@click.group("mcp")
def mcp_group() -> None:
    """MCP: zagent's journaled tools for any MCP client (needs the mcp extra)."""


@mcp_group.command("serve")
@click.option("--http", "http", metavar="HOST:PORT",
              help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (a loopback address, unless "
                   "--allow-remote).")
@click.option("--allow-remote", is_flag=True, help="Let --http listen on an address other machines can reach.")
@click.pass_obj
def mcp_serve(obj: Context, http: str | None, allow_remote: bool) -> None:
    """Serve the home's tools to an MCP client.

    The home's tools and the built-ins, on stdio (default) or streamable HTTP. Each
    connection is a session (origin mcp), every call journaled as zagent run journals it;
    the session ends when the connection closes, and one cut off resumes with zagent resume.
    """
    try:
        from zagent_cli.mcp_serve import serve
    except ModuleNotFoundError as exc:
        missing = exc.name or "?"
        if missing.partition(".")[0] in ("zagent_cli", "zagent_core", "zagent_store"):
            raise  # ours: a bug, not a missing extra
        from zagent_core.version import install_command

        # Any module the SDK brings (mcp, mcp_types, anyio, starlette...) missing: the extra is.
        raise click.ClickException(f"zagent mcp serve needs the MCP SDK, which the mcp extra installs ({missing} "
                                   f"is missing): {install_command('mcp')}") from None
    serve(obj, http, allow_remote)
