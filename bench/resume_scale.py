"""Resume at scale: issue 9's targets for long sessions and a 1M-event journal, beside raw sqlite3.

Builds two journals with ``journal_scale.py``'s generator (realistic sessions: turns,
calls with output, notes, background tasks, wake-ups), through the real ``SQLiteJournal``
schema (every migration), then times, each beside its raw baseline in the same run:

* **open**: ``Engine.session_state`` of an idle session of S, M and L events (default
  10k, 100k, 1M) whose snapshot was taken 100 events before its end (so the tail is
  100 events), vs raw: the snapshot row and the tail rows, ``SELECT`` + ``json.loads``.
  Target: <= 50 ms, and flat from S to L (L within 1.5x of S);
* **full fold** of the M session without a snapshot: ``rebuild(journal.read(sid))`` vs
  raw ``SELECT seq, version, type, at, data ... ORDER BY version`` + ``json.loads`` of
  the same rows. Target: <= 1.2x;
* **typed read** of the S session: ``list(journal.read(sid))`` vs the same raw read.
  Target: <= 0.8x;
* **resume**: ``zagent resume SID PROMPT --model openai:x`` of the M session, from
  process start until its first model request reaches a tiny OpenAI-compatible server on
  127.0.0.1 (which answers with a reply without tool calls, so the turn ends idle), vs
  raw: ``SELECT`` + ``json.loads`` of the rows that request is built from (user
  messages, replies, tool results, notes, wake-ups, deliveries) in-process. Nothing is
  subtracted; ``python -c pass`` and the import of the modules resume loads are printed
  for context. Target: <= 1.2x;
* **W3**: ``rebuild(read(), history=True)`` of the S session (what ``sessions show``
  folds) vs the same raw read. Target: <= 0.8x (issue 27's table);
* **rebuild every session** of the 1M-event journal in one pass over it in table order
  (``fold.rebuild_all``), and session after session as before (``sessions()``, then
  ``rebuild(read())`` of each), vs a raw scan (``SELECT`` + ``json.loads`` of every row).
  Target: <= 1.2x;
* ``zagent sessions list`` and ``zagent sessions show SID`` (a typical session: the
  median by size of the last 100 to end) on the 1M-event journal, whole process, vs a
  raw process (``python -c`` with sqlite3: the ``heads`` rows; the session's rows with
  ``json.loads``) and ``python -c pass``. Target: <= 200 ms each.

The journals. The first ("many", ``--journal-events``, default 1,000,000) holds about
10,000 sessions of ~100 events, the S and M sessions among them: they run while others
do, so their events interleave with the others' as a long session's would. The second
("long") holds the L session alone. Long sessions end idle after a turn (resumable).
Every session has its ``heads`` row; every session that has not ended has the newest
snapshot the engine would have left it (end of its last turn, or every 1,000 events);
ended sessions have none (nothing measured reads theirs). Then the S, M and L sessions
get their snapshot at 100 events before their end.

Each measure runs once as a warm-up (skipped for measures that take over 5 s), then
``-n`` rounds (3 for those over 5 s), zagent and raw alternating, the order flipped each
round; the table shows medians. The files are in the OS page cache (just written):
warm-cache figures. ``--profile`` then runs cProfile on each measure that missed its
target and prints the top functions by cumulative and by own time.

    $PY bench/resume_scale.py [--quick] [--sizes S,M,L] [--journal-events N] [-n RUNS]
        [--profile] [--dir DIR] [--keep DIR]

About 2.5 minutes at the default sizes on a quiet 2-core machine (a minute of it building
the journals and their snapshots), 6 under heavy load with ``--profile``; ``--quick``
(sizes 2k, 10k, 30k in a 40k-event journal, 3 rounds) takes 30-45 s.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import gc
import http.server
import io
import json
import os
import pstats
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import journal_scale  # noqa: E402  (the generator: bench/journal_scale.py)

from zagent_core import Engine, Home  # noqa: E402
from zagent_core.journal.events import load_event_json  # noqa: E402
from zagent_core.journal.fold import rebuild  # noqa: E402
from zagent_core.journal.fold import rebuild_all as fold_all  # noqa: E402
from zagent_core.journal.protocol import StoredEvent  # noqa: E402
from zagent_store import SQLiteJournal  # noqa: E402
from zagent_store.sql import parse_time  # noqa: E402

ZAGENT = journal_scale.ZAGENT
TAIL = 100  # events after the snapshot of the S, M and L sessions
SLOW_MS = 5_000  # a measure slower than this gets no warm-up and 3 rounds at most
READ = "SELECT seq, version, type, at, data FROM events WHERE session_id = ?"
#: The event types ``Conversation`` builds a request from (see zagent_core/agent/loop.py).
CONVERSATION_TYPES = ("user_message", "model_replied", "tool_call_finished", "tool_call_rejected",
                      "tool_call_interrupted", "note_received", "wake_requested", "turn_started", "notes_delivered")
PYCACHE = ""  # set by main(): a folder in the temp dir
PROMPT = "Go on: summarise what changed since the last turn."

RAW_LIST = """import sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
for row in conn.execute("SELECT * FROM heads ORDER BY last_seq DESC LIMIT 50"):
    print(*row)
