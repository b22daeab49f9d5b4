"""tidemark demo: the whole system, locally, on a generated workload; then a report.

Brings up the local stack (Pub/Sub emulator, Airflow, the Cloud Function under functions-framework,
the streaming job) in HOME/demo, lands a seeded workload in waves (on time, minutes late, days
late, duplicates, a few malformed lines), waits for every notice, DAG run and deduplicated
version, and prints what was written per event_date and receipt_ts, what late data corrected, how
long each step took, and whether every date's final version equals an independent batch
recomputation of everything landed, both topics' notices, and the example consumer DAG's daily
session metrics of every corrected date next to the batch reference's. Charts and an HTML page go to HOME/demo/report/. The stack is
stopped at the end unless --keep-up. Every run starts from an empty HOME/demo.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tidemark.base import layout, names
from tidemark.commands.console import print_status, wide_console
from tidemark.commands.options import Subparsers
from tidemark.notices.asset_events import ASSET_NAME

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

    from tidemark.devstack.stack import Stack, StackSettings
    from tidemark.orchestration.airflow_api import AirflowClient

# The handler imports the stack, the demo's and the lake's modules (pyarrow, psutil, matplotlib) and
# rich (see tidemark.commands.console) itself, so that the CLI's start stays fast.


def register(subparsers: Subparsers) -> None:
    """Add `tidemark demo` to the subcommands."""
    p = subparsers.add_parser("demo", help="run tidemark end to end on a generated workload", description=__doc__)
    p.add_argument("--home", default=".tidemark", help="state folder; the demo uses HOME/demo (default ./.tidemark)")
    p.add_argument("--events", type=int, default=None, help="events to generate (default 800)")
    p.add_argument("--waves", type=int, default=4, help="waves the workload lands in (default 4)")
    p.add_argument("--pause", type=float, default=15.0, help="seconds between waves, after the stream took one")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds any one wait may take")
    p.add_argument("--keep-up", action="store_true", help="leave the stack running afterwards")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run `tidemark demo`; its exit status."""
    from tidemark.devstack.stack import Stack, StackError  # lazy: see above

    console = wide_console()
    home = os.path.abspath(os.path.join(args.home, "demo"))
    stack = Stack(home)
    if stack.settings() is not None:
        stack.down()  # a stack left up by an earlier --keep-up demo: ours, recorded here
    shutil.rmtree(home, ignore_errors=True)
    try:
        return _demo(args, console, stack)
    except (StackError, TimeoutError) as exc:
        console.print(f"[bold red]demo failed[/]: {exc}")
        return 1
    finally:
        if args.keep_up:
            console.print(
                f"the stack is still up: `tidemark status --home {stack.home}`, `tidemark down --home {stack.home}`"
            )
        elif stack.settings() is not None:
            with console.status("stopping the stack"):
                stopped = stack.down()
            console.print(f"stack stopped ({len(stopped)} processes)")


