"""Partition values are validated before they can reach a path."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

import pytest

from tidemark.base import layout
from tidemark.base.durations import format_duration, parse_duration
from tidemark.base.session_rules import SessionRules
from tidemark.store.lake import Lake


@pytest.mark.parametrize(
    "bad",
    ["2026-02-31", "../etc", "2026-3-7", "2026-03-07/../../x", "2026-03-07' OR 1=1 --", "", "20260307", "2026-03-07\n"],
)
def test_bad_event_dates_are_refused_with_the_value_in_the_message(bad):
    # parsed where it enters (refused, saying what was given); the lake takes no text at all
    with pytest.raises(layout.InvalidPartitionValue, match="invalid event_date"):
        layout.as_event_date(bad)
    with pytest.raises(TypeError, match="parse text with as_event_date"):
        Lake.open("/lake").event_date_dir(bad)


def test_event_date_paths():
    assert (
        Lake.open("gs://b/lake/").receipt_dir(date(2026, 3, 7), "20260307T201500123Z")
        == "gs://b/lake/sessions/event_date=2026-03-07/receipt_ts=20260307T201500123Z"
    )
    assert (
        Lake.open("/l").current_pointer(date(2026, 3, 7)) == "/l/sessions_dedup (live files of event_date=2026-03-07)"
    )


def test_receipt_ts_round_trips_and_sorts_like_time():
    moments = [
        datetime(2026, 3, 7, 20, 15, 0, 123000, tzinfo=timezone.utc) + timedelta(milliseconds=k * 997)
        for k in range(0, 5000, 37)
    ]
    texts = [layout.format_receipt_ts(m) for m in moments]
    assert texts == sorted(texts)
    assert [layout.parse_receipt_ts(t) for t in texts] == moments
    assert ":" not in "".join(texts)
    # other zones are converted to UTC
    plus_one = datetime(2026, 3, 7, 21, 15, tzinfo=timezone(timedelta(hours=1)))
    assert layout.format_receipt_ts(plus_one) == "20260307T201500000Z"


@pytest.mark.parametrize("bad", ["2026-03-07T20:15:00Z", "20260307T201500Z", "x/../y", "20261307T201500000Z"])
def test_bad_receipt_ts_refused(bad):
    with pytest.raises(layout.InvalidPartitionValue):
        layout.check_receipt_ts(bad)


def test_durations():
    assert parse_duration("30m") == timedelta(minutes=30)
    assert parse_duration("1.5h") == timedelta(minutes=90)
    assert parse_duration("250ms") == timedelta(milliseconds=250)
    assert format_duration(timedelta(hours=2)) == "2h"
    assert format_duration(timedelta(seconds=90)) == "90s"
    for bad in ("30", "m", "-1h", "1w", "1h; rm"):
        with pytest.raises(ValueError, match="invalid duration"):
            parse_duration(bad)


def test_session_rules_refuse_a_zero_gap():
    with pytest.raises(ValueError, match="gap"):
        SessionRules.parse("0s")
    assert SessionRules.parse("30m", "1h", "10m").gap_us == 30 * 60 * 1_000_000
