"""``zagent audit``: what the tools did, a line per call, from the journal's views."""

from __future__ import annotations

import click

from zagent_cli.context import Context
from zagent_cli.output import emit_json, say, utc_ms
from zagent_cli.params import SESSION, TEXT, complete_sessions, complete_tools, moment


@click.command()
@click.option("--session", "session_id", type=SESSION, metavar="ID", shell_complete=complete_sessions,
              help="Only this session's calls.")
@click.option("--tool", type=TEXT, metavar="NAME", shell_complete=complete_tools, help="Only calls of this tool.")
@click.option("--since", type=TEXT, metavar="TIME", help="Only calls since TIME: a date/time (UTC) or a span back (30m, 2h, 7d).")
@click.option("--errors", is_flag=True, help="Only calls that failed, were refused or were cut off.")
@click.option("--asked", is_flag=True, help="Only calls a person was asked about (ask_user, approvals).")
@click.option("--outcome", type=click.Choice(["success", "failure", "partial"]),
              help="Only calls whose tool reported this outcome with its result.")
@click.option("--descendants", is_flag=True,
              help="With --session: also the calls of the sub-agents it spawned, and of theirs.")
@click.option("--slowest", metavar="N", type=click.IntRange(min=1), help="The N slowest calls, slowest first.")
@click.option("--limit", metavar="N", type=click.IntRange(min=0), default=100, show_default=True,
              help="At most the N most recent calls (0: all).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_obj
def audit(obj: Context, session_id: str | None, tool: str | None, since: str | None, errors: bool, asked: bool,
          outcome: str | None, descendants: bool, slowest: int | None, limit: int, as_json: bool) -> None:
    """What the tools did: one entry per call, from the journal's tool_calls view, with who
    was asked about it and the answer (the decisions view). With --session, also what the
    session cost (tokens and dollars, by config.json's models), per turn and with its sub-agents."""
    if descendants and session_id is None:
        raise click.UsageError("--descendants adds the calls of a session's sub-agents: name the session with "
                               "--session ID")
    with obj.existing_journal() as journal:
        rows = journal.audit(session=session_id, tool=tool, since=utc_ms(moment(since, "--since")) if since else None,
                             errors=errors, asked=asked, slowest=slowest, limit=limit or None, descendants=descendants,
                             outcome=outcome)
        costs, config = None, obj.config()
        if session_id is not None:
            from zagent_core.history.costs import session_costs

            costs = session_costs(journal, session_id, config)
    if as_json:
        emit_json({"calls": rows} | ({"costs": costs.to_dict() if costs else None} if session_id else {}))
        return
    from zagent_cli.show import cost_facts, print_audit, shown_costs

    print_audit(rows)
    shown = shown_costs(config, costs)
    for name, value in cost_facts(shown) if shown else []:
        say(f"{name}: {value}")
