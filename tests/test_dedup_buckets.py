"""The version's files in buckets of users (tidemark/deduplication/buckets.py): a correction
rewrites only the files of the buckets its users are in, the commit replaces only those, and
the result is the full path's, for every reader (pyiceberg alone, DuckDB, time travel) and across a
table whose date was written before buckets.

Forty users with two sessions each on one date, away from midnight (every correction stays
incremental); the buckets are made small (SESSIONS_PER_BUCKET) so that the date has eight of them.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

import pyarrow.parquet as pq
import pytest

from tests.lakekit import SimulatedStream
from tidemark.base.layout import as_event_date
from tidemark.base.session_rules import SessionRules
from tidemark.deduplication import buckets, dedup
from tidemark.deduplication.dedup import run_dedup
from tidemark.iceberg import reader, run_markers, table_versions
from tidemark.iceberg import table as iceberg
from tidemark.ops import gc
from tidemark.store.lake import Lake

D = "2026-03-07"
RULES = SessionRules()
USERS = [f"u{i:02d}" for i in range(40)]
T0 = datetime(2026, 3, 7, 9, 0, tzinfo=timezone.utc)


def _day() -> list[tuple]:
    events = []
    for n, user in enumerate(USERS):
        for s, start in enumerate((T0, T0 + timedelta(hours=5))):
            for k in range(3):
                ts = start + timedelta(minutes=n % 7 + 4 * k)
                events.append((user, f"{user}-s{s}-e{k}", ts, "play"))
    return events


def _late(users: list[str], tag: str) -> list[tuple]:
    """One late event per user, inside their first session."""
    return [(user, f"{user}-late-{tag}", T0 + timedelta(minutes=1, seconds=30), "seek") for user in users]


def _rows(lake: Lake, as_of: str | None = None) -> list[dict]:
    table = reader.read_sessions(lake, as_event_date(D), as_of=as_of)
    return sorted(table.to_pylist(), key=lambda r: (r["user_id"], r["session_start"]))


def _changed(lake: Lake) -> tuple[list[str], list[str]]:
    """(added, deleted) data file paths of the table's current snapshot, relative to the date's folder."""
    from pyiceberg.manifest import ManifestEntryStatus

    tbl = iceberg.load(lake)
    snapshot = tbl.current_snapshot()
    added, deleted = [], []
    for manifest in snapshot.manifests(tbl.io):
        for entry in manifest.fetch_manifest_entry(tbl.io, discard_deleted=False):
            if entry.snapshot_id != snapshot.snapshot_id:
                continue
            path = entry.data_file.file_path.split(f"event_date={D}/", 1)[1]
            if entry.status == ManifestEntryStatus.ADDED:
                added.append(path)
            elif entry.status == ManifestEntryStatus.DELETED:
                deleted.append(path)
    return sorted(added), sorted(deleted)


def _local(uri: str) -> str:
    return uri.removeprefix("file://")


def _data(paths: list[str]) -> list[str]:
    """The sessions' files among paths (not the zero-row version files)."""
    return [p for p in paths if table_versions.VERSION_FILE_PREFIX not in p]


def _bucket_of(spark, users: list[str], count: int) -> set[int]:
    frame = spark.createDataFrame([(u,) for u in users], "user_id STRING")
    return {r[0] for r in frame.selectExpr(buckets.expression(count)).collect()}


@pytest.fixture
def small_buckets(monkeypatch):
    monkeypatch.setattr(buckets, "SESSIONS_PER_BUCKET", 10)  # 80 sessions: 8 buckets


def _lakes(tmp_path):
    lakes = {name: Lake.open(tmp_path / name) for name in ("incremental", "full")}
    streams = {name: SimulatedStream(lake, 3) for name, lake in lakes.items()}
    return lakes, streams


def _deliver(streams, deliveries) -> None:
    for stream in streams.values():
        stream.batch(deliveries, mode=0.5)


def _dedup_both(lakes, spark) -> dict:
    done = run_dedup(lakes["incremental"], D, RULES, spark=spark)
    assert run_dedup(lakes["full"], D, RULES, spark=spark, full=True).published
    assert _rows(lakes["incremental"]) == _rows(lakes["full"])
    return done.to_json()


