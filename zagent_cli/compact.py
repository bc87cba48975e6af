"""``zagent compact``: summarise a session's conversation now, as the agent does when it fills up."""

from __future__ import annotations

import click

from zagent_cli.context import Context
from zagent_cli.output import OK, say
from zagent_cli.params import SESSION, TEXT, complete_sessions
from zagent_cli.refusals import refusals_said


@click.command()
@click.argument("session_id", type=SESSION, shell_complete=complete_sessions)
@click.option("--model", "model_spec", metavar="SPEC",
              help="The model that writes the summary (default: the session's own).")
@click.option("--instructions", type=TEXT, metavar="TEXT",
              help="What the summary must keep, beyond what zagent asks for (a focus, facts not to lose).")
@click.pass_obj
def compact(obj: Context, session_id: str, model_spec: str | None, instructions: str | None) -> None:
    """Summarise SESSION's conversation: from now on its model is shown the summary and what follows.

    Nothing is deleted: `zagent sessions show` still shows every event, and marks the spot.
    """
    from zagent_core.drive.compacting import compact as compact_session

    with obj.journal() as journal, refusals_said():
        event = compact_session(obj.engine(journal), session_id, model_spec=model_spec, instructions=instructions)
    say(f"[compacted session {session_id}: about {event.tokens_before:,} tokens -> {event.tokens_after:,}, "
        f"summary by {event.model}]", err=True, colour=OK)
    say(event.summary)
