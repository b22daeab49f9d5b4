"""Stream throughput: `tidemark stream --available-now` over one generated landing, next to the
floor (a plain PySpark `read.json -> write.parquet` of the same files into date partitions), next to
Spark's own streaming `session_window` (what a Spark user tries first: watermark, session windows
per user, append to Parquet, availableNow; once counting each session's events as the guide does,
once collecting them, as tidemark's panes hold them; the counting query also at every further
files-per-trigger value tidemark runs at, as that rate's context) and next to Apache Beam's Python DirectRunner
doing the same session windows (its own venv, `.venv-beam`).

Every contender runs as its own process, started cold (JVM or Python start included in "wall"),
on the same files, one after the other, with local[2]. Measured per run: wall time, the time inside
the job (tidemark: first batch start -> last batch commit from the structured logs; floor: after the
SparkSession exists), micro-batches, files per trigger, peak RSS of the process tree (driver JVM +
Python), and the load average before and after. events/s = input lines (deliveries, duplicates and
malformed lines included) / seconds.

Targets (BENCHMARKS.md, stream section): one batch >= 0.7x the floor's events/s, 10 files per trigger
>= 0.5x, and no slower than the built-in as the guide writes it. `--runs 5` runs every contender five times, interleaved,
and reports the median run of each (the spread beside it).

    .venv/bin/python -m bench.stream_throughput --scale small      # ~20k events, a minute
    .venv/bin/python -m bench.stream_throughput --scale full       # 1M events (see --events)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from datetime import date
from pathlib import Path

import psutil

import bench
from bench import jvm_profile as jvm_profile_module
from tidemark.base.logs import read_log_lines
from tidemark.demo import generate

NAME = "stream_throughput"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
BEAM_PYTHON = os.path.join(ROOT, ".venv-beam", "bin", "python")

SCALES = {
    # events, users, days, files, files per trigger (tidemark runs), beam files
    "tiny": dict(events=3_000, users=60, days=2, files=6, fpt=[3], beam_files=6),
    "small": dict(events=30_000, users=300, days=3, files=20, fpt=[20, 5], beam_files=20),
    "full": dict(events=1_000_000, users=10_000, days=7, files=100, fpt=[100, 10], beam_files=10),
}


# Process-tree memory and CPU live in bench/proctree.py (psutil); imported here for bench.memory and the smoke test.
from bench.proctree import is_jvm, jvm_threads_cpu, rss_bytes, tree_pids, tree_rss  # noqa: E402,F401

CPU_KINDS = ("JIT", "tasks", "GC", "other JVM", "Python")  # the table's CPU split (Sampler.cpu_split)
# Spark's own session_window: as the guide writes it (counts per session), and with each session's events
BUILTIN = "Spark session_window"
BUILTIN_EVENTS = "Spark session_window with its events"


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


class Sampler(threading.Thread):
    """Samples the RSS of a process tree every `interval` seconds (peak + series), and its CPU
    seconds (user + system of every process seen in the tree, the last reading of each: a process
    that ends between two samples loses at most `interval` of its CPU), the JVMs' by thread kind
    (bench.proctree.jvm_thread_kind)."""

    def __init__(self, pid: int, interval: float = 0.5):
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.series: list[tuple[float, dict]] = []
        self.peak = {"jvm": 0, "python": 0, "total": 0}
        self.cpu: dict[int, float] = {}
        self.jvms: set[int] = set()
        self.jvm_threads: dict[tuple[int, int], tuple[str, float]] = {}
        self._halt = threading.Event()

    def run(self):
        started = time.monotonic()
        while not self._halt.is_set():
            sample = tree_rss(self.pid)
            if sample["total"]:
                self.series.append((time.monotonic() - started, sample))
                for k in self.peak:
                    self.peak[k] = max(self.peak[k], sample[k])
            for pid in tree_pids(self.pid):
                try:
                    times = psutil.Process(pid).cpu_times()
                except psutil.Error:
                    continue
                self.cpu[pid] = times.user + times.system
                if is_jvm(pid):
                    self.jvms.add(pid)
                    for tid, reading in jvm_threads_cpu(pid).items():
                        self.jvm_threads[(pid, tid)] = reading
            self._halt.wait(self.interval)

    def cpu_split(self) -> dict[str, float]:
        """CPU seconds by where they went: the JVMs' JIT, tasks, GC and other threads, and the rest.

        `other JVM` is the JVMs' CPU that no kind took: the driver's threads, and the threads that
        ended between two samples. `Python` is every other process of the tree.
        """
        split = {"JIT": 0.0, "tasks": 0.0, "GC": 0.0}
        for kind, seconds in self.jvm_threads.values():
            if kind in split:
                split[kind] += seconds
        jvm = sum(self.cpu.get(pid, 0.0) for pid in self.jvms)
        split["other JVM"] = max(0.0, jvm - sum(split.values()))
        split["Python"] = sum(seconds for pid, seconds in self.cpu.items() if pid not in self.jvms)
        return {kind: round(seconds, 1) for kind, seconds in split.items()}

    def stop(self):
        self._halt.set()
        self.join(timeout=5)


def run_measured(
    argv: list[str], log_path: str, env: dict | None = None, timeout: float = 3600, interval: float = 0.5
) -> dict:
    """Run argv (stderr+stdout to log_path), sampling its tree's RSS; wall seconds, rc, peak RSS."""
    load_before = load()
    with open(log_path, "w") as log:
        started = time.perf_counter()
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
        sampler = Sampler(proc.pid, interval)
        sampler.start()
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 15)
            rc = proc.wait(timeout=60)
            rc = rc if rc else -9
        wall = time.perf_counter() - started
        sampler.stop()
    return {
        "rc": rc,
        "wall": round(wall, 2),
        "peak": sampler.peak,
        "cpu": round(sum(sampler.cpu.values()), 1),
        "cpu_split": sampler.cpu_split(),
        "series": sampler.series,
        "load_before": load_before,
        "load_after": load(),
    }


