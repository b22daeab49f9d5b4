"""Versions of a deduplicated event date, the `_CURRENT.json` pointer, and their garbage collection.

    sessions_dedup/event_date=D/version=V/data-<run_id>/part-*.parquet   one run's output
    sessions_dedup/event_date=D/version=V/_tidemark_version.json         marker, written last
    sessions_dedup/event_date=D/_CURRENT.json                            copy of the current marker

A version is complete once its marker exists; the marker lists the data files, so readers read
exactly those and never a half-written or a concurrent run's folder. Each run writes its data into
its own `data-<run_id>` folder: two runs of the same version at once never touch each other's files.

The pointer is switched without locks, in a way that works on object stores: every writer writes
the newest complete version it can list, then lists again and repeats while a newer one appeared.
The last write is made by a writer that saw no newer complete version after it, and any version
completed later is written by its own writer afterwards, so the pointer converges to the newest.
Only this module and pure-pyarrow readers import this: no Spark here.
"""
from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import pyarrow.fs as pafs

from tidemark import layout, storage
from tidemark.logs import get_logger

log = get_logger("publish")

_DATA_DIR = re.compile(r"^data-[0-9a-f]{32}$")
_MAX_POINTER_ROUNDS = 20


def new_run_id() -> str:
    return uuid.uuid4().hex


def data_dir_name(run_id: str) -> str:
    name = f"data-{run_id}"
    if not _DATA_DIR.match(name):
        raise ValueError(f"invalid run id {run_id!r}")
    return name


def data_dir(lake: str, event_date: str, version: str, run_id: str) -> str:
    return layout.join(layout.dedup_version_dir(lake, event_date, version), data_dir_name(run_id))


def version_marker_path(lake: str, event_date: str, version: str) -> str:
    return layout.join(layout.dedup_version_dir(lake, event_date, version), layout.VERSION_MARKER)


def list_version_dirs(lake: str, event_date: str) -> list[str]:
    """Every version id with a folder (complete or not), oldest first."""
    out = []
    for name in storage.list_subdirs(layout.dedup_date_dir(lake, event_date)):
        value = layout.partition_value(name, "version")
        if value is None:
            continue
        try:
            out.append(layout.check_receipt_ts(value))
        except layout.InvalidPartitionValue:
            continue
    return sorted(out)


def read_version(lake: str, event_date: str, version: str) -> dict | None:
    """The marker of a complete version, or None when the version is missing or incomplete."""
    return storage.read_json(version_marker_path(lake, event_date, version))


def list_versions(lake: str, event_date: str) -> list[dict]:
    """Markers of the complete versions of one date, oldest first."""
    markers = []
    for version in list_version_dirs(lake, event_date):
        marker = read_version(lake, event_date, version)
        if marker is not None:
            markers.append(marker)
    return markers


def newest_version(lake: str, event_date: str) -> dict | None:
    for version in reversed(list_version_dirs(lake, event_date)):
        marker = read_version(lake, event_date, version)
        if marker is not None:
            return marker
    return None


def list_dedup_dates(lake: str) -> list[str]:
    return storage.list_event_dates(layout.dedup_root(lake))


def complete_version(lake: str, marker: dict) -> None:
    """Write the version's marker: from now on the version is complete and may be pointed to."""
    storage.write_json_atomic(version_marker_path(lake, marker["event_date"], marker["version"]), marker)
    log.info("version complete", event_date=marker["event_date"], version=marker["version"],
             sessions=marker.get("sessions"), data=marker.get("data"))


def read_pointer(lake: str, event_date: str) -> dict | None:
    """The current version's marker (a copy kept in _CURRENT.json), or None before the first run."""
    return storage.read_json(layout.current_pointer(lake, event_date))