"""
RAW_SHOW = """import json, sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
for seq, version, type_, at, data in conn.execute(
        "SELECT seq, version, type, at, data FROM events WHERE session_id = ? ORDER BY version", (sys.argv[2],)):
    body = json.loads(data)
    print(seq, version, type_, at, str(body.get("tool") or body.get("text") or body.get("output") or "")[:80])
"""


# -- timing ------------------------------------------------------------------------------


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def measure(zagent: Callable[[], float], raw: Callable[[], float], runs: int) -> dict[str, Any]:
    """Medians of ``runs`` rounds, the two sides alternating, the order flipped each round.

    Each side returns the milliseconds it took (see :func:`ms_of`). A warm-up of each
    first, unless a side's first round shows it takes over ``SLOW_MS``: then that round
    counts and there are 3 rounds at most.
    """
    gc.collect()
    z_times, r_times = [zagent()], [raw()]
    if max(z_times[0], r_times[0]) > SLOW_MS:
        runs = min(runs, 3) - 1  # the first round was cold only for the CPU caches: it counts
    else:
        z_times, r_times = [], []
    for i in range(runs):
        sides = ((zagent, z_times), (raw, r_times))
        for fn, times in (sides if i % 2 == 0 else sides[::-1]):
            gc.collect()
            times.append(fn())
    return {"zagent": statistics.median(z_times), "raw": statistics.median(r_times),
            "z_all": z_times, "r_all": r_times}


def ms_of(fn: Callable[[], Any]) -> Callable[[], float]:
    return lambda: timed(fn)


# -- raw baselines -----------------------------------------------------------------------


def raw_read(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...]) -> list[Any]:
    """Every row fetched, its JSON body (the last column) parsed: what zagent's side delivers, untyped."""
    return [json.loads(row[-1]) for row in conn.execute(sql, params).fetchall()]


def raw_pass(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...]) -> int:
    """As :func:`raw_read`, each body dropped once parsed, as a fold drops each event once applied.

    (Keeping 100k parsed bodies alive makes the garbage collector's passes over them cost
    more than the parsing: a baseline a fold does not pay.)
    """
    n = 0
    for row in conn.execute(sql, params).fetchall():
        json.loads(row[-1])
        n += 1
    return n


def raw_open(conn: sqlite3.Connection, sid: str) -> tuple[Any, list[Any]]:
    version, data = conn.execute("SELECT version, data FROM snapshots WHERE session_id = ?", (sid,)).fetchone()
    return json.loads(data), raw_read(conn, READ + " AND version > ? ORDER BY version", (sid, version))


def raw_scan(path: Path) -> int:
    """Every row of the journal, in table order, its body parsed (and dropped, as a fold drops it)."""
    conn = sqlite3.connect(path)
    try:
        n = 0
        for row in conn.execute("SELECT seq, session_id, version, type, at, data FROM events"):
            json.loads(row[5])
            n += 1
        return n
    finally:
        conn.close()


def open_times(path: Path, sid: str, times: int) -> None:
    """``Engine.session_state`` ``times`` times (for a profile)."""
    with SQLiteJournal(path) as journal:
        engine = Engine(Home(path.parent), journal, workspace=path.parent)
        for _ in range(times):
            engine.session_state(sid)


def fold_once(path: Path, sid: str) -> None:
    with SQLiteJournal(path) as journal:
        rebuild(journal.read(sid))


def read_times(path: Path, sid: str, times: int) -> None:
    with SQLiteJournal(path) as journal:
        for _ in range(times):
            list(journal.read(sid))


