"""Two tiny micro-batches through the stream's own code before its query starts, in scratch folders.

A stream's first micro-batches are its slowest: Spark generates and compiles the code of each plan
(Janino) the first time it runs, and the JVM compiles the hot paths of that code after a few runs.
Without a warm-up the first landings after every start (a deploy, a restart after a crash) wait
for that (BENCHMARKS.md section 2: the first batches' landings were the slowest of the freshness
runs). The warm-up runs the very plans the batches run: a streaming query over the same source,
the same BatchProcessor, on a scratch landing, lake and checkpoint that are deleted afterwards;
the first batch sessionizes with no state, the second merges into the state the first kept, and
each has a refused line, so the quarantine's plan is compiled too. No value of a batch is part of
a plan (streaming_job.pane_writer.BatchValues), so the real batches reuse the compiled code.

Nothing of the warm-up reaches the stream's lake, checkpoint, notices or metrics; its log lines
carry `warmup=true`. It is bounded in time, and a failure is logged, never raised: it only saves
time. It runs on a local master only: its scratch folders are the driver's temporary folder, which
a cluster's executors do not see. TIDEMARK_STREAM_WARMUP=0 turns it off (the test suite does, but
for the tests of the warm-up itself: it costs seconds at every stream start).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from pyspark.sql import DataFrame, SparkSession

from streaming_job.batch import BatchProcessor
from tidemark.base import switches
from tidemark.base.logs import get_logger
from tidemark.base.session_rules import SessionRules
from tidemark.ingest import landing_archive
from tidemark.ingest.contract import InputRules
from tidemark.panes import receipt_index
from tidemark.store.lake import Lake

log = get_logger("stream")

TIMEOUT_S = 300.0  # a warm-up that takes longer is stopped: the stream starts anyway
WARMUP_ENV = "TIDEMARK_STREAM_WARMUP"  # "0": start without a warm-up


def enabled(spark: SparkSession) -> bool:
    """Whether the stream warms up before it starts: on a local master, unless TIDEMARK_STREAM_WARMUP=0."""
    if not switches.switched_on(WARMUP_ENV):
        return False
    master = spark.conf.get("spark.master", None) or ""
    return master.startswith("local")


def warmup_lines(now: datetime, rules: SessionRules) -> list[list[str]]:
    """Two files of lines: two users' sessions, the second file extending the first's, one refused line each.

    Event times are an hour before `now`, well inside the clock guard; the second file's events
    follow the first's within the gap, so its batch merges with the state the first batch kept.
    """
    start = now - timedelta(hours=1)
    step = min(timedelta(seconds=30), rules.gap / 4)

    def event(user: str, n: int) -> str:
        moment = start + n * step
        return json.dumps(
            {
                "event_id": f"warmup-{user}-{n}",
                "user_id": f"warmup-{user}",
                "event_type": "play",
                "event_ts": moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            },
            separators=(",", ":"),
        )

    first = [event(user, n) for user in ("a", "b") for n in range(3)] + ["not an event"]
    second = [event(user, n) for user in ("a", "c") for n in range(3, 6)] + [event("a", 3), "[1, 2]"]
    return [first, second]


def warm_up(
    spark: SparkSession,
    rules: SessionRules,
    input_rules: InputRules,
    read_landing: Callable[[str], DataFrame],
    timeout: float = TIMEOUT_S,
) -> float:
    """Run the two warm-up batches in `spark`; the seconds it took (logged, failures too).

    `read_landing(folder)` is the stream's source over a landing folder, one file per trigger
    (streaming_job.job.landing_source).
    """
    started = time.monotonic()
    scratch = tempfile.mkdtemp(prefix="tidemark-warmup-")
    landing = os.path.join(scratch, "landing")
    os.makedirs(landing)
    for index, lines in enumerate(warmup_lines(datetime.now(UTC), rules)):
        with open(os.path.join(landing, f"warmup-{index}.jsonl"), "w") as out:
            out.write("\n".join(lines) + "\n")
        # distinct modification times: the file source takes the files in this order, one per batch
        os.utime(os.path.join(landing, f"warmup-{index}.jsonl"), (time.time() - 10 + index, time.time() - 10 + index))
    lake, checkpoint = Lake.open(os.path.join(scratch, "lake")), os.path.join(scratch, "checkpoint")
    query = None
    try:
        receipt_index.start(lake)
        generation = landing_archive.current(checkpoint)
        processor = BatchProcessor(
            lake,
            checkpoint,
            rules,
            input_rules=input_rules,
            landing=landing,
            generation=generation,
            log_fields={"warmup": True},
        )
        query = (
            read_landing(landing)
            .writeStream.queryName("tidemark_warmup")
            .option("checkpointLocation", generation.query_dir(checkpoint).uri)
            .foreachBatch(processor)
            .trigger(availableNow=True)
            .start()
        )
        finished = query.awaitTermination(int(timeout))
        if not finished:
            log.warning("stream warm-up stopped: it took too long", seconds=round(time.monotonic() - started, 3))
        elif query.exception() is not None:
            raise RuntimeError(str(query.exception()))
    except Exception as exc:  # it only saves time: the stream starts whatever happened here
        log.warning("stream warm-up failed: starting without it", error=str(exc)[:300])
    finally:
        if query is not None and query.isActive:
            query.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    seconds = round(time.monotonic() - started, 3)
    log.info("stream warmed up", seconds=seconds, warmup=True)
    return seconds