def json_lines(path: str) -> list[dict]:
    """The structured lines of a log file."""
    with open(path, errors="replace") as handle:
        return read_log_lines(handle.read())


def mb(n: int) -> int:
    return int(round(n / 1024 / 1024))


def parse_iso(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def print_wide(title: str, columns: list[str], rows: list[list]) -> None:
    """bench.print_table, on a console wide enough for these columns even when piped."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(str(v) for v in row))
    Console(width=max(160, Console().width)).print(table)


# --- contenders ---------------------------------------------------------------------------------


def _plan_label(plan: str) -> str:
    """A short name for a SQL execution: the first informative operator of its physical plan."""
    import re

    lines = plan.split("== Physical Plan ==", 1)[-1].strip().splitlines()
    for line in lines:
        text = re.sub(r"^[\s+\-:*()0-9]*", "", line).strip()
        if not text or text.startswith(
            ("AdaptiveSparkPlan", "ResultQueryStage", "ShuffleQueryStage", "TableCacheQueryStage")
        ):
            continue
        text = re.sub(r"file:\S*/(sessions|state|_quarantine|query|lake)\S*", r"<\1>", text)
        text = re.sub(r"\[.*", "", text)
        text = re.sub(r"\s*\(\d+\)$", "", text)[:50]
        body = plan.split("== Physical Plan ==", 1)[-1]
        flags = [
            name
            for needle, name in (
                ("from_json", "parses JSON"),
                ("Window ", "window functions"),
                ("Generate ", "explodes state"),
                ("InMemoryTableScan", "reads a cache"),
                ("FileScan parquet", "reads Parquet"),
                ("FileScan text", "reads landed text"),
                ("Exchange ", "shuffles"),
            )
            if needle in body
        ]
        return f"{text} ({', '.join(flags)})" if flags else text
    return "?"


def spark_job_profile(event_log_dir: str, top: int = 8) -> dict:
    """From a Spark event log: job seconds grouped by what the job's SQL execution does (the call
    site is useless here: jobs run from foreachBatch all show py4j's callback frame)."""
    starts, totals, labels = {}, {}, {}
    task_ms = cpu_ns = 0
    paths = [
        os.path.join(folder, name)
        for folder, _, names in os.walk(event_log_dir)
        for name in names
        if not name.startswith((".", "appstatus"))
    ]
    for path in paths:
        with open(path, errors="replace") as handle:
            for line in handle:
                head = line[:120]
                if "SQLExecutionStart" in head:
                    event = json.loads(line)
                    labels[event["executionId"]] = _plan_label(event.get("physicalPlanDescription", ""))
                elif '"SparkListenerJobStart"' in head:
                    event = json.loads(line)
                    props = event.get("Properties") or {}
                    execution = props.get("spark.sql.execution.id")
                    site = labels.get(int(execution), "?") if execution is not None else "(no SQL execution)"
                    starts[event["Job ID"]] = (site, event["Submission Time"])
                elif '"SparkListenerStageCompleted"' in head:
                    info = json.loads(line)["Stage Info"]
                    metrics = {a["Name"]: a.get("Value") for a in info.get("Accumulables", [])}
                    task_ms += int(metrics.get("internal.metrics.executorRunTime") or 0)
                    cpu_ns += int(metrics.get("internal.metrics.executorCpuTime") or 0)
                elif '"SparkListenerJobEnd"' in head:
                    event = json.loads(line)
                    if event["Job ID"] not in starts:
                        continue
                    site, began = starts.pop(event["Job ID"])
                    count, seconds = totals.get(site, (0, 0.0))
                    totals[site] = (count + 1, seconds + (event["Completion Time"] - began) / 1000)
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][1])
    return {
        "jobs": sum(c for c, _ in totals.values()),
        "job_seconds": round(sum(sec for _, sec in totals.values()), 1),
        "task_seconds": round(task_ms / 1000, 1),
        "task_cpu_seconds": round(cpu_ns / 1e9, 1),
        "top": [(site, count, round(seconds, 1)) for site, (count, seconds) in ranked[:top]],
    }


def phase_summary(phases: list[dict]) -> str:
    """Where the batches' time went (each `batch committed` log's `phases`): the first batch, which
    pays the cold process's start-up (plans compiled, JIT, Python workers), and the median of the
    others."""

    def spell(values: dict) -> str:
        return ", ".join(f"{name} {seconds:.2f}" for name, seconds in values.items())

    text = f"phases of the first batch (s): {spell(phases[0])}"
    rest = phases[1:]
    if rest:
        median = {name: statistics.median(p[name] for p in rest) for name in rest[0]}
        text += f"; median of the {len(rest)} others: {spell(median)}"
    return text


