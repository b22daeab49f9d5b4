"""The input contract: every kind of bad line gets its own reason; good lines keep their payload."""
from __future__ import annotations

import json

import pytest

from streaming_job.parse import quarantined, valid_events, with_parse

pytestmark = pytest.mark.spark

GOOD = [
    '{"event_id":"a","user_id":"u","event_type":"play","event_ts":"2026-03-07T20:15:00.123+01:00","x":{"y":1},"n":5}',
    '{"event_id":"b","user_id":"u","event_type":"play","event_ts":"2026-03-07t20:15:00z"}',
    '{"event_id":7,"user_id":"u","event_type":"play","event_ts":"2026-03-07T20:15:00.123456789Z"}',
]
BAD = {
    '{"event_id":"c","user_id":"","event_type":"play","event_ts":"2026-03-07T20:15:00Z"}':
        "missing or empty required field: user_id",
    '{"event_id":"c2","user_id":"u","event_ts":"2026-03-07T20:15:00Z"}': "missing or empty required field: event_type",
    '{"event_id":"d","user_id":"u","event_type":"play","event_ts":"2026-03-07 20:15:00"}':
        "event_ts is not an RFC 3339 timestamp with offset: 2026-03-07 20:15:00",
    '{"event_id":"e","user_id":"u","event_type":"play","event_ts":"2026-13-07T20:15:00Z"}':
        "event_ts out of range: 2026-13-07T20:15:00Z",
    '{"event_id":"f","user_id":"u"': "not valid JSON",
    "garbage": "not valid JSON",
    "[1,2]": "not a JSON object",
    "42": "not a JSON object",
    "   ": "empty line",
}


@pytest.fixture(scope="module")
def parsed(spark):
    rows = [(line, "file:///landing/f.jsonl") for line in [*GOOD, *BAD]]
    return with_parse(spark.createDataFrame(rows, "value string, source_file string")).cache()


def test_each_bad_line_has_its_reason_and_keeps_its_raw_text(parsed):
    got = {r["raw"]: r["reason"] for r in quarantined(parsed).collect()}
    assert got == BAD
    assert {r["source_file"] for r in quarantined(parsed).collect()} == {"file:///landing/f.jsonl"}


def test_good_lines_become_utc_events_with_their_other_fields_as_payload(parsed):
    events = {r["event_id"]: r for r in valid_events(parsed).collect()}
    assert sorted(events) == ["7", "a", "b"]
    assert events["a"]["event_ts"].strftime("%H:%M:%S.%f") == "19:15:00.123000"  # +01:00 -> UTC
    assert json.loads(events["a"]["payload"]) == {"x": '{"y":1}', "n": "5"}
    assert json.loads(events["b"]["payload"]) == {}
    assert events["7"]["event_ts"].microsecond == 123456  # nanoseconds truncated
