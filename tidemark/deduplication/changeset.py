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
"""

from __future__ import annotations

from datetime import date
from typing import TYPE_CHECKING, Any

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


def as_table_rows(islands: DataFrame) -> DataFrame:
    """Islands (ISLAND_COLUMNS + event_date 'YYYY-MM-DD') as the table's rows.

    session_id computed as the dedup writes it, event_date a DATE.
    """
    # pyspark when Spark runs only: the DAG's needs_spark imports the dedup without it
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
    # pyspark when Spark runs only: the DAG's needs_spark imports the dedup without it
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
    lake: Lake, event_date: date, run_id: str, islands: Islands, previous: VersionRecord | None
) -> dict[str, Any]:
    """Write the run's changeset into its folder's changes/ and return its counts (the marker's `changes`).

    `islands` (incremental.Islands): a run that knows the touched users' sessions sets `before` and
    `after`; else the whole previous version is compared with the run's sessions.
    """
    spark = islands.spark
    assert spark is not None  # a run's islands carry the session that computed them
    if islands.before is not None and islands.after is not None:
        before, after = as_table_rows(islands.before), as_table_rows(islands.after)
        files = 1  # a correction's: small
    else:
        before, after = version_rows(spark, lake, previous), as_table_rows(islands.sessions)
        # as many files as the version's own (a file per ~250k sessions, at most 8)
        rows = islands.summary["sessions"] + (previous.sessions if previous is not None else 0)
        files = max(1, min(8, -(-rows // 250_000)))
    (diff(before, after).coalesce(files).write.mode("overwrite").parquet(changes.staged_dir(lake, event_date, run_id)))
    return changes.staged_counts(lake, event_date, run_id).to_json()