def spark_phase_summary(progress: list[dict]) -> str:
    """Spark's durations of each trigger (its `query progress` logs): the median per phase, and
    what a batch spends outside tidemark's foreachBatch (addBatch)."""
    phases = ("latestOffset", "getBatch", "queryPlanning", "addBatch", "walCommit", "commitOffsets")
    medians = {name: statistics.median(p.get(name, 0) for p in progress) for name in (*phases, "triggerExecution")}
    outside = statistics.median(p.get("triggerExecution", 0) - p.get("addBatch", 0) for p in progress)
    return (
        f"Spark's phases per trigger ({len(progress)} batches, median ms): "
        + ", ".join(f"{name} {medians[name]:.0f}" for name in phases)
        + f"; trigger {medians['triggerExecution']:.0f}, of it outside foreachBatch {outside:.0f}"
    )


def run_tidemark(
    landing: str, work: str, fpt: int | None, master: str, event_log: bool = False, jvm_profile: bool = False
) -> dict:
    os.makedirs(work, exist_ok=True)
    lake, checkpoint = os.path.join(work, "lake"), os.path.join(work, "checkpoint")
    for path in (lake, checkpoint):
        shutil.rmtree(path, ignore_errors=True)
    log_path = os.path.join(work, "stream.log")
    argv = [
        os.path.join(BIN, "tidemark"),
        "stream",
        "--landing",
        landing,
        "--lake",
        lake,
        "--checkpoint",
        checkpoint,
        "--available-now",
        "--master",
        master,
    ]
    if fpt:
        argv += ["--max-files-per-trigger", str(fpt)]
    # Without the stream's warm-up (streaming_job/warmup.py): every contender starts cold, and the
    # in-job time (first batch -> last commit) of a warmed stream would leave its compilation out.
    env = {"TIDEMARK_STREAM_WARMUP": "0"}
    if event_log:
        events = os.path.join(work, "spark-events")
        os.makedirs(events, exist_ok=True)
        env["PYSPARK_SUBMIT_ARGS"] = (
            f"--conf spark.eventLog.enabled=true --conf spark.eventLog.dir=file://{events} "
            "--conf spark.eventLog.compress=false --conf spark.eventLog.rolling.enabled=false "
            "pyspark-shell"
        )
    recording = os.path.join(work, "stream.jfr")
    if jvm_profile:
        from streaming_job.job import JAVA_OPTIONS_ENV, STREAM_JAVA_OPTIONS

        env[JAVA_OPTIONS_ENV] = f"{STREAM_JAVA_OPTIONS} {jvm_profile_module.java_options(recording)}"
    result = run_measured(argv, log_path, env=env)
    if event_log:
        result["profile"] = spark_job_profile(events)
    if jvm_profile:
        result["jvm"] = jvm_profile_module.classify(jvm_profile_module.samples(recording))
        with open(log_path, errors="replace") as handle:
            result["jvm"]["jit"] = jvm_profile_module.compile_totals(handle.read())
    logs = json_lines(log_path)
    batches = [l for l in logs if l.get("event") == "batch committed" and not l.get("warmup")]
    result["batches"] = len(batches)
    result["batch_seconds"] = [b["seconds"] for b in batches]
    result["batch_lines"] = [b["input_lines"] for b in batches]
    result["batch_phases"] = [b.get("phases", {}) for b in batches]
    result["spark_phases"] = [l["durations_ms"] for l in logs if l.get("event") == "query progress"]
    result["lines"] = sum(b["input_lines"] for b in batches)
    if batches:
        # in-job time: first batch start (commit time - its duration) -> last commit
        first = parse_iso(batches[0]["timestamp"]) - batches[0]["seconds"]
        result["job_seconds"] = round(parse_iso(batches[-1]["timestamp"]) - first, 2)
    result["log"] = log_path
    result["lake"] = lake
    return result


def class_archive_note() -> str:
    """Whether the Spark contenders' JVMs started from tidemark's class archive (all of them or none)."""
    from tidemark.base import class_archive

    path = class_archive.built_archive()
    if path is None:
        return "JVM class archive: none (every Spark contender loads its classes from the jars)."
    return (
        f"JVM class archive: {os.path.basename(path)}, for every Spark contender (each starts through "
        "tidemark's session builder, which gives it): class loading inside the floor's and the built-in's "
        "jobs is cut as tidemark's is (BENCHMARKS.md section 1)."
    )


def run_floor(landing: str, work: str, master: str) -> dict:
    out = os.path.join(work, "floor")
    shutil.rmtree(out, ignore_errors=True)
    log_path = os.path.join(work, "floor.log")
    result = run_measured(
        [sys.executable, "-m", "bench.stream_throughput", "--floor-worker", landing, out, "--master", master], log_path
    )
    worker = [l for l in json_lines(log_path) if "floor" in l]
    if worker:
        result.update(worker[-1]["floor"])
    return result


# The landed events' fields, as the floor and the built-in read them (no contract: plain JSON).
LANDED_SCHEMA = "event_id string, user_id string, event_type string, event_ts string, device string, content_id string"


