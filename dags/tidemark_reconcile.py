"""tidemark_reconcile: find the event dates whose current version is stale and start their dedup runs.

    find (tidemark.reconcile: markers, versions, obligations; no Spark)
      ──> trigger (one TriggerDagRunOperator of tidemark_dedup per stale date, mapped)

The self-healing loop (docs/airflow.md): a date whose run failed every retry (Spark down, worker
killed), a neighbour rerun whose run failed, a receipt partition whose notice never became a run, a
run killed before its commit: each leaves the date stale in a way the lake
shows, and this DAG starts a run for it once the oldest reason is older than the grace period.
Run ids `reconcile__<date>__<fingerprint>__<attempt>` (tidemark/runs.py) keep repeated reconciles
from piling up runs: the same stale state maps to the same run, a new attempt only once that run
ended and the date is still stale for the same reasons.

Configuration: the schedule from the environment variable TIDEMARK_RECONCILE_INTERVAL (a duration,
default 15m; `off` for triggered runs only), read when the file is parsed (an Airflow Variable would
cost a metadata read on every parse); at run time the Airflow Variables (else environment variables)
tidemark_lake / TIDEMARK_LAKE, tidemark_reconcile_grace / TIDEMARK_RECONCILE_GRACE (default 10m) and
tidemark_reconcile_max_attempts / TIDEMARK_RECONCILE_MAX_ATTEMPTS (default 3).

Top level stays cheap: no pyarrow, no storage access, no Variable reads.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import dag, task

from tidemark import names
from tidemark.durations import parse_interval  # standard library only: cheap at parse time

DAG_ID = "tidemark_reconcile"
DEDUP_DAG_ID = names.get("DAG_ID")


SCHEDULE = parse_interval(
    os.environ.get("TIDEMARK_RECONCILE_INTERVAL", "15m"), "TIDEMARK_RECONCILE_INTERVAL", timedelta(minutes=1)
)


def _setting(variable: str, env: str, default: str) -> str:
    from airflow.sdk import Variable

    return Variable.get(variable, default=None) or os.environ.get(env) or default


def _run_state(run_id: str) -> str | None:
    """A tidemark_dedup run's state through the task's own execution API (no credentials needed)."""
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance as TI

    if TI.get_dr_count(dag_id=DEDUP_DAG_ID, run_ids=[run_id]) == 0:
        return None
    for state in ("queued", "running"):
        if TI.get_dr_count(dag_id=DEDUP_DAG_ID, run_ids=[run_id], states=[state]):
            return state
    return "ended"


@dag(
    dag_id=DAG_ID,
    description="Start tidemark_dedup runs for the event dates whose current version is stale",
    schedule=SCHEDULE,
    start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(minutes=30),
    default_args={"retries": 1, "retry_delay": timedelta(seconds=30)},
    tags=["tidemark"],
    doc_md=__doc__,
)
def tidemark_reconcile():
    @task
    def find() -> list[dict]:
        """The stale dates and, for the due ones, the run to start (see tidemark/reconcile.py)."""
        from tidemark import reconcile
        from tidemark.durations import parse_duration
        from tidemark.lake import Lake

        lake = _setting("tidemark_lake", "TIDEMARK_LAKE", "")
        if not lake:
            raise ValueError("set the Airflow Variable tidemark_lake or TIDEMARK_LAKE to the lake URI")
        grace = parse_duration(_setting("tidemark_reconcile_grace", "TIDEMARK_RECONCILE_GRACE", "10m"))
        attempts = int(_setting("tidemark_reconcile_max_attempts", "TIDEMARK_RECONCILE_MAX_ATTEMPTS", "3"))
        decisions = reconcile.decide(
            reconcile.staleness(Lake.open(lake)), _run_state, grace=grace, max_attempts=attempts
        )
        for decision in decisions:
            print(f"{decision.event_date}: {decision.action} {decision.run_id or ''} ({'; '.join(decision.reasons)})")
        return [{"trigger_run_id": d.run_id, "conf": d.conf} for d in decisions if d.action == "trigger"]

    TriggerDagRunOperator.partial(
        task_id="trigger",
        trigger_dag_id=DEDUP_DAG_ID,
        logical_date=None,
        skip_when_already_exists=True,
        wait_for_completion=False,
        openlineage_inject_parent_info=False,
    ).expand_kwargs(find())


tidemark_reconcile()
