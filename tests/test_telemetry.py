"""OpenTelemetry traces (issue 28): spans built from the journal, sent live as a session runs
and after the fact by ``zagent sessions trace``, with the same tree and ids both ways.

A real ``zagent run`` (scripted model, a sub-agent by ``spawn``) sends to a real OTLP/HTTP
receiver on 127.0.0.1 that decodes each ExportTraceServiceRequest; the mapping itself is also
checked with the SDK's InMemorySpanExporter.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import forked
import pytest
from conftest import PYTHON, wait_for
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otlp_receiver import answer

from zagent_core.history.spans import CONTENT_CHARS, TraceBuilder, session_spans, span_id_of, trace_id_of
from zagent_core.history.telemetry import export_spans, otlp_exporter, readable
from zagent_core.journal.events import (
    Outcome,
    SessionStarted,
    ToolCallFinished,
    ToolCallRejected,
    ToolCallRequested,
    TurnStarted,
)
from zagent_core.journal.protocol import StoredEvent
from zagent_store import SQLiteJournal

#: A root that reads a file and spawns a child, which lists the workspace.
SCRIPT = {
    "replies": [{"text": "looking", "tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}},
                                                   {"name": "spawn", "arguments": {"task": "list them"}}]},
                {"text": "done: SECRET-REPLY"}],
    "children": {"list them": [{"text": "", "tool_calls": [{"name": "list_files", "arguments": {"path": "."}}]},
                               {"text": "one file"}]},
}
CONTENT_KEYS = {"gen_ai.tool.call.arguments", "gen_ai.tool.call.result", "gen_ai.input.messages",
                "gen_ai.output.messages"}


class Receiver:
    """An OTLP/HTTP trace receiver on 127.0.0.1: every span of every request, as plain tuples."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        #: Each request's path, headers and resource attributes.
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        # Requests are handled in threads of their own; a span is kept before its request is answered,
        # so all have arrived once the sender exits.
        self.lock = threading.Lock()
        received = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                answer(self, lambda request: received.keep(request, self.path, dict(self.headers)))

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def keep(self, request: ExportTraceServiceRequest, path: str = "/v1/traces",
             headers: dict[str, str] | None = None) -> None:
        with self.lock:
            self.requests += [(path, headers or {}, {a.key: a.value.string_value for a in resource.resource.attributes})
                              for resource in request.resource_spans]
            self.spans += [_plain(span) for resource in request.resource_spans for scope in resource.scope_spans
                           for span in scope.spans]

    def take(self) -> list[dict[str, Any]]:
        with self.lock:
            taken, self.spans = self.spans, []
        return sorted(taken, key=lambda span: (span["start"], span["name"], span["span_id"]))


def _plain(span: Any) -> dict[str, Any]:
    def value(attribute: Any) -> Any:
        kind = attribute.value.WhichOneof("value")
        found = getattr(attribute.value, kind)
        return tuple(item.string_value for item in found.values) if kind == "array_value" else found

    return {"name": span.name, "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
            "parent": span.parent_span_id.hex() or None, "start": span.start_time_unix_nano,
            "end": span.end_time_unix_nano, "error": span.status.code == 2,
            "attributes": {a.key: value(a) for a in span.attributes}}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.server.shutdown()
    found.server.server_close()


def zagent(home: Path, *args: str, cwd: Path, env: dict[str, str] | None = None) -> Any:
    return forked.run([PYTHON, "-m", "zagent_cli", "--home", str(home), *args], capture_output=True, text=True,
                      cwd=cwd, timeout=120, env=None if env is None else {**os.environ, **env})


def run(home: Path, workspace: Path, telemetry: dict[str, Any], env: dict[str, str] | None = None) -> tuple[str, Any]:
    (home / "config.json").write_text(json.dumps({"telemetry": telemetry}))
    (workspace / "script.json").write_text(json.dumps(SCRIPT))
    (workspace / "a.txt").write_text("SECRET-FILE\n")
    result = zagent(home, "run", "--model", "scripted:script.json", "go", cwd=workspace, env=env)
    assert result.returncode == 0, result.stderr
    return result.stderr.split("session ", 1)[1].split(",")[0], result


