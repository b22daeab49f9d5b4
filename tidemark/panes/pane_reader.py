"""The panes of many receipt partitions, read by the executors with pyarrow datasets.

Why not Spark's file source for those: it lists every folder it is given, one after another on the
driver or, above `spark.sql.sources.parallelPartitionDiscovery.threshold`, as a distributed job of a
task per folder, then plans and opens every file as a split of its own. A date's own receipts are
8,640 small folders a day at a 10 s trigger, and a full dedup of such a date spent most of its time
there (BENCHMARKS.md section 7). Here the folders are spread over a few tasks; each task lists its
folders concurrently and scans their files as one pyarrow dataset (hive partitioning gives each row
its `event_date` and `receipt_ts` from the path, as Spark's `basePath` did), keeping only the panes
that end at or after `lo` (row-group statistics skip the others), and hands Spark Arrow batches.

Few folders (a correction's new receipts, a date written by hourly batches) keep Spark's reader,
which splits big files across tasks (`FOLDERS_FOR_ARROW`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.fs as pafs

from tidemark.session import session_schema
from tidemark.store.locations import Folder

if TYPE_CHECKING:  # types only: pyspark is imported where a DataFrame is made
    from pyspark.sql import DataFrame, SparkSession

# From how many receipt folders the executors read with pyarrow. Measured (BENCHMARKS.md section 7)
# reading a date's ~135k panes, warm, local[2]: 100 folders 2.0 s with Spark's reader, 1.4 s here;
# 8,640 folders 38.8 s and 9.3 s. Below it Spark's reader splits a few big files across tasks.
FOLDERS_FOR_ARROW = 100
# Folders per task: enough that a task's listing and scan amortise, few enough to spread the work.
FOLDERS_PER_TASK = 500

# The pane columns a dedup reads, spelled here once (the dedup's reads, the packs it writes and those
# the maintenance pass writes: tidemark/panes/pack_maintenance.py): the input of its SQL (user_id and events,
# dedup_sql/dedup_events.sql) and the bound of its plan (session_end >= lo), with THE session
# schema's types; then the partition columns as plain strings (an explicit schema also keeps Spark
# from inferring their types). A pack's manifest records this text: a pack of other columns is not used.
DEDUP_PANE = (session_schema.USER_ID, session_schema.SESSION_END, session_schema.EVENTS)
PARTITION_COLUMNS = ("event_date", "receipt_ts")
DEDUP_COLUMNS = ", ".join(
    [f"{c.name} {c.spark}" for c in DEDUP_PANE] + [f"{name} STRING" for name in PARTITION_COLUMNS]
)


def read(
    spark: SparkSession, sessions_root: Folder, folders: Sequence[str], columns_ddl: str, lo: datetime
) -> DataFrame:
    """A Spark DataFrame of the panes of `folders` that end at or after lo.

    A DataFrame of `columns_ddl` (with `event_date` and `receipt_ts` STRING last) from the pane
    files of `folders` (receipt partition folders under sessions_root), panes ending at or after
    lo.
    """
    from pyspark.sql.types import StructType  # pyspark: only where Spark runs

    schema = StructType.fromDDL(columns_ddl)
    assert isinstance(schema, StructType)  # a column list's DDL parses to a struct
    data_columns = [f.name for f in schema.fields if f.name not in PARTITION_COLUMNS]
    tasks = max(1, min(spark.sparkContext.defaultParallelism * 4, -(-len(folders) // FOLDERS_PER_TASK)))

    def scan(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        wanted = [str(folder) for batch in batches for folder in batch.column("folder").to_pylist()]
        table = read_table(sessions_root, wanted, data_columns, lo)
        if table is not None:
            # a few large batches: each one handed to Spark has a fixed cost, and the files are tiny
            yield from table.combine_chunks().to_batches(max_chunksize=65_536)

    listing = spark.createDataFrame([(f,) for f in folders], "folder STRING").repartition(tasks)
    # Read once, here: the dedup's SQL uses its input more than once, and each use would scan every
    # file again (Spark reuses no Python source); what is kept is the panes from lo on, released
    # with this DataFrame (the context cleaner drops a local checkpoint nothing references).
    return listing.mapInArrow(scan, schema).localCheckpoint(eager=True)


def read_table(
    sessions_root: Folder, folders: Sequence[str], data_columns: Sequence[str], lo: datetime | None = None
) -> pa.Table | None:
    """The panes of receipt partition folders as one pyarrow Table, without Spark.

    The panes of the receipt partition folders `folders` (under sessions_root) as one pyarrow
    Table of `data_columns` then `event_date` and `receipt_ts` (strings, from the folders'
    names), those ending at or after `lo` when given; None when the folders hold no pane file.
    Listings concurrent (a bucket's round trips), one dataset scan: no Spark (the executors'
    reader above, and the maintenance pass's, tidemark/panes/pack_maintenance.py).
    """
    import pyarrow.dataset as ds  # about a second to import: kept off the CLI's start

    if not folders:
        return None
    fs, root = sessions_root.at()

    def files_of(folder: str) -> list[str]:
        path = sessions_root.locator.locate(folder)[1]
        return [
            info.path
            for info in fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
            if info.base_name.endswith(".parquet") and not info.base_name.startswith((".", "_"))
        ]

    with ThreadPoolExecutor(max_workers=16) as pool:  # a bucket's listings: round trips in parallel
        files = [f for found in pool.map(files_of, folders) for f in found]
    if not files:
        return None
    partitioning = ds.partitioning(pa.schema([(name, pa.string()) for name in PARTITION_COLUMNS]), flavor="hive")
    dataset = ds.dataset(files, filesystem=fs, format="parquet", partitioning=partitioning, partition_base_dir=root)
    where = None
    if lo is not None:
        where = ds.field("session_end") >= pa.scalar(int(lo.timestamp() * 1_000_000), type=pa.timestamp("us", tz="UTC"))
    return dataset.to_table(columns=list(data_columns) + list(PARTITION_COLUMNS), filter=where)
