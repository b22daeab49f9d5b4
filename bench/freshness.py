"""Freshness on the local stack: how long from a file landing to each step downstream of it.

`tidemark.devstack.stack.Stack` brings up the whole system on loopback (Pub/Sub emulator, Airflow
3 with the tidemark_dedup DAG, the Cloud Function under functions-framework with a push
subscription, and `tidemark stream --trigger-interval 5s --notify-topic ...`). Then files of a
generated workload land one per wave, `--pause` seconds apart (a steady trickle, like a Pub/Sub
Cloud Storage subscription writing an object every so often); the workload has extra sessions from
phones offline for hours or days, so most waves also carry late data for dates already closed.
After the last wave the benchmark waits until every notice is published, every DAG run finished
and every date's current version includes every receipt partition, then reads the timestamps the
system itself recorded:

    landed            the file's rename into the landing folder (this process, wall clock)
    batch committed   the stream's `batch committed` log line of the batch that read the file
    notice recorded   `<lake>/_notices/sent/<id>.json` recorded_at (outbox write, inside the batch)
    notice published  the same file's published_at (Pub/Sub acknowledged the publish)
    run created       the DAG run's queued_at (Airflow REST), created by the function's POST
    run started       the DAG run's start_date
    readable          committed_at of the first dedup version that includes the notice's
                      receipt partition (the Iceberg commit of its version)

Per DAG run (notice runs and neighbour runs alike), from its task instances: the run's duration
when the dedup skipped itself (nothing new), when the dedup ran, and the dedup task itself.

By default the stack's DAG runs its dedup as a client of the stack's warm Spark Connect server
(`--spark-submit`: a spark-submit per run, as before); `--notice-coalesce 10s` measures the
stream's coalescing window (fewer runs, notices later by up to the window).

p50 / p95 / max over every notice (one per event date touched per batch); "late" rows only for
notices of dates the watermark had already passed (late=true): a correction of a closed date.

    .venv/bin/python -m bench.freshness --scale small     # 3 waves, ~5 minutes
    .venv/bin/python -m bench.freshness --scale full      # 10 waves

Bursts (`--burst N`, issue 29): only the trigger path, for each Airflow metadata database. N
availability notices of N dates are published at once to the emulator; the push subscription
delivers them to the function (functions-framework, the deployed bundle), whose POSTs create the
runs; the DAG is paused, so no Spark runs and each run stays queued. notice -> run created is the
run's queued_at (Airflow) minus the moment Pub/Sub acknowledged the notice's publish (this
process), over `--rounds` bursts:

    .venv/bin/python -m bench.freshness --burst 20 --metadata-db sqlite
    .venv/bin/python -m bench.freshness --burst 20 --metadata-db postgres
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from datetime import date
from pathlib import Path

import bench
from bench.stream_throughput import json_lines, load, parse_iso, print_wide
from tidemark.base.layout import as_event_date
from tidemark.base.times import EPOCH
from tidemark.demo import generate
from tidemark.orchestration.airflow_api import RUN_ENDED
from tidemark.store.lake import Lake
from tidemark.store.version_record import VersionRecord

NAME = "freshness"

SCALES = {
    "small": dict(waves=3, events_per_wave=300, pause=20.0),
    "full": dict(waves=10, events_per_wave=500, pause=30.0),
}


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    index = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[index]


def file_batches(checkpoint: str) -> dict[str, int]:
    """Base name of each file read by a committed micro-batch -> that batch's id."""
    query = os.path.join(checkpoint, "query")
    try:
        committed = {int(n) for n in os.listdir(os.path.join(query, "commits")) if n.isdigit()}
        names = os.listdir(os.path.join(query, "sources", "0"))
    except OSError:
        return {}
    out = {}
    for name in names:
        if name.startswith("."):
            continue
        try:
            with open(os.path.join(query, "sources", "0", name)) as handle:
                lines = handle.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("batchId") in committed:
                out[entry["path"].rsplit("/", 1)[-1]] = entry["batchId"]
    return out