def tree(spans: list[dict[str, Any]]) -> list[str]:
    """The spans as indented names, children in the order they started."""
    below: dict[str | None, list[dict[str, Any]]] = {}
    for span in spans:
        below.setdefault(span["parent"], []).append(span)
    ids = {span["span_id"] for span in spans}

    def lines(span: dict[str, Any], depth: int) -> list[str]:
        return ["  " * depth + span["name"]] + [
            line for child in below.get(span["span_id"], []) for line in lines(child, depth + 1)]

    return [line for span in spans if span["parent"] not in ids for line in lines(span, 0)]


def test_a_live_run_and_sessions_trace_send_the_same_spans(home_dir: Path, workspace: Path,
                                                           receiver: Receiver) -> None:
    session_id, _ = run(home_dir, workspace, {"otlp_endpoint": receiver.url})
    live = receiver.take()
    assert tree(live) == [
        "invoke_agent zagent",
        "  turn",
        "    chat scripted:script.json",
        "    execute_tool read_file",
        "    execute_tool spawn",
        "      invoke_agent child-1",
        "        turn",
        "          chat scripted:script.json#list%20them",
        "          execute_tool list_files",
        "          chat scripted:script.json#list%20them",
        "    chat scripted:script.json",
    ]
    assert {span["trace_id"] for span in live} == {f"{trace_id_of(session_id):032x}"}
    root = next(span for span in live if span["parent"] is None)
    assert root["span_id"] == f"{span_id_of(session_id):016x}"
    assert root["attributes"]["gen_ai.operation.name"] == "invoke_agent"
    assert root["attributes"]["gen_ai.conversation.id"] == session_id
    chat = next(span for span in live if span["name"].startswith("chat"))
    assert chat["attributes"]["gen_ai.operation.name"] == "chat"
    assert chat["attributes"]["gen_ai.request.model"] == "scripted:script.json"
    assert chat["attributes"]["gen_ai.usage.input_tokens"] > 0
    assert "gen_ai.usage.output_tokens" in chat["attributes"]
    tool = next(span for span in live if span["name"] == "execute_tool read_file")
    assert tool["attributes"]["gen_ai.tool.name"] == "read_file"
    assert tool["attributes"]["gen_ai.tool.call.id"]
    assert not CONTENT_KEYS & {key for span in live for key in span["attributes"]}

    after = zagent(home_dir, "sessions", "trace", session_id, "--endpoint", receiver.url, cwd=workspace)
    assert after.returncode == 0, after.stderr
    assert f"11 spans of session {session_id} sent to {receiver.url}/v1/traces" in after.stdout
    assert receiver.take() == live


def test_tracing_twice_gives_the_same_ids(home_dir: Path, workspace: Path, receiver: Receiver) -> None:
    session_id, _ = run(home_dir, workspace, {})
    sent = []
    for _ in range(2):
        assert zagent(home_dir, "sessions", "trace", session_id, "--endpoint", receiver.url,
                      cwd=workspace).returncode == 0
        sent.append(receiver.take())
    assert len(sent[0]) == 11
    assert sent[0] == sent[1]


def test_content_is_sent_only_with_capture_content(home_dir: Path, workspace: Path, receiver: Receiver) -> None:
    run(home_dir, workspace, {"otlp_endpoint": receiver.url, "capture_content": True})
    spans = receiver.take()
    read = next(span for span in spans if span["name"] == "execute_tool read_file")
    assert json.loads(read["attributes"]["gen_ai.tool.call.arguments"]) == {"path": "a.txt"}
    assert "SECRET-FILE" in read["attributes"]["gen_ai.tool.call.result"]
    assert any("SECRET-REPLY" in span["attributes"].get("gen_ai.output.messages", "") for span in spans)
    turn = next(span for span in spans if span["name"] == "turn")
    assert json.loads(turn["attributes"]["gen_ai.input.messages"])[0]["parts"][0]["content"] == "go"


