"""An OTLP/HTTP trace receiver for the docs' transcripts (docs/telemetry.md): it stands where
Jaeger would, on 127.0.0.1:PORT, takes every ExportTraceServiceRequest it can decode (400 for
anything else), and stops by itself once no request came for SECONDS (default 30).

    python tests/otlp_receiver.py PORT [SECONDS]

It keeps nothing, so a receiver a run before left on the port answers the same.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


def answer(handler: BaseHTTPRequestHandler, take: Callable[[ExportTraceServiceRequest], None]) -> None:
    """Read the request ``handler`` was given and answer it as a collector does: ``take`` it, then
    200 (so the sender knows it was kept); 400 for a body that is no ExportTraceServiceRequest."""
    try:
        request = ExportTraceServiceRequest.FromString(handler.rfile.read(int(handler.headers["Content-Length"])))
    except DecodeError:
        handler.send_error(400, "not an ExportTraceServiceRequest")
        return
    take(request)
    body = ExportTraceServiceResponse().SerializeToString()
    handler.send_response(200)
    handler.send_header("Content-Type", "application/x-protobuf")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        answer(self, lambda request: None)

    def log_message(self, *args: object) -> None:
        return None


def main(port: int, seconds: float) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
    server.timeout = seconds
    idle: list[bool] = []
    server.handle_timeout = lambda: idle.append(True)  # type: ignore[method-assign]
    while not idle:
        server.handle_request()
    server.server_close()


if __name__ == "__main__":
    main(int(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else 30.0)
