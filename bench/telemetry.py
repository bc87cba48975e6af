"""Live tracing's cost per tool call: the same built-in call (``read_file`` of a small file,
no process, so the engine's own overhead is what is timed) in a session traced live and in
one that is not, side by side in one process.

Both sessions live in one temp home and journal (SQLite). The traced one has a
:class:`~zagent_core.history.telemetry.LiveTrace` subscribed, as every driver does, sending
through the SDK's batching processor over OTLP/HTTP to a receiver in this process (the tests'
``tests/otlp_receiver.py`` handler, decoding each request), or, with ``--down``, to a port no
one listens on (the collector unreachable: the exporter's retries run beside the calls). The
two sessions alternate call by call, which goes first flipping every iteration. The table
shows the median and mean microseconds per call, the difference, and the spans received.

    .venv/bin/python bench/telemetry.py [--quick] [-n CALLS] [--down]
"""

from __future__ import annotations

import argparse
import gc
import socket
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from otlp_receiver import answer  # noqa: E402

from zagent_core import Engine, Home  # noqa: E402
from zagent_core.config import Config, TelemetryConfig  # noqa: E402
from zagent_core.history.telemetry import live_trace  # noqa: E402
from zagent_store import SQLiteJournal  # noqa: E402


def receiver() -> tuple[ThreadingHTTPServer, list[int]]:
    """An OTLP/HTTP receiver on 127.0.0.1, counting the spans it decodes."""
    received = [0]
    lock = threading.Lock()

    def keep(request: Any) -> None:
        with lock:
            received[0] += sum(len(scope.spans) for resource in request.resource_spans
                               for scope in resource.scope_spans)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            answer(self, keep)

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, received


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=2000, help="calls per session (default 2000)")
    parser.add_argument("--quick", action="store_true", help="200 calls")
    parser.add_argument("--down", action="store_true", help="send to a port nothing listens on")
    args = parser.parse_args()
    calls = 200 if args.quick else args.n
    server, received = receiver()
    url = f"http://127.0.0.1:{closed_port() if args.down else server.server_address[1]}"
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "ws").mkdir()
        (root / "ws" / "a.txt").write_text("a line\n" * 20)
        with SQLiteJournal(root / "journal.db") as journal:
            engine = Engine(Home(root / "home"), journal, workspace=root / "ws", config=Config())
            plain = engine.start_session("bench")
            traced = engine.start_session("bench")
            trace = live_trace(journal, TelemetryConfig(otlp_endpoint=url), traced.session_id, 0)
            assert trace is not None
            traced.subscribe(trace.event, descendants=True)
            times: dict[str, list[float]] = {"off": [], "on": []}
            for session in (plain, traced):  # warm up: imports, first appends
                for _ in range(20):
                    session.call("read_file", {"path": "a.txt"})
            gc.collect()
            for i in range(calls):
                order = [("off", plain), ("on", traced)]
                for kind, session in order if i % 2 else order[::-1]:
                    started = time.perf_counter()
                    result = session.call("read_file", {"path": "a.txt"})
                    times[kind].append(time.perf_counter() - started)
                    assert not result.is_error
            closing = time.perf_counter()
            trace.close()
            closed = time.perf_counter() - closing
            plain.release()
            traced.release()
    server.shutdown()
    off, on = (statistics.median(times[k]) * 1e6 for k in ("off", "on"))
    mean_off, mean_on = (statistics.fmean(times[k]) * 1e6 for k in ("off", "on"))
    print(f"{calls} read_file calls per session, collector {'down' if args.down else 'up'} ({url})")
    print(f"{'':22}{'median us':>12}{'mean us':>12}")
    print(f"{'tracing off':22}{off:12.0f}{mean_off:12.0f}")
    print(f"{'tracing on':22}{on:12.0f}{mean_on:12.0f}")
    print(f"{'difference':22}{on - off:12.0f}{mean_on - mean_off:12.0f}   ({(on / off - 1) * 100:+.1f}% median)")
    print(f"close (last batch, flush): {closed * 1000:.0f} ms; spans received: {received[0]}")


if __name__ == "__main__":
    main()
