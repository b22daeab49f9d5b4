"""A tidemark_dedup run with nothing new: how long it takes, and where the time goes (issue 44).

Most runs of the dedup DAG find nothing new (several notices of one date queue up; the first run
to start picks up every complete receipt of its date), so their length is what Airflow adds
around a few pure-Python checks. This starts only what such a run needs:

- Airflow (`tidemark.devstack.airflow.AirflowServer`: api-server, scheduler, dag-processor,
  LocalExecutor, SQLite, parallelism 4 as the stack's; the reconcile and maintenance DAGs off, the
  example consumers paused);
- a lake whose date is already deduplicated, without Spark: `bench.history.build`'s receipt
  partitions (the stream's registration path) and `bench.history.commit_versions` (a version of
  every date that includes all of its partitions, committed to the Iceberg table). The DAG's skip
  check then finds nothing new, as for the second and later notices of a date. No Pub/Sub: with no
  corrected topic the notify task leaves what is owed in the lake (nothing, after the first run).

Then N runs of the newest date, one at a time, each triggered as the Cloud Function triggers a
notice's run (`runs.run_id_for_notice`, `runs.run_conf`, the date as partition key, through
`AirflowClient.trigger_dag_run`) and waited for until it ends. One warm-up run first (not counted).
From Airflow's own timestamps (REST):

    run duration     the run's start_date -> end_date
    created -> end   queued_at -> end_date: what the notice's sender waits, scheduling included
    per task         median queued -> start (scheduler, executor, task process start), start -> end,
                     and run start -> task start (where on the run's critical path it begins)

`--dags-folder` measures another checkout's DAGs (e.g. main's: the baseline), `--airflow-env
KEY=VALUE` overrides an Airflow setting, `--label` names the measurement. Every labelled
measurement is kept in bench/results/noop_runs.json, and bench/results/noop_runs.md shows them all,
so that a before and an after, measured one after the other under the same load, sit side by side.

    .venv/bin/python -m bench.noop_runs [--runs 20] [--label after]
    .venv/bin/python -m bench.noop_runs --label main --dags-folder /path/to/main/dags
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import time

import bench
from bench.freshness import percentile
from bench.stream_throughput import load, parse_iso

NAME = "noop_runs"
TERMINAL = ("success", "failed")


def parse_args(argv):
    p = bench.arguments(NAME, __doc__)
    p.add_argument("--runs", type=int, default=20, help="runs measured (one at a time)")
    p.add_argument("--warmup", type=int, default=1, help="runs first, not counted")
    p.add_argument("--partitions", type=int, default=500, help="receipt partitions in the lake")
    p.add_argument("--parallelism", type=int, default=4, help="AIRFLOW__CORE__PARALLELISM (the stack's: 4)")
    p.add_argument("--dags-folder", default=None, help="the DAGs to measure (default: this checkout's dags/)")
    p.add_argument(
        "--airflow-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an Airflow setting for every Airflow process (repeatable), e.g. AIRFLOW__SCHEDULER__...=...",
    )
    p.add_argument(
        "--metadata-db",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="Airflow's metadata database (`tidemark up` uses PostgreSQL where it is installed)",
    )
    p.add_argument("--label", default="this checkout", help="the measurement's name in the results")
    p.add_argument("--timeout", type=float, default=300, help="seconds one run may take")
    p.add_argument("--no-write", action="store_true")
    return p.parse_args(argv)


def build_lake(path: str, partitions: int) -> str:
    """A lake whose every date has a version including all its receipt partitions; its newest date."""
    from bench import history
    from tidemark.session import rules_record
    from tidemark.store.lake import Lake

    shutil.rmtree(path, ignore_errors=True)
    lake = Lake.open(path)
    rules_record.ensure(lake, history.RULES, "bench")
    newest, _ = history.build(lake, partitions)
    history.commit_versions(lake)
    return newest


def notice(event_date: str, n: int) -> dict:
    """The availability notice of run n (one receipt partition of the date each)."""
    from tidemark.base import names
    from tidemark.notices import availability_notice

    receipt_ts = f"20300101T{n // 3600:02d}{n // 60 % 60:02d}{n % 60:02d}000Z"
    return availability_notice.build(
        names.get("DATASET"),
        [
            {
                "event_date": event_date,
                "receipt_ts": receipt_ts,
                "batch_id": n,
                "uri": f"file:///bench/sessions/event_date={event_date}/receipt_ts={receipt_ts}",
                "rows": 1,
                "events": 1,
                "pane_kinds": ["early"],
                "watermark": "2030-01-01T00:00:00Z",
                "late": True,
            }
        ],
    )


def one_run(client, dag_id: str, event_date: str, n: int, timeout: float) -> tuple[dict, list[dict]]:
    """Trigger run n as the function does and wait for it to end: (the run, its task instances)."""
    from tidemark.orchestration import runs

    body = notice(event_date, n)
    run_id = runs.run_id_for_notice(body)
    client.trigger_dag_run(dag_id, run_id, runs.run_conf(body))
    deadline = time.monotonic() + timeout
    while True:
        run = client.get_dag_run(dag_id, run_id)
        if run and run["state"] in TERMINAL:
            return run, client.task_instances(dag_id, run_id)
        if time.monotonic() > deadline:
            raise TimeoutError(f"run {run_id} did not end in {timeout:.0f} s: {run}")
        time.sleep(0.25)


def example_dags(folder: str) -> list[str]:
    """The example consumer DAGs of a DAGs folder (each file is named after its DAG)."""
    return sorted(name[:-3] for name in os.listdir(folder) if name.startswith("example_") and name.endswith(".py"))


def summarise(measured: list[tuple[dict, list[dict]]]) -> dict:
    """Percentiles of the runs and per-task medians, from Airflow's timestamps."""

    def stats(values: list[float]) -> dict:
        return {
            "n": len(values),
            "p50": round(percentile(values, 50), 2),
            "p95": round(percentile(values, 95), 2),
            "max": round(max(values), 2),
        }

    durations, created_to_end = [], []
    tasks: dict[str, dict[str, list]] = {}
    for run, tis in measured:
        start, end = parse_iso(run["start_date"]), parse_iso(run["end_date"])
        durations.append(end - start)
        created_to_end.append(end - parse_iso(run["queued_at"]))
        for ti in tis:
            task = tasks.setdefault(ti["task_id"], {"states": [], "queued": [], "ran": [], "offset": []})
            task["states"].append(ti["state"])
            # a task skipped by the scheduler (an upstream's skip) has a start and an end (the same
            # instant) but was never queued nor had a process; one that skipped itself had both
            if ti.get("start_date") and ti.get("end_date") and (ti["state"] != "skipped" or ti.get("queued_when")):
                began = parse_iso(ti["start_date"])
                task["ran"].append(parse_iso(ti["end_date"]) - began)
                task["offset"].append(began - start)
                if ti.get("queued_when"):
                    task["queued"].append(began - parse_iso(ti["queued_when"]))
    per_task = {}
    for task_id, t in sorted(tasks.items(), key=lambda kv: statistics.median(kv[1]["offset"] or [1e9])):
        states = sorted(set(t["states"]))
        per_task[task_id] = {
            "states": "/".join(states),
            "processes": len(t["ran"]),
            "queued_to_start_p50": round(statistics.median(t["queued"]), 2) if t["queued"] else None,
            "start_to_end_p50": round(statistics.median(t["ran"]), 2) if t["ran"] else None,
            "run_start_to_task_start_p50": round(statistics.median(t["offset"]), 2) if t["offset"] else None,
        }
    return {
        "run duration": stats(durations),
        "created -> end": stats(created_to_end),
        "states": sorted({run["state"] for run, _ in measured}),
        "task processes per run": round(sum(t["processes"] for t in per_task.values()) / len(measured), 1),
        "tasks": per_task,
    }


