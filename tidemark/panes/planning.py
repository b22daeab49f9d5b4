"""Which receipt partitions a deduplication of one event date must read.

From the receipt index's listings and markers (no Spark, no data file).

The dedup of D publishes the sessions starting on D. With `D0` = D 00:00 UTC:

- no event before `lo = D0 - gap` can belong to a session starting on D (a session starting at
  s >= D0 is preceded by a gap, so nothing at or before s - gap joins it, and s - gap >= lo);
- a pane holds a subset of one final session and its event_date is its own start, never later than
  any of its events; so the panes that matter are in receipt partitions whose marker's
  `max_event_ts >= lo` and whose event_date is at most `hi`;
- `hi` is the last date on which a pane can still start and join a session touching D. Once every
  pane up to hi is read, the sessions touching D (starting on D, or starting earlier and still going
  on D) are known up to the latest end among them, the *reach*; a pane starting later than
  `reach + gap` cannot join them. So hi = max(D+1, date(reach + gap)), and reading more panes can
  only move the reach later: the plan is grown and recomputed until hi stops moving.

Following every session that touches D, not only those starting on D, matters twice: a session
started days earlier may be extended by a late fragment two or more dates later, and the run of D
must read that fragment to see (and report as affected) the earlier date its session really starts
on; and a version's recorded reach must say how far its sessions go, so that the next run can plan
the complete set of receipts *before* deciding it has nothing new to do.

A version records `hi` and `reach` (tidemark.deduplication.dedup writes them); `plan_for_rerun` rebuilds the plan
a version would make today from them. If that plan holds only receipts the version includes, the
same input gives the same islands and the same reach: the rerun is a no-op without Spark. A version
without a recorded reach (written by an older tidemark) never counts as covering anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone

from tidemark.base import layout, times
from tidemark.base.session_rules import SessionRules
from tidemark.panes import receipt_index, receipts
from tidemark.store.lake import Lake
from tidemark.store.version_record import VersionRecord


def midnight(day: date) -> datetime:
    """The start of `day`, UTC."""
    return datetime.combine(day, datetime.min.time(), tzinfo=timezone.utc)


def receipt_key(event_date: date, receipt_ts: str) -> str:
    """How versions name the receipt partitions they include: 'YYYY-MM-DD/receipt_ts'."""
    return f"{layout.event_date_text(event_date)}/{receipt_ts}"


class LakeIndex:
    """The complete receipt partitions of a lake and their markers, read as a run needs them.

    With a complete receipt index (tidemark/panes/receipt_index.py) a plan lists the dates in
    [date(lo), hi] (`ending_after`: no marker read but those of partitions without an end entry)
    and reads the markers of one reach folder; without it (a lake written before the index, until
    `tidemark reindex`), every marker up to hi.
    """

    def __init__(self, lake: Lake) -> None:
        """The index of `lake`'s receipt partitions, read lazily and cached for one plan."""
        self.lake = lake
        # Read before any listing: every partition at or before the head was complete by then, so a
        # version planned from this index has seen all of them (planned_through).
        self.head = receipt_index.head(lake)
        self.indexed = receipt_index.is_complete(lake)
        self._dates: list[date] | None = None
        self._markers: dict[date, list[receipts.ReceiptPartition]] = {}
        self._reaching: dict[date, list[receipts.ReceiptPartition]] = {}
        self._ending: dict[tuple[date, datetime], list[receipts.ReceiptPartition | receipts.ReceiptRef]] = {}

    @property
    def dates(self) -> list[date]:
        """Every event date of the lake (the planner without an index lists them all)."""
        if self._dates is None:
            self._dates = receipts.list_event_dates(self.lake)
        return self._dates

    def partitions(self, event_date: date) -> list[receipts.ReceiptPartition]:
        """The complete partitions of event_date, their markers read."""
        if event_date not in self._markers:
            # one listing, then the markers read concurrently; a folder without one (incomplete)
            # reads as None and is dropped: no separate existence check per partition
            stamps = receipts.list_receipt_names(self.lake, event_date)
            self._markers[event_date] = self.markers([(event_date, ts) for ts in stamps])
        return self._markers[event_date]

    def reaching(self, into: date) -> list[receipts.ReceiptPartition]:
        """The complete partitions of earlier dates whose panes reach into `into` (the index)."""
        if into not in self._reaching:
            self._reaching[into] = self.markers(receipt_index.reaching(self.lake, into))
        return self._reaching[into]

    def markers(self, keys: list[tuple[date, str]]) -> list[receipts.ReceiptPartition]:
        """The markers of complete partitions among (event_date, receipt_ts) keys."""
        return receipts.read_markers(self.lake, keys)

    def ending_after(self, event_date: date, lo: datetime) -> list[receipts.ReceiptPartition | receipts.ReceiptRef]:
        """The complete partitions of event_date whose panes end at or after lo, from listings.

        The date's markers by name and, when its midnight is before lo, its end entries (a
        partition without one, registered before they existed, has its marker read).
        """
        key = (event_date, lo)
        if key not in self._ending:
            stamps = receipts.complete_names(self.lake, event_date)
            found: list[receipts.ReceiptRef | receipts.ReceiptPartition]
            if midnight(event_date) >= lo:
                # every pane of the date starts at or after its midnight: all of them reach lo
                found = [receipts.ReceiptRef(self.lake, event_date, ts) for ts in stamps]
            else:
                ends = receipt_index.ends(self.lake, event_date)
                found = [receipts.ReceiptRef(self.lake, event_date, ts, ends[ts]) for ts in stamps if ts in ends]
                found += self.markers([(event_date, ts) for ts in stamps if ts not in ends])
                found = [p for p in found if times.parse_iso(p.max_event_ts) >= lo]
            self._ending[key] = found
        return self._ending[key]

    def has_dates_after(self, event_date: date) -> bool:
        """Whether the lake holds receipt partitions of a date after event_date."""
        return any(d > event_date for d in self.dates)


