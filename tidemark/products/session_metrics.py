"""Daily session metrics of one event date.

The small product the example consumer DAG (dags/example_session_metrics.py) rebuilds whenever the
date gets a corrected version.

    row = session_metrics.rebuild(lake, date(2026, 3, 7), out_root)   # read (pyarrow, no JVM), compute, write
    session_metrics.read(out_root, date(2026, 3, 7))                   # what is there now

One row per date: sessions, users, median and p95 session duration (seconds, linear
interpolation between the closest ranks), sessions that crossed midnight (end on a later UTC date
than their start), and the version it was computed from. It is written to
<out_root>/event_date=D/metrics.parquet in one atomic replace: a function of the date's current
version only, so a rerun or a cleared task writes the same bytes' worth of values again. The row's
`event_date` is the date's YYYY-MM-DD text (a week's: its Monday's), as the Parquet file holds it.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from datetime import date, datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tidemark.base import layout
from tidemark.base.logs import get_logger
from tidemark.iceberg import reader
from tidemark.store.lake import Lake
from tidemark.store.locations import File, Root

log = get_logger("session_metrics")

FILE = "metrics.parquet"
_COLUMNS: list[pa.Field[Any]] = [
    pa.field("event_date", pa.string()),
    pa.field("version", pa.string()),
    pa.field("sessions", pa.int64()),
    pa.field("users", pa.int64()),
    pa.field("median_duration_s", pa.float64()),
    pa.field("p95_duration_s", pa.float64()),
    pa.field("crossed_midnight", pa.int64()),
]
SCHEMA = pa.schema(_COLUMNS)
# The columns of the sessions a week's metrics are computed from, one type for every date
_WEEK_INPUT: list[pa.Field[Any]] = [
    pa.field("user_id", pa.string()),
    pa.field("session_start", pa.timestamp("us", tz="UTC")),
    pa.field("session_end", pa.timestamp("us", tz="UTC")),
]
# The metrics row (SCHEMA's columns)
Metrics = dict[str, Any]
# (user_id, session_start, session_end)
SessionTuple = tuple[str, datetime, datetime]
INPUT_COLUMNS = ["user_id", "session_start", "session_end"]


def compute(event_date: date, version: str | None, sessions: pa.Table) -> Metrics:
    """The metrics row of a table with user_id, session_start, session_end (timestamps, UTC)."""
    starts = sessions.column("session_start").cast(pa.timestamp("us", tz="UTC"))
    ends = sessions.column("session_end").cast(pa.timestamp("us", tz="UTC"))
    micros = pc.subtract(ends.cast(pa.int64()), starts.cast(pa.int64()))
    seconds = pc.divide(micros.cast(pa.float64()), 1_000_000.0)
    median = p95 = None
    if len(seconds):
        quantiles = pc.QuantileOptions(q=[0.5, 0.95], interpolation="linear")
        median, p95 = (v.as_py() for v in pc.quantile(seconds, options=quantiles))
    crossed = (
        pc.sum(
            pc.cast(
                pc.greater(
                    # pyarrow-stubs' floor_temporal overloads leave out a tz-aware timestamp column
                    pc.floor_temporal(ends, unit="day"),  # type: ignore[call-overload]
                    pc.floor_temporal(starts, unit="day"),  # type: ignore[call-overload]
                ),
                pa.int64(),
            )
        ).as_py()
        or 0
    )
    return {
        "event_date": layout.event_date_text(event_date),
        "version": version,
        "sessions": sessions.num_rows,
        "users": pc.count_distinct(sessions.column("user_id")).as_py() if sessions.num_rows else 0,
        "median_duration_s": median,
        "p95_duration_s": p95,
        "crossed_midnight": int(crossed),
    }


def from_sessions(event_date: date, version: str | None, rows: Iterable[SessionTuple]) -> Metrics:
    """The same metrics from (user_id, session_start, session_end) tuples (a batch recomputation)."""
    return compute(event_date, version, from_table_rows(list(rows)))


def default_root(lake: Lake) -> str:
    """Where the example DAG writes when no root is configured (a team points it at its own bucket)."""
    return lake.product_dir("daily_session_metrics")


def partition_path(out_root: str, event_date: date) -> File:
    """The date's metrics file under `out_root`."""
    return Root(out_root).file(f"event_date={layout.event_date_text(event_date)}", FILE)


