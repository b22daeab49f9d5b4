"""Publishing: bad input refused up front, idempotent reruns, killed runs, concurrent runs, and a
partition completed late under an already-used receipt_ts."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

from streaming_job import receipts
from tests.test_dedup_lake import RULES, SimulatedStream, arrivals, expected, make_events, published
from tidemark import cli, layout, publish, reader, storage
from tidemark.dedup import run_dedup

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def lake_with(tmp_path, seed=5, batches=4, upto=None):
    """A simulated lake (see test_dedup_lake.py): returns (lake, stream, events, batches)."""
    rng = random.Random(seed)
    events = make_events(rng, users=3, days=2)
    lake = str(tmp_path / "lake")
    stream = SimulatedStream(lake, seed)
    cut = arrivals(rng, events, batches)
    for deliveries in cut[:upto]:
        stream.batch(deliveries)
    return lake, stream, events, cut


def busiest_date(events) -> str:
    days = [ts.date().isoformat() for _, _, ts, _ in events]
    return max(sorted(set(days)), key=days.count)


@pytest.mark.parametrize("command", ["dedup", "read"])
@pytest.mark.parametrize("bad", ["../x", "2026-02-31", "'; DROP TABLE sessions; --", "2026-3-7", "",
                                 "2026-03-07/../../etc"])
def test_bad_event_date_is_refused_before_anything_runs(tmp_path, capsys, command, bad):
    lake = str(tmp_path / "lake")
    assert cli.main([command, "--lake", lake, "--event-date", bad]) == 2
    err = capsys.readouterr().err
    assert f"tidemark {command}: error: invalid event_date" in err and repr(bad)[:20] in err
    assert not os.path.exists(lake)  # nothing created, nothing started


def test_gc_refuses_bad_dates_and_durations(tmp_path, capsys):
    assert cli.main(["gc", "--lake", str(tmp_path), "--event-date", "2026-13-01"]) == 2
    assert cli.main(["gc", "--lake", str(tmp_path), "--retention", "a week"]) == 2
    err = capsys.readouterr().err
    assert "invalid event_date '2026-13-01'" in err and "invalid duration 'a week'" in err


def test_pointer_converges_to_the_newest_complete_version_under_concurrent_writers(tmp_path):
    """Many writers complete versions in random order and switch the pointer at once, no lock."""
    lake, day = str(tmp_path / "lake"), "2026-03-06"
    versions = [layout.format_receipt_ts(publish.layout.parse_receipt_ts("20260306T000000000Z")
                                         .replace(second=i)) for i in range(24)]
    random.Random(3).shuffle(versions)
    barrier = threading.Barrier(len(versions))

    def writer(version):
        barrier.wait()
        publish.complete_version(lake, {"event_date": day, "version": version, "data": "data-" + "0" * 32,
                                        "files": [], "sessions": 0, "receipts": [],
                                        "created_at": "2026-03-06T00:00:00Z"})
        publish.switch_pointer(lake, day)

    threads = [threading.Thread(target=writer, args=(v,)) for v in versions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert publish.read_pointer(lake, day)["version"] == max(versions)


@pytest.mark.spark
def test_rerun_without_new_receipts_is_a_noop_without_spark(spark, tmp_path, monkeypatch):
    lake, _, events, _ = lake_with(tmp_path)
    day = busiest_date(events)
    first = run_dedup(lake, day, RULES, spark=spark)
    assert first.published and not first.noop and first.version == max(
        k.split("/")[1] for k in publish.read_pointer(lake, day)["receipts"])
    before = sorted(os.listdir(layout.dedup_date_dir(lake, day)))

    import tidemark.spark
    monkeypatch.setattr(tidemark.spark, "build_session", lambda *a, **k: pytest.fail("Spark started"))
    again = run_dedup(lake, day, RULES)  # no spark given: it must not need one
    assert again.noop and not again.published and again.version == first.version
    assert again.rows_read == 0 and again.affected_dates == []
    assert sorted(os.listdir(layout.dedup_date_dir(lake, day))) == before
    assert published(lake, day) == expected(events, day)


@pytest.mark.spark
def test_killed_between_version_and_pointer_keeps_previous_then_rerun_finishes(spark, tmp_path, monkeypatch):
    lake, stream, events, cut = lake_with(tmp_path, upto=2)
    day = busiest_date(events)
    v1 = run_dedup(lake, day, RULES, spark=spark)
    seen = [e for batch in cut[:2] for e in batch]
    assert published(lake, day) == expected(seen, day)
    for deliveries in cut[2:]:
        stream.batch(deliveries)

    # A leftover of a run killed while writing: a version folder with part of its data, no marker.
    ghost = publish.data_dir(lake, day, "29990101T000000000Z", publish.new_run_id())
    os.makedirs(ghost)
    with open(os.path.join(ghost, "part-00000.parquet"), "wb") as half:
        half.write(b"PAR1 truncated")
    assert reader.resolve(lake, day)["version"] == v1.version

    # Killed after the version's marker, before the pointer switch.
    real_switch = publish.switch_pointer
    monkeypatch.setattr(publish, "switch_pointer", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        run_dedup(lake, day, RULES, spark=spark)
    monkeypatch.setattr(publish, "switch_pointer", real_switch)
    assert reader.resolve(lake, day)["version"] == v1.version           # readers still see v1, whole
    assert published(lake, day) == expected(seen, day)

    rerun = run_dedup(lake, day, RULES, spark=spark)
    assert rerun.noop and rerun.published and rerun.version > v1.version  # finished the switch only
    assert published(lake, day) == expected(events, day)
    assert publish.newest_version(lake, day)["version"] == rerun.version  # the ghost never counts


@pytest.mark.spark
@pytest.mark.slow  # a second Spark driver in a subprocess
def test_process_killed_mid_run_leaves_previous_version_readable(spark, tmp_path):
    lake, stream, events, cut = lake_with(tmp_path, seed=8, upto=2)
    day = busiest_date(events)
    v1 = run_dedup(lake, day, RULES, spark=spark)
    for deliveries in cut[2:]:
        stream.batch(deliveries)
    env = {**os.environ, "TIDEMARK_SPARK_MASTER": "local[1]", "PYTHONPATH": ROOT}
    proc = subprocess.Popen([sys.executable, "-m", "tidemark.cli", "dedup", "--lake", lake, "--event-date", day],
                            cwd=ROOT, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # Kill it as soon as it has started writing its new version's data.
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if any(v > v1.version for v in publish.list_version_dirs(lake, day)):
                break
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    pointer = publish.read_pointer(lake, day)
    assert pointer["version"] in (v1.version, publish.newest_version(lake, day)["version"])
    current = reader.read_sessions(lake, day)  # whichever it names, it is whole
    assert current.num_rows == pointer["sessions"]
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
    pointer = publish.read_pointer(lake, day)
    assert {r.version for r in results} == {pointer["version"]}
    assert published(lake, day) == expected(events, day)
    assert pointer == publish.read_version(lake, day, pointer["version"])


@pytest.mark.spark
def test_partition_completed_late_under_a_used_receipt_ts_gets_a_newer_version(spark, tmp_path):
    """A batch wrote two dates and crashed before the second marker; its replay completes that
    partition later, under the batch's (already used) receipt_ts."""
    lake = str(tmp_path / "lake")
    stream = SimulatedStream(lake, 1)
    t = lambda h, m, d=6: datetime(2026, 3, d, h, m, tzinfo=timezone.utc)  # noqa: E731
    stream.batch([("u1", "a", t(23, 20), "play"), ("u1", "b", t(23, 45), "play")])
    # u1's 00:10 arrives as a fragment (a pane of 2026-03-07), u2 gets a pane of 2026-03-06.
    written = stream.batch([("u1", "c", t(0, 10, 7), "play"), ("u2", "x", t(10, 0), "play")], mode=0.0)
    assert {p.event_date for p in written} == {"2026-03-06", "2026-03-07"}
    hidden = receipts.marker_path(lake, "2026-03-07", written[0].receipt_ts)
    text = storage.read_text(hidden)
    os.remove(hidden)
    first = run_dedup(lake, "2026-03-06", RULES, spark=spark)
    assert first.version == written[0].receipt_ts
    assert {(s[0], s[4]) for s in published(lake, "2026-03-06")} == {("u1", 2), ("u2", 1)}

    storage.write_text_atomic(hidden, text)  # the replay completes it
    second = run_dedup(lake, "2026-03-06", RULES, spark=spark)
    assert not second.noop and second.published
    assert second.version == layout.format_receipt_ts(layout.parse_receipt_ts(first.version)
                                                      + timedelta(milliseconds=1))
    assert second.affected_dates == ["2026-03-07"]  # u1's 2026-03-07 fragment now belongs to 03-06
    events = [("u1", "a", t(23, 20), "play"), ("u1", "b", t(23, 45), "play"), ("u1", "c", t(0, 10, 7), "play"),
              ("u2", "x", t(10, 0), "play")]
    assert published(lake, "2026-03-06") == expected(events, "2026-03-06")
    assert {(s[0], s[4]) for s in published(lake, "2026-03-06")} == {("u1", 3), ("u2", 1)}


@pytest.mark.spark
def test_dedup_command_prints_one_json_result_line(spark, tmp_path, capsys):
    lake, _, events, _ = lake_with(tmp_path, seed=6)
    day = busiest_date(events)
    # The in-process SparkSession is reused by the command's builder (getOrCreate).
    assert cli.main(["dedup", "--lake", lake, "--event-date", day, "--gap", "30m"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1
    result = json.loads(lines[0])
    pointer = publish.read_pointer(lake, day)
    assert set(result) >= {"event_date", "version", "published", "sessions", "receipts_read", "rows_read",
                           "affected_dates"}
    assert (result["event_date"], result["version"], result["sessions"], result["published"]) == \
        (day, pointer["version"], pointer["sessions"], True)
    assert result["rows_read"] == pointer["rows_read"] > 0
    assert result["affected_dates"] == pointer["affected_dates"]
    assert published(lake, day) == expected(events, day)
