"""tidemark history: one event date's lineage on one screen, in time order.

Every receipt partition the stream wrote for the date, every availability notice (published or
still owed), every DAG run (from Airflow's REST API: the local stack's when it runs, or
--airflow-url; otherwise marked unavailable) and every deduplicated version (current or
superseded).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from tidemark.base import names
from tidemark.base.layout import event_date_text
from tidemark.commands.console import wide_console
from tidemark.commands.options import EVENT_DATE, LAKE, Subparsers, add_airflow_options, read_airflow_password


def register(subparsers: Subparsers) -> None:
    """Add `tidemark history` to the subcommands."""
    p = subparsers.add_parser(
        "history", help="an event date's receipts, notices, DAG runs and versions", description=__doc__
    )
    add_airflow_options(p)
    p.add_argument("--lake", required=True, type=LAKE, help="lake folder or URI")
    p.add_argument("--event-date", required=True, type=EVENT_DATE, help="YYYY-MM-DD")
    p.add_argument("--json", action="store_true", help="one JSON object per line instead of a table")
    p.set_defaults(handler=run)


def fetch_runs(args: argparse.Namespace) -> tuple[list[dict[str, Any]] | None, str]:
    """(runs, where they came from) or (None, why not)."""
    url, user, password = args.airflow_url, args.airflow_user, None
    if url:
        password = read_airflow_password(args)
        if not password:
            return None, "unavailable: --airflow-url needs --airflow-password-file or $AIRFLOW_PASSWORD"
    else:
        from tidemark.devstack.stack import Stack  # lazy: pulls pyarrow and psutil

        stack = Stack(args.home)
        if stack.settings() is None or "airflow-api-server" not in stack.running():
            return None, (
                f"unavailable: no Airflow (the local stack in {stack.home} is not up; "
                "pass --airflow-url to ask another)"
            )
        server = stack.airflow()
        url, user, password = server.url, server.username, server.password
    try:
        return airflow_runs(url, user, password), f"from {url}"
    except Exception as exc:  # noqa: BLE001 - any failure to reach Airflow is reported, not fatal
        return None, f"unavailable: Airflow at {url} did not answer ({type(exc).__name__}: {str(exc)[:200]})"


def airflow_runs(url: str, username: str, password: str) -> list[dict[str, Any]]:
    """All runs of the dedup DAG from Airflow's REST API (raises when Airflow cannot be reached)."""
    from tidemark.orchestration.airflow_api import AirflowClient  # lazy: pulls requests and tenacity

    return AirflowClient(url, "password", username, password, timeout=(3.0, 15.0)).list_dag_runs(names.get("DAG_ID"))


def run(args: argparse.Namespace) -> int:
    """Run `tidemark history`; its exit status."""
    from rich.table import Table  # lazy: rich costs the CLI's start (tidemark.commands.console)

    from tidemark.ops import inspect  # lazy: pulls pyarrow

    all_runs, source = fetch_runs(args)
    items = inspect.history(args.lake, args.event_date, all_runs)
    event_date = event_date_text(args.event_date)  # in the table's title and messages
    if args.json:
        print(json.dumps({"kind": "source", "dag_runs": source}))
        for item in items:
            print(json.dumps({**item, "time": inspect.iso(item["time"])}))
        return 0
    console = wide_console()
    table = Table(title=f"history of event_date={event_date} in {args.lake}")
    for column in ("time (UTC)", "kind", "id", "state", "detail"):
        table.add_column(column, overflow="fold")
    colors = {"receipt": "cyan", "notice": "magenta", "dag run": "yellow", "version": "green"}
    for item in items:
        table.add_row(
            inspect.iso(item["time"]),
            f"[{colors[item['kind']]}]{item['kind']}[/]",
            item["id"],
            item["state"],
            item["detail"],
        )
    console.print(table)
    console.print(f"DAG runs: {source}")
    if not items:
        console.print(f"nothing recorded for {event_date} in {args.lake}")
    return 0
