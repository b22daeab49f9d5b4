"""Publishing into the Iceberg table: bad input refused up front, concurrent commits of different
dates and of one date, idempotent reruns, runs killed around the commit, a slower run with fewer
receipts, and a partition completed late under an already-used receipt_ts."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import date, datetime, timedelta, timezone

import pytest

from tests import icebergkit
from tests.lakekit import RULES, SimulatedStream, busiest_date, expected, lake_with, published
from tidemark import cli
from tidemark.base import layout
from tidemark.deduplication.dedup import run_dedup
from tidemark.iceberg import commits, reader, table_versions
from tidemark.iceberg import table as iceberg
from tidemark.panes import receipts
from tidemark.store import storage
from tidemark.store.lake import Lake

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("command", ["dedup", "read"])
@pytest.mark.parametrize(
    "bad", ["../x", "2026-02-31", "'; DROP TABLE sessions; --", "2026-3-7", "", "2026-03-07/../../etc"]
)
def test_bad_event_date_is_refused_before_anything_runs(tmp_path, capsys, command, bad):
    lake = Lake.open(tmp_path / "lake")
    assert cli.main([command, "--lake", str(lake), "--event-date", bad]) == 2
    err = capsys.readouterr().err
    assert f"tidemark {command}: error: argument --event-date: invalid event_date" in err
    assert repr(bad)[:20] in err
    assert not os.path.exists(lake)  # nothing created, nothing started


def test_gc_refuses_bad_durations_and_retentions_below_the_floor(tmp_path, capsys):
    assert cli.main(["gc", "--lake", str(tmp_path), "--retention", "a week"]) == 2
    assert cli.main(["gc", "--lake", str(tmp_path), "--retention", "1m"]) == 2
    err = capsys.readouterr().err
    assert "invalid duration 'a week'" in err
    assert "refusing a retention of 1m: below the safe floor of 1h" in err


def _publish_in_process(lake, day, receipts, barrier):
    barrier.wait()
    outcome = icebergkit.publish_run(lake, day, receipts)
    return outcome.committed, outcome.current.run_id, outcome.current.version


@pytest.mark.slow  # not in make test-fast: four spawned Python processes
def test_four_dates_commit_at_once_from_four_processes_and_none_is_lost(tmp_path):
    """Four dedup drivers (processes) publish four dates into one new table at the same moment:
    they race to create it and to commit; conflicts are retried on a fresh snapshot."""
    lake = Lake.open(tmp_path / "lake")
    days = ["2026-03-06", "2026-03-07", "2026-03-08", "2026-03-09"]
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, ProcessPoolExecutor(4, mp_context=context) as pool:
        barrier = manager.Barrier(4)
        futures = {
            day: pool.submit(_publish_in_process, lake, day, [icebergkit.receipt(1), icebergkit.receipt(2)], barrier)
            for day in days
        }
        results = {day: future.result(timeout=300) for day, future in futures.items()}
    assert all(committed for committed, _, _ in results.values())
    assert table_versions.dates_with_version(lake) == [layout.as_event_date(d) for d in days]
    for day, (_, run_id, version) in results.items():
        current = table_versions.current_version(lake, layout.as_event_date(day))
        assert (current.run_id, current.version) == (run_id, version) == (run_id, icebergkit.receipt(2))
        assert reader.read_sessions(lake, layout.as_event_date(day)).num_rows == 1
    tbl = iceberg.load(lake)
    assert sorted(props["tidemark.event-date"] for _, props in table_versions.snapshot_versions(tbl)) == days
    assert tbl.scan().to_arrow().num_rows == 4


@pytest.mark.parametrize("order", ["complete first", "complete last", "at once"])
def test_two_publishes_of_one_date_the_more_complete_wins_in_any_order(tmp_path, order):
    lake, day = Lake.open(tmp_path / "lake"), "2026-03-06"
    complete = icebergkit.prepared_run(lake, day, [icebergkit.receipt(h) for h in (1, 2, 3)], sessions=3)
    partial = icebergkit.prepared_run(lake, day, [icebergkit.receipt(h) for h in (1, 2)], sessions=2)
    if order == "at once":
        barrier = threading.Barrier(2)
        outcomes = {}

        def run(marker):
            barrier.wait()
            outcomes[marker.run_id] = commits.commit(lake, marker)

        threads = [threading.Thread(target=run, args=(m,)) for m in (partial, complete)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert outcomes[complete.run_id].committed
    else:
        first, second = (complete, partial) if order == "complete first" else (partial, complete)
        assert commits.commit(lake, first).committed
        assert commits.commit(lake, second).committed == (second is complete)
    current = table_versions.current_version(lake, layout.as_event_date(day))
    assert current.run_id == complete.run_id
    assert current.version == icebergkit.receipt(3)
    assert reader.read_sessions(lake, layout.as_event_date(day)).num_rows == 3
    # Every version id of the date is unique and grows with what it includes.
    ids = [v.version for v in table_versions.list_versions(lake, layout.as_event_date(day))]
    assert ids == sorted(set(ids))


def test_a_run_missing_receipts_the_current_version_has_is_refused_and_must_replan(tmp_path):
    lake, day = Lake.open(tmp_path / "lake"), "2026-03-06"
    assert icebergkit.publish_run(lake, day, [icebergkit.receipt(1), icebergkit.receipt(3)]).committed
    other = icebergkit.prepared_run(lake, day, [icebergkit.receipt(1), icebergkit.receipt(2)])
    with pytest.raises(commits.Superseded, match="1 receipt partition"):
        commits.commit(lake, other)
    assert table_versions.current_version(lake, layout.as_event_date(day)).version == icebergkit.receipt(3)
    # Same highest receipt, more receipts: a later id (+1 ms), never the same one.
    fuller = icebergkit.prepared_run(lake, day, [icebergkit.receipt(h) for h in (1, 2, 3)])
    assert commits.commit(lake, fuller).current.version == "20260310T030000001Z"


@pytest.mark.spark
def test_rerun_without_new_receipts_is_a_noop_without_spark(spark, tmp_path, monkeypatch):
    lake, _, events, _ = lake_with(tmp_path)
    day = busiest_date(events)
    first = run_dedup(lake, day, RULES, spark=spark)
    assert first.published
    assert not first.noop
    assert first.version == max(
        k.split("/")[1] for k in table_versions.current_version(lake, layout.as_event_date(day)).receipts
    )
    # Where the time went, phase by phase, adding up to the run's seconds (the profile's source).
    assert list(first.phases) == ["plan", "spark", "compute", "write", "commit", "changes", "notice"]
    assert all(s >= 0 for s in first.phases.values())
    assert sum(first.phases.values()) == pytest.approx(first.seconds, abs=0.01)
    snapshot = iceberg.load(lake).current_snapshot().snapshot_id
    runs = sorted(os.listdir(os.path.dirname(lake.run_dir(layout.as_event_date(day), first_run(lake, day)))))

    import tidemark.base.spark

    monkeypatch.setattr(tidemark.base.spark, "build_session", lambda *a, **k: pytest.fail("Spark started"))
    again = run_dedup(lake, day, RULES)  # no spark given: it must not need one
    assert again.noop
    assert not again.published
    assert again.version == first.version
    assert again.rows_read == 0
    assert again.affected_dates == []
    assert again.phases == {}
    assert iceberg.load(lake).current_snapshot().snapshot_id == snapshot  # nothing committed
    assert sorted(os.listdir(os.path.dirname(lake.run_dir(layout.as_event_date(day), first_run(lake, day))))) == runs
    assert published(lake, day) == expected(events, day)


def first_run(lake, day):
    return table_versions.current_version(lake, layout.as_event_date(day)).run_id


def _killed_before_commit(real):
    def commit(lake, marker, **options):
        raise KeyboardInterrupt()

    return commit


def _killed_after_commit(real):
    def commit(lake, marker, **options):
        real(lake, marker, **options)
        raise KeyboardInterrupt()

    return commit


@pytest.mark.slow  # not in make test-fast: a dedup killed and rerun per crash point
@pytest.mark.spark
@pytest.mark.parametrize("when", ["before", "during", "after"])
def test_killed_around_the_commit_then_rerun_ends_equal_to_the_batch_reference(spark, tmp_path, monkeypatch, when):
    """Killed before the commit (files and marker written), during it (the new metadata file written,
    the catalog not switched), or after it (before the run reports): readers always see one whole
    version, and a rerun ends with the table equal to the batch reference."""
    from pyiceberg.catalog.sql import SqlCatalog

    lake, stream, events, cut = lake_with(tmp_path, upto=2)
    day = busiest_date(events)
    v1 = run_dedup(lake, day, RULES, spark=spark)
    seen = [e for batch in cut[:2] for e in batch]
    assert published(lake, day) == expected(seen, day)
    for deliveries in cut[2:]:
        stream.batch(deliveries)

    if when == "during":
        real_write = SqlCatalog._write_metadata

        def write_then_die(*args, **kwargs):
            real_write(*args, **kwargs)
            raise KeyboardInterrupt()

        monkeypatch.setattr(SqlCatalog, "_write_metadata", staticmethod(write_then_die))
    else:
        wrap = _killed_before_commit if when == "before" else _killed_after_commit
        monkeypatch.setattr(commits, "commit", wrap(commits.commit))
    with pytest.raises(KeyboardInterrupt):
        run_dedup(lake, day, RULES, spark=spark)
    monkeypatch.undo()
    current = table_versions.current_version(lake, layout.as_event_date(day))
    if when == "after":
        assert current.version > v1.version
        assert published(lake, day) == expected(events, day)
    else:
        assert current.version == v1.version
        assert published(lake, day) == expected(seen, day)
    assert reader.read_sessions(lake, layout.as_event_date(day)).num_rows == current.sessions  # whole, whichever it is

    rerun = run_dedup(lake, day, RULES, spark=spark)
    assert rerun.noop == (when == "after")
    assert published(lake, day) == expected(events, day)
    complete = {
        f"{p.event_date}/{p.receipt_ts}"
        for d in receipts.list_event_dates(lake)
        for p in [receipts.read_marker(lake, d, ts) for ts in receipts.list_receipts(lake, d)]
    }
    assert set(table_versions.current_version(lake, layout.as_event_date(day)).receipts) <= complete


@pytest.mark.spark
def test_a_slower_run_with_fewer_receipts_never_replaces_a_more_complete_version(spark, tmp_path, monkeypatch):
    """Issue 11 point 5. Run B plans while a partition of the last batch is still incomplete, and
    is slow; run A plans after it completed and publishes first. B must not publish its version
    (same highest receipt_ts, fewer receipts) over A's, nor under the same version id."""
    lake = Lake.open(tmp_path / "lake")
    stream = SimulatedStream(lake, 1)
    t = lambda h, m, d=6: datetime(2026, 3, d, h, m, tzinfo=timezone.utc)  # noqa: E731
    stream.batch([("u1", "a", t(23, 20), "play"), ("u1", "b", t(23, 45), "play")])
    written = stream.batch([("u1", "c", t(0, 10, 7), "play"), ("u2", "x", t(10, 0), "play")], mode=0.0)
    hidden = lake.receipt_marker(date(2026, 3, 7), written[0].receipt_ts)
    text = storage.read_text(hidden)
    os.remove(hidden)

    import tidemark.deduplication.dedup

    real_write = tidemark.deduplication.dedup._write_version
    b_waiting, b_go = threading.Event(), threading.Event()

    def slow_for_b(*args, **kwargs):
        if threading.current_thread().name == "run-b":
            b_waiting.set()
            assert b_go.wait(300)
        return real_write(*args, **kwargs)

    monkeypatch.setattr(tidemark.deduplication.dedup, "_write_version", slow_for_b)
    results = {}
    b = threading.Thread(
        name="run-b", target=lambda: results.update(b=run_dedup(lake, "2026-03-06", RULES, spark=spark))
    )
    b.start()
    assert b_waiting.wait(300)
    storage.write_text_atomic(hidden, text)  # the partition completes
    a = run_dedup(lake, "2026-03-06", RULES, spark=spark)
    b_go.set()
    b.join(300)
    assert a.published
    events = [
        ("u1", "a", t(23, 20), "play"),
        ("u1", "b", t(23, 45), "play"),
        ("u1", "c", t(0, 10, 7), "play"),
        ("u2", "x", t(10, 0), "play"),
    ]
    current = table_versions.current_version(lake, layout.as_event_date("2026-03-06"))
    assert f"2026-03-07/{written[0].receipt_ts}" in current.receipts
    assert published(lake, "2026-03-06") == expected(events, "2026-03-06")
    assert not results["b"].published
    assert current.version == a.version


