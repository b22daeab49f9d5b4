"""The stream's sessionizing as one query (streaming_job.batch.STREAM_QUERY: stream_input.sql into
sessionize.sql into stream_panes.sql, composed) gives the rows the three files give run one after
the other, on batches that exercise what each file decides: redelivered copies that differ, copies
of events state holds, sessions that merge across state and batch, late and too-late events."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import pytest

import dedup_sql
from streaming_job import batch as stream_batch
from streaming_job.state import NO_WATERMARK_US, STATE_SCHEMA
from tidemark.base.session_rules import SessionRules

pytestmark = pytest.mark.spark

EVENTS = "user_id string, event_id string, event_ts timestamp, event_type string, payload string"
T0 = datetime(2026, 3, 10, 8, tzinfo=timezone.utc)


def _us(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000)


def _events(rng: random.Random, count: int, start: datetime, hours: int, ids: list) -> list[tuple]:
    rows = []
    for _ in range(count):
        if ids and rng.random() < 0.15:  # a redelivery, maybe with another type or payload
            user, event_id, ts = rng.choice(ids)
        else:
            user, event_id = f"u{rng.randrange(6)}", f"e{len(ids)}"
            ts = start + timedelta(seconds=rng.randrange(hours * 3600))
            ids.append((user, event_id, ts))
        rows.append((user, event_id, ts, rng.choice("ab"), rng.choice(['{"k":1}', '{"k":2}', None])))
    return rows


def _three_steps(spark, events, state, rules: SessionRules, w_prev_us: int, w_new_us: int):
    merged = dedup_sql.run(
        spark,
        "stream_input",
        {"state_events": stream_batch.state_events(state), "batch_events": events},
    )
    sessionized = dedup_sql.run(spark, "sessionize", {"events": merged}, gap_us=rules.gap_us)
    return dedup_sql.run(
        spark,
        "stream_panes",
        {"sessionized": sessionized, "watermarks": stream_batch.watermarks(spark, w_prev_us, w_new_us)},
        gap_us=rules.gap_us,
        lateness_us=rules.allowed_lateness_us,
    )


def _rows(frame) -> list:
    return sorted(tuple(row) for row in frame.collect())


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("boundary", ["split", "merge"])
def test_the_composed_query_gives_the_three_files_rows(spark, seed, boundary):
    rng = random.Random(seed)
    rules = SessionRules(gap=timedelta(minutes=20), gap_boundary=boundary)
    ids: list = []
    first = spark.createDataFrame(_events(rng, 120, T0, 6, ids), EVENTS)
    no_state = spark.createDataFrame([], STATE_SCHEMA)
    w1 = _us(T0 + timedelta(hours=4))
    before = stream_batch.sessionize(spark, first, no_state, rules, NO_WATERMARK_US, w1)
    assert _rows(before) == _rows(_three_steps(spark, first, no_state, rules, NO_WATERMARK_US, w1))
    kinds = {row["pane_kind"] for row in before.collect()}
    assert {"early", "on_time"} <= kinds

    # state after the first batch, as the stream keeps it; the second batch redelivers copies of
    # its events, extends its sessions and brings events behind the watermark (late, too late)
    state = before.where("retain").selectExpr(
        "session_id",
        "user_id",
        "session_start",
        "session_end",
        "event_count",
        "events",
        "closed",
        "pane_count + CAST(emit AS INT) AS pane_count",
    )
    assert state.count() > 0
    second = spark.createDataFrame(_events(rng, 120, T0 - timedelta(hours=3), 10, ids), EVENTS)
    w2 = _us(T0 + timedelta(hours=7))
    after = stream_batch.sessionize(spark, second, state, rules, w1, w2)
    expected = _rows(_three_steps(spark, second, state, rules, w1, w2))
    assert _rows(after) == expected
    kinds = {row[7] for row in expected}
    assert {"late", "too_late"} <= kinds, kinds
    assert any(row[-1] > 0 for row in expected)  # sessions that inherited a pane count from state