def wait_for(check, timeout: float, what: str, interval: float = 2.0, stack=None) -> bool:
    """Poll check() -> (done, status); print the status now and then; False on timeout, or at once
    when a server of `stack` (tidemark.devstack.stack.Stack) has stopped: nothing would finish."""
    began, last_print = time.monotonic(), 0.0
    while True:
        exited = stack.exited() if stack is not None else {}
        if exited:
            names = ", ".join(f"{name} (log: {record.log_path})" for name, record in exited.items())
            print(f"  {what}: STOPPED WAITING: {names} exited", flush=True)
            return False
        try:
            done, status = check()
        except Exception as exc:  # noqa: BLE001 - a component busy or restarting
            done, status = False, f"{type(exc).__name__}: {str(exc)[:100]}"
        elapsed = time.monotonic() - began
        if done:
            print(f"  {what}: {status} ({elapsed:.0f}s)", flush=True)
            return True
        if elapsed > timeout:
            print(f"  {what}: TIMED OUT after {elapsed:.0f}s: {status}", flush=True)
            return False
        if elapsed - last_print > 30:
            print(f"  {what}: {status} ({elapsed:.0f}s)", flush=True)
            last_print = elapsed
        time.sleep(interval)


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m bench.freshness", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--scale", choices=sorted(SCALES), default="small")
    p.add_argument("--waves", type=int)
    p.add_argument("--events-per-wave", type=int)
    p.add_argument("--pause", type=float, help="seconds between two landings")
    p.add_argument("--timeout", type=float, default=1800, help="seconds any one wait may take")
    p.add_argument("--workdir", default="/tmp/tidemark-bench/freshness")
    p.add_argument("--keep-up", action="store_true", help="leave the stack running afterwards")
    p.add_argument(
        "--spark-submit",
        action="store_true",
        help="the DAG's dedup as a spark-submit per run (the stack's default: a client of its "
        "warm Spark Connect server)",
    )
    p.add_argument(
        "--notice-coalesce",
        default=None,
        help="the stream's --notice-coalesce window (e.g. 10s): fewer runs, later notices",
    )
    p.add_argument(
        "--history",
        type=int,
        default=0,
        metavar="N",
        help="first fill the lake with N receipt partitions of older history (bench.history.build: "
        "the stream's registration path, a 10 s trigger's density), to compare freshness on an old "
        "lake with a young one (issue 27); results go to freshness_history",
    )
    p.add_argument(
        "--dedup-concurrency",
        type=int,
        default=None,
        help="the stack's dedup tasks at once (`tidemark up --dedup-concurrency`; default: the stack's)",
    )
    p.add_argument("--no-write", action="store_true")
    p.add_argument(
        "--burst",
        type=int,
        default=None,
        metavar="N",
        help="measure only notice -> run created for N notices published at once",
    )
    p.add_argument("--rounds", type=int, default=3, help="with --burst: bursts to measure")
    p.add_argument(
        "--metadata-db",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="with --burst: Airflow's metadata database",
    )
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv if argv is not None else sys.argv[1:])
    if args.burst:
        return burst(args)
    scale = dict(SCALES[args.scale])
    waves = args.waves or scale["waves"]
    per_wave = args.events_per_wave or scale["events_per_wave"]
    pause = scale["pause"] if args.pause is None else args.pause
    env = bench.machine()

    from tidemark.devstack.stack import Stack

    shutil.rmtree(args.workdir, ignore_errors=True)
    stack = Stack(os.path.join(args.workdir, "stack"))
    configured = stack.configure(
        spark_connect=not args.spark_submit,
        notice_coalesce=args.notice_coalesce,
        dedup_concurrency=args.dedup_concurrency,
    )
    if args.history:
        from bench import history
        from tidemark.panes import receipt_index
        from tidemark.store.lake import Lake

        old_lake = Lake.open(configured.lake)
        with bench.stopwatch() as built:
            history.build(old_lake, args.history)
            # a version of every history date, as a lake in service has: else the stack's
            # reconciliation would queue a dedup of every history date before the workload's
            dates = history.commit_versions(old_lake)
        # the history's partitions were never advertised (no stream wrote them): not waited for
        args.history_head = receipt_index.head(old_lake)
        print(
            f"history: {args.history} receipt partitions and {dates} dates' versions in {built['seconds']:.0f} s",
            flush=True,
        )
    workload = generate.Workload(
        events=per_wave * waves,
        users=max(4, per_wave * waves // 50),
        days=2,
        files=waves,
        seed=31,
        start=date(2026, 3, 6),
        offline_session_rate=0.12,
        duplicate_rate=0.04,
    )
    deliveries, counts = generate.build(workload)
    chunks = generate.split_files(deliveries, waves)
    loads = [load()]
    print(f"bringing the local stack up in {stack.home} (load {loads[0]})", flush=True)
    with bench.stopwatch() as up_time:
        settings = stack.up(say=lambda text: print(f"  {text}", flush=True), timeout=args.timeout)
    try:
        args.warmup_seconds = wait_for_connect_warmup(stack, args.timeout)
        return _measure(args, stack, settings, chunks, counts, pause, env, loads, up_time["seconds"], per_wave)
    finally:
        if not args.keep_up:
            stack.down()
            print("stack stopped", flush=True)


def wait_for_connect_warmup(stack, timeout: float) -> float | None:
    """Seconds waited for the Connect server's warm-up that `up` started in the background; None when
    none was started (TIDEMARK_CONNECT_WARMUP=0, --spark-submit).

    The waves start on the warmed server, as a user's first late data comes minutes after `up`;
    a wave landing meanwhile would measure the warm-up's competition for the two cores instead.
    """
    from tidemark.devstack import connect_warmup

    record = stack.record(connect_warmup.NAME)
    if record is None:
        return None
    began = time.monotonic()
    wait_for(lambda: (not record.alive(), "running" if record.alive() else "ended"), timeout, "connect warm-up")
    return time.monotonic() - began


def landing_stagger(trigger_interval: str | None, waves: int) -> float:
    """Seconds added to each pause so that `waves` landings fall evenly over the trigger's cycle."""
    from tidemark.base.durations import parse_duration

    if not trigger_interval or waves < 2:
        return 0.0
    return parse_duration(trigger_interval).total_seconds() / waves


def _measure(args, stack, settings, chunks, counts, pause, env, loads, up_seconds, per_wave) -> int:
    from tidemark.base import names
    from tidemark.iceberg import table_versions
    from tidemark.notices.outbox import Outbox
    from tidemark.orchestration import runs as run_ids

    landed: dict[str, float] = {}  # file base name -> landing time (epoch s)
    wave_of: dict[str, int] = {}
    # Landings `pause` apart fall at one phase of the stream's trigger when the pause is a multiple of
    # it (30 s against 5 s): every file of a run would wait the same time for its batch, and the run's
    # percentiles would be those of one phase. Each landing comes a further 1/waves of the trigger
    # later, so a run's landings cover the trigger's cycle evenly.
    stagger = landing_stagger(settings.trigger_interval, len(chunks))
    for i, chunk in enumerate(chunks):
        began = time.time()
        path = generate.write_file(settings.landing, i, chunk, began)
        name = os.path.basename(path)
        landed[name], wave_of[name] = time.time(), i
        print(f"wave {i + 1}/{len(chunks)}: {len(chunk)} lines landed (load {load()})", flush=True)
        loads.append(load())
        # name=name: this iteration's file (wait_for calls it within this iteration anyway)
        wait_for(
            lambda name=name: (name in file_batches(settings.checkpoint), "in a committed batch"),
            args.timeout,
            "stream",
            stack=stack,
        )
        if i < len(chunks) - 1:
            time.sleep(max(0.0, pause + stagger - (time.time() - began)))

    lake = Lake.open(settings.lake)
    client = stack.airflow(settings).client()
    dag_id = names.get("DAG_ID")

    def notices_done():
        from tidemark.demo import wait as demo_wait

        done, text, _ = demo_wait.notices_sent(lake, after=getattr(args, "history_head", None))
        return done, text

    def runs_done():
        sent = Outbox(lake).sent()
        all_runs = client.list_dag_runs(dag_id)
        ids = {r["dag_run_id"] for r in all_runs}
        expected = {run_ids.run_id_for_notice(e["notice"]) for e in sent}
        active = [r for r in all_runs if r["state"] not in RUN_ENDED]
        return (
            expected <= ids and not active,
            f"{len(expected & ids)}/{len(expected)} runs created, {len(active)} not finished",
        )

    def versions_done():
        from tidemark.demo import wait as demo_wait

        return demo_wait.versions_current(lake)

    print("waiting for the pipeline to drain", flush=True)
    complete = (
        wait_for(notices_done, args.timeout, "notices", stack=stack)
        and wait_for(runs_done, args.timeout, "DAG runs", interval=5, stack=stack)
        and wait_for(versions_done, args.timeout, "corrected partitions", stack=stack)
    )
    loads.append(load())

    # --- what the system recorded -------------------------------------------------------------
    file_batch = file_batches(settings.checkpoint)
    batch_land = {}
    for name, batch_id in file_batch.items():
        if name in landed:
            batch_land[batch_id] = min(batch_land.get(batch_id, float("inf")), landed[name])
    stream_log = os.path.join(stack.logs_dir, "stream.log")
    committed_at = {
        l["batch_id"]: parse_iso(l["timestamp"])
        for l in json_lines(stream_log)
        if l.get("event") == "batch committed" and not l.get("warmup")
    }
    all_runs = {r["dag_run_id"]: r for r in client.list_dag_runs(dag_id)}
    versions: dict[str, list[VersionRecord]] = {}

    def first_version_with(event_date: str, receipt_ts: str) -> VersionRecord | None:
        if event_date not in versions:
            versions[event_date] = sorted(
                table_versions.list_versions(lake, as_event_date(event_date)), key=lambda m: m.published_at or EPOCH
            )
        key = f"{event_date}/{receipt_ts}"
        return next((m for m in versions[event_date] if key in m.receipts), None)

    steps = {
        k: []
        for k in (
            "landed -> batch committed",
            "landed -> notice recorded",
            "landed -> notice published",
            "notice published -> DAG run created",
            "notice published -> DAG run started",
            "DAG run duration",
            "DAG run duration, Spark skipped (nothing new)",
            "DAG run duration, Spark ran",
            "dedup task (Spark) duration",
            "landed -> corrected partition readable",
            "late data landed -> corrected partition readable",
        )
    }
    per_notice = []
    tasks_of = {run_id: client.task_instances(dag_id, run_id) for run_id in all_runs}
    # Every run of the DAG (notice runs and neighbour runs): did its dedup task run Spark?
    for run_id, run in all_runs.items():
        if not (run.get("start_date") and run.get("end_date")):
            continue
        took = parse_iso(run["end_date"]) - parse_iso(run["start_date"])
        dedup = next((ti for ti in tasks_of[run_id] if ti["task_id"] == "dedup"), None)
        if dedup and dedup["state"] == "skipped":
            steps["DAG run duration, Spark skipped (nothing new)"].append(took)
        elif dedup and dedup.get("start_date") and dedup.get("end_date"):
            steps["DAG run duration, Spark ran"].append(took)
            steps["dedup task (Spark) duration"].append(parse_iso(dedup["end_date"]) - parse_iso(dedup["start_date"]))
    for entry in Outbox(lake).sent():
        n = entry["notice"]
        t0 = batch_land.get(n["batch_id"])
        if t0 is None:
            continue  # a partition of a file this run did not land (cannot happen on a fresh stack)
        row = {
            "event_date": n["event_date"],
            "receipt_ts": n["receipt_ts"],
            "late": n["late"],
            "batch_id": n["batch_id"],
        }
        if n["batch_id"] in committed_at:
            steps["landed -> batch committed"].append(committed_at[n["batch_id"]] - t0)
        if entry.get("recorded_at"):
            steps["landed -> notice recorded"].append(parse_iso(entry["recorded_at"]) - t0)
        published = parse_iso(entry["published_at"])
        steps["landed -> notice published"].append(published - t0)
        row["notice_s"] = round(published - t0, 1)
        run = all_runs.get(run_ids.run_id_for_notice(n))
        if run and run.get("queued_at"):
            steps["notice published -> DAG run created"].append(parse_iso(run["queued_at"]) - published)
        if run and run.get("start_date"):
            steps["notice published -> DAG run started"].append(parse_iso(run["start_date"]) - published)
            if run.get("end_date"):
                steps["DAG run duration"].append(parse_iso(run["end_date"]) - parse_iso(run["start_date"]))
        version = first_version_with(n["event_date"], n["receipt_ts"])
        if version is not None:
            readable = version.published_at.timestamp() - t0
            steps["landed -> corrected partition readable"].append(readable)
            if n["late"]:
                steps["late data landed -> corrected partition readable"].append(readable)
            row["readable_s"] = round(readable, 1)
            row["timeline"] = correction_timeline(
                t0,
                committed_at.get(n["batch_id"]),
                entry,
                run,
                tasks_of.get(run["dag_run_id"], []) if run else [],
                readable,
            )
        per_notice.append(row)

    columns = ["step", "n", "p50 s", "p95 s", "max s"]
    rows = []
    for step, values in steps.items():
        if values:
            rows.append(
                [
                    step,
                    len(values),
                    f"{percentile(values, 50):.1f}",
                    f"{percentile(values, 95):.1f}",
                    f"{max(values):.1f}",
                ]
            )
        else:
            rows.append([step, 0, "-", "-", "-"])
    title = f"Freshness on the local stack ({args.scale}: {len(chunks)} waves, {pause:.0f}s apart)"
    print_wide(title, columns, rows)
    late_n = sum(1 for r in per_notice if r["late"])
    spark = (
        "a Spark Connect server (the DAG's dedup runs as its client)"
        if settings.spark_connect
        else "a spark-submit per dedup run"
    )
    coalesce = f", notice coalesce {settings.notice_coalesce}" if settings.notice_coalesce else ""
    warmup_seconds = getattr(args, "warmup_seconds", None)
    warmed = (
        f", then {warmup_seconds:.0f} s waiting for the Connect server's warm-up to end before the first wave"
        if warmup_seconds is not None
        else ", no Connect warm-up"
    )
    notes = "\n".join(
        [
            "Every component real, on loopback (`tidemark.devstack.stack.Stack`: Pub/Sub emulator, "
            f"{spark}, Airflow 3 api-server + scheduler + dag-processor with parallelism "
            f"{settings.airflow_parallelism} and max_active_runs {settings.max_active_runs}, the Cloud Function "
            f"under functions-framework behind a push subscription, the stream with a {settings.trigger_interval} "
            f"trigger{coalesce}). One file per "
            "wave; every figure is a difference of timestamps the system recorded itself (see the module "
            "docstring of bench/freshness.py). One notice per event date touched per batch, so several per wave.",
            "",
            f"- stack up in {up_seconds:.0f} s{warmed}; {len(per_notice)} notices ({late_n} late=true); "
            f"pipeline drained: {'yes' if complete else 'NO (timed out; figures cover what finished)'}",
            f"- load average (1/5/15 min) at start, at each landing and at the end: {', '.join(loads)}",
            "",
            "<details><summary>Every notice</summary>",
            "",
            *bench.markdown_table(
                ["event_date", "receipt_ts", "batch", "late", "landed -> published s", "landed -> readable s"],
                [
                    [
                        r["event_date"],
                        r["receipt_ts"],
                        r["batch_id"],
                        r["late"],
                        r.get("notice_s", "-"),
                        r.get("readable_s", "-"),
                    ]
                    for r in per_notice
                ],
            ),
            "",
            "</details>",
            "",
        ]
    )
    print("\n".join(notes.splitlines()[2:5]))
    # Every notice's figures and timeline, to take any correction apart (not only the median one).
    with open(os.path.join(args.workdir, "per_notice.json"), "w") as handle:
        json.dump(per_notice, handle, indent=1)
    name = f"{NAME}_history" if args.history else NAME
    timeline = timeline_section(
        per_notice, None if args.no_write else os.path.join(bench.RESULTS_DIR, f"{name}_timeline.png")
    )
    print(timeline, flush=True)
    if not args.no_write:
        path = bench.write_results(
            name,
            title,
            columns,
            rows,
            notes,
            {
                "scale": args.scale,
                "history receipt partitions (before the run)": args.history,
                "waves": len(chunks),
                "lines per wave (about)": per_wave,
                "pause between landings s": pause,
                "added to each pause (landings spread over the trigger's cycle) s": round(
                    landing_stagger(settings.trigger_interval, len(chunks)), 2
                ),
                "stream trigger": settings.trigger_interval,
                "notice coalesce": settings.notice_coalesce or "off",
                "dedup Spark": "Spark Connect server (warm)" if settings.spark_connect else "spark-submit per run",
                "airflow parallelism / max_active_runs / dedup tasks at once": f"{settings.airflow_parallelism} / {settings.max_active_runs} / {settings.dedup_concurrency}",
                "workload": "tidemark.demo.generate.Workload(seed=31, days=2, offline_session_rate=0.12, duplicate_rate=0.04)",
                "generated": {k: counts[k] for k in ("events", "duplicates", "malformed", "offline_sessions")},
            },
            env,
            after=timeline,
        )
        print(f"wrote {path}")
    return 0 if complete else 1


# --- where one correction's time goes ------------------------------------------------------------


def correction_timeline(
    landed: float, committed: float | None, entry: dict, run: dict | None, tasks: list[dict], readable: float
) -> list[tuple[str, float, float]]:
    """(step, start, end) in seconds after the file landed, for one notice, from recorded timestamps.

    The stream's batch (landed -> `batch committed`), the notice's outbox record and publish, the
    DAG run created -> started, each of its task instances (queued time before a task is the
    scheduler's and the task process's start), and the Iceberg commit that made the data readable.
    """
    spans: list[tuple[str, float, float]] = []
    if committed is not None:
        spans.append(("stream batch (landed -> committed)", 0.0, committed - landed))
    published = parse_iso(entry["published_at"]) - landed
    recorded = parse_iso(entry["recorded_at"]) - landed if entry.get("recorded_at") else published
    spans.append(("notice recorded -> published", recorded, published))
    if run and run.get("queued_at"):
        created = parse_iso(run["queued_at"]) - landed
        spans.append(("published -> DAG run created (function)", published, created))
        if run.get("start_date"):
            spans.append(("DAG run created -> started (scheduler)", created, parse_iso(run["start_date"]) - landed))
    for task in sorted(tasks, key=lambda t: t.get("start_date") or "~"):
        if task.get("start_date") and task.get("end_date"):
            started, ended = parse_iso(task["start_date"]) - landed, parse_iso(task["end_date"]) - landed
            if task.get("queued_when"):
                spans.append((f"task {task['task_id']}: queued", parse_iso(task["queued_when"]) - landed, started))
            spans.append((f"task {task['task_id']} ({task['state']})", started, ended))
    spans.append(("readable (Iceberg commit)", readable, readable))
    return spans


def timeline_section(per_notice: list[dict], chart_path: str | None) -> str:
    """Markdown: the median late correction's timeline (and its chart), and each step's median."""
    late = sorted((r for r in per_notice if r["late"] and r.get("timeline")), key=lambda r: r["readable_s"])
    if not late:
        return "## Where a late correction's time goes\n\nNo late notice became readable in this run."
    median = late[(len(late) - 1) // 2]
    lines = [
        "## Where a late correction's time goes",
        "",
        f"The median late correction of this run (event date {median['event_date']}, receipt "
        f"{median['receipt_ts']}, readable {median['readable_s']} s after its file landed), step by step: "
        "seconds after the file landed, from the timestamps the stream, the outbox, Airflow and the "
        "Iceberg commit recorded.",
        "",
        *bench.markdown_table(
            ["step", "start s", "end s", "took s"],
            [[step, f"{a:.2f}", f"{b:.2f}", f"{b - a:.2f}"] for step, a, b in median["timeline"]],
        ),
    ]
    took: dict[str, list[float]] = {}
    for r in late:
        for step, a, b in r["timeline"]:
            took.setdefault(step, []).append(b - a)
    lines += [
        "",
        f"Each step's time over the {len(late)} late corrections (p50 / p95 / max s):",
        "",
        *bench.markdown_table(
            ["step", "n", "p50 s", "p95 s", "max s"],
            [
                [step, len(v), f"{percentile(v, 50):.2f}", f"{percentile(v, 95):.2f}", f"{max(v):.2f}"]
                for step, v in took.items()
                if step != "readable (Iceberg commit)"
            ],
        ),
    ]
    if chart_path:
        timeline_chart(chart_path, median)
        lines += ["", f"![the median late correction's timeline]({os.path.basename(chart_path)})"]
    return "\n".join(lines)


def timeline_chart(path: str, notice: dict) -> str:
    """A horizontal bar per step of one correction, on a time axis from its file's landing."""
    from tidemark.demo.charts import pyplot

    plt = pyplot()
    spans = notice["timeline"]
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(spans) + 1.2))
    for i, (step, start, end) in enumerate(spans):
        if end > start:
            ax.barh(i, end - start, left=start, color="tab:red" if step.startswith("task dedup") else "tab:blue")
        else:
            ax.plot([start], [i], marker="D", color="black")
        ax.text(max(end, start) + 0.1, i, f"{end - start:.1f}s" if end > start else f"{start:.1f}s", va="center")
    ax.set_yticks(range(len(spans)), [step for step, _, _ in spans])
    ax.invert_yaxis()
    ax.set_xlabel("seconds after the file landed")
    ax.set_title(f"A late correction of {notice['event_date']}: landed -> readable in {notice['readable_s']} s")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def burst_notices(n: int, round_no: int) -> list[dict]:
    """N availability notices of N different dates (one receipt partition each)."""
    from datetime import date, timedelta

    from tidemark.base import layout, names
    from tidemark.notices import availability_notice

    out = []
    for i in range(n):
        day = str(date(2026, 1, 1) + timedelta(days=i))
        receipt_ts = f"20260301T{round_no:02d}{i // 60:02d}{i % 60:02d}000Z"
        layout.check_receipt_ts(receipt_ts)
        out.append(
            availability_notice.build(
                names.get("DATASET"),
                [
                    {
                        "event_date": day,
                        "receipt_ts": receipt_ts,
                        "batch_id": round_no,
                        "uri": f"file:///bench/sessions/event_date={day}/receipt_ts={receipt_ts}",
                        "rows": 1,
                        "events": 1,
                        "pane_kinds": ["early"],
                        "watermark": "2026-03-01T00:00:00Z",
                        "late": False,
                    }
                ],
            )
        )
    return out


