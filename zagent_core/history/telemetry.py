"""Sending sessions' spans (:mod:`zagent_core.history.spans`) to an OTLP/HTTP collector: live,
as a session's events are appended (:class:`LiveTrace`), or after the fact (:func:`export_spans`).

Needs the ``zagent[otel]`` extra; every OpenTelemetry import is here, and only here. Live spans go
through the SDK's ``BatchSpanProcessor``: a call pays for putting a span on its queue, never for
the network, and a collector that cannot be reached is logged once, never raised.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from zagent_core.errors import ZagentError
from zagent_core.history.spans import Span, TraceBuilder, span_id_of, trace_root, unsent_after
from zagent_core.journal.events import ChildEnded
from zagent_core.logs import get_logger
from zagent_core.version import install_command, zagent_version

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter, SpanProcessor

    from zagent_core.config import TelemetryConfig
    from zagent_core.journal.protocol import Journal, StoredEvent

log = get_logger(__name__)

#: How long one export request may take, retries included; a CLI run waits at most this long
#: at its end for a collector that does not answer.
EXPORT_TIMEOUT_SECONDS = 5.0
#: Spans sent in one request by ``zagent sessions trace`` (the batching processor's own default, live).
EXPORT_BATCH = 512
#: The loggers an OTLP/HTTP export logs its failures on (each retry too): zagent says a failure its
#: own way, once, so their records are dropped while, and only while, one of zagent's exports runs.
_EXPORTER_LOGGERS = ("opentelemetry.exporter.otlp.proto.http.trace_exporter", "opentelemetry.exporter.otlp.common.http")


class TelemetryUnavailableError(ZagentError, RuntimeError):
    """Telemetry is asked for, but the OpenTelemetry packages (the ``otel`` extra) are not installed."""


class ExportFailedError(ZagentError, RuntimeError):
    """The collector did not take the spans (``zagent sessions trace``, where a person waits for it)."""


def sdk_disabled() -> bool:
    """Whether ``OTEL_SDK_DISABLED`` turns every export off: only ``true`` (any case) does, as the
    specification's booleans say; any other value is false, and one that is not ``false`` either is warned of."""
    value = os.environ.get("OTEL_SDK_DISABLED", "").strip().lower()
    if value not in ("", "true", "false"):
        log.warning("telemetry_bad_variable", variable="OTEL_SDK_DISABLED", value=value,
                    hint='only "true" disables OpenTelemetry; this value is taken as false')
    return value == "true"


def _exports_live() -> bool:
    """Whether the standard variables let a drive export (``OTEL_SDK_DISABLED=true`` and
    ``OTEL_TRACES_EXPORTER=none`` do not)."""
    exporters = {name.strip().lower() for name in os.environ.get("OTEL_TRACES_EXPORTER", "").split(",")}
    return not sdk_disabled() and exporters != {"none"}


def traces_url(config: TelemetryConfig, given: str | None = None) -> str | None:
    """Where spans go, the first of: ``given`` (``--endpoint``) and config's ``otlp_endpoint``, base
    URLs that ``/v1/traces`` is added to; ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, used as it is; and
    ``OTEL_EXPORTER_OTLP_ENDPOINT``, a base URL (as the OTLP exporter specification reads them).
    None when nothing names one."""
    signal = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    base = given or config.otlp_endpoint or ("" if signal else os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip())
    if base:
        base = base.rstrip("/")
        return base if base.endswith("/v1/traces") else f"{base}/v1/traces"
    return signal or None


def shown_url(url: str) -> str:
    """``url`` as logs and messages show it: without the user and password it may carry."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=host))


def otlp_exporter(url: str) -> SpanExporter:
    """An OTLP/HTTP exporter to ``url``, with the headers of ``OTEL_EXPORTER_OTLP_TRACES_HEADERS`` or
    ``OTEL_EXPORTER_OTLP_HEADERS`` (the exporter reads them; zagent never journals nor logs them). Its
    own failure logs are dropped while it exports (:class:`_WhileZagentExports`): its caller says
    them. :class:`TelemetryUnavailableError` without the extra."""
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise TelemetryUnavailableError(
            "telemetry is configured (telemetry.otlp_endpoint or OTEL_EXPORTER_OTLP_ENDPOINT), but OpenTelemetry is "
            f"not installed, so no spans are sent; install it with: {install_command('otel')}") from None
    return _quietly(OTLPSpanExporter(endpoint=url, timeout=EXPORT_TIMEOUT_SECONDS))


#: ``active`` is set in a thread while one of zagent's exporters runs there.
_exporting = threading.local()


class _WhileZagentExports(logging.Filter):
    """Drops the OTLP exporter's records made in a thread while zagent's exporter runs there, and
    no others: an application's own exporter, in the same process, logs as it always did."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(_exporting, "active", False)


