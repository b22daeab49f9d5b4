"""The receipt index with the real stream and dedup: a stream on an empty lake starts the index and
writes the head; a version records what it planned through; the next no-op decision reads no
marker it already planned over, and a new receipt still makes it recompute."""

from __future__ import annotations

from datetime import date

import pytest

from streaming_job.job import StreamConfig, run_stream
from tests.helpers import lake_session_set, reference_session_set
from tests.streamkit import event, land
from tidemark.base.session_rules import SessionRules
from tidemark.deduplication import dedup
from tidemark.iceberg import table_versions
from tidemark.panes import planning, receipt_index, receipts
from tidemark.store.lake import Lake

pytestmark = [pytest.mark.spark, pytest.mark.slow]

RULES = SessionRules.parse("30m", "1h", "0s")
D6, D7 = date(2026, 3, 6), date(2026, 3, 7)


def _stream(spark, landing, lake, checkpoint):
    run_stream(StreamConfig(landing, lake, checkpoint, RULES, available_now=True, max_files_per_trigger=1), spark=spark)


def test_the_no_op_decision_reads_only_what_arrived_after_the_version(spark, tmp_path, monkeypatch):
    landing, lake, checkpoint = (str(tmp_path / d) for d in ("landing", "lake", "checkpoint"))
    lake = Lake.open(lake)
    land(
        landing,
        [
            [event("u1", "a1", f"{D6}T23:50:00Z"), event("u1", "a2", f"{D7}T00:10:00Z")],  # crosses midnight
            [event("u2", "b1", f"{D7}T10:00:00Z")],
            [event("u3", "c1", f"{D6}T09:00:00Z")],
        ],
    )
    _stream(spark, landing, lake, checkpoint)
    assert receipt_index.is_complete(lake)
    newest = max(ts for d in receipts.list_event_dates(lake) for ts in receipts.list_receipts(lake, d))
    assert receipt_index.head(lake) == newest
    spanning = {
        (D6, ts)
        for ts in receipts.list_receipts(lake, D6)
        if receipts.read_marker(lake, D6, ts).max_event_ts.startswith(D7.isoformat())
    }
    assert len(spanning) == 2  # u1's early pane and its on_time pane
    assert set(receipt_index.reaching(lake, D7)) == spanning

    for day in (D6, D7):
        result = dedup.run_dedup(lake, day, RULES, spark=spark)
        assert not result.noop
        assert lake_session_set(lake, day) == reference_session_set(landing, day, RULES.gap)
    assert table_versions.current_version(lake, D7).planned_through == newest

    read = []
    original = receipts.read_marker
    monkeypatch.setattr(receipts, "read_marker", lambda *a: read.append(a[1:]) or original(*a))
    assert dedup.up_to_date(lake, D7, RULES) is not None  # a no-op
    assert read == []  # not one marker read: nothing arrived after the version

    land(landing, [[event("u2", "b2", f"{D7}T10:05:00Z")]], start_index=3)
    _stream(spark, landing, lake, checkpoint)
    read.clear()
    version = table_versions.current_version(lake, D7)
    assert not planning.quick_covered(planning.LakeIndex(lake), D7, RULES, version)
    assert [day for day, _ in read] == [D7]  # the one partition received after the version
    assert dedup.up_to_date(lake, D7, RULES) is None  # Spark needed (the whole plan is read then)
    result = dedup.run_dedup(lake, D7, RULES, spark=spark)
    assert not result.noop
    assert lake_session_set(lake, D7) == reference_session_set(landing, D7, RULES.gap)