def switch_pointer(lake: str, event_date: str) -> tuple[dict | None, bool]:
    """Point _CURRENT.json at the newest complete version; returns (pointer, whether we wrote it).

    Safe to call from any number of concurrent writers (see the module docstring).
    """
    event_date = layout.check_event_date(event_date)
    path = layout.current_pointer(lake, event_date)
    wrote = False
    for _ in range(_MAX_POINTER_ROUNDS):
        newest = newest_version(lake, event_date)
        if newest is None:
            return read_pointer(lake, event_date), wrote
        current = read_pointer(lake, event_date)
        if current is not None and current.get("version") == newest["version"] \
                and current.get("data") == newest.get("data"):
            return current, wrote
        storage.write_json_atomic(path, newest)
        wrote = True
        log.info("pointer switched", event_date=event_date, version=newest["version"],
                 previous=None if current is None else current.get("version"))
    raise RuntimeError(f"pointer of {event_date} did not settle after {_MAX_POINTER_ROUNDS} rounds")


# --- garbage collection --------------------------------------------------------------------------

@dataclass(frozen=True)
class Removal:
    event_date: str
    version: str
    what: str        # "version" (superseded), "incomplete" (no marker), "orphan-data" (unreferenced run)
    path: str
    age_s: float


def _parse_iso(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _newest_mtime(uri: str) -> datetime | None:
    """Newest modification time of anything below a folder (object stores have no folder mtimes)."""
    fs, path = storage.resolve(uri)
    newest = None
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    infos.append(fs.get_file_info(path))
    for info in infos:
        if info.mtime is not None:
            moment = info.mtime if info.mtime.tzinfo else info.mtime.replace(tzinfo=timezone.utc)
            newest = moment if newest is None or moment > newest else newest
    return newest


def gc(lake: str, retention: timedelta, now: datetime | None = None, event_dates: list[str] | None = None,
       dry_run: bool = False) -> list[Removal]:
    """Remove what readers can no longer need, once it has been unneeded for `retention`.

    - a complete version that is neither current nor the newest, once the version that superseded
      it (the next newer one) has existed for `retention` (a reader that followed the pointer just
      before the switch still has that long to finish);
    - a version folder without marker (a run killed mid-write) whose newest file is that old;
    - a `data-*` folder its version's marker does not name (the loser of two concurrent runs).
    The current version and the newest complete version are never removed.
    """
    now = now or datetime.now(timezone.utc)
    removed: list[Removal] = []
    dates = [layout.check_event_date(d) for d in event_dates] if event_dates else list_dedup_dates(lake)
    for event_date in dates:
        pointer = read_pointer(lake, event_date)
        complete = list_versions(lake, event_date)
        complete_ids = [m["version"] for m in complete]
        keep = set(complete_ids[-1:])
        if pointer is not None:
            keep.add(pointer["version"])
        for i, marker in enumerate(complete):
            version = marker["version"]
            folder = layout.dedup_version_dir(lake, event_date, version)
            if version not in keep and i + 1 < len(complete):
                age = (now - _parse_iso(complete[i + 1]["created_at"])).total_seconds()
                if age >= retention.total_seconds():
                    removed.append(Removal(event_date, version, "version", folder, age))
                    if not dry_run:
                        # Marker first: a half-deleted folder is then an ignored incomplete one.
                        storage.delete_file(version_marker_path(lake, event_date, version))
                        storage.delete_dir(folder)
                    continue
            for name in storage.list_subdirs(folder):
                if _DATA_DIR.match(name) and name != marker.get("data"):
                    removed.extend(_remove_if_old(event_date, version, "orphan-data",
                                                  layout.join(folder, name), now, retention, dry_run))
        for version in list_version_dirs(lake, event_date):
            if version in complete_ids:
                continue
            folder = layout.dedup_version_dir(lake, event_date, version)
            if storage.exists(version_marker_path(lake, event_date, version)):
                continue  # completed since we listed
            removed.extend(_remove_if_old(event_date, version, "incomplete", folder, now, retention, dry_run))
    for item in removed:
        log.info("gc removed" if not dry_run else "gc would remove", event_date=item.event_date,
                 version=item.version, what=item.what, age_s=round(item.age_s, 1))
    return removed


def _remove_if_old(event_date, version, what, folder, now, retention, dry_run) -> list[Removal]:
    mtime = _newest_mtime(folder)
    if mtime is None:
        return []
    age = (now - mtime).total_seconds()
    if age < retention.total_seconds():
        return []
    if not dry_run:
        storage.delete_dir(folder)
    return [Removal(event_date, version, what, folder, age)]