def test_an_unreachable_collector_fails_nothing_and_is_said_once(home_dir: Path, workspace: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    started = time.monotonic()
    # A user and password in the URL, and the headers' key, are said nowhere, failing or not.
    session_id, result = run(home_dir, workspace, {"otlp_endpoint": f"http://user:PASSWORD@127.0.0.1:{closed}"},
                             env={"OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20SECRET-TOKEN"})
    took = time.monotonic() - started
    assert result.stderr.count("telemetry_export_failed") == 1, result.stderr
    assert f"endpoint=http://127.0.0.1:{closed}/v1/traces" in result.stderr
    assert "Traceback" not in result.stderr and "SECRET-TOKEN" not in result.stderr and "PASSWORD" not in result.stderr
    assert took < 10, took
    # Where a person waits for the export, a collector that does not take it is an error.
    traced = zagent(home_dir, "sessions", "trace", session_id, cwd=workspace)
    assert traced.returncode == 1
    assert traced.stderr == ("Error: the collector did not take the spans: check that it runs and listens on the "
                             "endpoint given (--endpoint, telemetry.otlp_endpoint or OTEL_EXPORTER_OTLP_ENDPOINT)\n")


def test_the_mapping_gives_the_sdk_the_session_tree(home_dir: Path, workspace: Path) -> None:
    session_id, _ = run(home_dir, workspace, {})
    exporter = InMemorySpanExporter()
    with SQLiteJournal(home_dir / "journal.db") as journal:
        assert export_spans(session_spans(journal, session_id), exporter) == 11
        child = next(span for span in exporter.get_finished_spans() if span.name == "invoke_agent child-1")
        spawn = next(span for span in exporter.get_finished_spans() if span.name == "execute_tool spawn")
        assert child.parent is not None and child.parent.span_id == spawn.context.span_id
        assert child.attributes is not None and child.attributes["gen_ai.agent.name"] == "child-1"
        # The child alone is in its root's trace, under the same spawn call.
        alone = list(session_spans(journal, str(child.attributes["gen_ai.conversation.id"])))
    assert {span.trace_id for span in alone} == {trace_id_of(session_id)}
    assert next(span for span in alone if span.name == "invoke_agent child-1").parent_id == spawn.context.span_id


def test_sessions_trace_without_a_collector_says_how_to_give_one(home_dir: Path, workspace: Path) -> None:
    session_id, _ = run(home_dir, workspace, {})
    result = zagent(home_dir, "sessions", "trace", session_id, cwd=workspace)
    assert result.returncode == 2
    assert "give --endpoint URL" in result.stderr and "Traceback" not in result.stderr


#: ``zagent`` in a process where OpenTelemetry cannot be imported, as without the ``otel`` extra.
WITHOUT_OTEL = """
import sys
for name in [name for name in sys.modules if name.split(".")[0] == "opentelemetry"]:
    del sys.modules[name]
class Missing:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "opentelemetry":
            raise ImportError(f"No module named {name!r}")
sys.meta_path.insert(0, Missing())
sys.argv = ["zagent", *sys.argv[1:]]
from zagent_cli.entry import main
main()
"""


def test_without_the_extra_a_run_says_how_to_install_it(home_dir: Path, workspace: Path, receiver: Receiver) -> None:
    (home_dir / "config.json").write_text(json.dumps({"telemetry": {"otlp_endpoint": receiver.url}}))
    (workspace / "script.json").write_text(json.dumps([{"text": "hi"}]))
    result = forked.run([PYTHON, "-c", WITHOUT_OTEL, "--home", str(home_dir), "run", "--model", "scripted:script.json",
                         "go"], capture_output=True, text=True, cwd=workspace, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "OpenTelemetry is not installed, so no spans are sent; install it with:" in result.stderr
    assert "[otel]" in result.stderr and "Traceback" not in result.stderr
    assert "hi" in result.stdout
    assert receiver.take() == []


def test_a_resumed_session_sends_only_what_it_added_and_its_session_span_again(
        home_dir: Path, workspace: Path, receiver: Receiver) -> None:
    session_id, _ = run(home_dir, workspace, {"otlp_endpoint": receiver.url})
    first = receiver.take()
    more = [{"text": "again", "tool_calls": [{"name": "list_files", "arguments": {"path": "."}}]}, {"text": "listed"}]
    (workspace / "script.json").write_text(json.dumps({**SCRIPT, "replies": [*SCRIPT["replies"], *more]}))
    resumed = zagent(home_dir, "resume", session_id, "once more", cwd=workspace)
    assert resumed.returncode == 0, resumed.stderr
    second = receiver.take()
    assert zagent(home_dir, "sessions", "trace", session_id, "--endpoint", receiver.url,
                  cwd=workspace).returncode == 0
    after = receiver.take()
    root = f"{span_id_of(session_id):016x}"
    # Each span but the session's own went out once, as it ended; the session's went out with
    # each drive, the last one as the journal tells it.
    live = [span for span in first + second if span["span_id"] != root]
    assert sorted(live, key=lambda span: span["span_id"]) == sorted(
        (span for span in after if span["span_id"] != root), key=lambda span: span["span_id"])
    assert [span for span in second if span["span_id"] == root] == [
        span for span in after if span["span_id"] == root]
    assert tree(after)[-4:] == ["  turn", "    chat scripted:script.json", "    execute_tool list_files",
                                "    chat scripted:script.json"]


def test_a_worker_sends_the_sessions_it_drives(home_dir: Path, workspace: Path, receiver: Receiver) -> None:
    (home_dir / "config.json").write_text(json.dumps({"telemetry": {"otlp_endpoint": receiver.url}}))
    (workspace / "script.json").write_text(json.dumps(SCRIPT))
    (workspace / "a.txt").write_text("SECRET-FILE\n")
    left = zagent(home_dir, "run", "--detach", "--model", "scripted:script.json", "go", cwd=workspace)
    assert left.returncode == 0, left.stderr
    session_id = left.stdout.strip().split()[-1]
    driven = zagent(home_dir, "worker", "--until-idle", "--poll", "0.05", cwd=workspace)
    assert driven.returncode == 0, driven.stderr
    live = receiver.take()
    assert len(tree(live)) == 11 and tree(live)[0] == "invoke_agent zagent"
    assert zagent(home_dir, "sessions", "trace", session_id, "--endpoint", receiver.url,
                  cwd=workspace).returncode == 0
    assert receiver.take() == live


def test_failed_calls_have_the_error_status_and_content_is_capped() -> None:
    at = datetime(2026, 11, 30, 6, 0, tzinfo=timezone.utc)
    events = [SessionStarted(origin="run", workspace="/w", zagent_version="0"), TurnStarted(reason="user"),
              ToolCallRequested(call_id="c1", tool="shell", arguments={"command": "false"}),
              ToolCallFinished(call_id="c1", output="x" * (CONTENT_CHARS + 10), is_error=True, exit_code=1,
                               duration_ms=5),
              ToolCallRequested(call_id="c3", tool="deploy", arguments={}),
              ToolCallFinished(call_id="c3", output="half done", is_error=False, exit_code=0, duration_ms=5,
                               outcome=Outcome(status="failure", reason="2 of 4 hosts failed")),
              ToolCallRequested(call_id="c2", tool="nope", arguments={}),
              ToolCallRejected(call_id="c2", reason="unknown_tool", message='unknown tool "nope"')]
    builder = TraceBuilder("s1", capture_content=True)
    ended = [span for version, event in enumerate(events, 1)
             for span in builder.feed(StoredEvent(version, "s1", version, at + timedelta(seconds=version), event))]
    shell, deploy, nope = ended
    assert deploy.error == "2 of 4 hosts failed" and deploy.attributes["zagent.tool.outcome"] == "failure"
    assert shell.error == "the tool reported an error" and shell.attributes["zagent.tool.exit_code"] == 1
    assert str(shell.attributes["gen_ai.tool.call.result"]).endswith("... [10 more characters in the journal]")
    assert nope.error == 'unknown tool "nope"' and nope.attributes["zagent.tool.outcome"] == "rejected"
    assert (shell.start, shell.end) == (at + timedelta(seconds=3), at + timedelta(seconds=4))
    session, turn = sorted(builder.close(), key=lambda span: span.start)
    assert turn.parent_id == session.span_id and shell.parent_id == turn.span_id and session.parent_id is None
    assert session.end == at + timedelta(seconds=8)


def test_otel_sdk_disabled_sends_nothing_live_nor_after(home_dir: Path, workspace: Path, receiver: Receiver) -> None:
    off = {"OTEL_SDK_DISABLED": "TRUE"}
    session_id, result = run(home_dir, workspace, {"otlp_endpoint": receiver.url}, env=off)
    assert receiver.take() == [] and "telemetry" not in result.stderr
    traced = zagent(home_dir, "sessions", "trace", session_id, "--endpoint", receiver.url, cwd=workspace, env=off)
    assert traced.returncode == 2 and "OTEL_SDK_DISABLED=true turns OpenTelemetry off" in traced.stderr
    assert receiver.take() == []
    # Only "true" disables (the specification's booleans): anything else is warned of, and exports.
    run(home_dir, workspace, {"otlp_endpoint": receiver.url}, env={"OTEL_SDK_DISABLED": "yes"})
    assert len(receiver.take()) == 11


def test_the_standard_variables_name_the_endpoint_headers_and_service(home_dir: Path, workspace: Path,
                                                                       receiver: Receiver) -> None:
    with socket.socket() as probe:  # the generic endpoint, which the traces' own must win over
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{closed}",
           "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{receiver.url}/collector/traces",  # used as it is
           "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Basic WRONG",
           "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "authorization=Bearer%20SECRET-TOKEN,x-team=agents",
           "OTEL_SERVICE_NAME": "billing-agents",
           "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=test,service.name=overridden"}
    session_id, result = run(home_dir, workspace, {}, env=env)
    assert len(receiver.take()) == 11
    for path, headers, resource in receiver.requests:
        assert path == "/collector/traces"
        assert {key.lower(): value for key, value in headers.items()}["authorization"] == "Bearer SECRET-TOKEN"
        assert resource["service.name"] == "billing-agents"
        assert resource["deployment.environment.name"] == "test" and resource["service.version"]
    # The headers are a secret: neither journaled nor said.
    assert "SECRET-TOKEN" not in result.stderr + result.stdout
    assert not [path for path in home_dir.rglob("*") if path.is_file() and b"SECRET-TOKEN" in path.read_bytes()]
    # The generic endpoint is a base URL that /v1/traces is added to; without OTEL_SERVICE_NAME, zagent.
    receiver.requests.clear()
    traced = zagent(home_dir, "sessions", "trace", session_id, cwd=workspace,
                    env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url + "/"})
    assert traced.returncode == 0, traced.stderr
    assert f"sent to {receiver.url}/v1/traces" in traced.stdout
    assert [(path, resource["service.name"]) for path, _, resource in receiver.requests] == [("/v1/traces", "zagent")]


