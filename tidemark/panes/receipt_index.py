"""The receipt index: what lets planning read the dates that matter instead of the whole lake.

A dedup of D needs the receipt partitions up to `hi` whose panes reach `lo = D 00:00 - gap` (the
split gap: SessionRules.split_gap, one microsecond more under the `merge` boundary;
tidemark/panes/planning.py). Every partition of a date in [date(lo), hi] may; a partition of an earlier
date only when its sessions run on into date(lo) or later, which few do (a session longer than
the time to the next midnight). Finding those few by reading the markers of every date would make a
no-op decision on a year-old lake read every marker ever written. The index keeps, for each date E,
an empty entry per partition of an earlier date whose panes reach into E:

    <lake>/_receipts/reach/event_date=E/<event_date>__<receipt_ts>

so a plan lists the folders of the dates in [date(lo), hi] and one reach folder, whatever the
lake's age. Entries are written before the partition's marker (`register`): a partition is still
complete only when its marker exists, and an entry without a marker (a crash in between; the
replayed batch writes both again) is skipped by the planner like any incomplete partition. Entries
name dates, never rules: a gap change reads the same entries.

What planning needs of a partition without reading its marker: every partition also gets an end
entry under its own date, naming the latest end of its panes (in microseconds):

    <lake>/_receipts/ends/event_date=E/<receipt_ts>__<max_event_us>

A plan of D takes every complete partition of the dates after date(lo) (their panes start on or
after their date's midnight, past lo), and those of date(lo) whose end is at or after lo: with the
end entries, one listing of that date tells which, and whether a partition is complete is one
recursive listing of its date's folder (the markers' names), not a read per marker. A partition
without an end entry (registered by a tidemark that wrote none) has its marker read.

What changed since a time, without listing the dates: every partition also gets an arrival entry,
by the UTC day it was received, written first (before its reach entries and its marker):

    <lake>/_receipts/arrivals/day=R/<receipt_ts>__<event_date>

`arrived(lake, after)` lists the days since a receipt time and returns the dates that received
partitions since: what reconciliation (tidemark/orchestration/reconcile.py) re-examines instead of every date.
An entry whose partition never completed (a crash; the replay writes it again) only makes a date be
looked at once more.

Two small files make the fast paths safe:
  - `head.json`: the receipt_ts of the newest micro-batch whose partitions are all complete,
    written by the stream after each batch's markers. The stream runs its batches one after
    another, so a partition with a receipt_ts at or before the head was complete before anyone read
    the head: a dedup that reads it before listing records it with its version (`planned_through`),
    and reconciliation starts its next pass from it. A replay of the batch at the head (a crash
    after the head, before Spark's commit) may still write partitions under the head's receipt_ts,
    so "at or before the head" is never taken for "seen": the no-op decision looks at every
    partition a version lacks (planning.quick_covered), and reconciliation keeps the arrivals it
    saw at its head (tidemark/orchestration/reconcile.py, `Cursor`).
  - `reach_complete.json`: the index covers every partition of the lake. The stream writes it when
    it starts on a lake without receipt partitions; `tidemark reindex` (receipts.reindex: the
    migration of a lake written before the index) writes it after indexing every existing partition. Without it,
    planning reads every marker as before.
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Protocol

from tidemark.base import layout, times
from tidemark.base.logs import get_logger
from tidemark.store.lake import Lake

log = get_logger("receipts")

HEAD = "head.json"
COMPLETE = "reach_complete.json"


class PartitionKey(Protocol):
    """What names a receipt partition: a marker (receipts.ReceiptPartition) or a listing's entry."""

    @property
    def event_date(self) -> date:
        """The partition's event date."""
        ...

    @property
    def receipt_ts(self) -> str:
        """The partition's receipt time, YYYYMMDDTHHMMSSmmmZ."""
        ...


class RegisteredPartition(PartitionKey, Protocol):
    """A partition as the index registers it: its key and the latest end of its panes."""

    @property
    def max_event_ts(self) -> str:
        """The latest end of the partition's panes (ISO)."""
        ...


def reached_dates(partition: RegisteredPartition) -> list[date]:
    """The dates after the partition's own into which its panes reach (their last events' dates)."""
    own = partition.event_date
    last = times.parse_iso(partition.max_event_ts).date()
    return [own + timedelta(days=n) for n in range(1, (last - own).days + 1)]


def register(lake: Lake, partition: RegisteredPartition) -> None:
    """Write the partition's reach entries (before its marker: see the module's docstring)."""
    for into in reached_dates(partition):
        lake.reach_entry(into, partition.event_date, partition.receipt_ts).write_text_atomic("")


def record_end(lake: Lake, partition: RegisteredPartition) -> None:
    """Write the partition's end entry (before its marker: see the module's docstring)."""
    end_us = times.to_micros(times.parse_iso(partition.max_event_ts))
    lake.end_entry(partition.event_date, partition.receipt_ts, end_us).write_text_atomic("")


