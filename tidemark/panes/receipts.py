"""Receipt partitions: immutable folders of panes, each completed by a marker written last.

The marker format lives here, with the lake layout: the stream (streaming_job/batch.py) writes
markers; the dedup planning, the notices, the reader, reconcile and the CLI read them.

A micro-batch replayed after a crash finds the markers of the partitions it had already completed
and leaves them alone; partitions without a marker may hold a partial write and are overwritten.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import date, datetime, timedelta, timezone
from typing import Any

import pyarrow.fs as pafs

from tidemark.base import crashpoints, layout
from tidemark.base.logs import get_logger
from tidemark.base.progress import Display, Progress
from tidemark.base.times import iso_from_micros  # noqa: F401 - the stream writes marker times with it
from tidemark.panes import receipt_index
from tidemark.store.lake import RECEIPT_MARKER, Lake

log = get_logger("receipts")


@dataclass(frozen=True)
class ReceiptPartition:
    """What the marker of one receipt partition says: the facts notices and dedup rely on."""

    event_date: date
    receipt_ts: str
    batch_id: int
    uri: str
    rows: int
    events: int
    pane_kinds: list[str]
    min_event_ts: str
    max_event_ts: str
    watermark: str
    late: bool
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The marker's JSON object (the event date as YYYY-MM-DD)."""
        return {**asdict(self), "event_date": layout.event_date_text(self.event_date)}

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> ReceiptPartition:
        """The partition a marker's JSON object describes (its event date parsed here, once)."""
        return cls(**{**payload, "event_date": layout.as_event_date(payload["event_date"])})


@dataclass
class BatchReport:
    """What one micro-batch of the stream did.

    Its listeners (the notice service) get one after the batch's partitions are complete.
    """

    batch_id: int
    receipt_ts: str
    input_lines: int
    valid_events: int
    quarantined: int
    watermark_us: int
    open_sessions: int
    partitions: list[ReceiptPartition] = field(default_factory=list)
    seconds: float = 0.0
    phases: dict[str, Any] = field(default_factory=dict)  # seconds per step of the batch (tidemark.base.phases)


def is_late(event_date: date, watermark_us: int) -> bool:
    """A partition is late when the watermark had already passed the end of its event date."""
    day_end = datetime.combine(event_date + timedelta(days=1), datetime.min.time(), tzinfo=timezone.utc)
    return watermark_us >= int(day_end.timestamp() * 1_000_000)


def is_complete(lake: Lake, event_date: date, receipt_ts: str) -> bool:
    """Whether the receipt partition's marker exists."""
    return lake.receipt_marker(event_date, receipt_ts).exists()


def complete(lake: Lake, partition: ReceiptPartition) -> None:
    """Complete a receipt partition: register it in the receipt index, then write its marker.

    The index first (its arrival, then the later dates it reaches), the marker last: the
    partition is complete from then on.
    """
    receipt_index.record_arrival(lake, partition)
    receipt_index.record_end(lake, partition)
    receipt_index.register(lake, partition)
    lake.receipt_marker(partition.event_date, partition.receipt_ts).write_json_atomic(partition.to_json())


def complete_among(lake: Lake, partitions: list[ReceiptPartition]) -> set[tuple[date, str]]:
    """(event_date, receipt_ts) of those of `partitions` whose marker exists."""
    return complete_keys(lake, [(p.event_date, p.receipt_ts) for p in partitions])


def complete_keys(lake: Lake, keys: list[tuple[date, str]]) -> set[tuple[date, str]]:
    """Those (event_date, receipt_ts) whose marker exists, from one metadata call.

    One metadata call for all of them, however many dates a batch touched (a read per marker would
    make 2,000 calls for a batch touching 2,000 dates).
    """
    if not keys:
        return set()
    fs = lake.folder().at()[0]
    paths = [lake.receipt_marker(*key).at()[1] for key in keys]
    infos = fs.get_file_info(paths)
    return {key for key, info in zip(keys, infos, strict=False) if info.type != pafs.FileType.NotFound}


def complete_all(lake: Lake, partitions: list[ReceiptPartition]) -> None:
    """Write the markers of `partitions`, concurrently.

    (tiny objects: on a bucket each is a round trip). Each one completes its partition on its
    own; a crash leaves some written, which the replayed batch finds (complete_among) and keeps.
    """
    if len(partitions) <= 1 or crashpoints.armed("receipt-marker"):  # a test's kill point: one at a time
        for partition in partitions:
            complete(lake, partition)
            crashpoints.reach("receipt-marker")
        return
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda partition: complete(lake, partition), partitions))


def read_marker(lake: Lake, event_date: date, receipt_ts: str) -> ReceiptPartition | None:
    """The receipt partition's marker, or None when it is not complete."""
    payload = lake.receipt_marker(event_date, receipt_ts).read_json()
    return None if payload is None else ReceiptPartition.from_json(payload)


