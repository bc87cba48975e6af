"""zagent's SQLite journal beside raw ``sqlite3`` and, where installed, its peers: W1-W4 of issue 27.

* W1, one durable append per transaction (``synchronous=FULL``), the event built in the loop:
  ``append(sid, [make_event(i)], i)`` vs raw ``BEGIN IMMEDIATE`` / ``INSERT`` / ``COMMIT`` of a
  row whose body the loop serialises with ``json.dumps`` (the same body, as a dict);
* W2, 100 appends per transaction (FULL), built in the loop: ``append`` of 100 events vs raw
  ``executemany`` of 100 such rows;
* W3, rebuild a 10,000-event session's state, with history: ``rebuild(read(), history=True)``
  vs raw ``SELECT`` of the rows, each body ``json.loads``-ed;
* W4, the tail of a 100,000-event session on a **fresh connection**: open the journal and
  ``read_last(sid, 100)`` (typed events), then close, vs raw ``sqlite3.connect`` + ``SELECT``
  of the last 100 rows, ``json.loads``-ed, then close. Twice: opened as ``zagent resume``
  opens it (writable) and as reading commands do (``read_only=True``).

The events are ``bench/journal_append.py``'s agent steps (turn, reply, call requested /
started / finished, two notes, turn end), and the read sessions ``session_events``' (the same,
less the notes). The raw side's file is a minimal event store: the same ``events`` columns,
``UNIQUE (session_id, version)`` and nothing else, WAL, the same ``synchronous``.

Peers, each only if importable (``pip install eventsourcing langgraph-checkpoint-sqlite
openai-agents`` into a throwaway venv with zagent's dependencies, then run this script with
that venv's python and ``PYTHONPATH`` at this checkout); never a dependency of zagent:

* eventsourcing: an ``Application`` on ``eventsourcing.sqlite``, one aggregate per session
  whose ``@event`` method records the body; W1 saves after each, W2 after 100; W3
  ``repository.get``; W4 a fresh application's ``recorder.select_events(desc=True, limit=100)``
  mapped to domain events;
* LangGraph's ``SqliteSaver``: ``put_writes`` of one (W1) or 100 (W2) writes per call; W3 and W4
  ``get_tuple`` of a checkpoint whose channel holds the session's bodies (one blob);
* the OpenAI Agents SDK's ``SQLiteSession``: ``add_items`` of one (W1) or 100 (W2) items; W3
  ``get_items()``; W4 a fresh session's ``get_items(limit=100)``.

Each runs with its own defaults (journal mode, ``synchronous``), as its users get it. All sides
run in rotating rounds (the order shifts every round), each on its own fresh file; the table
gives medians and the ratio to raw ``sqlite3`` measured in the same rounds.

    /root/.pyenv/versions/3.11.7/bin/python bench/peers.py [--quick] [-r ROUNDS]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from journal_append import BATCH, INSERT, create_raw, make_event, open_raw, session_events  # noqa: E402

from zagent_core.journal.events import Event, dump_event  # noqa: E402
from zagent_core.journal.fold import rebuild  # noqa: E402
from zagent_store import SQLiteJournal  # noqa: E402

TAIL = 100
TARGETS = {"W1": 1.1, "W2": 1.1, "W3": 0.8, "W4": 1.5, "W4r": 1.5}
_TAIL_SQL = "SELECT seq, version, type, at, data FROM events WHERE session_id = ? ORDER BY version DESC LIMIT ?"
_ALL_SQL = "SELECT seq, version, type, at, data FROM events WHERE session_id = ? ORDER BY version"


def body(event: Event) -> dict[str, Any]:
    """The event's body as a plain dict: what the raw side and the peers build and store."""
    return {"type": event.type, **json.loads(dump_event(event))}


#: One agent step's bodies; the raw side and the peers copy one per event in the loop (as
#: zagent builds its pydantic event there) and serialise it themselves.
STEP = [body(make_event(i)) for i in range(8)]


def built(i: int) -> dict[str, Any]:
    return {**STEP[i % len(STEP)], "call_id": f"call_{i // len(STEP):012x}"}


# -- the sides: each appends in a file of its own, and reads a session it wrote ----------------