@pytest.mark.spark
@pytest.mark.slow  # a second Spark driver in a subprocess
def test_process_killed_mid_run_leaves_previous_version_readable(spark, tmp_path):
    lake, stream, events, cut = lake_with(tmp_path, seed=8, upto=2)
    day = busiest_date(events)
    v1 = run_dedup(lake, day, RULES, spark=spark)
    for deliveries in cut[2:]:
        stream.batch(deliveries)
    env = {**os.environ, "TIDEMARK_SPARK_MASTER": "local[1]", "PYTHONPATH": ROOT}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tidemark.cli", "dedup", "--lake", str(lake), "--event-date", day],
        cwd=ROOT,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # Kill it as soon as it has started writing its new version's data.
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if len(os.listdir(os.path.dirname(lake.run_dir(layout.as_event_date(day), first_run(lake, day))))) > 1:
                break
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    pointer = table_versions.current_version(lake, layout.as_event_date(day))
    assert pointer.version >= v1.version
    current = reader.read_sessions(lake, layout.as_event_date(day))  # whichever it is, it is whole
    assert current.num_rows == pointer.sessions
    run_dedup(lake, day, RULES, spark=spark)
    assert published(lake, day) == expected(events, day)


@pytest.mark.spark
def test_concurrent_runs_of_one_date_both_succeed_and_agree(spark, tmp_path):
    lake, _, events, _ = lake_with(tmp_path, seed=9)
    day = busiest_date(events)
    results, errors = [], []

    def run():
        try:
            results.append(run_dedup(lake, day, RULES, spark=spark))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    pointer = table_versions.current_version(lake, layout.as_event_date(day))
    assert {r.version for r in results} == {pointer.version}
    assert sorted(r.published for r in results) == [False, True]  # one commit, one no-op
    assert published(lake, day) == expected(events, day)
    assert [v.version for v in table_versions.list_versions(lake, layout.as_event_date(day))] == [pointer.version]


