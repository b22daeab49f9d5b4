"""What a correction of a big event date rewrites: 1 user, 10 users, 1% of the users and 1% of the
sessions corrected, against a full dedup of the date.

The date is bench/dedup_partition.py's (1M sessions of 200k users by default, synthesized receipt
partitions). Its first version is published by a full dedup (an untimed warm-up first, then timed);
then each correction lands one late receipt with one event for the chosen sessions and deduplicates
the date incrementally (tidemark's default) from that same published version. The version's files
are laid out in buckets of users (tidemark/deduplication/buckets.py), so a correction rewrites only
the files of its users' buckets: the table's snapshot says how many files and rows it added and
deleted.

    .venv/bin/python -m bench.correction_layout [--sessions 1000000]
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys

import bench
from bench import add_date_shape, arguments
from bench.dedup_partition import DAY, build_lake, land_late_receipt, receipt_ts_of
from tidemark.base.session_rules import SessionRules
from tidemark.deduplication.dedup import run_dedup
from tidemark.iceberg import table as iceberg
from tidemark.iceberg import table_versions
from tidemark.iceberg.table import put_back
from tidemark.panes import receipts
from tidemark.store.lake import Lake

NAME = "correction_layout"


def parse_args(argv):
    p = arguments(NAME, __doc__)
    add_date_shape(p)
    p.add_argument("--late-rate", type=float, default=0.01, help="the last correction's share of sessions")
    p.add_argument("--repeat", type=int, default=1, help="timed runs of each job (medians)")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--reuse", action="store_true", help="keep the synthesized receipts of an earlier run")
    p.add_argument("--no-write", action="store_true")
    return p.parse_args(argv)


def cases(args) -> list[tuple[str, str | None]]:
    """(label, which sessions get a late event: SQL for land_late_receipt, None = --late-rate of them).
    The users' sessions of 08:00-09:00 (the third of their five), users spread over the id range."""
    users = max(1, args.sessions // 5)
    out = []
    for n in (1, 10, max(1, users // 100)):
        step = max(1, users // n)
        label = f"{n:,} user{'s' if n > 1 else ''}" + (" (1% of the users)" if n == users // 100 else "")
        out.append((label, f"s DIV {{users}} = 2 AND {{u}} % {step} = 0 AND {{u}} < {step * n}"))
    out.append((f"{args.late_rate:.0%} of the sessions", None))
    return out


def _snapshot_counts(lake: Lake) -> dict:
    summary = iceberg.load(lake).current_snapshot().summary
    props = summary.additional_properties if summary else {}
    return {
        k: int(props.get(k, 0)) for k in ("added-records", "deleted-records", "added-data-files", "deleted-data-files")
    }


def main(argv=None) -> int:
    args = parse_args(argv if argv is not None else sys.argv[1:])
    from tidemark.base.spark import build_session

    env = bench.machine()
    lake = Lake.open(os.path.join(args.workdir, "lake"))
    spark = build_session("tidemark-bench-correction-layout", args.master, shuffle_partitions=8)
    if not (args.reuse and receipts.list_receipts(lake, DAY)):
        shutil.rmtree(args.workdir, ignore_errors=True)
        with bench.stopwatch() as t:
            build_lake(spark, args, lake)
        print(f"synthesized {args.receipts} receipt partitions in {t['seconds']} s")
    late_folder = lake.receipt_dir(DAY, receipt_ts_of(args.receipts))
    shutil.rmtree(late_folder, ignore_errors=True)

    full_secs, first = [], None
    for i in range(1 + args.repeat):  # an untimed warm-up first
        iceberg.drop(lake)
        first = run_dedup(lake, DAY, SessionRules(), spark=spark)
        print(f"full dedup {'warm-up' if i == 0 else 'timed'}: {first.seconds} s, phases {first.phases}")
        if i:
            full_secs.append(first.seconds)
    assert first is not None, first
    assert first.sessions == args.sessions, first
    full = statistics.median(full_secs)
    version = table_versions.current_version(lake, DAY)
    published = iceberg.load(lake).metadata_location
    files = len(version.files)
    rows = [
        [
            "full dedup (first version)",
            "-",
            first.sessions,
            f"{files} / 0",
            "100%",
            round(full, 2),
            "1.00x",
            ", ".join(f"{k} {v:.1f}" for k, v in first.phases.items() if v >= 0.05),
        ]
    ]
    for label, where in cases(args):
        shutil.rmtree(late_folder, ignore_errors=True)
        panes = land_late_receipt(spark, args, lake, where)
        secs, counts, fixed = [], {}, None
        for _ in range(args.repeat):
            fixed = run_dedup(lake, DAY, SessionRules(), spark=spark)
            assert fixed.published, fixed
            assert fixed.mode == "incremental", fixed
            counts = _snapshot_counts(lake)
            print(f"correction of {label} ({panes} panes): {fixed.seconds} s, {counts}, phases {fixed.phases}")
            secs.append(fixed.seconds)
            put_back(lake, published)
        assert fixed is not None
        wall = statistics.median(secs)
        data_added = counts["added-data-files"] - 1  # the version file: one added, one deleted
        rows.append(
            [
                f"correction of {label} ({panes:,} late panes)",
                panes,
                counts["added-records"],
                f"{data_added} / {counts['deleted-data-files'] - 1}",
                f"{counts['added-records'] / first.sessions:.2%}",
                round(wall, 2),
                f"{wall / full:.2f}x",
                ", ".join(f"{k} {v:.1f}" for k, v in fixed.phases.items() if v >= 0.05),
            ]
        )
    shutil.rmtree(late_folder, ignore_errors=True)
    columns = [
        "job",
        "late panes",
        "session rows written",
        "data files added / deleted",
        "rows written vs the date",
        "wall s",
        "vs full dedup",
        "phases (s)",
    ]
    bench.print_table(f"Corrections of a {args.sessions:,}-session date", columns, rows)
    if not args.no_write:
        notes = (
            f"One event date of {args.sessions:,} sessions of {args.sessions // 5:,} users (bench/dedup_partition.py's "
            f"synthesized receipts), published by a full dedup ({files} files: one per bucket of users, "
            f"tidemark/deduplication/buckets.py), then corrected from that version by one late receipt "
            f"holding one event for the chosen sessions, incrementally (tidemark's default). Rows and "
            f"files written are the correction's Iceberg snapshot's (added-records, added/deleted data "
            f"files, the version's zero-row version file left out); the context (islands of other dates "
            f"kept for the next run) is written whole and not counted. Medians of {args.repeat} run(s) "
            f"after an untimed warm-up dedup; a shared machine: see the load average, compare ratios."
        )
        path = bench.write_results(
            NAME,
            f"Corrections of a {args.sessions:,}-session date: what they rewrite",
            columns,
            rows,
            notes,
            {
                "sessions": args.sessions,
                "users": args.sessions // 5,
                "spark": f"{args.master}, 8 shuffle partitions",
            },
            env,
            command=".venv/bin/python -m bench.correction_layout "
            + " ".join(argv if argv is not None else sys.argv[1:]),
        )
        print(f"wrote {path}")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
