"""What was advertised, what is still owed, and which complete partitions no notice covers.

The corrected notices' sent and owed entries (corrected_status).

Read from the lake only (_notices/ and the receipt markers): works while the stream runs, after
it stopped, and from another machine.
"""

from __future__ import annotations

from datetime import date
from typing import Any

from tidemark.base import layout
from tidemark.notices import availability_notice
from tidemark.notices.cadence import PendingGroups
from tidemark.notices.outbox import Outbox
from tidemark.panes import receipts
from tidemark.store.lake import Lake


def _row(entry: dict[str, Any], state: str) -> dict[str, Any]:
    body = entry["notice"]
    return {
        "state": state,
        "notice_id": body["notice_id"],
        "kind": body.get("kind", "partition"),
        "event_date": body["event_date"],
        "receipt_ts": body["receipt_ts"],
        "partitions": len(body.get("receipt_ts_list", [body["receipt_ts"]])),
        "rows": body["rows"],
        "events": body["events"],
        "late": body["late"],
        "recorded_at": entry.get("recorded_at", ""),
        "published_at": entry.get("published_at", ""),
        "message_id": entry.get("message_id", ""),
    }


def notices_status(lake: Lake, dataset: str = "sessions") -> dict[str, Any]:
    """{"sent": rows, "owed": rows, "waiting": rows}: one row per notice (or waiting group)."""
    outbox = Outbox(lake)
    groups = PendingGroups(lake, dataset, outbox)
    groups.load()
    waiting = [
        {
            "state": "waiting",
            "notice_id": "",
            "kind": g["kind"],
            "event_date": g["event_date"],
            "receipt_ts": max(p["receipt_ts"] for p in g["open"]),
            "partitions": len(g["open"]),
            "rows": sum(p["rows"] for p in g["open"]),
            "events": sum(p["events"] for p in g["open"]),
            "late": any(p["late"] for p in g["open"]),
            "recorded_at": "",
            "published_at": "",
            "message_id": "",
            "due_at": g["window_end"],
        }
        for g in groups.waiting()
    ]
    return {
        "sent": [_row(e, "sent") for e in outbox.sent()],
        "owed": [_row(e, "owed") for e in outbox.owed()],
        "waiting": waiting,
    }


def _corrected_row(entry: dict[str, Any], state: str) -> dict[str, Any]:
    body = entry["notice"]
    return {
        "state": state,
        "notice_id": body["notice_id"],
        "event_date": body["event_date"],
        "version": body["version"],
        "previous_version": body["previous_version"],
        "change": body["change"],
        "rows": body["rows"],
        "snapshot_id": body["table"]["snapshot_id"],
        "recorded_at": entry.get("recorded_at", ""),
        "published_at": entry.get("published_at", ""),
        "message_id": entry.get("message_id", ""),
    }


def corrected_status(lake: Lake) -> dict[str, Any]:
    """The corrected notices' sent and owed entries, one row per published version.

    {"sent": rows, "owed": rows}: one row per corrected notice (one per published version), in
    (event_date, version) order.
    """
    from tidemark.notices import corrected_delivery  # pyiceberg: only when corrected notices are asked for

    outbox = corrected_delivery.outbox(lake)

    def order(r: dict[str, Any]) -> tuple[str, str]:
        return (r["event_date"], r["version"])

    return {
        "sent": sorted((_corrected_row(e, "sent") for e in outbox.sent()), key=order),
        "owed": sorted((_corrected_row(e, "owed") for e in outbox.owed()), key=order),
    }


def covered_partitions(lake: Lake, dataset: str = "sessions") -> dict[tuple[date, str], str]:
    """(event_date, receipt_ts) -> state ('sent', 'owed', 'waiting') of the notice covering it."""
    outbox = Outbox(lake)
    covered: dict[tuple[date, str], str] = {}
    for state, entries in (("owed", outbox.owed()), ("sent", outbox.sent())):
        for entry in entries:
            body = entry["notice"]
            day = layout.as_event_date(body["event_date"])  # the notice's text
            for receipt_ts in body.get("receipt_ts_list", [body["receipt_ts"]]):
                covered[(day, receipt_ts)] = state
    groups = PendingGroups(lake, dataset, outbox)
    groups.load()
    for group in groups.waiting():
        for partition in group["open"]:
            covered.setdefault((layout.as_event_date(partition["event_date"]), partition["receipt_ts"]), "waiting")
    return covered


def unadvertised(lake: Lake, dataset: str = "sessions") -> list[tuple[date, str]]:
    """Complete receipt partitions that no notice (sent, owed or waiting) covers."""
    covered = covered_partitions(lake, dataset)
    return [
        (day, r)
        for day in map(layout.as_event_date, receipts.list_event_dates(lake))
        for r in receipts.list_receipts(lake, day)
        if (day, r) not in covered
    ]


def backfill(lake: Lake, dataset: str = "sessions") -> list[dict[str, Any]]:
    """Record a partition notice for every complete partition no notice covers.

    (written by a run without --notify-topic, say), from its marker. Returns the recorded
    notices; idempotent.
    """
    outbox = Outbox(lake)
    recorded = []
    for event_date, receipt_ts in unadvertised(lake, dataset):
        marker = receipts.read_marker(lake, event_date, receipt_ts)
        if marker is None:  # listed complete a moment ago: gone since (gc), nothing to advertise
            continue
        body = availability_notice.build(dataset, [marker.to_json()])
        if outbox.record(body):
            recorded.append(body)
    return recorded
