"""Checks of the changes table (tidemark/iceberg/changes.py) against the sessions table's versions,
read with pyiceberg alone (no tidemark reader): for every committed version v of a date, applying
v's changeset to the sessions of v's previous version gives exactly v's sessions."""

from __future__ import annotations

from collections import defaultdict
from datetime import date, datetime, timezone

from pyiceberg.expressions import EqualTo

from tidemark.base import layout
from tidemark.iceberg import changes, run_markers, table_versions
from tidemark.iceberg import table as iceberg
from tidemark.store.lake import Lake

META = set(changes.META_COLUMNS)


def _canon(value):
    """A value compared by content: datetimes as UTC text (pyarrow's tzinfo objects differ)."""
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc).isoformat()
    if isinstance(value, list):
        return [_canon(v) for v in value]
    if isinstance(value, dict):
        return sorted((k, _canon(v)) for k, v in value.items())
    return value


def _key(row: dict) -> tuple:
    return tuple(sorted((k, repr(_canon(v))) for k, v in row.items() if k not in META))


def sessions_at(tbl, event_date: date | str, snapshot_id: int) -> dict[str, dict]:
    rows = (
        tbl.scan(row_filter=iceberg.date_filter(layout.as_event_date(event_date)), snapshot_id=snapshot_id)
        .to_arrow()
        .to_pylist()
    )
    out = {r["session_id"]: r for r in rows}
    assert len(out) == len(rows), "session_id not unique in a version"
    return out


def changes_of(lake: Lake, event_date: date | str) -> dict[str, list[dict]]:
    """{version: its changeset's rows} of a date, as the changes table holds them."""
    tbl = changes.load(lake)
    if tbl is None:
        return {}
    rows = (
        tbl.scan(row_filter=EqualTo("event_date", layout.event_date_text(layout.as_event_date(event_date))))
        .to_arrow()
        .to_pylist()
    )
    out: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        out[row[changes.COMMIT_VERSION]].append(row)
    return dict(out)


def apply(before: dict[str, dict], rows: list[dict]) -> dict[str, dict]:
    """A changeset applied to a version's sessions ({session_id: row}); checks each retraction names
    a row exactly as it was."""
    after = dict(before)
    for row in rows:
        if row[changes.CHANGE_TYPE] in ("delete", "update_preimage"):
            assert row["session_id"] in after, ("retracts a session not there", row["session_id"])
            assert _key(after.pop(row["session_id"])) == _key(row), "retracts another row than the version's"
    for row in rows:
        if row[changes.CHANGE_TYPE] in ("insert", "update_postimage"):
            assert row["session_id"] not in after, ("inserts a session already there", row["session_id"])
            after[row["session_id"]] = {k: v for k, v in row.items() if k not in META}
    return after


def check_date(lake: Lake, event_date: date | str) -> list[dict]:
    """The invariant over every committed version of the date still in the table's history; returns,
    per version, {version, previous, inserted, deleted, updated} (what the test may assert on)."""
    event_date = layout.as_event_date(event_date)
    tbl = iceberg.load(lake)
    changes_tbl = changes.load(lake)
    by_version = changes_of(lake, event_date)
    versions = [(s, p) for s, p in table_versions.snapshot_versions(tbl, event_date)]
    seen, out = {}, []
    for snapshot, props in versions:
        version, previous = props["tidemark.version"], props.get("tidemark.previous-version") or None
        now = sessions_at(tbl, event_date, snapshot.snapshot_id)
        rows = by_version.get(version, [])
        assert all(r[changes.PREVIOUS_VERSION] == previous for r in rows), (version, previous)
        assert all(r["event_date"] == event_date for r in rows)
        record = table_versions.snapshot_record(lake, event_date, snapshot, props)
        where = changes.appended(lake, record)
        assert where is not None, f"version {version} of {event_date} has no appended changeset"
        # pyiceberg alone: the append scan between the notice's two snapshots reads exactly these rows
        scanned = (
            changes_tbl.incremental_append_scan(
                from_snapshot_id_exclusive=where.parent_snapshot_id, to_snapshot_id_inclusive=where.snapshot_id
            )
            .to_arrow()
            .to_pylist()
        )
        assert sorted(map(_key, scanned)) == sorted(map(_key, rows)), version
        if previous is not None:
            assert previous in seen, f"{event_date}: previous version {previous} not in history"
            before = seen[previous]
        else:
            before = {}
        after = apply(before, rows)
        assert {k: _key(v) for k, v in after.items()} == {k: _key(v) for k, v in now.items()}, (event_date, version)
        seen[version] = now
        kinds = [r[changes.CHANGE_TYPE] for r in rows]
        out.append(
            {
                "version": version,
                "previous": previous,
                "inserted": kinds.count("insert"),
                "deleted": kinds.count("delete"),
                "updated": kinds.count("update_preimage"),
                "sessions": len(now),
            }
        )
    assert set(by_version) <= set(seen), "a changeset of a version the sessions table never committed"
    return out


