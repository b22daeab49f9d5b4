"""Options shared by `tidemark exporter` and `tidemark health`.

The SLO objectives and the Airflow that tells which dates reconciliation gave up on
(tidemark/ops/health.py).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from tidemark.base import names
from tidemark.base.durations import parse_duration
from tidemark.commands.options import DURATION_TEXT, LAKE, add_airflow_options, checked, in_range
from tidemark.commands.reconcile import airflow_client

if TYPE_CHECKING:
    from tidemark.ops.health import Objectives
    from tidemark.orchestration.airflow_api import AirflowClient

# Reconcile's run id -> the run's Airflow state (None: no such run).
RunState = Callable[[str], "str | None"]


def add_slo_options(p: argparse.ArgumentParser) -> None:
    """Add --lake, the SLO objectives, --max-attempts and the Airflow options."""
    p.add_argument("--lake", required=True, type=LAKE, help="lake folder or URI")
    p.add_argument(
        "--correction",
        default="20m",
        type=DURATION_TEXT,
        help="SLO: no event date stale (uncorrected receipts, owed rerun) longer than this",
    )
    p.add_argument("--notice-owed", default="10m", type=DURATION_TEXT, help="SLO: no notice owed longer than this")
    p.add_argument(
        "--stream-lag",
        default="5m",
        type=DURATION_TEXT,
        help="SLO: the stream's p95 landing -> committed lag (alerted by Prometheus)",
    )
    p.add_argument(
        "--max-attempts",
        type=checked(in_range(int, 1, 999), "attempts"),
        default=3,
        help="reconcile's attempts per stale state before a date counts as given up (as "
        "`tidemark reconcile --max-attempts`; the reconcile DAG's default is 3)",
    )
    p.add_argument("--no-airflow", action="store_true", help="do not ask Airflow which dates reconciliation gave up on")
    add_airflow_options(p)


def objectives(args: argparse.Namespace) -> Objectives:
    """The SLO objectives the options give."""
    from tidemark.ops.health import Objectives  # lazy: pulls pyarrow

    return Objectives(
        correction=parse_duration(args.correction),
        notice_owed=parse_duration(args.notice_owed),
        stream_lag=parse_duration(args.stream_lag),
    )


def run_state(args: argparse.Namespace) -> RunState | None:
    """A lookup of reconcile's run id -> Airflow state; None with --no-airflow.

    Through the Airflow found like `tidemark reconcile` finds it (looked up again on each call's
    failure: Airflow may start after us).
    """
    if args.no_airflow:
        return None
    holder: dict[str, AirflowClient | None] = {}

    def state(run_id: str) -> str | None:
        client = holder.get("client")
        if client is None:
            client = holder["client"] = airflow_client(args, required=False)
            if client is None:
                raise RuntimeError("no Airflow found")
        try:
            run = client.get_dag_run(names.get("DAG_ID"), run_id)
        except Exception:
            holder["client"] = None
            raise
        return None if run is None else run.get("state")

    return state