class Refusing(BaseHTTPRequestHandler):
    """A collector that refuses every request (400: not retried), so an exporter logs at once."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_error(400, "refused")

    def log_message(self, *args: Any) -> None:
        return None


def test_zagents_exporter_is_quiet_without_silencing_the_applications_own(caplog: pytest.LogCaptureFixture) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    server = ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    at = datetime(2026, 11, 30, 6, 0, tzinfo=timezone.utc)
    builder = TraceBuilder("s1")
    builder.feed(StoredEvent(1, "s1", 1, at, SessionStarted(origin="run", workspace="/w", zagent_version="0")))
    span = readable(builder.close()[0])
    try:
        with caplog.at_level(logging.WARNING, logger="opentelemetry"):
            assert otlp_exporter(url).export([span]) is SpanExportResult.FAILURE
            assert [r for r in caplog.records if r.name.startswith("opentelemetry")] == []
            # The application's own exporter, in this same process and thread, still says its failures.
            assert OTLPSpanExporter(endpoint=url, timeout=2).export([span]) is SpanExportResult.FAILURE
        assert [r.levelno for r in caplog.records if r.name.startswith("opentelemetry.exporter")] == [logging.ERROR]
        assert logging.getLogger("opentelemetry.exporter.otlp.proto.http.trace_exporter").getEffectiveLevel() < \
            logging.CRITICAL
    finally:
        server.shutdown()
        server.server_close()


def sent_as_sessions_trace(home: Path, workspace: Path, session_id: str, receiver: Receiver) -> list[str]:
    """What the receiver got live is what ``sessions trace`` sends after: the tree of it."""
    live = receiver.take()
    traced = zagent(home, "sessions", "trace", session_id, "--endpoint", receiver.url, cwd=workspace)
    assert traced.returncode == 0, traced.stderr
    assert receiver.take() == live
    return tree(live)


def test_tools_run_and_compact_are_traced_live(home_dir: Path, workspace: Path, receiver: Receiver) -> None:
    (home_dir / "config.json").write_text(json.dumps({"telemetry": {"otlp_endpoint": receiver.url}}))
    (workspace / "a.txt").write_text("some text\n")
    ran = zagent(home_dir, "tools", "run", "read_file", "--args", '{"path": "a.txt"}', "--json", cwd=workspace)
    assert ran.returncode == 0, ran.stderr
    session_id = json.loads(ran.stdout)["session_id"]
    assert sent_as_sessions_trace(home_dir, workspace, session_id, receiver) == [
        "invoke_agent zagent", "  execute_tool read_file"]

    session_id, _ = run(home_dir, workspace, {"otlp_endpoint": receiver.url})
    receiver.take()
    (workspace / "script.json").write_text(json.dumps({**SCRIPT, "replies": [*SCRIPT["replies"], {"text": "a summary"}]}))
    compacted = zagent(home_dir, "compact", session_id, cwd=workspace)
    assert compacted.returncode == 0, compacted.stderr
    live = receiver.take()
    assert [span["name"] for span in live] == ["invoke_agent zagent", "chat scripted:script.json"]
    assert live[1]["attributes"]["zagent.compaction.trigger"] == "manual"


def test_an_mcp_serve_connection_is_traced_live(home_dir: Path, workspace: Path, receiver: Receiver) -> None:
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    (home_dir / "config.json").write_text(json.dumps({"telemetry": {"otlp_endpoint": receiver.url}}))
    (workspace / "a.txt").write_text("some text\n")
    argv = ["-m", "zagent_cli", "--home", str(home_dir), "--workspace", str(workspace), "mcp", "serve"]

    async def scenario() -> None:
        async with Client(StdioServerParameters(command=PYTHON, args=argv)) as client:
            assert not (await client.call_tool("read_file", {"path": "a.txt"})).is_error
            assert (await client.call_tool("read_file", {"path": "missing.txt"})).is_error

    anyio.run(scenario)
    with SQLiteJournal(home_dir / "journal.db") as journal:
        (session_id,) = [found.session_id for found in journal.sessions()]
    # The server sends the session's span once the session has ended, as its client went away.
    wait_for(lambda: f"{span_id_of(session_id):016x}" in {span["span_id"] for span in receiver.spans},
             "the server's last spans", seconds=30)
    assert sent_as_sessions_trace(home_dir, workspace, session_id, receiver) == [
        "invoke_agent zagent", "  execute_tool read_file", "  execute_tool read_file"]


def test_zagent_chat_is_traced_live(home_dir: Path, workspace: Path, receiver: Receiver) -> None:
    import pexpect

    session_id, _ = run(home_dir, workspace, {"otlp_endpoint": receiver.url})
    receiver.take()
    (workspace / "script.json").write_text(json.dumps({**SCRIPT, "replies": [
        *SCRIPT["replies"], {"text": "", "tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]},
        {"text": "Read the file again."}]}))
    child = pexpect.spawn(PYTHON, ["-m", "zagent_cli", "--home", str(home_dir), "chat", session_id],
                          env={**os.environ, "TERM": "xterm", "NO_COLOR": "1", "PROMPT_TOOLKIT_NO_CPR": "1"},
                          cwd=str(workspace), encoding="utf-8", timeout=30, dimensions=(50, 200))
    child.expect_exact("you>")
    child.send("read it again\r")
    child.expect_exact("assistant: Read the file again.")  # the turn's last reply (not the echo of what was typed)
    child.expect_exact("you>")
    child.sendeof()
    child.expect_exact(f"[left session {session_id};")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    live = receiver.take()
    # The chat's own turn, and the session's span again (the session span's end is its last event).
    # Compared as a tree: a request's start (its reply's time less its rounded duration) may fall a
    # millisecond before its turn's.
    assert tree(live) == ["invoke_agent zagent", "  turn", "    chat scripted:script.json",
                          "    execute_tool read_file", "    chat scripted:script.json"]
    traced = zagent(home_dir, "sessions", "trace", session_id, "--endpoint", receiver.url, cwd=workspace)
    assert traced.returncode == 0, traced.stderr
    after = {span["span_id"]: span for span in receiver.take()}
    assert all(after[span["span_id"]] == span for span in live)


def test_a_drive_sends_again_what_every_dead_drive_before_it_ended() -> None:
    from zagent_core.history.spans import unsent_after
    from zagent_core.journal.events import SessionResumed, UserMessage
    from zagent_store.memory import MemoryJournal

    dead = {"host": "h", "pid": 1}
    # Drive 1 ends well; drives 2 and 3 die; 4 takes over; 5 starts after 4 let go; 6 takes over from 5.
    events = [SessionStarted(origin="run", workspace="/w", zagent_version="0"), UserMessage(text="1"),
              SessionResumed(zagent_version="0"), UserMessage(text="2"),
              SessionResumed(zagent_version="0", taken_over_from=dead), UserMessage(text="3"),
              SessionResumed(zagent_version="0", taken_over_from=dead), UserMessage(text="4"),
              SessionResumed(zagent_version="0"), UserMessage(text="5"),
              SessionResumed(zagent_version="0", taken_over_from=dead)]
    journal = MemoryJournal()
    journal.append("s", events, 0)
    # The drive that appended version before + 1: where it sends from.
    assert [unsent_after(journal, "s", before) for before in (0, 2, 4, 6, 8, 10)] == [0, 2, 2, 2, 8, 8]
    assert unsent_after(journal, "s", 11) == 11  # a drive not begun by an event of its own: as given


HANG = """
import json, pathlib, sys, time
args = json.load(sys.stdin)
pathlib.Path(args["marker"]).write_text("started")
deadline = time.monotonic() + 60  # bounded: the test lets it go as it ends
while not pathlib.Path(args["marker"] + ".release").exists() and time.monotonic() < deadline:
    time.sleep(0.05)