@dataclass
class Plan:
    """The receipt partitions one run of event_date reads: those ending at or after lo, of dates up to hi."""

    event_date: date
    lo: datetime
    hi: date
    partitions: list[receipts.ReceiptPartition | receipts.ReceiptRef]  # a marker read, or known from listings
    # The receipt index's head when the plan was made (LakeIndex.head): every partition received at
    # or before it that the plan needs is in it. A version records it; None: unknown.
    planned_through: str | None = None

    @property
    def keys(self) -> list[str]:
        """The plan's partitions as 'YYYY-MM-DD/receipt_ts' keys, sorted."""
        return sorted(receipt_key(p.event_date, p.receipt_ts) for p in self.partitions)

    @property
    def max_receipt_ts(self) -> str | None:
        """The newest receipt_ts among the plan's partitions (None: none)."""
        return max((p.receipt_ts for p in self.partitions), default=None)

    @property
    def rows(self) -> int:
        """Pane rows of the plan's partitions.

        (the markers of those known from listings are read, concurrently, only when this is
        asked: a full run's report).
        """
        receipts.load_markers([p for p in self.partitions if isinstance(p, receipts.ReceiptRef)])
        return sum(p.rows for p in self.partitions)


def lo_of(event_date: date, rules: SessionRules) -> datetime:
    """The earliest instant a pane can end and still join a session of event_date.

    split_gap, not gap: under the `merge` boundary an event exactly one gap before s still joins
    the session (tidemark/base/session_rules.py), so the bound is one microsecond earlier.
    """
    return midnight(event_date) - rules.split_gap


def needed_hi(event_date: date, rules: SessionRules, reach: datetime | None) -> date:
    """The last event date whose panes can join a session of event_date reaching `reach`.

    `reach` is the latest end of the sessions touching event_date; the answer is the next day at
    least (a session starting on D crossing midnight).
    """
    floor = event_date + timedelta(days=1)
    if reach is None:
        return floor
    # A pane starting at p joins when p - reach < split_gap (<= gap under `merge`); p = midnight of
    # date(reach + split_gap) is the boundary case, included (one date too many is only a cost, one
    # too few loses events).
    return max(floor, (reach + rules.split_gap).date())


def scope(event_date: date, rules: SessionRules, hi: date) -> list[date]:
    """The dates whose every partition a plan up to `hi` must look at: date(lo) .. hi.

    Partitions of earlier dates can matter only through the receipt index's reach entries into
    date(lo).
    """
    first = lo_of(event_date, rules).date()
    return [first + timedelta(days=n) for n in range((hi - first).days + 1)]


def plan(index: LakeIndex, event_date: date, rules: SessionRules, hi: date) -> Plan:
    """The receipt partitions up to `hi` that can hold events of the sessions touching event_date."""
    lo = lo_of(event_date, rules)
    if index.indexed:
        dates = scope(event_date, rules, hi)
        reaching = [p for p in index.reaching(dates[0]) if times.parse_iso(p.max_event_ts) >= lo]
        found = [p for d in dates for p in index.ending_after(d, lo)] + reaching
    else:
        found = [
            p for d in index.dates if d <= hi for p in index.partitions(d) if times.parse_iso(p.max_event_ts) >= lo
        ]
    chosen = sorted(found, key=lambda p: (p.event_date, p.receipt_ts))
    return Plan(event_date, lo, hi, chosen, index.head)