def _floor_copy(spark, landing: str, out: str) -> None:
    """The floor: the same JSON lines, parsed with a schema, written as event-date partitions."""
    from pyspark.sql import functions as F

    df = spark.read.schema(LANDED_SCHEMA).option("pathGlobFilter", "*.jsonl").json(landing)
    df = df.withColumn("event_ts", F.try_to_timestamp("event_ts")).withColumn(
        "event_date", F.date_format("event_ts", "yyyy-MM-dd")
    )
    df.write.mode("overwrite").partitionBy("event_date").parquet(out)


def floor_worker(landing: str, out: str, master: str) -> None:
    """The floor in a process of its own, cold: its time from the SparkSession on."""
    from tidemark.base.spark import build_session

    spark = build_session("bench-floor", master)
    started = time.perf_counter()
    _floor_copy(spark, landing, out)
    seconds = time.perf_counter() - started
    lines = spark.read.option("pathGlobFilter", "*.jsonl").text(landing).count()
    print(json.dumps({"floor": {"job_seconds": round(seconds, 2), "lines": lines, "batches": 1}}), flush=True)
    spark.stop()


def run_builtin(landing: str, work: str, fpt: int | None, master: str, events: bool = False) -> dict:
    """Spark's own streaming session windows over the landing, in a process of its own (cold).

    `events`: each session with its events too (builtin_worker)."""
    out, checkpoint = os.path.join(work, "builtin"), os.path.join(work, "builtin-checkpoint")
    for path in (out, checkpoint):
        shutil.rmtree(path, ignore_errors=True)
    log_path = os.path.join(work, "builtin.log")
    argv = [sys.executable, "-m", "bench.stream_throughput", "--builtin-worker", landing, out, checkpoint]
    argv += ["--master", master] + (["--files-per-trigger", str(fpt)] if fpt else [])
    argv += ["--builtin-events"] if events else []
    result = run_measured(argv, log_path)
    worker = [line for line in json_lines(log_path) if "builtin" in line]
    if worker:
        result.update(worker[-1]["builtin"])
    return result


def builtin_worker(landing: str, out: str, checkpoint: str, master: str, fpt: int | None, events: bool = False) -> None:
    """`session_window` as the Structured Streaming guide writes it, on tidemark's default rules.

    The same rules as `tidemark stream`'s defaults (30 minute gap, 10 minute watermark delay), the
    same parse of the event time as the floor; what it does not do is what tidemark adds: no
    deduplication, no check of each line (unparsable times are dropped), no early panes, nothing
    kept of data later than the watermark, no markers or notices.

    The guide's query counts each session's events; tidemark's panes hold the events themselves.
    With `events` each session also collects its events (time, id, type and the landed fields
    tidemark keeps as the payload, as plain columns): the same output shape as tidemark's.
    """
    from pyspark.sql import functions as F

    from tidemark.base.session_rules import SessionRules
    from tidemark.base.spark import build_session

    rules = SessionRules()
    spark = build_session("bench-builtin-session-window", master)
    started = time.perf_counter()
    reader = spark.readStream.schema(LANDED_SCHEMA).option("pathGlobFilter", "*.jsonl")
    if fpt:
        reader = reader.option("maxFilesPerTrigger", fpt)
    landed = (
        reader.json(landing)
        .withColumn("event_ts", F.try_to_timestamp("event_ts"))
        .where(F.col("event_ts").isNotNull() & F.col("user_id").isNotNull())
        .withWatermark("event_ts", f"{int(rules.watermark_delay.total_seconds())} seconds")
    )
    counts = [F.count("*").alias("event_count"), F.size(F.collect_set("event_type")).alias("event_type_count")]
    if events:
        fields = ("event_ts", "event_id", "event_type", "device", "content_id")
        counts.append(F.collect_list(F.struct(*fields)).alias("events"))
    session = F.session_window("event_ts", f"{int(rules.gap.total_seconds())} seconds")
    sessions = landed.groupBy("user_id", session).agg(*counts)
    query = (
        sessions.select(
            "user_id",
            F.col("session_window.start").alias("session_start"),
            F.col("session_window.end").alias("session_end"),
            "event_count",
            "event_type_count",
            *(["events"] if events else []),
            F.date_format("session_window.start", "yyyy-MM-dd").alias("event_date"),
        )
        .writeStream.format("parquet")
        .outputMode("append")
        .partitionBy("event_date")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start(out)
    )
    query.awaitTermination()
    seconds = time.perf_counter() - started
    batches = sum(1 for progress in query.recentProgress if progress.get("numInputRows", 0) > 0)
    lines = spark.read.option("pathGlobFilter", "*.jsonl").text(landing).count()
    sessions_written = spark.read.parquet(out).count()
    print(
        json.dumps(
            {
                "builtin": {
                    "job_seconds": round(seconds, 2),
                    "lines": lines,
                    "batches": batches,
                    "sessions": sessions_written,
                }
            }
        ),
        flush=True,
    )
    spark.stop()


CONTRACT_SAMPLE = 100_000  # landed lines timed outside Spark for the contract's CPU per line


