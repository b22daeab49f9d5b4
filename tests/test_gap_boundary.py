"""The gap boundary (issue 32): what happens to two events of one user exactly one gap apart.

Spark's own `session_window` is the oracle. Over the distinct events of a lake:
  merge  the deduplicated table equals Spark's session_window at the gap (Spark merges touching windows);
  split  it equals Spark's session_window at the gap minus 1 us (timestamps are whole microseconds).
The scenario has pairs exactly one gap apart, 1 us under and over, across midnight, a chain of exact
gaps, copies, and late events that bridge sessions already published. The lake is written by the
stream simulator (tests/lakekit.py: panes are subsets of final sessions), then `rules migrate`
switches it split -> merge -> split, re-deduplicating every date each time.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import date, datetime, timedelta, timezone

import pytest

from tests.lakekit import SimulatedStream
from tidemark.base.layout import as_event_date
from tidemark.base.times import to_micros
from tidemark.deduplication import rules_migration
from tidemark.deduplication.dedup import run_dedup
from tidemark.demo import batch_reference
from tidemark.iceberg import reader
from tidemark.panes import planning
from tidemark.session import rules_record
from tidemark.session.sessions import SessionRules, parse_overrides
from tidemark.store.lake import Lake
from tidemark.store.version_record import VersionRecord

GAP = timedelta(minutes=30)
US = timedelta(microseconds=1)
D = datetime(2026, 3, 7, tzinfo=timezone.utc)
SPLIT = SessionRules(gap=GAP)
MERGE = SessionRules(gap=GAP, gap_boundary="merge")


def at(hours: float, extra: timedelta = timedelta(0)) -> datetime:
    return D + timedelta(hours=hours) + extra


# (user, event_id, event_ts, event_type): the first arrivals, then the late ones.
FIRST = [
    ("exact", "a", at(10), "view"),
    ("exact", "b", at(10.5), "view"),  # one gap apart
    ("under", "a", at(10), "view"),
    ("under", "b", at(10.5, -US), "view"),  # 1 us under
    ("over", "a", at(10), "view"),
    ("over", "b", at(10.5, US), "view"),  # 1 us over
    ("midnight", "a", at(23.75), "view"),
    ("midnight", "b", at(24.25), "view"),  # across midnight
    ("chain", "a", at(9), "view"),
    ("chain", "b", at(9.5), "view"),
    ("chain", "c", at(10), "view"),
    ("bridge", "a", at(12), "view"),
    ("bridge", "c", at(13), "view"),
    ("bridge_midnight", "a", at(23.5), "view"),
    ("bridge_midnight", "c", at(24.5), "view"),
]
LATE = [
    ("bridge", "b", at(12.5), "view"),  # exactly one gap from both neighbours
    ("bridge_midnight", "b", at(24), "view"),  # exactly midnight, one gap from both
    ("exact", "b", at(10.5), "view"),  # a copy of an event already landed
    ("chain", "d", at(10.5), "view"),  # extends the chain by one more exact gap
]
EXTRA = [("over", "c", at(11, US), "view")]  # exactly one gap after `over`'s last event


def spark_sessions(spark, events, gap_text: str):
    """Spark's session_window over the distinct events: (user_id, session_start, session_end, event_count)."""
    from pyspark.sql import functions as F

    distinct = sorted({(u, e, ts) for u, e, ts, _ in events})
    df = spark.createDataFrame(distinct, "user_id string, event_id string, event_ts timestamp")
    return (
        df.groupBy("user_id", F.session_window("event_ts", gap_text).alias("w"))
        .agg(F.max("event_ts").alias("session_end"), F.count("*").alias("event_count"))
        .select("user_id", F.col("w.start").alias("session_start"), "session_end", "event_count")
    )


def lake_sessions(spark, lake: Lake, dates):
    """Every date's published sessions, with a check that each lies in the partition of its start date."""
    rows = []
    for event_date in dates:
        try:
            table = reader.read_sessions(lake, as_event_date(event_date))
        except reader.NoVersion:
            continue
        for row in table.to_pylist():
            assert row["session_start"].date().isoformat() == event_date
            rows.append((row["user_id"], row["session_start"], row["session_end"], row["event_count"]))
    return spark.createDataFrame(
        rows, "user_id string, session_start timestamp, session_end timestamp, event_count bigint"
    )


