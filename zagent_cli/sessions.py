"""``zagent sessions``: list, show, export, trace, import, fork and prune the journal's sessions."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from zagent_cli.context import Context
from zagent_cli.output import JSON_ESCAPES, OK, WARNING, emit_json, plural, say, utc_ms
from zagent_cli.params import SESSION, TEXT, complete_sessions, moment

if TYPE_CHECKING:
    from zagent_cli.session_view import Part
    from zagent_core.config import Config
    from zagent_core.history.costs import SessionCosts
    from zagent_core.history.retention import PruneReport
    from zagent_core.journal.protocol import AdminJournal
    from zagent_core.journal.views import SessionState


@click.group()
def sessions() -> None:
    """Sessions in the journal."""


@sessions.command("list")
@click.option("--limit", metavar="N", type=click.IntRange(min=0), default=50, show_default=True,
              help="The N most recently active sessions (0: all).")
@click.option("--all", "show_all", is_flag=True,
              help="Also the sub-agents' sessions, each under the session that spawned it.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_obj
def sessions_list(obj: Context, limit: int, show_all: bool, as_json: bool) -> None:
    """Top-level sessions, most recently active first, with their status (--all: sub-agents too)."""
    if not obj.journal_exists():  # nothing ran in this home yet: no sessions, which is no error
        if as_json:
            emit_json({"sessions": []})
        else:
            say("no sessions yet")
        return
    with obj.existing_journal() as journal:
        from zagent_core.session.status import first_prompt, listed_status

        summaries = journal.sessions(limit or None, top_level=not show_all)
        statuses = {s.session_id: listed_status(journal, s) for s in summaries}
        prompts = {s.session_id: first_prompt(journal, s.session_id) for s in summaries}
    if as_json:
        emit_json({"sessions": [s.model_dump() | {"status": statuses[s.session_id],
                                                  "first_prompt": prompts[s.session_id]}
                                 for s in summaries]})
        return
    if not summaries:
        say("no sessions yet")
        return
    from zagent_cli.show import print_sessions

    print_sessions(summaries, statuses, prompts)


@sessions.command("export")
@click.argument("session_id", type=SESSION, shell_complete=complete_sessions)
@click.option("--format", "fmt", type=click.Choice(["jsonl"]), default="jsonl", show_default=True,
              help="One event per line.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), help="Write here, not to stdout.")
@click.pass_obj
def sessions_export(obj: Context, session_id: str, fmt: str, output: str | None) -> None:
    """Write SESSION_ID's events as JSON Lines: a replay fixture, an audit record."""
    from zagent_core.history.exports import export_lines

    with obj.existing_journal() as journal:
        lines = list(export_lines(journal.read(session_id)))
    if not lines:
        raise click.UsageError(f'no session "{session_id}" in the journal; `zagent sessions list` shows them')
    text = "\n".join(lines) + "\n"
    if output:
        Path(output).write_text(text, encoding="utf-8")
        say(f"{len(lines)} events written to {output}", err=True)
    else:
        # JSON Lines: C0 is escaped already; DEL and C1 get the \\u form (the same string).
        click.echo(text.translate(JSON_ESCAPES), nl=False)


@sessions.command("trace")
@click.argument("session_id", type=SESSION, shell_complete=complete_sessions)
@click.option("--endpoint", metavar="URL", help="The OTLP/HTTP collector (http://127.0.0.1:4318); default: "
              "config.json's telemetry.otlp_endpoint, else OTEL_EXPORTER_OTLP_ENDPOINT.")
@click.pass_obj
def sessions_trace(obj: Context, session_id: str, endpoint: str | None) -> None:
    """Send SESSION_ID's trace, its sub-agents' too, to an OpenTelemetry collector, with the
    journaled times; the ids are the ones a live export gave, so sending it again changes nothing."""
    from zagent_core.config import load_config
    from zagent_core.history.spans import session_spans, trace_id_of, trace_root
    from zagent_core.history.telemetry import (
        ExportFailedError,
        TelemetryUnavailableError,
        export_spans,
        otlp_exporter,
        sdk_disabled,
        shown_url,
        traces_url,
    )

    if endpoint is not None and not endpoint.startswith(("http://", "https://")):
        raise click.BadParameter("give an http:// or https:// URL, e.g. http://127.0.0.1:4318",
                                 param_hint="--endpoint")
    if sdk_disabled():  # the specification's "no export at all": said, as a person asked for one
        raise click.UsageError("OTEL_SDK_DISABLED=true turns OpenTelemetry off, so no trace is sent; unset it "
                               "to send one")
    telemetry = load_config(obj.home.config_path)[0].telemetry
    url = traces_url(telemetry, endpoint)
    if url is None:
        raise click.UsageError("no collector to send the trace to: give --endpoint URL, or set telemetry.otlp_endpoint "
                               "in config.json or OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)")
    with obj.existing_journal() as journal:
        if journal.head(session_id) == 0:
            raise click.UsageError(f'no session "{session_id}" in the journal; `zagent sessions list` shows them')
        try:
            sent = export_spans(session_spans(journal, session_id, capture_content=telemetry.capture_content),
                                otlp_exporter(url))
        except (TelemetryUnavailableError, ExportFailedError) as exc:
            raise click.ClickException(str(exc)) from None
        trace = f"{trace_id_of(trace_root(journal, session_id)):032x}"
    say(f"{plural(sent, 'span')} of session {session_id} sent to {shown_url(url)}: trace {trace}")


