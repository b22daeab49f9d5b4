"""A generated workload over ten days of event time: everything lands, state stays bounded."""

from __future__ import annotations

import time

import pytest

from streaming_job.job import StreamConfig, run_stream
from tests.reference import landed_lines, valid_events
from tests.streamkit import panes
from tidemark.base.session_rules import SessionRules
from tidemark.demo.generate import Workload, build, split_files, write_file
from tidemark.store.lake import Lake

# slow (not in make test-fast): ten days of events through the real stream
pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_ten_days_of_events_stream_with_bounded_state(spark, tmp_path):
    landing, lake, checkpoint = (str(tmp_path / d) for d in ("landing", "lake", "checkpoint"))
    lake = Lake.open(lake)
    deliveries, counts = build(Workload(events=3000, users=15, days=10, seed=21))
    for i, chunk in enumerate(split_files(deliveries, 12)):
        write_file(landing, i, chunk, mtime=time.time() - 100 + i / 100)
    reports = []
    run_stream(
        StreamConfig(
            landing=landing,
            lake=lake,
            checkpoint=checkpoint,
            rules=SessionRules(),
            available_now=True,
            max_files_per_trigger=1,
        ),
        listeners=[reports.append],
        spark=spark,
    )

    rows = panes(lake)
    assert {(r["user_id"], e) for r in rows for e in r["event_ids"]} == {
        (u, e) for u, e, _ in valid_events(landed_lines(landing))
    }
    # State holds only sessions whose window + lateness the watermark has not passed: a handful
    # per user, never the whole history.
    assert len(reports) == 12
    assert max(r.open_sessions for r in reports) <= 2 * 15
    assert counts["sessions_generated"] > 5 * max(r.open_sessions for r in reports)
    # every batch says where its time went, step by step, in the order the steps run
    for report in reports:
        assert list(report.phases) == ["check", "quarantine", "sessionize", "markers"]
        assert all(seconds >= 0 for seconds in report.phases.values())
        assert sum(report.phases.values()) == pytest.approx(report.seconds, abs=0.05)
    # pane kinds: a real mix, and too_late fragments for the offline (days late) sessions
    kinds = {r["pane_kind"] for r in rows}
    assert {"early", "on_time", "too_late"} <= kinds
    dates = {r["event_date"] for r in rows}
    assert len(dates) >= 10
