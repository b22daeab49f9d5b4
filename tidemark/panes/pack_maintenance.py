"""The maintenance pass that packs closed dates (`tidemark gc`, then the maintenance DAG's `pack` task).

Why: a dedup writes a pack (tidemark/panes/pack_cache.py) only when a full dedup of a date has just read
PACK_AT of its receipt partitions one by one: the first full dedup of a date with 8,640 receipts
pays for every tiny file (BENCHMARKS.md section 7), at the moment a correction waits for it. This
pass packs those dates ahead, off the correction's path, once they are closed.

- Closed: a date whose end (the next midnight) is older than the lake's watermark delay + allowed
  lateness (its rules record: tidemark/session/rules_record.py) + SETTLE. The stream's on-time
  panes of such a date are all written; what can still come is late data, a few receipts that a
  reader takes from their folders beside the pack.
- Packed: a closed date with PACK_AT or more complete receipt partitions that no usable pack holds
  (a pack of the dedup's columns, pane_reader.DEDUP_COLUMNS). The new pack holds every complete
  receipt partition of the date (a reader uses one pack per date: pack_cache.best), read with pyarrow
  (pane_reader.read_table, no Spark), data files first, the manifest last (pack_cache.write_manifest).
  The pack it supersedes goes with `tidemark gc` after the retention.
- Budget: at most BUDGET receipt partitions read per pass, newest dates first (what a correction is
  likeliest to read next); a date over the budget waits for the next pass.
- Cost independent of the lake's age: the pass records, in `_packs/_packing.json`, the receipt
  index's head it started from, the newest date that was closed then, and the dates the budget
  left. The next pass examines only those dates, the dates closed since, and the dates that
  received receipt partitions since that head (the receipt index's arrival entries:
  receipt_index.arrived); the first pass, or one after `tidemark gc` pruned the arrivals it would
  need, examines every date once.
- Idempotent and kill-safe: the state is written at the end of a pass. A pass killed between a
  pack's data and its manifest leaves a folder readers ignore and `tidemark gc` removes; the next
  pass starts from the old state and packs that date anew. A second pass packs nothing.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from datetime import date, datetime, timedelta, timezone
from typing import Any

import pyarrow.parquet as pq

from tidemark.base import layout, times
from tidemark.base.logs import get_logger
from tidemark.base.progress import Display, tracked
from tidemark.panes import pack_cache, pane_reader, receipt_index, receipts
from tidemark.session import rules_record
from tidemark.session.sessions import SessionRules
from tidemark.store.lake import Lake
from tidemark.store.locations import File

log = get_logger("packing")

# Receipt partitions read per pass: about 6 dates of a 10 s trigger's 8,640 a day, a few minutes of
# pyarrow on one core; a backlog (the first pass on an old lake) is worked off over a few passes.
BUDGET = 50_000
# After the watermark delay and allowed lateness, an hour more before a date counts as closed: the
# stream's last on-time batch for it, and a notice's dedup, have long finished.
SETTLE = timedelta(hours=1)
STATE = "_packing.json"
STATE_FORMAT = 1


@dataclass(frozen=True)
class Packed:
    """One date the pass packed (or, in a dry run, would pack)."""

    event_date: date
    receipts: int  # receipt partitions the pack holds
    pack_id: str | None  # None: a dry run
    rows: int | None
    seconds: float

    def to_json(self) -> dict[str, Any]:
        """The packed date as a JSON object (`tidemark gc`'s lines; the date as YYYY-MM-DD)."""
        return {**asdict(self), "event_date": layout.event_date_text(self.event_date)}


@dataclass
class PassResult:
    """What one packing pass did."""

    packed: list[Packed] = field(default_factory=list)
    examined: int = 0  # dates whose receipt partitions were listed
    left: list[date] = field(default_factory=list)  # dates over this pass's budget: the next pass's
    how: str = ""  # which dates were examined: "what changed" or "every date"
    dry_run: bool = False


def newest_closed(rules: SessionRules, now: datetime) -> date:
    """The newest date closed at `now`.

    The newest date whose end (the next midnight) is older than watermark delay + allowed
    lateness + SETTLE before `now`.
    """
    horizon = now - (rules.watermark_delay + rules.allowed_lateness + SETTLE)
    return (horizon - timedelta(microseconds=1)).date() - timedelta(days=1)


def state_file(lake: Lake) -> File:
    """Where the pass records where it stopped (`_packs/_packing.json`)."""
    return lake.packs_root().file(STATE)


@dataclass(frozen=True)
class PassState:
    """Where the last pass stopped, as `_packs/_packing.json` records it."""

    head: str | None  # the receipt index's head the pass started from
    closed_through: date  # the newest date that was closed then
    left: list[date]  # the dates over that pass's budget


def read_state(lake: Lake) -> PassState | None:
    """The last pass's state, or None.

    None when no pass ran yet, or the state is one this tidemark cannot read: every date is then
    examined once more, which is only slower.
    """
    state = state_file(lake).read_json()
    if not state or state.get("format") != STATE_FORMAT:
        return None
    try:
        return PassState(
            head=layout.check_receipt_ts(state["head"]) if state.get("head") else None,
            closed_through=layout.as_event_date(state["closed_through"]),
            left=[layout.as_event_date(d) for d in state.get("left", [])],
        )
    except (KeyError, TypeError, layout.InvalidPartitionValue):
        return None


def _candidates(lake: Lake, state: PassState | None, closed: date) -> tuple[list[date], str]:
    """(closed dates to examine, how they were found)."""
    pruned = receipt_index.arrivals_pruned_before(lake)
    if state is None or state.head is None or (pruned and pruned > layout.parse_receipt_ts(state.head).date()):
        return [d for d in receipts.list_event_dates(lake) if d <= closed], "every date"
    found = set(state.left)
    # the dates closed since the last pass (one a day on a daily schedule): a listing each
    day = state.closed_through + timedelta(days=1)
    while day <= closed:
        found.add(day)
        day += timedelta(days=1)
    # the dates that received receipt partitions since (late data into closed dates)
    found |= receipt_index.arrived(lake, state.head)
    return sorted(d for d in found if d <= closed), "what changed"


def unpacked(lake: Lake, event_date: date) -> tuple[list[str], int]:
    """(every complete receipt partition of the date, how many of them no usable pack holds)."""
    stamps = receipts.complete_names(lake, event_date)
    held: set[str] = set()
    if len(stamps) >= pack_cache.PACK_AT:  # fewer: never worth a listing of the packs
        for pack in pack_cache.complete(lake, event_date, pane_reader.DEDUP_COLUMNS):
            held |= pack.receipts
    return stamps, len(set(stamps) - held)


def write_pack(lake: Lake, event_date: date, stamps: list[str]) -> pack_cache.Pack | None:
    """Write a pack of the date's receipt partitions `stamps` with pyarrow.

    The data files first, then the manifest. None when those partitions hold no pane file.
    """
    folders = [lake.receipt_dir(event_date, ts) for ts in stamps]
    data_columns = [c.name for c in pane_reader.DEDUP_PANE]
    table = pane_reader.read_table(lake.sessions_root(), folders, data_columns)
    if table is None:
        return None
    pack_id = pack_cache.new_pack_id()
    fs, folder = lake.pack_dir(event_date, pack_id).at()
    fs.create_dir(folder, recursive=True)
    names = []
    per_file = -(-table.num_rows // pack_cache.FILES) or 1
    for index in range(pack_cache.FILES):
        part = table.slice(index * per_file, per_file)
        if index and not part.num_rows:
            break
        name = f"part-{index:05d}.parquet"
        pq.write_table(part, f"{folder}/{name}", filesystem=fs)
        names.append(name)
    return pack_cache.write_manifest(
        lake, event_date, pack_id, stamps, names, table.num_rows, pane_reader.DEDUP_COLUMNS
    )


def run_pass(
    lake: Lake,
    now: datetime | None = None,
    budget: int = BUDGET,
    dry_run: bool = False,
    display: Display | None = None,
) -> PassResult:
    """Pack the closed dates that need it (see the module's docstring).

    Dry_run: say which, write nothing. Reports its progress over the dates (logs, and `display`:
    the CLI's terminal bar).
    """
    now = now or datetime.now(timezone.utc)
    rules, _, _ = rules_record.rules_in_force(lake)
    closed = newest_closed(rules, now)
    # Read before any listing: every partition received after it is found next time (arrivals).
    head = receipt_index.head(lake)
    dates, how = _candidates(lake, read_state(lake), closed)
    result = PassResult(how=how, dry_run=dry_run)
    spent = 0
    newest_first = sorted(dates, reverse=True)
    for event_date in tracked(newest_first, "packing closed dates", log=log, display=display, lake=lake):
        stamps, loose = unpacked(lake, event_date)
        result.examined += 1
        if loose < pack_cache.PACK_AT:
            continue
        if spent and spent + len(stamps) > budget:
            result.left.append(event_date)  # over this pass's budget (a date alone over it still goes)
            continue
        spent += len(stamps)
        started = time.monotonic()
        pack = None if dry_run else write_pack(lake, event_date, stamps)
        done = Packed(
            event_date,
            len(stamps),
            pack.pack_id if pack else None,
            pack.rows if pack else None,
            round(time.monotonic() - started, 3),
        )
        result.packed.append(done)
        log.info("date packed" if not dry_run else "date would be packed", **done.to_json())
    if not dry_run:
        state_file(lake).write_json_atomic(
            {
                "format": STATE_FORMAT,
                "head": head,
                "closed_through": layout.event_date_text(closed),
                "left": [layout.event_date_text(d) for d in sorted(result.left)],
                "at": times.now_iso_z(),
            },
        )
    log.info(
        "packing pass",
        how=how,
        examined=result.examined,
        packed=len(result.packed),
        left=len(result.left),
        partitions=spent,
        dry_run=dry_run,
    )
    return result