def _quiet_filter() -> None:
    """The filter, on each exporter logger, once (a logger's filters see only the records it makes itself)."""
    for name in _EXPORTER_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(found, _WhileZagentExports) for found in logger.filters):
            logger.addFilter(_WhileZagentExports())


def _quietly(inner: SpanExporter) -> SpanExporter:
    """``inner``, whose own logging is dropped while it exports or shuts down (see :class:`_WhileZagentExports`)."""
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    _quiet_filter()

    class Quiet(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            _exporting.active = True
            try:
                return inner.export(spans)
            finally:
                _exporting.active = False

        def shutdown(self) -> None:
            _exporting.active = True
            try:
                inner.shutdown()
            finally:
                _exporting.active = False

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return inner.force_flush(timeout_millis)

    return Quiet()


def _reported_once(inner: SpanExporter, url: str) -> SpanExporter:
    """``inner``, whose first failure is logged (``telemetry_export_failed``) and the rest are not:
    a live session never hears of its collector's trouble."""
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    where = shown_url(url)

    class ReportedOnce(SpanExporter):
        failed = False

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            try:
                result = inner.export(spans)
            except Exception as exc:  # noqa: BLE001 - a collector's trouble must never reach a call
                result, why = SpanExportResult.FAILURE, str(exc)
            else:
                why = "the collector did not take them"
            if result is SpanExportResult.FAILURE and not self.failed:
                self.failed = True
                log.warning("telemetry_export_failed", endpoint=where, reason=why,
                            hint="spans are dropped; check that the collector runs and telemetry.otlp_endpoint")
            return result

        def shutdown(self) -> None:
            inner.shutdown()

    return ReportedOnce()


def readable(span: Span) -> ReadableSpan:
    """``span`` as the OpenTelemetry SDK hands spans to exporters."""
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

    def context(span_id: int) -> SpanContext:
        return SpanContext(span.trace_id, span_id, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))

    return ReadableSpan(
        span.name, context(span.span_id), None if span.parent_id is None else context(span.parent_id),
        resource=_resource(), attributes=dict(span.attributes),
        kind=SpanKind.CLIENT if span.attributes.get("gen_ai.operation.name") == "chat" else SpanKind.INTERNAL,
        status=Status(StatusCode.ERROR, span.error) if span.error is not None else Status(StatusCode.UNSET),
        start_time=_nanoseconds(span.start), end_time=_nanoseconds(span.end),
        instrumentation_scope=InstrumentationScope("zagent", zagent_version()))


@functools.cache
def _resource() -> Any:
    """Who sent the spans: made once, as the SDK's detectors (run by ``create``) cost a thread pool each time."""
    from opentelemetry.sdk.resources import OTELResourceDetector, Resource

    # zagent's name and version unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise
    # (create() would put its given attributes over the variables' own).
    given = OTELResourceDetector().detect().attributes
    return Resource.create({"service.name": "zagent", "service.version": zagent_version(), **given})


def _nanoseconds(at: datetime) -> int:
    return int(at.replace(microsecond=0).timestamp()) * 1_000_000_000 + at.microsecond * 1000


def export_spans(spans: Iterable[Span], exporter: SpanExporter) -> int:
    """Send ``spans`` in batches of :data:`EXPORT_BATCH` (:class:`ExportFailedError` when one is
    refused); how many were sent. The exporter is shut down after."""
    from opentelemetry.sdk.trace.export import SpanExportResult

    sent, batch = 0, []
    try:
        for span in spans:
            batch.append(readable(span))
            if len(batch) == EXPORT_BATCH:
                sent += _sent(exporter, batch, SpanExportResult.SUCCESS)
                batch = []
        if batch:
            sent += _sent(exporter, batch, SpanExportResult.SUCCESS)
    finally:
        exporter.shutdown()
    return sent


def _sent(exporter: SpanExporter, batch: list[ReadableSpan], success: Any) -> int:
    try:
        taken = exporter.export(batch) is success
    except Exception:  # noqa: BLE001 - said as the refusal it is, whatever the exporter's way of failing
        taken = False
    if not taken:
        raise ExportFailedError("the collector did not take the spans: check that it runs and listens on the "
                                "endpoint given (--endpoint, telemetry.otlp_endpoint or OTEL_EXPORTER_OTLP_ENDPOINT)")
    return len(batch)


