"""The input contract in the stream: every kind of bad line gets its own reason, good lines keep
their payload, and the raw bytes of a refused line reach the quarantine unchanged."""

from __future__ import annotations

import json

import pytest

from streaming_job.parse import quarantined, valid_events, with_parse

pytestmark = pytest.mark.spark

RECEIPT = "2026-03-08 09:00:00"

GOOD = [
    '{"event_id":"a","user_id":"u","event_type":"play","event_ts":"2026-03-07T20:15:00.123+01:00","x":{"y":1},"n":5}',
    '{"event_id":"b","user_id":"u","event_type":"play","event_ts":"2026-03-07t20:15:00z"}',
    '{"event_id":7,"user_id":"u","event_type":"play","event_ts":"2026-03-07T20:15:00.123456789Z"}',
]
BAD = {
    '{"event_id":"c","user_id":"","event_type":"play","event_ts":"2026-03-07T20:15:00Z"}': "missing or empty required field: user_id",
    '{"event_id":"c2","user_id":"u","event_ts":"2026-03-07T20:15:00Z"}': "missing or empty required field: event_type",
    '{"event_id":"d","user_id":"u","event_type":"play","event_ts":"2026-03-07 20:15:00"}': "event_ts is not an RFC 3339 timestamp with offset: 2026-03-07 20:15:00",
    '{"event_id":"e","user_id":"u","event_type":"play","event_ts":"2026-13-07T20:15:00Z"}': "event_ts out of range: 2026-13-07T20:15:00Z",
    '{"event_id":"f","user_id":"u"': "not valid JSON: Expecting ',' delimiter at character 29",
    "garbage": "not valid JSON: Expecting value at character 0",
    "[1,2]": "not a JSON object: array",
    "42": "not a JSON object: number",
    "   ": "empty line",
    '{"event_id":"g","user_id":"u","event_type":"play","event_ts":"2026-03-08T10:00:00.000001Z"}': "event_ts later than its receipt time by more than the max clock skew: "
    "1h after 2026-03-08T09:00:00.000000Z: 2026-03-08T10:00:00.000001Z",
}


@pytest.fixture(scope="module")
def parsed(spark):
    rows = [(line, "file:///landing/f.jsonl", RECEIPT) for line in [*GOOD, *BAD]]
    frame = spark.createDataFrame(rows, "value string, source_file string, receipt_time string").selectExpr(
        "value", "source_file", "CAST(receipt_time AS TIMESTAMP) AS receipt_time"
    )
    return with_parse(frame).cache()


def test_each_bad_line_has_its_reason_and_keeps_its_raw_bytes(parsed):
    got = {bytes(r["raw"]).decode(): r["reason"] for r in quarantined(parsed).collect()}
    assert got == BAD
    assert {r["source_file"] for r in quarantined(parsed).collect()} == {"file:///landing/f.jsonl"}


def test_good_lines_become_utc_events_with_their_other_fields_as_payload(parsed):
    events = {r["event_id"]: r for r in valid_events(parsed).collect()}
    assert sorted(events) == ["7", "a", "b"]
    assert events["a"]["event_ts"].strftime("%H:%M:%S.%f") == "19:15:00.123000"  # +01:00 -> UTC
    assert json.loads(events["a"]["payload"]) == {"x": '{"y":1}', "n": "5"}
    assert json.loads(events["b"]["payload"]) == {}
    assert events["7"]["event_ts"].microsecond == 123456  # nanoseconds truncated


def test_invalid_utf8_and_nul_bytes_reach_the_quarantine_unchanged(spark):
    lines = [b'\xff\xfe{"event_id":1}', b"nul\x00byte", b'{"a":"\xe2\x80\xa8"}']
    # the text source keeps a line's bytes as they are; a binary->string cast does the same here
    frame = spark.createDataFrame(
        [(bytearray(b), "f", RECEIPT) for b in lines], "raw_in binary, source_file string, receipt_time string"
    ).selectExpr("CAST(raw_in AS STRING) AS value", "source_file", "CAST(receipt_time AS TIMESTAMP) AS receipt_time")
    got = {bytes(r["raw"]): r["reason"] for r in quarantined(with_parse(frame)).collect()}
    assert got == {
        lines[0]: "not valid UTF-8: byte 0xff at offset 0",
        lines[1]: "not valid JSON: Expecting value at character 0",
        lines[2]: "missing or empty required field: event_id",
    }
