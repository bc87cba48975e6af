"""``zagent call``: a tool's program calls another tool of its session, nested in its own call."""

from __future__ import annotations

import sys

import click

from zagent_cli.inputs import arguments_object
from zagent_cli.output import emit_json, say
from zagent_cli.params import TEXT


@click.command("call")
@click.argument("name", type=TEXT)
@click.option("--args", "args_text", type=TEXT, metavar="JSON",
              help="The arguments, as one JSON object; @FILE reads it from FILE, @- from stdin "
                   "(default: stdin when a pipe or file is on it, else {}).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: the output and is_error.")
def call(name: str, args_text: str | None, as_json: bool) -> None:
    """Call tool NAME from inside a tool's call: a nested call of that call, journaled with it, its result printed as tools run prints it.

    Works only in a process of a running call (it reaches the session through
    ZAGENT_CALL_SOCKET). Exit 0 when the nested call succeeded, 1 when its result is an
    error (a refusal too: unknown tool, invalid arguments, too deep), 2 outside a call.
    """
    from zagent_core.tools import nested

    arguments = arguments_object(args_text)
    try:
        reply = nested.call(name, arguments)
    except nested.NotInACall as exc:
        raise click.UsageError(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(f"zagent call: the session could not be reached ({exc}); is the call that "
                                   "runs this program still running?") from None
    if as_json:
        emit_json(reply.model_dump())
    else:
        say(reply.output)
    sys.exit(1 if reply.is_error else 0)