def main(argv=None) -> int:
    args = parse_args(argv if argv is not None else sys.argv[1:])
    from tidemark.base import names
    from tidemark.devstack.airflow import AirflowServer

    env_machine = bench.machine()
    overrides = dict(item.split("=", 1) for item in args.airflow_env)
    shutil.rmtree(args.workdir, ignore_errors=True)
    lake_path = os.path.join(args.workdir, "lake")
    with bench.stopwatch() as built:
        event_date = build_lake(lake_path, args.partitions)
    print(f"lake: {args.partitions} receipt partitions, every date deduplicated ({built['seconds']:.1f} s)", flush=True)
    pg = None
    if args.metadata_db == "postgres":
        from tidemark.devstack import postgres

        if not postgres.available():
            print("PostgreSQL (or psycopg2/asyncpg) is not installed", file=sys.stderr)
            return 2
        pg = postgres.PostgresServer(os.path.join(args.workdir, "postgres")).start()
    server = AirflowServer(
        os.path.join(args.workdir, "airflow"),
        parallelism=args.parallelism,
        db_url=pg.db_url if pg else None,
        **({"dags_folder": os.path.abspath(args.dags_folder)} if args.dags_folder else {}),
        env={
            "TIDEMARK_LAKE": lake_path,
            "TIDEMARK_RECONCILE_INTERVAL": "off",
            "TIDEMARK_MAINTENANCE_INTERVAL": "off",
            "TIDEMARK_DEDUP_CONCURRENCY": "1",
            **overrides,
        },
    )
    dag_id = names.get("DAG_ID")
    loads = [load()]
    try:
        server.start(timeout=args.timeout)
        server.wait_for_dag(dag_id, timeout=args.timeout)
        client = server.client()
        client.set_paused(dag_id, False)
        # The example consumers would run on the asset events the first run posts (one per version
        # of the lake): paused, so that only the runs measured use the machine.
        for consumer in example_dags(server.dags_folder):
            server.wait_for_dag(consumer, timeout=args.timeout)
            client.set_paused(consumer, True)
        print(f"Airflow up ({server.timings}); load {load()}", flush=True)
        measured = []
        for n in range(args.warmup + args.runs):
            run, tis = one_run(client, dag_id, event_date, n, args.timeout)
            took = parse_iso(run["end_date"]) - parse_iso(run["start_date"])
            states = {ti["task_id"]: ti["state"] for ti in tis}
            warm = n < args.warmup
            print(
                f"{'warm-up' if warm else f'run {n - args.warmup + 1}/{args.runs}'}: {run['state']} in {took:.2f} s "
                f"(dedup {states.get('dedup')}; load {load()})",
                flush=True,
            )
            if run["state"] != "success" or states.get("dedup") != "skipped":
                print(f"  not a clean no-op run: {states}", file=sys.stderr)
                return 1
            if not warm:
                measured.append((run, tis))
                loads.append(load())
    finally:
        server.stop()
        if pg is not None:
            pg.remove()
    result = summarise(measured)
    one_minute = [float(x.split("/")[0]) for x in loads]
    result.update(
        {
            "label": args.label,
            "dags": os.path.abspath(args.dags_folder) if args.dags_folder else "this checkout's dags/",
            "airflow env": overrides,
            "parallelism": args.parallelism,
            "metadata db": args.metadata_db,
            # unset, each task process compiles tidemark's modules again (no __pycache__ written)
            "bytecode cache": not os.environ.get("PYTHONDONTWRITEBYTECODE"),
            "runs": args.runs,
            "load 1 min (start / median / max)": f"{one_minute[0]:.1f} / {statistics.median(one_minute):.1f} / {max(one_minute):.1f}",
            "load at start and end": f"{loads[0]} .. {loads[-1]}",
            "date": env_machine["date"],
        }
    )
    print(json.dumps(result, indent=2), flush=True)
    if not args.no_write:
        path = write(result, env_machine)
        print(f"wrote {path}")
    return 0


