"""A full dedup of a date whose panes are spread over thousands of receipt partitions (issue 27, item 6).

A 10 s trigger writes 8,640 receipt partitions a day for today's date alone. This builds two lakes of
the same date and the same sessions (bench/dedup_partition.py's synthesizer: early panes, on-time
panes, redelivered fragments), one with its panes in --few receipt partitions, one in --many, and
times a full dedup (`run_dedup(full=True)`: every receipt read and re-sessionized) of each, with the
panes read by Spark's file source and by the executors with pyarrow (tidemark/pane_reader.py, what
read_panes uses from pane_reader.FOLDERS_FOR_ARROW folders on). One warm-up run first, then each
run once, in one Spark session (local[2]).

    .venv/bin/python -m bench.receipts_per_date [--sessions 100000] [--few 100] [--many 8640]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

import bench
from bench import dedup_partition
from tidemark import pane_reader
from tidemark import table as iceberg
from tidemark.dedup import run_dedup
from tidemark.lake import Lake
from tidemark.sessions import SessionRules

NAME = "receipts_per_date"


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m bench.receipts_per_date",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--workdir", default="/tmp/tidemark-bench/receipts_per_date")
    p.add_argument("--sessions", type=int, default=100_000)
    p.add_argument("--few", type=int, default=100)
    p.add_argument("--many", type=int, default=8640)
    p.add_argument("--readers", default="arrow,spark", help="which readers to time (arrow, spark)")
    p.add_argument("--reuse", action="store_true", help="keep lakes built by an earlier run")
    p.add_argument("--no-write", action="store_true")
    return p.parse_args(argv)


def build(spark, args, receipts: int) -> str:
    lake = Lake.open(os.path.join(args.workdir, f"lake-{receipts}"))
    if args.reuse and os.path.isdir(lake):
        return lake
    shutil.rmtree(lake, ignore_errors=True)
    options = dedup_partition.parse_args(
        [
            "--sessions",
            str(args.sessions),
            "--receipts",
            str(receipts),
            "--workdir",
            os.path.join(args.workdir, f"staging-{receipts}"),
        ]
    )
    with bench.stopwatch() as t:
        dedup_partition.build_lake(spark, options, lake)
    print(f"built {receipts} receipt partitions of {args.sessions} sessions in {t['seconds']} s", flush=True)
    return lake


def full_dedup(spark, lake: Lake, reader: str):
    pane_reader.FOLDERS_FOR_ARROW = 1 if reader == "arrow" else 10**9
    iceberg.drop(lake)  # every run publishes a first version
    return run_dedup(lake, dedup_partition.DAY, SessionRules(), spark=spark, full=True)


def main(argv=None) -> int:
    args = parse_args(argv if argv is not None else sys.argv[1:])
    from tidemark.spark import build_session

    env = bench.machine()
    spark = build_session("tidemark-bench-receipts-per-date", "local[2]", shuffle_partitions=8)
    lakes = {n: build(spark, args, n) for n in (args.few, args.many)}
    readers = [r.strip() for r in args.readers.split(",") if r.strip()]
    full_dedup(spark, lakes[args.few], readers[0])  # warm-up: the JVM, the Python workers
    rows, seconds = [], {}
    for reader in readers:
        for receipts in (args.few, args.many):
            result = full_dedup(spark, lakes[receipts], reader)
            seconds[(reader, receipts)] = result.seconds
            phases = ", ".join(f"{k} {v:.1f}" for k, v in result.phases.items() if v >= 0.05)
            rows.append(
                [
                    reader,
                    f"{receipts:,}",
                    result.sessions,
                    f"{result.seconds:.1f}",
                    f"{result.seconds / seconds[(reader, args.few)]:.2f}x",
                    phases,
                ]
            )
            print(" | ".join(str(v) for v in rows[-1]), flush=True)
    columns = ["panes read by", "receipt partitions", "sessions", "full dedup s", f"vs {args.few:,}", "phases (s)"]
    bench.print_table("Full dedup of one date against its number of receipt partitions", columns, rows)
    if not args.no_write:
        bench.write_results(
            NAME,
            "A full dedup against the number of receipt partitions of the date",
            columns,
            rows,
            __doc__.split("\n\n", 1)[1].split("\n\n    .venv")[0],
            {"sessions": args.sessions, "few": args.few, "many": args.many, "readers": readers},
            env=env,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
