"""Read deduplicated sessions (or the raw receipt panes) of an event date with pyarrow: no JVM.

    from tidemark.iceberg import reader
    day = date(2026, 3, 7)
    table = reader.read_sessions(Lake.open("gs://lake"), day)                # current version
    table = reader.read_sessions(lake, day, as_of="20260308T000000000Z")
    panes = reader.read_panes(lake, day)                                     # what the stream wrote

Sessions come from the Iceberg table (tidemark.iceberg.table) through pyiceberg's scan of one snapshot,
pruned to the date's partition: the current snapshot, or with as_of the snapshot that published the
newest version whose id (the highest receipt_ts it includes) is at or before as_of. The version's
description and its data come from the same loaded metadata, so they always agree.
Any engine reads the same table: see docs/production.md.

A version published before a column of the session schema existed (tidemark/session/session_schema.py)
has files without it, which Iceberg reads as null (or leaves out, reading a snapshot from before
the table was evolved). read_sessions returns every column of today's schema anyway: such a
column is computed from the version's rows, with the rule the dedup uses (the column's fill:
event_type_count from `events`), so a reader sees the value a new dedup run would write. The
result's metadata says so: `tidemark.session_schema` (the schema of the version's files),
`tidemark.computed_columns` (computed by the reader) and `tidemark.null_columns` (a column no fill
computes: null, never 0 or "").
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any, Literal

import pyarrow as pa
import pyarrow.dataset as pads
from pyiceberg.table import Table

from tidemark.base import layout
from tidemark.base.times import iso_z, parse_iso
from tidemark.iceberg import table as iceberg
from tidemark.iceberg import table_versions
from tidemark.panes import receipts
from tidemark.session import session_schema
from tidemark.store.lake import Lake
from tidemark.store.version_record import VersionRecord

SUMMARY_COLUMNS = ["session_id", "user_id", "session_start", "session_end", "event_count"]
PANE_SUMMARY_COLUMNS = [
    "receipt_ts",
    "pane_kind",
    "pane_index",
    "session_id",
    "user_id",
    "session_start",
    "session_end",
    "event_count",
]


class NoVersion(LookupError):
    """No deduplicated version answers the request (never deduplicated, or garbage-collected)."""


def current_version(lake: Lake, event_date: date) -> VersionRecord | None:
    """The current version: version, receipts, sessions, affected_dates, files, ... (or None)."""
    return table_versions.current_version(lake, event_date)


def parse_as_of(value: object) -> str:
    """A receipt_ts ('20260307T201500123Z') or an RFC 3339 instant with offset -> receipt_ts."""
    text = str(value)
    try:
        return layout.check_receipt_ts(text)
    except layout.InvalidPartitionValue:
        pass
    try:
        moment = parse_iso(text)
    except ValueError:
        moment = None
    if moment is None:
        raise layout.InvalidPartitionValue(
            f"invalid --as-of {text[:80]!r}: expected a receipt_ts like 20260307T201500123Z "
            "or an RFC 3339 time with offset like 2026-03-07T20:15:00Z"
        )
    return layout.format_receipt_ts(moment)


def resolve(lake: Lake, event_date: date, as_of: str | None = None) -> VersionRecord:
    """The version that answers: current, or the newest one with id <= as_of (see read_sessions)."""
    return _resolve(lake, iceberg.load(lake), event_date, as_of)


def _resolve(lake: Lake, tbl: Table | None, event_date: date, as_of: str | None) -> VersionRecord:
    text = layout.event_date_text(event_date)  # text is refused here: it is parsed where it enters
    current = None if tbl is None else table_versions.current_version(lake, event_date, tbl)
    if as_of is None:
        if current is None:
            raise NoVersion(f"event_date {text} has no deduplicated version yet (run `tidemark dedup` for it)")
        return current
    as_of = parse_as_of(as_of)
    if current is not None and current.version is not None and current.version <= as_of:
        return current
    # Version ids of a date only grow (tidemark.iceberg.commits), so the newest answering one is the last.
    for snapshot, props in reversed(table_versions.snapshot_versions(tbl, event_date) if tbl is not None else []):
        if props["tidemark.version"] <= as_of:
            return table_versions.snapshot_record(lake, event_date, snapshot, props)
    raise NoVersion(
        f"event_date {text} has no complete deduplicated version as of {as_of} "
        "(none yet, or older versions were garbage-collected)"
    )


def read_sessions(lake: Lake, event_date: date, as_of: str | None = None, columns: list[str] | None = None) -> pa.Table:
    """The deduplicated sessions of an event date as a pyarrow Table, sorted by user and start.

    The columns asked for (default: every column of the table and of today's session schema), those
    the answering version's files predate computed from its rows (module docstring).
    """
    text = layout.event_date_text(event_date)  # text is refused before anything is read
    tbl = iceberg.load(lake)
    version = _resolve(lake, tbl, event_date, as_of)
    assert tbl is not None  # a version answered: the table exists (_resolve raises NoVersion otherwise)
    written = version.schema_version
    scan = tbl.scan(row_filter=iceberg.date_filter(event_date), snapshot_id=version.snapshot_id)
    present = [f.name for f in scan.projection().fields]  # the snapshot's schema (time travel: its own)
    wanted = list(columns) if columns else [*present, *(c for c in session_schema.TABLE_COLUMNS if c not in present)]
    unknown = [c for c in wanted if c not in present and c not in session_schema.TABLE_COLUMNS]
    if unknown:
        raise ValueError(f"no such session column: {', '.join(unknown)} (columns: {', '.join(present)})")
    read = [c for c in (*wanted, *session_schema.read_inputs(wanted, written)) if c in present]
    table: pa.Table = scan.select(*read).to_arrow() if tbl.current_snapshot() is not None else _empty(tbl, read)
    done = session_schema.complete(table, written, wanted)
    table = done.table.select(wanted)
    if {"user_id", "session_start"} <= set(table.column_names):
        table = table.sort_by([("user_id", "ascending"), ("session_start", "ascending")])
    return table.replace_schema_metadata(
        {
            "tidemark.event_date": text,
            "tidemark.version": version.version or "",
            "tidemark.session_schema": str(written),
            "tidemark.computed_columns": ",".join(done.computed),
            "tidemark.null_columns": ",".join(done.null),
        }
    )


def _empty(tbl: Table, columns: list[str]) -> pa.Table:
    return tbl.schema().as_arrow().empty_table().select(columns)


def read_panes(lake: Lake, event_date: date, as_of: str | None = None, columns: list[str] | None = None) -> pa.Table:
    """Every pane the stream wrote for an event date, with its receipt_ts.

    Complete receipt partitions only, and with as_of only those received at or before it. A pane
    column its partition's files predate (written before the column existed) is computed from the
    pane's events.
    """
    as_of = parse_as_of(as_of) if as_of is not None else None
    tables = []
    for receipt_ts in receipts.list_receipts(lake, event_date):
        if as_of is not None and receipt_ts > as_of:
            continue
        folder = lake.receipt_dir(event_date, receipt_ts)
        fs, path = folder.at()
        files = [layout.join(path, name) for name in folder.data_file_names()]
        if not files:
            continue
        dataset = pads.dataset(files, filesystem=fs, format="parquet")
        # A partition written before a pane column existed lacks it: computed from its panes' events
        # as read_sessions does (the stream computes it from the same events).
        present = dataset.schema.names
        written = session_schema.pane_version(present)
        wanted = (
            [c for c in columns if c != "receipt_ts"]
            if columns
            else [*present, *(c for c in session_schema.PANE_COLUMNS if c not in present)]
        )
        read = [c for c in (*wanted, *session_schema.read_inputs(wanted, written)) if c in present]
        table = session_schema.complete(dataset.to_table(columns=read), written, wanted).table.select(wanted)
        tables.append(table.append_column("receipt_ts", pa.array([receipt_ts] * table.num_rows, pa.string())))
    if not tables:
        return pa.table({"receipt_ts": pa.array([], pa.string())})
    table = pa.concat_tables(tables, promote_options="default")
    order: list[tuple[str, Literal["ascending", "descending"]]] = [("receipt_ts", "ascending")]
    order += [(c, "ascending") for c in ("user_id", "session_start") if c in table.column_names]
    return table.sort_by(order)


def _plain(value: Any) -> Any:  # JSON-ready, from pyarrow's Python values
    """JSON-ready value: timestamps as RFC 3339 UTC ('...Z'), recursively."""
    if isinstance(value, datetime):
        return iso_z(value, "microseconds")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def to_records(table: pa.Table) -> list[dict[str, Any]]:
    """The table's rows as JSON-ready objects (timestamps as RFC 3339 UTC text, dates as ISO text)."""
    return [{key: _plain(value) for key, value in row.items()} for row in table.to_pylist()]
