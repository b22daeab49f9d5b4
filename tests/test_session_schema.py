"""THE session schema (tidemark/session/session_schema.py): everything that spells a session row derives
from it or is checked against it, an existing Iceberg table is evolved to it in place, and the drill
column (event_type_count) lands end to end on a lake written by the tidemark before it."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests import icebergkit
from tests.helpers import ROOT
from tests.lakekit import RULES, SimulatedStream, busiest_date, converge, expected, lake_with, make_events
from tidemark.base.layout import as_event_date
from tidemark.iceberg import commits, reader, run_markers, table_versions
from tidemark.iceberg import table as iceberg
from tidemark.panes import receipts
from tidemark.session import session_schema
from tidemark.store.lake import Lake
from tidemark.store.version_record import VersionRecord

DAY = "2026-03-10"
# The last commit of main before event_type_count (issue 28's drill): the "older tidemark" that
# writes the existing lake of the drill test.
BEFORE_DRILL = "0fecda10d62de48354f1300257d56cd947141b6c"


# --- derivations -------------------------------------------------------------------------------------


def _doc_table(text: str, header: str) -> str:
    start = text.index(header)
    end = text.find("\n\n", start)
    return text[start : end if end >= 0 else None]


def test_the_docs_column_tables_are_the_schema():
    """docs/lake-layout.md's pane and table column tables are session_schema.markdown_table's."""
    text = Path(os.path.join(ROOT, "docs", "lake-layout.md")).read_text(encoding="utf-8")
    assert _doc_table(text, "| column | meaning |") == session_schema.markdown_table("pane")
    assert _doc_table(text, "| column | Iceberg type | meaning |") == session_schema.markdown_table("table")


def test_every_spelling_derives_from_the_schema():
    from streaming_job import state
    from tidemark.deduplication import dedup, incremental

    assert [n for n, _, _ in iceberg.COLUMNS] == list(session_schema.TABLE_COLUMNS)
    assert [f.name for f in iceberg.schema().fields] == list(session_schema.TABLE_COLUMNS)
    assert session_schema.TABLE_COLUMNS[:-1] == dedup.OUTPUT_COLUMNS
    assert session_schema.TABLE_COLUMNS[1:-1] == incremental.ISLAND_COLUMNS
    assert incremental._ISLANDS_SCHEMA == session_schema.ISLANDS_DDL
    assert list(session_schema.STATE_COLUMNS) == state.STATE_COLUMNS
    # The drill column sits after event_count everywhere, evolved or new.
    assert (
        session_schema.TABLE_COLUMNS.index("event_type_count") == session_schema.TABLE_COLUMNS.index("event_count") + 1
    )


def test_schema_1_is_the_table_before_versioning():
    """A table created before the schema was versioned has exactly schema 1 (ids included), so
    `evolve` starts from what existing lakes hold."""
    old = session_schema.iceberg_schema(1)
    assert [(f.field_id, f.name) for f in old.fields] == [
        (1, "session_id"),
        (2, "user_id"),
        (3, "session_start"),
        (4, "session_end"),
        (5, "event_count"),
        (6, "event_ids"),
        (7, "events"),
        (8, "first_receipt_ts"),
        (9, "last_receipt_ts"),
        (10, "event_date"),
    ]
    assert str(old.find_field("events").field_type) == (
        "list<struct<13: event_ts: optional timestamptz, 14: event_id: optional string, "
        "15: event_type: optional string, 16: payload: optional string>>"
    )


@pytest.mark.slow
@pytest.mark.spark
def test_the_sql_produces_exactly_the_schema_columns(spark):
    """dedup_sessions.sql's islands and stream_panes.sql's panes (through streaming_job.batch's
    select) have the schema's columns, and both count the distinct types of the kept copies."""
    from pyspark.sql import functions as F

    import dedup_sql
    from streaming_job.batch import BatchProcessor, watermarks

    t = lambda m: datetime(2026, 3, 10, 10, m, tzinfo=timezone.utc)  # noqa: E731 - a fixture's shorthand
    events = spark.createDataFrame(
        [
            ("u1", "a", t(0), "play", "{}"),
            ("u1", "b", t(5), "pause", "{}"),
            ("u1", "c", t(9), "play", "{}"),
            ("u2", "d", t(0), "seek", "{}"),
        ],
        "user_id STRING, event_id STRING, event_ts TIMESTAMP, event_type STRING, payload STRING",
    )
    dedup_events = events.selectExpr(
        "*", "'20260310T120000000Z' AS first_receipt_ts", "'20260310T120000000Z' AS last_receipt_ts", "false AS known"
    )
    sessionized = dedup_sql.run(spark, "sessionize", {"events": dedup_events}, gap_us=RULES.gap_us)
    islands = dedup_sql.run(spark, "dedup_sessions", {"sessionized": sessionized})
    assert islands.columns == [*session_schema.ISLAND_COLUMNS, "has_new", "event_date"]
    assert {r["user_id"]: r["event_type_count"] for r in islands.collect()} == {"u1": 2, "u2": 1}
    # The column's fill (incremental runs from an older version) and its read_fill (readers of an
    # older version) compute what the SQL does, from the rows' events.
    column = session_schema.by_name("event_type_count")
    older = islands.select(*session_schema.ISLAND_COLUMNS).withColumn("event_type_count", F.lit(None).cast("INT"))
    filled = session_schema.fill_older(older, 1).collect()
    assert {r["user_id"]: r["event_type_count"] for r in filled} == {"u1": 2, "u2": 1}
    assert {r["user_id"]: column.read_fill({"events": [e.asDict() for e in r["events"]]}) for r in filled} == {
        "u1": 2,
        "u2": 1,
    }

    stream_events = events.selectExpr(
        "*",
        "CAST(NULL AS STRING) AS state_session_id",
        "CAST(NULL AS TIMESTAMP) AS state_session_start",
        "CAST(NULL AS BOOLEAN) AS state_closed",
        "CAST(NULL AS INT) AS state_pane_count",
        "true AS is_new",
    )
    sessionized = dedup_sql.run(spark, "sessionize", {"events": stream_events}, gap_us=RULES.gap_us)
    result = dedup_sql.run(
        spark,
        "stream_panes",
        {"sessionized": sessionized, "watermarks": watermarks(spark, 0, 0)},
        gap_us=RULES.gap_us,
        lateness_us=RULES.allowed_lateness_us,
    )
    panes = BatchProcessor._panes(result, "20260310T120000000Z", 0, 0)
    assert panes.columns == [*session_schema.PANE_COLUMNS, "event_date", "receipt_ts"]
    assert {r["user_id"]: r["event_type_count"] for r in panes.collect()} == {"u1": 2, "u2": 1}
    assert set(session_schema.STATE_COLUMNS) <= set(result.columns) | {"closed", "pane_count"}