print("let go")
"""


def killed_mid_call_then_resumed(home: Path, workspace: Path, marker: Path, receiver: Receiver, script: Any,
                                 delay: str, sent_before_kill: int = 0) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    """``zagent run`` of ``script`` (whose ``hang`` call writes ``marker``), SIGKILLed once the call
    runs (and the receiver got ``sent_before_kill`` spans), then ``zagent resume``: the session, the
    spans the killed run sent and those the resume sent. ``delay``: the killed run's OTEL_BSP_SCHEDULE_DELAY (ms)."""
    tool = home / "tools" / "hang"
    tool.mkdir(parents=True)
    (tool / "main.py").write_text(HANG)
    (tool / "hang.json").write_text(json.dumps({
        "description": "waits to be let go", "command": [PYTHON, "main.py"],
        "parameters": {"type": "object", "properties": {"marker": {"type": "string"}}, "required": ["marker"]}}))
    (home / "config.json").write_text(json.dumps({"telemetry": {"otlp_endpoint": receiver.url}}))
    (workspace / "script.json").write_text(json.dumps(script))
    killed = forked.Popen([PYTHON, "-m", "zagent_cli", "--home", str(home), "run", "--model", "scripted:script.json",
                           "go"], cwd=workspace, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          env={**os.environ, "OTEL_BSP_SCHEDULE_DELAY": delay})
    try:
        assert killed.stderr is not None
        session_id = killed.stderr.readline().split()[1].rstrip(",")
        wait_for(marker.exists, "the hanging call to run", seconds=60)
        wait_for(lambda: len(receiver.spans) >= sent_before_kill, "the killed run's first spans", seconds=30)
        killed.send_signal(signal.SIGKILL)
        assert killed.wait(timeout=30) == -signal.SIGKILL
        before_kill = receiver.take()
        resumed = zagent(home, "resume", session_id, "--model", "scripted:script.json", cwd=workspace)
        assert resumed.returncode == 0, resumed.stderr
    finally:
        marker.with_name(marker.name + ".release").write_text("")
        if killed.poll() is None:
            killed.kill()
            killed.wait()
    return session_id, before_kill, receiver.take()


