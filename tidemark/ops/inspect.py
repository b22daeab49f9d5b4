"""Summaries of the lake for people.

Built from markers, the Iceberg table's current metadata and notice records (no data file is read),
plus the Airflow runs of a date when an Airflow is reachable.

    partitions(lake)                    one row per event date: current version, pending receipts, lag
    lineage(lake, event_date, runs)     one row per receipt partition: notice, DAG run, first version
    history(lake, event_date, runs)     every receipt, notice, DAG run and version, in time order

`runs` is a list of Airflow DAG runs (REST /api/v2 dagRuns objects) or None when Airflow is not
reachable; the answers then say so instead of guessing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from typing import Any, TypedDict

from tidemark.base import layout
from tidemark.base.times import iso_z, parse_iso
from tidemark.iceberg import table as iceberg
from tidemark.iceberg import table_versions
from tidemark.notices.outbox import Outbox
from tidemark.orchestration import runs as run_ids
from tidemark.panes import planning, receipts
from tidemark.store.lake import Lake

# ---- time helpers --------------------------------------------------------------------------------


def parse_time(value: object) -> datetime | None:
    """A receipt_ts or an RFC 3339 / ISO time (Airflow's, the markers') -> aware UTC datetime."""
    if value in (None, ""):
        return None
    text = str(value)
    try:
        return layout.parse_receipt_ts(text)
    except layout.InvalidPartitionValue:
        pass
    try:
        return parse_iso(text, default_utc=True)
    except ValueError:
        return None


def iso(moment: datetime | None) -> str:
    """A time as iso_z text; "" for None."""
    return "" if moment is None else iso_z(moment)


def seconds_between(start: datetime | None, end: datetime | None) -> float | None:
    """Seconds from `start` to `end` to a tenth; None when either is unknown."""
    return None if start is None or end is None else round((end - start).total_seconds(), 1)


# ---- partitions ----------------------------------------------------------------------------------


def partitions(
    lake: Lake, now: datetime | None = None, since: date | None = None, until: date | None = None
) -> list[dict[str, Any]]:
    """One row per event date (those in [since, until] when given).

    A row holds the current version, its sessions, how many complete receipt partitions it includes
    and how many are pending (complete but not in the current version), and the lag: how long the
    oldest pending receipt has waited (0 when nothing is pending). Reads the table once, lists each
    date's folders once, and checks the markers only of the partitions its version lacks (a version
    includes complete ones only). The rows are plain dicts: `tidemark partitions` adds its own
    columns to them and prints them as JSON (each row's event date as YYYY-MM-DD).
    """
    now = now or datetime.now(timezone.utc)
    tbl = iceberg.load(lake)
    versioned = {layout.as_event_date(d) for d in table_versions.dates_with_version(lake, tbl)}
    dates = sorted(
        d
        for d in set(receipts.list_event_dates(lake)) | versioned
        if (since is None or d >= since) and (until is None or d <= until)
    )
    rows: list[dict[str, Any]] = []
    for event_date in dates:
        current_v = None if tbl is None else table_versions.current_version(lake, event_date, tbl)
        included = set(current_v.receipts) if current_v else set()
        stamps, pending = receipts.complete_and_pending(lake, event_date, included)
        oldest = layout.parse_receipt_ts(pending[0]) if pending else None
        rows.append(
            {
                "event_date": layout.event_date_text(event_date),
                "version": current_v.version if current_v else None,
                "sessions": current_v.sessions if current_v else None,
                "version_created_at": (current_v.committed_at or current_v.created_at) if current_v else None,
                "receipts": len(stamps),
                "included": len(stamps) - len(pending),
                "pending": len(pending),
                "pending_receipts": pending,
                "newest_receipt": stamps[-1] if stamps else None,
                "lag_s": round((now - oldest).total_seconds(), 1) if oldest else 0.0,
            }
        )
    return rows


# ---- lineage and history -------------------------------------------------------------------------


def notices_of(lake: Lake, event_date: date) -> list[dict[str, Any]]:
    """The date's notices, sent and owed: {notice, state, recorded_at, published_at, message_id}."""
    outbox = Outbox(lake)
    out: list[dict[str, Any]] = []
    for state, entries in (("sent", outbox.sent()), ("owed", outbox.owed())):
        for entry in entries:
            if layout.as_event_date(entry["notice"]["event_date"]) == event_date:
                out.append({"state": state, **entry})
    return sorted(out, key=lambda e: e.get("recorded_at", ""))


def runs_of(all_runs: list[dict[str, Any]] | None, event_date: date) -> list[dict[str, Any]] | None:
    """The Airflow DAG runs (REST dagRuns objects) whose conf names `event_date`; None without Airflow."""
    if all_runs is None:
        return None
    text = layout.event_date_text(event_date)  # as a run's conf spells it
    return [r for r in all_runs if (r.get("conf") or {}).get("event_date") == text]


@dataclass
class ReceiptLineage:
    """One receipt partition's way to a corrected version: each step's time (None = not yet)."""

    event_date: date
    receipt_ts: str
    events: int
    late: bool
    pane_kinds: list[str]
    notice_id: str | None = None
    notice_recorded_at: datetime | None = None
    notice_published_at: datetime | None = None
    run_id: str | None = None
    run_state: str | None = None
    run_queued_at: datetime | None = None
    run_start: datetime | None = None
    run_end: datetime | None = None
    version: str | None = None
    version_created_at: datetime | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def received_at(self) -> datetime:
        """When the receipt partition was received (its receipt_ts)."""
        return layout.parse_receipt_ts(self.receipt_ts)


def lineage(lake: Lake, event_date: date, all_runs: list[dict[str, Any]] | None = None) -> list[ReceiptLineage]:
    """Per receipt partition: the notice that advertised it, that notice's DAG run, the first version with it."""
    by_receipt: dict[str, dict[str, Any]] = {}
    for entry in notices_of(lake, event_date):
        body = entry["notice"]
        for ts in body.get("receipt_ts_list", [body["receipt_ts"]]):
            by_receipt.setdefault(ts, entry)
    dag_runs = {r["dag_run_id"]: r for r in (all_runs or [])}
    versions = table_versions.list_versions(lake, event_date)
    rows = []
    for receipt_ts in receipts.list_receipts(lake, event_date):
        marker = receipts.read_marker(lake, event_date, receipt_ts)
        if marker is None:  # listed complete a moment ago: gone since (gc), nothing to show
            continue
        row = ReceiptLineage(event_date, receipt_ts, marker.events, marker.late, list(marker.pane_kinds))
        noticed = by_receipt.get(receipt_ts)
        if noticed is not None:
            body = noticed["notice"]
            row.notice_id = body["notice_id"]
            row.notice_recorded_at = parse_time(noticed.get("recorded_at"))
            row.notice_published_at = parse_time(noticed.get("published_at"))
            row.run_id = run_ids.run_id_for_notice(body)
            run = dag_runs.get(row.run_id)
            if run is not None:
                row.run_state = run.get("state")
                row.run_queued_at = parse_time(run.get("queued_at"))
                row.run_start = parse_time(run.get("start_date"))
                row.run_end = parse_time(run.get("end_date"))
        key = planning.receipt_key(event_date, receipt_ts)
        first = next((v for v in versions if key in v.receipts), None)
        if first is not None:
            row.version = first.version
            row.version_created_at = parse_time(first.committed_at or first.created_at)
        rows.append(row)
    return rows


class HistoryItem(TypedDict):
    """One thing that happened to an event date (`tidemark history` prints one per line)."""

    time: datetime | None  # None: not known (then sorted first)
    kind: str  # "receipt", "notice", "dag run" or "version"
    id: str | None  # a version record without its commit has none
    state: str
    detail: str


def history(lake: Lake, event_date: date, all_runs: list[dict[str, Any]] | None = None) -> list[HistoryItem]:
    """Everything that happened to one event date, oldest first."""
    items: list[HistoryItem] = []
    for receipt_ts in receipts.list_receipts(lake, event_date):
        marker = receipts.read_marker(lake, event_date, receipt_ts)
        if marker is None:  # listed complete a moment ago: gone since (gc), nothing to show
            continue
        items.append(
            {
                "time": layout.parse_receipt_ts(receipt_ts),
                "kind": "receipt",
                "id": receipt_ts,
                "state": "late" if marker.late else "",
                "detail": f"batch {marker.batch_id}: {marker.events} events, {marker.rows} panes "
                f"({','.join(marker.pane_kinds)}), events {marker.min_event_ts[:19]} .. "
                f"{marker.max_event_ts[:19]}",
            }
        )
    for entry in notices_of(lake, event_date):
        body = entry["notice"]
        covers = body.get("receipt_ts_list", [body["receipt_ts"]])
        moment = parse_time(entry.get("published_at")) or parse_time(entry.get("recorded_at"))
        items.append(
            {
                "time": moment,
                "kind": "notice",
                "id": body["notice_id"],
                "state": "published" if entry["state"] == "sent" else "owed (in the outbox)",
                "detail": f"{body.get('kind', 'partition')} for {len(covers)} receipt(s), newest "
                f"{body['receipt_ts']}; run {run_ids.run_id_for_notice(body)}"
                + (f"; message {entry['message_id']}" if entry.get("message_id") else ""),
            }
        )
    for run in runs_of(all_runs, event_date) or []:
        start, end = parse_time(run.get("start_date")), parse_time(run.get("end_date"))
        took = seconds_between(start, end)
        items.append(
            {
                "time": parse_time(run.get("queued_at")) or parse_time(run.get("run_after")) or start,
                "kind": "dag run",
                "id": run["dag_run_id"],
                "state": run.get("state") or "",
                "detail": f"started {iso(start) or '-'}, ended {iso(end) or '-'}"
                + (f" ({took}s)" if took is not None else ""),
            }
        )
    current_v = table_versions.current_version(lake, event_date)
    for version in table_versions.list_versions(lake, event_date):
        current = current_v is not None and current_v.version == version.version
        items.append(
            {
                "time": parse_time(version.committed_at or version.created_at),
                "kind": "version",
                "id": version.version,
                "state": "current" if current else "superseded",
                "detail": f"{version.sessions if version.records('sessions') else '?'} sessions from "
                f"{len(version.receipts)} receipt(s), "
                f"{'?' if version.new_receipts is None else version.new_receipts} new; run {version.run_id}"
                + (f"; Iceberg snapshot {version.snapshot_id}" if version.snapshot_id else ""),
            }
        )
    order = {"receipt": 0, "notice": 1, "dag run": 2, "version": 3}
    epoch = datetime.min.replace(tzinfo=timezone.utc)
    return sorted(items, key=lambda i: (i["time"] or epoch, order[i["kind"]]))