# --- evolution of an existing table ------------------------------------------------------------------


def _create_schema_1_table(lake: Lake):
    """The table as tidemark created it before the schema was versioned (schema 1)."""
    cat = iceberg.catalog(lake)
    cat.create_namespace_if_not_exists(iceberg.identifier().split(".")[0])
    old = session_schema.iceberg_schema(1)
    return cat.create_table(
        iceberg.identifier(),
        old,
        location=iceberg.table_location(lake),
        partition_spec=iceberg.partition_spec(old),
        properties={
            "commit.retry.num-retries": "0",
            "schema.name-mapping.default": old.name_mapping.model_dump_json(),
            "format-version": "2",
        },
    )


def _rewrite(lake: Lake, marker: VersionRecord, arrow_schema) -> None:
    """The run's file rewritten with arrow_schema's columns and field ids (icebergkit writes
    iceberg.schema()'s: a new table's ids, which an evolved table's differ from for the new column)."""
    (name,) = marker.files
    path = os.path.join(lake.run_dir(marker.event_date, marker.run_id), name)
    rows = pq.read_table(path)
    columns = {n: rows.column(n) if n in rows.column_names else pa.nulls(rows.num_rows) for n in arrow_schema.names}
    pq.write_table(pa.Table.from_arrays([columns[n] for n in arrow_schema.names], schema=arrow_schema), path)


