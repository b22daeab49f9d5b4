"""Run tidemark's benchmarks: `make bench`, or

    .venv/bin/python -m bench [names...] [--scale small|full] [--list]

With no names, every benchmark runs, one after the other (each starts its own Spark processes, so
they never compete with each other). Each prints its table and writes bench/results/<name>.md with
the machine it ran on and the load average. `--scale small` (the default) finishes in minutes on a
2-core machine; `--scale full` is what BENCHMARKS.md reports. Arguments after `--` go to every
selected benchmark unchanged (e.g. `-- --no-write`).

Benchmarks (a module bench/<name>.py with main(argv) each):
    stream_throughput   tidemark stream vs a plain PySpark copy (the floor) vs Beam's DirectRunner
    memory              memory and state size of the stream over ~100 days of event time
    freshness           landing -> notice -> DAG run -> corrected partition, on the local stack
    noop_runs           a dedup DAG run with nothing new on a local Airflow: its p50/p95, per task
    correction_cost     one late correction vs reprocessing 7 days vs reprocessing everything
    dedup_task          the DAG's dedup of a small late correction on a warm Spark Connect server, per phase
    dedup_partition     deduplicating one big event date vs a plain scan-and-write
    correction_layout   corrections of 1, 10 and 1% of the users of a big date: what they rewrite
    iceberg_commit      what the Iceberg commit adds to a publish (seconds per date)
    iceberg_history     one Iceberg commit against the table's age (7 days vs a year of dates, gc'd)
    history             planning against the lake's age: 10^3..10^6 receipt partitions, index or not
    receipts_per_date   a full dedup of a date of 100 vs 8,640 receipt partitions, by reader
    spark_start         a cold local Spark driver with the JVM class archive and without
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import sys
import time
import traceback

ORDER = [
    "stream_throughput",
    "memory",
    "freshness",
    "noop_runs",
    "correction_cost",
    "dedup_task",
    "dedup_partition",
    "correction_layout",
    "iceberg_commit",
    "iceberg_history",
    "history",
    "receipts_per_date",
    "spark_start",
]
HERE = os.path.dirname(os.path.abspath(__file__))

# What --scale means for modules that do not take --scale themselves (their defaults otherwise).
SCALE_ARGS: dict[str, dict[str, list[str]]] = {
    "dedup_partition": {"small": ["--sessions", "50000"], "full": []},  # full: its 1M-session default
    "correction_layout": {"small": ["--sessions", "50000"], "full": []},
    "dedup_task": {"small": ["--repeat", "3"], "full": ["--repeat", "10"]},
    "receipts_per_date": {"small": ["--sessions", "20000", "--many", "2000", "--readers", "arrow"], "full": []},
    "spark_start": {"small": ["--runs", "2"], "full": []},
}


def available() -> list[str]:
    present = {name[:-3] for name in os.listdir(HERE) if name.endswith(".py") and not name.startswith("_")}
    present.discard("beam_sessions")  # runs inside .venv-beam, called by stream_throughput
    return [n for n in ORDER if n in present] + sorted(present - set(ORDER))


def module_argv(module, name: str, scale: str, extra: list[str]) -> list[str]:
    """--scale for modules that accept it; otherwise the scale's arguments from SCALE_ARGS."""
    parse_args = getattr(module, "parse_args", None)
    takes_scale = False
    if parse_args is not None:
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                parse_args(["--scale", scale])
            takes_scale = True
        except SystemExit:
            takes_scale = False
    if takes_scale:
        return ["--scale", scale, *extra]
    return [*SCALE_ARGS.get(name, {}).get(scale, []), *extra]


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1 :]
    p = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("names", nargs="*", help="benchmarks to run (default: all)")
    p.add_argument("--scale", choices=["small", "full"], default="small")
    p.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    args = p.parse_args(argv)
    names = available()
    if args.list:
        print("\n".join(names))
        return 0
    unknown = [n for n in args.names if n not in names]
    if unknown:
        p.error(f"unknown benchmark(s) {', '.join(unknown)}; available: {', '.join(names)}")
    selected = args.names or names
    outcome = {}
    for name in selected:
        print(f"\n=== bench {name} (--scale {args.scale}) ===", flush=True)
        began = time.monotonic()
        try:
            module = importlib.import_module(f"bench.{name}")
            code = module.main(module_argv(module, name, args.scale, extra)) or 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
            if exc.code not in (0, None) and not isinstance(exc.code, int):
                print(exc.code, file=sys.stderr)
        except Exception:  # noqa: BLE001 - one failing benchmark must not hide the others
            traceback.print_exc()
            code = 1
        outcome[name] = (code, round(time.monotonic() - began))
    print("\n=== summary ===")
    for name, (code, seconds) in outcome.items():
        print(f"{name:20s} {'ok' if code == 0 else f'FAILED ({code})':12s} {seconds:>6d} s  -> bench/results/{name}.md")
    return 0 if all(code == 0 for code, _ in outcome.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
