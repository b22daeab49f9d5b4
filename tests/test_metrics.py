"""tidemark/ops/metrics.py, tidemark/ops/health.py and `tidemark health`: the documented table is the code's,
the exporter really serves those names, the SLO verdicts on real lakes (simulated stream writes, no
Spark), and a scrape never re-reads the lake."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from datetime import date

import pytest
import requests

from tests.lakekit import lake_with
from tidemark.devstack.process import free_port
from tidemark.notices import availability_notice
from tidemark.notices.outbox import Outbox
from tidemark.ops import metrics
from tidemark.ops.exporter import LakeExporter
from tidemark.ops.health import LakeObserver, Objectives, breaches, read_lake
from tidemark.panes import receipts

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_docs_table_is_the_code_table():
    with open(os.path.join(ROOT, "docs", "metrics.md")) as handle:
        text = handle.read()
    rows = re.findall(r"^\| `([a-z_.]+)` \| (\w+) \| `([^`]+)` \| `([a-z_]+)` \|", text, re.M)
    assert rows == [(m.name, m.kind, m.unit, m.prometheus) for m in metrics.METRICS]
    for m in metrics.METRICS:  # OpenTelemetry's naming: lowercase dotted, namespaced
        assert re.fullmatch(r"tidemark(\.[a-z_]+)+", m.name), m.name


def _scrape(port: int) -> dict[str, list[tuple[dict, float]]]:
    out: dict = {}
    for line in requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text.splitlines():
        match = re.match(r"^([a-z_]+)(?:\{(.*)\})? (\S+)$", line)
        if match:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
            out.setdefault(match.group(1), []).append((labels, float(match.group(3))))
    return out


@pytest.fixture
def exporter_of(tmp_path):
    started = []

    def start(lake, objectives=None, refresh=0.2):
        exporter = LakeExporter(lake, objectives, refresh=refresh).start(free_port_for := free_port())
        started.append(exporter)
        exporter.port = free_port_for
        return exporter

    yield start
    for exporter in started:
        exporter.stop()


def test_exporter_serves_the_documented_names_with_the_lake_and_stream_values(tmp_path, exporter_of):
    lake, stream, events, cut = lake_with(tmp_path, upto=2)
    exporter = exporter_of(lake, Objectives())
    listener = metrics.StreamMetrics(clock=lambda: 1_773_144_000.0 + 7.5)  # 2026-03-10T12:00:07.5Z
    partitions = stream.batch(cut[2])
    listener(receipts.BatchReport(2, partitions[0].receipt_ts, 40, 37, 3, 1_773_100_000_000_000, 5, partitions, 2.0))
    deadline = time.monotonic() + 20
    while exporter.observer.reading() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    exporter.observer.refresh_now()
    served = _scrape(exporter.port)
    names = metrics.PROMETHEUS_NAMES
    stale = {labels["tidemark_event_date"]: value for labels, value in served[names["tidemark.event_date.staleness"]]}
    expected = {s.event_date.isoformat() for s in read_lake(lake).stale}
    assert set(stale) == expected
    assert expected
    assert all(value > 200 * 86400 for value in stale.values())  # receipts of 2026-03-10: months old
    assert served[names["tidemark.event_date.stale"]][0][1] == len(expected)
    # the stream's batch: lag from its receipt time (12:00:20 for batch 2) to the listener's clock
    lag = dict((l.get("le"), v) for l, v in served[names["tidemark.stream.batch.lag"] + "_bucket"])
    assert served[names["tidemark.stream.batch.lag"] + "_count"][0][1] == 1
    assert served[names["tidemark.stream.lines.quarantined"]][0][1] == 3
    assert sum(v for _, v in served[names["tidemark.receipt.partitions.written"]]) == len(partitions)
    assert served[names["tidemark.stream.watermark"]][0][1] == 1_773_100_000.0
    assert lag["+Inf"] == 1
    objectives = {l["tidemark_slo"]: v for l, v in served[names["tidemark.slo.objective"]]}
    assert objectives == {"correction": 1200.0, "notice_owed": 600.0, "stream_lag": 300.0}
    # The given-up gauge is absent without Airflow: unknown is not zero.
    assert names["tidemark.reconcile.given_up"] not in served


def test_a_scrape_reads_the_cache_not_the_lake(tmp_path, monkeypatch):
    lake, *_ = lake_with(tmp_path, upto=1)
    calls = []
    import tidemark.ops.health as health

    real = health.read_lake
    monkeypatch.setattr(health, "read_lake", lambda *a, **k: calls.append(1) or real(*a, **k))
    observer = LakeObserver(lake, refresh=3600)
    observer.start()
    try:
        deadline = time.monotonic() + 20
        while observer.reading() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        for _ in range(50):
            assert observer.reading() is not None
    finally:
        observer.stop()
    assert len(calls) == 1  # one reading per refresh period, whatever the scrapes


def test_breaches_name_the_stale_dates_and_the_owed_notices(tmp_path):
    lake, stream, events, cut = lake_with(tmp_path, upto=2)
    reading = read_lake(lake)
    found = {b.slo: b.detail for b in breaches(reading, Objectives())}
    assert set(found) == {"correction"}
    for item in reading.stale:
        assert item.event_date.isoformat() in found["correction"]
        assert item.kinds == ["no_version"]
    newest_date = reading.stale[0].event_date
    newest = receipts.list_receipts(lake, newest_date)[-1]
    assert Outbox(lake).record(
        availability_notice.build("sessions", [receipts.read_marker(lake, newest_date, newest).to_json()])
    )
    reading = read_lake(lake)
    assert reading.owed["availability"][0] == 1
    assert "notice_owed" not in {b.slo for b in breaches(reading, Objectives())}  # just recorded
    from datetime import timedelta

    strict = Objectives(correction=timedelta(days=100000), notice_owed=timedelta(0))
    assert [b.slo for b in breaches(reading, strict)] == ["notice_owed"]


def _health(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "tidemark.cli", "health", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env={**os.environ, "PYTHONPATH": ROOT, **(env or {})},
    )


def test_health_command_exit_status(tmp_path):
    lake, *_ = lake_with(tmp_path, upto=1)
    broken = _health("--lake", str(lake), "--no-airflow")
    assert broken.returncode == 4, broken.stderr
    assert broken.stdout.startswith("BREACHED correction: ")
    empty = tmp_path / "empty"
    empty.mkdir()
    healthy = _health("--lake", str(empty), "--no-airflow", "--json")
    assert healthy.returncode == 0, healthy.stderr
    assert json.loads(healthy.stdout)["healthy"] is True
    assert _health("--lake", str(tmp_path / "none"), "--no-airflow").returncode == 2  # no such lake: usage


def test_dedup_outcomes_are_counted_by_kind():
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from tidemark.iceberg import commits

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    metrics._instruments.clear()
    real_meter = metrics.meter
    metrics.meter = lambda: provider.get_meter("tidemark")
    try:

        class Result:
            noop, published = True, False

        with metrics.dedup_run(date(2026, 3, 7)) as box:
            box["result"] = Result()
        with pytest.raises(commits.Superseded), metrics.dedup_run(date(2026, 3, 7)):
            raise commits.Superseded("plan stale")
        with pytest.raises(RuntimeError), metrics.dedup_run(date(2026, 3, 7)):
            raise RuntimeError("spark died")
        data = reader.get_metrics_data()
    finally:
        metrics.meter = real_meter
        metrics._instruments.clear()
    points = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name == "tidemark.dedup.runs":
                    points = {p.attributes["tidemark.dedup.outcome"]: p.value for p in m.data.data_points}
    assert points == {"no_op": 1, "superseded": 1, "failed": 1}


def test_given_up_dates_come_from_reconciles_run_states(tmp_path):
    """With Airflow's answers (run id -> state), a date whose every reconcile attempt ended is given
    up; while an attempt is queued it is not; when Airflow cannot be asked it is unknown, not 0."""
    lake, *_ = lake_with(tmp_path, upto=2)
    dates = sorted(s.event_date for s in read_lake(lake).stale)
    ended = read_lake(lake, run_state=lambda run_id: "failed")
    assert ended.given_up == dates
    assert "given_up" in {b.slo for b in breaches(ended, Objectives())}
    queued = read_lake(lake, run_state=lambda run_id: "queued" if run_id.endswith("__3") else "failed")
    assert queued.given_up == []

    def unreachable(run_id):
        raise ConnectionError("airflow down")

    assert read_lake(lake, run_state=unreachable).given_up is None