def _publish_schema_1_run(lake: Lake, day: str, sessions: int):
    """A version as the tidemark before the column wrote it: files of schema 1."""
    marker = icebergkit.prepared_run(lake, day, [icebergkit.receipt(1)], sessions=sessions)
    _rewrite(lake, marker, session_schema.iceberg_schema(1).as_arrow())
    return commits.commit(lake, marker)


def _metadata_files(lake: Lake) -> list[str]:
    return sorted(os.listdir(os.path.join(lake.dedup_root(), "metadata")))


def test_an_existing_table_is_evolved_in_place_once(tmp_path):
    lake = Lake.open(tmp_path / "lake")
    _create_schema_1_table(lake)
    # a version of DAY published while the table had schema 1: files without the column
    before = iceberg.catalog(lake).load_table(iceberg.identifier())
    assert session_schema.table_version(before) == 1
    _publish_schema_1_run(lake, DAY, sessions=2)  # its commit loads the table: evolved there
    tbl = iceberg.load(lake)
    assert [f.name for f in tbl.schema().fields] == list(session_schema.TABLE_COLUMNS)
    assert session_schema.table_version(tbl) == session_schema.VERSION
    assert tbl.properties[session_schema.TABLE_PROPERTY] == str(session_schema.VERSION)
    # files carry no field ids: the name mapping must know the new column for new files to be read
    mapping = json.loads(tbl.properties["schema.name-mapping.default"])
    assert "event_type_count" in {name for entry in mapping for name in entry["names"]}
    # idempotent: loading again commits nothing
    before = _metadata_files(lake)
    iceberg.load(lake)
    assert _metadata_files(lake) == before
    # Iceberg reads the old version's rows as null; the reader computes them from their events and
    # says so (docs/lake-layout.md, "What a reader gets from an older version")
    from pyiceberg.expressions import EqualTo

    raw = tbl.scan(row_filter=EqualTo("event_date", DAY)).to_arrow()
    assert raw.column("event_type_count").to_pylist() == [None, None]
    old = reader.read_sessions(lake, as_event_date(DAY))
    assert old.column_names == list(session_schema.TABLE_COLUMNS)
    assert old.column("event_type_count").to_pylist() == [1, 1]
    meta = old.schema.metadata
    assert (meta[b"tidemark.session_schema"], meta[b"tidemark.computed_columns"], meta[b"tidemark.null_columns"]) == (
        b"1",
        b"event_type_count",
        b"",
    )
    assert [r["event_type_count"] for r in reader.to_records(old)] == [1, 1]
    # asked for alone, it is still computed (the reader reads events for it and leaves them out)
    alone = reader.read_sessions(lake, as_event_date(DAY), columns=["user_id", "event_type_count"])
    assert alone.column_names == ["user_id", "event_type_count"]
    assert alone.column("event_type_count").to_pylist() == [1, 1]
    with pytest.raises(ValueError, match="no such session column"):
        reader.read_sessions(lake, as_event_date(DAY), columns=["event_type_cuont"])


def test_complete_computes_what_an_older_version_lacks_or_says_it_is_null():
    """session_schema.complete (the reader's step): a column absent from the rows (a snapshot from
    before the evolution) is added computed; without the fill's inputs it is null, and named."""
    t0 = datetime(2026, 3, 10, 10, tzinfo=timezone.utc)
    event = lambda kind: {"event_ts": t0, "event_id": kind, "event_type": kind, "payload": "{}"}  # noqa: E731
    rows = pa.table({"user_id": ["u1", "u2"], "events": [[event("play"), event("seek"), event("play")], []]})
    done = session_schema.complete(rows, 1, ["user_id", "event_type_count", "events"])
    assert done.table.column("event_type_count").to_pylist() == [2, 0]
    assert (done.computed, done.null) == (("event_type_count",), ())
    assert done.table.schema.field("event_type_count").type == pa.int32()
    blind = session_schema.complete(rows.select(["user_id"]), 1, ["user_id", "event_type_count"])
    assert blind.table.column("event_type_count").to_pylist() == [None, None]
    assert (blind.computed, blind.null) == ((), ("event_type_count",))
    # a version of the current schema: nothing to compute, the rows are handed on as they are
    current = session_schema.complete(rows, session_schema.VERSION, ["user_id", "event_type_count", "events"])
    assert current.table is rows
    assert (current.computed, current.null) == ((), ())


