"""A full dedup of a date whose panes are spread over thousands of receipt partitions (issue 27, item 6).

A 10 s trigger writes 8,640 receipt partitions a day for today's date alone. This builds two lakes of
the same date and the same sessions (bench/dedup_partition.py's synthesizer: early panes, on-time
panes, redelivered fragments), one with its panes in --few receipt partitions, one in --many, and
times a full dedup (`run_dedup(full=True)`: every receipt read and re-sessionized) of each, with the
panes read by Spark's file source and by the executors with pyarrow (tidemark/panes/pane_reader.py, what
read_panes uses from pane_reader.FOLDERS_FOR_ARROW folders on). With --packs (the default) the
pyarrow reader is also timed with packs (tidemark/panes/pack_cache.py): the --many date's first full dedup,
which reads every folder and writes the pack, then the next one, which reads the pack; and the first
full dedup after the maintenance pass packed the date (tidemark/panes/pack_maintenance.py, pyarrow, no Spark;
its own time in the phases column as "maintenance pack"), what a correction of a closed date meets.
Without "pack" in the row the packs are off (PACK_AT out of reach) and none is read. One warm-up run
first, then each run once per round (--repeat; every round starts without packs, medians after),
in one Spark session (local[2]).

    .venv/bin/python -m bench.receipts_per_date [--sessions 100000] [--few 100] [--many 8640] [--repeat 3]
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys

import bench
from bench import arguments, dedup_partition
from tidemark.base.session_rules import SessionRules
from tidemark.deduplication.dedup import run_dedup
from tidemark.iceberg import table as iceberg
from tidemark.panes import pack_cache, pack_maintenance, pane_reader
from tidemark.store.lake import Lake

NAME = "receipts_per_date"
PACK_AT = pack_cache.PACK_AT  # the library's threshold, kept here: full_dedup sets pack_cache.PACK_AT per run
MAINTENANCE = "arrow, after the maintenance pack"


def parse_args(argv):
    p = arguments(NAME, __doc__)
    p.add_argument("--sessions", type=int, default=100_000)
    p.add_argument("--few", type=int, default=100)
    p.add_argument("--many", type=int, default=8640)
    p.add_argument("--readers", default="arrow,spark", help="which readers to time (arrow, spark)")
    p.add_argument("--reuse", action="store_true", help="keep lakes built by an earlier run")
    p.add_argument("--repeat", type=int, default=1, help="rounds of every run; medians reported after")
    p.add_argument("--no-packs", dest="packs", action="store_false", help="do not time the pyarrow reader with packs")
    p.add_argument("--no-write", action="store_true")
    return p.parse_args(argv)


def build(spark, args, receipts: int) -> Lake:
    lake = Lake.open(os.path.join(args.workdir, f"lake-{receipts}"))
    if args.reuse and os.path.isdir(lake.sessions_root()):
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


def full_dedup(spark, lake: Lake, reader: str, pack_at: int = 10**9):
    pane_reader.FOLDERS_FOR_ARROW = 1 if reader == "arrow" else 10**9
    pack_cache.PACK_AT = pack_at  # out of reach: no pack written nor read
    iceberg.drop(lake)  # every run publishes a first version
    return run_dedup(lake, dedup_partition.DAY, SessionRules(), spark=spark, full=True)


def runs(args, readers: list[str]) -> list[tuple[str, int, int]]:
    """(label, receipts, PACK_AT) of each timed run, in order."""
    out = [(reader, n, 10**9) for reader in readers for n in (args.few, args.many)]
    if args.packs and "arrow" in readers:
        # The few receipts stay below PACK_AT: that date reads its folders as before.
        out += [
            ("arrow, writing the pack", args.many, PACK_AT),
            ("arrow, reading the pack", args.many, PACK_AT),
            ("arrow, reading the pack (again)", args.many, PACK_AT),
            (MAINTENANCE, args.many, PACK_AT),
        ]
    return out


def main(argv=None) -> int:
    args = parse_args(argv if argv is not None else sys.argv[1:])
    from tidemark.base.spark import build_session

    env = bench.machine()
    spark = build_session("tidemark-bench-receipts-per-date", "local[2]", shuffle_partitions=8)
    lakes = {n: build(spark, args, n) for n in (args.few, args.many)}
    readers = [r.strip() for r in args.readers.split(",") if r.strip()]
    full_dedup(spark, lakes[args.few], readers[0])  # warm-up: the JVM, the Python workers
    rows, seconds = [], {}
    for round_ in range(1, args.repeat + 1):
        for lake in lakes.values():
            shutil.rmtree(lake.packs_root(), ignore_errors=True)  # every round writes its pack anew
        for label, receipts, pack_at in runs(args, readers):
            reader = label.split(",")[0]
            extra = ""
            if label == MAINTENANCE:  # the maintenance pass alone packs the date, then the dedup
                shutil.rmtree(lakes[receipts].packs_root(), ignore_errors=True)  # its state too
                with bench.stopwatch() as t:
                    done = pack_maintenance.run_pass(lakes[receipts])
                assert [p.event_date for p in done.packed] == [dedup_partition.DAY], done
                extra = f"maintenance pack {t['seconds']:.1f}, "
            load = os.getloadavg()[0]
            result = full_dedup(spark, lakes[receipts], reader, pack_at)
            seconds.setdefault((label, receipts), []).append(result.seconds)
            phases = extra + ", ".join(f"{k} {v:.1f}" for k, v in result.phases.items() if v >= 0.05)
            rows.append(
                [
                    round_,
                    label,
                    f"{receipts:,}",
                    result.sessions,
                    f"{result.seconds:.1f}",
                    f"{result.seconds / seconds[(reader, args.few)][-1]:.2f}x",
                    phases,
                    f"{load:.1f} / {os.getloadavg()[0]:.1f}",
                ]
            )
            print(" | ".join(str(v) for v in rows[-1]), flush=True)
    if args.repeat > 1:
        for (label, receipts), runs_s in seconds.items():
            few = statistics.median(seconds[(label.split(",")[0], args.few)])
            median = statistics.median(runs_s)
            rows.append(["median", label, f"{receipts:,}", "", f"{median:.1f}", f"{median / few:.2f}x", "", ""])
    columns = [
        "round",
        "panes read by",
        "receipt partitions",
        "sessions",
        "full dedup s",
        f"vs {args.few:,} (same reader and round, no pack)",
        "phases (s)",
        "load before / after",
    ]
    bench.print_table("Full dedup of one date against its number of receipt partitions", columns, rows)
    if not args.no_write:
        bench.write_results(
            NAME,
            "A full dedup against the number of receipt partitions of the date",
            columns,
            rows,
            __doc__.split("\n\n", 1)[1].split("\n\n    .venv")[0],
            {
                "sessions": args.sessions,
                "few": args.few,
                "many": args.many,
                "readers": readers,
                "packs": args.packs,
                "repeat": args.repeat,
            },
            env=env,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
