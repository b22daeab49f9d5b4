"""Daily session metrics (the example consumer's product): computed from a date's current version
with pyarrow, written idempotently to its own partition, equal to the same metrics of the batch
reference's sessions."""

from __future__ import annotations

import os
from datetime import date, datetime, timedelta, timezone

import pytest

from tests.icebergkit import receipt, version_with
from tidemark.base import layout
from tidemark.iceberg import reader, table_versions
from tidemark.products import session_metrics
from tidemark.store.lake import Lake
from tidemark.store.locations import Root

D = date(2026, 3, 10)  # icebergkit.version_with's default date
MONDAY = date(2026, 3, 9)
T = datetime(2026, 3, 10, 23, 40, tzinfo=timezone.utc)


def test_metrics_of_known_sessions():
    rows = [
        ("a", T, T + timedelta(minutes=30)),  # crosses midnight
        ("a", T - timedelta(hours=5), T - timedelta(hours=5)),
        ("b", T - timedelta(hours=1), T - timedelta(minutes=50)),
        ("c", T - timedelta(hours=2), T - timedelta(hours=2, seconds=-20)),
    ]
    got = session_metrics.from_sessions(D, "v", rows)
    # durations 0, 20, 600, 1800 s: median between 20 and 600, p95 = 600 + 0.85 * 1200
    assert got == {
        "event_date": "2026-03-10",  # the row's text, as the Parquet file holds it
        "version": "v",
        "sessions": 4,
        "users": 3,
        "median_duration_s": 310.0,
        "p95_duration_s": pytest.approx(1620.0),
        "crossed_midnight": 1,
    }
    assert session_metrics.from_sessions(D, None, [])["median_duration_s"] is None


def test_rebuild_reads_the_current_version_and_is_idempotent(tmp_path):
    lake, out = Lake.open(tmp_path / "lake"), str(tmp_path / "out")
    version_with(lake, [receipt(1)], {"a" * 32: (5, 2), "b" * 32: (9, 1)})
    first = session_metrics.rebuild(lake, D, out)
    path = session_metrics.partition_path(out, D)
    assert session_metrics.read(out, D) == first
    assert first["sessions"] == 2
    again = session_metrics.rebuild(lake, D, out)  # a rerun or a cleared task
    assert again == first
    assert session_metrics.read(out, D) == first
    v2 = version_with(lake, [receipt(1), receipt(2)], {"a" * 32: (5, 2), "b" * 32: (30, 3), "c" * 32: (60, 1)})
    second = session_metrics.rebuild(lake, D, out)
    assert second["version"] == v2.version == table_versions.current_version(lake, D).version
    sessions = reader.read_sessions(lake, D, columns=["user_id", "session_start", "session_end"])
    assert second == session_metrics.compute(D, v2.version, sessions)
    assert second["sessions"] == 3
    assert path.endswith(f"event_date={D}/metrics.parquet")
    with pytest.raises(ValueError, match="day is out of range"):
        session_metrics.rebuild(lake, layout.as_event_date("2026-02-30"), out)  # the DAG's parse refuses it


def test_the_weekly_rollup_reads_every_date_of_the_week_that_has_a_version(tmp_path):
    lake, out = Lake.open(tmp_path / "lake"), str(tmp_path / "out")
    version_with(lake, [receipt(1)], {"a" * 32: (5, 2), "b" * 32: (9, 1)})  # 2026-03-10, a Tuesday
    week = session_metrics.rebuild_week(lake, MONDAY, out)
    day = session_metrics.rebuild(lake, D, str(tmp_path / "daily"))
    # One date with a version in the week: the week's metrics are that date's.
    assert {k: v for k, v in week.items() if k not in ("event_date", "version")} == {
        k: v for k, v in day.items() if k not in ("event_date", "version")
    }
    assert week["event_date"] == "2026-03-09"
    assert week["version"] == f"{D}={day['version']}"
    assert session_metrics.read_week(out, MONDAY) == week
    assert session_metrics.rebuild_week(lake, MONDAY, out) == week  # a rerun: the same
    empty = session_metrics.rebuild_week(lake, date(2026, 3, 2), out)  # no date of it has a version
    assert empty["sessions"] == 0
    assert empty["version"] is None
    with pytest.raises(ValueError, match="not a Monday"):
        session_metrics.rebuild_week(lake, D, out)
    with pytest.raises(ValueError, match="expected a calendar date"):
        session_metrics.rebuild_week(lake, layout.as_event_date("../../etc"), out)  # the DAG's parse refuses it


def test_a_metrics_file_is_replaced_whole(tmp_path, monkeypatch):
    folder = tmp_path / "out" / "event_date=2026-03-10"
    target = Root(str(tmp_path / "out")).file("event_date=2026-03-10", "metrics.parquet")
    target.write_bytes_atomic(b"first")  # its folder made on the way
    target.write_bytes_atomic(b"second")
    assert (folder / "metrics.parquet").read_bytes() == b"second"
    assert os.listdir(folder) == ["metrics.parquet"]  # no temporary file left beside it

    def dies(*_args):
        raise OSError("killed before the rename")

    monkeypatch.setattr(os, "replace", dies)
    with pytest.raises(OSError, match="killed before the rename"):
        target.write_bytes_atomic(b"third")
    assert (folder / "metrics.parquet").read_bytes() == b"second"  # a reader never sees a part
