"""A micro-batch's panes into their receipt partitions.

One Parquet file per event date, written by the executors with pyarrow, straight into
`event_date=D/receipt_ts=R/`.

Why not Spark's partitioned writer: with `partitionBy("event_date", "receipt_ts")` and dynamic
partition overwrite, every event date a batch touches costs a Parquet writer, a checksum file, a
task-attempt folder, a staging folder and two renames at job commit: ~25-50 ms per date on a local
disk (BENCHMARKS.md, "the stream's write per event date"), so a phone back online after months, or
a replay, touching 2,000 dates spent ~50 s writing 2,000 one-row files. pyarrow writes the same
files at ~1-3 ms per date.

Idempotent as the stream needs (streaming_job/batch.py): the receipt partitions written here have no
marker yet, so no reader sees them; each date's file has a fixed name, written under a hidden
temporary name and renamed (a single-object upload on a bucket is atomic already), after the folder's
leftovers of an interrupted attempt are cleared. A replayed batch, or a retried task, writes the
same bytes to the same name. The marker that completes each partition is written by the driver once
every file is in place.

The same pass writes the batch's state version (`write_batch`): the sessions state keeps ride the
shuffle by date beside the panes and each task writes its share as one file, so the batch's
sessions are computed once and read by one Spark action (no cache; the statistics its markers
record come back from the writers).

The files hold the same columns and types Spark's writer wrote (partition columns `event_date` and
`receipt_ts` in the folder names only; timestamps as TIMESTAMP_MICROS, UTC), so readers of either
kind of file see one schema.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from typing import Any, ClassVar, TypedDict, cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark import TaskContext
from pyspark.sql import DataFrame

from tidemark.base import layout
from tidemark.store.lake import Lake
from tidemark.store.locations import Folder

PANE_FILE = "part-00000.parquet"


class DateStats(TypedDict):
    """What one event date's receipt marker records of a batch's panes there."""

    event_date: date
    rows: int
    events: int
    min_us: int
    max_us: int
    kinds: list[str]


@dataclass(frozen=True)
class BatchValues:
    """The pane columns that hold the batch's own values, added to its files by the writer.

    They are the same in every pane of a batch, and are not computed by Spark.

    Why: Spark writes a literal's value into the Java code it generates for a plan, so a batch id, a
    receipt time or a watermark in the plan made every micro-batch compile its code anew (Janino)
    and the JVM's JIT compile that new code again, beside the batch on a 2-core machine
    (BENCHMARKS.md section 1). With no value of the batch in the plan, every micro-batch runs the
    code the first one compiled.
    """

    COLUMNS: ClassVar[tuple[str, ...]] = ("batch_id", "watermark", "receipt_ts")

    batch_id: int
    receipt_ts: str
    watermark_us: int

    def scalars(self) -> dict[str, pa.Scalar[Any]]:
        """Name -> Arrow scalar, as Spark's writer typed them.

        batch_id a bigint, watermark a UTC timestamp in microseconds, receipt_ts a string.
        """
        return {
            "batch_id": pa.scalar(self.batch_id, pa.int64()),
            "watermark": pa.scalar(self.watermark_us, pa.timestamp("us", tz="UTC")),
            "receipt_ts": pa.scalar(self.receipt_ts, pa.string()),
        }


def with_constants(table: pa.Table, values: dict[str, pa.Scalar[Any]]) -> pa.Table:
    """`table` with one more column per (name, Arrow scalar) of `values`.

    That value in every row and not null, as Spark's writer typed a literal column (the panes' batch
    values, the quarantine's).
    """
    for name, value in values.items():
        # pyarrow-stubs type repeat() per concrete scalar class only, not for a Scalar[Any]
        column = pa.repeat(value, table.num_rows)  # type: ignore[call-overload]
        table = table.append_column(pa.field(name, value.type, nullable=False), column)
    return table


def write_batch(
    by_date: DataFrame,
    lake: Lake,
    state_dir: Folder,
    panes: list[str],
    state: dict[str, str],
    batch: BatchValues,
    skip_dates: frozenset[date] = frozenset(),
) -> tuple[list[DateStats], int]:
    """A micro-batch's outputs in one pass over its sessions.

    `by_date` holds the batch's rows shuffled by event date (stream_rows.sql). The rows with `emit`
    into `lake`'s receipt partitions (one file per date: `panes` the files' columns, event_date and
    receipt_ts last), the rows with `retain` into the state version's folder `state_dir` (one file
    per task; `state` maps the files' columns to the frame's). `batch` the panes' columns that hold
    the batch's own values, which the frame does not have. Dates in
    `skip_dates` (partitions a replayed batch completed already) are counted, not written.

    Returns, per event date of the panes, what its receipt marker records (event_date, rows, events,
    min_us, max_us, kinds), and how many sessions state keeps: the batch's only Spark action after
    the sessionizing, where the statistics, the panes and the state were three (the fixed cost of a
    micro-batch is mostly its Spark jobs, BENCHMARKS.md section 1).
    """
    schema = "event_date date, rows bigint, events bigint, min_us bigint, max_us bigint, kinds array<string>"

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        tables = [pa.Table.from_batches([record_batch]) for record_batch in batches if record_batch.num_rows]
        if not tables:
            return
        table = pa.concat_tables(tables)
        emitted = with_constants(table.filter(table.column("emit")), batch.scalars())
        found = _write_tables(emitted.select(panes), lake, skip_dates)
        kept = table.filter(table.column("retain")).select(list(state.values())).rename_columns(list(state))
        if kept.num_rows:
            task = TaskContext.get()
            if task is None:
                raise RuntimeError("the state's files are written by Spark tasks (mapInArrow)")
            _write_file(kept, state_dir, f"part-{task.partitionId():05d}.parquet")
        # the state's row count rides in a row of its own: no event date, `rows` the sessions kept
        state_row = {"event_date": None, "rows": kept.num_rows, "events": 0, "min_us": None, "max_us": None}
        yield pa.RecordBatch.from_pylist([*found, state_row], schema=_stats_schema())

    out = by_date.mapInArrow(write, schema).collect()
    dates = [cast("DateStats", row.asDict()) for row in out if row["event_date"] is not None]  # _stats_schema's
    return dates, sum(int(row["rows"]) for row in out if row["event_date"] is None)


def _stats_schema() -> pa.Schema:
    fields: list[tuple[str, pa.DataType]] = [
        ("event_date", pa.date32()),
        ("rows", pa.int64()),
        ("events", pa.int64()),
        ("min_us", pa.int64()),
        ("max_us", pa.int64()),
        ("kinds", pa.list_(pa.string())),
    ]
    return pa.schema(fields)


def _write_file(table: pa.Table, folder: Folder, name: str) -> None:
    """Write one Parquet file into `folder`, under a hidden name first on a local disk.

    A reader never sees half a file; a single-object upload on a bucket is atomic already.
    """
    fs, path = folder.at()
    fs.create_dir(path, recursive=True)
    if isinstance(fs, pafs.LocalFileSystem):
        tmp = f"{path}/.{name}.tmp"
        pq.write_table(table, tmp, filesystem=fs)
        fs.move(tmp, f"{path}/{name}")
    else:
        pq.write_table(table, f"{path}/{name}", filesystem=fs)


def _write_tables(table: pa.Table, lake: Lake, skip_dates: frozenset[date] = frozenset()) -> list[DateStats]:
    """Each event date's panes into its receipt partition; per date, what its marker records.

    The panes' event_date column holds the date as text (the session's start date, formatted by
    Spark): it is parsed here, once per date.
    """
    dates = table.column("event_date")
    stamps = table.column("receipt_ts")
    found: list[DateStats] = []
    # a pane's event_date and receipt_ts are never null (its session's start date, its batch's time)
    pairs = zip(cast("list[str]", dates.to_pylist()), cast("list[str]", stamps.to_pylist()), strict=False)
    for text, receipt_ts in sorted(set(pairs)):
        rows = table.filter(pc.and_(pc.equal(dates, pa.scalar(text)), pc.equal(stamps, pa.scalar(receipt_ts))))
        event_date = layout.as_event_date(text)
        found.append(
            {
                "event_date": event_date,
                "rows": rows.num_rows,
                "events": pc.sum(rows.column("event_count")).as_py(),
                "min_us": pc.min(rows.column("session_start").cast(pa.int64())).as_py(),
                "max_us": pc.max(rows.column("session_end").cast(pa.int64())).as_py(),
                "kinds": sorted(set(cast("list[str]", rows.column("pane_kind").to_pylist()))),  # never null
            }
        )
        if event_date in skip_dates:
            continue
        folder = lake.receipt_dir(event_date, receipt_ts)
        fs, path = folder.at()
        fs.create_dir(path, recursive=True)
        fs.delete_dir_contents(path, missing_dir_ok=True)  # an interrupted attempt's leftovers
        _write_file(rows.drop_columns(["event_date", "receipt_ts"]), folder, PANE_FILE)
    return found