def ends(lake: Lake, event_date: date) -> dict[str, str]:
    """receipt_ts -> the latest end of its panes, for the partitions of event_date with an end entry.

    Ends in ISO with microseconds; partitions complete or not (one listing). A partition with several (a
    batch replayed after a crash inside it, whose replay reached other verdicts, rewrote the
    partition and registered another end) answers the latest: planning may then take a partition
    whose panes all end before lo (their rows are skipped when read), never leave out one that
    reaches it.
    """
    out: dict[str, int] = {}
    for name in lake.ends_dir(event_date).names():
        receipt_ts, _, end_us = name.partition("__")
        try:
            key, end = layout.check_receipt_ts(receipt_ts), int(end_us)
        except (layout.InvalidPartitionValue, ValueError):
            continue  # a hidden temporary file, or a stranger's
        out[key] = max(end, out.get(key, end))
    return {key: times.iso_from_micros(end) for key, end in out.items()}


def record_arrival(lake: Lake, partition: RegisteredPartition) -> None:
    """Write the partition's arrival entry (first of all its registration: see the module's docstring)."""
    lake.arrival_entry(partition.receipt_ts, partition.event_date).write_text_atomic("")


def arrivals(lake: Lake, since: str | None, through: str | None = None) -> set[tuple[str, date]]:
    """(receipt_ts, event_date) of the arrival entries received from `since` through `through`.

    (receipt_ts, event_date) of the arrival entries received at or after `since` up to `through`
    (inclusive; None: up to the newest, in-flight batches included): one listing of the arrival
    days (few: `tidemark gc` prunes those reconciliation has passed) and one per day in between,
    whatever the lake's age.
    """
    if since is None:
        raise ValueError("arrivals() needs a start: without one every date may have changed")
    first = layout.parse_receipt_ts(since).date()
    last = layout.parse_receipt_ts(through).date() if through else None
    out = set()
    for day in arrival_days(lake):
        if day < first or (last and day > last):
            continue
        for name in lake.arrivals_dir(day).names():
            receipt_ts, _, event_date = name.partition("__")
            try:
                if since <= layout.check_receipt_ts(receipt_ts) and (not through or receipt_ts <= through):
                    out.add((receipt_ts, layout.as_event_date(event_date)))
            except layout.InvalidPartitionValue:
                continue  # a hidden temporary file, or a stranger's
    return out


def arrival_days(lake: Lake) -> list[date]:
    """The receipt days that have arrival entries, in order (as their folders name them)."""
    return lake.arrivals_root().partition_dates("day")


def arrived(lake: Lake, after: str | None, through: str | None = None) -> set[date]:
    """The event dates of the partitions received after `after` up to `through`.

    `after` is exclusive, `through` inclusive (None: up to the newest): `arrivals`' dates.
    """
    if after is None:
        raise ValueError("arrived() needs a start: without one every date may have changed")
    return {event_date for receipt_ts, event_date in arrivals(lake, after, through) if receipt_ts > after}


ARRIVALS_PRUNED = "arrivals_pruned.json"


def arrivals_pruned_before(lake: Lake) -> date | None:
    """The first receipt day whose arrival entries are all kept (older days may be pruned), or None."""
    payload = lake.receipt_index_file(ARRIVALS_PRUNED).read_json()
    return None if not payload else layout.as_event_date(payload["before"])


def prune_arrivals(lake: Lake, keep_from: date, dry_run: bool = False) -> list[date]:
    """Remove the arrival entries of receipt days before `keep_from`; returns the days removed.

    The horizon is recorded first: a reconciliation pass whose previous pass stopped before it
    walks every date instead of reading arrivals that may be gone.
    """
    days = [d for d in arrival_days(lake) if d < keep_from]
    if days and not dry_run:
        recorded = arrivals_pruned_before(lake)
        if recorded is None or recorded < keep_from:
            lake.receipt_index_file(ARRIVALS_PRUNED).write_json_atomic(
                {"before": layout.event_date_text(keep_from), "at": times.now_iso_z()}
            )
        for day in days:
            lake.arrivals_dir(day).delete()
    return days


def reaching(lake: Lake, into: date) -> list[tuple[date, str]]:
    """(event_date, receipt_ts) of the partitions of earlier dates registered as reaching `into`."""
    out = []
    for name in lake.reach_dir(into).names():
        event_date, _, receipt_ts = name.partition("__")
        try:
            out.append((layout.as_event_date(event_date), layout.check_receipt_ts(receipt_ts)))
        except layout.InvalidPartitionValue:
            continue  # a hidden temporary file, or a stranger's
    return out


def write_head(lake: Lake, receipt_ts: str) -> None:
    """Record receipt_ts as the newest fully written batch."""
    lake.receipt_index_file(HEAD).write_json_atomic({"receipt_ts": layout.check_receipt_ts(receipt_ts)})


def head(lake: Lake) -> str | None:
    """The newest batch whose partitions are all complete, or None (no stream wrote one yet)."""
    payload = lake.receipt_index_file(HEAD).read_json()
    return None if not payload else layout.check_receipt_ts(payload["receipt_ts"])


def is_complete(lake: Lake) -> bool:
    """Whether every receipt partition of the lake is registered in the index."""
    return lake.receipt_index_file(COMPLETE).exists()


def mark_complete(lake: Lake, how: str) -> None:
    """Record that the index holds every receipt partition (`how`: what registered them)."""
    lake.receipt_index_file(COMPLETE).write_json_atomic({"since": how, "at": times.now_iso_z()})


def start(lake: Lake) -> None:
    """At a stream's start: on a lake without receipt partitions, the index is complete from here on."""
    if not is_complete(lake) and not lake.sessions_root().event_dates():
        mark_complete(lake, "the first stream on an empty lake")
        log.info("receipt index started", lake=lake)
