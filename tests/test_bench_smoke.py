"""Smoke tests of the benchmarks: they run at a tiny scale and write a well-formed results table.
No timing is asserted anywhere (speed lives in bench/, see BENCHMARKS.md)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import bench
from bench import __main__ as runner
from bench import freshness, memory, spark_start, stream_throughput
from tests.helpers import ended_pid, write_stack_record


def results_table(path: str) -> tuple[list[str], list[list[str]]]:
    """The first markdown table of a results file: header and rows, each row as wide as the header."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| "))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    assert re.match(r"^\|(---\|)+$", lines[start + 1])
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("| "):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    assert rows
    assert all(len(r) == len(header) for r in rows)
    text = "\n".join(lines)
    assert "## Machine" in text
    assert "load average" in text
    return header, rows


def test_runner_lists_every_benchmark_and_passes_scale_only_to_modules_that_take_it():
    names = runner.available()
    assert names[:3] == ["stream_throughput", "memory", "freshness"]
    assert "beam_sessions" not in names
    assert runner.module_argv(stream_throughput, "stream_throughput", "full", ["--no-write"]) == [
        "--scale",
        "full",
        "--no-write",
    ]

    class NoScale:
        @staticmethod
        def parse_args(argv):
            import argparse

            argparse.ArgumentParser().parse_args(argv)

    assert runner.module_argv(NoScale, "correction_cost", "full", []) == []


def test_runner_refuses_an_unknown_benchmark():
    with pytest.raises(SystemExit):
        runner.main(["no_such_bench"])


def test_landings_fall_evenly_over_the_streams_trigger_cycle():
    # 30 s between landings is a multiple of a 5 s trigger: without the stagger every landing of a
    # run would wait the same time for its batch
    waves, pause = 10, 30.0
    step = pause + freshness.landing_stagger("5s", waves)
    phases = sorted(round((i * step) % 5.0, 6) for i in range(waves))
    assert phases == [round(k * 0.5, 6) for k in range(waves)]
    assert freshness.landing_stagger(None, waves) == 0.0  # no trigger interval: nothing to spread over


def test_the_freshness_waits_stop_when_a_stack_server_exits_not_when_the_warmup_ends(tmp_path, capsys):
    from tidemark.devstack import connect_warmup
    from tidemark.devstack.stack import Stack

    stack = Stack(str(tmp_path / "home"))
    write_stack_record(stack, "stream", os.getpid(), "/logs/stream.log")
    write_stack_record(stack, connect_warmup.NAME, ended_pid(), "/logs/warmup.log")
    polls = []

    def done_at_the_second_poll():
        polls.append(1)
        return len(polls) >= 2, f"poll {len(polls)}"

    assert freshness.wait_for(done_at_the_second_poll, 30, "runs", 0.01, stack=stack)  # the warm-up's end: no exit
    write_stack_record(stack, "airflow-scheduler", ended_pid(), "/logs/scheduler.out")
    assert not freshness.wait_for(lambda: (False, "1 running"), 600, "DAG runs", 0.01, stack=stack)
    assert "DAG runs: STOPPED WAITING: airflow-scheduler (log: /logs/scheduler.out) exited" in capsys.readouterr().out


def test_percentile_is_nearest_rank():
    values = list(range(1, 101))
    assert freshness.percentile(values, 50) == 50
    assert freshness.percentile(values, 95) == 95
    assert freshness.percentile([3.0], 95) == 3.0


def test_file_batches_reads_only_committed_batches(tmp_path):
    query = tmp_path / "query"
    (query / "commits").mkdir(parents=True)
    (query / "sources" / "0").mkdir(parents=True)
    (query / "commits" / "0").write_text("v1\n{}\n")
    for batch_id, name in ((0, "a.jsonl"), (1, "b.jsonl")):
        (query / "sources" / "0" / str(batch_id)).write_text(
            "v1\n" + json.dumps({"path": f"file:///landing/{name}", "timestamp": 1, "batchId": batch_id}) + "\n"
        )
    assert freshness.file_batches(str(tmp_path)) == {"a.jsonl": 0}


