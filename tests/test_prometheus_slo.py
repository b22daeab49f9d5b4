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
from tidemark import availability_notice, receipts
from tidemark.health import read_lake
from tidemark.localstack import process
from tidemark.localstack.prometheus import PrometheusServer, binary
from tidemark.notices import corrected
from tidemark.notices.outbox import Outbox
from tidemark.polling import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.spark,
              pytest.mark.skipif(binary() is None, reason="prometheus not installed (apt-get install prometheus)")]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OBJECTIVES = ["--correction", "1h", "--notice-owed", "3s", "--no-airflow"]


def _cli(*args, **kwargs):
    return [sys.executable, "-m", "tidemark.cli", *args]


@pytest.fixture
def exporter(tmp_path):
    """`tidemark exporter` as its own process (as `tidemark up` runs it), reading the lake every second."""
    lake, stream, events, cut = lake_with(tmp_path)
    port = process.free_port()
    managed = process.start("exporter", _cli("exporter", "--lake", lake, "--port", str(port), "--refresh", "1",
                                             *OBJECTIVES),
                            str(tmp_path / "exporter.log"), cwd=ROOT, env={"PYTHONPATH": ROOT})
    try:
        process.wait_until(lambda: process.port_open(port), 60, "the exporter", managed)
        yield lake, port
    finally:
        process.stop(managed)


def _health(lake):
    return subprocess.run(_cli("health", "--lake", lake, *OBJECTIVES), capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})


def test_slo_alerts_fire_on_a_broken_pipeline_and_clear_after_recovery(tmp_path, exporter, spark):
    lake, port = exporter
    stale_dates = sorted(s.event_date for s in read_lake(lake).stale)
    assert len(stale_dates) >= 2
    # A notice the stream recorded and nobody sent (a stopped sender).
    newest = receipts.list_receipts(lake, stale_dates[-1])[-1]
    assert Outbox(lake).record(availability_notice.build(
        "sessions", [receipts.read_marker(lake, stale_dates[-1], newest).to_json()]))

    with PrometheusServer(str(tmp_path / "prometheus"), targets={"tidemark-exporter": [f"127.0.0.1:{port}"]},
                          scrape_interval="1s", evaluation_interval="1s") as prometheus:
        def firing_dates():
            return sorted(a["labels"]["tidemark_event_date"] for a in prometheus.firing("TidemarkEventDateStale"))

        wait_for(lambda: firing_dates() == stale_dates, 60, "a stale-date alert per stale date", 0.5)
        alert = prometheus.firing("TidemarkEventDateStale")[0]
        assert alert["labels"]["slo"] == "correction" and alert["labels"]["severity"] == "page"
        assert "has had uncorrected receipts for" in alert["annotations"]["summary"]
        wait_for(lambda: len(prometheus.firing("TidemarkNoticeOwed")) == 1, 60, "the owed-notice alert", 0.5)
        assert prometheus.firing("TidemarkNoticeOwed")[0]["labels"]["tidemark_notice_channel"] == "availability"
        assert prometheus.targets_health() == {"tidemark-exporter": "up"}

        broken = _health(lake)
        assert broken.returncode == 4, broken.stderr
        lines = broken.stdout.splitlines()
        assert [line.split(":")[0] for line in lines] == ["BREACHED correction", "BREACHED notice_owed"]
        assert all(d in lines[0] for d in stale_dates)

        # Recovery: what the DAG does once Airflow is back, and the sender publishing what is owed.
        converge(lake, spark, set(stale_dates))
        # The dedup runs recorded corrected notices (the DAG's notify_corrected task sends them): sent too.
        for outbox in (Outbox(lake), corrected.outbox(lake)):
            for n, entry in enumerate(outbox.owed()):
                outbox.mark_sent(entry, f"test-message-{n}", "2026-11-25T00:00:00.000Z")
        reading = read_lake(lake)
        assert reading.stale == [] and reading.owed == {"availability": (0, 0.0), "corrected": (0, 0.0)}

        wait_for(lambda: not prometheus.firing("TidemarkEventDateStale") and not prometheus.firing("TidemarkNoticeOwed"),
                 60, "the alerts to clear", 0.5)
        assert prometheus.query("tidemark_event_date_stale")[0]["value"][1] == "0"
    healthy = _health(lake)
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert healthy.stdout.startswith("healthy: 0 stale date(s)")