@pytest.mark.spark
def test_partition_completed_late_under_a_used_receipt_ts_gets_a_newer_version(spark, tmp_path):
    """A batch wrote two dates and crashed before the second marker; its replay completes that
    partition later, under the batch's (already used) receipt_ts."""
    lake = Lake.open(tmp_path / "lake")
    stream = SimulatedStream(lake, 1)
    t = lambda h, m, d=6: datetime(2026, 3, d, h, m, tzinfo=timezone.utc)  # noqa: E731
    stream.batch([("u1", "a", t(23, 20), "play"), ("u1", "b", t(23, 45), "play")])
    # u1's 00:10 arrives as a fragment (a pane of 2026-03-07), u2 gets a pane of 2026-03-06.
    written = stream.batch([("u1", "c", t(0, 10, 7), "play"), ("u2", "x", t(10, 0), "play")], mode=0.0)
    assert {p.event_date for p in written} == {date(2026, 3, 6), date(2026, 3, 7)}
    hidden = lake.receipt_marker(date(2026, 3, 7), written[0].receipt_ts)
    text = storage.read_text(hidden)
    os.remove(hidden)
    first = run_dedup(lake, "2026-03-06", RULES, spark=spark)
    assert first.version == written[0].receipt_ts
    assert {(s[0], s[4]) for s in published(lake, "2026-03-06")} == {("u1", 2), ("u2", 1)}

    storage.write_text_atomic(hidden, text)  # the replay completes it
    second = run_dedup(lake, "2026-03-06", RULES, spark=spark)
    assert not second.noop
    assert second.published
    assert second.version == layout.format_receipt_ts(
        layout.parse_receipt_ts(first.version) + timedelta(milliseconds=1)
    )
    assert second.affected_dates == [date(2026, 3, 7)]  # u1's 2026-03-07 fragment now belongs to 03-06
    events = [
        ("u1", "a", t(23, 20), "play"),
        ("u1", "b", t(23, 45), "play"),
        ("u1", "c", t(0, 10, 7), "play"),
        ("u2", "x", t(10, 0), "play"),
    ]
    assert published(lake, "2026-03-06") == expected(events, "2026-03-06")
    assert {(s[0], s[4]) for s in published(lake, "2026-03-06")} == {("u1", 3), ("u2", 1)}


