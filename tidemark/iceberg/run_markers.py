"""A dedup run's folder in the table's data: its id, its marker, and the files its version holds.

A dedup run writes its Parquet files (Spark) into a folder of its own, then a marker:

    sessions_dedup/data/event_date=D/run=<run_id>/bucket=<k>/part-*.parquet  the run's sessions of D
                                                                      (a file per bucket of users it wrote)
    sessions_dedup/data/event_date=D/run=<run_id>/_tidemark_run.json what the run included (receipts,
                                                                      sessions, hi, gap, affected dates)

A run's marker is immutable once written; the commit (tidemark.iceberg.commits) makes its version
current. A run killed before the commit leaves an unreferenced folder (gc removes it).
"""

from __future__ import annotations

import re
import uuid
from datetime import date

from tidemark.iceberg import table as iceberg
from tidemark.store.lake import Lake
from tidemark.store.version_record import Commit, VersionRecord

# A run's own file: a Parquet name in its folder, or in its folder's bucket=<k>/ (buckets.py's
# layout); a file it keeps from an earlier run of the date: that run's folder, then the same.
_OWN_FILE = re.compile(r"^(?:bucket=\d+/)?[^/._][^/]*\.parquet$")
_CARRIED_FILE = re.compile(r"^run=([0-9a-f]{32})/bucket=\d+/[^/._][^/]*\.parquet$")


def new_run_id() -> str:
    """A new run's id: 32 hex digits, the name of its folder."""
    return uuid.uuid4().hex


def write_marker(lake: Lake, marker: VersionRecord) -> None:
    """Write a run's marker (atomically: a reader sees none or all of it)."""
    lake.run_marker(marker.event_date, marker.run_id).write_json_atomic(marker.to_marker())


def read_marker(lake: Lake, event_date: date, run_id: str, commit: Commit | None = None) -> VersionRecord | None:
    """A run's marker (None: not written), with `commit`, the table's record of it, when known."""
    payload = lake.run_marker(event_date, run_id).read_json()
    return None if payload is None else VersionRecord.from_marker(payload, commit)


def run_files(lake: Lake, marker: VersionRecord) -> list[str]:
    """The version's data files as URIs: the run's own, then those it keeps from earlier runs.

    Paths are checked: never outside the date's run folders.
    """
    base = lake.run_dir(marker.event_date, marker.run_id)
    out = []
    for name in marker.files:
        if not _OWN_FILE.match(name):
            raise ValueError(f"run marker of {marker.event_date} names a file outside its folder: {name!r}")
        out.append(iceberg.file_uri(base.file(name)))
    for path in marker.carried:
        found = _CARRIED_FILE.match(path)
        if not found:
            raise ValueError(f"run marker of {marker.event_date} keeps a file outside the date's runs: {path!r}")
        run_dir = lake.run_dir(marker.event_date, found.group(1))
        out.append(iceberg.file_uri(run_dir.file(path.split("/", 1)[1])))
    return out


def carried_path(lake: Lake, marker: VersionRecord, uri: str) -> str:
    """A file of `marker`'s version as a later version of the date keeps it (run_files' inverse).

    Returns 'run=<run_id>/bucket=<k>/<name>', relative to the date's folder.
    """
    date_dir = iceberg.file_uri(lake.run_dir(marker.event_date, marker.run_id)).rpartition("/")[0] + "/"
    if not uri.startswith(date_dir) or not _CARRIED_FILE.match(uri[len(date_dir) :]):
        raise ValueError(f"{uri} is not a bucketed file of {marker.event_date_text}'s runs")
    return uri[len(date_dir) :]
