"""Rerun obligations: durable records that an event date must be deduplicated again.

A run of date S that finds new events in sessions spanning other dates (its affected dates) may
have made their published versions stale. It records one obligation per such date T *before* it
publishes its own version, so that no crash, superseding version or slow DAG task can lose it:

    <lake>/_obligations/event_date=T/<S>__<S's version>.json
        {"event_date": T, "source_date": S, "source_version": V, "source_run_id": ..., "created_at": ...}

An obligation is discharged (deleted) by a run of T that has acted on it:
`tidemark.deduplication.dedup` lists the date's obligations before it plans and deletes exactly
those once it has published or found nothing new. A run that started planning after the obligation was written read every receipt its source
read (they were complete before the source planned), so T is then correct with respect to them.
Obligations written while T's run was planning stay for the next run.

Who acts on them: the DAG triggers a run of T for every pending obligation whose source is the date
it just deduplicated (tidemark_dedup's `publish` task), and `tidemark reconcile` triggers a run of
every date with a pending obligation older than its grace period.

Pure Python over the lake (pyarrow filesystems + JSON): the DAG and reconcile read it without Spark.
"""

from __future__ import annotations

from datetime import date
from typing import Any

from tidemark.base import layout
from tidemark.base.logs import get_logger
from tidemark.base.times import now_iso_z
from tidemark.orchestration import runs
from tidemark.store.lake import Lake
from tidemark.store.locations import File, Folder

log = get_logger("obligations")

# One obligation file's JSON object: event_date, source_date, source_version, source_run_id,
# created_at (the module's docstring); its dates as the file spells them (YYYY-MM-DD).
Obligation = dict[str, Any]
# One neighbour run owed: {"trigger_run_id": ..., "conf": {...}} (the DAG's trigger_affected kwargs)
Rerun = dict[str, Any]


def root(lake: Lake) -> Folder:
    """The folder of every date's obligations."""
    return lake.obligations_root()


def date_dir(lake: Lake, event_date: date) -> Folder:
    """The folder of one date's obligations."""
    return lake.obligations_dir(event_date)


def path(lake: Lake, event_date: date, source_date: date, source_version: str) -> File:
    """The file of the obligation a run of `source_date` (its version) recorded for `event_date`."""
    name = f"{layout.event_date_text(source_date)}__{layout.check_receipt_ts(source_version)}.json"
    return date_dir(lake, event_date).file(name)


def _now() -> str:
    """Now, as the obligations' created_at spells it."""
    return now_iso_z()


def record(
    lake: Lake, targets: list[date], source_date: date, source_version: str, source_run_id: str | None = None
) -> list[Obligation]:
    """Record that every date in `targets` (other than the source) must be rerun.

    Idempotent: an obligation already recorded for the same (target, source, version) is kept as it
    is.
    """
    out = []
    for target in sorted(set(targets) - {source_date}):
        file = path(lake, target, source_date, source_version)
        existing = file.read_json()
        if existing is None:
            existing = {
                "event_date": layout.event_date_text(target),
                "source_date": layout.event_date_text(source_date),
                "source_version": layout.check_receipt_ts(source_version),
                "source_run_id": source_run_id,
                "created_at": _now(),
            }
            file.write_json_atomic(existing)
            log.info(
                "rerun obligation recorded", event_date=target, source_date=source_date, source_version=source_version
            )
        out.append(existing)
    return out


def _read_dir(folder: Folder) -> list[Obligation]:
    """The well-formed obligations of one date's folder, oldest first."""
    out: list[Obligation] = []
    for name in folder.names():
        if not name.endswith(".json") or name.startswith((".", "_")):
            continue
        payload = folder.file(name).read_json()
        if payload is None:
            continue  # discharged while we listed
        try:
            layout.as_event_date(payload["event_date"])
            layout.as_event_date(payload["source_date"])
            layout.check_receipt_ts(payload["source_version"])
        except (KeyError, TypeError, layout.InvalidPartitionValue):
            log.warning("ignoring a malformed obligation file", file=folder.file(name))
            continue
        out.append(payload)
    return sorted(out, key=lambda o: (o["created_at"], o["source_date"], o["source_version"]))


def pending(lake: Lake, event_date: date | None = None) -> list[Obligation]:
    """Pending obligations of one date (or of every date), oldest first."""
    if event_date is not None:
        return _read_dir(date_dir(lake, event_date))
    out: list[Obligation] = []
    for target in root(lake).event_dates():
        out.extend(_read_dir(date_dir(lake, target)))
    return out


def pending_from(lake: Lake, source_date: date) -> list[Obligation]:
    """Pending obligations recorded by runs of `source_date`."""
    source = layout.event_date_text(source_date)  # as the obligations' files spell it
    return [o for o in pending(lake) if o["source_date"] == source]


def reruns_owed_by(lake: Lake, source_date: date) -> list[Rerun]:
    """The neighbour runs the DAG starts after a run of `source_date`.

    One per date owed a rerun by a run of source_date, named after the newest such obligation (a
    run started after it was recorded acts on the older ones too): [{"trigger_run_id", "conf"}],
    the DAG's trigger_affected arguments.
    """
    newest: dict[str, Obligation] = {}
    for owed in pending_from(lake, source_date):  # oldest first: the newest wins
        newest[owed["event_date"]] = owed
    return [
        {
            "trigger_run_id": runs.affected_run_id(layout.as_event_date(target), source_date, owed["source_version"]),
            "conf": {
                "event_date": target,
                "source_date": owed["source_date"],
                "source_version": owed["source_version"],
            },
        }
        for target, owed in sorted(newest.items())
    ]


def discharge(lake: Lake, acted_on: list[Obligation], by_version: str | None = None) -> None:
    """Delete obligations a run of their date has acted on (those it listed before planning)."""
    for item in acted_on:
        target, source = layout.as_event_date(item["event_date"]), layout.as_event_date(item["source_date"])
        path(lake, target, source, item["source_version"]).delete()
        log.info(
            "rerun obligation discharged",
            event_date=item["event_date"],
            source_date=item["source_date"],
            source_version=item["source_version"],
            version=by_version,
        )