def _demo(args: argparse.Namespace, console: Console, stack: Stack) -> int:
    """The demo on a stopped, empty stack: up, waves, report; its exit status."""
    # lazy: see above
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from tidemark.demo import batch_reference, charts, report, wait
    from tidemark.demo import waves as wavelib
    from tidemark.devstack.stack import StackError
    from tidemark.iceberg import table_versions
    from tidemark.products import session_metrics
    from tidemark.session import rules_record
    from tidemark.store.lake import Lake

    began = time.monotonic()
    timings: dict[str, Any] = {}
    workload = wavelib.DEMO_WORKLOAD
    if args.events is not None:
        if args.events < 50:
            raise ValueError("--events must be at least 50")
        workload = dataclasses.replace(workload, events=args.events, users=max(4, args.events // 50))
    waves, counts = wavelib.plan(workload, args.waves)

    console.rule("1. the local stack")
    with console.status("starting") as spinner:

        def say(text: str) -> None:
            spinner.update(text)
            if "ready" in text:
                console.log(text)

        settings = stack.up(say=say, timeout=args.timeout)
    lake = Lake.open(settings.lake)
    timings["stack_up"] = dict(stack.timings)
    print_status(stack, console)

    console.rule("2. landing the workload in waves, each deduplicated and published before the next")
    console.print(
        f"{counts['events']} events ({counts['duplicates']} delivered twice, "
        f"{counts['offline_sessions']} sessions from phones offline for hours or days) "
        f"+ {counts['malformed']} malformed lines, in {workload.files} files, {len(waves)} waves"
    )
    client: AirflowClient = stack.airflow(settings).client()
    wave_rows: list[dict[str, Any]] = []
    landed: set[str] = set()
    index = 0
    progress = Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console, transient=True
    )
    with progress:
        for wave in waves:
            landed |= set(wavelib.land(settings.landing, wave, index))
            index += len(wave.files)
            row = wave.describe()
            wave_rows.append(row)
            console.log(
                f"wave {row['wave']}: {row['lines']} lines landed (on time {row['on_time']}, "
                f"minutes late {row['minutes_late']}, hours late {row['hours_late']}, days late "
                f"{row['days_late']}, malformed {row['malformed']}); arrivals {row['arrivals']}"
            )

            def caught_up(landed: set[str] = landed) -> tuple[bool, str]:
                return wait.stream_caught_up(settings.checkpoint, landed)

            def too_late(status: str, wave: int = row["wave"]) -> StackError:
                return StackError(
                    "stream", f"did not take wave {wave} in time ({status})", wait.component_log(stack, "stream")
                )

            took = wait.until(caught_up, args.timeout, f"stream: wave {row['wave']}", progress, too_late, stack)
            timings[f"wave_{row['wave']}_stream_s"] = took
            # Each wave is published before the next lands, so that a later wave's late events
            # visibly correct a date that already had a version.
            timings[f"wave_{row['wave']}_published_s"] = _settle(
                args, console, progress, stack, settings, client, f"wave {row['wave']}"
            )
            if wave is not waves[-1]:
                wait.until(
                    _after(args.pause),
                    args.pause + 5,
                    f"pause before wave {row['wave'] + 1}",
                    progress,
                    lambda s: TimeoutError(s),
                    stack,
                    interval=1.0,
                )
        all_runs = client.list_dag_runs(_dag_id())  # runs started by the last versions' neighbours
    timings["total_s"] = round(time.monotonic() - began, 1)

    console.rule("3. report")
    rules = rules_record.rules_in_force(lake)[0]  # what the stream and the DAG used
    checks = batch_reference.check_lake(lake, settings.landing, rules, settings.archive)
    data = report.collect(lake, waves, wave_rows, all_runs, checks, timings, {**dataclasses.asdict(workload), **counts})
    corrected_dates = [
        d
        for d in table_versions.dates_with_version(lake)
        if len(data["versions"].get(layout.event_date_text(d), [])) > 1
    ]
    data["notices"] = report.notices_report(lake)
    data["consumer"] = report.consumer_report(
        session_metrics.default_root(lake), settings.landing, rules, corrected_dates, settings.archive
    )  # the boundary too
    data["ok"] = (
        data["ok"]
        and all(r["ok"] for r in data["consumer"])
        and all(r["state"] == "sent" for r in data["notices"]["corrected"])
    )
    data["partitions"] = report.partitions_report(
        all_runs or [], client.list_dag_runs("example_session_metrics"), _asset_events(client)
    )
    data["ok"] = data["ok"] and all(r["ok"] for r in data["partitions"])
    report.print_report(console, data)
    report.print_notices_and_consumer(console, data)
    report.print_partitions(console, data["partitions"])
    folder = os.path.join(stack.home, "report")
    os.makedirs(folder, exist_ok=True)
    lateness = [s for _, s in wavelib.lateness_of([d for w in waves for d in w.deliveries]) if s is not None]
    pictures = [
        charts.lateness_chart(os.path.join(folder, "lateness.png"), lateness, rules),
        charts.corrections_chart(os.path.join(folder, "corrections.png"), data, waves),
        charts.steps_chart(os.path.join(folder, "steps.png"), data["steps"]),
    ]
    pictures += _metric_charts(stack, folder, began)  # lag and staleness, from the stack's Prometheus
    page = charts.write_html(folder, data, pictures)
    with open(os.path.join(folder, "report.json"), "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=1, default=str)
    summary = Table.grid(padding=(0, 2))
    summary.add_row("stack up", f"{sum(timings['stack_up'].values()):.0f}s")
    summary.add_row("landing -> every date corrected", f"{timings['total_s'] - sum(timings['stack_up'].values()):.0f}s")
    summary.add_row("report", page)
    console.print(summary)
    if data["ok"]:
        console.print("[bold green]every event date's deduplicated partition equals the batch recomputation[/]")
        return 0
    bad = [c for c in data["checks"] if not c["ok"]]
    console.print(
        f"[bold red]{len(bad)} event date(s) differ from the batch recomputation[/]: "
        f"{', '.join(c['event_date'] for c in bad)}; see {os.path.join(folder, 'report.json')}"
    )
    return 1


def _settle(
    args: argparse.Namespace,
    console: Console,
    progress: Progress,
    stack: Stack,
    settings: StackSettings,
    client: AirflowClient,
    label: str,
) -> float:
    """Wait until the lake has settled; the seconds taken.

    Settled: every receipt partition so far is advertised, every notice's DAG run has finished (none
    failed), and every date's current version includes all its receipts.
    """
    # lazy: see above
    from tidemark.demo import wait
    from tidemark.devstack.stack import StackError
    from tidemark.ops import inspect
    from tidemark.products import session_metrics
    from tidemark.store.lake import Lake

    began = time.monotonic()
    lake = Lake.open(settings.lake)
    sent: list[Any] = []

    def notices() -> tuple[bool, str]:
        done, text, found = wait.notices_sent(lake)
        sent[:] = found
        return done, text

    wait.until(
        notices,
        args.timeout,
        f"{label}: notices",
        progress,
        lambda s: StackError(
            "stream (notice sender) / pubsub emulator",
            f"notices not all published: {s}",
            wait.component_log(stack, "stream"),
        ),
        stack,
    )
    all_runs: list[dict[str, Any]] = []

    def dag_runs() -> tuple[bool, str]:
        done, text, found = wait.runs_finished(client, sent)
        all_runs[:] = found
        return done, text

    wait.until(
        dag_runs,
        args.timeout,
        f"{label}: DAG runs",
        progress,
        lambda s: StackError(
            "function / airflow", f"DAG runs not all done: {s}", wait.component_log(stack, "function")
        ),
        stack,
        interval=5.0,
    )
    failed = [r for r in all_runs if r["state"] == "failed"]
    if failed:
        raise StackError(
            "airflow",
            f"DAG run {failed[0]['dag_run_id']} failed ({len(failed)} failed)",
            wait.run_log_hint(stack, failed[0]),
        )
    wait.until(
        lambda: wait.versions_current(lake),
        args.timeout,
        f"{label}: corrected partitions",
        progress,
        lambda s: StackError(
            "airflow (tidemark_dedup)", f"partitions still pending: {s}", os.path.join(stack.home, "airflow", "logs")
        ),
        stack,
    )
    # The corrected notices sent, and the example consumer DAG rebuilt every date from its current
    # version (asset-triggered runs of example_session_metrics).
    wait.until(
        lambda: wait.consumer_caught_up(lake, session_metrics.default_root(lake)),
        args.timeout,
        f"{label}: corrected notices and the example consumer",
        progress,
        lambda s: StackError(
            "airflow (example_session_metrics) / notify_corrected",
            f"not caught up: {s}",
            os.path.join(stack.home, "airflow", "logs"),
        ),
        stack,
    )
    took = round(time.monotonic() - began, 1)
    versions = ", ".join(f"{r['event_date']} v{r['version']}" for r in inspect.partitions(lake))
    console.log(f"{label}: {len(sent)} notices, {len(all_runs)} DAG runs done; current: {versions} ({took:.0f}s)")
    return took


def _after(seconds: float) -> Callable[[], tuple[bool, str]]:
    """A wait.until check that is done `seconds` from now."""
    deadline = time.monotonic() + seconds

    def check() -> tuple[bool, str]:
        left = deadline - time.monotonic()
        return left <= 0, f"{max(0, left):.0f}s left"

    return check


def _asset_events(client: AirflowClient) -> list[dict[str, Any]]:
    """The asset events of tidemark.sessions_dedup, once Airflow can list them.

    None when Airflow does not know the asset yet (AirflowClient.asset_events_once_listable).
    """
    asset_id = client.asset_id(ASSET_NAME)
    return [] if asset_id is None else client.asset_events_once_listable(asset_id, timeout=300)


def _dag_id() -> str:
    """The dedup DAG's id (tidemark.base.names)."""
    return names.get("DAG_ID")


def _metric_charts(stack: Stack, folder: str, began: float) -> list[str]:
    """Chart lag.png and staleness.png from what the stack's Prometheus recorded during the demo.

    tidemark/demo/metrics_charts.py draws them; none when Prometheus is not running.
    """
    if "prometheus" not in stack.running():
        return []
    from tidemark.demo.metrics_charts import prometheus_charts  # lazy: see above

    end = time.time()
    return prometheus_charts(folder, stack.prometheus().url, end - (time.monotonic() - began), end)
