"""The stream's metrics from the real stream: StreamMetrics as a BatchReport listener of run_stream
records one lag and duration per committed batch, the lines read and quarantined, the receipt
partitions written and the watermark, and they are served under the documented Prometheus names."""

from __future__ import annotations

import re

import pytest
import requests

from streaming_job.job import StreamConfig, run_stream
from tests.streamkit import event, land
from tidemark.base.session_rules import SessionRules
from tidemark.devstack.process import free_port
from tidemark.ops import metrics
from tidemark.panes import receipts
from tidemark.store.lake import Lake

pytestmark = [pytest.mark.slow, pytest.mark.spark]  # the real stream, two micro-batches


@pytest.fixture
def served():
    port = free_port()
    metrics.serve_prometheus(port, service="tidemark-stream-test")
    yield port
    metrics.shutdown()


def _values(port: int, name: str) -> dict[str, float]:
    text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    out = {}
    for line in text.splitlines():
        match = re.match(rf"^{name}(\{{.*\}})? (\S+)$", line)
        if match:
            labels = ",".join(f"{k}={v}" for k, v in re.findall(r'(tidemark_\w+)="([^"]*)"', match.group(1) or ""))
            out[labels] = float(match.group(2))
    return out


def test_the_real_stream_feeds_its_instruments(spark, tmp_path, served):
    landing, lake, checkpoint = (str(tmp_path / n) for n in ("landing", "lake", "checkpoint"))
    land(
        landing,
        [
            [event("u1", "e1", "2026-03-06T10:00:00Z"), event("u2", "e2", "2026-03-07T11:00:00Z"), "not json"],
            [event("u1", "e3", "2026-03-06T10:05:00Z"), '{"event_id": "x"}'],
        ],
    )
    listener = metrics.StreamMetrics()
    reports = []
    run_stream(
        StreamConfig(landing, lake, checkpoint, SessionRules(), available_now=True, max_files_per_trigger=1),
        listeners=[listener, reports.append],
        spark=spark,
    )
    batches = [r for r in reports if r.input_lines]
    assert len(batches) >= 2
    names = metrics.PROMETHEUS_NAMES
    assert _values(served, names["tidemark.stream.lines.read"]) == {"": 5.0}
    assert _values(served, names["tidemark.stream.lines.quarantined"]) == {"tidemark_quarantine_reason=any": 2.0}
    written = _values(served, names["tidemark.receipt.partitions.written"])
    assert (
        sum(written.values())
        == sum(len(r.partitions) for r in reports)
        == len(
            [
                (d, ts)
                for d in receipts.list_event_dates(Lake.open(lake))
                for ts in receipts.list_receipts(Lake.open(lake), d)
            ]
        )
    )
    assert _values(served, names["tidemark.stream.batch.lag"] + "_count") == {"": float(len(reports))}
    lag_sum = _values(served, names["tidemark.stream.batch.lag"] + "_sum")[""]
    assert 0 < lag_sum < 600 * len(reports)  # from each batch's trigger to its commit: seconds, not days
    watermark = _values(served, names["tidemark.stream.watermark"])[""]
    assert watermark == max(r.watermark_us for r in reports) / 1e6
