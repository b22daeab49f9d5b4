"""Whether a full recomputation of a date found what its current version already holds.

`tidemark dedup --full` always recomputes. When the current version read exactly the receipts the
full run read, the run publishes only if its islands (the sessions of D and the context kept beside
them for incremental corrections) differ from the version's: the same result would only add a
version that changes nothing. Compared as two multisets of rows, each summarized by its row count
and the sum of a 64-bit hash of every row (one aggregate per side: no join, no shuffle of the
events).
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING

from tidemark.base.session_rules import SessionRules
from tidemark.deduplication import incremental
from tidemark.session import session_schema
from tidemark.store.lake import Lake
from tidemark.store.version_record import VersionRecord

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_COLUMNS = (*incremental.ISLAND_COLUMNS, "event_date")


def _digest(frame: DataFrame) -> tuple[int, Decimal | None]:
    """(row count, sum of the rows' 64-bit hashes): the multiset of rows, summarized."""
    # pyspark when Spark runs only: the DAG's skip check imports the dedup without it
    from pyspark.sql import functions as F

    row = frame.select(
        F.count(F.lit(1)).alias("rows"),
        F.sum(F.xxhash64(*_COLUMNS).cast("decimal(38,0)")).alias("hashes"),
    ).first()
    assert row is not None  # an aggregate without GROUP BY has one row
    hashes: Decimal | None = row["hashes"]  # null when there are no rows
    return int(row["rows"]), hashes


def same_islands(
    spark: SparkSession, lake: Lake, islands: incremental.Islands, version: VersionRecord, rules: SessionRules
) -> bool:
    """Whether `islands` (a run's, under `rules`) hold exactly the rows `version` wrote: its sessions and its context.

    A version written with another session schema, or without a context, never does (its rows would
    be computed or carried differently).
    """
    if version.schema_version != session_schema.VERSION or version.context_rows is None:
        return False
    until = incremental.horizon(version.event_date, rules)
    old = incremental._previous_sessions(spark, lake, version).unionByName(
        incremental._previous_context(spark, lake, version, until)
    )
    new = islands.sessions.unionByName(islands.context)
    return _digest(old.select(*_COLUMNS)) == _digest(new.select(*_COLUMNS))
