"""Build tidemark.base.class_archive's archive: the classes a stream's JVM loads, written when it exits.

A fresh local JVM, started with -XX:ArchiveClassesAtExit, runs the stream's warm-up (two tiny
micro-batches through the stream's own code: its source, contract, sessionizing, pane writer and
quarantine, streaming_job/warmup.py) and is then made to exit, which writes the archive. The classes
of other paths (the dedup, a reader) that the warm-up does not load simply load as before.

Written to a temporary name and renamed: a reader never maps half an archive, and a build that dies
leaves the previous state.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass

from tidemark.base import class_archive
from tidemark.base.logs import get_logger
from tidemark.base.session_rules import SessionRules
from tidemark.ingest.contract import InputRules

log = get_logger("class-archive")

EXIT_TIMEOUT_S = 120.0  # the JVM writes ~150 MB at exit


@dataclass(frozen=True)
class Built:
    """An archive written: where, its size, how long the build took, the stale archives removed."""

    path: str
    size: int
    seconds: float
    removed: list[str]


def build(path: str) -> Built:
    """Write the archive at `path` from a JVM of its own (this process must not have started one)."""
    started = time.monotonic()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    handle, partial = tempfile.mkstemp(prefix=".building-", suffix=class_archive.SUFFIX, dir=os.path.dirname(path))
    os.close(handle)
    os.unlink(partial)  # the JVM creates it at exit; one already there would be overwritten anyway
    try:
        _run_and_exit(partial)
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    removed = []
    for old in class_archive.stale(path):
        os.unlink(old)
        removed.append(old)
    built = Built(path, os.path.getsize(path), round(time.monotonic() - started, 1), removed)
    log.info("class archive built", path=path, bytes=built.size, seconds=built.seconds, removed=removed)
    return built


def _run_and_exit(partial: str) -> None:
    """The warm-up in a new JVM that writes its classes to `partial`, then that JVM's exit."""
    # Imported here: pyspark and the stream's modules are seconds to import, the CLI's start is not.
    from streaming_job import job, warmup
    from tidemark.base.spark import build_session

    dump = f"-XX:ArchiveClassesAtExit={partial} {class_archive.QUIET}"
    spark = build_session(
        "tidemark-class-archive", "local[2]", conf={class_archive.JAVA_OPTIONS: f"{job.STREAM_JAVA_OPTIONS} {dump}"}
    )
    job.tune_session(spark)
    # the stream's warm-up as a stream runs it (streaming_job.job.run_stream): one file per trigger
    warmup.warm_up(
        spark, SessionRules(), InputRules(), lambda folder: job.landing_source(spark, folder, max_files_per_trigger=1)
    )
    gateway = spark.sparkContext._gateway  # the JVM's process: pyspark started it with a pipe as stdin
    if gateway is None or getattr(gateway, "proc", None) is None:
        raise RuntimeError("this process did not start its JVM: no class archive can be written from it")
    spark.stop()
    # PySpark's JVM exits normally (System.exit) when its stdin closes; a JVM writes its archive on
    # a normal exit only.
    gateway.proc.stdin.close()
    code = gateway.proc.wait(EXIT_TIMEOUT_S)
    if code != 0 or not os.path.isfile(partial):
        raise RuntimeError(f"the JVM exited with {code} and wrote no class archive")