@pytest.mark.spark
def test_dedup_command_prints_one_json_result_line(spark, tmp_path, capsys):
    lake, _, events, _ = lake_with(tmp_path, seed=6)
    day = busiest_date(events)
    # The in-process SparkSession is reused by the command's builder (getOrCreate).
    assert cli.main(["dedup", "--lake", str(lake), "--event-date", day, "--gap", "30m"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1
    result = json.loads(lines[0])
    pointer = table_versions.current_version(lake, layout.as_event_date(day))
    assert set(result) >= {
        "event_date",
        "version",
        "published",
        "sessions",
        "receipts_read",
        "rows_read",
        "affected_dates",
    }
    assert (result["event_date"], result["version"], result["sessions"], result["published"]) == (
        day,
        pointer.version,
        pointer.sessions,
        True,
    )
    assert result["rows_read"] == pointer.rows_read > 0
    assert result["affected_dates"] == [layout.event_date_text(d) for d in pointer.affected_dates]
    assert published(lake, day) == expected(events, day)


@pytest.mark.parametrize("known_count", [0, 3, 8, 10])
def test_known_receipts_are_flagged_with_the_smaller_list_of_literals(spark, known_count):
    # The full path flags panes whose receipt the previous version read. A date read by thousands
    # of receipts must not put thousands of literals in a plan: the flag is spelled with whichever
    # list is smaller, the receipts new since that version or the ones it read.
    from tidemark.deduplication.dedup import known_receipt

    planned = [f"2026-03-07/2026030{i}T000000000Z" for i in range(10)]
    known = set(planned[:known_count]) | {"2026-03-06/20260301T000000000Z"}  # one not in the plan
    frame = spark.createDataFrame([(key,) for key in planned], "key string")
    column = known_receipt(frame["key"], planned, known)
    got = {row["key"]: row["known"] for row in frame.select("key", column.alias("known")).collect()}
    assert got == {key: key in known for key in planned}
    assert str(column).count("2026-03-07/") <= min(known_count, 10 - known_count)
