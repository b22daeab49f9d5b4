"""Cadence: which notice a receipt partition goes into, and when that notice is due.

    default                   one notice per receipt partition, recorded at once (kind=partition)
    coalesce=W                the partitions of one event_date whose receipt_ts falls in the same
                              W-long window (aligned to the epoch) share one notice, due when the
                              window ends (kind=coalesced)
    late_horizon=H            a partition of an event_date whose end is more than H behind the
                              watermark is "old": instead of at once it goes into the date's
                              digest, one notice per old date per digest_interval (kind=late_digest)

Windows are tumbling windows on receipt_ts, so the grouping is a pure function of the partitions:
a replayed batch puts its partitions into the same groups, and a group's notice_id (a hash of its
receipt partitions) is the same however often it is rebuilt.

Waiting partitions are durable: one record per group, <lake>/_notices/pending/<group>.json
(Lake.notice_records("pending")), written before the batch commits. A closed group keeps the receipt_ts it advertised ("closed") until every
batch that could replay it has committed, so a replay after a crash never advertises a partition a
second time under a new notice_id.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from tidemark.base import layout
from tidemark.base.durations import format_duration
from tidemark.base.logs import get_logger
from tidemark.base.times import parse_iso
from tidemark.notices import availability_notice
from tidemark.notices.outbox import Outbox
from tidemark.store.lake import Lake

log = get_logger("notices")

PARTITION, COALESCED, LATE_DIGEST = availability_notice.KINDS


@dataclass(frozen=True)
class CadencePolicy:
    """How a stream's availability notices are grouped (see the module's docstring)."""

    coalesce: timedelta | None = None
    late_horizon: timedelta | None = None
    digest_interval: timedelta = timedelta(hours=1)

    def __post_init__(self) -> None:
        """Refuse windows that are not positive (or shorter than a second)."""
        for name in ("coalesce", "late_horizon", "digest_interval"):
            value = getattr(self, name)
            if value is not None and value <= timedelta(0):
                raise ValueError(f"notice {name.replace('_', ' ')} must be positive, got {value}")
        if self.coalesce is not None and self.coalesce < timedelta(seconds=1):
            raise ValueError("notice coalescing window must be at least 1s")
        if self.digest_interval < timedelta(seconds=1):
            raise ValueError("notice digest interval must be at least 1s")

    def is_old(self, partition: dict[str, Any]) -> bool:
        """The partition's date ended more than late_horizon before the partition's watermark."""
        if self.late_horizon is None:
            return False
        day_end = datetime.combine(
            layout.as_event_date(partition["event_date"]) + timedelta(days=1), datetime.min.time(), tzinfo=timezone.utc
        )
        return parse_iso(partition["watermark"]) - day_end > self.late_horizon

    def route(self, partition: dict[str, Any]) -> tuple[str, timedelta | None]:
        """(kind, window) for a partition; window None means: advertise at once."""
        if self.is_old(partition):
            return LATE_DIGEST, self.digest_interval
        if self.coalesce is not None:
            return COALESCED, self.coalesce
        return PARTITION, None

    def describe(self) -> dict[str, str]:
        """The policy as the stream's settings name it (for logs and the status)."""
        return {
            "notice_coalesce": format_duration(self.coalesce) if self.coalesce else "off",
            "notice_late_horizon": format_duration(self.late_horizon) if self.late_horizon else "off",
            "notice_digest_interval": format_duration(self.digest_interval),
        }


def window_start(receipt_ts: str, window: timedelta) -> datetime:
    """The start of the tumbling `window` (aligned to the epoch) that holds receipt_ts."""
    moment = layout.parse_receipt_ts(receipt_ts)
    width_ms = int(window.total_seconds() * 1000)
    start_ms = int(moment.timestamp() * 1000) // width_ms * width_ms
    return datetime.fromtimestamp(start_ms / 1000, tz=timezone.utc)