def test_a_corrections_timeline_is_built_from_the_recorded_timestamps(tmp_path):
    landed = 1_000.0  # epoch seconds; the recorded instants below are 2 s ... 9 s after it
    at = lambda seconds: f"1970-01-01T00:{int((landed + seconds) // 60):02d}:{(landed + seconds) % 60:06.3f}Z"  # noqa: E731
    entry = {"recorded_at": at(2.0), "published_at": at(2.5)}
    run = {"dag_run_id": "r", "queued_at": at(2.9), "start_date": at(4.0)}
    tasks = [
        {"task_id": "dedup", "state": "success", "queued_when": at(5.0), "start_date": at(5.5), "end_date": at(8.0)},
        {"task_id": "needs_spark", "state": "success", "start_date": at(4.2), "end_date": at(4.9)},
        {"task_id": "notify", "state": "skipped"},  # never ran: no span
    ]
    spans = freshness.correction_timeline(landed, landed + 1.5, entry, run, tasks, readable=7.9)
    assert [(step, round(a, 2), round(b, 2)) for step, a, b in spans] == [
        ("stream batch (landed -> committed)", 0.0, 1.5),
        ("notice recorded -> published", 2.0, 2.5),
        ("published -> DAG run created (function)", 2.5, 2.9),
        ("DAG run created -> started (scheduler)", 2.9, 4.0),
        ("task needs_spark (success)", 4.2, 4.9),
        ("task dedup: queued", 5.0, 5.5),
        ("task dedup (success)", 5.5, 8.0),
        ("readable (Iceberg commit)", 7.9, 7.9),
    ]
    notices = [
        {"event_date": "2026-03-06", "receipt_ts": f"r{i}", "late": True, "readable_s": r, "timeline": spans}
        for i, r in enumerate((7.9, 12.0, 3.0))
    ] + [{"event_date": "2026-03-07", "receipt_ts": "x", "late": False, "readable_s": 1.0, "timeline": spans}]
    chart = tmp_path / "timeline.png"
    text = freshness.timeline_section(notices, str(chart))
    assert "readable 7.9 s after its file landed" in text  # the median of the three late ones
    assert "| task dedup (success) | 5.50 | 8.00 | 2.50 |" in text
    assert "over the 3 late corrections" in text
    assert chart.read_bytes()[:4] == b"\x89PNG"
    assert "No late notice" in freshness.timeline_section(notices[3:], None)


def test_process_tree_memory_counts_a_tree_without_a_jvm():
    # A child of our own, not this process: a pytest worker may hold a SparkSession's JVM child
    # from an earlier test, which would rightly count as "jvm".
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; b = bytearray(64 << 20); "
            "sys.stdout.write('ready\\n'); sys.stdout.flush(); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        sample = stream_throughput.tree_rss(child.pid)
    finally:
        child.kill()
        child.wait()
    assert sample["total"] > 64 * 1024 * 1024
    assert sample["jvm"] == 0
    assert sample["total"] == sample["python"]


