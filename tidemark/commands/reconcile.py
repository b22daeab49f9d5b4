"""tidemark reconcile: list the stale event dates and why; with --trigger, start their runs.

Stale: the event dates whose current version is stale; --trigger starts a deduplication run for
each due one through Airflow's REST API.

Stale: complete receipt partitions the current version does not include (or no version yet), a
rerun owed by another date's run, a version planned by an older tidemark, session rules changed. A
date is due once its oldest reason is older than --grace (younger ones are normally being handled by
their own notice's or neighbour's run). Run ids reconcile__<date>__<fingerprint>__<attempt> make a
repeated reconcile land on the same runs (see docs/airflow.md, "Reconciliation").

A pass looks at what changed since the previous one (the dates stale then, the dates that received
partitions since, the dates owed a rerun), so its cost follows the traffic, not the lake's age; it
walks every date on the first pass, after a rules change, once a day, and with --full.

Airflow: --airflow-url (+ --airflow-password-file or $AIRFLOW_PASSWORD), else the Cloud Function's
environment (AIRFLOW_BASE_URL, AIRFLOW_AUTH_MODE, ...), else the local stack's (--home). Without
one, the command lists and says what it would start.

On a terminal (without --json) a progress bar on stderr shows the dates examined and the runs
started, with the time left; the logs get progress lines on a long pass.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import TYPE_CHECKING

from tidemark.base.durations import parse_duration
from tidemark.base.layout import event_date_text
from tidemark.commands.console import wide_console
from tidemark.commands.options import (
    DURATION_TEXT,
    LAKE,
    Subparsers,
    UsageError,
    add_airflow_options,
    checked,
    in_range,
    read_airflow_password,
)

if TYPE_CHECKING:
    from tidemark.orchestration.airflow_api import AirflowClient  # lazy: pulls requests and tenacity
    from tidemark.orchestration.reconcile import Decision


def register(subparsers: Subparsers) -> None:
    """Add `tidemark reconcile` to the subcommands."""
    p = subparsers.add_parser(
        "reconcile", help="stale event dates and why; --trigger starts their runs", description=__doc__
    )
    p.add_argument("--lake", required=True, type=LAKE, help="lake folder or URI")
    p.add_argument("--trigger", action="store_true", help="start a dedup run for each due stale date")
    p.add_argument(
        "--grace", default="10m", type=DURATION_TEXT, help="how old the oldest reason must be before a run is started"
    )
    p.add_argument(
        "--max-attempts",
        type=checked(in_range(int, 1, 999), "attempts"),
        default=3,
        help="runs started per stale state before giving up (1-999)",
    )
    p.add_argument("--dag-id", default=None, help="the dedup DAG (default tidemark_dedup)")
    p.add_argument("--json", action="store_true", help="one JSON object per stale date")
    p.add_argument(
        "--full", action="store_true", help="walk every event date instead of what changed since the last pass"
    )
    add_airflow_options(p)
    p.set_defaults(handler=run)


def airflow_client(args: argparse.Namespace, required: bool) -> AirflowClient | None:
    """The Airflow REST client for --airflow-url, the environment or the local stack.

    tidemark.orchestration.airflow_api's; None when there is none and it is not required.
    """
    from tidemark.orchestration.airflow_api import AirflowClient  # lazy: pulls requests and tenacity

    if args.airflow_url:
        password = read_airflow_password(args)
        if not password:
            raise UsageError("--airflow-url needs --airflow-password-file or $AIRFLOW_PASSWORD")
        return AirflowClient(args.airflow_url, "password", args.airflow_user, password)
    if os.environ.get("AIRFLOW_BASE_URL"):
        return AirflowClient.from_env()
    from tidemark.devstack.stack import Stack  # lazy: pulls pyarrow and psutil

    stack = Stack(args.home)
    if stack.settings() is not None and "airflow-api-server" in stack.running():
        client: AirflowClient = stack.airflow().client()
        return client
    if required:
        raise UsageError(
            f"--trigger needs an Airflow: pass --airflow-url, set AIRFLOW_BASE_URL, or "
            f"start the local stack (none is up in {stack.home})"
        )
    return None


def run(args: argparse.Namespace) -> int:
    """Run `tidemark reconcile`; its exit status."""
    from tidemark.commands import progress_bar  # lazy: rich (tidemark.commands.console)
    from tidemark.orchestration import reconcile  # lazy: the lake's modules pull pyarrow

    grace = parse_duration(args.grace)
    if args.lake.is_local and not os.path.exists(args.lake.root):
        raise UsageError(f"no lake at {args.lake}")
    client = airflow_client(args, required=args.trigger)
    with progress_bar.kill_interrupts(), progress_bar.shown(enabled=not args.json) as display:
        stale, decisions = reconcile.reconcile(
            args.lake,
            client,
            dag_id=args.dag_id,
            trigger=args.trigger,
            grace=grace,
            max_attempts=args.max_attempts,
            full=args.full,
            display=display,
        )
    by_date = {d.event_date: d for d in decisions}
    if args.json:
        for item in stale:
            decision = by_date[item.event_date]
            print(json.dumps({**item.to_json(), "action": _action(decision, args.trigger), "run_id": decision.run_id}))
        return 0
    from rich.table import Table  # lazy: rich costs the CLI's start (tidemark.commands.console)

    console = wide_console()
    if not stale:
        console.print(f"every event date in {args.lake} is up to date")
        return 0
    table = Table(title=f"stale event dates in {args.lake}")
    for column in ("event_date", "current version", "why", "action", "run id"):
        table.add_column(column, overflow="fold")
    for item in stale:
        decision = by_date[item.event_date]
        table.add_row(
            event_date_text(item.event_date),
            item.version or "[red]none yet[/]",
            "\n".join(item.reasons),
            _action(decision, args.trigger),
            decision.run_id or "",
        )
    console.print(table)
    return 0


def _action(decision: Decision, trigger: bool) -> str:
    if decision.action == "trigger":
        return "started" if trigger else "would start (--trigger)"
    return {
        "in_flight": "run in flight",
        "waiting": "within the grace period",
        "given_up": "gave up (every attempt ended)",
    }[decision.action]
