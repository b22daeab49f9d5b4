"""A cold local Spark driver, with the JVM class archive and without: how long until the session exists
and its first queries ran (tidemark/base/class_archive.py).

Every local Spark start pays it: `tidemark stream`, `tidemark dedup`, `rules migrate`, the DAG's
spark-submit of a dedup, each test's Spark process. Each run is a Python process of its own (started
cold, as those are): it builds the session with tidemark's builder, then runs a first query that
writes a small Parquet folder and one that reads it back and aggregates it. With and without the
archive alternate (A B A B ...), so a drift in the machine's load falls on both.

    .venv/bin/python -m bench.spark_start [--runs 5]

The archive must exist (`tidemark class-archive`); the runs without it set
TIDEMARK_JVM_CLASS_ARCHIVE=0.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import bench
from bench.stream_throughput import load
from tidemark.base import class_archive

NAME = "spark_start"
FIGURES = ("session_s", "first_write_s", "first_read_s", "process_s")


def parse_args(argv):
    p = bench.arguments(NAME, __doc__)
    p.add_argument("--runs", type=int, default=5, help="runs of each (interleaved)")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--no-write", action="store_true", help="do not write bench/results/")
    p.add_argument("--worker", metavar="OUT", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def worker(out: str, master: str) -> None:
    """One cold start, timed step by step; its figures as one JSON line on stdout."""
    started = time.perf_counter()
    from tidemark.base.spark import build_session

    spark = build_session("bench-spark-start", master)
    session = time.perf_counter()
    frame = spark.range(200_000).selectExpr("id % 1000 AS user", "id AS n", "current_date() AS day")
    frame.write.mode("overwrite").partitionBy("day").parquet(out)
    written = time.perf_counter()
    spark.read.parquet(out).groupBy("user").agg({"n": "max"}).orderBy("user").limit(3).collect()
    read = time.perf_counter()
    options = spark.sparkContext.getConf().get("spark.driver.extraJavaOptions", "")
    print(
        json.dumps(
            {
                "session_s": round(session - started, 3),
                "first_write_s": round(written - session, 3),
                "first_read_s": round(read - written, 3),
                "archive": "SharedArchiveFile" in options,
            }
        ),
        flush=True,
    )


def one_run(archive: bool, workdir: str, master: str) -> dict:
    env = dict(os.environ)
    if archive:
        env.pop(class_archive.ENV, None)
    else:
        env[class_archive.ENV] = "0"
    out = os.path.join(workdir, "out")
    shutil.rmtree(out, ignore_errors=True)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{NAME}", "--worker", out, "--master", master],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    process = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"a start failed:\n{done.stderr[-2000:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    if figures["archive"] != archive:
        raise RuntimeError(f"the run {'with' if archive else 'without'} the archive ran {figures}")
    return {**figures, "process_s": round(process, 3)}


def main(argv=None) -> int:
    args = parse_args(argv if argv is not None else sys.argv[1:])
    if args.worker:
        worker(args.worker, args.master)
        return 0
    path = class_archive.built_archive()
    if path is None:
        print("no class archive for this Java and Spark: run `tidemark class-archive` first", file=sys.stderr)
        return 2
    env_machine = bench.machine()
    os.makedirs(args.workdir, exist_ok=True)
    runs: dict[bool, list[dict]] = {True: [], False: []}
    loads = [load()]
    for n in range(args.runs):
        for archive in (True, False):
            run = one_run(archive, args.workdir, args.master)
            runs[archive].append(run)
            print(f"run {n + 1}/{args.runs} {'with' if archive else 'without'} the archive: {run}", flush=True)
    loads.append(load())
    columns = ["step", "with the archive (s)", "without (s)", "saved (s)"]
    rows = []
    for figure in FIGURES:
        with_, without = (statistics.median(r[figure] for r in runs[archive]) for archive in (True, False))
        rows.append([figure, f"{with_:.2f}", f"{without:.2f}", f"{without - with_:.2f}"])
    every = "; ".join(
        f"{figure} {[r[figure] for r in runs[True]]} / {[r[figure] for r in runs[False]]}" for figure in FIGURES
    )
    notes = (
        f"Medians of {args.runs} interleaved cold starts each; load {loads[0]} -> {loads[-1]}. Every run "
        f"(with / without): {every}."
    )
    bench.print_table(f"{NAME}: a cold local Spark driver", columns, rows)
    print(notes)
    if not args.no_write:
        bench.write_results(
            NAME,
            "A cold local Spark driver, with the JVM class archive and without",
            columns,
            rows,
            notes,
            {
                "master": args.master,
                "runs of each": args.runs,
                "archive": f"{path} ({os.path.getsize(path) // 2**20} MiB)",
                "first write": "200,000 rows to Parquet, partitioned by day",
                "first read": "those rows read back, grouped by user",
            },
            env_machine,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