@pytest.mark.slow  # not in make test-fast: the stream bench at smoke scale, minutes
@pytest.mark.spark
@pytest.mark.timeout(900)
def test_stream_throughput_and_memory_write_well_formed_tables(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "RESULTS_DIR", str(tmp_path / "results"))
    assert (
        stream_throughput.main(
            [
                "--scale",
                "tiny",
                "--files-per-trigger",
                "6",
                "3",
                "--skip-beam",
                "--ladder",
                "--jvm-profile",
                "--workdir",
                str(tmp_path / "st"),
            ]
        )
        == 0
    )
    header, rows = results_table(str(tmp_path / "results" / "stream_throughput.md"))
    assert header[0] == "contender"
    # the built-in counting at each rate tidemark runs at, collecting its events at the first
    assert [row[0].split(":")[0] for row in rows] == [
        "floor",
        "Spark session_window, 6 files/trigger",
        "Spark session_window with its events, 6 files/trigger",
        "Spark session_window, 3 files/trigger",
        "tidemark stream, 6 files/trigger",
        "tidemark stream, 3 files/trigger",
    ]
    assert len({row[1] for row in rows}) == 1  # same input lines
    assert all(float(r[header.index("events/s (in-job)")]) > 0 for r in rows)
    assert all(float(r[header.index("CPU s (tree)")]) > 0 for r in rows)  # CPU beside wall: loaded machines
    # the CPU by thread kind: every Spark contender's JVM compiled code and ran tasks; tidemark's
    # Python workers (the contract, the pane writer) did work, the floor's JSON is parsed in the JVM
    split = [
        [float(x) for x in r[header.index("CPU s: JIT / tasks / GC / other JVM / Python")].split(" / ")] for r in rows
    ]
    assert all(jit > 0 and tasks > 0 for jit, tasks, *_ in split)
    assert split[4][4] > split[0][4]
    # the stage ladder: the floor first (1.00x), every step of a batch, the whole batch last
    text = (tmp_path / "results" / "stream_throughput.md").read_text()
    ladder = [
        line.split(" | ")
        for line in text.split("## Stage ladder", 1)[1].splitlines()
        if line.startswith("| ") and not line.startswith("| stage")
    ]
    assert len(ladder) == 7
    assert ladder[0][0].startswith("| floor")
    assert ladder[0][2] == "1.00x |"
    assert "whole batch" in ladder[-1][0]
    assert all(float(row[1]) > 0 for row in ladder)
    # Spark's own phases of each trigger, from the stream's `query progress` logs
    assert re.search(r"Spark's phases per trigger \(\d+ batches, median ms\): latestOffset \d+, .*addBatch \d+", text)
    # the JVM's Java CPU by thread and the driver's by planning step, from a flight recording
    assert re.search(r"JVM samples \(flight recorder, [1-9]\d*\): tasks \d+%, driver thread \d+%", text)
    assert re.search(r"JIT compiler threads: C1 [\d.]+ s for \d+ methods, C2 [\d.]+ s", text)
    # tidemark against both forms of the built-in: the guide's counts (a target), the same output shape
    assert re.search(r"against Spark's session_window's [\d.]+ s \(target: no slower: (MET|MISSED)\)", text)
    assert re.search(r"against Spark's session_window with its events' [\d.]+ s \(the same output shape", text)
    # the target is the first rate's; at the other rate the built-in there is context
    assert not re.search(r"3 files/trigger: [\d.]+ s in the job against Spark's session_window's", text)
    assert re.search(
        r"tidemark stream, 3 files/trigger: [\d.]+ s against Spark's session_window's [\d.]+ s at the same rate, "
        r"[\d.]+x the floor \(context, not a target\)",
        text,
    )
    # where the (one) batch's time went, from its `batch committed` log
    assert re.search(
        r"phases of the first batch \(s\): check [\d.]+, quarantine [\d.]+, sessionize [\d.]+, "
        r"markers [\d.]+",
        text,
    )

    assert memory.main(["--scale", "tiny", "--files", "3", "--events", "1500", "--workdir", str(tmp_path / "mem")]) == 0
    header, rows = results_table(str(tmp_path / "results" / "memory.md"))
    assert header[0] == "batch"
    assert [r[0] for r in rows] == ["0", "1", "2"]
    # Every batch leaves the sessions of its newest events open (they are within the gap of the
    # watermark), and every generated event was read in some batch.
    assert all(int(r[header.index("open sessions")]) > 0 for r in rows)
    assert sum(int(r[header.index("lines")]) for r in rows) >= 1500


@pytest.mark.slow
def test_spark_start_times_cold_starts_with_the_class_archive_and_without(tmp_path, monkeypatch):
    """One start each way, every step timed."""
    monkeypatch.setattr(bench, "RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.delenv("TIDEMARK_JVM_CLASS_ARCHIVE", raising=False)
    # setup built the archive (scripts/setup.sh): "up to date" then, else built here
    tidemark = os.path.join(os.path.dirname(sys.executable), "tidemark")
    subprocess.run([tidemark, "class-archive"], check=True, capture_output=True, timeout=600)
    assert spark_start.main(["--runs", "1", "--workdir", str(tmp_path / "ss")]) == 0
    header, rows = results_table(str(tmp_path / "results" / "spark_start.md"))
    assert header[:3] == ["step", "with the archive (s)", "without (s)"]
    assert [row[0] for row in rows] == list(spark_start.FIGURES)
    assert all(float(row[1]) > 0 and float(row[2]) > 0 for row in rows)
    # each run checked that its JVM was given the archive, or not (spark_start.one_run)
