"""Committing a dedup run's version of an event date into the Iceberg table.

`commit` is ONE Iceberg commit (pyiceberg, optimistic, compare-and-swap in the catalog) that
- replaces D's data files by the run's files, the files of earlier runs the version keeps (its
  marker's `carried`: the buckets of users a correction did not touch,
  tidemark/deduplication/buckets.py; those stay as they are in the snapshot) and its version file
  (a zero-row Parquet file in the run's folder, tidemark.iceberg.table_versions): an `overwrite`
  snapshot, other dates untouched, D's half month of manifests merged into one
  (tidemark.iceberg.compat's Overwrite);
- records in the snapshot summary the event date, the version, the run, the receipts included.

So D's live files name the run whose marker holds the receipts the dedup's planning needs, and the
version record, and they change in the same atomic commit. A run killed before the commit leaves an
unreferenced folder (gc removes it; the rerun recomputes); killed after, the rerun finds its
receipts covered.

Conflicts (another run committed first, any date) are retried on a freshly loaded table, and each
attempt checks again, on that fresh state, that it does not replace a version made under the same
rules holding receipts this run lacks: the newest complete version wins, whatever the order the runs
finish in. Complete means complete for the version's own plan under its own rules, so a version
made under rules the lake no longer has is replaced whatever it read (a migration's plan may need
fewer receipts). The version id (the highest receipt_ts included, or the current id + 1 ms when that
is not higher) is chosen in the same attempt, so two runs of one date can never publish the same id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import parquet_file_to_data_file, schema_to_pyarrow
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation
from pyiceberg.typedef import Record

from tidemark.base import layout
from tidemark.base.logs import get_logger
from tidemark.base.times import now_iso_z
from tidemark.iceberg import compat, table_versions
from tidemark.iceberg import table as iceberg
from tidemark.iceberg.partitions import day_of
from tidemark.iceberg.run_markers import run_files
from tidemark.session import rules_record
from tidemark.store.lake import RUN_MARKER, Lake, run_folder
from tidemark.store.version_record import Commit, VersionRecord

log = get_logger("commits")

# The metadata log (earlier metadata files, listed in every metadata file) is capped at 100 entries
# by default: ~18 KB of every metadata file once the table has 100 commits, which a young table does
# not have. gc removes the earlier metadata files after its retention anyway, so the log's entries
# beyond a few name files already gone: keep 10 (one table property, set by the first commit).
METADATA_LOG_KEY = "write.metadata.previous-versions-max"
METADATA_LOG_MAX = "10"


class Superseded(RuntimeError):
    """The current version holds receipts this run lacks: its plan is stale, it must replan."""


@dataclass(frozen=True)
class Outcome:
    """What a commit did.

    Attributes:
        committed: this run's version became current.
        current: the date's current version after the attempt (see table_versions.current_version).
        attempts: commit attempts (more than one: conflicts retried on a fresh snapshot).
    """

    committed: bool
    current: VersionRecord
    attempts: int = 1


def commit(lake: Lake, marker: VersionRecord, replace: bool = False) -> Outcome:
    """Make the run's version (its marker written, its files complete) the date's current one.

    Unless the current version already includes all its receipts (Outcome.committed False).
    Retries conflicting commits on a fresh snapshot; safe to call from many processes at once.

    Args:
        lake: the lake of the table.
        marker: the run's marker, as written (tidemark.iceberg.run_markers.write_marker).
        replace: also when the current version read exactly the run's receipts (a full
            recomputation that found another result, `tidemark dedup --full`).

    Raises:
        Superseded: the current version, made under the same rules, includes receipts the run
            lacks (replan and rerun); one made under other rules is replaced (see the comment inside).
    """
    event_date = marker.event_date
    run_id = layout.check_run_id(marker.run_id)
    paths = run_files(lake, marker)
    tbl = iceberg.load(lake, create=True)
    # The run's own files (footers read); the files it keeps are taken from the live ones at commit.
    carried = paths[len(marker.files) :]
    data_files = _data_files(tbl, paths[: len(marker.files)], event_date)
    attempts = 0

    def attempt() -> Outcome:
        nonlocal attempts
        attempts += 1
        # The first attempt works on the table just loaded (a stale one fails the catalog's
        # compare-and-swap like any other conflict); every retry loads it afresh.
        fresh = tbl if attempts == 1 else iceberg.load(lake)
        if fresh is None:
            raise RuntimeError(f"the table of {lake} is gone while committing run {run_id} of {event_date}")
        live = table_versions.live_files(fresh, event_date).get(day_of(event_date), [])  # D's files: read once
        current = table_versions.current_version(lake, event_date, fresh, live)
        if current is not None and current.run_id == run_id:
            return Outcome(True, current)  # an earlier attempt of ours landed (reported lost)
        changed = rules_record.outdated(lake, marker)
        if changed:
            raise Superseded(f"{event_date}: {changed}")  # the replan takes the lake's new rules
        # "Complete" is relative to a plan, and a plan to its rules: the receipts a version needs
        # are those its own plan under its own rules holds (lo = D0 - gap, hi from its reach). So
        # the receipt sets are compared only between versions made under the same rules, where
        # they are comparable: same lo, and a replan from the current version reaches at least its
        # hi, so every receipt it read is one our replan reads (Superseded always converges). A
        # current version made under other rules is stale (ours are the lake's, checked just
        # above; on a lake without a record, the rules the run was given) and its receipts answer
        # another plan's needs: a smaller gap's plan never reads the previous day's partitions a
        # larger gap's lo took in. It is replaced whatever it read; refusing would refuse every
        # run under the lake's rules, for good.
        ours, theirs = set(marker.receipts), set(current.receipts) if current else set()
        if current is not None and rules_record.same_rules(marker, current):
            if ours <= theirs and not (replace and ours == theirs):
                return Outcome(False, current)
            if not theirs <= ours:
                raise Superseded(
                    f"{event_date}: the current version {current.version} includes "
                    f"{len(theirs - ours)} receipt partition(s) run {run_id} did not read"
                )
        if marker.changes is not None and marker.planned_on != (current.version if current else None):
            # Its changeset (tidemark/iceberg/changes.py) is relative to the version it was planned on
            raise Superseded(f"{event_date}: run {run_id} was planned on {marker.planned_on}, not the current version")
        version = marker.max_receipt_ts
        if version is None:
            raise ValueError(f"run {run_id} of {event_date} read no receipt: nothing to commit")
        if current is not None and current.version is not None and current.version >= version:
            # Same highest receipt but more receipts (an older batch's partition completed late):
            # a later id, so that version ids keep growing with completeness.
            version = _next_ms(current.version)
        record = Commit(
            version=version,
            run_id=run_id,
            previous_version=current.version if current else None,
            committed_at=now_iso_z(),
        )
        _commit_once(lake, fresh, event_date, marker, record, data_files, live, carried)
        return Outcome(True, marker.committed(record))

    found = iceberg.retrying_conflicts(attempt)()
    outcome = Outcome(found.committed, found.current, attempts)
    if outcome.committed:
        log.info(
            "version committed",
            event_date=event_date,
            version=outcome.current.version,
            run_id=run_id,
            previous=outcome.current.previous_version,
            files=len(data_files),
            sessions=marker.sessions,
            attempts=attempts,
        )
    else:
        log.info(
            "version not committed: the current one covers it",
            event_date=event_date,
            current=outcome.current.version,
            run_id=run_id,
            attempts=attempts,
        )
    return outcome


def _next_ms(receipt_ts: str) -> str:
    return layout.format_receipt_ts(layout.parse_receipt_ts(receipt_ts) + timedelta(milliseconds=1))


def _data_files(tbl: Table, paths: list[str], event_date: date) -> list[DataFile]:
    """Iceberg DataFiles of the run's Parquet files (footers read: statistics, partition value)."""
    day = day_of(event_date)
    out = []
    for path in paths:
        data_file = parquet_file_to_data_file(tbl.io, tbl.metadata, path)
        if data_file.partition[0] != day:
            raise ValueError(f"{path} holds sessions of another event date than {event_date}")
        out.append(data_file)
    return out


