"""``zagent worker``: drive the sessions that want a driver, until stopped."""

from __future__ import annotations

import click

from zagent_cli.context import Context
from zagent_cli.output import plural, say


@click.command()
@click.option("--concurrency", type=click.IntRange(1, 256), default=4, show_default=True,
              help="Sessions driven at once by this worker.")
@click.option("--model", "model_spec", metavar="SPEC",
              help="The model for sessions that journaled none (default: config agent.model).")
@click.option("--poll", "poll_seconds", type=click.FloatRange(0.05, 3600), default=5.0, show_default=True,
              help="Seconds between looks for work when the journal cannot tell (SQLite), or for leases expiring.")
@click.option("--until-idle", is_flag=True, help="Stop when nothing is left to claim and every session is let go.")
@click.pass_obj
def worker(obj: Context, concurrency: int, model_spec: str | None, poll_seconds: float, until_idle: bool) -> None:
    """Drive the sessions that want a driver: wake-ups, messages left with run --detach,
    turns and tasks a stopped driver left. Runs until Ctrl-C or SIGTERM.

    Any number of workers, on any number of hosts, can share a journal (PostgreSQL; SQLite:
    one host): each session is driven by one at a time, and the sessions of a worker that
    died are taken over once their leases expire (journal.lease_seconds).
    """
    import os
    import signal
    import socket

    from zagent_core.drive.worker import Worker

    with obj.journal() as journal:
        pool = Worker(obj.engine(journal), model_spec=model_spec, concurrency=concurrency, poll_seconds=poll_seconds,
                      report=lambda line: say(f"[{line}]", err=True))

        def stop(signum: int, frame: object) -> None:
            # Only a flag: a KeyboardInterrupt raised wherever the main thread was could land just
            # after it took the journal's lock, which the sessions still being let go then waited
            # for forever (a worker that never exited after SIGTERM). A second Ctrl-C stops at once.
            signal.signal(signal.SIGINT, signal.default_int_handler)
            pool.stop()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        say(f"[worker pid {os.getpid()} on {socket.gethostname()}: {concurrency} at a time]", err=True)
        stats = pool.run(until_idle=until_idle)
    say(f"[worker stopped: {plural(stats.claimed, 'session')} claimed, {stats.taken_over} taken over, "
        f"{stats.finished} driven to a stop, {len(stats.failed) + len(stats.limited)} left for a person]", err=True)
