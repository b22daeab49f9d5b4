"""What is current: reading the versions of event dates from the Iceberg table.

The table's current snapshot is the one truth of what is current. Every commit
(tidemark.iceberg.commits) adds, beside the run's data files, one zero-row data file named for the
version,

    event_date=D/run=<run_id>/_tidemark_version_<version>_<previous version|first>_<committed_at>.parquet

so the live files of D name the run (its folder) and the version record, and the run's immutable
marker (tidemark.iceberg.run_markers) has the rest. A version with no session is findable the same way.
Tables written by an older tidemark hold the record in a table property `tidemark.current.D`
instead: it is read when present (it wins: only such a commit sets it, and a commit of this code
removes it), removed at the date's next commit, and tidemark.iceberg.maintenance moves the rest.

One function per question:
- `current_version`: the current version of a date (its marker and its commit);
- `current_commits`: the commits current in a table, of one date or every date (no marker read);
- `dates_with_version`: the event dates that have a current version;
- `list_versions`: the versions of a date the table's history still knows;
- `snapshot_versions` / `snapshot_record`: the tidemark snapshots in the history, and the version
  one of them published;
- `live_files`: a date's (or every date's) live data files.
"""

from __future__ import annotations

import enum
import json
import re
import threading
from datetime import date

from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot, ancestors_of

from tidemark.base import layout
from tidemark.base.times import from_micros, iso_z, parse_iso
from tidemark.iceberg import table as iceberg
from tidemark.iceberg.partitions import date_of, day_of, day_range
from tidemark.iceberg.run_markers import read_marker
from tidemark.store.lake import Lake
from tidemark.store.version_record import MARKER_KEYS, Commit, VersionRecord

CURRENT_PREFIX = "tidemark.current."  # an older table's property of a date's current version
VERSION_FILE_PREFIX = "_tidemark_version_"
_VERSION_FILE = re.compile(r"^_tidemark_version_([0-9TZ]+)_([0-9TZ]+|first)_([0-9TZ]+)\.parquet$")

# (metadata location, snapshot id) -> {day: [DataFile]}: a snapshot's files never change.
_LIVE_CACHE: dict[tuple[str, int], dict[int, list[DataFile]]] = {}
_LIVE_LOCK = threading.Lock()


class Load(enum.Enum):
    """The default of a `table` argument: load the table's current metadata."""

    CURRENT = "current"


LOAD = Load.CURRENT
# A loaded table (a consistent view across several questions), None (no table: no version), or LOAD.
TableArg = Table | None | Load


def _table(lake: Lake, table: TableArg) -> Table | None:
    return iceberg.load(lake) if isinstance(table, Load) else table


def version_file_name(record: Commit) -> str:
    """The name of the zero-row data file that records a commit among the date's live files."""
    committed = layout.format_receipt_ts(parse_iso(record.committed_at))
    return f"{VERSION_FILE_PREFIX}{record.version}_{record.previous_version or 'first'}_{committed}.parquet"


def _record_of_files(files: list[DataFile]) -> Commit | None:
    """The version record a date's live files name (None: no version file among them)."""
    for data_file in files:
        folder, _, name = data_file.file_path.rpartition("/")
        found = _VERSION_FILE.match(name)
        if found:
            version, previous, committed = found.groups()
            return Commit(
                version=version,
                run_id=layout.check_run_id(layout.partition_value(folder.rpartition("/")[2], "run")),
                previous_version=None if previous == "first" else previous,
                committed_at=iso_z(layout.parse_receipt_ts(committed)),
            )
    if files:
        raise RuntimeError(
            f"the table's live files {files[0].file_path} ... name no version (no {VERSION_FILE_PREFIX}* file "
            f"and no {CURRENT_PREFIX}<date> property): written by something other than tidemark.iceberg.commits"
        )
    return None


def property_commits(table: Table) -> dict[date, Commit]:
    """{event date: its current commit} an older table records in properties (`tidemark.current.D`)."""
    return {
        layout.as_event_date(key[len(CURRENT_PREFIX) :]): Commit.from_json(json.loads(value))
        for key, value in table.properties.items()
        if key.startswith(CURRENT_PREFIX)
    }


def live_files(table: Table | None, event_date: date | None = None) -> dict[int, list[DataFile]]:
    """{day: the live DataFiles of that event date} in a loaded table's current snapshot.

    Of one date, only the manifests whose partition range holds it are read (one: manifests are
    merged by half month); of every date, each manifest is read once and kept for this metadata file.
    """
    snapshot = table.current_snapshot() if table is not None else None
    if table is None or snapshot is None:
        return {}
    wanted = None if event_date is None else day_of(event_date)
    key = (table.metadata_location, snapshot.snapshot_id)
    cached = _LIVE_CACHE.get(key)
    if cached is not None:
        if wanted is None:
            return cached
        return {wanted: cached[wanted]} if wanted in cached else {}
    out: dict[int, list[DataFile]] = {}
    for manifest in snapshot.manifests(table.io):
        span = day_range(manifest)
        if wanted is not None and span is not None and not span[0] <= wanted <= span[1]:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            day = entry.data_file.partition[0]
            if wanted is None or day == wanted:
                out.setdefault(day, []).append(entry.data_file)
    if wanted is None:
        with _LIVE_LOCK:
            while len(_LIVE_CACHE) >= 4:
                _LIVE_CACHE.pop(next(iter(_LIVE_CACHE)))
            _LIVE_CACHE[key] = out
    return out