@dataclass(frozen=True)
class ReceiptRef:
    """A complete receipt partition known from listings; its marker is read only when needed.

    A complete receipt partition known from listings: its key and, when the plan needed it, the
    latest end of its panes (the receipt index's end entry). Its marker is read only when
    another of its facts is asked for (`rows`: the few new partitions of an incremental run).
    """

    lake: Lake
    event_date: date
    receipt_ts: str
    end: str | None = None

    @property
    def marker(self) -> ReceiptPartition:
        """The partition's marker, read on first use."""
        if "_marker" not in self.__dict__:
            load_markers([self])
        marker: ReceiptPartition = self.__dict__["_marker"]
        return marker

    @property
    def max_event_ts(self) -> str:
        """The latest end of the partition's panes (from its end entry when known)."""
        return self.end or self.marker.max_event_ts

    @property
    def rows(self) -> int:
        """The partition's pane rows (from its marker)."""
        return self.marker.rows


def read_markers(lake: Lake, keys: list[tuple[date, str]]) -> list[ReceiptPartition]:
    """The markers of complete partitions among (event_date, receipt_ts) keys.

    Read concurrently (tiny objects: on a bucket, concurrency hides the latency); missing ones
    are left out.
    """
    if not keys:
        return []
    with ThreadPoolExecutor(max_workers=16) as pool:
        found = list(pool.map(lambda key: read_marker(lake, *key), keys))
    return [m for m in found if m is not None]


def load_markers(refs: list[ReceiptRef]) -> None:
    """Read the markers of those `refs` not read yet, concurrently, and keep them with each ref."""
    todo = [ref for ref in refs if "_marker" not in ref.__dict__]
    if not todo:
        return
    found = {
        (m.event_date, m.receipt_ts): m
        for m in read_markers(todo[0].lake, [(r.event_date, r.receipt_ts) for r in todo])
    }
    for ref in todo:
        marker = found.get((ref.event_date, ref.receipt_ts))
        if marker is None:
            raise FileNotFoundError(
                f"the marker of a complete receipt partition is gone: "
                f"{ref.lake.receipt_marker(ref.event_date, ref.receipt_ts)}"
            )
        ref.__dict__["_marker"] = marker  # frozen dataclass: the cache bypasses __setattr__ on purpose


def complete_names(lake: Lake, event_date: date) -> list[str]:
    """Receipt timestamps of the complete partitions of one event date, oldest first.

    One recursive listing of the date's folder, markers recognised by name (none read).
    """
    fs, root = lake.event_date_dir(event_date).at()
    try:
        infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    except (FileNotFoundError, NotADirectoryError):
        return []
    out = []
    for info in infos:
        if info.base_name != RECEIPT_MARKER:
            continue
        folder = info.path[: -len(RECEIPT_MARKER)].rstrip("/").rsplit("/", 1)[-1]
        value = layout.partition_value(folder, "receipt_ts")
        try:
            out.append(layout.check_receipt_ts(value))
        except layout.InvalidPartitionValue:
            continue  # a marker in a stranger's folder
    return sorted(out)


def list_receipt_names(lake: Lake, event_date: date) -> list[str]:
    """Receipt timestamps of the partition folders of one event date, complete or not.

    Oldest first: one listing, no marker read (the caller reads the markers of those it needs).
    """
    return lake.event_date_dir(event_date).partition_values("receipt_ts", layout.check_receipt_ts)


def complete_and_pending(lake: Lake, event_date: date, included: set[str]) -> tuple[list[str], list[str]]:
    """The complete receipt partitions of event_date, and those of them a version lacks.

    (receipt timestamps of the complete partitions of event_date, those of them not among the
    version's `included` keys 'YYYY-MM-DD/receipt_ts'), oldest first: one listing, and the
    markers checked only of the partitions the version lacks (a version includes complete ones
    only), in one call.
    """
    names = list_receipt_names(lake, event_date)
    prefix = layout.event_date_text(event_date) + "/"
    unseen = [(event_date, ts) for ts in names if prefix + ts not in included]
    complete = complete_keys(lake, unseen)
    pending = [ts for _, ts in unseen if (event_date, ts) in complete]
    return [ts for ts in names if prefix + ts in included or (event_date, ts) in complete], pending


def list_receipts(lake: Lake, event_date: date) -> list[str]:
    """Receipt timestamps of the complete partitions of one event date, oldest first."""
    return [ts for ts in list_receipt_names(lake, event_date) if is_complete(lake, event_date, ts)]


def list_event_dates(lake: Lake) -> list[date]:
    """The event dates that have receipt partition folders, in order."""
    return lake.sessions_root().event_dates()


def reindex(lake: Lake, display: Display | None = None) -> int:
    """Register every existing receipt partition in the receipt index (`tidemark reindex`).

    For a lake written before the index; then marks the index complete. Idempotent, and safe
    while the stream runs (it registers what it writes meanwhile). Returns how many partitions
    reach later dates. Its progress (dates done and left) is logged, and shown on `display` (the
    CLI's terminal bar).
    """
    spanning = 0
    dates = list_event_dates(lake)
    with Progress("indexing event dates", len(dates), log=log, display=display, lake=lake) as progress:
        for event_date in progress.each(dates):
            for receipt_ts in list_receipt_names(lake, event_date):
                marker = read_marker(lake, event_date, receipt_ts)  # None: not complete
                if marker is None:
                    continue
                receipt_index.record_end(lake, marker)
                if receipt_index.reached_dates(marker):
                    receipt_index.register(lake, marker)
                    spanning += 1
    receipt_index.mark_complete(lake, "tidemark reindex")
    return spanning