class Side:
    """What every side does; a method a peer cannot do is left out (``None``)."""

    name = ""

    def start(self, path: Path) -> None:
        raise NotImplementedError

    def w1(self, i: int) -> None:
        raise NotImplementedError

    def w2(self, i: int) -> None:
        raise NotImplementedError

    def fill(self, path: Path, n: int) -> Any:
        """Write a session of ``n`` events (untimed); returns what the reads need."""
        raise NotImplementedError

    def w3(self, path: Path, key: Any) -> object:
        raise NotImplementedError

    def w4(self, path: Path, key: Any) -> object:
        raise NotImplementedError

    w4r: Callable[[Path, Any], object] | None = None

    def close(self) -> None:
        pass


class Zagent(Side):
    name = "zagent"

    def start(self, path: Path) -> None:
        self.journal = SQLiteJournal(path)

    def w1(self, i: int) -> None:
        self.journal.append("s1", [make_event(i)], i)

    def w2(self, i: int) -> None:
        self.journal.append("s1", [make_event(j) for j in range(i, i + BATCH)], i)

    def fill(self, path: Path, n: int) -> str:
        events = session_events(n)
        with SQLiteJournal(path, synchronous="OFF") as journal:
            for i in range(0, n, 1000):
                journal.append("long", events[i:i + 1000], i)
        return "long"

    def w3(self, path: Path, key: str) -> object:
        with SQLiteJournal(path) as journal:
            return rebuild(journal.read(key), history=True)

    def w4(self, path: Path, key: str) -> object:
        with SQLiteJournal(path) as journal:
            return journal.read_last(key, TAIL)

    def w4r(self, path: Path, key: str) -> object:  # type: ignore[override]
        with SQLiteJournal(path, read_only=True) as journal:
            return journal.read_last(key, TAIL)

    def close(self) -> None:
        self.journal.close()


class Raw(Side):
    name = "raw sqlite3"

    def start(self, path: Path) -> None:
        create_raw(path, "minimal")
        self.conn = open_raw(path, "FULL")

    @staticmethod
    def _row(i: int, at: str) -> tuple[Any, ...]:
        data = built(i)
        return ("s1", i + 1, data.pop("type"), at, data.get("call_id"), None, json.dumps(data))

    def w1(self, i: int) -> None:
        row = self._row(i, _stamp())
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute(INSERT, row)
        self.conn.execute("COMMIT")

    def w2(self, i: int) -> None:
        at = _stamp()  # one time per transaction, as zagent's append takes
        rows = [self._row(j, at) for j in range(i, i + BATCH)]
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.executemany(INSERT, rows)
        self.conn.execute("COMMIT")

    def fill(self, path: Path, n: int) -> str:
        create_raw(path, "minimal")
        conn = open_raw(path, "OFF")
        rows = [("long", v, e.type, _stamp(), e.__dict__.get("call_id"), None, dump_event(e))
                for v, e in enumerate(session_events(n), 1)]
        with conn:
            conn.execute("BEGIN")
            conn.executemany(INSERT, rows)
            conn.execute("COMMIT")
        conn.close()
        return "long"

    def w3(self, path: Path, key: str) -> object:
        conn = sqlite3.connect(path)
        try:
            return [(seq, v, t, at, json.loads(data)) for seq, v, t, at, data in conn.execute(_ALL_SQL, (key,))]
        finally:
            conn.close()

    def w4(self, path: Path, key: str) -> object:
        conn = sqlite3.connect(path)
        try:
            rows = conn.execute(_TAIL_SQL, (key, TAIL)).fetchall()
            return [(seq, v, t, at, json.loads(data)) for seq, v, t, at, data in reversed(rows)]
        finally:
            conn.close()

    def close(self) -> None:
        self.conn.close()


def _stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())


# -- peers (optional) ------------------------------------------------------------------------


