"""A micro-batch's panes into their receipt partitions: one Parquet file per event date, written by
the executors with pyarrow, straight into `event_date=D/receipt_ts=R/`.

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

The files hold the same columns and types Spark's writer wrote (partition columns `event_date` and
`receipt_ts` in the folder names only; timestamps as TIMESTAMP_MICROS, UTC), so readers of either
kind of file see one schema.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

PANE_FILE = "part-00000.parquet"


def write_panes(panes: DataFrame, sessions_root: str, columns: list | None = None) -> list[str]:
    """Write every row of `panes` (with `event_date` and `receipt_ts` columns) into its receipt
    partition under sessions_root; returns the event dates written. `columns`, when given, are the
    files' columns computed after the shuffle by date (a column derived from others need not cross
    it: Spark does not move such a projection below the shuffle)."""

    def write(batches):
        import pyarrow as pa

        tables = [pa.Table.from_batches([batch]) for batch in batches if batch.num_rows]
        if not tables:
            return
        written = _write_tables(pa.concat_tables(tables), sessions_root)
        yield pa.RecordBatch.from_pydict({"event_date": written}, schema=pa.schema([("event_date", pa.string())]))

    # repartition by date: every date's rows in one task, so one file per date and no two tasks
    # writing one folder
    by_date = panes.repartition("event_date")
    if columns is not None:
        by_date = by_date.select(*columns)
    rows = by_date.mapInArrow(write, "event_date string").collect()
    return sorted(row["event_date"] for row in rows)


def _write_tables(table, sessions_root: str) -> list[str]:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from tidemark.base import layout
    from tidemark.store import storage

    dates = table.column("event_date")
    stamps = table.column("receipt_ts")
    written = []
    for event_date, receipt_ts in sorted({(d, r) for d, r in zip(dates.to_pylist(), stamps.to_pylist(), strict=False)}):
        rows = table.filter(pc.and_(pc.equal(dates, event_date), pc.equal(stamps, receipt_ts)))
        folder = layout.join(
            sessions_root,
            f"event_date={layout.check_event_date(event_date)}",
            f"receipt_ts={layout.check_receipt_ts(receipt_ts)}",
        )
        fs, path = storage.resolve(folder)
        fs.create_dir(path, recursive=True)
        fs.delete_dir_contents(path, missing_dir_ok=True)  # an interrupted attempt's leftovers
        data = rows.drop_columns(["event_date", "receipt_ts"])
        if storage.is_local(folder):
            tmp = f"{path}/.{PANE_FILE}.tmp"
            pq.write_table(data, tmp, filesystem=fs)
            fs.move(tmp, f"{path}/{PANE_FILE}")
        else:
            pq.write_table(data, f"{path}/{PANE_FILE}", filesystem=fs)
        written.append(event_date)
    return written
