"""A micro-batch replayed after a crash writes nothing twice and never rewrites a complete partition."""

from __future__ import annotations

import os
import shutil
from datetime import date

import pytest

from streaming_job.batch import BatchProcessor
from streaming_job.state import StateStore
from tests.streamkit import event, panes, partition_snapshot
from tidemark.base.session_rules import SessionRules
from tidemark.store import lake as lake_layout
from tidemark.store.lake import Lake

# slow (not in make test-fast): each test runs micro-batches of the real job, 5-15 s apiece
pytestmark = [pytest.mark.spark, pytest.mark.slow]

RULES = SessionRules.parse("30m", "1h", "0s")


def batch_frame(spark, lines, receipt="2026-03-08 09:00:00.250"):
    rows = [(line, "file:///landing/f.jsonl", receipt) for line in lines]
    return spark.createDataFrame(rows, "value string, source_file string, receipt_time string").selectExpr(
        "value", "source_file", "CAST(receipt_time AS TIMESTAMP) AS receipt_time"
    )


LINES_0 = [event("u1", "a1", "2026-03-06T23:55:00Z"), event("u2", "b1", "2026-03-07T08:00:00Z"), "oops"]
LINES_1 = [event("u1", "a2", "2026-03-07T00:05:00Z"), event("u3", "c1", "2026-03-07T09:00:00Z")]


def test_replaying_a_batch_is_a_no_op(spark, tmp_path):
    lake, checkpoint = Lake.open(tmp_path / "lake"), str(tmp_path / "ckpt")
    process = BatchProcessor(lake, checkpoint, RULES)
    process(batch_frame(spark, LINES_0), 0)
    first = partition_snapshot(lake)
    state_before = StateStore(spark, checkpoint).before(1)[1].orderBy("session_id").collect()

    process(batch_frame(spark, LINES_0), 0)  # Spark replays batch 0 after a crash

    assert partition_snapshot(lake) == first
    assert StateStore(spark, checkpoint).before(1)[1].orderBy("session_id").collect() == state_before


def test_a_partial_write_is_completed_and_complete_partitions_are_left_alone(spark, tmp_path):
    lake, checkpoint = Lake.open(tmp_path / "lake"), str(tmp_path / "ckpt")
    process = BatchProcessor(lake, checkpoint, RULES)
    process(batch_frame(spark, LINES_0), 0)
    receipt = "20260308T090001000Z"
    process(batch_frame(spark, LINES_1, "2026-03-08 09:00:01"), 1)
    complete = partition_snapshot(lake)
    # Crash simulation: batch 1 had written 2026-03-07's files but died before its marker, and
    # left a torn file behind.
    torn = lake.receipt_dir(date(2026, 3, 7), receipt)
    os.remove(os.path.join(torn, lake_layout.RECEIPT_MARKER))
    with open(os.path.join(torn, "part-torn.parquet"), "wb") as out:
        out.write(b"PAR1 half a file")
    untouched = {k: v for k, v in complete.items() if k != (date(2026, 3, 7), receipt)}

    process(batch_frame(spark, LINES_1, "2026-03-08 09:00:01"), 1)

    after = partition_snapshot(lake)
    assert {k: v for k, v in after.items() if k != (date(2026, 3, 7), receipt)} == untouched
    assert (date(2026, 3, 7), receipt) in after
    assert not os.path.exists(os.path.join(torn, "part-torn.parquet"))
    batch1 = sorted((r["user_id"], r["pane_kind"]) for r in panes(lake) if r["batch_id"] == 1)
    # u1's session expired in batch 0 (watermark 08:00), so a2 is a too_late fragment; the new
    # watermark (09:00) closes u2's session; u3 is open
    assert batch1 == [("u1", "too_late"), ("u2", "on_time"), ("u3", "early")]


def test_state_versions_are_pruned(spark, tmp_path):
    lake, checkpoint = Lake.open(tmp_path / "lake"), str(tmp_path / "ckpt")
    process = BatchProcessor(lake, checkpoint, RULES)
    for batch_id in range(5):
        ts = f"2026-03-07T{10 + batch_id:02d}:00:00Z"
        process(batch_frame(spark, [event("u1", f"e{batch_id}", ts)], f"2026-03-08 09:00:0{batch_id}"), batch_id)
    assert StateStore(spark, checkpoint).versions() == [2, 3, 4]
    # the watermark moved on each batch and u1's sessions (an hour apart) expired one by one
    version, state = StateStore(spark, checkpoint).before(5)
    assert version.sessions == 2
    assert state.count() == 2
    shutil.rmtree(lake)


def test_replay_after_several_empty_batches_keeps_the_state(spark, tmp_path):
    """Empty batches (an empty landed file) write no state version. Pruning by batch-id arithmetic
    deleted every version older than batch_id - 3, so the batch after a run of empty ones removed
    the only version its own replay starts from: the replay began from empty state."""
    lake, checkpoint = Lake.open(tmp_path / "lake"), str(tmp_path / "ckpt")
    process = BatchProcessor(lake, checkpoint, RULES)
    process(batch_frame(spark, [event("u1", "a1", "2026-03-07T10:00:00Z")], "2026-03-08 09:00:00"), 0)
    for batch_id in range(1, 6):
        process(batch_frame(spark, [], f"2026-03-08 09:00:0{batch_id}"), batch_id)  # empty files
    lines = [event("u1", "a2", "2026-03-07T10:10:00Z")]
    process(batch_frame(spark, lines, "2026-03-08 09:00:06"), 6)
    store = StateStore(spark, checkpoint)
    assert store.versions() == [0, 6]
    first = store.before(7)[1].collect()
    assert [r["event_count"] for r in first] == [2]
    snapshot = partition_snapshot(lake)

    process(batch_frame(spark, lines, "2026-03-08 09:00:06"), 6)  # Spark replays batch 6

    assert StateStore(spark, checkpoint).before(7)[1].collect() == first
    assert partition_snapshot(lake) == snapshot


def test_pruning_keeps_the_newest_versions_that_exist(spark, tmp_path):
    lake, checkpoint = Lake.open(tmp_path / "lake"), str(tmp_path / "ckpt")
    process = BatchProcessor(lake, checkpoint, RULES)
    for batch_id in (0, 4, 9, 20, 21):  # the batches in between were empty
        ts = f"2026-03-07T10:{batch_id:02d}:00Z"
        process(batch_frame(spark, [event("u1", f"e{batch_id}", ts)], f"2026-03-08 09:00:{batch_id:02d}"), batch_id)
    assert StateStore(spark, checkpoint).versions() == [9, 20, 21]
