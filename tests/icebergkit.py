"""Versions of a date built without Spark: Parquet files with the table's columns (pyarrow) and the
run's marker, as a dedup run leaves them right before its commit (tidemark.iceberg.publish.commit)."""

from __future__ import annotations

import dataclasses
import os
from datetime import date, datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.parquet as pq

from tidemark.iceberg import publish
from tidemark.iceberg import table as iceberg
from tidemark.notices import corrected_delivery
from tidemark.store.lake import Lake
from tidemark.store.version_record import VersionRecord

T0 = datetime(2026, 3, 10, tzinfo=timezone.utc)


def prepared_run(
    lake: Lake, event_date: str, receipts: list[str], sessions: int = 1, affected_dates: list[str] | None = None
) -> VersionRecord:
    """A run's files and marker (not committed). receipts: receipt_ts values of event_date."""
    run_id = publish.new_run_id()
    folder = lake.run_dir(event_date, run_id)
    os.makedirs(folder)
    names = []
    if sessions:
        start = datetime.combine(date.fromisoformat(event_date), datetime.min.time(), tzinfo=timezone.utc)
        rows = [
            {
                "session_id": f"{run_id[:8]}{i:024d}",
                "user_id": f"u{i}",
                "session_start": start + timedelta(minutes=i),
                "session_end": start + timedelta(minutes=i, seconds=5),
                "event_count": 1,
                "event_ids": [f"e{i}"],
                "events": [
                    {
                        "event_ts": start + timedelta(minutes=i),
                        "event_id": f"e{i}",
                        "event_type": "play",
                        "payload": "{}",
                    }
                ],
                "first_receipt_ts": min(receipts),
                "last_receipt_ts": max(receipts),
                "event_date": date.fromisoformat(event_date),
            }
            for i in range(sessions)
        ]
        pq.write_table(pa.Table.from_pylist(rows, schema=iceberg.schema().as_arrow()), f"{folder}/part-00000.parquet")
        names = ["part-00000.parquet"]
    # the keys of an older tidemark's marker: no reach (so no version built here counts as covering
    # a plan), no context, no rules id (rules compared by gap)
    marker = VersionRecord.holding(
        event_date=date.fromisoformat(event_date),
        run_id=run_id,
        files=tuple(names),
        sessions=sessions,
        receipts=tuple(sorted(f"{event_date}/{r}" for r in receipts)),
        max_receipt_ts=max(receipts),
        receipts_read=len(receipts),
        rows_read=sessions,
        hi=event_date,
        gap="30m",
        affected_dates=tuple(affected_dates or []),
        created_at=T0.isoformat().replace("+00:00", "Z"),
    )
    publish.write_marker(lake, marker)
    return marker


def with_fields(marker: VersionRecord, **changes) -> VersionRecord:
    """The marker with these fields set (and recorded, if it left them out)."""
    return dataclasses.replace(marker, **changes, absent=marker.absent - set(changes))


def publish_run(lake: Lake, event_date: str, receipts: list[str], sessions: int = 1) -> publish.Outcome:
    return publish.commit(lake, prepared_run(lake, event_date, receipts, sessions))


def commit_recording(lake: Lake, marker: VersionRecord) -> publish.Outcome:
    """What tidemark.deduplication.dedup does: the commit, then the corrected notice's record."""
    outcome = publish.commit(lake, marker)
    if outcome.committed:
        corrected_delivery.record_after_commit(lake, outcome.current)
    return outcome


def publish_recorded_run(lake: Lake, event_date: str, receipts: list[str], sessions: int = 1) -> publish.Outcome:
    """publish_run, with the corrected notice recorded after the commit as tidemark.deduplication.dedup does."""
    return commit_recording(lake, prepared_run(lake, event_date, receipts, sessions))


def version_with(
    lake: Lake,
    receipts: list[str],
    sessions: dict[str, tuple[int, int]],
    affected: list[str] | None = None,
    event_date: str = "2026-03-10",
) -> VersionRecord:
    """A committed (and recorded) version whose sessions are {session_id: (end minute, event_count)},
    all starting at midnight of event_date; returns the new current version."""
    marker = prepared_run(lake, event_date, receipts, sessions=0, affected_dates=affected)
    start = datetime.combine(date.fromisoformat(event_date), datetime.min.time(), tzinfo=timezone.utc)
    rows = [
        {
            "session_id": sid,
            "user_id": f"u{sid}",
            "session_start": start,
            "session_end": start + timedelta(minutes=end),
            "event_count": count,
            "event_ids": [f"{sid}-{i}" for i in range(count)],
            "events": [],
            "first_receipt_ts": min(receipts),
            "last_receipt_ts": max(receipts),
            "event_date": date.fromisoformat(event_date),
        }
        for sid, (end, count) in sorted(sessions.items())
    ]
    files: tuple[str, ...] = ()
    if rows:  # a version without sessions has no data file, as the dedup writes it
        folder = lake.run_dir(event_date, marker.run_id)
        # with Spark's Arrow types (string, not pyiceberg's large_string), as the dedup writes them
        table = pa.Table.from_pylist(rows, schema=_spark_types(iceberg.schema().as_arrow()))
        pq.write_table(table, f"{folder}/part-00000.parquet")
        files = ("part-00000.parquet",)
    marker = dataclasses.replace(marker, files=files, sessions=len(rows))
    publish.write_marker(lake, marker)
    outcome = commit_recording(lake, marker)
    assert outcome.committed
    return outcome.current


def _spark_types(schema: pa.Schema) -> pa.Schema:
    """The schema with string and list types where pyiceberg gives large ones."""

    def small(t: pa.DataType) -> pa.DataType:
        if pa.types.is_large_string(t):
            return pa.string()
        if pa.types.is_large_list(t) or pa.types.is_list(t):
            return pa.list_(pa.field(t.value_field.name, small(t.value_type), t.value_field.nullable))
        if pa.types.is_struct(t):
            return pa.struct([f.with_type(small(f.type)) for f in t])
        return t

    return pa.schema([f.with_type(small(f.type)) for f in schema], metadata=schema.metadata)


def receipt(hour: int, minute: int = 0) -> str:
    return f"20260310T{hour:02d}{minute:02d}00000Z"
