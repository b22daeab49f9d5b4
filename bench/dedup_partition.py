"""The dedup of one big event date (1M sessions by default) against a plain Spark scan-and-write of
the same receipt partitions: the price of batch-equivalence over just copying the data.

The receipt partitions are synthesized with Spark in the stream's pane format (no stream run: that
would dominate the time): every session has a final on-time pane, a share of them an earlier early
pane (accumulating: a prefix of the events) and a share a redelivered too_late fragment, spread over
several receipts, each completed by its marker like the stream does.

Then a correction: one late receipt brings one more event for --late-rate (1%) of the sessions
(the users' phones were offline); the date is deduplicated again, incrementally (tidemark's default:
only the touched users are re-sessionized, tidemark/deduplication/incremental.py) and with `--full`, each from
the same published version.

    .venv/bin/python -m bench.dedup_partition [--sessions 1000000]
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
from datetime import date, datetime, timedelta, timezone

import bench
from bench import add_date_shape, arguments
from dedup_sql import rules as sql_rules
from tidemark.base import layout
from tidemark.base.session_rules import SessionRules
from tidemark.deduplication.dedup import run_dedup
from tidemark.iceberg import table as iceberg
from tidemark.iceberg import table_versions
from tidemark.panes import receipts
from tidemark.store.lake import Lake

NAME = "dedup_partition"
DAY = date(2026, 3, 7)


def parse_args(argv):
    p = arguments(NAME, __doc__)
    add_date_shape(p)
    p.add_argument("--late-rate", type=float, default=0.01, help="share of sessions the late receipt touches")
    p.add_argument("--repeat", type=int, default=2, help="timed runs of each job (medians), after --warmup")
    p.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="untimed dedups first (the JVM's JIT and Spark's first query compilations), "
        "so the medians are of warm runs; the first one's time is reported as the cold run",
    )
    p.add_argument(
        "--no-stages",
        action="store_true",
        help="skip the stage ladder (where the dedup's time goes, one query per stage)",
    )
    p.add_argument("--master", default="local[2]")
    p.add_argument("--reuse", action="store_true")
    p.add_argument("--no-write", action="store_true")
    p.add_argument(
        "--event-log",
        metavar="DIR",
        default=None,
        help="write the Spark event log there (job and stage times: where the time goes)",
    )
    return p.parse_args(argv)


# Five sessions per user, four hours apart, each a few events five minutes apart (under the gap).
_PANES_SQL = """
WITH s AS (
  SELECT id AS s,
         concat('user-', lpad(CAST(id % {users} AS STRING), 7, '0')) AS user_id,
         timestamp_micros(unix_micros(TIMESTAMP'{day} 00:00:00') + (id DIV {users}) * 4 * 3600000000
                          + CAST(pmod(hash(id), 3600) AS BIGINT) * 1000000) AS start,
         CAST(pmod(hash(id, 1), {receipts}) AS INT) AS receipt,
         pmod(hash(id, 2), 1000) / 1000.0 AS r_early,
         pmod(hash(id, 3), 1000) / 1000.0 AS r_fragment
  FROM range({sessions})
),
e AS (
  SELECT s.*, transform(sequence(0, {events} - 1), k -> named_struct(
           'event_ts', timestamp_micros(unix_micros(start) + CAST(k AS BIGINT) * 300000000),
           'event_id', concat(user_id, '-', CAST(s AS STRING), '-', CAST(k AS STRING)),
           'event_type', CASE WHEN k = 0 THEN 'app_open' ELSE 'play' END,
           'payload', '{{"device":"ios"}}')) AS events
  FROM s
),
panes AS (
  SELECT user_id, events, receipt, 'on_time' AS pane_kind, 2 AS pane_index FROM e
  UNION ALL
  SELECT user_id, slice(events, 1, 2), greatest(receipt - 1, 0), 'early', 1 FROM e WHERE r_early < {early}
  UNION ALL
  SELECT user_id, slice(events, {events}, 1), {receipts} - 1, 'too_late', 3 FROM e WHERE r_fragment < {fragment}
)
SELECT {session_id} AS session_id,
       user_id,
       events[0].event_ts AS session_start,
       events[size(events) - 1].event_ts AS session_end,
       CAST(size(events) AS BIGINT) AS event_count,
       transform(events, x -> x.event_id) AS event_ids,
       events, pane_kind, pane_index, CAST(receipt AS BIGINT) AS batch_id,
       TIMESTAMP'{day} 00:00:00' AS watermark, receipt