def measure_contract(landing: str) -> str:
    """The input contract's CPU per line on the landing's first lines, outside Spark (in this
    process, Arrow batches of 10,000 lines as the stream's UDF gets them): the stream's fast path
    and the reference it falls back to; target <= 3 us for the fast path."""
    from bench import contract_differential
    from tidemark.ingest.contract import split_lines

    lines = []
    for name in sorted(f for f in os.listdir(landing) if f.endswith(".jsonl")):
        with open(os.path.join(landing, name), "rb") as handle:
            lines += split_lines(handle.read())
        if len(lines) >= CONTRACT_SAMPLE:
            break
    lines = lines[:CONTRACT_SAMPLE]
    load_before = load()
    cost = contract_differential.cpu_per_line(lines)
    return (
        f"The input contract's CPU per line on the first {len(lines)} landed lines, outside Spark, best of 3 "
        f"(load {load_before} -> {load()}): "
        + "; ".join(f"{k} {v} us" for k, v in cost.items())
        + " (target for the fast path: <= 3 us)."
    )


def beam_available() -> bool:
    if not os.access(BEAM_PYTHON, os.X_OK):
        return False
    return subprocess.run([BEAM_PYTHON, "-c", "import apache_beam"], capture_output=True).returncode == 0


def run_beam(landing: str, work: str, files: list[str], timeout: float) -> dict:
    subset = os.path.join(work, "beam-input")
    shutil.rmtree(subset, ignore_errors=True)
    os.makedirs(subset)
    for name in files:
        os.link(os.path.join(landing, name), os.path.join(subset, name))
    out = os.path.join(work, "beam-out")
    shutil.rmtree(out, ignore_errors=True)
    log_path = os.path.join(work, "beam.log")
    result = run_measured(
        [
            BEAM_PYTHON,
            os.path.join(ROOT, "bench", "beam_sessions.py"),
            "--input",
            os.path.join(subset, "*.jsonl"),
            "--output",
            out,
        ],
        log_path,
        timeout=timeout,
    )
    worker = [l for l in json_lines(log_path) if "beam" in l]
    if worker:
        result.update(worker[-1]["beam"])
    result["files"] = len(files)
    return result


LADDER_COLUMNS = ["stage (warm, one process, the faster of two runs)", "seconds", "vs warm floor"]


def ladder_worker(landing: str, work: str, master: str) -> None:
    """Where one large micro-batch's time goes, warm: the floor's copy, then the batch's steps cut
    after each one, each run twice in one process (the faster counts), and the whole batch.

    Every stage is run from the landed files (cumulative), into Spark's `noop` sink unless it is the
    write, so the differences between rows are what each step adds. The steps are the stream's own
    code (streaming_job.parse, BatchProcessor's sessionizing and panes); a cold process pays more
    (the plans and the Python workers start), which the main table's `in-job` figures carry."""
    from pyspark.sql import functions as F

    from streaming_job import parse
    from streaming_job.batch import BatchProcessor, sessionize
    from streaming_job.job import StreamConfig, run_stream
    from streaming_job.state import NO_WATERMARK_US, STATE_SCHEMA
    from tidemark.base.session_rules import SessionRules
    from tidemark.base.spark import build_session

    spark = build_session("bench-ladder", master)
    rules = SessionRules()
    no_state = spark.createDataFrame([], STATE_SCHEMA)
    watermark_us = 2**62  # closes every session: each one emits its pane
    output = os.path.join(work, "ladder-out")

    def lines():  # the stream's source (streaming_job.job.source), read as a batch
        return (
            spark.read.format("text")
            .option("recursiveFileLookup", "true")
            .option("lineSep", "\n")
            .load(landing)
            .select(
                "value", F.col("_metadata.file_path").alias("source_file"), F.current_timestamp().alias("receipt_time")
            )
        )

    def noop(frame):
        frame.write.format("noop").mode("overwrite").save()

    def cached_batch(then):
        # as a batch does: the checked lines cached, filled by the batch's totals aggregation
        checked = parse.with_parse(lines()).persist()
        try:
            checked.agg(F.count(F.lit(1)), F.max("receipt_time")).first()
            if then is not None:
                then(sessionize(spark, parse.valid_events(checked), no_state, rules, NO_WATERMARK_US, watermark_us))
        finally:
            checked.unpersist()

    def write_panes(result):
        shutil.rmtree(output, ignore_errors=True)
        (
            BatchProcessor._panes(result, "20990101T000000000Z", 0, watermark_us)
            .repartition("event_date")
            .write.mode("overwrite")
            .partitionBy("event_date", "receipt_ts")
            .parquet(output)
        )

    def whole_batch():
        shutil.rmtree(os.path.join(work, "ladder-stream"), ignore_errors=True)
        run_stream(
            StreamConfig(
                landing=landing,
                lake=os.path.join(work, "ladder-stream", "lake"),
                checkpoint=os.path.join(work, "ladder-stream", "checkpoint"),
                available_now=True,
            ),
            spark=spark,
        )

    def floor():
        shutil.rmtree(output, ignore_errors=True)
        _floor_copy(spark, landing, output)

    stages = [
        ("floor: the plain copy (read.json -> write.parquet)", floor),
        ("scan the landed lines (text source)", lambda: noop(lines())),
        (
            "+ the input contract per line (Arrow UDF, tidemark.ingest.contract_fast)",
            lambda: noop(parse.with_parse(lines())),
        ),
        ("+ cache the checked lines (persist, the batch's totals)", lambda: cached_batch(None)),
        (
            "+ merge copies, sessionize, classify panes (stream_input, sessionize, stream_panes .sql)",
            lambda: cached_batch(noop),
        ),
        ("+ write the panes (Parquet by event date and receipt)", lambda: cached_batch(write_panes)),
        ("the whole batch: `tidemark stream --available-now` (+ statistics, quarantine, state, markers)", whole_batch),
    ]
    rows, floor_seconds = [], None
    for label, stage in stages:
        runs = []
        for _ in range(2):
            with bench.stopwatch() as t:
                stage()
            runs.append(t["seconds"])
        seconds = min(runs)
        floor_seconds = floor_seconds or seconds
        rows.append([label, round(seconds, 2), f"{seconds / floor_seconds:.2f}x"])
    print(json.dumps({"ladder": rows}), flush=True)
    spark.stop()


