"""What the Iceberg commit adds to a publish: seconds per date, alone and with concurrent writers.

A dedup run ends with `tidemark.iceberg.commits.commit`: read the footers of the files Spark wrote (column
statistics, the partition value), load the table, check the date's current version, write a manifest,
a manifest list and a metadata file, and swap the catalog's pointer. This measures that step alone,
on files shaped like a dedup's output (pyarrow writes them here: no Spark, so the figure is the
commit's, not the job's), in the local SQLite catalog:

    first        the first version of each of D dates (the table grows)
    replace      a new version of a date once every date has H versions (history grows)
    concurrent   C processes publishing different dates at the same moment (conflicts retried)

    .venv/bin/python -m bench.iceberg_commit [--dates 30] [--history 3] [--sessions 20000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import date, datetime, timedelta, timezone

import bench
from tidemark.store.lake import Lake
from tidemark.store.version_record import VersionRecord

NAME = "iceberg_commit"
DAY0 = date(2026, 3, 1)


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m bench.iceberg_commit", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--workdir", default="/tmp/tidemark-bench/iceberg_commit")
    p.add_argument("--scale", choices=["small", "full"], default="small")
    p.add_argument("--dates", type=int, default=None, help="dates in the table (small 30, full 365)")
    p.add_argument("--history", type=int, default=3, help="versions of every date before 'replace' is timed")
    p.add_argument("--sessions", type=int, default=20_000, help="sessions per version (one file)")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    args.dates = args.dates or (30 if args.scale == "small" else 365)
    return args


_TEMPLATES: dict[tuple, object] = {}


def _template(sessions: int, receipts: list[str]):
    """One dedup-shaped table of `sessions` rows (built once: only event_date changes per date)."""
    import pyarrow as pa

    from tidemark.iceberg import table as iceberg

    key = (sessions, receipts[0], receipts[-1])
    if key not in _TEMPLATES:
        start = datetime(2026, 3, 1, tzinfo=timezone.utc)
        starts = [start + timedelta(seconds=7 * i) for i in range(sessions)]
        _TEMPLATES[key] = pa.table(
            {
                "session_id": [f"{i:032d}" for i in range(sessions)],
                "user_id": [f"user-{i % 5000:05d}" for i in range(sessions)],
                "session_start": pa.array(starts, pa.timestamp("us", tz="UTC")),
                "session_end": pa.array([s + timedelta(minutes=9) for s in starts], pa.timestamp("us", tz="UTC")),
                "event_count": pa.array([4] * sessions, pa.int64()),
                "event_type_count": pa.array([1] * sessions, pa.int32()),  # every event below is a "play"
                "event_ids": [[f"e{i}-{k}" for k in range(4)] for i in range(sessions)],
                "events": [
                    [
                        {
                            "event_ts": s + timedelta(minutes=3 * k),
                            "event_id": f"e{i}-{k}",
                            "event_type": "play",
                            "payload": "{}",
                        }
                        for k in range(4)
                    ]
                    for i, s in enumerate(starts)
                ],
                "first_receipt_ts": [receipts[0]] * sessions,
                "last_receipt_ts": [receipts[-1]] * sessions,
                "event_date": pa.array([start.date()] * sessions, pa.date32()),
            }
        ).cast(iceberg.schema().as_arrow())
    return _TEMPLATES[key]


def prepared(lake: Lake, day: str, receipts: list[str], sessions: int) -> VersionRecord:
    """The files and marker a dedup run leaves before its commit (pyarrow stands in for Spark)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tidemark.iceberg import run_markers

    run_id = run_markers.new_run_id()
    folder = lake.run_dir(date.fromisoformat(day), run_id)
    os.makedirs(folder)
    rows = _template(sessions, receipts)
    column = rows.schema.get_field_index("event_date")
    rows = rows.set_column(
        column, rows.schema.field(column), pa.array([date.fromisoformat(day)] * sessions, pa.date32())
    )
    pq.write_table(rows, f"{folder}/part-00000.parquet")
    marker = VersionRecord.holding(
        event_date=date.fromisoformat(day),
        run_id=run_id,
        files=("part-00000.parquet",),
        sessions=sessions,
        receipts=tuple(f"{day}/{r}" for r in receipts),
        max_receipt_ts=receipts[-1],
        hi=date.fromisoformat(day),
        gap=timedelta(minutes=30),
        affected_dates=(),
        created_at=datetime.now(timezone.utc),
    )
    run_markers.write_marker(lake, marker)
    return marker


