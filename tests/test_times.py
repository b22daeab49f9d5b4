"""tidemark.base.times: one spelling of UTC instants, and back."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from tidemark.base import times

T = datetime(2026, 3, 7, 20, 15, 0, 123456, tzinfo=timezone.utc)


def test_iso_z_is_utc_with_a_z_whatever_the_offset_or_precision():
    assert times.iso_z(T) == "2026-03-07T20:15:00.123Z"
    assert times.iso_z(T, "microseconds") == "2026-03-07T20:15:00.123456Z"
    assert times.iso_z(T.astimezone(timezone(timedelta(hours=2)))) == "2026-03-07T20:15:00.123Z"
    assert times.iso_z(T.replace(tzinfo=None)) == "2026-03-07T20:15:00.123Z"  # naive: taken as UTC
    assert times.now_iso_z().endswith("Z")


@pytest.mark.parametrize(
    "text", ["2026-03-07T20:15:00.123456Z", "2026-03-07T20:15:00.123456z", "2026-03-07T22:15:00.123456+02:00"]
)
def test_parse_iso_reads_every_offset_spelling(text):
    assert times.parse_iso(text) == T


def test_parse_iso_refuses_a_time_without_offset_unless_told():
    with pytest.raises(ValueError, match="no UTC offset"):
        times.parse_iso("2026-03-07T20:15:00")
    assert times.parse_iso("2026-03-07T20:15:00", default_utc=True) == T.replace(microsecond=0)
    with pytest.raises(ValueError, match="yesterday"):
        times.parse_iso("yesterday")


def test_micros_round_trip_exactly():
    micros = times.to_micros(T)
    assert micros == 1772914500123456  # exact: no float on the way
    assert times.from_micros(micros) == T
    assert times.iso_from_micros(micros) == "2026-03-07T20:15:00.123456Z"
    assert times.parse_iso(times.iso_from_micros(micros)) == T
