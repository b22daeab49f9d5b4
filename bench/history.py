"""Cost against the lake's age (issue 27): planning on lakes with 10^3 .. 10^6 receipt partitions.

    .venv/bin/python -m bench.history [--sizes 1000,10000,100000] [--latency-ms 30]

For each size it builds a lake of receipt-partition markers at the density of a 10 s trigger (one
partition of the current date per micro-batch, and one of an earlier date, up to 30 days back, in
10% of them; a few sessions run past midnight), written through the stream's registration path
(`receipts.complete_all`: reach entries, then markers; `receipt_index.write_head` after each batch).
Planning reads markers and folders only, so the panes' Parquet files are not written (what a
1M-partition lake of real files would cost to build, for no figure that changes).

Measured, each with the receipt index and with the planning that reads every marker (the lake's
`reach_complete.json` hidden), wall time and the storage operations counted at the filesystem layer
(list calls, metadata reads, objects opened: the figures that hold for a bucket):
  1. the no-op decision for the newest date, with a version planned a few batches earlier;
  2. planning a correction of the newest date, and of a date 30 days back;
  3. one reconciliation pass, every date with a version (committed to the lake's Iceberg table, no
     data files: reconciliation reads versions' records, never their data), 15 minutes of traffic
     (90 batches, some late) after the previous pass: the pass from what changed against the walk
     of every date (`tidemark reconcile --full`, the only way before the arrivals log). Main before
     it (d5cb773) also checked every receipt partition's marker on every pass (one stat each).
  4. one stream micro-batch's fixed cost (listing, source log, commit) with the landing at 10^3 ..
     10^6 files, before and after the bounded landing: `--landing-sizes`, bench/landing_age.py
     (bench/results/landing_age.md).
With --latency-ms, every storage operation sleeps that long first (a bucket's round trip; marker
reads run 16 at a time, as planning does).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import time
from contextlib import contextmanager
from datetime import date, datetime, timedelta, timezone

import pyarrow.fs as pafs

from bench import counting_fs, write_results
from tidemark.base import layout, times
from tidemark.base.session_rules import SessionRules
from tidemark.panes import planning, receipt_index, receipts
from tidemark.store import storage
from tidemark.store.lake import Lake
from tidemark.store.version_record import VersionRecord

RULES = SessionRules()
START = datetime(2026, 1, 1, tzinfo=timezone.utc)


class CountingHandler(counting_fs.CountingHandler):
    """Counts (and optionally delays) every operation planning makes, by kind; deletes and moves
    are neither counted nor delayed."""

    delay_changes = False

    def __init__(self, latency_s: float = 0.0):
        super().__init__(latency_s)
        self.counts = {"list": 0, "listed": 0, "stat": 0, "read": 0, "write": 0}

    def count(self, op: str, path: str, n: int = 1) -> None:
        if op != "change":
            with self.lock:
                self.counts[op] += n

    def listed(self, names: int) -> None:
        with self.lock:  # a bucket returns 1,000 names per list call: what a listing's size costs there
            self.counts["listed"] += names


@contextmanager
def counted(latency_ms: float):
    """storage.resolve hands out the counting filesystem for local paths while this runs."""
    handler = CountingHandler(latency_ms / 1000)
    fs = pafs.PyFileSystem(handler)
    original = storage.resolve

    def resolve(uri):
        inner, path = original(uri)
        return (fs, path) if isinstance(inner, pafs.LocalFileSystem) else (inner, path)

    original_is_local, original_locate = storage.is_local, Lake.locate
    storage.resolve = resolve
    Lake.locate = lambda lake, uri: resolve(uri)  # every file operation of a Lake goes through locate
    # still local (the table's catalog is found by it); pyiceberg reads the table's metadata through
    # its own FileIO, which this does not count
    storage.is_local = lambda uri: isinstance(original(uri)[0], pafs.LocalFileSystem)
    try:
        yield handler.counts
    finally:
        storage.resolve = original
        storage.is_local = original_is_local
        Lake.locate = original_locate


def build(lake: Lake, partitions: int, seed: int = 0, chunk: int = 256) -> tuple[str, int]:
    """A lake of `partitions` receipt partitions; returns (the newest date, batches written).

    The partitions of `chunk` consecutive batches go through one `receipts.complete_all` (the
    stream's registration path, its writes 16 at a time), then the head moves to the chunk's last
    batch: as after `chunk` micro-batches, the head never ahead of a partition not complete. The
    same lake as one batch at a time, ~4x faster to build (10^6 partitions become feasible)."""
    rng = random.Random(seed)
    receipt_index.start(lake)
    written, batch = 0, 0
    pending: list[receipts.ReceiptPartition] = []
    while written < partitions:
        received = START + timedelta(seconds=10 * batch)
        receipt_ts = layout.format_receipt_ts(received)
        dates = [received.date()]
        if rng.random() < 0.1:
            dates.append(received.date() - timedelta(days=rng.randrange(1, 31)))
        for day in sorted(set(dates)):
            begin = datetime.combine(day, datetime.min.time(), tzinfo=timezone.utc) + timedelta(
                seconds=rng.randrange(86400)
            )
            span = timedelta(hours=rng.randrange(30)) if rng.random() < 0.02 else timedelta(minutes=rng.randrange(40))
            pending.append(
                receipts.ReceiptPartition(
                    event_date=day,
                    receipt_ts=receipt_ts,
                    batch_id=batch,
                    uri="",
                    rows=1,
                    events=1,
                    pane_kinds=["early"],
                    min_event_ts=times.iso_z(begin),
                    max_event_ts=times.iso_z(begin + span),
                    watermark=times.iso_z(received),
                    late=day < received.date(),
                )
            )
            written += 1
        batch += 1
        if batch % chunk == 0 or written >= partitions:
            receipts.complete_all(lake, pending)
            receipt_index.write_head(lake, receipt_ts)
            pending = []
    return (START + timedelta(seconds=10 * (batch - 1))).date().isoformat(), batch


def late_data(lake: Lake, first_batch: int, count: int, newest: str) -> None:
    """`count` more batches, each one partition of a date 2-20 days before `newest`."""
    rng = random.Random(first_batch)
    for batch in range(first_batch, first_batch + count):
        received = START + timedelta(seconds=10 * batch)
        day = datetime.fromisoformat(newest).date() - timedelta(days=rng.randrange(2, 21))
        begin = datetime.combine(day, datetime.min.time(), tzinfo=timezone.utc) + timedelta(hours=12)
        receipt_ts = layout.format_receipt_ts(received)
        receipts.complete_all(
            lake,
            [
                receipts.ReceiptPartition(
                    event_date=day,
                    receipt_ts=receipt_ts,
                    batch_id=batch,
                    uri="",
                    rows=1,
                    events=1,
                    pane_kinds=["too_late"],
                    min_event_ts=times.iso_z(begin),
                    max_event_ts=times.iso_z(begin),
                    watermark=times.iso_z(received),
                    late=True,
                )
            ],
        )
        receipt_index.write_head(lake, receipt_ts)


def _version(lake: Lake, event_date: date) -> VersionRecord:
    index = planning.LakeIndex(lake)
    current = planning.plan_for_rerun(index, event_date, RULES, None)
    reach = max((times.parse_iso(p.max_event_ts) for p in current.partitions), default=None)
    return VersionRecord.holding(
        event_date=event_date,
        run_id="0" * 32,  # a plan only: no run folder
        receipts=tuple(current.keys),
        hi=layout.as_event_date(current.hi),
        reach=reach,
        planned_through=current.planned_through,
    )


@contextmanager
def without_index(lake: Lake):
    flag = lake.receipt_index_file(receipt_index.COMPLETE)
    os.rename(flag, flag + ".off")
    try:
        yield
    finally:
        os.rename(flag + ".off", flag)


def measure(fn, latency_ms: float) -> tuple[float, dict]:
    with counted(latency_ms) as counts:
        started = time.perf_counter()
        fn()
        return time.perf_counter() - started, dict(counts)


BUILT = "_bench_built.json"  # in a lake as build() left it: (newest date, batches), for --reuse


def run_size(size: int, latency_ms: float, root: str, baseline: bool = True, reuse: bool = False) -> list[list]:
    # each latency measures a new lake in the same state (a new path: the Iceberg catalog of a
    # removed lake stays cached in the process)
    lake = Lake.open(os.path.join(root, f"lake-{size}-{latency_ms:g}ms"))
    built = lake.file(BUILT).read_json() if reuse else None
    if built:  # a lake as build() left it (e.g. a hard-linked copy of one): 10^6 takes an hour here
        newest, batches = built["newest"], int(built["batches"])
        print(f"reusing {lake}: {size} partitions ({batches} batches, newest date {newest})", flush=True)
    else:
        started = time.monotonic()
        newest, batches = build(lake, size)
        lake.file(BUILT).write_json_atomic({"newest": newest, "batches": batches})
        print(
            f"built {size} partitions ({batches} batches, newest date {newest}) in {time.monotonic() - started:.0f} s",
            flush=True,
        )
    # planning takes dates; `newest` stays text for the built record and the results
    day = layout.as_event_date(newest)
    old = day - timedelta(days=30)
    version = _version(lake, day)
    # five more batches arrive after the version, with late data for other dates only: the no-op
    # decision has something to look at, as it has after every notice
    late_data(lake, batches, 5, newest)
    rows = []
    cases = [
        (
            "no-op decision, newest date",
            lambda: planning.quick_covered(planning.LakeIndex(lake), day, RULES, version),
            lambda: planning.covers(
                version, planning.plan_for_rerun(planning.LakeIndex(lake), day, RULES, version).keys
            ),
        ),
        (
            "plan a correction, newest date",
            lambda: planning.plan_for_rerun(planning.LakeIndex(lake), day, RULES, None),
            lambda: planning.plan_for_rerun(planning.LakeIndex(lake), day, RULES, None),
        ),
        (
            "plan a correction, 30 days back",
            lambda: planning.plan_for_rerun(planning.LakeIndex(lake), old, RULES, None),
            lambda: planning.plan_for_rerun(planning.LakeIndex(lake), old, RULES, None),
        ),
    ]
    for name, indexed, scanned in cases:
        seconds, ops = measure(indexed, latency_ms)
        before = ["not measured", ""]  # reading every marker: one read per partition (hours at 10^6, 30 ms)
        if baseline:
            with without_index(lake):
                before_s, before_ops = measure(scanned, latency_ms)
            before = [f"{before_s:.3f}", _ops(before_ops)]
        rows.append([f"{size:,}", name, latency_ms, *before, f"{seconds:.3f}", _ops(ops)])
        print(" | ".join(str(v) for v in rows[-1]), flush=True)
    rows.append(reconciliation(lake, size, batches + 5, newest, latency_ms))
    print(" | ".join(str(v) for v in rows[-1]), flush=True)
    return rows


def commit_versions(lake: Lake) -> int:
    """A version of every date including its complete receipt partitions, committed to the table
    without data files (a date without sessions): what reconciliation compares with."""
    from tidemark.iceberg import commits, run_markers
    from tidemark.session import rules_record

    dates = receipts.list_event_dates(lake)
    for event_date in dates:
        stamps = receipts.list_receipts(lake, event_date)
        marker = VersionRecord.holding(
            event_date=event_date,
            run_id=run_markers.new_run_id(),
            files=(),
            sessions=0,
            receipts=tuple(planning.receipt_key(event_date, ts) for ts in stamps),
            max_receipt_ts=stamps[-1],
            reach=None,
            hi=event_date,
            planned_through=receipt_index.head(lake),
            affected_dates=(),
            **rules_record.marker_fields(RULES),
        )
        run_markers.write_marker(lake, marker)
        commits.commit(lake, marker)
    return len(dates)


def reconciliation(lake: Lake, size: int, first_batch: int, newest: str, latency_ms: float) -> list:
    from tidemark.orchestration import reconcile
    from tidemark.session import rules_record

    rules_record.ensure(lake, RULES, "bench")
    if not os.path.exists(lake.reconcile_cursor()):
        started = time.monotonic()
        dates = commit_versions(lake)
        print(f"committed versions of {dates} dates in {time.monotonic() - started:.0f} s", flush=True)
    reconcile.staleness(lake, full=True)  # the previous pass
    late_data(lake, first_batch, 90, newest)  # 15 minutes of 10 s batches since
    changed_s, changed_ops = measure(lambda: reconcile.staleness(lake), latency_ms)
    walk_s, walk_ops = measure(lambda: reconcile.staleness(lake, full=True), latency_ms)
    return [
        f"{size:,}",
        "one reconciliation pass, 15 min after the last",
        latency_ms,
        f"{walk_s:.3f}",
        _ops(walk_ops),
        f"{changed_s:.3f}",
        _ops(changed_ops),
    ]


def _ops(counts: dict) -> str:
    return f"{counts['list']} list ({counts['listed']} names), {counts['stat']} stat, {counts['read']} read"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="bench.history", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--scale", choices=["small", "full"], default="small", help="small: 10^3 and 10^4 partitions; full: up to 10^6"
    )
    parser.add_argument("--sizes", help="comma-separated partition counts (overrides --scale)")
    parser.add_argument(
        "--latency-ms",
        type=float,
        nargs="*",
        default=[0.0],
        help="simulated latency per storage operation (several: one run each)",
    )
    parser.add_argument(
        "--landing-sizes",
        default=None,
        help="also item 4 at these landed-file counts (bench/landing_age.py), e.g. 1000,10000,100000",
    )
    parser.add_argument(
        "--baseline-up-to",
        type=int,
        default=None,
        help="plan by reading every marker (the baseline of items 1-2) only on lakes of at most this many "
        "partitions (default: every size)",
    )
    parser.add_argument(
        "--baseline-latency-ms",
        type=float,
        default=None,
        help="... and only at simulated latencies up to this (default: every latency; one read per "
        "partition at 30 ms is 8 hours at 10^6)",
    )
    parser.add_argument("--work", help="folder for the lakes (default: a temporary one, removed)")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help=f"measure a lake of --work that holds {BUILT} (as build() left it) instead of building it",
    )
    parser.add_argument("--no-write", action="store_true", help="do not write bench/results/history.md")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    sizes = (
        [int(s) for s in args.sizes.split(",")]
        if args.sizes
        else [1_000, 10_000]
        if args.scale == "small"
        else [1_000, 10_000, 100_000, 1_000_000]
    )
    if args.landing_sizes:  # item 4: a Spark stream, its own results file
        from bench import landing_age

        landing_age.main(["--sizes", args.landing_sizes] + (["--no-write"] if args.no_write else []))
    root = args.work or tempfile.mkdtemp(prefix="tidemark-history-")
    try:
        rows = [
            row
            for size in sizes
            for latency in args.latency_ms
            for row in run_size(
                size,
                latency,
                root,
                baseline=(args.baseline_up_to is None or size <= args.baseline_up_to)
                and (args.baseline_latency_ms is None or latency <= args.baseline_latency_ms),
                reuse=args.reuse,
            )
        ]
    finally:
        if not args.work:
            shutil.rmtree(root, ignore_errors=True)
    columns = [
        "receipt partitions",
        "what",
        "latency ms/op",
        "every marker / walk: s",
        "every marker / walk: ops",
        "receipt index: s",
        "receipt index: ops",
    ]
    if not args.no_write:
        write_results(
            "history",
            "Cost against the lake's age: planning with and without the receipt index",
            columns,
            rows,
            __doc__.split("\n\n", 1)[1],
            {
                "sizes": sizes,
                "latency per operation (ms)": args.latency_ms,
                "every-marker baseline": f"up to {args.baseline_up_to or 'any size'} partitions, "
                f"{args.baseline_latency_ms if args.baseline_latency_ms is not None else 'any'} ms",
                "rules": RULES.describe(),
            },
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