def receipts_for(version: int) -> list[str]:
    return [f"20260401T{h:02d}0000000Z" for h in range(version + 1)]


def timed_commit(lake: Lake, marker: VersionRecord) -> tuple[float, int]:
    from tidemark.iceberg import commits

    t0 = time.perf_counter()
    outcome = commits.commit(lake, marker)
    assert outcome.committed
    return time.perf_counter() - t0, outcome.attempts


def _worker(lake: Lake, days: list[str], version: int, sessions: int, barrier) -> list[tuple[float, int]]:
    import logging

    logging.disable(logging.WARNING)
    markers = [prepared(lake, d, receipts_for(version), sessions) for d in days]
    barrier.wait()
    return [timed_commit(lake, m) for m in markers]


def stats(label: str, samples: list[tuple[float, int]]) -> list:
    secs = sorted(s for s, _ in samples)
    p95 = secs[min(len(secs) - 1, int(round(0.95 * (len(secs) - 1))))]
    return [
        label,
        len(secs),
        round(statistics.median(secs), 3),
        round(p95, 3),
        round(secs[-1], 3),
        sum(a - 1 for _, a in samples),
    ]


def main(argv=None) -> int:
    # Quiet logs, inherited by the spawned workers; restored afterwards because the smoke test runs
    # main() inside a pytest worker whose later tests (and the stacks they start, whose readiness is
    # read from info logs) must log at their own level.
    previous = os.environ.get("TIDEMARK_LOG_LEVEL")
    os.environ.setdefault("TIDEMARK_LOG_LEVEL", "warning")
    try:
        return _run(argv)
    finally:
        if previous is None:
            os.environ.pop("TIDEMARK_LOG_LEVEL", None)


def _run(argv) -> int:
    import multiprocessing

    args = parse_args(argv if argv is not None else sys.argv[1:])
    env = bench.machine()
    shutil.rmtree(args.workdir, ignore_errors=True)
    lake = Lake.open(os.path.join(args.workdir, "lake"))
    days = [(DAY0 + timedelta(days=i)).isoformat() for i in range(args.dates)]

    first = [timed_commit(lake, prepared(lake, d, receipts_for(0), args.sessions)) for d in days]
    for version in range(1, args.history):
        for d in days:
            timed_commit(lake, prepared(lake, d, receipts_for(version), args.sessions))
    replace = [
        timed_commit(lake, prepared(lake, d, receipts_for(args.history), args.sessions))
        for d in days[: min(len(days), 20)]
    ]

    context = multiprocessing.get_context("spawn")
    groups = [days[i :: args.concurrency] for i in range(args.concurrency)]
    with context.Manager() as manager, ProcessPoolExecutor(args.concurrency, mp_context=context) as pool:
        barrier = manager.Barrier(args.concurrency)
        futures = [pool.submit(_worker, lake, g[:10], args.history + 1, args.sessions, barrier) for g in groups]
        concurrent = [sample for f in futures for sample in f.result(timeout=1800)]

    from tidemark.iceberg import table as iceberg

    snapshots = len(iceberg.load(lake).snapshots())
    columns = ["commit", "commits", "median s", "p95 s", "max s", "conflicts retried"]
    rows = [
        stats(f"first version of a date ({args.dates} dates)", first),
        stats(f"replace a version (table with {args.dates * args.history} versions)", replace),
        stats(f"{args.concurrency} processes at once, different dates", concurrent),
    ]
    bench.print_table("What the Iceberg commit adds to a publish", columns, rows)
    if not args.no_write:
        notes = (
            f"`tidemark.iceberg.commits.commit` alone, on one {args.sessions:,}-session Parquet file per version "
            f"(written by pyarrow in the layout a dedup run leaves), local SQLite catalog, "
            f"{snapshots} snapshots in the table at the end. The commit reads the file's footer, loads "
            f"the table, checks the date's current version, writes manifest, manifest list and "
            f"metadata, and swaps the catalog pointer; under concurrency a loser reloads and retries. "
            f"Compare with the seconds of the whole dedup of a date (BENCHMARKS.md sections 3 and 4)."
        )
        path = bench.write_results(
            NAME,
            "What the Iceberg commit adds to a publish",
            columns,
            rows,
            notes,
            {
                "dates": args.dates,
                "versions per date before 'replace'": args.history,
                "sessions per version": args.sessions,
                "concurrency": args.concurrency,
            },
            env,
            command=".venv/bin/python -m bench.iceberg_commit " + " ".join(argv if argv is not None else sys.argv[1:]),
        )
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