@pytest.mark.slow  # several dedup runs each
@pytest.mark.spark
def test_a_correction_rewrites_only_the_buckets_of_its_users(spark, tmp_path, small_buckets):
    lakes, streams = _lakes(tmp_path)
    _deliver(streams, _day())
    first = _dedup_both(lakes, spark)
    assert first["mode"] == "full"
    assert first["sessions"] == 80
    v1 = table_versions.current_version(lakes["incremental"], as_event_date(D))
    assert v1.buckets == 8
    assert not v1.carried
    files = _data(_changed(lakes["incremental"])[0])
    assert len(files) == len({buckets.of_path(f) for f in files}) == 8  # one file per bucket

    # One user: one bucket's file deleted and one added (beside the version files), the other
    # seven kept as they are (the marker carries them, the snapshot does not list them).
    _deliver(streams, _late(["u07"], "a"))
    one = _dedup_both(lakes, spark)
    assert one["mode"] == "incremental"
    added, deleted = _changed(lakes["incremental"])
    (bucket,) = _bucket_of(spark, ["u07"], 8)
    assert [buckets.of_path(f) for f in _data(added)] == [bucket]
    assert [buckets.of_path(f) for f in _data(deleted)] == [bucket]
    assert len(added) == len(deleted) == 2  # and one version file each
    v2 = table_versions.current_version(lakes["incremental"], as_event_date(D))
    assert len(v2.files) == 1
    assert len(v2.carried) == 7
    assert v2.buckets == 8
    assert all(c.startswith(f"run={v1.run_id}/bucket=") for c in v2.carried)
    # The rewritten file holds its bucket's untouched users too, and nobody else.
    written = pq.read_table(_local(run_markers.run_files(lakes["incremental"], v2)[0]), columns=["user_id"])
    users = set(written.column("user_id").to_pylist())
    assert "u07" in users
    assert len(users) > 1
    assert _bucket_of(spark, sorted(users), 8) == {bucket}

    # Ten users: only their buckets; the files kept come from both earlier runs.
    ten = [f"u{i:02d}" for i in range(20, 30)]
    _deliver(streams, _late(ten, "b"))
    assert _dedup_both(lakes, spark)["mode"] == "incremental"
    added, deleted = _changed(lakes["incremental"])
    touched = _bucket_of(spark, ten, 8)
    assert {buckets.of_path(f) for f in _data(added)} == touched == {buckets.of_path(f) for f in _data(deleted)}
    v3 = table_versions.current_version(lakes["incremental"], as_event_date(D))
    assert len(v3.files) == len(touched)
    assert len(v3.carried) == 8 - len(touched)
    # every reader of the table sees each session once
    assert len(_rows(lakes["incremental"])) == 80


@pytest.mark.slow  # several dedup runs each
@pytest.mark.spark
def test_a_date_written_before_buckets_is_laid_out_anew_and_time_travels_across(
    spark, tmp_path, small_buckets, monkeypatch
):
    lakes, streams = _lakes(tmp_path)
    _deliver(streams, _day())
    lake = lakes["incremental"]
    # The first version as the writer before buckets wrote it: files in the run's folder, no
    # layout in the marker.
    with monkeypatch.context() as before:
        before.setattr(buckets, "write", lambda frame, count, folder, *_: frame.coalesce(1).write.parquet(folder))
        before.setattr(dedup, "_bucket_files", lambda folder: folder.data_file_names())
        before.setattr(run_markers, "write_marker", _write_marker_before_buckets)
        _dedup_both(lakes, spark)
    v1 = table_versions.current_version(lake, as_event_date(D))
    assert v1.buckets is None
    assert not v1.records("buckets")
    assert len(v1.files) == 1
    assert "/" not in v1.files[0]
    rows_v1 = _rows(lake)

    # The next correction rewrites the date whole, into buckets.
    _deliver(streams, _late(["u03"], "a"))
    assert _dedup_both(lakes, spark)["mode"] == "incremental"
    v2 = table_versions.current_version(lake, as_event_date(D))
    assert v2.buckets == 8
    assert len(v2.files) == 8
    assert not v2.carried
    added, deleted = _changed(lake)
    assert _data(deleted) == [f"run={v1.run_id}/{v1.files[0]}"]
    assert len(_data(added)) == 8
    rows_v2 = _rows(lake)

    # From then on, one bucket per user.
    _deliver(streams, _late(["u03"], "b"))
    assert _dedup_both(lakes, spark)["mode"] == "incremental"
    assert len(_data(_changed(lake)[0])) == 1
    rows_v3 = _rows(lake)
    assert rows_v1 != rows_v2 != rows_v3

    # Time travel across the change of layout: each version as it was published.
    assert _rows(lake, as_of=v1.version) == rows_v1
    assert _rows(lake, as_of=v2.version) == rows_v2
    # pyiceberg alone and DuckDB over its scan read the current version exactly.
    tbl = iceberg.load(lake)
    scan = tbl.scan(row_filter=iceberg.date_filter(as_event_date(D)))
    assert scan.to_arrow().num_rows == 80
    con = scan.to_duckdb(table_name="sessions")
    got = con.execute("SELECT user_id, count(*), sum(event_count) FROM sessions GROUP BY user_id ORDER BY 1").fetchall()
    want = {}
    for r in rows_v3:
        n, events = want.get(r["user_id"], (0, 0))
        want[r["user_id"]] = (n + 1, events + r["event_count"])
    assert got == [(u, n, e) for u, (n, e) in sorted(want.items())]
    # DuckDB at the first version's snapshot: the layout before buckets
    old = tbl.scan(
        row_filter=iceberg.date_filter(as_event_date(D)),
        snapshot_id=table_versions.list_versions(lake, as_event_date(D))[0].snapshot_id,
    )
    assert old.to_duckdb(table_name="old").execute("SELECT count(*) FROM old").fetchone() == (80,)