# --- versions with a staged changeset, built without Spark ---------------------------------------


def _diff(old: list[dict], new: list[dict]) -> list[dict]:
    before = {r["session_id"]: r for r in old}
    after = {r["session_id"]: r for r in new}
    out = []
    for sid in sorted(before.keys() | after.keys()):
        a, b = before.get(sid), after.get(sid)
        if a is None:
            out.append({changes.CHANGE_TYPE: "insert", **b})
        elif b is None:
            out.append({changes.CHANGE_TYPE: "delete", **a})
        elif _key(a) != _key(b):
            out += [{changes.CHANGE_TYPE: "update_preimage", **a}, {changes.CHANGE_TYPE: "update_postimage", **b}]
    return out


def prepared_with_changes(
    lake: Lake, receipts: list[str], sessions: dict, previous, event_date: date | str = "2026-03-10"
):
    """A run's files, staged changeset against `previous` (a committed VersionRecord or None) and
    marker, as a dedup run leaves them before its commit. sessions: {session_id: (end minute, count)}
    (tests/icebergkit.py's version_with)."""
    import dataclasses
    from datetime import timedelta

    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests import icebergkit

    marker = icebergkit.prepared_run(lake, event_date, receipts, sessions=0)
    event_date = marker.event_date
    start = datetime.combine(event_date, datetime.min.time(), tzinfo=timezone.utc)
    rows = [
        {
            "session_id": sid,
            "user_id": f"u{sid.split('-')[0]}",  # "3-a" and "3-b": two sessions of user u3
            "session_start": start,
            "session_end": start + timedelta(minutes=end),
            "event_count": count,
            "event_type_count": 1,
            "event_ids": [f"{sid}-{i}" for i in range(count)],
            "events": [],
            "first_receipt_ts": min(receipts),
            "last_receipt_ts": min(receipts),
            "event_date": event_date,
        }
        for sid, (end, count) in sorted(sessions.items())
    ]
    schema = icebergkit._spark_types(iceberg.schema().as_arrow())
    folder = lake.run_dir(event_date, marker.run_id)
    files: tuple[str, ...] = ()
    if rows:
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), f"{folder}/part-00000.parquet")
        files = ("part-00000.parquet",)
    old: list[dict] = []
    if previous is not None and previous.files:
        old = pq.read_table(
            f"{lake.run_dir(event_date, previous.run_id)}/{previous.files[0]}", schema=schema
        ).to_pylist()
    staged = _diff(old, rows)
    changes_schema = pa.schema([pa.field(changes.CHANGE_TYPE, pa.string()), *schema])
    import os

    os.makedirs(changes.staged_dir(lake, event_date, marker.run_id))
    pq.write_table(
        pa.Table.from_pylist(staged, schema=changes_schema),
        f"{changes.staged_dir(lake, event_date, marker.run_id)}/part-00000.parquet",
    )
    kinds = [r[changes.CHANGE_TYPE] for r in staged]
    counts = changes.Counts(kinds.count("insert"), kinds.count("delete"), kinds.count("update_preimage"))
    marker = icebergkit.with_fields(
        dataclasses.replace(marker, files=files, sessions=len(rows)),
        planned_on=previous.version if previous is not None else None,
        changes=counts.to_json(),
    )
    run_markers.write_marker(lake, marker)
    return marker