class PendingGroups:
    """Coalescing groups waiting for their window to end, mirrored in <lake>/_notices/pending/.

    Thread-safe: the stream's listener adds, the sender thread closes.
    """

    def __init__(self, lake: Lake, dataset: str, outbox: Outbox) -> None:
        """The groups of `dataset`'s notices in `lake`, recorded into `outbox` when they close."""
        self.lake = lake
        self.dataset = dataset
        self.outbox = outbox
        self.records = lake.notice_records("pending")
        self.groups: dict[str, dict[str, Any]] = {}
        self.lock = threading.RLock()

    def load(self) -> None:
        """Read the groups left by a previous run."""
        with self.lock:
            for group_id in self.records.names():
                if group_id.startswith("_"):
                    continue
                group = self.records.read(group_id)
                if group is not None and group.get("group_id") == group_id:
                    self.groups[group_id] = group

    def add(self, partition: dict[str, Any], kind: str, window: timedelta) -> bool:
        """Put a partition into its group; False when the group already holds or advertised it."""
        event_date = layout.as_event_date(partition["event_date"])  # the marker's text
        receipt_ts = layout.check_receipt_ts(partition["receipt_ts"])
        start = window_start(receipt_ts, window)
        seconds = int(window.total_seconds())
        group_id = f"{layout.event_date_text(event_date)}_{kind}_{layout.format_receipt_ts(start)}_{seconds}s"
        with self.lock:
            group = self.groups.get(group_id) or {
                "group_id": group_id,
                "event_date": layout.event_date_text(event_date),
                "kind": kind,
                "window_start": layout.format_receipt_ts(start),
                "window_end": layout.format_receipt_ts(start + timedelta(seconds=seconds)),
                "open": [],
                "closed": [],
            }
            seen = {p["receipt_ts"] for p in group["open"]}
            seen.update(r for c in group["closed"] for r in c["receipt_ts_list"])
            if receipt_ts in seen:
                return False
            group["open"].append(dict(partition))
            self.records.write(group_id, group)
            self.groups[group_id] = group
        log.info(
            "partition waiting for a coalesced notice",
            event_date=event_date,
            receipt_ts=receipt_ts,
            kind=kind,
            group=group_id,
            window_end=group["window_end"],
        )
        return True

    def due(self, now: datetime, everything: bool = False) -> list[str]:
        """The groups with partitions waiting whose window ended by `now` (or all: `everything`)."""
        with self.lock:
            return sorted(
                gid
                for gid, g in self.groups.items()
                if g["open"] and (everything or layout.parse_receipt_ts(g["window_end"]) <= now)
            )

    def close(self, group_id: str) -> dict[str, Any] | None:
        """Record the group's notice in the outbox, then remember what it advertised.

        The outbox write comes first: a crash in between leaves the group open, and closing it
        again builds the same notice_id, which the outbox already knows.
        """
        with self.lock:
            group = self.groups.get(group_id)
            if not group or not group["open"]:
                return None
            body = availability_notice.build(self.dataset, group["open"], group["kind"])
            self.outbox.record(body)
            group["closed"].append(
                {
                    "notice_id": body["notice_id"],
                    "receipt_ts_list": body["receipt_ts_list"],
                    "max_batch_id": body["batch_id"],
                }
            )
            group["open"] = []
            self.records.write(group_id, group)
            return body

    def forget_committed(self, batch_id: int) -> None:
        """Drop closed entries that no replay can touch.

        Spark runs batch N only after every batch before N committed, so partitions of batches < N
        are never reported again.
        """
        with self.lock:
            for group_id, group in list(self.groups.items()):
                kept = [c for c in group["closed"] if c["max_batch_id"] >= batch_id]
                if len(kept) == len(group["closed"]):
                    continue
                group["closed"] = kept
                if not group["open"] and not kept:
                    self.records.delete(group_id)
                    del self.groups[group_id]
                else:
                    self.records.write(group_id, group)

    def waiting(self) -> list[dict[str, Any]]:
        """Open groups: partitions recorded but not yet in a notice."""
        with self.lock:
            return [dict(g) for g in self.groups.values() if g["open"]]
