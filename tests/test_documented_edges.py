"""The edges where the docs and the code disagreed (issue 32), each pinned to the sentence that now
states it: a JSON null in the payload (docs/input-contract.md), leap seconds (the same), `event_ids`
and `first_receipt_ts` of a deduplicated session (docs/lake-layout.md), and the stream's pane
session ids when a session in state comes apart after a rules migration (docs/lake-layout.md).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

import dedup_sql
from dedup_sql import rules as sql_rules
from streaming_job.batch import watermarks
from tests.lakekit import RECEIPT0, SimulatedStream
from tidemark.base import layout
from tidemark.base.times import to_micros
from tidemark.deduplication.dedup import run_dedup
from tidemark.iceberg import reader
from tidemark.ingest import contract
from tidemark.session import rules_record
from tidemark.session.sessions import SessionRules
from tidemark.store.lake import Lake

T = datetime(2026, 3, 7, 10, 0, tzinfo=timezone.utc)
RECEIVED = to_micros(T + timedelta(minutes=5))


def _line(**extra) -> bytes:
    import json

    return json.dumps(
        {"user_id": "u", "event_id": "e1", "event_type": "view", "event_ts": "2026-03-07T10:00:00Z", **extra}
    ).encode()


def test_json_null_payload_value_stays_apart_from_the_string_null():
    null = contract.read_line(_line(x=None), RECEIVED)
    text = contract.read_line(_line(x="null"), RECEIVED)
    assert null.payload == '{"x":null}'
    assert text.payload == '{"x":"null"}'
    # Two copies of one event: the copy rule keeps the smaller payload text, in either order.
    for order in ([null, text], [text, null]):
        (kept,) = contract.kept_copies(order).values()
        assert kept.payload == min(null.payload, text.payload) == '{"x":"null"}'


@pytest.mark.spark
def test_spark_copy_rule_keeps_the_same_copy_of_a_null_and_a_string_null(spark):
    rows = spark.createDataFrame(
        [("view", '{"x":null}'), ("view", '{"x":"null"}')], "event_type string, payload string"
    )
    kept = rows.selectExpr(f"{sql_rules.kept(sql_rules.copy())} AS kept").first().kept
    assert kept.payload == '{"x":"null"}'


@pytest.mark.parametrize("text", ["2016-12-31T23:59:60Z", "2026-06-30T23:59:60.5+00:00"])
def test_leap_seconds_are_refused_as_out_of_range(text):
    with pytest.raises(contract.Refused, match=contract.Reason.OUT_OF_RANGE):
        contract.parse_event_ts(text)
    # The second before is an ordinary instant.
    assert contract.parse_event_ts(text.replace(":60", ":59"))


@pytest.mark.spark
def test_event_ids_repeat_an_id_per_event_and_first_receipt_is_the_earliest_arrival(spark, tmp_path):
    lake = Lake.open(tmp_path / "lake")
    rules_record.ensure(lake, SessionRules(), "test")
    stream = SimulatedStream(lake, seed=1)
    # Batch 0 brings the session's later events; batch 1 its first one (in time), late.
    stream.batch(
        [("u", "e1", T + timedelta(minutes=5), "view"), ("u", "e2", T + timedelta(minutes=9), "view")], mode=0.0
    )
    stream.batch([("u", "e1", T, "view")], mode=0.0)
    run_dedup(lake, "2026-03-07", spark=spark)
    (row,) = reader.to_records(reader.read_sessions(lake, layout.as_event_date("2026-03-07")))
    # One id at two timestamps is two events: the id appears once per event.
    assert row["event_ids"] == ["e1", "e1", "e2"]
    assert row["event_count"] == 3
    # first_receipt_ts: the earliest arrival of any event (batch 0), not when the first event arrived.
    assert row["first_receipt_ts"] == layout.format_receipt_ts(RECEIPT0)
    assert row["last_receipt_ts"] == layout.format_receipt_ts(RECEIPT0 + timedelta(seconds=10))


@pytest.mark.spark
def test_a_state_session_split_by_a_shorter_gap_gives_its_later_pieces_their_own_ids(spark):
    """After `rules migrate` 30m -> 15m, a session held in state (10:00, 10:20, 10:40) comes apart
    in the stream's next batch: only the piece holding its first event keeps its id."""
    state_id = "s" * 32
    rows = [("u", f"e{i}", T + timedelta(minutes=20 * i), "view", "{}", state_id, T, False, 2, False) for i in range(3)]
    merged = spark.createDataFrame(
        rows,
        "user_id string, event_id string, event_ts timestamp, "
        "event_type string, payload string, state_session_id string, "
        "state_session_start timestamp, state_closed boolean, "
        "state_pane_count int, is_new boolean",
    )
    rules = SessionRules(gap=timedelta(minutes=15))
    sessionized = dedup_sql.run(spark, "sessionize", {"events": merged}, gap_us=rules.gap_us)
    panes = dedup_sql.run(
        spark,
        "stream_panes",
        {"sessionized": sessionized, "watermarks": watermarks(spark, to_micros(T), to_micros(T + timedelta(hours=1)))},
        gap_us=rules.gap_us,
        lateness_us=rules.allowed_lateness_us,
    ).collect()
    assert len(panes) == 3
    ids = [p.session_id for p in panes]
    assert len(set(ids)) == 3
    assert state_id in ids
    kept = [p for p in panes if p.session_id == state_id]
    assert len(kept) == 1
    assert kept[0].event_count == 1
    assert kept[0].pane_count == 2
    assert sorted(p.pane_count for p in panes if p.session_id != state_id) == [0, 0]