def rebuild_each(path: Path) -> int:
    """Every session rebuilt session after session: ``sessions()``, then ``rebuild(read())`` of each."""
    with SQLiteJournal(path) as journal:
        n = 0
        for summary in journal.sessions():
            n += rebuild(journal.read(summary.session_id)).version
        return n


def rebuild_all(path: Path) -> int:
    """Every session rebuilt in one pass over the journal in table order (``fold.rebuild_all``): the
    rows typed as the store types them (``load_event_json``, ``StoredEvent``), each folded into its
    session's state as it comes. The store has no table-order read yet, so the rows come from a
    connection of their own."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT seq, session_id, version, type, at, data FROM events")
        states = fold_all(StoredEvent(seq, sid, version, parse_time(at), load_event_json(type_, data))
                          for seq, sid, version, type_, at, data in rows)
        return sum(state.version for state in states.values())
    finally:
        conn.close()


# -- the model endpoint --------------------------------------------------------------------


class ModelServer:
    """A chat-completions endpoint on 127.0.0.1: notes when each request arrives, answers "done".

    ``reply`` (given the request's body) makes the answer's message and finish reason instead, and
    arrivals are then not noted (noting parses the body: the caller may be timing its own side).
    """

    def __init__(self, reply: Callable[[bytes], tuple[dict[str, Any], str]] | None = None) -> None:
        self.arrived: list[tuple[float, int, int]] = []  # (perf_counter, body bytes, messages)
        self.got = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                arrived = time.perf_counter()  # the request line and headers are in: the body was built
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                message, finish = ({"role": "assistant", "content": "Done."}, "stop") if reply is None else reply(body)
                if reply is None:
                    outer.arrived.append((arrived, len(body), len(json.loads(body)["messages"])))
                    outer.got.set()
                answer = json.dumps({"id": "bench", "object": "chat.completion", "model": "x", "choices": [
                    {"index": 0, "message": message, "finish_reason": finish}],
                    "usage": {"prompt_tokens": len(body) // 4, "completion_tokens": 1}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def resume_argv(home: Path, sid: str) -> list[str]:
    return [str(ZAGENT), "--home", str(home), "resume", sid, PROMPT, "--model", "openai:x"]


def child_env(**extra: str) -> dict[str, str]:
    """The environment of every process started: bytecode cached, as a user's install has it.

    ``PYTHONDONTWRITEBYTECODE`` (set on the development machines) would make each start
    compile zagent's modules again; the cache goes to the temp dir, not the checkout.
    """
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONDONTWRITEBYTECODE", "OPENAI_API_KEY", "ZAGENT_API_KEY", "ZAGENT_HOME")}
    env["PYTHONPYCACHEPREFIX"] = PYCACHE
    return env | extra


def resume_env(server: ModelServer) -> dict[str, str]:
    return child_env(OPENAI_BASE_URL=server.url)


def resume_once(server: ModelServer, home: Path, sid: str, prefix: list[str] | None = None) -> float:
    """Start ``zagent resume``; ms from the start to the first model request's arrival."""
    server.got.clear()
    before = len(server.arrived)
    start = time.perf_counter()
    proc = subprocess.Popen([*(prefix or []), *resume_argv(home, sid)], cwd=home, env=resume_env(server),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=600)
    if proc.returncode != 0 or len(server.arrived) == before:
        raise RuntimeError(f"zagent resume exited {proc.returncode} after {len(server.arrived) - before} model "
                           f"request(s):\n{err.decode(errors='replace')[-2000:]}")
    return (server.arrived[before][0] - start) * 1000


def process(argv: list[str], cwd: Path) -> Callable[[], float]:
    def run() -> float:
        start = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, cwd=cwd, env=child_env())
        took = (time.perf_counter() - start) * 1000
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr.decode()[-2000:]}")
        return took
    return run


def run_prefixed(argv: list[str], cwd: Path, prefix: list[str]) -> None:
    subprocess.run([*prefix, *argv], capture_output=True, check=True, cwd=cwd, env=child_env())


# -- profiles --------------------------------------------------------------------------------