def rebuild(lake: Lake, event_date: date, out_root: str) -> Metrics:
    """Read the date's current corrected version, compute its metrics, replace its partition."""
    sessions = reader.read_sessions(lake, event_date, columns=INPUT_COLUMNS)
    version = sessions.schema.metadata[b"tidemark.version"].decode()
    row = compute(event_date, version, sessions)
    _write(partition_path(out_root, event_date), pa.Table.from_pylist([row], schema=SCHEMA))
    log.info(
        "daily session metrics rebuilt",
        event_date=event_date,
        version=version,
        sessions=row["sessions"],
        out=partition_path(out_root, event_date),
    )
    return row


def default_weekly_root(lake: Lake) -> str:
    """Where the example weekly DAG writes when no root is configured."""
    return lake.product_dir("weekly_session_metrics")


def week_path(out_root: str, monday: date) -> File:
    """The week's metrics file under `out_root` (a week is named by its Monday)."""
    return Root(out_root).file(f"week={layout.event_date_text(monday)}", FILE)


def rebuild_week(lake: Lake, monday: date, out_root: str) -> Metrics:
    """The example weekly consumer's product: the metrics of the sessions of one ISO week.

    The week starts on `monday`; every date of it that has a version counts; the row goes to
    <out_root>/week=MONDAY/metrics.parquet. Its "version" is the dates' versions, "D=V" joined by
    ",", so a rerun shows what it read.

    Raises:
        ValueError: `monday` is not a Monday.
    """
    if monday.weekday() != 0:
        raise ValueError(f"{monday} is not a Monday: a week is named by the Monday it starts on")
    parts: list[pa.Table] = []
    versions: list[str] = []
    for n in range(7):
        day = monday + timedelta(days=n)
        try:
            sessions = reader.read_sessions(lake, day, columns=INPUT_COLUMNS)
        except reader.NoVersion:
            continue
        parts.append(sessions.select(INPUT_COLUMNS).cast(pa.schema(_WEEK_INPUT)).replace_schema_metadata(None))
        versions.append(f"{day}={sessions.schema.metadata[b'tidemark.version'].decode()}")
    table = pa.concat_tables(parts) if parts else from_table_rows([])
    row = compute(monday, ",".join(versions) or None, table)
    _write(week_path(out_root, monday), pa.Table.from_pylist([row], schema=SCHEMA))
    log.info("weekly session metrics rebuilt", week=monday, dates=len(versions), sessions=row["sessions"])
    return row


def from_table_rows(rows: Sequence[SessionTuple]) -> pa.Table:
    """The sessions table compute() reads, from (user_id, session_start, session_end) tuples."""
    return pa.table(
        {
            "user_id": pa.array([r[0] for r in rows], pa.string()),
            "session_start": pa.array([r[1] for r in rows], pa.timestamp("us", tz="UTC")),
            "session_end": pa.array([r[2] for r in rows], pa.timestamp("us", tz="UTC")),
        }
    )


def read_week(out_root: str, monday: date) -> Metrics | None:
    """The week's metrics row as written, None when there is none."""
    return _read(week_path(out_root, monday))


def read(out_root: str, event_date: date) -> Metrics | None:
    """The date's metrics row as written, None when there is none."""
    return _read(partition_path(out_root, event_date))


def _read(path: File) -> Metrics | None:
    """The row of a metrics file, None when there is none."""
    if not path.exists():
        return None
    fs, native = path.at()
    with fs.open_input_file(native) as handle:
        return pq.read_table(handle).to_pylist()[0]


def _write(path: File, table: pa.Table) -> None:
    """Replace the file whole: a reader sees the old metrics or the new, never a part."""
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    path.write_bytes_atomic(buffer.getvalue())
