"""The stream's own micro-batch (streaming_job/batch.py) replayed after a crash that followed its
head: the crash happens after the batch's markers and `_receipts/head.json`, before Spark's commit,
and a dedup of the date plans through that head before the replay. A replay that reaches other
verdicts (here: a larger `--max-clock-skew` accepts an event the first attempt quarantined) writes
a partition under the head's receipt_ts; whatever the replay writes, the date's next dedup must
publish what the receipt panes hold (`read` equals a batch sessionization of `read --raw`'s
events), and a rerun after it is a no-op. The kill is the return of the first attempt (Spark's
commit is not part of the batch's code), so the crash point is exact."""

from __future__ import annotations

from datetime import timedelta

import pytest

from streaming_job.batch import BatchProcessor
from tests import reference
from tests.helpers import lake_session_set, session_set
from tests.streamkit import event, panes
from tidemark.base.layout import as_event_date
from tidemark.deduplication.dedup import run_dedup, up_to_date
from tidemark.iceberg import table_versions
from tidemark.ingest.contract import InputRules
from tidemark.panes import receipt_index
from tidemark.session import rules_record
from tidemark.session.sessions import SessionRules
from tidemark.store.lake import Lake

pytestmark = [pytest.mark.spark, pytest.mark.slow]  # three micro-batches of the real job and two dedups

RULES = SessionRules.parse("30m", "1h", "0s")
T = "2026-03-08"


def batch_frame(spark, lines: list[str], receipt: str):
    """A micro-batch as the stream's query hands it to the batch: the lines, their file, the batch's time."""
    rows = [(line, "file:///landing/f.jsonl", receipt) for line in lines]
    return spark.createDataFrame(rows, "value string, source_file string, receipt_time string").selectExpr(
        "value", "source_file", "CAST(receipt_time AS TIMESTAMP) AS receipt_time"
    )


def _events_of_panes(lake: Lake) -> list[tuple]:
    """(user_id, event_id, event_ts, event_type) of every event the complete receipt panes hold."""
    return sorted(
        {(row["user_id"], e["event_id"], e["event_ts"], e["event_type"]) for row in panes(lake) for e in row["events"]}
    )


def test_a_replay_with_other_verdicts_after_the_head_is_published_by_the_next_dedup(spark, tmp_path):
    lake, checkpoint = Lake.open(tmp_path / "lake"), str(tmp_path / "ckpt")
    rules_record.ensure(lake, RULES, "test")  # what the stream does at its first start
    receipt_index.start(lake)
    first = BatchProcessor(lake, checkpoint, RULES)  # the default max clock skew: 1 h
    first(batch_frame(spark, [event("u1", "a1", f"{T}T08:30:00Z")], f"{T} 09:00:00"), 0)
    # u2's event is 1 h 30 after its receipt: quarantined by the first attempt
    batch_1 = [event("u1", "a0", "2026-03-07T12:00:00Z"), event("u2", "b1", f"{T}T10:30:00Z")]
    first(batch_frame(spark, batch_1, f"{T} 09:00:10"), 1)  # markers and head; then the crash
    head = receipt_index.head(lake)

    version = run_dedup(lake, T, RULES, spark=spark)
    assert version.published
    assert table_versions.current_version(lake, as_event_date(T)).planned_through == head

    # the restart with --max-clock-skew 3h replays batch 1 (same receipt time, same batch id)
    replay = BatchProcessor(lake, checkpoint, RULES, input_rules=InputRules(max_clock_skew=timedelta(hours=3)))
    replay(batch_frame(spark, batch_1, f"{T} 09:00:10"), 1)
    assert receipt_index.head(lake) == head

    expected = session_set(reference.sessionize(_events_of_panes(lake), RULES), T, with_count=True)
    if any(row["user_id"] == "u2" for row in panes(lake)):  # the replay wrote another verdict
        assert up_to_date(lake, T) is None  # the DAG's skip check: Spark needed
    result = run_dedup(lake, T, RULES, spark=spark)
    assert lake_session_set(lake, T, with_count=True) == expected, result
    assert run_dedup(lake, T, RULES, spark=spark).noop
