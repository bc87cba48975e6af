"""Workers: sessions per second through ``zagent worker`` processes, and the time from a
worker's SIGKILL to its sessions running again, on SQLite and on PostgreSQL.

- ``throughput``: N sessions left with ``run --detach`` (each: one message, one scripted
  reply), driven by 1 and by 4 worker processes (``--until-idle``, 4 sessions at a time
  each), from their start to their exit. Baseline in the same run: the same sessions
  driven one after the other in one process by ``Engine.resume`` + ``Agent.run`` (what a
  worker does for each, without claims, processes or threads).
- ``takeover``: 4 workers (4 at a time each) hold 8 sessions whose background tasks run, so the other workers
  have room for a killed one's sessions; one worker is
  SIGKILLed; the time until each of its sessions is resumed by another (the journal's
  ``session_resumed.taken_over_from``), with ``journal.lease_seconds`` 1 and ``--poll``
  0.2: the floor is the lease's expiry.

PostgreSQL runs on a throwaway server (tests/pg_cluster.py), or on ``--url``.

    python bench/workers.py [-n 200] [--store sqlite|postgres|both]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from test_worker import prepare, submit  # noqa: E402

from zagent_core import Engine, Home  # noqa: E402
from zagent_core.agent.loop import Agent  # noqa: E402
from zagent_core.agent.models import load_model  # noqa: E402
from zagent_store import open_journal  # noqa: E402

PYTHON = sys.executable


def make_home(root: Path, lease_seconds: float, nap_seconds: float = 0.3) -> tuple[Path, Path]:
    """The tests' home (a background ``nap`` tool, its script in ``root``) with this lease time."""
    home = root / "home"
    (home / "tools").mkdir(parents=True)
    script = prepare(home, root, nap_seconds=nap_seconds)
    (home / "config.json").write_text(json.dumps({"journal": {"lease_seconds": lease_seconds}}))
    return home, script


def submitted(home: Path, url: str, count: int) -> list[str]:
    with open_journal(url) as journal:
        return submit(home, journal, home, count)


def worker(home: Path, url: str, spec: str, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([PYTHON, "-m", "zagent_cli", "--home", str(home), "--journal", url, "--workspace",
                             str(home), "worker", "--model", spec, "--poll", "0.2", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def throughput(root: Path, url: str, sessions: int) -> dict[str, float]:
    home, _ = make_home(root, 30)
    script = root / "one.json"
    script.write_text(json.dumps([{"text": "done"}]))
    spec = f"scripted:{script}"
    figures = {}
    for label, processes in (("1 worker", 1), ("4 workers", 4)):
        submitted(home, url, sessions)
        started = time.perf_counter()
        pools = [worker(home, url, spec, "--until-idle", "--concurrency", "4") for _ in range(processes)]
        for pool in pools:
            assert pool.wait(timeout=600) == 0
        figures[label] = sessions / (time.perf_counter() - started)
    ids = submitted(home, url, sessions)
    started = time.perf_counter()
    with open_journal(url) as journal:
        engine = Engine(Home(home), journal, workspace=home, command="bench")
        for session_id in ids:
            session = engine.resume(session_id)
            Agent(session, load_model(spec), spec=spec).run(None)
            session.release()
    figures["in-process resume loop (baseline)"] = sessions / (time.perf_counter() - started)
    return figures


def takeover(root: Path, url: str) -> list[float]:
    """Seconds from the SIGKILL to each of the killed worker's sessions resumed by another."""
    home, script = make_home(root, 1.0, nap_seconds=60)
    spec = f"scripted:{script}"
    ids = submitted(home, url, 8)
    pools = [worker(home, url, spec, "--concurrency", "4") for _ in range(4)]
    try:
        with open_journal(url) as journal:
            deadline = time.monotonic() + 120
            while not all(any(e.event.type == "task_started" for e in journal.read(sid)) for sid in ids):
                assert time.monotonic() < deadline, "the workers did not start every task"
                time.sleep(0.05)
            holders = {sid: lease.owner["pid"] for sid in ids if (lease := journal.lease(sid))}
            victim = max(pools, key=lambda pool: list(holders.values()).count(pool.pid))
            held = [sid for sid, pid in holders.items() if pid == victim.pid]
            killed_at = time.monotonic()
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            delays: dict[str, float] = {}
            while len(delays) < len(held):
                for sid in held:
                    if sid not in delays and any(e.event.type == "session_resumed" and e.event.taken_over_from
                                                 for e in journal.read(sid, types=["session_resumed"])):
                        delays[sid] = time.monotonic() - killed_at
                assert time.monotonic() < killed_at + 60, "the sessions were not taken over"
                time.sleep(0.01)
            return sorted(delays.values())
    finally:
        for pool in pools:
            with contextlib.suppress(ProcessLookupError):
                pool.send_signal(signal.SIGKILL)
            pool.wait()
        subprocess.run(["pkill", "-f", str(home / "tools" / "nap")], check=False)  # the naps outlive their workers


@contextlib.contextmanager
def journals(store: str, url: str | None, root: Path) -> Iterator[tuple[str, str]]:
    if store in ("sqlite", "both"):
        yield "sqlite", f"sqlite:///{root / 'journal.db'}"
    if store in ("postgres", "both"):
        if url:
            yield "postgres", url
        else:
            from pg_cluster import throwaway_cluster

            with throwaway_cluster() as server:
                yield "postgres", server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--sessions", type=int, default=200)
    parser.add_argument("--store", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--url", help="a PostgreSQL database to use instead of a throwaway server (it must be empty)")
    args = parser.parse_args()
    os.environ.pop("ZAGENT_JOURNAL", None)
    print(f"{args.sessions} sessions, one message and one scripted reply each; {os.cpu_count()} cores")
    for store in (["sqlite", "postgres"] if args.store == "both" else [args.store]):
        with tempfile.TemporaryDirectory() as tmp, journals(store, args.url, Path(tmp)) as (name, url):
            figures = throughput(Path(tmp) / "throughput", url, args.sessions)
            for label, rate in figures.items():
                print(f"{name:8}  {label:36} {rate:7.1f} sessions/s")
            delays = takeover(Path(tmp) / "takeover", url)
            print(f"{name:8}  SIGKILL to running again (lease 1 s, poll 0.2 s): {len(delays)} sessions, "
                  f"median {statistics.median(delays):.2f} s, max {max(delays):.2f} s")


if __name__ == "__main__":
    main()
