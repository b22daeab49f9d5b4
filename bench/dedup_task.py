"""The dedup task of a small late correction on a warm Spark Connect server, taken apart.

What the DAG's dedup task does when it has work (dags/tidemark_dedup.py, DedupOperator.execute):
open a Connect session beside the plan, run tidemark.deduplication.dedup.run_dedup on it, stop the
session. Here that runs in one warm Python process, several times over one late receipt of a date
of a few hundred sessions (the table put back before each repeat, as bench.correction_cost does),
against a Spark Connect server of the stack's settings with its UI on, so that each repeat also
counts the Spark jobs it ran (the server's REST API). The first repeat warms the server's code
generation and is reported apart.

    .venv/bin/python -m bench.dedup_task [--repeat 6] [--reuse] [--warm-first]

--warm-first runs the stack's warm-up (tidemark/demo/correction_warmup.py) on the fresh server
before the repeats, as `tidemark up` does, and reports how long it took: compare the first repeats
with and without it.

Building the lake (generated traffic through the real stream, every date deduplicated, one late
receipt streamed) runs in a child process with a local SparkSession: a process that has opened a
Connect session cannot start a classic one.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from datetime import date, timedelta

import bench
from bench import arguments
from tidemark.devstack import process

NAME = "dedup_task"
START = date(2026, 3, 1)


def parse_args(argv):
    p = arguments(NAME, __doc__)
    p.add_argument("--days", type=int, default=9)
    p.add_argument("--events", type=int, default=20_000)
    p.add_argument("--users", type=int, default=300)
    p.add_argument("--files", type=int, default=12)
    p.add_argument("--repeat", type=int, default=6, help="timed repeats after the warm-up one")
    p.add_argument("--reuse", action="store_true", help="reuse the lake (and its late receipt) of a previous run")
    p.add_argument("--url", default=None, help="a running Spark Connect server (sc://...; default: start one)")
    p.add_argument("--ui-port", type=int, default=None, help="that server's UI port (for the job counts)")
    p.add_argument(
        "--warm-first", action="store_true", help="warm the fresh server first, as `tidemark up` does (not with --url)"
    )
    p.add_argument("--build", action="store_true", help=argparse_suppress())
    p.add_argument("--no-write", action="store_true", help="do not write bench/results/")
    p.add_argument(
        "--as-big-run",
        action="store_true",
        help="run the correction as a big run does (compiled plans, cached frames: "
        "tidemark.deduplication.execution.SMALL_RUN_ROWS off), to compare with the small run's strategy",
    )
    return p.parse_args(argv)


def argparse_suppress() -> str:
    import argparse

    return argparse.SUPPRESS


def corrected_day(args) -> date:
    return START + timedelta(days=args.days - 2)


def build(args) -> None:
    """The lake: traffic streamed, every date deduplicated, then one late receipt streamed (child process)."""
    from streaming_job.job import StreamConfig, run_stream
    from tidemark.base.session_rules import SessionRules
    from tidemark.base.spark import build_session
    from tidemark.deduplication.dedup import run_dedup
    from tidemark.demo import generate
    from tidemark.demo.generate import land_late_events
    from tidemark.store.lake import Lake

    work = args.workdir
    shutil.rmtree(work, ignore_errors=True)
    landing, lake_path, ckpt = (os.path.join(work, n) for n in ("landing", "lake", "checkpoint"))
    rules = SessionRules()
    lake = Lake.open(lake_path)
    spark = build_session("tidemark-bench-dedup-task", "local[2]", shuffle_partitions=8)
    workload = generate.Workload(
        events=args.events, users=args.users, start=START, days=args.days, files=args.files, seed=17
    )
    generate.generate(landing, workload, progress=False)
    run_stream(StreamConfig(landing, lake, ckpt, rules, available_now=True, max_files_per_trigger=4), spark=spark)
    for d in range(args.days + 1):
        run_dedup(lake, START + timedelta(days=d), rules, spark=spark)
    land_late_events(landing, corrected_day(args))
    run_stream(StreamConfig(landing, lake, ckpt, rules, available_now=True), spark=spark)
    spark.stop()
    with open(os.path.join(work, "built.json"), "w") as f:
        json.dump({"day": corrected_day(args).isoformat()}, f)


def _jobs(ui: str | None) -> int | None:
    """The id of the server's newest Spark job (its REST API; ids count up), None without a UI.

    An id, not a count: the server keeps only its last 100 jobs (spark.ui.retainedJobs).
    """
    if ui is None:
        return None
    with urllib.request.urlopen(f"{ui}/api/v1/applications", timeout=30) as r:
        app = json.load(r)[0]["id"]
    with urllib.request.urlopen(f"{ui}/api/v1/applications/{app}/jobs", timeout=30) as r:
        return max((job["jobId"] for job in json.load(r)), default=-1)


def _compiled(ui: str | None) -> int | None:
    """How many generated classes the server has compiled so far (its metrics servlet), None without a UI."""
    if ui is None:
        return None
    with urllib.request.urlopen(f"{ui}/metrics/json", timeout=30) as r:
        histograms = json.load(r)["histograms"]
    return next((v["count"] for k, v in histograms.items() if k.endswith("CodeGenerator.compilationTime")), None)


def one_correction(lake, day: date, url: str) -> tuple[float, object]:
    """The DAG task's body (DedupOperator.execute on a spark_connect connection), timed."""
    from tidemark.deduplication.on_connect import run_on_connect

    started = time.perf_counter()
    result = run_on_connect(lake, day, url)
    return time.perf_counter() - started, result