FROM panes
"""


def receipt_ts_of(i: int) -> str:
    """The i-th receipt of the day, 10 s apart (a 10 s trigger writes 8,640 a day)."""
    return layout.format_receipt_ts(datetime(2026, 3, 8, tzinfo=timezone.utc) + timedelta(seconds=10 * i))


def build_lake(spark, args, lake) -> int:
    """Write the synthetic receipt partitions and their markers; returns the pane rows."""
    from pyspark.sql import functions as F

    users = max(1, args.sessions // 5)
    panes = spark.sql(
        _PANES_SQL.format(
            session_id=sql_rules.session_id("user_id", "events[0].event_ts"),
            users=users,
            day=DAY,
            receipts=args.receipts,
            sessions=args.sessions,
            events=args.events_per_session,
            early=args.early_rate,
            fragment=args.fragment_rate,
        )
    )
    staged = os.path.join(args.workdir, "staged")
    panes.write.mode("overwrite").partitionBy("receipt").parquet(staged)
    total = 0
    # one job for every receipt's marker facts (a job per receipt cost ~1 s each)
    by_receipt = {
        row["receipt"]: row
        for row in spark.read.parquet(staged)
        .groupBy("receipt")
        .agg(
            F.count(F.lit(1)).alias("rows"),
            F.sum("event_count").alias("events"),
            F.min(F.unix_micros("session_start")).alias("lo"),
            F.max(F.unix_micros("session_end")).alias("hi"),
        )
        .collect()
    }
    for i in sorted(by_receipt):
        stats = by_receipt[i]
        folder = lake.receipt_dir(DAY, receipt_ts_of(i))
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(os.path.join(staged, f"receipt={i}"), folder)
        receipts.complete(
            lake,
            receipts.ReceiptPartition(
                event_date=DAY,
                receipt_ts=receipt_ts_of(i),
                batch_id=i,
                uri=folder,
                rows=int(stats["rows"]),
                events=int(stats["events"]),
                pane_kinds=["early", "on_time", "too_late"],
                min_event_ts=receipts.iso_from_micros(stats["lo"]),
                max_event_ts=receipts.iso_from_micros(stats["hi"]),
                watermark=receipts.iso_from_micros(stats["lo"]),
                late=False,
            ),
        )
        total += int(stats["rows"])
    shutil.rmtree(staged, ignore_errors=True)
    return total


_LATE_SQL = """
SELECT user_id, named_struct(
         'event_ts', timestamp_micros(unix_micros(start) + 60000000),
         'event_id', concat(user_id, '-', CAST(s AS STRING), '-late'),
         'event_type', 'play', 'payload', '{{"device":"ios"}}') AS e