def _load_in_process(lake_path: str, queue) -> None:
    try:
        tbl = iceberg.load(Lake.open(lake_path))
        queue.put([f.name for f in tbl.schema().fields])
    except BaseException as exc:  # reported to the test, which fails on it
        queue.put(repr(exc))


def test_two_processes_evolving_at_once_both_succeed(tmp_path):
    lake = Lake.open(tmp_path / "lake")
    _create_schema_1_table(lake)
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_load_in_process, args=(str(lake), queue)) for _ in range(2)]
    for proc in procs:
        proc.start()
    results = [queue.get(timeout=120) for _ in procs]
    for proc in procs:
        proc.join(60)
    assert results == [list(session_schema.TABLE_COLUMNS)] * 2
    fields = iceberg.load(lake).schema().fields
    assert [f.name for f in fields].count("event_type_count") == 1


def test_a_new_version_of_the_evolved_table_carries_the_column(tmp_path):
    """Files written with the column (a new dedup run) are registered and read back with it."""
    lake = Lake.open(tmp_path / "lake")
    _create_schema_1_table(lake)
    iceberg.load(lake)
    marker = icebergkit.prepared_run(lake, DAY, [icebergkit.receipt(1)], sessions=1)
    tbl = iceberg.load(lake)
    _rewrite(lake, marker, tbl.schema().as_arrow())  # the evolved table's ids
    (name,) = marker.files
    path = os.path.join(lake.run_dir(marker.event_date, marker.run_id), name)
    rows = pq.read_table(path)
    index = rows.column_names.index("event_type_count")
    pq.write_table(rows.set_column(index, rows.schema.field(index), pa.array([3], pa.int32())), path)
    # as tidemark.deduplication.dedup records its files
    marker = icebergkit.with_fields(marker, session_schema=session_schema.VERSION)
    run_markers.write_marker(lake, marker)
    commits.commit(lake, marker)
    assert reader.read_sessions(lake, as_event_date(DAY)).column("event_type_count").to_pylist() == [3]


def test_panes_written_before_the_column_are_read_with_it(tmp_path):
    """reader.read_panes computes event_type_count for receipt partitions whose files lack it
    (tests.lakekit's simulated stream writes panes as the stream did before the column)."""
    lake, _, _, _ = lake_with(tmp_path, batches=2)
    day = lake.sessions_root().event_dates()[0]
    (folder,) = {lake.receipt_dir(day, r) for r in receipts.list_receipts(lake, day)[:1]}
    assert "event_type_count" not in pq.read_schema(os.path.join(folder, "part-00000.parquet")).names
    panes = reader.read_panes(lake, as_event_date(day))
    assert panes.num_rows > 0
    assert panes.column_names[-1] == "receipt_ts"
    assert [r["event_type_count"] for r in panes.to_pylist()] == [
        len({e["event_type"] for e in r["events"]}) for r in panes.to_pylist()
    ]
    assert any(r["event_type_count"] > 1 for r in panes.to_pylist())  # the count is not the trivial 1
    alone = reader.read_panes(lake, as_event_date(day), columns=["session_id", "event_type_count"])
    assert alone.column_names == ["session_id", "event_type_count", "receipt_ts"]

    def count(table):
        return sorted((r["receipt_ts"], r["session_id"], r["event_type_count"]) for r in table.to_pylist())

    assert count(alone) == count(panes)


# --- the drill: an existing lake written before the column -----------------------------------------