@sessions.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--as", "as_id", type=TEXT, metavar="ID", help="Store it under this session id.")
@click.pass_obj
def sessions_import(obj: Context, file: str, as_id: str | None) -> None:
    """Add the session of an export FILE to this home's journal."""
    from zagent_core.history.exports import ExportError, import_file
    from zagent_core.journal.protocol import ConcurrencyError

    with obj.journal() as journal:
        try:
            session_id = import_file(journal, Path(file), home=obj.home, as_id=as_id)
        except ExportError as exc:
            raise click.UsageError(str(exc).replace("the session id", "--as")) from None
        except UnicodeDecodeError as exc:
            raise click.UsageError(f"{file} is not UTF-8 text, as an export is: {exc}") from None
        except ConcurrencyError as exc:
            raise click.UsageError(f"the journal already has a session {exc.session_id}; "
                                   "import it under another id with --as") from None
    say(session_id)


@sessions.command("fork")
@click.argument("session_id", type=SESSION, shell_complete=complete_sessions)
@click.option("--at", "at_seq", type=int, required=True, metavar="SEQ",
              help="Copy the events up to this global position (the #N of sessions show --events).")
@click.pass_obj
def sessions_fork(obj: Context, session_id: str, at_seq: int) -> None:
    """A new session from SESSION_ID's first events; resume it to take another path."""
    from zagent_core.history.exports import fork_session
    from zagent_core.ids import new_session_id

    with obj.existing_journal(read_only=False) as journal:
        try:
            say(fork_session(journal, session_id, at_seq, new_session_id()))
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None


@sessions.command("prune")
@click.option("--ended-before", "ended_before", metavar="TIME", required=True,
              help="Sessions that ended before TIME: a date/time (UTC) or a span back (30d, 12h).")
@click.option("--keep-exports", "keep_exports", metavar="DIR", type=click.Path(file_okay=False, path_type=Path),
              help="Export each session to DIR/ID.jsonl first, and check the file, before deleting it.")