def warm_first(server_home: str, url: str, log_path: str) -> dict:
    """The stack's warm-up of the server, awaited here: what it logged, with its wall time and the load before it."""
    from tidemark.base.logs import read_log_lines
    from tidemark.devstack import connect_warmup

    load, started = os.getloadavg()[0], time.perf_counter()
    with open(log_path, "a") as log:
        subprocess.run(
            connect_warmup.argv(connect_warmup.scratch_folder(server_home), url), stdout=log, stderr=subprocess.STDOUT
        )
    wall = round(time.perf_counter() - started, 2)
    with open(log_path) as log:
        done = [line for line in read_log_lines(log.read()) if line.get("event") == "connect warm-up ended"]
    return {"wall s": wall, "load": round(load, 1), **(done[-1] if done else {"error": f"no summary in {log_path}"})}


def main(argv=None) -> int:
    args = parse_args(argv if argv is not None else sys.argv[1:])
    if args.build:
        build(args)
        return 0
    built = os.path.join(args.workdir, "built.json")
    if args.as_big_run:
        from tidemark.deduplication import execution

        execution.SMALL_RUN_ROWS = -1
    if not (args.reuse and os.path.exists(built)):
        cmd = [sys.executable, "-m", "bench.dedup_task", "--build", "--workdir", args.workdir]
        cmd += ["--days", str(args.days), "--events", str(args.events), "--users", str(args.users)]
        cmd += ["--files", str(args.files)]
        subprocess.run(cmd, check=True)
    with open(built) as f:
        day = date.fromisoformat(json.load(f)["day"])

    env = bench.machine()
    server, warmed = None, None
    ui = f"http://127.0.0.1:{args.ui_port}" if args.ui_port else None
    url = args.url
    if url is None:
        from tidemark.devstack.spark_connect import SparkConnectServer

        ui_port = process.free_port()
        os.environ["TIDEMARK_SPARK_UI"] = "true"

        class _WithUI(SparkConnectServer):
            def argv(self) -> list[str]:
                return [*super().argv(), "--conf", f"spark.ui.port={ui_port}"]

        server = _WithUI(os.path.join(args.workdir, "connect"), master="local[2]").start()
        url, ui = server.url, f"http://127.0.0.1:{ui_port}"
        if args.warm_first:
            warmed = warm_first(server.home, url, os.path.join(args.workdir, "connect-warmup.log"))
            print("warm-up", json.dumps(warmed), flush=True)
    try:
        from tidemark.iceberg import table as iceberg
        from tidemark.iceberg.table import put_back
        from tidemark.store.lake import Lake

        lake = Lake.open(os.path.join(args.workdir, "lake"))
        before = iceberg.load(lake).metadata_location
        rows = []
        for n in range(args.repeat + 1):
            load = os.getloadavg()[0]
            jobs0, compiled0 = _jobs(ui), _compiled(ui)
            seconds, result = one_correction(lake, day, url)
            jobs1, compiled1 = _jobs(ui), _compiled(ui)
            put_back(lake, before)
            assert result.published, result.to_json()
            assert result.mode == "incremental", result.to_json()
            phases = {k: round(v, 2) for k, v in result.phases.items()}
            row = {
                "repeat": n + 1 if args.warm_first else "warm-up" if n == 0 else n,
                "load": round(load, 1),
                "task s": round(seconds, 2),
                "jobs": None if jobs0 is None or jobs1 is None else jobs1 - jobs0,
                "compiled": None if compiled0 is None or compiled1 is None else compiled1 - compiled0,
                "sessions": result.sessions,
                **phases,
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
        timed = rows[1:]
        keys = [k for k in rows[0] if k not in ("repeat",)]
        # a server without a UI (--url without --ui-port) reports no job or compile counts
        measured = {k: [r[k] for r in timed if r.get(k) is not None] for k in keys if k != "load"}
        summary = {k: round(statistics.median(values), 3) for k, values in measured.items() if values}
        print("median of", len(timed), json.dumps(summary))
        if not args.no_write:
            columns = list(rows[0])
            table = [[r.get(c) for c in columns] for r in rows]
            table.append(["median", *[summary.get(c, "") for c in columns[1:]]])
            path = bench.write_results(
                NAME,
                "The dedup task of a small late correction on a warm Spark Connect server",
                columns,
                table,
                f"One late receipt of {day} (15 late events of 5 users, one redelivered), corrected "
                f"{args.repeat} times (table put back in between) after a warm-up repeat; "
                "phases are the dedup's own (cumulative boundaries, seconds each), jobs the Spark "
                "jobs the server ran during the repeat, compiled the generated classes it compiled "
                + (
                    "(--as-big-run: plans compiled and frames cached as a big run's are)."
                    if args.as_big_run
                    else "(a small run: plans interpreted, frames pinned by local checkpoints)."
                )
                + (f" Warmed first as `tidemark up` does (--warm-first): {json.dumps(warmed)}." if warmed else ""),
                {"workload": f"{args.events} events, {args.users} users, {args.days} days, {args.files} files"},
                env,
                command=".venv/bin/python -m bench.dedup_task " + " ".join(argv if argv is not None else sys.argv[1:]),
            )
            print(f"wrote {path}")
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