def quick_covered(index: LakeIndex, event_date: date, rules: SessionRules, previous: VersionRecord | None) -> bool:
    """Whether `previous` includes every partition today's plan holds: the no-op decision.

    Whether `previous` (a version made under `rules`) includes every partition today's plan
    holds, without reading the markers of the partitions it includes: the no-op decision, the
    same answer as `covers(previous, plan_for_rerun(...).keys)` from listings.

    Every partition the version lacks is looked at, whatever its receipt_ts: a batch replayed after
    a crash that followed its head writes, after the head, partitions under that head's receipt_ts
    (an input read differently, other verdicts), so "received after planned_through" cannot tell
    what is new. What keeps it cheap: the scope's date folders and the reach folder are listed (as
    the plan lists them); of the partitions the version lacks, those of dates before lo's midnight
    (most of date(lo) and the reach entries' dates, which end before lo) are dropped by their end
    entries, one listing per such date; only the rest have their markers read (the new ones, and
    partitions never completed). False also means "not known": the caller makes the whole plan (a
    lake without the index, a version that recorded no reach).
    """
    known, reach = recorded_reach(previous)
    if not (index.indexed and known):
        return False
    assert previous is not None  # a recorded reach came from it
    hi = needed_hi(event_date, rules, reach)
    if previous.hi:
        hi = max(hi, previous.hi)
    lo = lo_of(event_date, rules)
    included = set(previous.receipts)
    dates = scope(event_date, rules, hi)
    listed = [(d, ts) for d in dates for ts in receipts.list_receipt_names(index.lake, d)]
    listed += receipt_index.reaching(index.lake, dates[0])
    unseen = [key for key in listed if receipt_key(*key) not in included]
    candidates = _may_reach(index.lake, unseen, lo)
    return not any(times.parse_iso(p.max_event_ts) >= lo for p in index.markers(candidates))


def _may_reach(lake: Lake, keys: list[tuple[date, str]], lo: datetime) -> list[tuple[date, str]]:
    """Those (event_date, receipt_ts) whose panes may end at or after lo.

    Every one of a date starting at or after lo; of an earlier date, those whose end entry is at
    or after lo or that have none (registered before end entries existed).
    """
    stamps_of: dict[date, list[str]] = {}  # receipt_ts by event date
    for event_date, receipt_ts in keys:
        stamps_of.setdefault(event_date, []).append(receipt_ts)
    out = []
    for event_date, stamps in sorted(stamps_of.items()):
        # one listing of the date's end entries, not a marker read per partition: a no-op
        # decision reads no marker when nothing that can matter arrived
        if midnight(event_date) < lo:
            ends = receipt_index.ends(lake, event_date)
            stamps = [ts for ts in stamps if ts not in ends or times.parse_iso(ends[ts]) >= lo]
        out += [(event_date, ts) for ts in stamps]
    return out


def recorded_reach(version: VersionRecord | None) -> tuple[bool, datetime | None]:
    """(whether the version recorded its reach, the reach or None when no session touches D)."""
    if version is None or not version.records("reach"):
        return False, None
    return True, version.reach


def plan_for_rerun(index: LakeIndex, event_date: date, rules: SessionRules, previous: VersionRecord | None) -> Plan:
    """The plan a run of event_date starts from.

    As far as the previous version's sessions reach (they can only reach further with more
    receipts), never less far than the previous version read.
    """
    _, reach = recorded_reach(previous)
    hi = needed_hi(event_date, rules, reach)
    if previous and previous.hi:
        hi = max(hi, previous.hi)
    return plan(index, event_date, rules, hi)


def grown(index: LakeIndex, current: Plan, rules: SessionRules, reach: datetime | None) -> Plan | None:
    """The plan to recompute with once a computation over `current` found `reach`, or None.

    None when `current` already holds every receipt partition that can matter (its islands are
    final).
    """
    hi = max(current.hi, needed_hi(current.event_date, rules, reach))
    if hi == current.hi:
        return None
    bigger = plan(index, current.event_date, rules, hi)
    if bigger.keys == current.keys:
        current.hi = hi  # no receipt in the extra dates: same islands, record how far we looked
        return None
    return bigger


def covers(version: VersionRecord | None, keys: list[str]) -> bool:
    """Whether `version` was computed from (at least) the receipts `keys` under today's planning."""
    known, _ = recorded_reach(version)
    return known and version is not None and set(keys) <= set(version.receipts)
