"""How soon an open console page hears of an append (issue 28): from the append's call to its
server-sent event, NOTIFY vs polling, side by side.

One console (zagent's own Starlette app under uvicorn, in this process) per feed, over the same
kind of journal, each followed by one page's stream (``/sessions/s1/events``, read with
``http.client``); another connection appends one event at a time, at a random moment of the poll
interval (so polling is not measured in phase with its own clock), and the time from the call of
``append`` to the ``head`` event that names its version is taken:

* ``NOTIFY (PostgreSQL)``: what ``zagent ui`` runs on PostgreSQL;
* ``polling 0.5 s (PostgreSQL)``: the same journal's feed polled, as it runs while its listening
  connection is down;
* ``polling 0.5 s (SQLite)``: what ``zagent ui`` runs on SQLite.

    /work/main/.venv/bin/python bench/ui_live.py [--quick] [-n APPENDS] [--url URL]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import random
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from journal_postgres import server  # noqa: E402
from pg_cluster import fresh_database  # noqa: E402

from zagent_core.journal.events import UserMessage  # noqa: E402
from zagent_core.journal.protocol import AdminJournal, ChangeFeed  # noqa: E402
from zagent_store import open_journal  # noqa: E402
from zagent_store.changes import POLL_SECONDS, NotifiedChanges, PolledChanges  # noqa: E402

TOKEN = "bench-token"


@contextlib.contextmanager
def console(location: str, feed: Callable[[AdminJournal], ChangeFeed]) -> Iterator[str]:
    """A console over the journal at ``location`` with the feed ``feed`` makes, served in a thread;
    yields its ``host:port``."""
    import uvicorn

    from zagent_cli.context import Context
    from zagent_cli.ui.app import Console, make_app

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = sock.getsockname()[1]
    with open_journal(location) as journal, tempfile.TemporaryDirectory() as home:
        app = Console(journal, Context(home, None, 0, location), TOKEN, cookie="bench", changes=lambda: feed(journal))
        served = uvicorn.Server(uvicorn.Config(make_app(app), log_level="warning", lifespan="off"))
        thread = threading.Thread(target=served.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        while not served.started:
            time.sleep(0.01)
        try:
            yield f"127.0.0.1:{port}"
        finally:
            app.live.close()
            served.should_exit = True
            thread.join(10)
            sock.close()


def next_head(stream: http.client.HTTPResponse) -> int:
    while True:
        line = stream.readline().decode()
        if not line:
            raise RuntimeError("the stream ended")
        if line.startswith("data: "):
            return int(line[6:])


def latencies(location: str, feed: Callable[[AdminJournal], ChangeFeed],
              appends: int) -> tuple[list[float], list[float]]:
    """ms from each append's call, and from its return (its commit), to the page's ``head`` event of its
    version."""
    with open_journal(location) as writer:
        writer.append("s1", [UserMessage(text="start")], 0)
        with console(location, feed) as address:
            connection = http.client.HTTPConnection(address, timeout=30)
            connection.request("GET", "/sessions/s1/events", headers={"Cookie": f"bench={TOKEN}"})
            stream = connection.getresponse()
            assert stream.status == 200, stream.read()
            version = next_head(stream)
            called, committed = [], []
            for _ in range(appends):
                time.sleep(random.uniform(0, POLL_SECONDS))  # a random moment of the poll interval
                start = time.perf_counter()
                writer.append("s1", [UserMessage(text="more")], version)
                returned = time.perf_counter()
                version += 1
                while next_head(stream) < version:
                    pass
                told = time.perf_counter()
                called.append((told - start) * 1000)
                committed.append((told - returned) * 1000)
            connection.close()
    return called, committed


def ninetieth(ordered: list[float]) -> float:
    return ordered[max(0, int(len(ordered) * 0.9) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="20 appends per feed")
    parser.add_argument("-n", "--appends", type=int, help="appends per feed (default 100)")
    parser.add_argument("--url", help="a PostgreSQL server's database (its user may create databases)")
    args = parser.parse_args()
    appends = args.appends or (20 if args.quick else 100)
    with server(args.url) as server_url, fresh_database(server_url) as notified_url, \
            fresh_database(server_url) as polled_url, tempfile.TemporaryDirectory() as folder:
        sides: list[tuple[str, str, Callable[[AdminJournal], ChangeFeed]]] = [
            ("NOTIFY (PostgreSQL)", notified_url, lambda j: NotifiedChanges(j)),  # type: ignore[arg-type]
            (f"polling {POLL_SECONDS} s (PostgreSQL)", polled_url, lambda j: PolledChanges(j)),  # type: ignore[arg-type]
            (f"polling {POLL_SECONDS} s (SQLite)", f"sqlite:///{folder}/journal.db",
             lambda j: PolledChanges(j)),  # type: ignore[arg-type]
        ]
        print(f"append to server-sent event, {appends} appends per feed, ms (Python {sys.version.split()[0]})")
        print(f"{'':30}{'from the call: median':>22}{'p90':>8}{'max':>8}{'from the commit: median':>25}{'p90':>8}")
        for label, location, feed in sides:
            called, committed = (sorted(spent) for spent in latencies(location, feed, appends))
            print(f"{label:30}{statistics.median(called):>22.1f}{ninetieth(called):>8.1f}{called[-1]:>8.1f}"
                  f"{statistics.median(committed):>25.1f}{ninetieth(committed):>8.1f}")


if __name__ == "__main__":
    main()