# Runs with the old tree first on sys.path, under its module names (tidemark.lake, tidemark.spark).
# The venv's editable install of this tree (a finder at the end of sys.meta_path) would serve any
# module the old tree lacks from the new tree: it is dropped, and the writer checks at the end that
# every project module it ran is the old tree's.
_OLD_WRITER = """
import json, os, random, sys
sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
from tests.lakekit import RULES, SimulatedStream, arrivals, converge, make_events
from tidemark.lake import Lake
from tidemark.spark import build_session

seed, path = int(sys.argv[1]), sys.argv[2]
rng = random.Random(seed)
events = make_events(rng)
lake = Lake.open(path)
stream = SimulatedStream(lake, seed)
notified = set()
for deliveries in arrivals(rng, events, batches=6):
    notified |= {p.event_date for p in stream.batch(deliveries)}
spark = build_session("tidemark-old", "local[2]", shuffle_partitions=4)
converge(lake, spark, notified)
spark.stop()
old_root = os.path.join(os.getcwd(), "")
stray = sorted(
    name
    for name, module in list(sys.modules.items())
    if name.split(".")[0] in ("tidemark", "streaming_job", "dedup_sql", "cloud_function", "tests")
    and not (getattr(module, "__file__", None) or old_root).startswith(old_root)
)
assert not stray, f"modules not from the old tree: {stray}"
print(json.dumps(sorted(notified)))
"""


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.timeout(1800)
def test_a_lake_written_before_the_column_is_evolved_and_equals_the_reference(spark, tmp_path):
    """The tidemark of BEFORE_DRILL streams and deduplicates a random lake (schema 1 files, markers
    and table); this tidemark evolves the table in place, and a late event for one user sends its
    date through the incremental path from the schema-1 version: the untouched users' rows are
    carried over with the column filled from their events (not null), and every date equals the
    batch reference, event_type_count included (older versions: computed by the reader)."""
    old_tree = tmp_path / "old"
    old_tree.mkdir()
    archive = subprocess.run(["git", "-C", ROOT, "archive", BEFORE_DRILL], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(old_tree)], input=archive.stdout, check=True)
    lake = Lake.open(tmp_path / "lake")
    seed = 3
    proc = subprocess.run(
        [sys.executable, "-c", _OLD_WRITER, str(seed), str(lake)],
        cwd=old_tree,
        env={**os.environ, "PYTHONPATH": str(old_tree)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    dates = json.loads(proc.stdout.strip().splitlines()[-1])
    # written before the column: the table has schema 1 and the versions no session_schema
    raw = iceberg.catalog(lake).load_table(iceberg.identifier())
    assert "event_type_count" not in {f.name for f in raw.schema().fields}
    for day in dates:
        marker = table_versions.current_version(lake, as_event_date(day))  # loads the table: evolved here
        assert marker is None or not marker.records(session_schema.MARKER_KEY)

    events = make_events(random.Random(seed))
    day = busiest_date(events)
    users = sorted({u for u, _, ts, _ in events if ts.date().isoformat() == day})
    assert len(users) > 1  # an untouched user's rows are carried over from the old version
    first = min(e for e in events if e[0] == users[0] and e[2].date().isoformat() == day)
    late = (users[0], "late-1", first[2] + timedelta(seconds=1), "a-type-of-its-own")
    stream = SimulatedStream(lake, seed)
    stream.batch_id = 100  # received after everything the old tidemark read
    stream.batch([late])
    runs = converge(lake, spark, {day})
    assert runs[0]["mode"] == "incremental", runs[0]

    tbl = iceberg.load(lake)
    assert [f.name for f in tbl.schema().fields] == list(session_schema.TABLE_COLUMNS)
    rerun = {r["event_date"] for r in runs if r["published"]}
    assert day in rerun
    events = events + [late]
    for each in sorted(set(dates) | rerun):
        table = reader.read_sessions(lake, as_event_date(each))
        # written by this tidemark: the files hold the column; before: the reader computed it
        assert table.schema.metadata[b"tidemark.computed_columns"] == (b"" if each in rerun else b"event_type_count")
        got = {
            (
                r["user_id"],
                r["session_start"],
                r["session_end"],
                frozenset(r["event_ids"]),
                r["event_count"],
                r["event_type_count"],
            )
            for r in table.to_pylist()
        }
        assert got == expected(events, each), each
