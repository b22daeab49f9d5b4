"""A dedup run's changeset: the sessions of its date it retracts and inserts.

Against the version it was planned on, computed from what the run already holds and staged in its
folder before its commit (tidemark/iceberg/changes.py appends it to the changes table after the
commit).

- An incremental run (tidemark/deduplication/incremental.py) carries the untouched users' rows over
  unchanged, so its changeset is the difference between the touched users' previous sessions of the
  date and their recomputed ones: both are small, and the run has them cached.
- A full run (the first version, `--full`, a fallback, a rules migration) computes the whole date
  anyway: its changeset is the difference between the previous version's files and its sessions.

Sessions are matched by session_id (a hash of user and start): only in the new version, an insert;
only in the previous one, a delete; in both with any column different, an update_preimage (the
previous row) and an update_postimage (the new one). Spark Connect safe (DataFrame API only).

Two engines, one result. A small date's changeset (both versions together at most ARROW_ROWS
sessions: every test's, a date of a few thousand sessions) is computed on the driver with pyarrow,
without a Spark job (a join and a write of fixed cost, ~0.8 s a run even for ten sessions), from
files alone: the previous version's files the new version does not keep (a correction keeps the
untouched buckets' files) against the files the run has just written. A row carried over unchanged
is in both and drops out, so this is the same changeset as the Spark path's, which diffs the
touched users' sessions (or the whole previous version against the run's sessions) in the run's
cached frames. Bigger dates take the Spark path. tests/test_changeset_engines.py checks the two
write the same rows and schema.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from dedup_sql import rules as sql_rules
from tidemark.iceberg import changes, run_markers
from tidemark.session import session_schema
from tidemark.store.lake import Lake
from tidemark.store.version_record import VersionRecord

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from tidemark.deduplication.incremental import Islands

_TABLE_DDL = session_schema.ddl(session_schema.TABLE)
_COLUMNS = session_schema.TABLE_COLUMNS

# Up to this many sessions in the previous version and the new one together, the changeset is
# computed with pyarrow on the driver (its rows compared as Python values: a few seconds at most).
ARROW_ROWS = 20_000
_STAGED_FILE = "part-00000.parquet"


def as_table_rows(islands: DataFrame) -> DataFrame:
    """Islands (ISLAND_COLUMNS + event_date 'YYYY-MM-DD') as the table's rows.

    session_id computed as the dedup writes it, event_date a DATE.
    """
    # pyspark when Spark runs only: the DAG's skip check imports the dedup without it
    from pyspark.sql import functions as F

    return islands.select(
        F.expr(sql_rules.session_id()).alias("session_id"),
        *session_schema.ISLAND_COLUMNS,
        F.col("event_date").cast("date").alias("event_date"),
    )


def version_rows(spark: SparkSession, lake: Lake, version: VersionRecord | None) -> DataFrame:
    """A version's sessions as the table holds them.

    Its run's files, read as they are: a column its session schema lacks is null, as Iceberg readers
    see it.
    """
    files = run_markers.run_files(lake, version) if version is not None else []
    if not files:
        return spark.createDataFrame([], _TABLE_DDL)
    return spark.read.schema(_TABLE_DDL).parquet(*files).select(*_COLUMNS)


def diff(before: DataFrame, after: DataFrame) -> DataFrame:
    """The changeset from `before` to `after` (the table's rows, session_id unique in each).

    Rows of `_change_type` + the table's columns.
    """
    # pyspark when Spark runs only: the DAG's skip check imports the dedup without it
    from pyspark.sql import functions as F

    old = before.select("session_id", F.struct(*_COLUMNS).alias("o"))
    new = after.select("session_id", F.struct(*_COLUMNS).alias("n"))
    joined = old.join(new, "session_id", "full_outer").where(~F.col("o").eqNullSafe(F.col("n")))

    def change(kind: str, row: str) -> Column:
        return F.struct(F.lit(kind).alias(changes.CHANGE_TYPE), F.col(row).alias("row"))

    rows = (
        F.when(F.col("o").isNull(), F.array(change("insert", "n")))
        .when(F.col("n").isNull(), F.array(change("delete", "o")))
        .otherwise(F.array(change("update_preimage", "o"), change("update_postimage", "n")))
    )
    return joined.select(F.explode(rows).alias("c")).select(
        F.col(f"c.{changes.CHANGE_TYPE}").alias(changes.CHANGE_TYPE), *(F.col(f"c.row.{c}").alias(c) for c in _COLUMNS)
    )


def stage(
    lake: Lake,
    event_date: date,
    run_id: str,
    islands: Islands,
    previous: VersionRecord | None,
    written: Sequence[str] = (),
    carried: Sequence[str] = (),
) -> dict[str, Any]:
    """Write the run's changeset into its folder's changes/ and return its counts (the marker's `changes`).

    `written`: the run's own files, as 'bucket=<k>/<name>' in its folder (buckets.write's, already
    written); `carried`: the previous version's files the new version keeps, as the marker names
    them. A small date is diffed from those files with pyarrow (`diff_files`); a bigger one with
    Spark: `islands` (incremental.Islands) sets `before` and `after` when the run knows the touched
    users' sessions, else the whole previous version is compared with the run's sessions.
    """
    sessions = islands.summary["sessions"] + (previous.sessions if previous is not None else 0)
    target = changes.staged_dir(lake, event_date, run_id)
    if sessions <= ARROW_ROWS:
        own = lake.run_dir(event_date, run_id)
        table = diff_files(lake, replaced_files(lake, previous, carried), [own.file(n) for n in written])
        fs, path = target.at()
        if fs.get_file_info(path).type != pafs.FileType.NotFound:
            fs.delete_dir_contents(path)  # as Spark's overwrite: a retried run id starts anew
        fs.create_dir(path, recursive=True)
        pq.write_table(table, f"{path.rstrip('/')}/{_STAGED_FILE}", filesystem=fs)
        return changes.staged_counts(lake, event_date, run_id).to_json()
    spark = islands.spark
    assert spark is not None  # a run's islands carry the session that computed them
    if islands.before is not None and islands.after is not None:
        before, after = as_table_rows(islands.before), as_table_rows(islands.after)
        files = 1  # a correction's: small
    else:
        before, after = version_rows(spark, lake, previous), as_table_rows(islands.sessions)
        # as many files as the version's own (a file per ~250k sessions, at most 8)
        files = max(1, min(8, -(-sessions // 250_000)))
    (diff(before, after).coalesce(files).write.mode("overwrite").parquet(target))
    return changes.staged_counts(lake, event_date, run_id).to_json()


def arrow_schema() -> pa.Schema:
    """A changeset's columns as Spark writes them: `_change_type` (never null), then the table's."""
    event = sql_rules.event_arrow_type()
    kinds: dict[str, pa.DataType] = {
        "STRING": pa.string(),
        "TIMESTAMP": pa.timestamp("us", tz="UTC"),
        "BIGINT": pa.int64(),
        "INT": pa.int32(),
        "DATE": pa.date32(),
        "ARRAY<STRING>": pa.list_(pa.field("element", pa.string())),
        sql_rules.EVENTS_TYPE: pa.list_(pa.field("element", event)),
    }
    columns = [pa.field(c.name, kinds[c.spark]) for c in session_schema.TABLE]
    return pa.schema([pa.field(changes.CHANGE_TYPE, pa.string(), nullable=False), *columns])


def replaced_files(lake: Lake, previous: VersionRecord | None, carried: Sequence[str]) -> list[str]:
    """The previous version's files (URIs) the new version does not keep."""
    if previous is None:
        return []
    kept = set(carried)
    out = []
    for uri in run_markers.run_files(lake, previous):
        try:
            if run_markers.carried_path(lake, previous, uri) in kept:
                continue
        except ValueError:  # not a bucketed file: never kept
            pass
        out.append(uri)
    return out


def _read_rows(lake: Lake, uris: Sequence[str]) -> pa.Table:
    """Files' rows as the table's columns; a column a file lacks (an older session schema) is null."""
    schema = arrow_schema().remove(0)
    if not uris:
        return schema.empty_table()
    located = [lake.locate(str(uri)) for uri in uris]
    fs = located[0][0]
    files = [path for _, path in located]
    return ds.dataset(files, schema=schema, filesystem=fs, format="parquet", partitioning=None).to_table()


def diff_files(lake: Lake, before: Sequence[str], after: Sequence[str]) -> pa.Table:
    """The changeset from the rows of the files `before` to those of `after` (URIs): `diff`'s rule in pyarrow.

    Sorted by session_id, an update's preimage before its postimage.
    """
    old, new = _read_rows(lake, before), _read_rows(lake, after)
    at_new = pc.index_in(old["session_id"], value_set=new["session_id"])  # null: gone
    deleted = old.filter(pc.is_null(at_new))
    inserted = new.filter(pc.invert(pc.is_in(new["session_id"], value_set=old["session_id"])))
    kept_old, kept_new = old.filter(pc.is_valid(at_new)), new.take(pc.drop_null(at_new))
    # Struct equality with nulls equal, as eqNullSafe: the columns hold no floating point values.
    pairs = zip(kept_old.to_pylist(), kept_new.to_pylist(), strict=True)
    changed = pa.array([i for i, (a, b) in enumerate(pairs) if a != b], pa.int64())
    parts = [
        (inserted, "insert", 0),
        (deleted, "delete", 0),
        (kept_old.take(changed), "update_preimage", 0),
        (kept_new.take(changed), "update_postimage", 1),
    ]
    schema = arrow_schema()
    tables = []
    for rows, kind, rank in parts:
        kinds = pa.array([kind] * rows.num_rows, pa.string())
        ranks = pa.array([rank] * rows.num_rows, pa.int8())
        tables.append(rows.add_column(0, schema.field(0), kinds).append_column("_rank", ranks))
    out = pa.concat_tables(tables).sort_by([("session_id", "ascending"), ("_rank", "ascending")])
    return out.drop_columns(["_rank"]).cast(schema)
