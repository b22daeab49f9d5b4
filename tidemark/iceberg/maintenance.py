"""Table upkeep: manifests merged by half month of event dates, older tables' records migrated.

The commits keep one manifest per half month (tidemark.iceberg.compat's Overwrite); a table written
by an older tidemark has one per date, and its current versions in table properties
(`tidemark.current.D`, see tidemark.iceberg.table_versions). `maintain`, run by `tidemark gc`, fixes both
in one commit, only when needed.
"""

from __future__ import annotations

from typing import TypedDict

from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation

from tidemark.base import layout
from tidemark.base.logs import get_logger
from tidemark.iceberg import compat, table_versions
from tidemark.iceberg import table as iceberg
from tidemark.iceberg.commits import write_version_file
from tidemark.iceberg.partitions import buckets_spanned, day_of, day_range, manifest_bucket
from tidemark.iceberg.table import retrying_conflicts
from tidemark.store.lake import Lake

log = get_logger("maintenance")


class Maintained(TypedDict):
    """What `maintain` did (or, dry, would do)."""

    buckets: int  # half months whose manifests were merged
    migrated: int  # dates moved off an older table's properties to version files


def buckets_to_merge(table: Table | None) -> set[int]:
    """Half months whose files the current manifest list does not hold in one manifest of their own.

    That is: several manifests, one spanning half months, or one with no live file. Reads the
    manifest list only.
    """
    snapshot = table.current_snapshot() if table is not None else None
    if table is None or snapshot is None:
        return set()
    seen: dict[int, int] = {}
    out: set[int] = set()
    for manifest in snapshot.manifests(table.io):
        span = day_range(manifest)
        if span is None:
            continue
        buckets = buckets_spanned(span)
        if len(buckets) > 1 or (manifest.added_files_count or 0) + (manifest.existing_files_count or 0) == 0:
            out |= buckets
        for bucket in buckets:
            seen[bucket] = seen.get(bucket, 0) + 1
    return out | {bucket for bucket, n in seen.items() if n > 1}


def maintain(lake: Lake, dry_run: bool = False) -> Maintained:
    """Table upkeep in one commit, only when needed.

    Merges the manifests by half month of event date, and moves an older table's
    `tidemark.current.D` properties to version files. Safe beside running commits (a conflict
    retries on the fresh table).

    Args:
        lake: the lake of the table.
        dry_run: only count what would be done.

    Returns:
        The half months merged and the dates migrated (or that would be, dry).
    """

    def attempt() -> Maintained:
        tbl = iceberg.load(lake)
        if tbl is None or tbl.current_snapshot() is None:
            return Maintained(buckets=0, migrated=0)
        legacy = table_versions.property_commits(tbl)
        buckets = buckets_to_merge(tbl) | {manifest_bucket(day_of(d)) for d in legacy}
        done = Maintained(buckets=len(buckets), migrated=len(legacy))
        if dry_run or not buckets:
            return done
        live = table_versions.live_files(tbl) if legacy else {}
        added: list[DataFile] = []
        for event_date, record in sorted(legacy.items()):
            name = table_versions.version_file_name(record)
            if not any(f.file_path.endswith("/" + name) for f in live.get(day_of(event_date), [])):
                added.append(write_version_file(lake, tbl, event_date, record))
        tx = compat.CachedTransaction(tbl)
        operation = Operation.APPEND if added else Operation.REPLACE
        summary = {
            "tidemark.maintenance": "manifests merged by half month"
            + (", current moved to version files" if legacy else "")
        }
        with compat.Overwrite(
            operation=operation, transaction=tx, io=tbl.io, snapshot_properties=summary, buckets=buckets
        ) as producer:
            for data_file in added:
                producer.append_data_file(data_file)
        if legacy:
            tx.remove_properties(*(table_versions.CURRENT_PREFIX + layout.event_date_text(d) for d in legacy))
        tx.commit_transaction()
        return done

    done = retrying_conflicts(attempt)()
    if done["buckets"] and not dry_run:
        log.info("table maintained", merged_buckets=done["buckets"], migrated_dates=done["migrated"])
    return done