def eventsourcing_side() -> type[Side]:
    from eventsourcing.application import Application
    from eventsourcing.domain import Aggregate, event

    class Session(Aggregate):
        def __init__(self) -> None:
            self.history: list[dict[str, Any]] = []

        @event("Recorded")
        def record(self, body: dict[str, Any]) -> None:
            self.history.append(body)

    def app(path: Path) -> Application:
        return Application(env={"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(path)})

    class EventSourcing(Side):
        name = "eventsourcing"

        def start(self, path: Path) -> None:
            self.app = app(path)
            self.session = Session()
            self.app.save(self.session)

        def w1(self, i: int) -> None:
            self.session.record(built(i))
            self.app.save(self.session)

        def w2(self, i: int) -> None:
            for j in range(i, i + BATCH):
                self.session.record(built(j))
            self.app.save(self.session)

        def fill(self, path: Path, n: int) -> uuid.UUID:
            application, session = app(path), Session()
            for i in range(n - 1):
                session.record(built(i))
                if i % 1000 == 999:
                    application.save(session)
            application.save(session)
            application.close()
            return session.id

        def w3(self, path: Path, key: uuid.UUID) -> object:
            application = app(path)
            try:
                return application.repository.get(key).history
            finally:
                application.close()

        def w4(self, path: Path, key: uuid.UUID) -> object:
            application = app(path)
            try:
                stored = application.recorder.select_events(key, desc=True, limit=TAIL)
                return [application.mapper.to_domain_event(s) for s in reversed(stored)]
            finally:
                application.close()

        def close(self) -> None:
            self.app.close()

    return EventSourcing


def langgraph_side() -> type[Side]:
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.sqlite import SqliteSaver

    def saver(path: Path) -> tuple[sqlite3.Connection, SqliteSaver]:
        conn = sqlite3.connect(path, check_same_thread=False)
        return conn, SqliteSaver(conn)

    class LangGraph(Side):
        name = "LangGraph SqliteSaver"

        def start(self, path: Path) -> None:
            self.conn, self.saver = saver(path)
            self.config = self.saver.put({"configurable": {"thread_id": "s1", "checkpoint_ns": ""}},
                                         empty_checkpoint(), {}, {})

        def w1(self, i: int) -> None:
            self.saver.put_writes(self.config, [("messages", built(i))], f"task{i}")

        def w2(self, i: int) -> None:
            self.saver.put_writes(self.config, [("messages", built(j)) for j in range(i, i + BATCH)], f"task{i}")

        def fill(self, path: Path, n: int) -> dict[str, Any]:
            conn, store = saver(path)
            checkpoint = empty_checkpoint()
            checkpoint["channel_values"] = {"messages": [built(i) for i in range(n)]}
            config = store.put({"configurable": {"thread_id": "long", "checkpoint_ns": ""}}, checkpoint, {}, {})
            conn.close()
            return config

        def w3(self, path: Path, key: dict[str, Any]) -> object:
            conn, store = saver(path)
            try:
                return store.get_tuple(key)
            finally:
                conn.close()

        w4 = w3  # the whole state is one blob: its tail is all of it

        def close(self) -> None:
            self.conn.close()

    return LangGraph


def openai_agents_side() -> type[Side]:
    from agents.memory import SQLiteSession

    class OpenAIAgents(Side):
        name = "openai-agents SQLiteSession"

        def start(self, path: Path) -> None:
            self.session = SQLiteSession("s1", path)

        def w1(self, i: int) -> None:
            asyncio.run(self.session.add_items([built(i)]))  # type: ignore[list-item]

        def w2(self, i: int) -> None:
            asyncio.run(self.session.add_items([built(j) for j in range(i, i + BATCH)]))  # type: ignore[misc]

        def fill(self, path: Path, n: int) -> str:
            session = SQLiteSession("long", path)
            for i in range(0, n, 1000):
                asyncio.run(session.add_items([built(j) for j in range(i, min(i + 1000, n))]))  # type: ignore[misc]
            session.close()
            return "long"

        def w3(self, path: Path, key: str) -> object:
            session = SQLiteSession(key, path)
            try:
                return asyncio.run(session.get_items())
            finally:
                session.close()

        def w4(self, path: Path, key: str) -> object:
            session = SQLiteSession(key, path)
            try:
                return asyncio.run(session.get_items(limit=TAIL))
            finally:
                session.close()

        def close(self) -> None:
            self.session.close()

    return OpenAIAgents


PEERS = {"eventsourcing": eventsourcing_side, "langgraph-checkpoint-sqlite": langgraph_side,
         "openai-agents": openai_agents_side}


# -- the rounds ------------------------------------------------------------------------------


def rotated(sides: list[Side], number: int) -> list[Side]:
    shift = number % len(sides)
    return sides[shift:] + sides[:shift]


def appends(sides: list[Side], tmp: Path, workload: str, rounds: int, per_round: int) -> dict[str, float]:
    """Median µs per event of each side's W1 or W2, ``per_round`` events a round."""
    for n, side in enumerate(sides):
        side.start(tmp / f"{workload}-{n}.db")
    spent: dict[str, list[float]] = {side.name: [] for side in sides}
    step = 1 if workload == "W1" else BATCH
    at = 0
    try:
        for number in range(rounds + 1):  # the first round warms up
            for side in rotated(sides, number):
                do = side.w1 if workload == "W1" else side.w2
                gc.collect()
                start = time.perf_counter()
                for i in range(at, at + per_round, step):
                    do(i)
                if number:
                    spent[side.name].append((time.perf_counter() - start) * 1e6 / per_round)
            at += per_round
    finally:
        for side in sides:
            side.close()
    return {name: statistics.median(times) for name, times in spent.items()}


def reads(sides: list[Side], tmp: Path, workload: str, rounds: int, n: int) -> dict[str, float]:
    """Median ms of each side's W3 (``rebuild``) or W4 (fresh connection, tail)."""
    keys = {side.name: side.fill(tmp / f"{workload}-{side.name}.db", n) for side in sides}
    spent: dict[str, list[float]] = {}
    kinds = ["w4", "w4r"] if workload == "W4" else ["w3"]
    for number in range(rounds + 1):
        for side in rotated(sides, number):
            for kind in kinds:
                read = getattr(side, kind)
                if read is None:
                    continue
                label = side.name + (" (read-only)" if kind == "w4r" else "")
                gc.collect()
                start = time.perf_counter()
                read(tmp / f"{workload}-{side.name}.db", keys[side.name])
                if number:
                    spent.setdefault(label, []).append((time.perf_counter() - start) * 1000)
    return {label: statistics.median(times) for label, times in spent.items()}


def show(workload: str, title: str, unit: str, figures: dict[str, float]) -> None:
    raw = figures["raw sqlite3"]
    print(f"{workload} {title}")
    for name, value in figures.items():
        ratio = value / raw
        target = ""
        if name.startswith("zagent"):
            limit = TARGETS["W4r" if "read-only" in name else workload]
            target = f"target <= {limit}x: {'ok' if ratio <= limit else f'MISSED by {(ratio / limit - 1) * 100:.0f}%'}"
        print(f"  {name:<40} {value:>10.2f} {unit:<6} {ratio:>6.2f}x  {target}")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: fewer rounds, smaller sessions")
    parser.add_argument("-r", "--rounds", type=int, help="rounds per workload (default 15, quick 3)")
    parser.add_argument("--no-peers", action="store_true", help="zagent and raw sqlite3 only")
    parser.add_argument("--only", action="append", choices=["W1", "W2", "W3", "W4"], help="these workloads only")
    parser.add_argument("--dir", help="where to put the temp databases (default: the system temp dir)")
    args = parser.parse_args()
    rounds = args.rounds or (3 if args.quick else 15)
    only = set(args.only or ["W1", "W2", "W3", "W4"])
    loaded, long = (2_000, 10_000) if args.quick else (10_000, 100_000)

    sides: list[Callable[[], Side]] = [Zagent, Raw]
    print(f"zagent's SQLite journal vs raw sqlite3 and its peers (SQLite {sqlite3.sqlite_version}, Python "
          f"{sys.version.split()[0]}, {os.cpu_count()} cpus); medians of {rounds} rotating rounds")
    if not args.no_peers:
        for package, make in PEERS.items():
            try:
                sides.append(make())
            except ImportError as exc:
                print(f"  {package}: skipped, not installed ({exc.name})")
    print()
    with tempfile.TemporaryDirectory(prefix="zagent-peers-", dir=args.dir) as tmp:
        for workload, title, per_round in (("W1", "one durable append per transaction (FULL), built in the loop", 100),
                                           ("W2", f"{BATCH} appends per transaction (FULL), built in the loop", 1000)):
            if workload not in only:
                continue
            figures = appends([make() for make in sides], Path(tmp), workload, rounds, per_round)
            show(workload, title, "µs/ev", figures)
        if "W3" in only:
            figures = reads([make() for make in sides], Path(tmp), "W3", rounds, loaded)
            show("W3", f"rebuild a {loaded:,}-event session's state, with history", "ms", figures)
        if "W4" in only:
            figures = reads([make() for make in sides], Path(tmp), "W4", rounds * 3, long)
            show("W4", f"tail ({TAIL} events) of a {long:,}-event session, fresh connection", "ms", figures)


if __name__ == "__main__":
    main()
