"""A micro-batch's shuffles sized to it (streaming_job/partitions.py): whole waves of the cores, the
session's setting as the ceiling, restored after the batch; and the pane shuffle without the
event_ids it can derive after it (streaming_job/batch.py, pane_writer.py)."""

from __future__ import annotations

import pytest

import dedup_sql
from streaming_job import pane_writer, partitions
from streaming_job.batch import BatchProcessor
from tidemark.session import session_schema


@pytest.mark.parametrize(
    ("lines", "cores", "ceiling", "expected"),
    [
        (0, 2, 8, 2),  # never fewer than the cores
        (103_200, 2, 8, 2),  # the bench's 10-files batch: one wave
        (1_031_991, 2, 8, 4),  # the million-line batch: two waves of ~250k lines
        (10_000_000, 2, 8, 8),  # never more than the session's setting
        (1_000_000, 8, 200, 8),
        (1_000_000, 2, 1, 1),  # a ceiling below the cores wins
        (600_000, 1, 8, 2),
    ],
)
def test_sized_is_whole_waves_between_the_cores_and_the_ceiling(lines, cores, ceiling, expected):
    assert partitions.sized(lines, cores, ceiling) == expected


@pytest.mark.spark
def test_sized_shuffle_sets_then_restores_the_session_setting(spark):
    before = spark.conf.get(partitions.SHUFFLE_PARTITIONS)
    with partitions.sized_shuffle(spark, 10) as count:
        assert spark.conf.get(partitions.SHUFFLE_PARTITIONS) == str(count)
        assert count == partitions.sized(10, spark.sparkContext.defaultParallelism, int(before))
    assert spark.conf.get(partitions.SHUFFLE_PARTITIONS) == before
    with pytest.raises(RuntimeError), partitions.sized_shuffle(spark, 10):
        raise RuntimeError("a failed batch")
    assert spark.conf.get(partitions.SHUFFLE_PARTITIONS) == before


@pytest.mark.spark
def test_the_pane_shuffle_carries_no_event_ids_and_the_files_get_them(spark):
    events = "array<struct<event_ts: timestamp, event_id: string, event_type: string, payload: string>>"
    result = spark.sql(
        "SELECT 'sid' AS session_id, 'u1' AS user_id, TIMESTAMP'2026-03-10 10:00:00' AS session_start,"
        " TIMESTAMP'2026-03-10 10:05:00' AS session_end, 2L AS event_count, 1 AS event_type_count,"
        f" CAST(array(named_struct('event_ts', TIMESTAMP'2026-03-10 10:00:00', 'event_id', 'e1',"
        " 'event_type', 't', 'payload', '{}'), named_struct('event_ts', TIMESTAMP'2026-03-10 10:05:00',"
        f" 'event_id', 'e2', 'event_type', 't', 'payload', '{{}}')) AS {events}) AS events,"
        " 'early' AS pane_kind, true AS emit, true AS retain, false AS closed, 0 AS pane_count"
    )
    rows = dedup_sql.run(spark, "stream_rows", {"panes": result})
    assert "RepartitionByExpression [event_date" in rows._jdf.queryExecution().analyzed().toString()  # by date
    plan = rows._jdf.queryExecution().executedPlan().toString()
    exchange = plan[plan.index("Exchange") :]
    assert "event_ids" not in exchange  # derived above the shuffle, not below it
    shuffled = rows.drop("closed", "state_pane_count", "emit", "retain")  # the state's bookkeeping
    assert shuffled.columns == [
        *(c for c in session_schema.PANE_COLUMNS if c not in pane_writer.BatchValues.COLUMNS),
        "event_date",
    ]  # the batch's own values are the writer's (pane_writer.BatchValues), not the plan's
    assert shuffled.first()["event_ids"] == ["e1", "e2"]
    whole = BatchProcessor._panes(result, "20260310T120000000Z", 0, 0)
    assert [f for f in whole.schema.fields if f.name in shuffled.columns] == shuffled.schema.fields