def burst(args) -> int:
    """--burst N: the trigger path under N simultaneous notices (see the module docstring)."""
    from concurrent.futures import wait as wait_futures
    from datetime import datetime

    from tidemark.base import names
    from tidemark.devstack import postgres
    from tidemark.devstack import pubsub_emulator as ps
    from tidemark.devstack.airflow import AirflowServer
    from tidemark.devstack.function import FunctionServer
    from tidemark.notices import availability_notice
    from tidemark.ops import function_bundle
    from tidemark.orchestration import runs as run_ids

    home = os.path.join(args.workdir, f"burst-{args.metadata_db}")
    shutil.rmtree(home, ignore_errors=True)
    project, dag_id = names.get("PROJECT"), names.get("DAG_ID")
    env_machine = bench.machine()
    started: list = []
    pg = None
    try:
        emulator = ps.PubSubEmulator(os.path.join(home, "pubsub")).start()
        started.append(emulator)
        ps.ensure_topic(project, names.get("AVAILABILITY_TOPIC"), host=emulator.host)
        db_url = None
        if args.metadata_db == "postgres":
            if not postgres.available():
                print("PostgreSQL (or psycopg2/asyncpg) is not installed", file=sys.stderr)
                return 2
            pg = postgres.PostgresServer(os.path.join(home, "postgres")).start()
            db_url = pg.db_url
        # Only the trigger path: no scheduled reconcile or maintenance run in the middle of a burst.
        airflow = AirflowServer(
            os.path.join(home, "airflow"),
            db_url=db_url,
            parallelism=2,
            env={
                "TIDEMARK_LAKE": os.path.join(home, "lake"),
                "TIDEMARK_RECONCILE_INTERVAL": "off",
                "TIDEMARK_MAINTENANCE_INTERVAL": "off",
            },
        )
        with bench.stopwatch() as up:
            airflow.start(timeout=args.timeout)
        started.append(airflow)
        airflow.wait_for_dag()
        client = airflow.client()
        client.set_paused(dag_id, True)  # runs stay queued: only their creation is measured
        secret = os.path.join(home, "airflow_password")
        fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(airflow.password)
        bundle = function_bundle.build(os.path.join(home, "function", "bundle"))
        function = FunctionServer(
            bundle,
            isolated=True,
            log_path=os.path.join(home, "function.log"),
            env={
                "AIRFLOW_BASE_URL": airflow.url,
                "AIRFLOW_USERNAME": airflow.username,
                "AIRFLOW_PASSWORD_FILE": secret,
                "AIRFLOW_TIMEOUT_SECONDS": "10",
            },
        ).start()
        started.append(function)
        ps.ensure_subscription(
            project,
            names.get("FUNCTION_SUBSCRIPTION"),
            names.get("AVAILABILITY_TOPIC"),
            push_endpoint=function.url,
            ack_deadline_seconds=60,
            host=emulator.host,
        )
        publisher = ps.publisher_admin(emulator.host)
        topic = names.topic_path(project, names.get("AVAILABILITY_TOPIC"))
        latencies: list[float] = []
        errors = 0
        for round_no in range(1, args.rounds + 1):
            notices = burst_notices(args.burst, round_no)
            acked: dict[str, float] = {}
            futures = {}
            for body in notices:  # all in flight at once; each ack time taken when it arrives
                future = publisher.publish(
                    topic, availability_notice.encode(body), **availability_notice.attributes(body)
                )
                run_id = run_ids.run_id_for_notice(body)
                future.add_done_callback(lambda f, r=run_id, acked=acked: acked.setdefault(r, time.time()))
                futures[run_id] = future
            wait_futures(list(futures.values()), timeout=60)
            wanted = set(futures)

            def created(wanted=wanted):
                found = {r["dag_run_id"]: r for r in client.list_dag_runs(dag_id) if r["dag_run_id"] in wanted}
                return found if len(found) == len(wanted) else None

            found = None
            deadline = time.monotonic() + args.timeout
            while found is None and time.monotonic() < deadline:
                found = created()
                if found is None:
                    time.sleep(0.5)
            if found is None:
                print(f"round {round_no}: not every run was created", file=sys.stderr)
                return 1
            for run_id, run in found.items():
                queued = datetime.fromisoformat(run["queued_at"].replace("Z", "+00:00")).timestamp()
                latencies.append(round(queued - acked[run_id], 3))
            errors += sum(
                1 for line in Path(function.log_path).read_text(errors="replace").splitlines() if "HTTP 5" in line
            )
            print(f"round {round_no}: {len(found)} runs; slowest {max(latencies[-len(found) :]):.2f}s", flush=True)
            time.sleep(2)
        result = {
            "metadata_db": args.metadata_db,
            "notices_per_burst": args.burst,
            "rounds": args.rounds,
            "n": len(latencies),
            "p50_s": percentile(latencies, 50),
            "p95_s": percentile(latencies, 95),
            "max_s": max(latencies),
            "function_5xx_log_lines": errors,
            "airflow_start_s": up["seconds"],
            "load": load(),
            "machine": env_machine,
        }
        print(json.dumps(result), flush=True)
        return 0
    finally:
        for server in reversed(started):
            server.stop()
        if pg is not None:
            pg.remove()


if __name__ == "__main__":
    sys.exit(main())
