"""A long session resumed after compaction (issue 22), beside raw sqlite3.

Builds one session of ``--events`` events (default 1,000,000) with ``journal_scale.py``'s
generator (turns, calls with output, notes, background tasks, wake-ups) and its snapshot
100 events before its end, then, with ``zagent`` processes against a tiny OpenAI-compatible
server on 127.0.0.1 (resume_scale.py's; it answers every request with a short reply):

1. **the compaction** (``zagent compact SID --model openai:x``): its time, and the size of
   its summary request (the newest part of the conversation that fits in the window), beside
   what a request would carry without compaction (the bytes of the conversation's rows);
2. **a resume after compaction**, timed from the process's start to its first model request
   (median of ``-n`` rounds, each resuming the same compacted session: every round adds a
   turn to its tail), and the request's bytes, beside **raw**: ``SELECT`` + ``json.loads`` of
   the rows that request is built from (the conversation's event types after the
   compaction's ``through_version``) in-process, and ``python -c pass``.

    $PY bench/compaction.py [--events N] [-n RUNS] [--quick]

``--quick``: 50,000 events, 3 rounds (about 30 s).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import journal_scale  # noqa: E402  (the generator)
import resume_scale  # noqa: E402  (the model server, the environment, the raw read)

from zagent_core.agent.conversation import Conversation  # noqa: E402
from zagent_store import SQLiteJournal  # noqa: E402

TAIL = 100


def resume(server: resume_scale.ModelServer, home: Path, sid: str) -> tuple[float, list[tuple[float, int, int]]]:
    """Run ``zagent resume``: (ms from its start to each model request, [(ms, bytes, messages)])."""
    before = len(server.arrived)
    start = time.perf_counter()
    done = subprocess.run(resume_scale.resume_argv(home, sid), cwd=home, env=resume_scale.resume_env(server),
                          capture_output=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"zagent resume exited {done.returncode}:\n{done.stderr.decode(errors='replace')[-2000:]}")
    arrived = [((at - start) * 1000, size, messages) for at, size, messages in server.arrived[before:]]
    return (time.perf_counter() - start) * 1000, arrived


def conversation_rows(conn: sqlite3.Connection, sid: str, after: int) -> tuple[float, int, int]:
    """Raw: (ms, rows, bytes) of SELECT + json.loads of the conversation's rows after ``after``."""
    types = ",".join(f"'{t}'" for t in sorted(Conversation.TYPES))
    sql = resume_scale.READ + f" AND version > ? AND type IN ({types}) ORDER BY version"
    start = time.perf_counter()
    rows = resume_scale.raw_read(conn, sql, (sid, after))
    took = (time.perf_counter() - start) * 1000
    size = sum(len(row[4]) for row in conn.execute(sql, (sid, after)))
    return took, len(rows), size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, help="events of the session (default 1,000,000)")
    parser.add_argument("-n", "--runs", type=int, help="rounds of the resume after compaction (default 7)")
    parser.add_argument("--quick", action="store_true", help="50,000 events, 3 rounds")
    parser.add_argument("--seed", type=int, default=2222)
    args = parser.parse_args()
    events = args.events or (50_000 if args.quick else 1_000_000)
    runs = args.runs or (3 if args.quick else 7)
    print(f"a {events:,}-event session resumed after compaction (SQLite {sqlite3.sqlite_version}, "
          f"Python {sys.version.split()[0]}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f})", flush=True)
    with tempfile.TemporaryDirectory(prefix="zagent-compaction-") as tmp_name:
        tmp = Path(tmp_name)
        resume_scale.PYCACHE = str(tmp / "pycache")
        home = tmp / "home"
        path = home / "journal.db"
        built = journal_scale.build(path, events, args.seed, extra=[(events, "idle")])
        (sid,) = built["extra_ids"]
        with SQLiteJournal(path) as journal:
            length = journal.head(sid)
            journal_scale.snapshot_at(journal, sid, length - TAIL)
        print(f"built {length:,} events in {built['seconds']:.1f} s; snapshot at {length - TAIL:,}", flush=True)
        conn = sqlite3.connect(path)
        _, whole_rows, whole_bytes = conversation_rows(conn, sid, 0)
        server = resume_scale.ModelServer()

        # -- the compaction ------------------------------------------------------------------
        before = len(server.arrived)
        start = time.perf_counter()
        done = subprocess.run([str(resume_scale.ZAGENT), "--home", str(home), "compact", sid, "--model", "openai:x"],
                              cwd=home, env=resume_scale.resume_env(server), capture_output=True, timeout=3600)
        took = (time.perf_counter() - start) * 1000
        if done.returncode != 0:
            raise RuntimeError(f"zagent compact exited {done.returncode}:\n{done.stderr.decode()[-2000:]}")
        summary_at, summary_bytes, summary_messages = server.arrived[before]
        with SQLiteJournal(path) as journal:
            compacted = [e.event for e in journal.read(sid, after_version=length, types=("context_compacted",))]
        through = compacted[0].through_version  # type: ignore[union-attr]
        print(f"\nzagent compact: {took / 1000:.1f} s in all, its summary request at {(summary_at - start) * 1000:,.0f} ms:"
              f" {summary_messages:,} messages, {summary_bytes / 1e6:.2f} MB (the conversation's newest part that fits "
              f"in the window); uncompacted, a request would carry the {whole_rows:,} conversation events' "
              f"{whole_bytes / 1e6:.1f} MB of bodies")

        # -- resumes after compaction ---------------------------------------------------------
        zagent_ms: list[float] = []
        raw_ms: list[float] = []
        sizes: list[int] = []
        for i in range(runs):
            sides = [("zagent", lambda: resume(server, home, sid)), ("raw", lambda: conversation_rows(conn, sid, through))]
            for name, fn in (sides if i % 2 == 0 else sides[::-1]):
                if name == "zagent":
                    _, arrived = fn()  # type: ignore[misc]
                    zagent_ms.append(arrived[0][0])
                    sizes.append(arrived[0][1])
                else:
                    raw_ms.append(fn()[0])  # type: ignore[index]
        _, tail_rows, tail_bytes = conversation_rows(conn, sid, through)
        bare = statistics.median(resume_scale.process([sys.executable, "-c", "pass"], tmp)() for _ in range(5))
        z, r = statistics.median(zagent_ms), statistics.median(raw_ms)
        print(f"\n| resumed after compaction ({length:,} events) | zagent | raw | |\n| --- | ---: | ---: | --- |")
        print(f"| start to first model request | {z:,.0f} ms | {r:,.1f} ms (SELECT + json.loads of {tail_rows:,} rows, "
              f"{tail_bytes / 1e3:.1f} kB) | python -c pass {bare:.0f} ms |")
        print(f"| the request | {statistics.median(sizes) / 1e3:.1f} kB | {whole_bytes / 1e6:.1f} MB uncompacted | |")
        print(f"\n(zagent {min(zagent_ms):,.0f}-{max(zagent_ms):,.0f} ms, raw {min(raw_ms):,.1f}-{max(raw_ms):,.1f} ms "
              f"over {runs} rounds)")
        server.close()
        conn.close()


if __name__ == "__main__":
    main()
