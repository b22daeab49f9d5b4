"""tidemark's metrics on OpenTelemetry: one table of instruments, one meter provider per process.

    from tidemark.ops import metrics
    metrics.serve_prometheus(port=9464)          # /metrics on 127.0.0.1:9464 for Prometheus to scrape
    metrics.stream_listener()(report)            # a BatchReport -> the stream's instruments
    with metrics.dedup_run(date(2026, 3, 7)):        # outcome (computed, no_op, superseded, failed) + duration
        result = run_dedup(...)
    metrics.shutdown()                           # flushes the OTLP exporter of a short-lived process

Every instrument is declared in METRICS (name, kind, unit, description, attributes, who records it)
and documented in docs/metrics.md, whose table tests/test_metrics.py compares with this one. Names and
units follow OpenTelemetry's semantic conventions (dotted lowercase names, UCUM units: `s` for
durations, `{notice}`-style annotations for counts); the Prometheus exporter turns them into
`tidemark_stream_batch_lag_seconds`, `tidemark_notice_owed` and so on (PROMETHEUS_NAMES).

Where the readings go: `serve_prometheus` (a long-running process: the stream, `tidemark
exporter`) exposes them for a Prometheus scrape; with OTEL_EXPORTER_OTLP_ENDPOINT (or
OTEL_EXPORTER_OTLP_METRICS_ENDPOINT) set, `configure` also pushes them through OTLP (on GCP: to an
OpenTelemetry collector feeding Cloud Monitoring), which is how a short-lived process (a dedup task,
the Cloud Function) reports: it must call `shutdown()` before it exits so that the last readings are
sent. With neither, the API's no-op meter is used: recording costs nothing and goes nowhere.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date
from typing import TYPE_CHECKING, TypeAlias
from wsgiref.simple_server import WSGIServer

from opentelemetry import metrics as otel_metrics
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, Counter, Histogram, Meter, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.util.types import Attributes
from prometheus_client import start_http_server

from tidemark.base import layout
from tidemark.base.logs import get_logger
from tidemark.iceberg import commits

if TYPE_CHECKING:
    from tidemark.deduplication.dedup import DedupResult
    from tidemark.panes.receipts import BatchReport

log = get_logger("metrics")

METER_NAME = "tidemark"


@dataclass(frozen=True)
class Metric:
    """One instrument: its OpenTelemetry name, kind, unit, description, attributes and recorder."""

    name: str  # OpenTelemetry name
    kind: str  # counter, histogram, gauge (observable)
    unit: str  # UCUM
    description: str
    attributes: tuple[str, ...] = ()
    source: str = ""  # who records it

    @property
    def prometheus(self) -> str:
        """The name the Prometheus exporter gives it (dots -> _, unit suffix, _total on counters)."""
        base = self.name.replace(".", "_")
        suffix = {"s": "_seconds", "By": "_bytes"}.get(self.unit, "")
        if suffix and not base.endswith(suffix):
            base += suffix
        return base + ("_total" if self.kind == "counter" else "")


STREAM = "stream (BatchReport listener)"
LAKE = "exporter (observed from the lake)"
DEDUP = "dedup (tidemark dedup, the DAG's task)"

METRICS = (
    Metric(
        "tidemark.stream.batch.lag",
        "histogram",
        "s",
        "From the batch's receipt time (its trigger) to its commit: how far landing lags the lake",
        (),
        STREAM,
    ),
    Metric("tidemark.stream.batch.duration", "histogram", "s", "Processing time of one micro-batch", (), STREAM),
    Metric(
        "tidemark.stream.watermark",
        "gauge",
        "s",
        "The stream's event-time watermark after its last batch (Unix time)",
        (),
        STREAM,
    ),
    Metric(
        "tidemark.stream.batch.last_commit", "gauge", "s", "Unix time of the last committed micro-batch", (), STREAM
    ),
    Metric("tidemark.stream.lines.read", "counter", "{line}", "Landed lines read by the stream", (), STREAM),
    Metric(
        "tidemark.stream.lines.quarantined",
        "counter",
        "{line}",
        "Lines set aside in the quarantine instead of the lake",
        ("tidemark.quarantine.reason",),
        STREAM,
    ),
    Metric(
        "tidemark.receipt.partitions.written",
        "counter",
        "{partition}",
        "Receipt partitions completed (marker written)",
        ("tidemark.late",),
        STREAM,
    ),
    Metric(
        "tidemark.dedup.runs",
        "counter",
        "{run}",
        "Dedup runs of one event date by outcome",
        ("tidemark.dedup.outcome",),
        DEDUP,
    ),
    Metric(
        "tidemark.dedup.duration",
        "histogram",
        "s",
        "Duration of one dedup run by outcome",
        ("tidemark.dedup.outcome",),
        DEDUP,
    ),
    Metric("tidemark.dedup.versions.committed", "counter", "{version}", "Versions published by dedup runs", (), DEDUP),
    Metric(
        "tidemark.event_date.staleness",
        "gauge",
        "s",
        "Per stale event date: age of the oldest reason its current version is stale (oldest "
        "complete receipt partition it lacks, owed rerun, ...)",
        ("tidemark.event_date",),
        LAKE,
    ),
    Metric("tidemark.event_date.stale", "gauge", "{date}", "Event dates whose current version is stale", (), LAKE),
    Metric(
        "tidemark.reconcile.given_up",
        "gauge",
        "{date}",
        "Stale event dates reconciliation gave up on (every attempt ended; needs a person)",
        (),
        LAKE,
    ),
    Metric(
        "tidemark.notice.owed",
        "gauge",
        "{notice}",
        "Notices recorded in the outbox and not yet sent",
        ("tidemark.notice.channel",),
        LAKE,
    ),
    Metric(
        "tidemark.notice.owed.age",
        "gauge",
        "s",
        "Age of the oldest notice owed (0 when none)",
        ("tidemark.notice.channel",),
        LAKE,
    ),
    Metric(
        "tidemark.slo.objective",
        "gauge",
        "s",
        "Each SLO's objective as the exporter was started with (the alert rules compare with it)",
        ("tidemark.slo",),
        LAKE,
    ),
    Metric(
        "tidemark.lake.observed",
        "gauge",
        "s",
        "Unix time the exporter last read the lake (a stuck observer shows as an old value)",
        (),
        LAKE,
    ),
)
BY_NAME = {m.name: m for m in METRICS}
PROMETHEUS_NAMES = {m.name: m.prometheus for m in METRICS}

DEDUP_OUTCOMES = ("computed", "no_op", "superseded", "failed")

# What an observable gauge's callback returns: (value, attributes) per time series.
Observations: TypeAlias = Iterable[tuple[float, Attributes]]

_lock = threading.Lock()
_provider: MeterProvider | None = None
_readers: list[MetricReader] = []
_http: tuple[WSGIServer, threading.Thread] | None = None
_instruments: dict[str, Counter | Histogram] = {}


def _otlp_configured() -> bool:
    return bool(os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"))


def configure(prometheus: bool = False, service: str = "tidemark") -> bool:
    """Install the SDK meter provider once per process (with the Prometheus reader and/or OTLP).

    Returns False when nothing would read the metrics (the API's no-op meter stays).
    """
    global _provider
    with _lock:
        if _provider is not None:
            if prometheus and not any(isinstance(r, PrometheusMetricReader) for r in _readers):
                raise RuntimeError("metrics already configured without the Prometheus reader")
            return True
        readers: list[MetricReader] = []
        if prometheus:
            readers.append(PrometheusMetricReader())
        if _otlp_configured():
            # The OTLP exporter (protobuf, requests: 0.13 s) is loaded only by a process that pushes.
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
            from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

            readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
        if not readers:
            return False
        _provider = MeterProvider(metric_readers=readers, resource=Resource.create({"service.name": service}))
        _readers[:] = readers
        otel_metrics.set_meter_provider(_provider)
        _instruments.clear()  # made again from the SDK's meter
        return True


def serve_prometheus(port: int, host: str = "127.0.0.1", service: str = "tidemark") -> int:
    """Expose /metrics on host:port (loopback by default) for Prometheus; returns the port."""
    global _http
    configure(prometheus=True, service=service)
    with _lock:
        if _http is None:
            _http = start_http_server(port, addr=host)
    log.info("metrics served", url=f"http://{host}:{port}/metrics")
    return port


def shutdown() -> None:
    """Flush and stop (a short-lived process calls this before it exits)."""
    global _provider, _http
    with _lock:
        if _provider is not None:
            _provider.shutdown()
        if _http is not None:
            server, _thread = _http
            server.shutdown()
            server.server_close()
        _provider, _http = None, None
        _readers.clear()
        _instruments.clear()


def meter() -> Meter:
    """The meter of the provider configure() installed (the API's no-op meter before that).

    Asked of our own provider, not of OpenTelemetry's global one: the global can be set once per
    process, so after a shutdown() a second configure() (a test, a restarted component) would
    otherwise get meters from the shut-down provider, which record nothing.
    """
    provider = _provider
    return provider.get_meter(METER_NAME) if provider is not None else otel_metrics.get_meter(METER_NAME)


def _spec(name: str, kind: str) -> Metric:
    spec = BY_NAME[name]
    if spec.kind != kind:
        raise ValueError(f"{name} is a {spec.kind}, not a {kind}")
    return spec


def counter(name: str) -> Counter:
    """The counter of METRICS[name], made once."""
    spec = _spec(name, "counter")
    with _lock:
        found = _instruments.get(name)
        if found is None:
            found = _instruments[name] = meter().create_counter(spec.name, unit=spec.unit, description=spec.description)
    if not isinstance(found, Counter):  # METRICS names each instrument once, with one kind
        raise TypeError(f"{name} was made as a {type(found).__name__}, not a counter")
    return found


def histogram(name: str) -> Histogram:
    """The histogram of METRICS[name], made once."""
    spec = _spec(name, "histogram")
    with _lock:
        found = _instruments.get(name)
        if found is None:
            found = _instruments[name] = meter().create_histogram(
                spec.name, unit=spec.unit, description=spec.description
            )
    if not isinstance(found, Histogram):  # METRICS names each instrument once, with one kind
        raise TypeError(f"{name} was made as a {type(found).__name__}, not a histogram")
    return found


def observe(name: str, callback: Callable[[], Observations]) -> None:
    """Register an observable gauge of METRICS[name]; `callback()` returns [(value, attributes)]."""
    spec = _spec(name, "gauge")

    def observations(_options: CallbackOptions) -> list[Observation]:
        return [Observation(value, attributes) for value, attributes in callback()]

    meter().create_observable_gauge(spec.name, callbacks=[observations], unit=spec.unit, description=spec.description)


# ---- the stream ---------------------------------------------------------------------------------


class StreamMetrics:
    """A BatchReport listener (streaming_job.job.run_stream's `listeners`): records each committed batch.

    Called inside foreachBatch after the batch's partitions are complete, so `now - receipt time` is
    the landing -> committed lag of that batch's files (at least the trigger's wait).
    """

    def __init__(self, clock: Callable[[], float] = time.time):
        """Register the stream's gauges; `clock` gives Unix time."""
        self.clock = clock
        self.watermark_s: float | None = None
        self.last_commit_s: float | None = None
        observe("tidemark.stream.watermark", lambda: [] if self.watermark_s is None else [(self.watermark_s, {})])
        observe(
            "tidemark.stream.batch.last_commit",
            lambda: [] if self.last_commit_s is None else [(self.last_commit_s, {})],
        )

    def __call__(self, report: BatchReport) -> None:
        """Record one committed batch; a failure to record is logged, never raised."""
        try:
            self._record(report)
        except Exception as exc:  # noqa: BLE001 - a metric must never fail the batch it describes
            log.warning(
                "stream metrics not recorded",
                batch_id=getattr(report, "batch_id", None),
                error=f"{type(exc).__name__}: {exc}",
            )

    def _record(self, report: BatchReport) -> None:
        now = self.clock()
        received = layout.parse_receipt_ts(report.receipt_ts).timestamp()
        histogram("tidemark.stream.batch.lag").record(max(0.0, now - received))
        histogram("tidemark.stream.batch.duration").record(float(report.seconds))
        counter("tidemark.stream.lines.read").add(int(report.input_lines))
        if report.quarantined:
            # BatchReport carries the batch's total only; per-reason counts are in the quarantine's
            # own records (tidemark quarantine), so the stream reports them as one reason here.
            counter("tidemark.stream.lines.quarantined").add(
                int(report.quarantined), {"tidemark.quarantine.reason": "any"}
            )
        for partition in report.partitions:
            counter("tidemark.receipt.partitions.written").add(1, {"tidemark.late": bool(partition.late)})
        if report.watermark_us:
            self.watermark_s = report.watermark_us / 1_000_000
        self.last_commit_s = now

    on_batch = __call__


# ---- dedup --------------------------------------------------------------------------------------


def dedup_outcome(result: DedupResult) -> str:
    """A finished run's outcome: no_op or computed."""
    if result.noop:
        return "no_op"
    return "computed"


@contextmanager
def dedup_run(event_date: date) -> Iterator[dict[str, DedupResult]]:
    """Around one run_dedup call: its outcome and duration.

    The caller puts run_dedup's result in the yielded box under "result". commits.Superseded (a plan
    still stale after its replans) is `superseded`; any other exception `failed` (and re-raised).
    """
    started = time.monotonic()
    box: dict[str, DedupResult] = {}
    outcome = "failed"
    try:
        yield box
        result = box.get("result")
        outcome = dedup_outcome(result) if result is not None else "computed"
        if result is not None and result.published:
            counter("tidemark.dedup.versions.committed").add(1)
    except commits.Superseded:
        outcome = "superseded"
        raise
    finally:
        attributes = {"tidemark.dedup.outcome": outcome}
        counter("tidemark.dedup.runs").add(1, attributes)
        histogram("tidemark.dedup.duration").record(time.monotonic() - started, attributes)
        log.info("dedup outcome", event_date=event_date, outcome=outcome)
