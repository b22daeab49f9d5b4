"""Every micro-batch runs the code the stream's first batches compiled.

Spark writes a literal's value into the Java code it generates for a plan. A batch id, a receipt
time or a watermark written into a batch's plans made every micro-batch generate new code, compile it
with Janino and leave the JVM's JIT to compile it again (streaming_job.pane_writer.BatchValues). The
batch's values now reach the files from the pane writer and the SQL as a row, so two batches that
differ only in their values compile nothing new. Counted with Spark's own codegen metrics (one count
per compiled class, driver and executors share the JVM in local mode).
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from streaming_job.batch import BatchProcessor
from tests.streamkit import event, panes
from tidemark.base.session_rules import SessionRules
from tidemark.store.lake import Lake

# slow (not in make test-fast): three micro-batches of the real job
pytestmark = [pytest.mark.spark, pytest.mark.slow]

RULES = SessionRules.parse("30m", "1h", "0s")  # the watermark is the newest event time


def _batch(spark, hour: int):
    """Valid events of three users around `hour` (sessions open, close and expire as the watermark
    moves), a redelivered copy and a malformed line (the quarantine's path too)."""
    lines = [
        event("u1", f"a{hour}", f"2026-03-07T{hour:02d}:00:00Z"),
        event("u1", f"a{hour}", f"2026-03-07T{hour:02d}:00:00Z"),
        event("u2", f"b{hour}", f"2026-03-07T{hour:02d}:10:00Z"),
        event("u3", f"c{hour}", f"2026-03-07T{hour:02d}:50:00Z"),
        "not json",
    ]
    rows = [(line, "file:///landing/f.jsonl", f"2026-03-08 09:00:{hour:02d}") for line in lines]
    return spark.createDataFrame(rows, "value string, source_file string, receipt_time string").selectExpr(
        "value", "source_file", "CAST(receipt_time AS TIMESTAMP) AS receipt_time"
    )


def _compiled(spark) -> int:
    """Classes Spark's code generator has compiled in this JVM so far."""
    return spark._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME().getCount()


def test_a_batch_with_other_values_compiles_no_new_code(spark, tmp_path):
    process = BatchProcessor(Lake.open(tmp_path / "lake"), str(tmp_path / "ckpt"), RULES)
    process(_batch(spark, 1), 0)  # no state yet: a plan of its own
    process(_batch(spark, 3), 1)  # the first batch with state
    before = _compiled(spark)

    process(_batch(spark, 5), 2)  # another batch id, receipt time and watermarks, state as in batch 1

    assert _compiled(spark) == before
    # and its own values reached its panes: the batch id, its receipt time, the watermark its
    # newest event (05:50) moved to
    batch2 = [p for p in panes(Lake.open(tmp_path / "lake")) if p["batch_id"] == 2]
    assert {p["user_id"] for p in batch2} == {"u1", "u2", "u3"}
    assert {(p["receipt_ts"], p["watermark"]) for p in batch2} == {
        ("20260308T090005000Z", datetime(2026, 3, 7, 5, 50, tzinfo=timezone.utc))
    }
