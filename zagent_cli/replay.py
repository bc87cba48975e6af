"""``zagent replay``: drive recorded sessions again and report what differs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import click

from zagent_cli.context import Context
from zagent_cli.output import emit_json, say
from zagent_cli.params import TEXT, complete_sessions, named_in

if TYPE_CHECKING:
    from zagent_core.history.replay_report import ReplayReport
    from zagent_core.journal.protocol import AdminJournal


def _is_journal(path: Path) -> bool:
    """Whether ``path`` is a zagent journal: looked at read-only, so nothing is written to it."""
    import contextlib
    import sqlite3

    try:
        with contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as conn:
            return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'events'").fetchone() \
                is not None
    except sqlite3.Error:
        return False


def _rule(text: str) -> tuple[str, str]:
    import re

    pattern, sep, replacement = text.partition("=")
    if not sep or not pattern:
        raise click.BadParameter("write REGEX=REPLACEMENT, e.g. 'build-[0-9]+=build-N'", param_hint="--normalize")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise click.BadParameter(f"{pattern!r} is not a regular expression: {exc}", param_hint="--normalize") from None
    return pattern, replacement


@click.command()
@click.argument("session_id", type=TEXT, required=False, shell_complete=complete_sessions)
@click.option("--tools", type=click.Choice(["recorded", "rerun"]), default="recorded", show_default=True,
              help="recorded: serve tool results from the journal (does the host decide the same?); "
                   "rerun: run the tools again in a copy of the workspace (do they give the same results?).")
@click.option("--file", "export_file", type=click.Path(exists=True, dir_okay=False),
              help="Replay the session of this export (zagent sessions export).")
@click.option("--journal", "journal_path", type=click.Path(exists=True, dir_okay=False),
              help="Replay from this journal file instead of the home's.")
@click.option("--all", "replay_all", is_flag=True,
              help="Replay every session of the journal (a sub-agent's in its parent's tree).")
@click.option("--allow-unsafe", is_flag=True, help="With --tools rerun, also rerun tools marked replay: unsafe.")
@click.option("--normalize", "rules", multiple=True, metavar="REGEX=REPL", callback=lambda c, p, v: [_rule(x) for x in v],
              help="Replace what REGEX matches before outputs are compared (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_obj
def replay(obj: Context, session_id: str | None, tools: Literal["recorded", "rerun"], export_file: str | None, journal_path: str | None,
           replay_all: bool, allow_unsafe: bool, rules: list[tuple[str, str]], as_json: bool) -> None:
    """Drive a recorded session again and report, step by step, what differs.

    Model replies always come from the recording. With --tools rerun, the tools run in a
    copy of the recorded workspace, or of the global --workspace DIR when given. A spawn
    call is served from the recording and its sub-agent's session is replayed too: the
    report is the tree. Exit 0 when every session of it matches, 1 on a divergence (or a
    rerun that ran nothing again), 2 on a usage error.
    """
    from zagent_core.config import load_config
    from zagent_core.history.replay import ReplayOptions, replay_sessions
    from zagent_core.history.replay_workspace import replay_folder
    from zagent_store import SQLiteJournal

    if bool(session_id) + bool(export_file) + replay_all != 1:
        raise click.UsageError("name one SESSION_ID, or give --file EXPORT, or --all")
    if obj.workspace is not None and not Path(obj.workspace).is_dir():
        raise click.UsageError(f"workspace {obj.workspace} is not a folder (--workspace: the folder a rerun copies)")
    config, _ = load_config(obj.home.config_path)
    if tools == "rerun":  # tools run again: the key is no more theirs than in a live run
        from zagent_core.tools.credentials import withhold_keys

        withhold_keys(config)
    normalisers = [(r.pattern, r.replacement) for r in config.replay.normalize] + list(rules)
    options = ReplayOptions(tools=tools, allow_unsafe=allow_unsafe, normalisers=normalisers, config=config,
                            workspace=Path(obj.workspace) if obj.workspace is not None else None)
    with replay_folder(obj.home) as tmp:
        source, session_id = _recorded(obj, Path(tmp), session_id, export_file, journal_path)
        with source:
            try:
                results = replay_sessions(source, None if replay_all else [session_id or ""], obj.home,
                                          lambda workdir: SQLiteJournal(workdir / "replay.db"), options,
                                          workdir=Path(tmp), on_report=_progress if replay_all and not as_json else None)
            except LookupError as exc:
                raise click.UsageError(str(exc)) from None
    if as_json:
        emit_json(results.to_dict())
    else:
        for report in results.reports:
            if not replay_all or not report.tree_matched:
                say(report.text())
        if replay_all:
            sessions = results.sessions()
            say(f"{sum(s.matched for s in sessions)} of {len(sessions)} sessions match")
    sys.exit(0 if results.matched else 1)


def _progress(number: int, count: int, report: ReplayReport) -> None:
    say(f"[{number}/{count}] {report.session_id}: {report.tree_verdict}", err=True)


def _recorded(obj: Context, tmp: Path, session_id: str | None, export_file: str | None,
              journal_path: str | None) -> tuple[AdminJournal, str | None]:
    """The journal the recording is read from (an export imported into ``tmp``, a journal file,
    or the home's) and the session to replay (an export's own)."""
    from zagent_core.history.exports import ExportError, import_session, parse_export
    from zagent_core.home import Home
    from zagent_store import SQLiteJournal

    if export_file:
        try:
            with open(export_file, encoding="utf-8") as handle:
                imported = parse_export(handle, source=export_file)
        except (ExportError, UnicodeDecodeError) as exc:
            raise click.UsageError(str(exc)) from None
        source: AdminJournal = SQLiteJournal(tmp / "recorded.db")
        try:
            return source, import_session(source, imported, home=Home(tmp))
        except ExportError as exc:
            raise click.UsageError(str(exc)) from None
    if journal_path:
        if not _is_journal(Path(journal_path)):
            raise click.UsageError(f"{journal_path} is not a zagent journal (no events table)")
        source = SQLiteJournal(journal_path)
    else:
        source = obj.existing_journal()
    if session_id is None:
        return source, None
    try:  # named in the journal replayed from, which need not be the home's
        return source, named_in(source, session_id)
    except click.UsageError:
        source.close()
        raise