class LiveTrace:
    """A session's spans, sent as its events (and its sub-agents') are appended: subscribe
    :meth:`event` to the session with ``descendants``, and :meth:`close` when the drive ends.

    A session resumed is read from its journal once, quietly, up to where this drive began, so
    the spans still open then (the session's own, a turn, a call) go out with their real start,
    when they end. A drive that took the session over from a dead one sends again what that one
    ended (:func:`~zagent_core.history.spans.unsent_after`): the same spans, as they are made from
    the journal alone. A turn or a call still open when the drive ends (parked on a person) is
    sent by the drive that journals its end; sessions' own spans, which no event ends, are sent
    at the end of each drive that appended to them: the one span sent again with a later end
    (same id and start).
    """

    def __init__(self, journal: Journal, session_id: str, before: int, processor: SpanProcessor, *,
                 capture_content: bool = False) -> None:
        self._journal = journal
        self._session_id = session_id
        self._processor = processor
        self._builder = TraceBuilder(trace_root(journal, session_id), capture_content=capture_content)
        #: The last version fed, per session.
        self._seen: dict[str, int] = {}
        #: Spans ended at or before this journal position were sent by an earlier drive (one
        #: position for the whole tree: a sub-agent is driven by its parent's drive).
        self._quiet = unsent_after(journal, session_id, before)
        #: The sessions this drive appended to: their own spans go out when it ends.
        self._touched: set[str] = set()
        #: Sub-agents whose end was fed: their events are read from the journal (a sub-agent that
        #: a resume's settling drove to its end ran before this trace listened).
        self._ended_children: list[str] = []
        # Listeners are told from whichever thread appended (background watchers, sub-agents).
        self._lock = threading.Lock()

    def event(self, stored: StoredEvent) -> None:
        """Feed one appended event (and any of its session's earlier events not yet fed)."""
        with self._lock:
            if stored.version <= self._seen.get(stored.session_id, 0):
                return
            self._catch_up(stored.session_id, stored.version)
            self._feed(stored)
            self._read_ended_children()

    def close(self) -> None:
        """Feed what the session appended after the last event heard, send the spans of the
        sessions this drive appended to, and flush: waits for the collector at most
        :data:`EXPORT_TIMEOUT_SECONDS` per batch. Never raises. Close it before the session's lease
        is let go: a drive killed while it flushes leaves its lease to be taken over, and the next
        drive sends its spans again."""
        try:
            with self._lock:
                self._catch_up(self._session_id, None)
                self._read_ended_children()
                touched = {span_id_of(session_id) for session_id in self._touched}
                # A turn or call still open ends later, in the journal: sent then, not as cut off here.
                for span in self._builder.close(unfinished=False):
                    if span.span_id in touched:
                        self._processor.on_end(readable(span))
        except Exception:  # noqa: BLE001 - the drive's outcome stands whatever its trace's fate
            log.warning("telemetry_close_failed", exc_info=True, session=self._session_id)
        finally:
            self._processor.shutdown()

    def _catch_up(self, session_id: str, below: int | None) -> None:
        """Feed the session's events not yet fed, up to version ``below`` (None: all)."""
        seen = self._seen.get(session_id, 0)
        if below is not None and below <= seen + 1:
            return
        for earlier in self._journal.read(session_id, after_version=seen):
            if below is not None and earlier.version >= below:
                break
            self._feed(earlier)

    def _read_ended_children(self) -> None:
        while self._ended_children:  # one read at a time: grandchildren join the list as they are fed
            self._catch_up(self._ended_children.pop(), None)

    def _feed(self, stored: StoredEvent) -> None:
        self._seen[stored.session_id] = stored.version
        ended = self._builder.feed(stored)
        if stored.seq > self._quiet:
            self._touched.add(stored.session_id)
            for span in ended:
                self._processor.on_end(readable(span))
        if isinstance(stored.event, ChildEnded):
            self._ended_children.append(stored.event.child_session_id)


def live_trace(journal: Journal, config: TelemetryConfig, session_id: str, before: int) -> LiveTrace | None:
    """A :class:`LiveTrace` of the session when telemetry is configured and the standard variables
    do not turn it off (:func:`_exports_live`), else None (:class:`TelemetryUnavailableError` when
    it is, but the extra is not installed)."""
    url = traces_url(config)
    if url is None or not _exports_live():
        return None
    exporter = _reported_once(otlp_exporter(url), url)
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    return LiveTrace(journal, session_id, before, BatchSpanProcessor(exporter),
                     capture_content=config.capture_content)
