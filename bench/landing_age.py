"""Cost against the landing's age (issue 27 item 4): one stream micro-batch's fixed cost (listing,
source log, commit) with 10^3 .. 10^6 files landed before it.

    .venv/bin/python -m bench.landing_age [--sizes 1000,10000,100000,1000000] [--batches 12]

For each size N it lands N tiny files (one JSON line each, 1,000 per folder, as a landing
partitioned by time is) and lets Spark's file source read them all in micro-batches of 100,000
whose foreachBatch does nothing (Spark lists them and writes them to its source log; nothing reads them:
the log and the listing are what is measured). Then, with one new file landed before each trigger,
`--batches` micro-batches run on the same text source as the stream (streaming_job.job.source),
their foreachBatch counting the new file's line. From Spark's progress of each: the trigger's wall
time without the foreachBatch (triggerExecution - addBatch: listing, source log, offset and commit
logs), and latestOffset (the listing and the source-log write) alone. Twelve batches include one
compaction of the source log (every 10 batches: it rewrites every entry).

  - before: the landing holds the N read files, the source log lists them (the stream until now);
  - after:  tidemark.ingest.landing_archive: the N files were moved to the archive once their batches
            were committed, and the checkpoint rotated: the landing holds only unread files, the
            source log only its generation's. Its worst case is a generation's end: a log of
            `--generation` files (8,640: a day of 10 s batches, one file each), measured as well.

The archive's own cost per batch (tidemark.ingest.landing_archive.drain of one committed batch: the
queue listed, one commit checked, one file moved) is counted through bench.history's counting
filesystem.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from bench import write_results

PER_FOLDER = 1000
READ_ALL_PER_BATCH = 100_000
LINE = b'{"event_id":"e","user_id":"u","event_type":"play","event_ts":"2026-01-01T00:00:00Z"}\n'


def land(root: str, count: int, start: int = 0, threads: int = 8) -> None:
    """count one-line files under root/h=NNNNN/ (1,000 per folder), written concurrently."""

    def folder(index: int) -> None:
        path = os.path.join(root, f"h={index:05d}")
        os.makedirs(path, exist_ok=True)
        first = index * PER_FOLDER
        for n in range(max(first, start), min(first + PER_FOLDER, start + count)):
            fd = os.open(os.path.join(path, f"f-{n:07d}.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.write(fd, LINE)
            os.close(fd)

    folders = range(start // PER_FOLDER, (start + count - 1) // PER_FOLDER + 1)
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(folder, folders))


def land_one(root: str, n: int) -> None:
    path = os.path.join(root, "new")
    os.makedirs(path, exist_ok=True)
    tmp = os.path.join(path, f".g-{n:07d}.tmp")
    with open(tmp, "wb") as out:
        out.write(LINE)
    os.replace(tmp, os.path.join(path, f"g-{n:07d}.jsonl"))


def _query(spark, landing: str, checkpoint: str, fn, available_now: bool, max_files: int | None = None):
    from streaming_job.job import StreamConfig, source

    config = StreamConfig(landing=landing, lake=landing, checkpoint=checkpoint, max_files_per_trigger=max_files)
    writer = source(spark, config).writeStream.option("checkpointLocation", checkpoint).foreachBatch(fn)
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="0 seconds")
    return writer.start()


def read_all(spark, landing: str, checkpoint: str) -> float:
    """Micro-batches over everything landed, 100,000 files each, their files logged and not read;
    returns seconds. (One batch of 10^6 files spent minutes in Spark's file index, its 2 GB driver
    collecting garbage: the stream never takes that many at once either.)"""
    started = time.monotonic()
    query = _query(
        spark, landing, checkpoint, lambda df, batch_id: None, available_now=True, max_files=READ_ALL_PER_BATCH
    )
    query.awaitTermination()
    return time.monotonic() - started


def batches(spark, landing: str, checkpoint: str, count: int, first_file: int) -> list[dict]:
    """count micro-batches, one new file each (landed once the previous batch committed); Spark's
    progress of each. The query's first batch is not counted: it pays the query's start (the source
    log read back, the plan built), which a running stream does not pay per batch."""
    seen: list[dict] = []
    landed = [first_file]
    land_one(landing, landed[0])

    def on_batch(df, batch_id):
        df.count()

    started = time.monotonic()
    query = _query(spark, landing, checkpoint, on_batch, available_now=False)
    try:
        last = None
        count += 1
        while len(seen) < count and time.monotonic() - started < 1800:
            progress = query.lastProgress
            if progress is not None and progress["batchId"] != last and progress["numInputRows"] > 0:
                last = progress["batchId"]
                seen.append(progress)
                if len(seen) < count:
                    landed[0] += 1
                    land_one(landing, landed[0])
            time.sleep(0.05)
    finally:
        query.stop()
    return seen[1:]


def _fixed(progress: dict) -> float:
    d = progress["durationMs"]
    return (d.get("triggerExecution", 0) - d.get("addBatch", 0)) / 1000


def summary(progresses: list[dict]) -> dict:
    fixed = [_fixed(p) for p in progresses]
    listing = [p["durationMs"].get("latestOffset", 0) / 1000 for p in progresses]
    return {
        "median_s": statistics.median(fixed),
        "max_s": max(fixed),
        "listing_median_s": statistics.median(listing),
        "batches": len(progresses),
    }


def archive_all(landing: str, archive: str) -> None:
    """What the archive has done by the time those files' batches are committed: every read file
    out of the landing (a rename each, as landing_archive does on a local disk)."""
    os.makedirs(os.path.join(archive, "received=2026-01-01"), exist_ok=True)
    for name in os.listdir(landing):  # the N files, and the new ones the "before" batches read
        os.rename(os.path.join(landing, name), os.path.join(archive, "received=2026-01-01", name))


def drain_cost(work: str) -> tuple[float, dict]:
    """One committed batch's file moved by landing_archive.drain, operations counted."""
    from bench.history import counted
    from tidemark.ingest import landing_archive

    landing, archive, checkpoint = (os.path.join(work, d) for d in ("d-landing", "d-archive", "d-checkpoint"))
    land_one(landing, 0)
    gen = landing_archive.current(checkpoint)
    info = os.stat(os.path.join(landing, "new", "g-0000000.jsonl"))
    landing_archive.enqueue(
        checkpoint,
        gen,
        0,
        "20260101T000000000Z",
        [{"path": "new/g-0000000.jsonl", "size": info.st_size, "mtime_ms": int(info.st_mtime * 1000)}],
    )
    os.makedirs(os.path.join(gen.query_dir(checkpoint), "commits"))
    open(os.path.join(gen.query_dir(checkpoint), "commits", "0"), "w").close()  # as Spark's commit log has it
    with counted(0) as counts:
        started = time.perf_counter()
        moved = landing_archive.drain(landing, archive, checkpoint)
        seconds = time.perf_counter() - started
    assert moved == 1
    return seconds, dict(counts)


