"""Versions of a date built without Spark: Parquet files with the table's columns (pyarrow) and the
run's marker, as a dedup run leaves them right before its commit (tidemark.iceberg.commits.commit);
and, for the migration's tests, a table in the layout of an older tidemark (older_layout_commit)."""

from __future__ import annotations

import dataclasses
import json
import os
from datetime import date, datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import parquet_file_to_data_file

from tidemark.base import layout
from tidemark.base.times import now_iso_z
from tidemark.iceberg import commits, run_markers, table_versions
from tidemark.iceberg import table as iceberg
from tidemark.notices import corrected_delivery
from tidemark.store.lake import Lake
from tidemark.store.version_record import Commit, VersionRecord

T0 = datetime(2026, 3, 10, tzinfo=timezone.utc)


def prepared_run(
    lake: Lake, event_date: date | str, receipts: list[str], sessions: int = 1, affected_dates: list[str] | None = None
) -> VersionRecord:
    """A run's files and marker (not committed). receipts: receipt_ts values of event_date (a date, or its text)."""
    day = layout.as_event_date(event_date)
    text = layout.event_date_text(day)
    run_id = run_markers.new_run_id()
    folder = lake.run_dir(day, run_id)
    os.makedirs(folder)
    names = []
    if sessions:
        start = datetime.combine(day, datetime.min.time(), tzinfo=timezone.utc)
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
                "event_date": day,
            }
            for i in range(sessions)
        ]
        pq.write_table(pa.Table.from_pylist(rows, schema=iceberg.schema().as_arrow()), f"{folder}/part-00000.parquet")
        names = ["part-00000.parquet"]
    # the keys of an older tidemark's marker: no reach (so no version built here counts as covering
    # a plan), no context, no rules id (rules compared by gap)
    marker = VersionRecord.holding(
        event_date=day,
        run_id=run_id,
        files=tuple(names),
        sessions=sessions,
        receipts=tuple(sorted(f"{text}/{r}" for r in receipts)),
        max_receipt_ts=max(receipts),
        receipts_read=len(receipts),
        rows_read=sessions,
        hi=text,
        gap="30m",
        affected_dates=tuple(affected_dates or []),
        created_at=T0.isoformat().replace("+00:00", "Z"),
    )
    run_markers.write_marker(lake, marker)
    return marker


def with_fields(marker: VersionRecord, **changes) -> VersionRecord:
    """The marker with these fields set (and recorded, if it left them out)."""
    return dataclasses.replace(marker, **changes, absent=marker.absent - set(changes))


def publish_run(lake: Lake, event_date: date | str, receipts: list[str], sessions: int = 1) -> commits.Outcome:
    return commits.commit(lake, prepared_run(lake, event_date, receipts, sessions))


def commit_recording(lake: Lake, marker: VersionRecord) -> commits.Outcome:
    """What tidemark.deduplication.dedup does: the commit, then the corrected notice's record."""
    outcome = commits.commit(lake, marker)
    if outcome.committed:
        corrected_delivery.record_after_commit(lake, outcome.current)
    return outcome


def publish_recorded_run(lake: Lake, event_date: date | str, receipts: list[str], sessions: int = 1) -> commits.Outcome:
    """publish_run, with the corrected notice recorded after the commit as tidemark.deduplication.dedup does."""
    return commit_recording(lake, prepared_run(lake, event_date, receipts, sessions))


def version_with(
    lake: Lake,
    receipts: list[str],
    sessions: dict[str, tuple[int, int]],
    affected: list[str] | None = None,
    event_date: date | str = "2026-03-10",
) -> VersionRecord:
    """A committed (and recorded) version whose sessions are {session_id: (end minute, event_count)},
    all starting at midnight of event_date; returns the new current version."""
    marker = prepared_run(lake, event_date, receipts, sessions=0, affected_dates=affected)
    start = datetime.combine(marker.event_date, datetime.min.time(), tzinfo=timezone.utc)
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
            "event_date": marker.event_date,
        }
        for sid, (end, count) in sorted(sessions.items())
    ]
    files: tuple[str, ...] = ()
    if rows:  # a version without sessions has no data file, as the dedup writes it
        folder = lake.run_dir(marker.event_date, marker.run_id)
        # with Spark's Arrow types (string, not pyiceberg's large_string), as the dedup writes them
        table = pa.Table.from_pylist(rows, schema=_spark_types(iceberg.schema().as_arrow()))
        pq.write_table(table, f"{folder}/part-00000.parquet")
        files = ("part-00000.parquet",)
    marker = dataclasses.replace(marker, files=files, sessions=len(rows))
    run_markers.write_marker(lake, marker)
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


def older_layout_commit(lake: Lake, marker: VersionRecord) -> VersionRecord:
    """Commit a prepared run as an older tidemark laid its table out; return the version committed.

    That layout: the current version of a date in a table property `tidemark.current.D` (its commit
    as JSON), no version file among the date's live files, and a manifest per commit (pyiceberg's
    own overwrite: a date's replaced files stay in a manifest of deletes). No check of what the
    current version holds: the caller commits versions in order.
    """
    event_date = marker.event_date
    tbl = iceberg.load(lake, create=True)
    key = table_versions.CURRENT_PREFIX + marker.event_date_text
    previous = Commit.from_json(json.loads(tbl.properties[key])).version if key in tbl.properties else None
    version = marker.max_receipt_ts
    assert version is not None
    assert previous is None or previous < version, (previous, version)
    record = Commit(version=version, run_id=marker.run_id, previous_version=previous, committed_at=now_iso_z())
    replaced = [task.file for task in tbl.scan(row_filter=iceberg.date_filter(event_date)).plan_files()]
    added = [parquet_file_to_data_file(tbl.io, tbl.metadata, uri) for uri in run_markers.run_files(lake, marker)]
    with tbl.transaction() as tx:
        summary = commits.snapshot_summary(event_date, marker, record)
        with tx.update_snapshot(snapshot_properties=summary).overwrite() as overwrite:
            for data_file in replaced:
                overwrite.delete_data_file(data_file)
            for data_file in added:
                overwrite.append_data_file(data_file)
        tx.set_properties(**{key: json.dumps(record.to_json(), sort_keys=True)})
    return marker.committed(record)


def receipt(hour: int, minute: int = 0) -> str:
    return f"20260310T{hour:02d}{minute:02d}00000Z"
