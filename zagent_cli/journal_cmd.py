"""``zagent journal``: recover a damaged journal file, copy a journal to another store, vacuum it."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from zagent_cli.context import Context
from zagent_cli.output import OK, WARNING, emit_json, plural, say

if TYPE_CHECKING:
    from zagent_core.journal.protocol import AdminJournal


@click.group("journal")
def journal_group() -> None:
    """The journal itself: recover a damaged file, copy a journal to another store, vacuum it."""


@journal_group.command("recover")
@click.argument("source", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("target", type=click.Path(dir_okay=False, path_type=Path))
def journal_recover(source: Path, target: Path) -> None:
    """Copy every readable event of the damaged journal SOURCE into a new journal TARGET.

    Sessions keep their ids, versions and times; what cannot be read is listed. TARGET
    must not exist. Then use TARGET as the home's journal.db.
    """
    from zagent_store.recover import recover_journal

    if target.exists():
        raise click.BadParameter(f"{target} already exists: name a new file", param_hint="TARGET")
    report = recover_journal(source, target)  # a RecoverError is a JournalError: main() prints it, exit 1
    for line in report.skipped[:50]:
        click.echo(f"skipped: {line}")
    if len(report.skipped) > 50:
        click.echo(f"skipped: ... and {len(report.skipped) - 50} more")
    click.echo(f"recovered {report.events} events of {report.sessions} sessions into {target}; "
               f"{report.unreadable} unreadable, {report.after_gaps} left out after a gap")


def _open_for_copy(location: str, role: str, *, read_only: bool) -> AdminJournal:
    """The journal at ``location`` for ``journal copy``: a missing SQLite source is a usage error, never made."""
    from zagent_core.journal.protocol import JournalError
    from zagent_store.opening import is_postgres, open_journal, sqlite_path

    if not is_postgres(location):
        try:
            path = sqlite_path(location)
        except JournalError as exc:
            raise click.BadParameter(str(exc), param_hint=role) from None
        if read_only and not path.is_file():
            raise click.BadParameter(f"no journal at {path}: give a journal file, or a postgresql:// URL",
                                     param_hint=role)
        if path.is_dir():
            raise click.BadParameter(f"{path} is a folder: give a journal file (made if it does not exist)",
                                     param_hint=role)
    try:
        return open_journal(location, read_only=read_only)
    except (JournalError, OSError) as exc:
        raise click.ClickException(f"{role}: {exc}") from None


@journal_group.command("copy")
@click.argument("source", metavar="SRC")
@click.argument("target", metavar="DST")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
def journal_copy(source: str, target: str, as_json: bool) -> None:
    """Copy every session of the journal SRC into the journal DST, then check it event by event.

    SRC and DST are journal URLs (sqlite:///PATH, postgresql://...) or paths of SQLite files.
    Sessions keep their ids, versions and times. DST must not hold any of SRC's sessions
    (nothing is written then); a DST file that does not exist is made.
    """
    from zagent_core.session import leases
    from zagent_store.copy import CopyProgress, CopyRefusedError, copy_journal

    progress: Callable[[CopyProgress], None] | None = None
    if not as_json and sys.stderr.isatty():
        import time

        shown = [0.0]

        def progress(step: CopyProgress) -> None:
            # A journal of many small sessions reports thousands of steps a second: a few are shown.
            if time.monotonic() - shown[0] >= 0.2 or step.sessions_done == step.sessions:
                shown[0] = time.monotonic()
                click.echo(f"\rcopying: {step.sessions_done}/{step.sessions} sessions, "
                           f"{step.events_done}/{step.events} events", err=True, nl=False)

    with _open_for_copy(source, "SRC", read_only=True) as src, _open_for_copy(target, "DST", read_only=False) as dst:
        try:
            report = copy_journal(src, dst, progress=progress, is_driven=leases.is_driven)
        except CopyRefusedError as exc:  # other CopyErrors are JournalErrors: exit 1, as a failed check
            raise click.UsageError(str(exc)) from None
        finally:
            if progress is not None:
                click.echo(err=True)
    if as_json:
        emit_json(report.to_dict())
        return
    for session_id in report.nul_replaced:
        say(f"note: session {session_id} held U+0000 in a string, which PostgreSQL cannot store: the copy has "
            "U+FFFD there (its only difference)", colour=WARNING)
    for session_id, version in report.driven.items():
        say(f"note: session {session_id} was being driven while it was copied: the copy has its events up to "
            f"version {version}, not those appended since", colour=WARNING)
    say(f"copied {plural(report.sessions, 'session')} ({plural(report.events, 'event')}, "
        f"{plural(report.snapshots, 'snapshot')}) from {report.source} to {report.target} in "
        f"{report.copy_seconds:.2f} s; checked event by event in {report.verify_seconds:.2f} s", colour=OK)
    say(f"sha256 {report.digest}")


@journal_group.command("vacuum")
@click.pass_obj
def journal_vacuum(obj: Context) -> None:
    """Give back the space of deleted sessions (after `zagent sessions prune`).

    SQLite: VACUUM rewrites the file, refused while a live process drives a session of it.
    PostgreSQL: VACUUM (ANALYZE) of the journal's tables.
    """
    from zagent_core.history.retention import vacuum_journal
    from zagent_store.opening import describe

    with obj.existing_journal(read_only=False) as journal:
        done = vacuum_journal(journal)  # a JournalBusyError is a JournalError: main() prints it, exit 1
    say(f"vacuumed {describe(obj.journal_location)}: {_size(done.before)} before, {_size(done.after)} after",
        colour=OK)
    if done.note:
        say(f"note: {done.note}")


def _size(count: int) -> str:
    """``1.5 MiB``: a size as a person reads it, in binary units as zagent's other sizes (bytes below 1 KiB)."""
    if count < 1024:
        return plural(count, "byte")
    scaled, unit = count / 1024, "KiB"
    for larger in ("MiB", "GiB", "TiB"):
        if scaled < 1024:
            break
        scaled, unit = scaled / 1024, larger
    return f"{scaled:.1f} {unit}"