def merged_equals_sessions_trace(home: Path, workspace: Path, session_id: str, receiver: Receiver,
                                 live: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The spans ``live`` sent, merged by span id (each one sent twice sent the same both times), are
    the ones ``sessions trace`` sends: those, by span id."""
    traced = zagent(home, "sessions", "trace", session_id, "--endpoint", receiver.url, cwd=workspace)
    assert traced.returncode == 0, traced.stderr
    after = {span["span_id"]: span for span in receiver.take()}
    merged: dict[str, dict[str, Any]] = {}
    for span in live:
        assert merged.setdefault(span["span_id"], span) == span, (span, merged[span["span_id"]])
    assert merged == after
    cut = next(span for span in after.values() if span["name"] == "execute_tool hang")
    assert cut["error"] and cut["attributes"]["zagent.tool.outcome"] == "interrupted"
    return after


#: How long the killed run's batching processor waits before sending (ms): 10, it has sent its first
#: spans when it is killed (the resume sends them again, the same); 10 minutes, it has sent none.
@pytest.mark.parametrize("delay", ["10", "600000"])
def test_a_session_killed_mid_call_and_resumed_sends_the_trace_sessions_trace_gives(
        home_dir: Path, workspace: Path, tmp_path: Path, receiver: Receiver, delay: str) -> None:
    (workspace / "a.txt").write_text("some text\n")
    marker = tmp_path / "started"
    script = [{"text": "reading", "tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]},
              {"text": "now the long one", "tool_calls": [{"name": "hang", "arguments": {"marker": str(marker)}}]},
              {"text": "it was cut off; done"}]
    session_id, killed, resumed = killed_mid_call_then_resumed(home_dir, workspace, marker, receiver, script, delay,
                                                               sent_before_kill=3 if delay == "10" else 0)
    # The killed run sent the spans it ended (or none of them, they died in its queue), never an open one.
    assert sorted(span["name"] for span in killed) == (
        ["chat scripted:script.json", "chat scripted:script.json", "execute_tool read_file"] if delay == "10" else [])
    after = merged_equals_sessions_trace(home_dir, workspace, session_id, receiver, killed + resumed)
    cut = next(span for span in after.values() if span["name"] == "execute_tool hang")
    assert cut["parent"] == next(span["span_id"] for span in after.values() if span["name"] == "turn"
                                 and span["start"] <= cut["start"] <= span["end"])
    assert tree(sorted(after.values(), key=lambda span: (span["start"], span["name"])))[0] == "invoke_agent zagent"


def test_a_sub_agent_killed_mid_call_and_resumed_sends_the_trace_sessions_trace_gives(
        home_dir: Path, workspace: Path, tmp_path: Path, receiver: Receiver) -> None:
    """The resume's settling drives the cut-off sub-agent to its end before the trace listens:
    its spans are read from the journal, those of its killed run too."""
    marker = tmp_path / "started"
    script = {"replies": [{"text": "", "tool_calls": [{"name": "spawn", "arguments": {"task": "hang there"}}]},
                          {"text": "the child is back"}],
              "children": {"hang there": [
                  {"text": "", "tool_calls": [{"name": "hang", "arguments": {"marker": str(marker)}}]},
                  {"text": "cut off"}]}}
    session_id, killed, resumed = killed_mid_call_then_resumed(home_dir, workspace, marker, receiver, script,
                                                               "600000")
    assert killed == []
    after = merged_equals_sessions_trace(home_dir, workspace, session_id, receiver, resumed)
    assert tree(sorted(after.values(), key=lambda span: (span["start"], span["name"]))) == [
        "invoke_agent zagent", "  turn", "    chat scripted:script.json", "    execute_tool spawn",
        "      invoke_agent child-1", "        turn", "          chat scripted:script.json#hang%20there",
        "          execute_tool hang", "        turn", "          chat scripted:script.json#hang%20there",
        "  turn", "    chat scripted:script.json"]