def _check(spark, lake, events, dates, rules):
    from pyspark.testing import assertDataFrameEqual

    gap_us = int(rules.gap / US)
    oracle_gap = f"{gap_us if rules.gap_boundary == 'merge' else gap_us - 1} microseconds"
    expected = spark_sessions(spark, events, oracle_gap)
    assertDataFrameEqual(lake_sessions(spark, lake, dates), expected)
    # The batch reference follows the same rules (it takes the rules, not only the gap).
    # Compared in microseconds: collect() gives naive local datetimes, the reference aware UTC ones.
    reference = {
        (s.user_id, to_micros(s.session_start), to_micros(s.session_end), s.event_count)
        for s in batch_reference.sessionize([(u, e, ts) for u, e, ts, _ in events], rules)
    }
    assert reference == {
        tuple(r)
        for r in expected.selectExpr(
            "user_id", "unix_micros(session_start)", "unix_micros(session_end)", "event_count"
        ).collect()
    }


@pytest.mark.spark
def test_dedup_equals_spark_session_window_under_both_boundaries_and_migrations(spark, tmp_path):
    lake = Lake.open(tmp_path / "lake")
    stream = SimulatedStream(lake, seed=3)
    dates = [D.date().isoformat(), (D + timedelta(days=1)).date().isoformat()]

    stream.batch(FIRST, mode=0.0)
    first = rules_migration.migrate(lake, SPLIT, spark=spark, recorded_by="test")
    assert first.record.rules == SPLIT
    _check(spark, lake, FIRST, dates, SPLIT)

    # Late events bridge sessions already published; the stream wrote them as fragments.
    stream.batch(LATE, mode=0.0)
    everything = FIRST + LATE
    to_merge = rules_migration.migrate(lake, MERGE, spark=spark, recorded_by="test")
    assert to_merge.changed
    assert rules_record.current(lake).rules == MERGE
    assert rules_migration.stale_dates(lake) == []
    _check(spark, lake, everything, dates, MERGE)
    # A sanity check that the scenario tells the boundaries apart at all.
    assert (
        lake_sessions(spark, lake, dates).count() < spark_sessions(spark, everything, "1799999999 microseconds").count()
    )

    # One more late event, exactly one gap after the last: a plain dedup run (the incremental path
    # where it can vouch for the result) under the recorded `merge`.
    stream.batch(EXTRA, mode=0.0)
    everything += EXTRA
    modes = {run_dedup(lake, event_date, spark=spark).to_json().get("mode") for event_date in dates}
    _check(spark, lake, everything, dates, MERGE)
    assert "incremental" in modes, modes

    back = rules_migration.migrate(lake, SPLIT, spark=spark, recorded_by="test")
    assert back.changed
    assert back.record.rules_id == first.record.rules_id
    assert [r.rules.gap_boundary for r in rules_record.history(lake)] == ["split", "merge", "split"]
    _check(spark, lake, everything, dates, SPLIT)


# ---- the rule and its record, without Spark ------------------------------------------------------


def test_split_is_merge_one_microsecond_later():
    assert SPLIT.split_gap == GAP
    assert MERGE.split_gap == GAP + US
    assert SPLIT.gap_us == 1_800_000_000
    assert MERGE.gap_us == 1_800_000_001
    assert SessionRules(gap=GAP + US).gap_us == MERGE.gap_us  # the SQL sees one threshold
    assert MERGE.micros()["gap_us"] == 1_800_000_000  # the record keeps the true gap


def test_default_boundary_keeps_existing_records_and_ids():
    # A record written before the boundary existed: its id must still be the fingerprint of its rules.
    legacy = {"gap_us": 1_800_000_000, "allowed_lateness_us": 3_600_000_000, "watermark_delay_us": 600_000_000}
    assert SessionRules.from_micros(legacy) == SPLIT
    assert SPLIT.micros() == legacy
    assert "gap_boundary" not in SPLIT.describe()
    assert rules_record.fingerprint(MERGE) != rules_record.fingerprint(SPLIT)
    assert SessionRules.from_micros(MERGE.micros()) == MERGE
    assert MERGE.describe()["gap_boundary"] == "merge"
    assert rules_record.describe_rules(MERGE).endswith("gap boundary merge")


def test_a_version_without_rules_id_was_made_under_split():
    legacy = VersionRecord.from_marker({"event_date": "2026-03-10", "run_id": "a" * 32, "gap": "30m"})
    assert not rules_record.changed_since(legacy, SPLIT)
    assert rules_record.changed_since(legacy, MERGE)
    assert rules_record.changed_since(replace(legacy, rules_id=rules_record.fingerprint(SPLIT)), MERGE)
    assert not rules_record.changed_since(replace(legacy, rules_id=rules_record.fingerprint(MERGE)), MERGE)


def test_boundary_is_recorded_and_checked(tmp_path):
    lake = Lake.open(tmp_path / "lake")
    recorded = rules_record.ensure(lake, {"gap_boundary": "merge"}, "test")
    assert recorded.rules == MERGE
    assert rules_record.parse_record(recorded.to_json()).rules == MERGE
    with pytest.raises(rules_record.RulesMismatch, match="--gap-boundary split given, the lake records merge"):
        rules_record.check(lake, {"gap_boundary": "split"}, "tidemark stream")
    assert rules_record.check(lake, {"gap": GAP}, "tidemark stream")[0] == MERGE