def run_ladder(landing: str, work: str, master: str) -> dict:
    log_path = os.path.join(work, "ladder.log")
    result = run_measured(
        [sys.executable, "-m", "bench.stream_throughput", "--ladder-worker", landing, work, "--master", master],
        log_path,
    )
    found = [l for l in json_lines(log_path) if "ladder" in l]
    if result["rc"] != 0 or not found:
        raise SystemExit(f"the stage ladder failed, see {log_path}")
    result["rows"] = found[-1]["ladder"]
    return result


# --- the benchmark ------------------------------------------------------------------------------


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m bench.stream_throughput",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--scale", choices=sorted(SCALES), default="small")
    p.add_argument("--events", type=int, help="override the scale's event count")
    p.add_argument("--files", type=int, help="override the scale's landed file count")
    p.add_argument("--files-per-trigger", type=int, nargs="+", help="tidemark runs, one per value")
    p.add_argument("--beam-files", type=int, help="Beam reads only the first N files (it is slow)")
    p.add_argument("--beam-timeout", type=float, default=1200)
    p.add_argument("--skip-beam", action="store_true")
    p.add_argument(
        "--event-log",
        action="store_true",
        help="also write Spark event logs of the tidemark runs and rank their Spark jobs by time",
    )
    p.add_argument(
        "--jvm-profile",
        action="store_true",
        help="record the tidemark runs' JVM (flight recorder, JIT totals): Java CPU by thread (tasks, the "
        "driver thread) and the driver's by planning step, and the JIT compiler's seconds (bench/jvm_profile.py)",
    )
    p.add_argument("--master", default="local[2]")
    p.add_argument("--workdir", default="/tmp/tidemark-bench/stream_throughput")
    p.add_argument("--no-write", action="store_true", help="do not write bench/results/")
    p.add_argument(
        "--ladder",
        action="store_true",
        help="also run the stage ladder: one warm process times the floor, each step of a "
        "micro-batch cumulatively, and the whole batch (section 1 of BENCHMARKS.md)",
    )
    p.add_argument(
        "--runs",
        type=int,
        default=1,
        help="run every contender this many times, interleaved; the table shows each one's median run",
    )
    p.add_argument(
        "--skip-builtin", action="store_true", help="do not run Spark's own session_window (any form, any rate)"
    )
    p.add_argument("--floor-worker", nargs=2, metavar=("LANDING", "OUT"), help=argparse.SUPPRESS)
    p.add_argument("--builtin-worker", nargs=3, metavar=("LANDING", "OUT", "CHECKPOINT"), help=argparse.SUPPRESS)
    p.add_argument("--builtin-events", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--ladder-worker", nargs=2, metavar=("LANDING", "WORK"), help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv if argv is not None else sys.argv[1:])
    if args.floor_worker:
        floor_worker(*args.floor_worker, args.master)
        return 0
    if args.ladder_worker:
        ladder_worker(*args.ladder_worker, args.master)
        return 0
    if args.builtin_worker:
        fpt = args.files_per_trigger[0] if args.files_per_trigger else None
        builtin_worker(*args.builtin_worker, args.master, fpt, args.builtin_events)
        return 0
    scale = dict(SCALES[args.scale])
    events = args.events or scale["events"]
    files = args.files or scale["files"]
    fpts = args.files_per_trigger or scale["fpt"]
    env = bench.machine()
    work = args.workdir
    shutil.rmtree(work, ignore_errors=True)
    landing = os.path.join(work, "landing")
    workload = generate.Workload(
        events=events, users=scale["users"], days=scale["days"], files=files, start=date(2026, 3, 1), seed=11
    )
    with bench.stopwatch() as t:
        summary = generate.generate(landing, workload, progress=False)
    print(f"generated {summary['deliveries']} lines in {summary['files']} files ({t['seconds']}s)", flush=True)
    lines = summary["deliveries"]

    columns = [
        "contender",
        "input lines",
        "batches",
        "files/trigger",
        "wall s",
        "in-job s",
        "events/s (wall)",
        "events/s (in-job)",
        "vs floor (in-job)",
        "peak PSS MB (JVM+Py)",
        "CPU s (tree)",
        "CPU s: " + " / ".join(CPU_KINDS),
        "load before->after",
    ]
    results = []

    # Each contender `--runs` times, interleaved (floor, built-in, tidemark, floor, ...) so that a
    # change in the machine's load falls on all of them; each one's median run is reported.
    contenders = [("floor: PySpark read.json -> write.parquet", None)]
    if not args.skip_builtin:
        contenders.append((f"{BUILTIN}, {fpts[0]} files/trigger", fpts[0]))
        contenders.append((f"{BUILTIN_EVENTS}, {fpts[0]} files/trigger", fpts[0]))
        # The guide's query at every further rate tidemark runs at too: what Spark's own operator
        # reaches in several micro-batches is the context for that rate's target.
        contenders += [(f"{BUILTIN}, {fpt} files/trigger", fpt) for fpt in fpts[1:]]
    contenders += [(f"tidemark stream, {fpt} files/trigger", fpt) for fpt in fpts]
    runs: dict[str, list[dict]] = {label: [] for label, _ in contenders}
    for attempt in range(args.runs):
        for label, fpt in contenders:
            if label.startswith("floor"):
                r = run_floor(landing, work, args.master)
                where = os.path.join(work, "floor.log")
            elif label.startswith("Spark"):
                r = run_builtin(landing, work, fpt, args.master, events=label.startswith(BUILTIN_EVENTS))
                where = os.path.join(work, "builtin.log")
            else:
                r = run_tidemark(
                    landing,
                    os.path.join(work, f"tidemark-fpt{fpt}"),
                    fpt,
                    args.master,
                    args.event_log,
                    args.jvm_profile,
                )
                where = r["log"]
            if r["rc"] != 0 or "job_seconds" not in r:
                raise SystemExit(f"{label} failed, see {where}")
            if r["lines"] != lines:
                raise SystemExit(f"{label} read {r['lines']} lines, expected {lines}")
            print(f"run {attempt + 1}/{args.runs}: {label}: {r['job_seconds']} s in the job", flush=True)
            runs[label].append(r)
    for label, fpt in contenders:
        ordered = sorted(runs[label], key=lambda r: r["job_seconds"])
        median = ordered[(len(ordered) - 1) // 2]
        median["every_run"] = [r["job_seconds"] for r in runs[label]]
        results.append((label, median, fpt or files, lines))
    floor = results[0][1]
    floor_rate = lines / floor["job_seconds"]

    def vs_floor(result: dict, n: int = lines) -> float:
        """A contender's events/s in the job as a multiple of the floor's (n: the lines it read)."""
        return (n / result["job_seconds"]) / floor_rate

    beam_note = ""
    if args.skip_beam:
        beam_note = "Beam: skipped (--skip-beam)."
    elif not beam_available():
        beam_note = (
            "Beam: not measured: `.venv-beam` with apache-beam is not installed (see "
            "BENCHMARKS.md for how to create it)."
        )
    else:
        names = sorted(f for f in os.listdir(landing) if f.endswith(".jsonl"))
        take = names[: min(len(names), args.beam_files or scale["beam_files"])]
        beam_lines = sum(1 for name in take for _ in Path(os.path.join(landing, name)).read_text().splitlines())
        r = run_beam(landing, work, take, args.beam_timeout)
        if r["rc"] != 0 or "job_seconds" not in r:
            beam_note = f"Beam: failed or timed out after {r['wall']}s (rc {r['rc']}), see {work}/beam.log."
        else:
            results.append((f"Beam DirectRunner sessions ({len(take)}/{len(names)} files)", r, len(take), beam_lines))
            beam_note = (
                f"Beam read the first {len(take)} of {len(names)} files ({beam_lines} lines): "
                "the Python DirectRunner is too slow for all of them in the time box."
            )

    contract_cost = measure_contract(landing)
    rows = []
    for label, r, fpt, n in results:
        rate_job = n / r["job_seconds"]
        rows.append(
            [
                label,
                n,
                r.get("batches", "-"),
                fpt,
                r["wall"],
                r["job_seconds"],
                int(n / r["wall"]),
                int(rate_job),
                f"{vs_floor(r, n):.2f}",
                f"{mb(r['peak']['total'])} ({mb(r['peak']['jvm'])}+{mb(r['peak']['python'])})",
                r.get("cpu", "-"),
                " / ".join(str(r["cpu_split"][kind]) for kind in CPU_KINDS) if r.get("cpu_split") else "-",
                f"{r['load_before']} -> {r['load_after']}",
            ]
        )
    print_wide(f"Stream throughput ({args.scale})", columns, rows)

    detail = []
    if args.runs > 1:
        detail.append(
            f"- {args.runs} runs of each contender, interleaved; the table shows the median run (by in-job "
            "seconds). In-job seconds of every run: "
            + "; ".join(f"{label}: {', '.join(str(x) for x in r['every_run'])}" for label, r, _, _ in results)
        )
    for label, r, _, _ in results:
        if r.get("batch_seconds"):
            s = r["batch_seconds"]
            detail.append(
                f"- {label}: per-batch seconds (from `batch committed` logs): "
                f"min {min(s)}, median {sorted(s)[len(s) // 2]}, max {max(s)}, sum {round(sum(s), 1)}"
            )
        if r.get("batch_phases"):
            detail.append(f"  - {phase_summary(r['batch_phases'])}")
        if r.get("spark_phases"):
            detail.append(f"  - {spark_phase_summary(r['spark_phases'])}")
        if r.get("jvm"):
            detail.append(f"  - {jvm_profile_module.summary_line(r['jvm'])}")
        if r.get("profile"):
            prof = r["profile"]
            detail.append(
                f"  - Spark event log: {prof['jobs']} Spark jobs ({prof['jobs'] / max(1, r['batches']):.1f} per batch), "
                f"{prof['job_seconds']} s inside jobs, "
                f"i.e. {round(sum(r['batch_seconds']) - prof['job_seconds'], 1)} s of the batches' time "
                "outside any Spark job (driver: planning, py4j, listing, markers; jobs can also overlap); "
                f"tasks ran {prof['task_seconds']} s in all, {prof['task_cpu_seconds']} s of it on a JVM "
                "task thread's CPU (the Python workers, Arrow writer threads, GC and JIT are not in it)"
            )
            detail.append(
                "  - costliest jobs, by the first operator of their physical plan: "
                + "; ".join(f"`{site}` x{count} {seconds}s" for site, count, seconds in prof["top"])
            )
    pairs = [
        (n_lines, sec)
        for label, r, _, _ in results
        if label.startswith("tidemark")
        for n_lines, sec in zip(r.get("batch_lines", []), r.get("batch_seconds", []), strict=False)
    ]
    if len({p[0] for p in pairs}) > 1:
        n = len(pairs)
        mx, my = sum(p[0] for p in pairs) / n, sum(p[1] for p in pairs) / n
        slope = sum((x - mx) * (y - my) for x, y in pairs) / sum((x - mx) ** 2 for x, _ in pairs)
        fixed = my - slope * mx
        detail.append(
            f"- Least-squares fit over every tidemark batch: seconds = {fixed:.2f} per batch + "
            f"{slope * 1e6:.1f} per million lines (the fixed part is what a batch costs however "
            f"small: its Spark jobs, state read/write, markers)."
        )
    verdicts = []
    builtin_at = {fpt: r for label, r, fpt, _ in results if label.startswith(BUILTIN + ",")}
    builtin = builtin_at.get(fpts[0])  # the first rate's (one batch at full scale): the target
    with_events = next((r for label, r, _, _ in results if label.startswith(BUILTIN_EVENTS)), None)
    for label, r, fpt, _ in results:
        if not label.startswith("tidemark"):
            continue
        ratio = vs_floor(r)
        target = 0.7 if fpt >= files else 0.5  # one batch of every file, or several batches
        verdicts.append(f"{label}: {ratio:.2f}x the floor (target {target}x: {'MET' if ratio >= target else 'MISSED'})")
        if builtin is not None and fpt == fpts[0]:
            met = r["job_seconds"] <= builtin["job_seconds"]
            verdicts.append(
                f"{label}: {r['job_seconds']} s in the job against Spark's session_window's "
                f"{builtin['job_seconds']} s (target: no slower: {'MET' if met else 'MISSED'})"
            )
        elif fpt in builtin_at:
            other = builtin_at[fpt]
            verdicts.append(
                f"{label}: {r['job_seconds']} s against Spark's session_window's {other['job_seconds']} s at the "
                f"same rate, {vs_floor(other):.2f}x the floor (context, not a target)"
            )
        if with_events is not None and fpt == fpts[0]:
            faster = r["job_seconds"] <= with_events["job_seconds"]
            verdicts.append(
                f"{label}: {r['job_seconds']} s against Spark's session_window with its events' "
                f"{with_events['job_seconds']} s (the same output shape; not a target: "
                f"{'no slower' if faster else 'slower'})"
            )
    verdict = "Targets, in-job, median runs: " + "; ".join(verdicts) + "."
    notes = "\n".join(
        [
            "Each contender ran cold in its own process on the same landed files, one after the other. "
            "`wall` includes JVM / interpreter start; `in-job` excludes it (tidemark: first micro-batch "
            "start -> last commit, from the `batch committed` logs; floor and Spark's session_window: after the SparkSession exists; "
            "Beam: pipeline run). events/s counts every input line (duplicates and malformed lines too). "
            "The CPU split is the whole process tree's, start included, from its threads' own counters: the "
            "JVM's JIT compiler threads, Spark's task threads, its collector, its other threads (the driver, "
            "py4j, listeners, threads that ended between two samples), and the Python processes.",
            "",
            class_archive_note(),
            "",
            verdict,
            "",
            contract_cost,
            "",
            beam_note,
            "",
            *detail,
        ]
    )
    after = ""
    if args.ladder:
        ladder = run_ladder(landing, work, args.master)
        after = "\n".join(
            [
                f"## Stage ladder (load {ladder['load_before']} -> {ladder['load_after']})",
                "",
                "One process, warm: each row runs the steps above it too, from the landed files (the "
                "faster of two runs), into Spark's noop sink unless it writes; the whole batch last.",
                "",
                *bench.markdown_table(LADDER_COLUMNS, ladder["rows"]),
            ]
        )
    print(notes + ("\n\n" + after if after else ""))
    if not args.no_write:
        path = bench.write_results(
            NAME,
            f"Stream throughput ({args.scale})",
            columns,
            rows,
            notes,
            {
                "scale": args.scale,
                "events": events,
                "input lines": lines,
                "files": files,
                "users": scale["users"],
                "event days": scale["days"],
                "master": args.master,
                "runs per contender": args.runs,
                "workload": "tidemark.demo.generate.Workload(seed=11): 3% duplicates, 0.2% malformed, 10% minutes late, "
                "2% sessions offline for hours to days",
            },
            env,
            after=after,
        )
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