def print_profile(stats: pstats.Stats, top: int) -> None:
    """Top functions by cumulative time (zagent's own, so click and importlib frames do not
    crowd them out), then by own time (any)."""
    for key, label, restrict in (("cumulative", "cumulative, zagent's functions", ("zagent_",)),
                                 ("tottime", "own (self) time", ())):
        out = io.StringIO()
        stats.stream = out  # type: ignore[attr-defined]
        stats.sort_stats(key).print_stats(*restrict, top)
        lines = out.getvalue().splitlines()
        start = next((i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls")), 0)
        print(f"    top {top} by {label}:")
        for line in lines[start:]:
            if line.strip():
                print("      " + line.replace(str(Path.cwd()) + "/", "")[:160])


def profile_call(fn: Callable[[], Any], top: int) -> None:
    profiler = cProfile.Profile()
    profiler.runcall(fn)
    print_profile(pstats.Stats(profiler), top)


def profile_process(run: Callable[[list[str]], Any], tmp: Path, top: int) -> None:
    """Run a ``zagent`` command under ``python -m cProfile`` (``run`` is given the argv prefix)."""
    out = tmp / "profile.out"
    run([sys.executable, "-m", "cProfile", "-o", str(out)])
    print_profile(pstats.Stats(str(out)), top)


# -- main ------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (2k, 10k, 30k; 40k-event journal), 3 rounds")
    parser.add_argument("--sizes", help="events of the S, M and L sessions (default 10000,100000,1000000)")
    parser.add_argument("--journal-events", type=int, help="events of the many-session journal (default 1,000,000)")
    parser.add_argument("-n", "--runs", type=int, help="rounds per measure (default 7; 3 for those over 5 s)")
    parser.add_argument("--profile", action="store_true", help="cProfile each measure that missed its target")
    parser.add_argument("--top", type=int, default=15, help="functions shown per profile (default 15)")
    parser.add_argument("--seed", type=int, default=909)
    parser.add_argument("--dir", help="where to put the temp homes (default: the system temp dir)")
    parser.add_argument("--keep", metavar="DIR", help="copy the two homes to DIR at the end")
    args = parser.parse_args()
    sizes = [int(x) for x in (args.sizes or ("2000,10000,30000" if args.quick else "10000,100000,1000000")).split(",")]
    journal_events = args.journal_events or (40_000 if args.quick else 1_000_000)
    runs = args.runs or (3 if args.quick else 7)
    if len(sizes) != 3 or sizes[0] + sizes[1] > journal_events:
        parser.error("--sizes takes three numbers S,M,L; S and M must fit in --journal-events")
    s_size, m_size, l_size = sizes

    print(f"zagent resume at scale (SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}, "
          f"{os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f})", flush=True)
    with tempfile.TemporaryDirectory(prefix="zagent-resume-", dir=args.dir) as tmp_name:
        tmp = Path(tmp_name)
        global PYCACHE
        PYCACHE = str(tmp / "pycache")
        many_home, long_home = tmp / "many", tmp / "long"
        many, long_ = many_home / "journal.db", long_home / "journal.db"

        # -- the journals ----------------------------------------------------------------
        built = journal_scale.build(many, journal_events, args.seed, extra=[(s_size, "idle"), (m_size, "idle")])
        s_sid, m_sid = built["extra_ids"]
        print(f"many: {built['events']:,} events in {built['sessions']:,} sessions, built in "
              f"{built['seconds']:.1f} s", flush=True)
        built_long = journal_scale.build(long_, l_size, args.seed + 1, extra=[(l_size, "idle")])
        (l_sid,) = built_long["extra_ids"]
        print(f"long: {built_long['events']:,} events in {built_long['sessions']:,} session(s), built in "
              f"{built_long['seconds']:.1f} s", flush=True)
        start = time.perf_counter()
        folded = journal_scale.snapshot_sessions(many, [s for s in built["session_ids"] if s not in (s_sid, m_sid)])
        print(f"snapshots of the sessions not ended: {folded:,} events folded in "
              f"{time.perf_counter() - start:.1f} s", flush=True)
        lengths: dict[str, int] = {}
        snapshot_bytes: dict[str, int] = {}
        for path, sid in ((many, s_sid), (many, m_sid), (long_, l_sid)):
            with SQLiteJournal(path) as journal:
                lengths[sid] = journal.head(sid)
                start = time.perf_counter()
                snapshot_bytes[sid] = journal_scale.snapshot_at(journal, sid, lengths[sid] - TAIL)
                took = time.perf_counter() - start
            print(f"session {sid}: {lengths[sid]:,} events; snapshot at {lengths[sid] - TAIL:,} "
                  f"({snapshot_bytes[sid]:,} bytes), folded in {took:.1f} s "
                  f"({took / (lengths[sid] - TAIL) * 1e6:.1f} µs/event, read() + rebuild())", flush=True)
        conn = sqlite3.connect(many)
        recent = conn.execute(
            "SELECT session_id, version FROM heads WHERE ended ORDER BY last_seq DESC LIMIT 100").fetchall()
        show_sid, show_size = sorted(recent, key=lambda row: row[1])[len(recent) // 2]
        conn.close()

        rows: list[dict[str, Any]] = []

        def add(name: str, res: dict[str, Any], target: str, ok: bool, note: str = "",
                profile: Callable[[], None] | None = None) -> None:
            res.update(name=name, target=target, ok=ok, note=note, profile=profile)
            rows.append(res)
            print(f"  {name:<46} zagent {res['zagent']:10.1f} ms  raw {res['raw']:9.1f} ms  "
                  f"{'ok' if ok else 'MISSED'}  {note}", flush=True)

        print(f"\ntiming ({runs} rounds after a warm-up; 3 and no warm-up over {SLOW_MS / 1000:.0f} s; medians):",
              flush=True)

        # -- open: snapshot + tail -------------------------------------------------------
        opened: dict[str, float] = {}
        for path, sid, size in ((many, s_sid, s_size), (many, m_sid, m_size), (long_, l_sid, l_size)):
            journal = SQLiteJournal(path)
            engine = Engine(Home(path.parent), journal, workspace=tmp)
            conn = sqlite3.connect(path)
            state = engine.session_state(sid)
            assert state.version == lengths[sid], (state.version, lengths[sid])
            res = measure(ms_of(lambda: engine.session_state(sid)), ms_of(lambda: raw_open(conn, sid)),
                          max(runs, 15))
            opened[sid] = res["zagent"]
            flat = res["zagent"] <= 1.5 * opened[s_sid]
            add(f"open {size:,}-event session (snapshot + {TAIL})", res, "<= 50 ms, flat",
                res["zagent"] <= 50 and flat,
                f"snapshot {snapshot_bytes[sid] / 1000:,.0f} kB, {len(state.tasks)} tasks, "
                f"{len(state.calls)} open calls; {res['zagent'] / opened[s_sid]:.2f}x the {s_size:,} session's",
                profile=functools.partial(profile_call, functools.partial(open_times, path, sid, 20), args.top))
            conn.close()
            journal.close()

        # -- full fold, typed read -------------------------------------------------------
        journal = SQLiteJournal(many)
        conn = sqlite3.connect(many)
        full = READ + " ORDER BY version"
        res = measure(ms_of(lambda: rebuild(journal.read(m_sid))), ms_of(lambda: raw_pass(conn, full, (m_sid,))), runs)
        add(f"full fold, {m_size:,} events, no snapshot", res, "<= 1.2x raw", res["zagent"] <= 1.2 * res["raw"],
            f"{res['zagent'] / lengths[m_sid] * 1000:.1f} µs/event vs {res['raw'] / lengths[m_sid] * 1000:.1f}",
            profile=lambda: profile_call(lambda: fold_once(many, m_sid), args.top))
        res = measure(ms_of(lambda: rebuild(journal.read(s_sid), history=True)),
                      ms_of(lambda: raw_read(conn, full, (s_sid,))), max(runs, 11))
        add(f"W3: rebuild {s_size:,} events with history", res, "<= 0.8x raw", res["zagent"] <= 0.8 * res["raw"],
            f"{res['zagent'] / lengths[s_sid] * 1000:.1f} µs/event vs {res['raw'] / lengths[s_sid] * 1000:.1f}",
            profile=lambda: profile_call(lambda: rebuild(SQLiteJournal(many).read(s_sid), history=True), args.top))
        res = measure(ms_of(lambda: list(journal.read(s_sid))), ms_of(lambda: raw_read(conn, full, (s_sid,))),
                      max(runs, 11))
        add(f"typed read, {s_size:,} events", res, "<= 0.8x raw", res["zagent"] <= 0.8 * res["raw"],
            f"{res['zagent'] / lengths[s_sid] * 1000:.1f} µs/event vs {res['raw'] / lengths[s_sid] * 1000:.1f}",
            profile=lambda: profile_call(lambda: read_times(many, s_sid, 5), args.top))
        conn.close()
        journal.close()

        # -- rebuild every session, sessions list and show (before resume adds to the journal)
        for label, rebuild_many in (("rebuild all", rebuild_all), ("rebuild each (as before)", rebuild_each)):
            res = measure(ms_of(functools.partial(rebuild_many, many)), ms_of(lambda: raw_scan(many)), runs)
            add(f"{label} {built['sessions']:,} sessions, {built['events']:,} ev.", res, "<= 1.2x raw scan",
                res["zagent"] <= 1.2 * res["raw"], f"{res['zagent'] / built['events'] * 1000:.1f} µs/event vs "
                f"{res['raw'] / built['events'] * 1000:.1f}",
                profile=functools.partial(profile_call, functools.partial(rebuild_many, many), args.top))
        bare = measure(process([sys.executable, "-c", "pass"], tmp), process([sys.executable, "-c", "pass"], tmp),
                       runs)["zagent"]
        for label, argv, raw_argv in (
                ("zagent sessions list", ["sessions", "list"], ["-c", RAW_LIST, str(many)]),
                (f"zagent sessions show ({show_size}-event session)", ["sessions", "show", show_sid],
                 ["-c", RAW_SHOW, str(many), show_sid])):
            zagent_argv = [str(ZAGENT), "--home", str(many_home), *argv]
            res = measure(process(zagent_argv, many_home), process([sys.executable, *raw_argv], many_home), runs)
            add(label, res, "<= 200 ms", res["zagent"] <= 200,
                f"raw = a python -c process with sqlite3; python -c pass {bare:.0f} ms",
                profile=functools.partial(profile_process, functools.partial(run_prefixed, zagent_argv, many_home),
                                          tmp, args.top))

        # -- resume up to the first model request ----------------------------------------
        server = ModelServer()
        conn = sqlite3.connect(many)
        types = ",".join(f"'{t}'" for t in CONVERSATION_TYPES)
        conversation_rows = READ + f" AND type IN ({types}) ORDER BY version"
        res = measure(lambda: resume_once(server, many_home, m_sid), ms_of(
            lambda: raw_read(conn, conversation_rows, (m_sid,))), runs)
        n_rows = len(raw_read(conn, conversation_rows, (m_sid,)))
        all_rows = measure(ms_of(lambda: raw_read(conn, full, (m_sid,))), ms_of(lambda: None), 3)["zagent"]
        conn.close()
        imports = measure(process([sys.executable, "-c", "import zagent_cli.main, zagent_core.session.engine, "
                                   "zagent_core.agent.loop, zagent_core.agent.models.openai, zagent_store"], tmp),
                          process([sys.executable, "-c", "pass"], tmp), runs)
        _, body_bytes, messages = server.arrived[-1]
        add(f"zagent resume, {m_size:,} events, to 1st request", res, "<= 1.2x raw", res["zagent"] <= 1.2 * res["raw"],
            f"raw = {n_rows:,} conversation rows ({all_rows:.0f} ms for all {lengths[m_sid]:,}); request "
            f"{messages:,} messages, {body_bytes / 1e6:.1f} MB; python -c pass {imports['raw']:.0f} ms, "
            f"+ imports {imports['zagent']:.0f} ms",
            profile=lambda: profile_process(lambda prefix: resume_once(server, many_home, m_sid, prefix), tmp,
                                            args.top))

        # -- the table ---------------------------------------------------------------------------
        print(f"\n| measure | zagent | raw baseline | ratio | target | |\n| --- | ---: | ---: | ---: | --- | --- |")
        for res in rows:
            print(f"| {res['name']} | {res['zagent']:,.1f} ms | {res['raw']:,.1f} ms | "
                  f"{res['zagent'] / res['raw']:.2f}x | {res['target']} | {'ok' if res['ok'] else '**missed**'} |")
        print()
        for res in rows:
            spread = f"zagent {min(res['z_all']):,.1f}-{max(res['z_all']):,.1f}, raw " \
                     f"{min(res['r_all']):,.1f}-{max(res['r_all']):,.1f} ms over {len(res['z_all'])} rounds"
            print(f"  {res['name']}: {res['note']} ({spread})")

        if args.profile:
            for res in rows:
                if not res["ok"] and res["profile"] is not None:
                    print(f"\nprofile: {res['name']}", flush=True)
                    res["profile"]()
        server.close()
        if args.keep:
            for home in (many_home, long_home):
                shutil.copytree(home, Path(args.keep) / home.name, dirs_exist_ok=True)
            print(f"\nhomes kept in {args.keep} (sessions: S {s_sid}, M {m_sid}, L {l_sid})")


if __name__ == "__main__":
    main()
