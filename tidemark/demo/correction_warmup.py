"""The Connect server's warm-up: late corrections of a tiny scratch lake on the server `tidemark up` just started.

A fresh Connect server's first corrections are its slowest: Spark plans, generates and compiles
each query shape the first time, and the JVM compiles the hot paths of its planner after a few
runs. `bench.dedup_task` measured a fresh server's small late correction falling from ~3.4 s to
~1.8 s over its first 10-15 repeats (BENCHMARKS.md section 2), so after every `up` or restart the
first late corrections missed the freshness target. The warm-up runs the DAG task's own code
(tidemark.deduplication.on_connect.run_on_connect, a session per run, as DedupOperator) on the
server: one full dedup of the late date, then CORRECTIONS small late corrections of the same late
receipt, the table put back after each (tidemark.iceberg.table.put_back) so that each does the
same work, the shape of a real late correction (a small run: interpreted plans, local checkpoints).

The scratch lake lives in `<folder>` (the stack's `<home>/spark-connect/warmup`), never the real lake:

    template/        the built lake: generated traffic streamed by the stream's own code, every
                     date deduplicated, then one late receipt streamed; kept across restarts
    template.json    its late date, the table's metadata file before the correction, where it was built
    lake/            a copy of the template for one warm-up (at the path the template was built at: the
                     Iceberg catalog and metadata name files by absolute path), removed afterwards

Building the template needs a classic local SparkSession (the stream's code), which a process that
has opened a Connect session cannot start: it is built once, by a child process (`--build`), the
first time (or when its folder moved or FORMAT changed); later warm-ups only copy it.

`tidemark up` starts this module as a process of its own (tidemark/devstack/connect_warmup.py: the
switch, the folder, the command line) when it has started the Connect server: last, once the rest
of the stack is up (beside their start it made `up` twice as long: its corrections are the
server's CPU, which no nice of this process lowers), and returns without waiting for it; recorded
like the other components (run/spark-connect-warmup.json, `down` stops it). Nothing reaches the
stack's lake, notices, Airflow or metrics; every log line carries `warmup=true`. It is bounded in
time (TIMEOUT_S), and a failure is logged, never raised: it only saves time.
TIDEMARK_CONNECT_WARMUP=0 turns it off (the test suite does, but for the tests of the warm-up
itself: it costs a server's CPU for a minute after every start).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from datetime import date, timedelta
from typing import Any

import psutil
import structlog

from tidemark.base.logs import get_logger
from tidemark.base.spark import connect_address
from tidemark.devstack import connect_warmup, process

log = get_logger("connect-warmup")

MODULE = "tidemark.demo.correction_warmup"  # what `python -m` runs

TIMEOUT_S = 300.0  # a warm-up that takes longer is stopped (the server works the same, only colder)
CORRECTIONS = 10  # bench.dedup_task: a fresh server's corrections flatten out after 10-15
NICENESS = 10  # the build's JVM and the client yield the CPU to the stack's work (the first corrections)
FORMAT = 1  # bump when the template's contents change: a template of another format is built again
START = date(2026, 3, 1)
# A few hundred sessions per date; no malformed line: the build's stream would warn of each.
WORKLOAD: dict[str, Any] = {"events": 1_500, "users": 40, "days": 3, "files": 3, "malformed_rate": 0.0}
LATE_DAY = START + timedelta(days=1)  # a date with a whole day of traffic on each side


# ---- the template: built once, with the stream's code on a classic local session ------------------


def _template_record(folder: str) -> dict[str, Any] | None:
    """template.json when it describes a usable template of this folder and FORMAT, else None."""
    try:
        with open(os.path.join(folder, "template.json")) as handle:
            built: dict[str, Any] = json.load(handle)
    except (FileNotFoundError, ValueError):
        return None
    usable = built.get("format") == FORMAT and built.get("lake") == os.path.join(folder, "lake")
    return built if usable and os.path.isdir(os.path.join(folder, "template")) else None


def build(folder: str) -> None:
    """Build the template (a child process: a classic local SparkSession), as bench.dedup_task builds its lake."""
    from streaming_job.job import StreamConfig, run_stream
    from tidemark.base.session_rules import SessionRules
    from tidemark.base.spark import build_session
    from tidemark.deduplication.dedup import run_dedup
    from tidemark.demo import generate
    from tidemark.iceberg import table as iceberg
    from tidemark.store.lake import Lake

    for part in ("template.json", "template", "lake", "build"):
        _remove(os.path.join(folder, part))
    lake_path, work = os.path.join(folder, "lake"), os.path.join(folder, "build")
    landing, checkpoint = os.path.join(work, "landing"), os.path.join(work, "checkpoint")
    rules, lake = SessionRules(), Lake.open(lake_path)
    spark = build_session("tidemark-connect-warmup-build", "local[2]")
    try:
        workload = generate.Workload(start=START, seed=17, **WORKLOAD)
        generate.generate(landing, workload, progress=False)
        run_stream(StreamConfig(landing, lake, checkpoint, rules, available_now=True), spark=spark)
        for day in range(workload.days + 1):
            run_dedup(lake, START + timedelta(days=day), rules, spark=spark)
        generate.land_late_events(landing, LATE_DAY)
        run_stream(StreamConfig(landing, lake, checkpoint, rules, available_now=True), spark=spark)
        table = iceberg.load(lake)
        assert table is not None, "the build published nothing"
        before = table.metadata_location
    finally:
        spark.stop()
    shutil.copytree(lake_path, os.path.join(folder, "template"))
    for part in ("lake", "build"):
        _remove(os.path.join(folder, part))
    record = {"format": FORMAT, "lake": lake_path, "day": LATE_DAY.isoformat(), "before": before}
    with open(os.path.join(folder, "template.json"), "w") as handle:
        json.dump(record, handle)


def _build_in_child(folder: str, timeout: float) -> None:
    # The stream's own warm-up would only warm this throw-away JVM; its info lines (a line per
    # micro-batch, from Spark's callback threads, which miss the warmup=true of this one) are noise.
    env = {**os.environ, "TIDEMARK_STREAM_WARMUP": "0", "TIDEMARK_LOG_LEVEL": "warning"}
    command = [sys.executable, "-m", MODULE, "--build", "--folder", folder]
    child = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL)
    try:
        status = child.wait(timeout=max(timeout, 1.0))
    except subprocess.TimeoutExpired:
        _stop_children()
        raise
    if status != 0:
        raise RuntimeError(f"building the scratch lake failed (exit status {status}): see the lines above")


def _stop_children() -> None:
    """Kill this process's descendants: the build and the JVM it started.

    A kill of the build alone would leave its JVM running in the stack's process group after this
    process ended, where `down` no longer finds it (the group's record names an ended process).
    """
    children = psutil.Process().children(recursive=True)
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
    psutil.wait_procs(children, timeout=10)


def _remove(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.exists(path):
        os.remove(path)


# ---- the warm-up: corrections of a copy of the template on the server -------------------------------


def warm_up(folder: str, url: str, timeout: float = TIMEOUT_S, corrections: int = CORRECTIONS) -> dict[str, Any]:
    """Warm the Connect server at `url` with corrections of a scratch lake in `folder`; what it did (logged).

    Never raises: a failure is logged and returned as {"error": ...}.
    """
    started = time.monotonic()
    deadline = started + timeout
    folder = os.path.abspath(folder)
    lake_path = os.path.join(folder, "lake")
    seconds: list[float] = []
    summary: dict[str, Any] = {}
    try:
        _reachable(url)
        from tidemark.deduplication.on_connect import run_on_connect  # pyspark's client: after the check
        from tidemark.iceberg.table import put_back
        from tidemark.store.lake import Lake

        built = _template_record(folder)
        if built is None:
            _build_in_child(folder, deadline - time.monotonic())
            built = _template_record(folder)
            assert built is not None, "the build left no template"
            summary["built_s"] = round(time.monotonic() - started, 3)
            log.info("connect warm-up built its scratch lake", seconds=summary["built_s"], folder=folder)
        _remove(lake_path)
        shutil.copytree(os.path.join(folder, "template"), lake_path)
        lake, day = Lake.open(lake_path), date.fromisoformat(built["day"])
        for full in [True] + [False] * corrections:
            if time.monotonic() > deadline:
                log.warning("connect warm-up stopped: it took too long", corrections=len(seconds) - 1)
                break
            began = time.monotonic()
            result = run_on_connect(lake, day, url, full=full)
            seconds.append(round(time.monotonic() - began, 3))
            put_back(lake, built["before"])
            if not result.published:
                raise RuntimeError(f"a warm-up correction published nothing: {result.to_json()}")
        summary.update(first_s=seconds[0], corrections_s=seconds[1:])
    except Exception as exc:  # it only saves time: the server works the same without it
        summary["error"] = str(exc)[:300]
        log.warning("connect warm-up failed: the server starts cold", error=summary["error"], url=url)
        if _listening(url):
            # The server answers, so the template (or this code's use of it) is at fault: built again next time.
            _remove(os.path.join(folder, "template.json"))
    finally:
        _remove(lake_path)
    summary["seconds"] = round(time.monotonic() - started, 3)
    # CPU of this process and of the build (its JVM included), not the server's: what `up` pays beside it.
    summary["cpu_s"] = round(sum(os.times()[:4]), 1)
    log.info(connect_warmup.ENDED_EVENT, **summary)
    return summary


def _listening(url: str) -> bool:
    """Whether a server listens at `url` (False for a URL that is not sc://)."""
    try:
        host, port = connect_address(url)
    except ValueError:
        return False
    return process.port_open(port, host)


def _reachable(url: str) -> None:
    """Fail at once on a server that is not listening: pyspark's client retries a refused connection for minutes."""
    connect_address(url)  # ValueError for any other scheme
    if not _listening(url):
        raise ConnectionError(f"no Spark Connect server listens at {url}")


def _watchdog(folder: str, timeout: float) -> threading.Timer:
    """Stop the process a minute after `timeout` if a correction hangs (a server that stopped answering)."""

    def give_up() -> None:
        log.warning("connect warm-up stopped: a correction hung", seconds=timeout + 60)
        _stop_children()
        _remove(os.path.join(folder, "lake"))
        os._exit(0)

    timer = threading.Timer(timeout + 60, give_up)
    timer.daemon = True
    timer.start()
    return timer


def main(args: list[str] | None = None) -> int:
    """`python -m tidemark.demo.correction_warmup --folder F --url sc://... [--build]`; exit status 0 always."""
    p = argparse.ArgumentParser(prog=MODULE, description=__doc__)
    p.add_argument("--folder", required=True, help="the scratch folder (the stack's <home>/spark-connect/warmup)")
    p.add_argument("--url", help="the Spark Connect server to warm (sc://host:port)")
    p.add_argument("--timeout", type=float, default=TIMEOUT_S)
    p.add_argument("--corrections", type=int, default=CORRECTIONS)
    p.add_argument("--build", action="store_true", help="only build the template (a classic local session)")
    options = p.parse_args(args)
    structlog.contextvars.bind_contextvars(warmup=True)  # every line of this process, the dedup's too
    folder = os.path.abspath(options.folder)
    os.makedirs(folder, exist_ok=True)
    if options.build:
        build(folder)
        return 0
    os.nice(NICENESS)
    _watchdog(folder, options.timeout)
    warm_up(folder, options.url, options.timeout, options.corrections)
    return 0


if __name__ == "__main__":
    sys.exit(main())
