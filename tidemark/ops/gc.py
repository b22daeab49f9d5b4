"""Garbage collection of the deduplicated table and the lake's caches.

The table's upkeep (maintenance.maintain: manifests merged by month of event date, an older table's
per-date properties migrated), expire old snapshots, then remove the files that no remaining
snapshot references (superseded versions, runs killed before their commit, runs whose commit was
refused, old Iceberg metadata; in a run folder later versions still take files from
(tidemark/deduplication/buckets.py), the bucket files they replaced and the superseded run's
context), prune the receipt index's arrival entries that reconciliation will not read again, and
remove the packs no reader will use (tidemark/panes/pack_cache.py). Scheduled daily by
dags/tidemark_maintenance.py.

Safety floors:
- a retention below MIN_RETENTION is refused: a reader that loaded the table just before a commit,
  or a dedup run between writing its files and committing them, must have time to finish;
- a snapshot is judged by when it STOPPED being current (the commit of the next one), not by when
  it was made: a version that was current until a minute ago is a minute old, however old its data;
- the current snapshot is never expired, so every date's current version is never removed, and
  the run folder the table names current for a date is kept whatever any listing says;
- an unreferenced file is removed only once its folder's newest write is older than the retention
  (a run still writing, or about to commit, is young).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import date, datetime, time, timedelta, timezone
from typing import Any

import pyarrow.fs as pafs
from pyiceberg.table import Table

from tidemark.base import layout
from tidemark.base.durations import format_duration
from tidemark.base.logs import get_logger
from tidemark.base.progress import Display, tracked
from tidemark.iceberg import changes, maintenance, table_versions
from tidemark.iceberg import table as iceberg
from tidemark.orchestration import reconcile
from tidemark.panes import pack_cache, receipt_index
from tidemark.store.lake import RUN_CONTEXT, RUN_MARKER, Lake, run_folder
from tidemark.store.locations import File, Folder

log = get_logger("gc")

MIN_RETENTION = timedelta(hours=1)


class RetentionTooShort(ValueError):
    """A retention below the safe floor: refused before anything is looked at."""


@dataclass(frozen=True)
class Removal:
    """One thing gc removed (or, in a dry run, would remove)."""

    what: str  # "snapshot", "run" (an unreferenced run folder), "bucket file", "context", "metadata", "arrivals", "pack (...)"
    path: str  # the snapshot id, or the path relative to the table's location
    event_date: date | None
    version: str | None  # the version a snapshot published / a run folder held, when known
    age_s: float  # how long it has been unneeded (snapshot: since it stopped being current)

    def to_json(self) -> dict[str, Any]:
        """The removal as a JSON object (`tidemark gc`'s lines; the date as YYYY-MM-DD)."""
        return {**asdict(self), "event_date": _optional_date_text(self.event_date)}


def check_retention(retention: timedelta) -> timedelta:
    """Return `retention`, refusing one below MIN_RETENTION (RetentionTooShort)."""
    if retention < MIN_RETENTION:
        raise RetentionTooShort(
            f"refusing a retention of {format_duration(retention)}: below the safe floor of "
            f"{format_duration(MIN_RETENTION)} (a reader or a running dedup may still use what it would remove)"
        )
    return retention


def gc(
    lake: Lake, retention: timedelta, now: datetime | None = None, dry_run: bool = False, display: Display | None = None
) -> list[Removal]:
    """Expire snapshots that stopped being current `retention` ago, then remove unreferenced files.

    Files go once their newest write is that old. Returns what was (dry_run: would be) removed. The
    pass over the dates' run folders reports its progress (logs, and `display`: the CLI's terminal
    bar).
    """
    check_retention(retention)
    now = now or datetime.now(timezone.utc)
    removed: list[Removal] = []
    if iceberg.load(lake) is not None:
        # Upkeep first (manifests merged by month; an older table's per-date properties moved to
        # version files: maintenance.maintain), so that what is expired next includes what it replaced.
        maintenance.maintain(lake, dry_run=dry_run)
        removed, tbl, versions = _expire(lake, retention, now, dry_run)
        removed += _remove_files(lake, tbl, removed, versions, retention, now, dry_run, display)
        removed += _expire_changes(lake, tbl, removed, retention, now, dry_run)
    removed += _prune_arrivals(lake, retention, now, dry_run)
    removed += _prune_packs(lake, retention, now, dry_run)
    for item in removed:
        log.info(
            "gc removed" if not dry_run else "gc would remove",
            what=item.what,
            path=item.path,
            event_date=item.event_date,
            version=item.version,
            age_s=round(item.age_s, 1),
        )
    return removed


def _prune_arrivals(lake: Lake, retention: timedelta, now: datetime, dry_run: bool) -> list[Removal]:
    """The receipt index's arrival entries of days older than the retention and the last reconcile pass.

    Reconciliation reads only the entries after its last pass (tidemark/orchestration/reconcile.py).
    One folder per day.
    """
    keep_from = (now - retention).date()
    head = reconcile.last_pass_head(lake)
    if head:
        keep_from = min(keep_from, layout.parse_receipt_ts(head).date())
    days = receipt_index.prune_arrivals(lake, keep_from, dry_run)
    return [
        Removal(
            "arrivals",
            _relative(lake.arrivals_dir(day), lake.uri + "/"),
            None,
            None,
            (now - datetime.combine(day, time.min, tzinfo=timezone.utc)).total_seconds(),
        )
        for day in days
    ]


def _prune_packs(lake: Lake, retention: timedelta, now: datetime, dry_run: bool) -> list[Removal]:
    """Packs no reader will use (tidemark/panes/pack_cache.py).

    Those killed mid-write, or superseded by a bigger one for the retention. A pack is only a cache
    of receipt partitions' panes: removing it changes no result, and the receipt partitions
    themselves are never touched here.
    """
    found = pack_cache.leftovers(
        lake, retention.total_seconds(), lambda folder: _age_s(folder, now, recursive=True), now
    )
    if not dry_run:
        for leftover in found:
            pack_cache.remove(lake, leftover)
    return [
        Removal(
            f"pack ({leftover.why})",
            _relative(lake.pack_dir(leftover.event_date, leftover.pack_id), lake.uri + "/"),
            leftover.event_date,
            None,
            leftover.age_s,
        )
        for leftover in found
    ]


# A concurrent commit to the table (the catalog refused ours, or its database was busy): try again.
@iceberg.retrying_conflicts
def _expire(
    lake: Lake, retention: timedelta, now: datetime, dry_run: bool
) -> tuple[list[Removal], Table, dict[str, tuple[str, str]]]:
    """(removals, the table as left, {run_id: (event_date, version)} of every tidemark snapshot seen)."""
    tbl = iceberg.load_existing(lake)
    lineage = [snapshot for snapshot, _ in table_versions.snapshot_versions(tbl)]
    versions = {
        props["tidemark.run-id"]: (props["tidemark.event-date"], props["tidemark.version"])
        for _, props in table_versions.snapshot_versions(tbl)
        if "tidemark.run-id" in props
    }
    now_ms = now.timestamp() * 1000
    removals: list[Removal] = []
    # The last one is current: never expired. Each other one stopped being current when the next
    # one was committed.
    for older, newer in zip(lineage, lineage[1:], strict=False):
        age_s = (now_ms - newer.timestamp_ms) / 1000
        if age_s >= retention.total_seconds():
            props = older.summary.additional_properties if older.summary else {}
            removals.append(
                Removal(
                    "snapshot",
                    str(older.snapshot_id),
                    _date_or_none(props.get("tidemark.event-date")),
                    props.get("tidemark.version"),
                    age_s,
                )
            )
    if removals and not dry_run:
        tbl.maintenance.expire_snapshots().by_ids([int(r.path) for r in removals]).commit()
        tbl = iceberg.load_existing(lake)
    return removals, tbl, versions


def _remove_files(
    lake: Lake,
    tbl: Table,
    expired: list[Removal],
    versions: dict[str, tuple[str, str]],
    retention: timedelta,
    now: datetime,
    dry_run: bool,
    display: Display | None = None,
) -> list[Removal]:
    gone = {int(r.path) for r in expired}
    kept = [s for s in tbl.snapshots() if s.snapshot_id not in gone]
    location = tbl.location().rstrip("/") + "/"
    files: set[str] = set()
    metadata = {_relative(tbl.metadata_location, location)}
    for snapshot in kept:
        metadata.add(_relative(snapshot.manifest_list, location))
        for manifest in snapshot.manifests(tbl.io):
            path = _relative(manifest.manifest_path, location)
            if path in metadata:
                # Manifests are immutable and the kept snapshots share most of them (one per
                # event date): read each once, not once per snapshot (21 x 190 reads at 189 dates).
                continue
            metadata.add(path)
            for entry in manifest.fetch_manifest_entry(tbl.io, discard_deleted=True):
                files.add(_relative(entry.data_file.file_path, location))
    # A run folder is referenced when a kept snapshot lists one of its files: its own folder's, or
    # one of its bucket folders' (tidemark/deduplication/buckets.py: later versions keep them).
    data = {_run_folder_of(path) for path in files}
    current_runs = {
        run_folder(layout.as_event_date(event_date), record.run_id)
        for event_date, record in table_versions.current_commits(tbl).items()
    }
    publishing: set[str] = set()
    for snapshot in kept:
        props = snapshot.summary.additional_properties if snapshot.summary else {}
        if "tidemark.run-id" in props and "tidemark.event-date" in props:
            publishing.add(run_folder(layout.as_event_date(props["tidemark.event-date"]), props["tidemark.run-id"]))
    root = lake.dedup_root()
    removed: list[Removal] = []
    data_dir = lake.dedup_data_dir()
    date_dirs = data_dir.subfolder_names()
    for date_dir in tracked(
        date_dirs,
        "examining run folders by date",
        log=log,
        display=display,
        name=lambda d: layout.partition_value(d, "event_date") or d,
        lake=lake,
    ):
        event_date = _folder_date(date_dir)
        for run_dir in data_dir.folder(date_dir).subfolder_names():
            folder = _relative(data_dir.folder(date_dir, run_dir), root + "/")
            if folder in current_runs:
                continue
            if folder in data:
                # Kept for files later versions still list: what none needs any more goes.
                removed += _remove_within(
                    lake, folder, event_date, files, folder not in publishing, retention, now, dry_run
                )
                continue
            age_s = _age_s(root.folder(folder), now, recursive=True)
            if age_s is None or age_s < retention.total_seconds():
                continue
            run_id = layout.partition_value(run_dir, "run")
            published = versions.get(run_id) if run_id is not None else None
            removed.append(Removal("run", folder, event_date, published[1] if published else None, age_s))
            if not dry_run:
                # The marker first: a half-removed folder is then plainly a leftover.
                root.file(folder, RUN_MARKER).delete()
                root.folder(folder).delete()
    for name in lake.dedup_metadata_dir().names():
        path = _relative(lake.dedup_metadata_dir().file(name), root + "/")
        if path in metadata:
            continue
        age_s = _age_s(root.file(path), now)
        if age_s is None or age_s < retention.total_seconds():
            continue  # young: perhaps a commit in flight
        removed.append(Removal("metadata", path, None, None, age_s))
        if not dry_run:
            root.file(path).delete()
    return removed


def _run_folder_of(path: str) -> str:
    """The run folder ('data/event_date=D/run=<id>') of a data file's path relative to the table."""
    return "/".join(path.split("/")[:3])


def _remove_within(
    lake: Lake,
    folder: str,
    event_date: date | None,
    files: set[str],
    superseded: bool,
    retention: timedelta,
    now: datetime,
    dry_run: bool,
) -> list[Removal]:
    """What goes from a run folder that kept snapshots still reference.

    Later versions keep some of its bucket files: the bucket files none of them lists go, and its
    context when no kept snapshot was published by the run (`superseded`: only the current run's
    context is read, by the next incremental run of the date), each once its newest write is older
    than the retention.
    """
    root = lake.dedup_root()
    base = root.folder(folder)
    prefix = base.at()[1].rstrip("/") + "/"
    removed: list[Removal] = []
    for info in base.walk_files():
        relative = info.path[len(prefix) :] if info.path.startswith(prefix) else info.path
        path = f"{folder}/{relative}"
        if relative.startswith("bucket=") and relative.endswith(".parquet") and path not in files:
            what = "bucket file"
        elif superseded and relative.startswith(RUN_CONTEXT + "/"):
            what = "context"
        else:
            continue
        age_s = _age_s(root.file(path), now)
        if age_s is None or age_s < retention.total_seconds():
            continue
        removed.append(Removal(what, path, event_date, None, age_s))
        if not dry_run:
            root.file(path).delete()
    return removed


def _expire_changes(
    lake: Lake, tbl: Table, removed: list[Removal], retention: timedelta, now: datetime, dry_run: bool
) -> list[Removal]:
    """The changes table follows the sessions table's history (tidemark/iceberg/changes.py: gc)."""
    gone = {(r.event_date, r.version) for r in removed if r.what == "snapshot"}
    recorded = {
        (layout.as_event_date(day), version)  # the snapshots' properties spell the date as YYYY-MM-DD
        for _, props in table_versions.snapshot_versions(tbl)
        if (day := props.get("tidemark.event-date")) is not None
        and (version := props.get("tidemark.version")) is not None
    }
    kept = {pair for pair in recorded if pair not in gone}
    kept |= {(event_date, record.version) for event_date, record in table_versions.current_commits(tbl).items()}
    return [
        Removal(e.what, e.path, e.event_date, e.version, e.age_s)
        for e in changes.gc(lake, kept, retention.total_seconds(), now.timestamp(), dry_run)
    ]


def _relative(uri: str, location: str) -> str:
    if not uri.startswith(location):
        raise RuntimeError(f"{uri} is outside the table's location {location}: gc will not judge it")
    return uri[len(location) :]


def _date_or_none(text: object) -> date | None:
    """The event date a snapshot's or an expiry's property names (parsed here), or None."""
    return None if text is None else layout.as_event_date(text)


def _optional_date_text(day: date | None) -> str | None:
    """An event date as the snapshots' properties spell it, or None."""
    return None if day is None else layout.event_date_text(day)


def _folder_date(name: str) -> date | None:
    """The event date an `event_date=` folder of the table's data names; None for any other folder."""
    value = layout.partition_value(name, "event_date")
    try:
        return None if value is None else layout.as_event_date(value)
    except layout.InvalidPartitionValue:
        return None


def _age_s(where: File | Folder, now: datetime, recursive: bool = False) -> float | None:
    """Seconds since the newest write of a file, or of anything below a folder.

    Object stores have no folder times. None when nothing is there.
    """
    fs, path = where.at()
    infos = [fs.get_file_info(path)]
    if recursive:
        infos += fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    newest: datetime | None = None
    for info in infos:
        if info.type != pafs.FileType.NotFound and info.mtime is not None:
            moment = info.mtime if info.mtime.tzinfo else info.mtime.replace(tzinfo=timezone.utc)
            newest = moment if newest is None or moment > newest else newest
    return None if newest is None else (now - newest).total_seconds()