def write(result: dict, env_machine: dict) -> str:
    """Keep this measurement in noop_runs.json (by label) and write noop_runs.md from all of them."""
    store = os.path.join(bench.RESULTS_DIR, f"{NAME}.json")
    kept: dict[str, dict] = {}
    if os.path.exists(store):
        with open(store) as handle:
            kept = json.load(handle)
    kept[result["label"]] = result
    os.makedirs(bench.RESULTS_DIR, exist_ok=True)
    with open(store, "w") as handle:
        json.dump(kept, handle, indent=2, sort_keys=True)
        handle.write("\n")
    columns = [
        "measurement",
        "when",
        "load 1 min (start / median / max)",
        "n",
        "run p50 s",
        "run p95 s",
        "run max s",
        "created -> end p50 s",
        "p95 s",
        "max s",
        "task processes per run",
    ]
    rows = []
    for label, r in sorted(kept.items(), key=lambda kv: kv[1]["date"]):
        d, c = r["run duration"], r["created -> end"]
        rows.append(
            [
                label,
                r["date"],
                r["load 1 min (start / median / max)"],
                d["n"],
                d["p50"],
                d["p95"],
                d["max"],
                c["p50"],
                c["p95"],
                c["max"],
                r["task processes per run"],
            ]
        )
    # Repeats of one setup are labelled "<setup> #<n>": side by side, each setup's range.
    setups: dict[str, list[dict]] = {}
    for label, r in sorted(kept.items(), key=lambda kv: kv[1]["date"]):
        setups.setdefault(label.rsplit(" #", 1)[0], []).append(r)
    summary = [
        "## Each setup over its measurements (run duration, seconds; load 1 min median)",
        "",
        *bench.markdown_table(
            ["setup", "measurements", "p50", "p95", "max", "load"],
            [
                [
                    setup,
                    len(rs),
                    " / ".join(str(r["run duration"]["p50"]) for r in rs),
                    " / ".join(str(r["run duration"]["p95"]) for r in rs),
                    " / ".join(str(r["run duration"]["max"]) for r in rs),
                    " / ".join(r["load 1 min (start / median / max)"].split(" / ")[1] for r in rs),
                ]
                for setup, rs in setups.items()
            ],
        ),
        "",
    ]
    per_task = [*summary, "## Per task (medians, seconds)", ""]
    for label, r in sorted(kept.items(), key=lambda kv: kv[1]["date"]):
        per_task += [
            f"**{label}** (DAGs: {r['dags']}; Airflow settings added: {r['airflow env'] or 'none'}; "
            f"metadata {r.get('metadata db', 'sqlite')}; parallelism {r['parallelism']}; "
            f"bytecode cache {'on' if r.get('bytecode cache', True) else 'off (PYTHONDONTWRITEBYTECODE)'}; "
            f"load {r['load at start and end']})",
            "",
            *bench.markdown_table(
                ["task", "states", "processes", "queued -> start", "start -> end", "run start -> task start"],
                [
                    [
                        task,
                        t["states"],
                        t["processes"],
                        t["queued_to_start_p50"],
                        t["start_to_end_p50"],
                        t["run_start_to_task_start_p50"],
                    ]
                    for task, t in r["tasks"].items()
                ],
            ),
            "",
        ]
    notes = (
        "A tidemark_dedup run with nothing new (the dedup skipped), triggered one at a time as the Cloud "
        "Function does, on a local Airflow 3 (LocalExecutor, SQLite) and a lake whose date is already "
        "deduplicated; see the module docstring of bench/noop_runs.py. Every figure is a difference of "
        "Airflow's own timestamps. One row per labelled measurement (bench/results/noop_runs.json); "
        "the machine is shared (2 cores), so compare rows measured under a similar load."
    )
    return bench.write_results(
        NAME,
        "A DAG run with nothing new",
        columns,
        rows,
        notes,
        {
            "runs per measurement": "one at a time, after one warm-up run",
            "lake": "bench.history.build + commit_versions",
        },
        env_machine,
        after="\n".join(per_task),
    )


if __name__ == "__main__":
    sys.exit(main())