@click.option("--dry-run", is_flag=True, help="Say what would go, and delete nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
@click.pass_obj
def sessions_prune(obj: Context, ended_before: str, keep_exports: Path | None, dry_run: bool, as_json: bool) -> None:
    """Take sessions that ended before TIME out of the journal, each with its sub-agents.

    Sessions that have not ended, and trees a live process drives or whose sub-agents still
    wait, stay and are listed as skipped. Their folders under the home go with them. Then
    `zagent journal vacuum` gives the space back.
    """
    from zagent_core.history.retention import prune_sessions

    cutoff = moment(ended_before, "--ended-before")
    if keep_exports is not None and not dry_run:
        try:
            keep_exports.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise click.BadParameter(f"{keep_exports} cannot be made: {exc.strerror}",
                                     param_hint="--keep-exports") from None
    with obj.existing_journal(read_only=dry_run) as journal:
        report = prune_sessions(journal, cutoff, home=obj.home, keep_exports=keep_exports, dry_run=dry_run)
    if as_json:
        emit_json(report.to_dict())
    else:
        _print_prune(report)
    sys.exit(1 if report.failed else 0)


def _print_prune(report: PruneReport) -> None:
    """A line per session pruned (or that would be) and per tree skipped, then the total."""
    verb = "would prune" if report.dry_run else "pruned"
    for session in report.pruned:
        below = f" (sub-agent of {session.parent_session_id})" if session.parent_session_id else ""
        kept = f", exported to {session.export}" if session.export else ""
        say(f"{verb} {session.session_id}{below}: {plural(session.events, 'event')}, last at "
            f"{utc_ms(session.last_at)}{kept}")
    for skipped in report.skipped:
        say(f"skipped {skipped.session_id}: {skipped.reason}", colour=WARNING if skipped.failed else None)
    for problem in report.problems:
        say(f"note: {problem}", colour=WARNING)
    say(f"{verb} {plural(report.sessions, 'session')} ({plural(report.events, 'event')}) that ended before "
        f"{utc_ms(report.ended_before)}" + ("; nothing was deleted (--dry-run)" if report.dry_run else ""),
        colour=None if report.dry_run else OK)


@sessions.command("show")
@click.argument("session_id", type=SESSION, required=False, shell_complete=complete_sessions)
@click.option("--json", "as_json", is_flag=True, help="Print the session state as one JSON object.")
@click.option("--events", "show_events", is_flag=True, help="Also print the session's events as stored.")
@click.option("--format", "fmt", type=click.Choice(["text", "md"]), default="text", show_default=True,
              help="text for a terminal, md for Markdown.")
@click.option("--last", type=click.IntRange(min=1), metavar="N",
              help="Only the last N turns (on a terminal, the last 3 of a session longer than a screen).")
@click.option("--all", "show_all", is_flag=True, help="The whole conversation, on a terminal too.")
@click.option("--no-pager", is_flag=True, help="On a terminal, print straight to it, not through $ZAGENT_PAGER, "
                                               "$PAGER or less.")
@click.option("--tree", is_flag=True, help="The session and its sub-agents, at any depth: a line each.")
@click.pass_obj
def sessions_show(obj: Context, session_id: str | None, as_json: bool, show_events: bool, fmt: str,
                  last: int | None, show_all: bool, no_pager: bool, tree: bool) -> None:
    """The conversation of SESSION_ID, in order (default: the most recent top-level session)."""
    if as_json and fmt != "text":
        raise click.UsageError("give --json or --format, not both")
    if tree and (show_events or fmt != "text"):
        raise click.UsageError("--tree prints a line per session: give it alone, or with --json")
    if (last is not None or show_all) and (as_json or tree):
        raise click.UsageError("--last and --all choose the turns printed: not with --json or --tree")
    if last is not None and show_all:
        raise click.UsageError("give --last N or --all, not both")

    with obj.existing_journal() as journal:
        if session_id is None:
            summaries = journal.sessions(1, top_level=True)
            if not summaries:
                raise click.UsageError("the journal has no sessions yet")
            session_id = summaries[0].session_id
        config = obj.config()
        if tree:
            return _show_tree(journal, session_id, as_json, config)
        from zagent_core.history.costs import session_costs

        costs = session_costs(journal, session_id, config)
        if as_json:
            return _show_json(journal, session_id, show_events, costs)
        from zagent_cli.session_view import print_session
        from zagent_cli.show import shown_costs
        from zagent_core.journal.snapshots import open_state
        from zagent_core.session.status import session_status

        state = open_state(journal, session_id)  # the header's: not the fold of every event
        if state.version == 0:
            raise click.UsageError(f'no session "{session_id}" in the journal; `zagent sessions list` shows them')
        print_session(journal, state, session_status(journal, session_id, state), fmt=fmt, show_events=show_events,
                      part=_part_shown(journal, state, last, show_all), page=not no_pager,
                      costs=shown_costs(config, costs))


def _part_shown(journal: AdminJournal, state: SessionState, last: int | None, show_all: bool) -> Part:
    """The turns ``sessions show`` prints: all of them, the last N (``--last``), or on a
    terminal the last few of a session longer than a screen."""
    from zagent_cli.pager import screen_lines
    from zagent_cli.session_view import DEFAULT_LAST, Part, last_turns

    if last is None:
        if show_all or not sys.stdout.isatty() or state.version <= screen_lines():
            return Part()
        last = DEFAULT_LAST
    return last_turns(journal, state, last)


def _show_json(journal: AdminJournal, session_id: str, show_events: bool, costs: SessionCosts | None) -> None:
    """``sessions show --json``: the state folded with every call, its costs, and the events if asked."""
    from zagent_core import rebuild
    from zagent_core.session.status import session_status

    events = list(journal.read(session_id))
    state = rebuild(events, history=True)
    if state.version == 0:
        raise click.UsageError(f'no session "{session_id}" in the journal; `zagent sessions list` shows them')
    emit_json(state.model_dump() | {"status_detail": session_status(journal, session_id, state),
                                    "costs": costs.to_dict() if costs else None}
              | ({"events": [e.to_dict() | {"at": e.at} for e in events]} if show_events else {}))


def _show_tree(journal: AdminJournal, session_id: str, as_json: bool, config: Config) -> None:
    """``sessions show --tree``: the session and the sub-agents below it, and what each subtree cost."""
    from zagent_core.history.costs import tree_costs
    from zagent_core.history.trees import session_tree

    root = session_tree(journal, session_id)
    if root is None:
        raise click.UsageError(f'no session "{session_id}" in the journal; `zagent sessions list` shows them')
    costs = tree_costs(journal, root, config)
    if as_json:
        emit_json({"tree": root.to_dict(), "costs": {sid: {"session": spent.session.to_dict(),
                                                          "subtree": spent.subtree.to_dict()}
                                                    for sid, spent in costs.items()}})
        return
    from zagent_cli.show import print_tree, shown_costs

    print_tree(root, shown_costs(config, costs))