def current_commits(table: Table | None, event_date: date | None = None) -> dict[date, Commit]:
    """{event date: the commit of its current version} in a loaded table, oldest date first.

    Of one date (the manifest of its half month read) or of every date (every manifest read once).
    No marker is read: a commit says the version, its run, the previous version and when.
    """
    if table is None:
        return {}
    if event_date is not None:
        record = _commit_of(table, event_date)
        return {} if record is None else {event_date: record}
    out = property_commits(table)
    for day, files in live_files(table).items():
        if date_of(day) not in out and (record := _record_of_files(files)) is not None:
            out[date_of(day)] = record
    return dict(sorted(out.items()))


def _commit_of(table: Table, event_date: date, live: list[DataFile] | None = None) -> Commit | None:
    """The commit current for a date in a loaded table; `live`: the date's live files if read."""
    value = table.properties.get(CURRENT_PREFIX + layout.event_date_text(event_date))
    if value is not None:
        return Commit.from_json(json.loads(value))
    return _record_of_files(live_files(table, event_date).get(day_of(event_date), []) if live is None else live)


def current_version(
    lake: Lake, event_date: date, table: TableArg = LOAD, live: list[DataFile] | None = None
) -> VersionRecord | None:
    """The current version of an event date: its run's marker and its commit; None before the first.

    Args:
        lake: the lake whose table and run markers are read.
        event_date: the date.
        table: a loaded table to read it from (several questions answered on one snapshot), None
            for no table (no version), or LOAD (the default) to load the table's current metadata.
        live: the date's live files in `table`, when the caller has read them (not read again).
    """
    text = layout.event_date_text(event_date)  # text is refused before anything is read
    tbl = _table(lake, table)
    record = None if tbl is None else _commit_of(tbl, event_date, live)
    if record is None:
        return None
    marker = read_marker(lake, event_date, record.run_id, record)
    if marker is None:
        raise RuntimeError(
            f"the table names run {record.run_id} current for {text} but its marker "
            f"{lake.run_marker(event_date, record.run_id)} is missing"
        )
    return marker


def dates_with_version(lake: Lake, table: TableArg = LOAD) -> list[date]:
    """Every event date with a current version, oldest first (`table` as in current_version)."""
    return list(current_commits(_table(lake, table)))


def snapshot_versions(table: Table | None, event_date: date | None = None) -> list[tuple[Snapshot, dict[str, str]]]:
    """(snapshot, summary fields) of the tidemark commits still in the table's history, oldest first.

    Of one date, or of every date; none without a table. The summary fields are the snapshot's
    text as written (`tidemark.event-date` is YYYY-MM-DD).
    """
    if table is None:
        return []
    wanted = None if event_date is None else layout.event_date_text(event_date)
    out = []
    for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
        props = snapshot.summary.additional_properties if snapshot.summary else {}
        if wanted is None or props.get("tidemark.event-date") == wanted:
            out.append((snapshot, props))
    return out[::-1]


def list_versions(lake: Lake, event_date: date) -> list[VersionRecord]:
    """The versions of a date the table still knows, oldest first.

    The snapshots that published them (each with snapshot_id, committed_at and its run's marker),
    and the current version even when gc expired the snapshot that published it.
    """
    tbl = iceberg.load(lake)
    if tbl is None:
        return []
    out = [snapshot_record(lake, event_date, snapshot, props) for snapshot, props in snapshot_versions(tbl, event_date)]
    current = current_version(lake, event_date, tbl)
    if current is not None and all(v.run_id != current.run_id for v in out):
        out.insert(0, current)
    return out


def snapshot_record(lake: Lake, event_date: date, snapshot: Snapshot, props: dict[str, str]) -> VersionRecord:
    """The version a tidemark snapshot published (its summary `props`), with its run's marker.

    A marker gc removed leaves the record of the commit alone (every marker key absent).
    """
    commit = Commit(
        version=props["tidemark.version"],
        run_id=layout.check_run_id(props["tidemark.run-id"]),
        previous_version=props.get("tidemark.previous-version") or None,
        committed_at=iso_z(from_micros(snapshot.timestamp_ms * 1000)),  # exact: no float on the way
        snapshot_id=snapshot.snapshot_id,
    )
    marker = read_marker(lake, event_date, commit.run_id, commit)
    if marker is not None:
        return marker
    return VersionRecord(
        event_date=event_date,
        run_id=commit.run_id,
        commit=commit,
        absent=frozenset(MARKER_KEYS) - {"event_date", "run_id"},
    )