def run_size(spark, size: int, count: int, work: str) -> list[list]:
    landing, archive = os.path.join(work, f"landing-{size}"), os.path.join(work, f"archive-{size}")
    started = time.monotonic()
    land(landing, size)
    landed_s = time.monotonic() - started
    read_s = read_all(spark, landing, os.path.join(work, f"cp-{size}"))
    log_bytes = sum(
        os.path.getsize(os.path.join(dp, f))
        for dp, _, fs in os.walk(os.path.join(work, f"cp-{size}", "sources"))
        for f in fs
    )
    print(
        f"{size:,} files landed in {landed_s:.0f} s, read into the source log in {read_s:.0f} s "
        f"({log_bytes / 1e6:.1f} MB of log)",
        flush=True,
    )
    before = summary(batches(spark, landing, os.path.join(work, f"cp-{size}"), count, 0))
    archive_all(landing, archive)
    after = summary(batches(spark, landing, os.path.join(work, f"cp-{size}-g1"), count, 10_000))
    return [
        [
            f"{size:,}",
            f"{before['median_s']:.3f}",
            f"{before['max_s']:.3f}",
            f"{before['listing_median_s']:.3f}",
            f"{after['median_s']:.3f}",
            f"{after['max_s']:.3f}",
            f"{after['listing_median_s']:.3f}",
            f"{log_bytes / 1e6:.1f} MB",
        ]
    ]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="bench.landing_age", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,10000,100000", help="comma-separated landed-file counts")
    parser.add_argument("--batches", type=int, default=12, help="micro-batches measured per size and case")
    parser.add_argument(
        "--generation", type=int, default=8640, help="files in a generation's source log at its end (after: worst case)"
    )
    parser.add_argument("--work", help="folder for the landings (default: a temporary one, removed)")
    parser.add_argument("--no-write", action="store_true", help="do not write bench/results/landing_age.md")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    from tidemark.base.spark import build_session

    args = parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    root = args.work or tempfile.mkdtemp(prefix="tidemark-landing-age-")
    load_before = os.getloadavg()
    spark = build_session("bench-landing-age", "local[2]", shuffle_partitions=2)
    rows = []
    try:
        for size in sizes:
            rows.extend(run_size(spark, size, args.batches, root))
            print(" | ".join(rows[-1]), flush=True)
        # after, at a generation's end: its own files in the log, none left in the landing
        gen_landing = os.path.join(root, "gen-landing")
        land(gen_landing, args.generation)
        read_all(spark, gen_landing, os.path.join(root, "cp-gen"))
        archive_all(gen_landing, os.path.join(root, "gen-archive"))
        end = summary(batches(spark, gen_landing, os.path.join(root, "cp-gen"), args.batches, 20_000))
        rows.append(
            [
                f"after, a generation's end ({args.generation:,} files in its log, landing empty)",
                "",
                "",
                "",
                f"{end['median_s']:.3f}",
                f"{end['max_s']:.3f}",
                f"{end['listing_median_s']:.3f}",
                "",
            ]
        )
        print(" | ".join(rows[-1]), flush=True)
        drain_s, drain_ops = drain_cost(root)
        rows.append(
            [
                "archive: one committed batch's file moved (landing_archive.drain)",
                "",
                "",
                "",
                f"{drain_s:.4f}",
                "",
                "",
                f"{drain_ops['list']} list, {drain_ops['stat']} stat, "
                f"{drain_ops['read']} read, {drain_ops['write']} write, 1 move, 1 delete",
            ]
        )
        print(" | ".join(rows[-1]), flush=True)
    finally:
        spark.stop()
        if not args.work:
            shutil.rmtree(root, ignore_errors=True)
    load_after = os.getloadavg()
    columns = [
        "files landed before",
        "before: fixed s (median)",
        "before: max s",
        "before: listing s",
        "after: fixed s (median)",
        "after: max s",
        "after: listing s",
        "source log (before)",
    ]
    if not args.no_write:
        write_results(
            "landing_age",
            "Cost against the landing's age: one micro-batch's fixed cost",
            columns,
            rows,
            __doc__.split("\n\n", 1)[1],
            {
                "sizes": sizes,
                "batches per case": args.batches,
                "load (1, 5, 15 min) at start": ", ".join(f"{x:.1f}" for x in load_before),
                "load at end": ", ".join(f"{x:.1f}" for x in load_after),
            },
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