def snapshot_summary(event_date: date, marker: VersionRecord, record: Commit) -> dict[str, str]:
    """The fields a commit records in its snapshot's summary (read by table_versions.snapshot_versions).

    Summary properties are text: the event date is written as YYYY-MM-DD.
    """
    return {
        "tidemark.event-date": layout.event_date_text(event_date),
        "tidemark.version": record.version,
        "tidemark.run-id": record.run_id,
        "tidemark.previous-version": record.previous_version or "",
        "tidemark.receipts": str(len(marker.receipts)),
        "tidemark.max-receipt-ts": marker.max_receipt_ts or "",
        "tidemark.sessions": str(marker.sessions),
        "tidemark.affected-dates": ",".join(marker.affected_dates),
        "tidemark.gap": marker.gap or "",
        "tidemark.marker": f"{run_folder(event_date, record.run_id)}/{RUN_MARKER}",
    }


def _commit_once(
    lake: Lake,
    tbl: Table,
    event_date: date,
    marker: VersionRecord,
    record: Commit,
    data_files: list[DataFile],
    live: list[DataFile],
    carried: Sequence[str] = (),
) -> None:
    """One catalog commit: D's live files replaced by the run's, the ones it keeps and its version file.

    An older table's property of D is removed, and the manifests of D's half month merged into one.
    A kept file (`carried`, URIs) that is live stays as it is (neither deleted nor added: the
    snapshot lists only what changed); one that is not (a concurrent version replaced it) is added
    again.
    """
    version_file = write_version_file(lake, tbl, event_date, record)  # before the commit: never named unwritten
    keep = set(carried)
    live_paths = {data_file.file_path for data_file in live}
    again = _data_files(tbl, [uri for uri in carried if uri not in live_paths], event_date)
    tx = compat.CachedTransaction(tbl)
    operation = Operation.OVERWRITE if tbl.current_snapshot() is not None else Operation.APPEND
    summary = snapshot_summary(event_date, marker, record)
    with compat.Overwrite(operation=operation, transaction=tx, io=tbl.io, snapshot_properties=summary) as overwrite:
        for data_file in live:
            if data_file.file_path not in keep:
                overwrite.delete_data_file(data_file)
        for data_file in (*data_files, *again, version_file):
            overwrite.append_data_file(data_file)
    legacy_property = table_versions.CURRENT_PREFIX + layout.event_date_text(event_date)
    if legacy_property in tbl.properties:
        tx.remove_properties(legacy_property)  # an older table's record of D
    if tbl.properties.get(METADATA_LOG_KEY) != METADATA_LOG_MAX:
        tx.set_properties({METADATA_LOG_KEY: METADATA_LOG_MAX})  # once per table
    tx.commit_transaction()


def write_version_file(lake: Lake, tbl: Table, event_date: date, record: Commit) -> DataFile:
    """Write a version's zero-row data file into its run's folder; return its Iceberg DataFile."""
    uri = lake.run_dir(event_date, record.run_id).file(table_versions.version_file_name(record))
    sink = pa.BufferOutputStream()
    pq.write_table(schema_to_pyarrow(tbl.schema()).empty_table(), sink)
    body = sink.getvalue()
    fs, path = uri.at()
    with fs.open_output_stream(path) as out:
        out.write(body)
    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=iceberg.file_uri(uri),
        file_format=FileFormat.PARQUET,
        partition=Record(day_of(event_date)),
        file_size_in_bytes=len(body),
        record_count=0,
        column_sizes={},
        value_counts={},
        null_value_counts={},
        nan_value_counts={},
        lower_bounds={},
        upper_bounds={},
        split_offsets=None,
        sort_order_id=None,
        spec_id=tbl.metadata.default_spec_id,
        equality_ids=None,
        key_metadata=None,
    )
