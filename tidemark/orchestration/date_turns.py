"""One dedup of a date at a time, while dedups of different dates run side by side.

With more than one dedup task at once (TIDEMARK_DEDUP_CONCURRENCY above 1, `tidemark up
--dedup-concurrency`), two dates never wait for each other; two runs of one date that both found new
receipts must not compute side by side: both would read the same receipts, and the second
computation is wasted work on the cores the first needs (the commit's compare-and-swap keeps the
result correct either way, docs/dedup.md). Airflow limits a task's instances per DAG or per run,
not per partition key, so the dedup task asks this Airflow's REST API which running dedup task
instances belong to runs of its date: the one queued first goes on, every other one waits its turn
in its task, asking again every few seconds (dags/tidemark_dedup.py says why it is not
rescheduled), and, when it comes, usually finds the date's receipts published and returns in a
second (the dedup's own no-op check).

Airflow's state, not a lock of our own: a killed task is no longer running, so nothing stale is
left to expire. The order is total (queued time, then run id) and every task sees itself running
when it asks, so of two runs of a date that ask at once exactly one goes on.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date
from typing import TYPE_CHECKING

from tidemark.base import layout

if TYPE_CHECKING:
    from tidemark.orchestration.airflow_api import AirflowClient, JSONObject

DEDUP_TASK = "dedup"


def run_date(run: JSONObject) -> date | None:
    """The event date a run of the dedup DAG is for: its partition key, else its conf's event_date.

    None for a run that names no date, or none in the lake's format (such a run fails its own
    parse of the date before it reaches a dedup: nothing to wait for).
    """
    key = run.get("partition_key")
    conf = run.get("conf") or {}
    text = key or (conf.get("event_date") if isinstance(conf, dict) else None)
    if not text:
        return None
    try:
        return layout.parse_event_date(text)
    except layout.InvalidPartitionValue:
        return None


def waiting_for(runs: Iterable[JSONObject], dedups: Iterable[JSONObject], run_id: str, event_date: date) -> str | None:
    """The run whose dedup of `event_date` goes before run `run_id`'s, or None: its turn.

    Args:
        runs: the DAG's running runs (REST dagRuns: run_id, partition_key, conf).
        dedups: the running dedup task instances across the DAG (REST taskInstances: run_id,
            queued_when).
        run_id: the asking run.
        event_date: its date.
    """
    same_date = {str(run["dag_run_id"]) for run in runs if run_date(run) == event_date}
    same_date.add(run_id)
    order = sorted(
        (str(ti.get("queued_when") or ""), str(ti["dag_run_id"])) for ti in dedups if ti["dag_run_id"] in same_date
    )
    if not order or order[0][1] == run_id or all(rid != run_id for _, rid in order):
        return None
    return order[0][1]


def ahead_of(client: AirflowClient, dag_id: str, run_id: str, event_date: date) -> str | None:
    """waiting_for over this Airflow's running runs and dedup task instances (two REST calls)."""
    runs = client.running_dag_runs(dag_id)
    if not any(run_date(run) == event_date and run["dag_run_id"] != run_id for run in runs):
        return None  # the usual case: no other run of the date is running
    return waiting_for(runs, client.running_task_instances(dag_id, DEDUP_TASK), run_id, event_date)
