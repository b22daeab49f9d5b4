"""A stream's pre-warm: one tiny batch through the stream's own batch code before the first real
one, on a throwaway lake and checkpoint, so that the first real batch finds the Python workers
started (pyarrow, msgspec and the contract imported), the batch's plans analysed and their generated
code compiled. BENCHMARKS.md section 1 has what it saves and what it does not (the JVM's JIT warms
on volume, which a tiny batch does not give it).
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time

from pyspark.sql import functions as F

from streaming_job.batch import BatchProcessor
from tidemark import generate
from tidemark.contract import InputRules
from tidemark.logs import get_logger
from tidemark.sessions import SessionRules

log = get_logger("stream")

PREWARM_EVENTS = 2000


def prewarm(spark, rules: SessionRules, input_rules: InputRules | None = None,
            events: int = PREWARM_EVENTS) -> float:
    """Run one generated batch of `events` through BatchProcessor in a temporary folder (removed
    after); returns its seconds. Nothing of it reaches the real lake, checkpoint or listeners."""
    root = tempfile.mkdtemp(prefix="tidemark-prewarm-")
    started = time.monotonic()
    try:
        landing_dir = os.path.join(root, "landing")
        generate.generate(landing_dir, generate.Workload(events=events, users=max(1, events // 40), days=1,
                                                         files=1, start="2026-01-01", seed=1), progress=False)
        # The columns streaming_job.job.source gives a batch, read as a batch.
        frame = (spark.read.format("text").option("lineSep", "\n").option("pathGlobFilter", "*.jsonl")
                 .load(landing_dir)
                 .select("value", F.col("_metadata.file_path").alias("source_file"),
                         F.col("_metadata.file_size").alias("file_size"),
                         F.unix_millis(F.col("_metadata.file_modification_time")).alias("file_mtime_ms"),
                         F.current_timestamp().alias("receipt_time")))
        BatchProcessor(os.path.join(root, "lake"), os.path.join(root, "checkpoint"), rules,
                       input_rules=input_rules, landing=landing_dir)(frame, 0)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    seconds = round(time.monotonic() - started, 3)
    log.info("stream pre-warmed", events=events, seconds=seconds)
    return seconds