FROM ({sessions_sql}) WHERE {where}
"""


def land_late_receipt(spark, args, lake, where: str | None = None) -> int:
    """One receipt, newer than the others, with a too_late pane of one event for --late-rate of
    the sessions (one minute after their start: it joins them), or for the sessions `where` (SQL
    over the session number `s`, its user number `u` and the number of users `users`) selects.
    Returns its pane rows."""
    from pyspark.sql import functions as F

    users = max(1, args.sessions // 5)
    sessions_sql = _PANES_SQL.split("),\ne AS", 1)[0].replace("WITH s AS (", "", 1)
    sessions_sql = sessions_sql.format(users=users, day=DAY, receipts=args.receipts, sessions=args.sessions)
    where = (where or f"pmod(hash(s, 4), 100000) < {int(args.late_rate * 100000)}").format(
        u=f"(s % {users})", users=users
    )
    late = spark.sql(_LATE_SQL.format(sessions_sql=sessions_sql, where=where))
    panes = late.select(
        F.expr(sql_rules.session_id("user_id", "e.event_ts")).alias("session_id"),
        "user_id",
        F.col("e.event_ts").alias("session_start"),
        F.col("e.event_ts").alias("session_end"),
        F.lit(1).cast("bigint").alias("event_count"),
        F.array(F.col("e.event_id")).alias("event_ids"),
        F.array("e").alias("events"),
        F.lit("too_late").alias("pane_kind"),
        F.lit(1).alias("pane_index"),
        F.lit(args.receipts).cast("bigint").alias("batch_id"),
        F.to_timestamp(F.lit(f"{DAY} 00:00:00")).alias("watermark"),
    )
    folder = lake.receipt_dir(DAY, receipt_ts_of(args.receipts))
    shutil.rmtree(folder, ignore_errors=True)
    panes.coalesce(1).write.mode("overwrite").parquet(folder)
    stats = (
        spark.read.parquet(folder)
        .agg(
            F.count(F.lit(1)).alias("rows"),
            F.min(F.unix_micros("session_start")).alias("lo"),
            F.max(F.unix_micros("session_end")).alias("hi"),
        )
        .first()
    )
    receipts.complete(
        lake,
        receipts.ReceiptPartition(
            event_date=DAY,
            receipt_ts=receipt_ts_of(args.receipts),
            batch_id=args.receipts,
            uri=folder,
            rows=int(stats["rows"]),
            events=int(stats["rows"]),
            pane_kinds=["too_late"],
            min_event_ts=receipts.iso_from_micros(stats["lo"]),
            max_event_ts=receipts.iso_from_micros(stats["hi"]),
            watermark=receipts.iso_from_micros(stats["lo"]),
            late=True,
        ),
    )
    return int(stats["rows"])


LADDER_COLUMNS = ["the query up to", "s", "this stage"]


def stage_ladder(spark, lake) -> list[list]:
    """Where the full dedup's time goes: the same query cut after each stage and run into Spark's
    `noop` sink (computed, nothing written), each stage's time the difference to the one before.
    The stages are the dedup's own SQL files (tidemark.deduplication.dedup.compute_islands's steps) plus the
    shuffle and the sort they imply, spelled out to time them apart."""
    from pyspark.sql import functions as F

    import dedup_sql
    from tidemark.base import times
    from tidemark.deduplication.dedup import read_panes
    from tidemark.panes import planning

    rules = SessionRules()
    plan = planning.plan_for_rerun(planning.LakeIndex(lake), DAY, rules, None)
    lo_us = times.to_micros(plan.lo)

    def panes():
        return read_panes(spark, lake, plan.partitions, plan.lo).select(
            "user_id", "events", "receipt_ts", F.lit(False).alias("known")
        )

    def exploded():
        return (
            panes()
            .select("user_id", F.explode("events").alias("e"), "receipt_ts")
            .select("user_id", "e.*", "receipt_ts")
            .where(F.unix_micros("event_ts") >= F.lit(lo_us))
        )

    def events():
        return dedup_sql.run(spark, "dedup_events", {"panes": panes()}, lo_us=lo_us)

    def sessionized():
        return dedup_sql.run(spark, "sessionize", {"events": events()}, gap_us=rules.gap_us)

    stages = [
        ("scan the panes (the plain copy's read)", panes),
        ("explode the events, shuffle them by user", lambda: exploded().repartition("user_id")),
        (
            "sort each user's events by time",
            lambda: exploded().repartition("user_id").sortWithinPartitions("user_id", "event_ts", "event_id"),
        ),
        ("distinct events, the kept copy (dedup_events.sql)", events),
        ("both windows of the session rule (sessionize.sql)", sessionized),
        (
            "one row per session (dedup_sessions.sql): the islands",
            lambda: dedup_sql.run(spark, "dedup_sessions", {"sessionized": sessionized()}),
        ),
    ]
    rows, before = [], 0.0
    for label, frame in stages:
        runs = []
        for _ in range(2):  # the faster of two: one run is at the mercy of a GC pause or a neighbour
            with bench.stopwatch() as t:
                frame().write.format("noop").mode("overwrite").save()
            runs.append(t["seconds"])
        secs = min(runs)
        rows.append([label, round(secs, 2), f"{secs - before:+.2f}" if before else "-"])
        before = secs
    return rows


def _phases(result) -> str:
    return ", ".join(f"{name} {secs:.1f}" for name, secs in result.phases.items() if secs >= 0.05)


def plain_copy(spark, lake, out) -> int:
    paths = [lake.receipt_dir(DAY, ts) for ts in receipts.list_receipts(lake, DAY)]
    shutil.rmtree(out, ignore_errors=True)
    spark.read.parquet(*paths).write.parquet(out)
    return spark.read.parquet(out).count()


def main(argv=None) -> int:
    args = parse_args(argv if argv is not None else sys.argv[1:])
    from tidemark.base.spark import build_session

    env = bench.machine()
    lake = Lake.open(os.path.join(args.workdir, "lake"))
    conf = None
    if args.event_log:
        os.makedirs(args.event_log, exist_ok=True)
        conf = {
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": "file://" + os.path.abspath(args.event_log),
            "spark.eventLog.compress": "false",
        }
    spark = build_session("tidemark-bench-dedup-partition", args.master, shuffle_partitions=8, conf=conf)
    if not (args.reuse and receipts.list_receipts(lake, DAY)):
        shutil.rmtree(args.workdir, ignore_errors=True)
        with bench.stopwatch() as t:
            build_lake(spark, args, lake)
        print(f"synthesized {args.receipts} receipt partitions in {t['seconds']} s")
    else:  # the late receipt of an earlier run is landed again below
        shutil.rmtree(lake.receipt_dir(DAY, receipt_ts_of(args.receipts)), ignore_errors=True)
    rows_in = sum(receipts.read_marker(lake, DAY, ts).rows for ts in receipts.list_receipts(lake, DAY))
    events_in = sum(receipts.read_marker(lake, DAY, ts).events for ts in receipts.list_receipts(lake, DAY))

    dedup_secs, result, cold = [], None, None
    for i in range(args.warmup + args.repeat):
        iceberg.drop(lake)  # each repeat publishes a first version again
        result = run_dedup(lake, DAY, SessionRules(), spark=spark)
        cold = cold or result
        print(f"dedup {'warm-up' if i < args.warmup else 'timed'}: {result.seconds} s ({_phases(result)})")
        if i >= args.warmup:
            dedup_secs.append(result.seconds)
    assert result.sessions == args.sessions, (result.sessions, args.sessions)
    copy_secs, copied = [], 0
    for _ in range(args.repeat):
        with bench.stopwatch() as t:
            copied = plain_copy(spark, lake, os.path.join(args.workdir, "copy"))
        copy_secs.append(t["seconds"])
    d, c = statistics.median(dedup_secs), statistics.median(copy_secs)
    ladder = [] if args.no_stages else stage_ladder(spark, lake)
    if ladder:
        bench.print_table("Where the dedup's time goes (cumulative, into a noop sink)", LADDER_COLUMNS, ladder)

    # The correction: one late receipt, deduplicated incrementally and with --full from the same version.
    from tidemark.iceberg.table import put_back

    published = iceberg.load(lake).metadata_location
    late_rows = land_late_receipt(spark, args, lake)
    corrections = {}
    for label, full in (("incremental", False), ("full", True)):
        secs = []
        for _ in range(args.repeat):
            fixed = run_dedup(lake, DAY, SessionRules(), spark=spark, full=full)
            assert fixed.published, fixed
            assert fixed.mode == label, fixed
            print(f"correction, {label}: {fixed.seconds} s ({_phases(fixed)})")
            secs.append(fixed.seconds)
            put_back(lake, published)
        corrections[label] = (statistics.median(secs), fixed)
    pointer = table_versions.current_version(lake, DAY)
    rows = [
        [
            "tidemark dedup (version + Iceberg commit)",
            rows_in,
            result.sessions,
            round(d, 2),
            f"{events_in / d:,.0f}",
            f"{d / c:.2f}x",
            "-",
            _phases(result),
        ],
        ["plain Spark scan-and-write", rows_in, copied, round(c, 2), f"{events_in / c:,.0f}", "1.00x", "-", "-"],
    ]
    for label, (secs, fixed) in corrections.items():
        rows.append(
            [
                f"correction, {label} path (1 late receipt, {late_rows:,} panes)",
                fixed.rows_read,
                fixed.sessions,
                round(secs, 2),
                "-",
                f"{secs / c:.2f}x",
                f"{secs / d:.2f}x",
                _phases(fixed),
            ]
        )
    columns = [
        "job",
        "rows read",
        "rows written",
        "wall s (median)",
        "pane events/s",
        "vs plain",
        "vs full dedup",
        "phases of the last run (s)",
    ]
    bench.print_table(f"Dedup of a {args.sessions:,}-session event date", columns, rows)
    if not args.no_write:
        notes = (
            f"One event date with {args.sessions:,} sessions ({events_in:,} events in {rows_in:,} pane "
            f"rows over {args.receipts} receipt partitions: every session's on-time pane, "
            f"{args.early_rate:.0%} with an accumulating early pane, {args.fragment_rate:.0%} with a "
            f"redelivered too_late fragment). The dedup explodes the events, keeps one copy per "
            f"(user_id, event_id), re-sessionizes them (window over each user's events) and writes "
            f"one version ({len(pointer.files)} file(s)) then commits it to the Iceberg table; the plain job "
            f"reads the same partitions and writes them back unchanged. Medians of {args.repeat} "
            f"runs after {args.warmup} untimed warm-up dedup(s) (the cold first run took "
            f"{cold.seconds:.1f} s: the JVM's JIT and Spark's first query compilations); see the "
            f"load average: compare the ratio, not absolutes. "
            f"The corrections: one late receipt with one event for {args.late_rate:.0%} of the "
            f"sessions ({late_rows:,} too_late panes), deduplicated from the published version "
            f"incrementally (tidemark's default) and with --full; rows read = the new panes plus "
            f"the previous version's sessions (incremental), every pane (full). Phases (tidemark.deduplication.dedup."
            f"DedupResult.phases): compute = the islands, cached, and their summary; write = the "
            f"version's files and its context; commit = the Iceberg commit; notice = the corrected "
            f"notice's diff against the previous version."
        )
        path = bench.write_results(
            NAME,
            f"Dedup of a {args.sessions:,}-session partition vs a plain scan-and-write",
            columns,
            rows,
            notes,
            {
                "sessions": args.sessions,
                "events per session": args.events_per_session,
                "receipt partitions": args.receipts,
                "spark": f"{args.master}, 8 shuffle partitions, driver memory {spark.conf.get('spark.driver.memory')}",
            },
            env,
            command=".venv/bin/python -m bench.dedup_partition " + " ".join(argv if argv is not None else sys.argv[1:]),
        )
        if ladder:  # after the main table: readers (and tests) take the first table as the results
            with open(path, "a", encoding="utf-8") as out:
                out.write(
                    "\n## Where the full dedup's time goes\n\nThe same query cut after each stage, run "
                    "warm into Spark's noop sink (computed, nothing written), the faster of two runs "
                    "each, after the timed dedups:\n\n" + "\n".join(bench.markdown_table(LADDER_COLUMNS, ladder)) + "\n"
                )
        print(f"wrote {path}")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