def test_bad_boundary_is_refused_clearly():
    with pytest.raises(ValueError, match="gap boundary must be one of split, merge, got 'touch'"):
        parse_overrides(gap_boundary="touch")
    with pytest.raises(TypeError, match="SessionRules or a gap"):
        SessionRules.of(30)


def test_planning_bounds_follow_the_boundary():
    # Under merge an event exactly one gap before midnight can still join a session of the day.
    assert planning.lo_of(date(2026, 3, 8), SPLIT) == datetime(2026, 3, 7, 23, 30, tzinfo=timezone.utc)
    assert planning.lo_of(date(2026, 3, 8), MERGE) == datetime(2026, 3, 7, 23, 30, tzinfo=timezone.utc) - US
    # A session reaching 23:30 on D+1: a pane at D+2 00:00 joins under merge only.
    reach = datetime(2026, 3, 8, 23, 30, tzinfo=timezone.utc)
    assert planning.needed_hi(date(2026, 3, 7), SPLIT, reach) == date(2026, 3, 9)
    reach_before = reach - US
    assert planning.needed_hi(date(2026, 3, 7), SPLIT, reach_before) == date(2026, 3, 8)
    assert planning.needed_hi(date(2026, 3, 7), MERGE, reach_before) == date(2026, 3, 9)


# ---- the command line ------------------------------------------------------------------------------


def test_stream_refuses_another_boundary_before_spark_starts_and_rules_show_names_it(tmp_path, capsys):
    from tidemark import cli

    lake = Lake.open(tmp_path / "lake")
    rules_record.ensure(lake, MERGE, "tidemark stream")
    code = cli.main(
        [
            "stream",
            "--landing",
            str(tmp_path / "landing"),
            "--lake",
            str(lake),
            "--checkpoint",
            str(tmp_path / "ckpt"),
            "--gap-boundary",
            "split",
            "--available-now",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "--gap-boundary split given, the lake records merge" in err
    assert "tidemark rules migrate --lake" in err
    assert "--gap-boundary split" in err
    assert not (tmp_path / "ckpt").exists()
    assert cli.main(["rules", "show", "--lake", str(lake), "--json"]) == 0
    import json

    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[0]["gap_boundary"] == "merge"
    assert [line["rules_us"].get("gap_boundary", "split") for line in lines if line["kind"] == "record"] == ["merge"]


def test_a_bad_boundary_option_is_a_usage_error(tmp_path, capsys):
    from tidemark import cli

    assert cli.main(["rules", "migrate", "--lake", str(tmp_path / "lake"), "--gap-boundary", "touch"]) == 2
    assert "invalid choice: 'touch'" in capsys.readouterr().err
    assert not (tmp_path / "lake").exists()


# ---- the real stream under `merge` (slow) ---------------------------------------------------------


def _text(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@pytest.mark.slow
@pytest.mark.spark
def test_the_stream_and_dedup_under_merge_equal_spark_session_window(spark, tmp_path):
    """The stream (its panes, state and expiry) and the dedup under `merge`, one file per batch:
    the late events arrive after the watermark passed their sessions (a far-later event pushes it)."""
    from streaming_job.job import StreamConfig, run_stream
    from tests.streamkit import event, land

    far = ("far", "z", at(24 * 2 + 12), "view")  # moves the watermark past everything above
    files = [
        [event(u, e, _text(ts), kind) for u, e, ts, kind in FIRST],
        [event(*far[:2], _text(far[2]), far[3])],
        [event(u, e, _text(ts), kind) for u, e, ts, kind in LATE],
    ]
    landing, lake, ckpt = str(tmp_path / "landing"), Lake.open(tmp_path / "lake"), str(tmp_path / "ckpt")
    land(landing, files)
    run_stream(
        StreamConfig(landing, lake, ckpt, {"gap_boundary": "merge"}, available_now=True, max_files_per_trigger=1),
        spark=spark,
    )
    assert rules_record.current(lake).rules == MERGE
    # The stream itself merges at the gap: its panes already join events exactly one gap apart.
    from tests.streamkit import panes

    counts = {row["user_id"]: 0 for row in panes(lake)}
    for row in panes(lake):
        counts[row["user_id"]] = max(counts[row["user_id"]], row["event_count"])
    assert counts["exact"] == 2
    assert counts["midnight"] == 2
    assert counts["over"] == 1
    dates = rules_migration.event_dates(lake)
    for event_date in dates:
        run_dedup(lake, event_date, spark=spark)
    _check(spark, lake, FIRST + LATE + [far], dates, MERGE)