def _write_marker_before_buckets(lake: Lake, marker) -> None:
    payload = {k: v for k, v in marker.to_marker().items() if k not in ("buckets", "carried")}
    lake.run_marker(marker.event_date, marker.run_id).write_json_atomic(payload)


@pytest.mark.slow  # several dedup runs each
@pytest.mark.spark
def test_gc_removes_the_replaced_bucket_files_and_keeps_the_carried_ones(spark, tmp_path, small_buckets):
    lake = Lake.open(tmp_path / "lake")
    stream = SimulatedStream(lake, 3)
    stream.batch(_day(), mode=0.5)
    run_dedup(lake, D, RULES, spark=spark)
    v1 = table_versions.current_version(lake, as_event_date(D))
    stream.batch(_late(["u11"], "a"), mode=0.5)
    run_dedup(lake, D, RULES, spark=spark)
    v2 = table_versions.current_version(lake, as_event_date(D))
    before = _rows(lake)
    (replaced,) = [f for f in v1.files if f"run={v1.run_id}/{f}" not in v2.carried]

    removed = gc.gc(lake, timedelta(hours=1), now=datetime.now(timezone.utc) + timedelta(days=2))
    kinds = {(r.what, r.path.rsplit("/", 2)[-2] if r.what == "bucket file" else "") for r in removed}
    assert ("bucket file", replaced.split("/")[0]) in kinds
    assert any(r.what == "context" for r in removed) or not v1.context_rows
    v1_dir = lake.run_dir(v1.event_date, v1.run_id)
    assert not os.path.exists(f"{v1_dir}/{replaced}")
    assert all(os.path.exists(_local(uri)) for uri in run_markers.run_files(lake, v2))
    assert os.path.exists(f"{v1_dir}/_tidemark_run.json")  # the folder stays: its other files are live
    assert _rows(lake) == before


def test_the_bucket_count_follows_the_size_of_the_date():
    assert buckets.count_for(0) == buckets.count_for(150) == 1
    assert buckets.count_for(1_000_000) == 64  # a one-user correction rewrites ~1.6% of the date
    assert buckets.count_for(10**9) == buckets.MAX_BUCKETS
    # kept while it fits; a date that doubled past it, or shrank to a quarter, is laid out anew
    assert buckets.keeps(64, 1_000_000)
    assert buckets.keeps(64, 2_000_000)
    assert not buckets.keeps(64, 2_200_000)
    assert buckets.keeps(64, 300_000)
    assert not buckets.keeps(64, 200_000)
    assert buckets.keeps(1, 0)
    assert not buckets.keeps(None, 10)
    assert not buckets.keeps(1, 40_000)
    assert buckets.of_path("run=ab/bucket=12/part-0.parquet") == 12
    assert buckets.of_path("part-0.parquet") is None
