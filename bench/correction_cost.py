"""What one late correction costs: tidemark's targeted dedup of one event date, against reprocessing
the last 7 days and against reprocessing everything.

1. A generated multi-day workload goes through the real stream (receipt partitions with early,
   on-time, late and too_late panes), and every date is deduplicated once.
2. A few late events (and a redelivery) for one date D land and are streamed: new receipts.
3. Measured, on one warm SparkSession:
   - correction:  `run_dedup(D)`: incremental (tidemark's default): the new receipt, the previous
     version's sessions and context, only the touched users re-sessionized;
   - correction --full: `run_dedup(D, full=True)`: every receipt that can hold D's sessions;
   - 7-day lookback: re-sessionize every receipt of D-6 .. D+1 and rewrite those 7 dates;
   - full: re-sessionize every receipt of the lake and rewrite every date.
   The last three use the same SQL (tidemark.deduplication.dedup.compute_islands), so the difference is what they read.

    .venv/bin/python -m bench.correction_cost [--scale small|full] [--days 16 --events 40000 --files 32]
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
from datetime import date, datetime, timedelta, timezone

import bench
from bench import arguments
from tidemark.base.layout import as_event_date
from tidemark.base.session_rules import SessionRules
from tidemark.deduplication.dedup import LakeIndex, Plan, compute_islands, run_dedup
from tidemark.demo import generate
from tidemark.iceberg import table_versions
from tidemark.iceberg.table import put_back
from tidemark.store.lake import Lake

NAME = "correction_cost"
SCALES = {
    "small": {"days": 9, "events": 12_000, "users": 150, "files": 12},
    "full": {"days": 16, "events": 40_000, "users": 300, "files": 32},
}


def parse_args(argv):
    p = arguments(NAME, __doc__)
    p.add_argument(
        "--scale",
        choices=sorted(SCALES),
        default="small",
        help="small: 9 days, 12k events, 12 files; full: 16 days, 40k events, 32 files",
    )
    p.add_argument("--days", type=int, default=None)
    p.add_argument("--events", type=int, default=None)
    p.add_argument("--users", type=int, default=None)
    p.add_argument("--files", type=int, default=None)
    p.add_argument("--max-files-per-trigger", type=int, default=2)
    p.add_argument("--repeat", type=int, default=2, help="timed runs per approach (the median is kept)")
    p.add_argument("--reuse", action="store_true", help="reuse the streamed lake of a previous run")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--no-write", action="store_true", help="do not write bench/results/")
    args = p.parse_args(argv)
    for key, value in SCALES[args.scale].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.days < 8:
        raise SystemExit("--days must be at least 8 (a week before the corrected date, and one after)")
    return args


def build_lake(spark, args, landing, lake, checkpoint, rules) -> dict:
    from streaming_job.job import StreamConfig, run_stream

    workload = generate.Workload(
        events=args.events, users=args.users, start=date(2026, 3, 1), days=args.days, files=args.files, seed=17
    )
    summary = generate.generate(landing, workload, progress=False)
    with bench.stopwatch() as t:
        run_stream(
            StreamConfig(
                landing, lake, checkpoint, rules, available_now=True, max_files_per_trigger=args.max_files_per_trigger
            ),
            spark=spark,
        )
    summary["stream_seconds"] = t["seconds"]
    return summary


def reprocess(spark, lake, rules, first: date, last: date, out: str) -> dict:
    """Re-sessionize every receipt of event dates first-1 .. last+1 and rewrite first .. last."""
    from pyspark.sql import functions as F

    index = LakeIndex(lake)
    lo_day, hi_day = first - timedelta(days=1), last + timedelta(days=1)
    partitions = [p for d in index.dates if lo_day <= d <= hi_day for p in index.partitions(d)]
    lo = datetime.combine(first, datetime.min.time(), tzinfo=timezone.utc) - rules.gap
    session = spark
    islands = compute_islands(spark, lake, Plan(first, lo, hi_day, partitions), rules, set())
    wanted = islands.where(F.col("event_date").between(first.isoformat(), last.isoformat()))
    shutil.rmtree(out, ignore_errors=True)
    wanted.write.partitionBy("event_date").mode("overwrite").parquet(out)
    sessions = session.read.parquet(out).count()
    return {
        "receipts": len(partitions),
        "rows": sum(p.rows for p in partitions),
        "sessions": sessions,
        "dates": (last - first).days + 1,
    }


def main(argv=None) -> int:
    args = parse_args(argv if argv is not None else sys.argv[1:])
    from tidemark.base.spark import build_session

    env = bench.machine()
    rules = SessionRules()
    work = args.workdir
    landing, lake, ckpt = (os.path.join(work, n) for n in ("landing", "lake", "checkpoint"))
    lake = Lake.open(lake)
    spark = build_session("tidemark-bench-correction", args.master, shuffle_partitions=8)
    start = date(2026, 3, 1)
    day = start + timedelta(days=args.days - 2)  # a recent date with a full week before it
    summary_path = os.path.join(work, "summary.json")
    if args.reuse and os.path.exists(summary_path):
        with open(summary_path) as f:
            summary = json.load(f)
    else:
        shutil.rmtree(work, ignore_errors=True)
        summary = build_lake(spark, args, landing, lake, ckpt, rules)
        for d in range(args.days + 1):
            run_dedup(lake, (start + timedelta(days=d)).isoformat(), rules, spark=spark)
        generate.land_late_events(landing, day)
        from streaming_job.job import StreamConfig, run_stream

        run_stream(StreamConfig(landing, lake, ckpt, rules, available_now=True), spark=spark)
        os.makedirs(work, exist_ok=True)
        with open(summary_path, "w") as f:
            json.dump(summary, f)

    d = day.isoformat()
    from tidemark.iceberg import table as iceberg

    before = iceberg.load(lake).metadata_location
    rows = []
    for label, full in (("correction, incremental (tidemark dedup of D)", False), ("correction, --full", True)):
        times, result = [], None
        for _ in range(args.repeat):
            result = run_dedup(lake, d, rules, spark=spark, full=full)
            assert result.published, result
            assert result.mode == ("full" if full else "incremental"), result
            times.append(result.seconds)
            put_back(lake, before)
        rows.append(
            [label, 1, result.receipts_read, result.rows_read, result.sessions, round(statistics.median(times), 2)]
        )
    run_dedup(lake, d, rules, spark=spark)  # leave the lake corrected
    for label, first in (("7-day lookback reprocessing", day - timedelta(days=6)), ("full reprocessing", start)):
        last = day if first != start else start + timedelta(days=args.days)
        out = os.path.join(work, "reprocessed")
        secs, info = [], None
        for _ in range(args.repeat):
            with bench.stopwatch() as t:
                info = reprocess(spark, lake, rules, first, last, out)
            secs.append(t["seconds"])
        rows.append(
            [label, info["dates"], info["receipts"], info["rows"], info["sessions"], round(statistics.median(secs), 2)]
        )
    base_rows, base_secs = rows[0][3], rows[0][5]
    for row in rows:
        row.append(f"{row[3] / base_rows:.1f}x / {row[5] / base_secs:.1f}x")
    columns = [
        "approach",
        "dates rewritten",
        "receipt partitions read",
        "pane rows read",
        "sessions written",
        "wall s (median)",
        "rows / time vs correction",
    ]
    bench.print_table(f"Correcting {d} after a late receipt", columns, rows)
    if not args.no_write:
        total = table_versions.current_version(lake, as_event_date(d))
        notes = (
            f"One late receipt for {d} (15 late events of 5 users, one redelivered) after "
            f"{args.days} days of generated traffic streamed by the real stream. The incremental "
            f"correction reads the new receipt's panes and the previous version's sessions and "
            f"context (its islands outside the date), and re-sessionizes only the touched users; "
            f"with --full it reads every receipt whose marker says it can hold {d}'s sessions "
            f"(event_date <= D+1 and max_event_ts >= D 00:00 - gap); the reprocessing approaches "
            f"read every receipt of their date range. Wall times are medians of {args.repeat} "
            f"warm runs on a shared machine (see load average): compare ratios, not absolutes. "
            f"The version published for {d} has {total.sessions if total else 0} sessions."
        )
        path = bench.write_results(
            NAME,
            "Correction cost: one date vs 7-day lookback vs full reprocessing",
            columns,
            rows,
            notes,
            {
                "workload": f"{summary['events']} events ({summary['duplicates']} "
                f"redelivered, {summary['offline_sessions']} offline sessions), "
                f"{args.users} users, {args.days} days, {args.files} files",
                "stream": f"real stream, max {args.max_files_per_trigger} files per "
                f"trigger, {summary.get('stream_seconds', '?')} s",
                "spark": f"{args.master}, 8 shuffle partitions",
                "receipt partitions in the lake": sum(
                    len(LakeIndex(lake).partitions(x)) for x in LakeIndex(lake).dates
                ),
            },
            env,
            command=".venv/bin/python -m bench.correction_cost " + " ".join(argv if argv is not None else sys.argv[1:]),
        )
        print(f"wrote {path}")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
