"""A changeset's two engines (tidemark/deduplication/changeset.py) stage the same rows and columns:
pyarrow on the driver from the files a small date's versions replace and write, Spark from the
run's frames for a bigger one. Every dedup below stages its changeset with both and the test
compares them: first versions, incremental corrections (with more than one bucket, so that a
version keeps files), a `--full` run; and, by hand, files of an older session schema (a column
missing: null) and every kind of change."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.lakekit import SimulatedStream, arrivals, converge_obligations, make_events
from tidemark.deduplication import buckets, changeset
from tidemark.iceberg import changes
from tidemark.session import session_schema
from tidemark.store.lake import Lake

pytestmark = pytest.mark.spark


def _staged(lake, event_date, run_id) -> pa.Table:
    folder = changes.staged_dir(lake, event_date, run_id)
    return pq.read_table([f"{folder}/{n}" for n in folder.names() if n.endswith(".parquet")], partitioning=None)


def _rows(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: (r["session_id"], r[changes.CHANGE_TYPE]))


@pytest.fixture
def both_engines(monkeypatch):
    """Each run stages with Spark, then with pyarrow (what it keeps); the pairs are returned."""
    real, threshold = changeset.stage, changeset.ARROW_ROWS
    staged = []

    def stage(lake, event_date, run_id, islands, previous, written=(), carried=()):
        try:
            changeset.ARROW_ROWS = -1
            by_spark = real(lake, event_date, run_id, islands, previous, written, carried)
            spark_table = _staged(lake, event_date, run_id)
        finally:
            changeset.ARROW_ROWS = threshold
        by_arrow = real(lake, event_date, run_id, islands, previous, written, carried)
        arrow_table = _staged(lake, event_date, run_id)
        staged.append({"carried": tuple(carried), "counts": (by_spark, by_arrow), "tables": (spark_table, arrow_table)})
        return by_arrow

    monkeypatch.setattr(changeset, "stage", stage)
    return staged


def _assert_same(staged: list[dict]) -> None:
    for each in staged:
        by_spark, by_arrow = each["tables"]
        assert by_arrow.schema.remove_metadata().equals(by_spark.schema.remove_metadata()), (
            by_arrow.schema,
            by_spark.schema,
        )
        assert _rows(by_arrow) == _rows(by_spark)
        assert each["counts"][0] == each["counts"][1]


@pytest.mark.slow  # every run stages its changeset twice, once with a Spark job
def test_both_engines_stage_the_same_changeset_over_a_random_history(spark, tmp_path, monkeypatch, both_engines):
    # two sessions per bucket: a small date's versions have several files, and corrections keep some
    monkeypatch.setattr(buckets, "SESSIONS_PER_BUCKET", 2)
    rng = random.Random(11)
    events = make_events(rng, users=6, days=1)
    lake = Lake.open(tmp_path / "lake")
    stream = SimulatedStream(lake, 11)
    modes = []
    for deliveries in arrivals(rng, events, batches=2):
        written = stream.batch(deliveries)
        modes += [
            r["mode"] for r in converge_obligations(lake, spark, {p.event_date for p in written}) if r["published"]
        ]
    # one user's late event: a correction rewriting that user's bucket alone
    user, _, first, _ = min(events)
    written = stream.batch([(user, "late-1", first + timedelta(seconds=1), "seek")])
    modes += [r["mode"] for r in converge_obligations(lake, spark, {p.event_date for p in written}) if r["published"]]
    converge_obligations(lake, spark, {p.event_date for p in written}, full=True)
    _assert_same(both_engines)
    assert "incremental" in modes, modes
    assert any(each["carried"] for each in both_engines), "no correction kept a file"
    kinds = {k for each in both_engines for k, n in each["counts"][1].items() if n}
    assert {"inserted", "updated"} <= kinds, kinds


def test_both_engines_diff_files_of_an_older_schema_alike(spark, tmp_path):
    """Files lacking a column (an older session schema's) read it as null in both; nulls inside
    lists and structs compare equal; an insert, a delete, an update and an unchanged row."""
    lake = Lake.open(tmp_path / "lake")
    at = datetime(2026, 3, 6, 10, tzinfo=timezone.utc)
    schema = changeset.arrow_schema().remove(0)

    def row(sid, count, payload=None, events=True):
        return {
            "session_id": sid,
            "user_id": f"u{sid}",
            "session_start": at,
            "session_end": at + timedelta(minutes=count),
            "event_count": count,
            "event_type_count": 1,
            "event_ids": [f"e{i}" for i in range(count)] + [None],
            "events": [{"event_ts": at, "event_id": "e0", "event_type": "play", "payload": payload}]
            if events
            else None,
            "first_receipt_ts": None,
            "last_receipt_ts": "20260310T120000000Z",
            "event_date": at.date(),
        }

    old_rows = [row("a", 1), row("b", 2), row("c", 3, events=False), row("d", 4)]
    new_rows = [row("a", 1), row("b", 5), row("c", 3, events=False), row("e", 6, payload="{}")]
    older = pa.schema([f for f in schema if f.name != "event_type_count"])  # schema 1: no event_type_count
    old_path, new_path = tmp_path / "old.parquet", tmp_path / "new.parquet"
    pq.write_table(
        pa.Table.from_pylist([{k: v for k, v in r.items() if k in older.names} for r in old_rows], schema=older),
        old_path,
    )
    pq.write_table(pa.Table.from_pylist(new_rows, schema=schema), new_path)

    by_arrow = changeset.diff_files(lake, [str(old_path)], [str(new_path)])
    ddl = session_schema.ddl(session_schema.TABLE)
    before = spark.read.schema(ddl).parquet(str(old_path))
    after = spark.read.schema(ddl).parquet(str(new_path))
    out = tmp_path / "by_spark"
    changeset.diff(before, after).coalesce(1).write.parquet(str(out))
    by_spark = pq.read_table(str(out))
    assert by_arrow.schema.remove_metadata().equals(by_spark.schema.remove_metadata())
    assert _rows(by_arrow) == _rows(by_spark)
    # every row of the old file lacked event_type_count: a and c are updates too
    kinds = [(r["session_id"], r[changes.CHANGE_TYPE]) for r in _rows(by_arrow)]
    assert kinds == [
        ("a", "update_postimage"),
        ("a", "update_preimage"),
        ("b", "update_postimage"),
        ("b", "update_preimage"),
        ("c", "update_postimage"),
        ("c", "update_preimage"),
        ("d", "delete"),
        ("e", "insert"),
    ]
