"""The SLO alerts on a real Prometheus (started by the test) scraping a real `tidemark exporter`:
a broken pipeline (receipts no dedup ever corrected, as with a stopped Airflow; a notice a stopped
sender never published) fires TidemarkEventDateStale per stale date and TidemarkNoticeOwed, and
`tidemark health` exits 4 naming both; after recovery (the dates deduplicated, the notice sent) the
alerts clear and `tidemark health` exits 0."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.lakekit import converge, lake_with
from tidemark.base.polling import wait_for
from tidemark.devstack import process
from tidemark.devstack.prometheus import PrometheusServer, binary
from tidemark.notices import availability_notice, corrected_delivery
from tidemark.notices.outbox import Outbox
from tidemark.ops.health import read_lake
from tidemark.panes import receipts

pytestmark = [
    pytest.mark.slow,
    pytest.mark.spark,
    pytest.mark.skipif(binary() is None, reason="prometheus not installed (apt-get install prometheus)"),
]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OBJECTIVES = ["--correction", "1h", "--notice-owed", "3s", "--no-airflow"]


def _cli(*args, **kwargs):
    return [sys.executable, "-m", "tidemark.cli", *args]


@pytest.fixture
def exporter(tmp_path):
    """`tidemark exporter` as its own process (as `tidemark up` runs it), reading the lake every second."""
    lake, stream, events, cut = lake_with(tmp_path)
    port = process.free_port()
    managed = process.start(
        "exporter",
        _cli("exporter", "--lake", str(lake), "--port", str(port), "--refresh", "1", *OBJECTIVES),
        str(tmp_path / "exporter.log"),
        cwd=ROOT,
        env={"PYTHONPATH": ROOT},
    )
    try:
        process.wait_until(lambda: process.port_open(port), 60, "the exporter", managed)
        yield lake, port
    finally:
        process.stop(managed)


def _health(lake):
    return subprocess.run(
        _cli("health", "--lake", str(lake), *OBJECTIVES),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
    )


def test_slo_alerts_fire_on_a_broken_pipeline_and_clear_after_recovery(tmp_path, exporter, spark):
    lake, port = exporter
    stale_dates = sorted(s.event_date for s in read_lake(lake).stale)
    assert len(stale_dates) >= 2
    # A notice the stream recorded and nobody sent (a stopped sender).
    newest = receipts.list_receipts(lake, stale_dates[-1])[-1]
    assert Outbox(lake).record(
        availability_notice.build("sessions", [receipts.read_marker(lake, stale_dates[-1], newest).to_json()])
    )

    with PrometheusServer(
        str(tmp_path / "prometheus"),
        targets={"tidemark-exporter": [f"127.0.0.1:{port}"]},
        scrape_interval="1s",
        evaluation_interval="1s",
    ) as prometheus:

        def firing_dates():
            return sorted(a["labels"]["tidemark_event_date"] for a in prometheus.firing("TidemarkEventDateStale"))

        wait_for(
            lambda: firing_dates() == [d.isoformat() for d in stale_dates], 60, "a stale-date alert per stale date", 0.5
        )
        alert = prometheus.firing("TidemarkEventDateStale")[0]
        assert alert["labels"]["slo"] == "correction"
        assert alert["labels"]["severity"] == "page"
        assert "has had uncorrected receipts for" in alert["annotations"]["summary"]
        wait_for(lambda: len(prometheus.firing("TidemarkNoticeOwed")) == 1, 60, "the owed-notice alert", 0.5)
        assert prometheus.firing("TidemarkNoticeOwed")[0]["labels"]["tidemark_notice_channel"] == "availability"
        assert prometheus.targets_health() == {"tidemark-exporter": "up"}

        broken = _health(lake)
        assert broken.returncode == 4, broken.stderr
        lines = broken.stdout.splitlines()
        assert [line.split(":")[0] for line in lines] == ["BREACHED correction", "BREACHED notice_owed"]
        assert all(d.isoformat() in lines[0] for d in stale_dates)

        # Recovery: what the DAG does once Airflow is back, and the sender publishing what is owed.
        converge(lake, spark, set(stale_dates))
        # The dedup runs recorded corrected notices (the DAG's notify_corrected task sends them): sent too.
        for outbox in (Outbox(lake), corrected_delivery.outbox(lake)):
            for n, entry in enumerate(outbox.owed()):
                outbox.mark_sent(entry, f"test-message-{n}", "2026-11-25T00:00:00.000Z")
        reading = read_lake(lake)
        assert reading.stale == []
        assert reading.owed == {"availability": (0, 0.0), "corrected": (0, 0.0)}

        # The exporter may have read the lake in the middle of the recovery: a date the corrections
        # reached, stale for a moment with a rerun owed seconds ago (under the objective, so no
        # alert), can be the last scrape's count. Wait for a scrape of the recovered lake.
        def stale_count():
            return prometheus.query("tidemark_event_date_stale")[0]["value"][1]

        wait_for(
            lambda: (
                not prometheus.firing("TidemarkEventDateStale")
                and not prometheus.firing("TidemarkNoticeOwed")
                and stale_count() == "0"
            ),
            60,
            "the alerts to clear and the stale-date count to fall to 0",
            0.5,
        )
        # The demo report's staleness chart, from the same series: the stale dates, then none.
        from tidemark.demo.metrics_charts import STALENESS, prometheus_charts, query_range

        end = time.time()
        history = query_range(prometheus.url, STALENESS, end - 600, end, 1)
        # (a date the corrections reached may have been stale for a moment too: an owed rerun)
        assert {d.isoformat() for d in stale_dates} <= {h["metric"]["tidemark_event_date"] for h in history}
        charts = prometheus_charts(str(tmp_path), prometheus.url, end - 600, end)
        assert [os.path.basename(c) for c in charts] == ["staleness.png"]  # no stream: no lag chart
        assert os.path.getsize(charts[0]) > 10_000
    healthy = _health(lake)
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert healthy.stdout.startswith("healthy: 0 stale date(s)")


def test_the_stack_starts_prometheus_scraping_the_exporter_and_down_stops_both(tmp_path, monkeypatch):
    """The stack's own start (the part of `tidemark up` after the stream): the exporter and
    Prometheus are recorded, `status` shows them running with Prometheus's URL, Prometheus scrapes
    the exporter (target up) and reports the stream it cannot reach, and `down` stops both."""
    from tidemark.devstack.stack import Stack, port_states

    monkeypatch.setenv("PYTHONPATH", ROOT)  # the `tidemark` script runs this checkout's code
    stack = Stack(str(tmp_path / "home"))
    settings = stack.configure()
    os.makedirs(settings.lake)
    try:
        stack._start_exporter(settings, 60)
        stack._start_prometheus(settings, 60)
        rows = {r["component"]: r for r in stack.status()}
        assert rows["prometheus"]["state"] == "running"
        assert rows["prometheus"]["url"] == f"http://127.0.0.1:{settings.ports['prometheus']}"
        assert rows["exporter (lake SLO gauges)"]["state"] == "running"
        server = stack.prometheus(settings)
        wait_for(
            lambda: server.targets_health() == {"tidemark-exporter": "up", "tidemark-stream": "down"},
            90,
            "Prometheus to scrape both targets",
            1.0,
        )
        assert server.query('tidemark_slo_objective_seconds{tidemark_slo="correction"}')[0]["value"][1] == "1200"
        # no stream runs: its alert is pending (for: 120s), not yet firing
        wait_for(
            lambda: any(a["labels"]["alertname"] == "TidemarkStreamDown" for a in server.alerts()),
            60,
            "the stream-down alert to be pending",
            1.0,
        )
    finally:
        done = stack.down()
    assert sorted(d["component"] for d in done if d["stopped"]) == ["exporter", "prometheus"]
    assert not port_states(settings)["prometheus"]
    assert not port_states(settings)["exporter"]
    assert {r["state"] for r in stack.status() if r["component"] in ("prometheus", "exporter (lake SLO gauges)")} == {
        "stopped"
    }
