"""tidemark_reconcile: find the event dates whose current version is stale and start their dedup runs.

    find (tidemark.orchestration.reconcile: markers, versions, obligations; no Spark)
      ──> trigger (one tidemark_dedup run per stale date, mapped: the REST API, with the date as
                   the run's partition_key; tidemark/orchestration/airflow_api.py)

    drain_outbox (the corrected outbox: every asset event owed to Airflow, every notice owed to
                  the corrected topic; versions committed outside the dedup DAG, a `tidemark
                  dedup` by hand or `tidemark rules migrate`, reach consumers here at the latest)

The self-healing loop (docs/airflow.md): a date whose run failed every retry (Spark down, worker
killed), a neighbour rerun whose run failed, a receipt partition whose notice never became a run, a
run killed before its commit: each leaves the date stale in a way the lake
shows, and this DAG starts a run for it once the oldest reason is older than the grace period.
Run ids `reconcile__<date>__<fingerprint>__<attempt>` (tidemark/orchestration/runs.py) keep repeated reconciles
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
from typing import Any

from airflow.sdk import dag, task

from tidemark.base import layout, names  # standard library only: cheap at parse time
from tidemark.base.durations import parse_duration, parse_interval  # standard library only: cheap at parse time
from tidemark.orchestration import settings  # standard library only: cheap at parse time

DAG_ID = "tidemark_reconcile"
DEDUP_DAG_ID = names.get("DAG_ID")


SCHEDULE = parse_interval(
    os.environ.get("TIDEMARK_RECONCILE_INTERVAL", "15m"), "TIDEMARK_RECONCILE_INTERVAL", timedelta(minutes=1)
)


def _run_state(run_id: str) -> str | None:
    """A tidemark_dedup run's state through the task's own execution API (no credentials needed)."""
    # Imported when the task runs: the task runner exists inside a running task only.
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
def tidemark_reconcile() -> None:
    """One reconciliation pass: find, trigger, drain (see the module)."""

    @task
    def find() -> list[dict[str, Any]]:
        """The stale dates and, for the due ones, the run to start (see tidemark/orchestration/reconcile.py)."""
        # Imported when the task runs: the lake's storage stays out of the dag-processor.
        from tidemark.orchestration import reconcile
        from tidemark.store.lake import Lake

        lake = settings.lake_uri()
        grace = parse_duration(settings.setting("tidemark_reconcile_grace", "TIDEMARK_RECONCILE_GRACE", "10m"))
        attempts = int(settings.setting("tidemark_reconcile_max_attempts", "TIDEMARK_RECONCILE_MAX_ATTEMPTS", "3"))
        decisions = reconcile.decide(
            reconcile.staleness(Lake.open(lake)), _run_state, grace=grace, max_attempts=attempts
        )
        for decision in decisions:
            print(f"{decision.event_date}: {decision.action} {decision.run_id or ''} ({'; '.join(decision.reasons)})")
        return [{"trigger_run_id": d.run_id, "conf": d.conf} for d in decisions if d.action == "trigger"]

    @task
    def trigger(trigger_run_id: str, conf: dict[str, Any]) -> str:
        """The stale date's run, its date as partition_key, through the REST API.

        The SDK's TriggerDagRunOperator cannot set a partition_key in 3.3.2. An existing run id
        (HTTP 409) skips the task.
        """
        # Imported when the task runs: the REST client is needed in a task only.
        from airflow.sdk.exceptions import AirflowSkipException

        from tidemark.orchestration import airflow_api

        # the conf came through XCom (JSON): parsed, then its text is the partition key
        event_date = layout.event_date_text(layout.as_event_date(conf.get("event_date")))
        result = airflow_api.for_tasks().trigger_dag_run(DEDUP_DAG_ID, trigger_run_id, conf, partition_key=event_date)
        if not result.created:
            raise AirflowSkipException(f"run {trigger_run_id} of {event_date} already exists")
        return trigger_run_id

    trigger.expand_kwargs(find())

    @task(max_active_tis_per_dag=1)
    def drain_outbox() -> dict[str, Any]:
        """Emit what the corrected outbox owes (tidemark/notices/corrected_delivery.py).

        One asset event per committed version, whoever committed it, and its notice on the topic
        when one is set.
        """
        # Imported when the task runs: the notices' storage and senders stay out of the dag-processor.
        from tidemark.notices import corrected_delivery
        from tidemark.orchestration import airflow_api
        from tidemark.store.lake import Lake

        lake = Lake.open(settings.lake_uri())
        owed = {"asset_events": corrected_delivery.emit_owed(lake, airflow_api.for_tasks(), timeout=60)}
        topic = corrected_delivery.configured_topic()
        if topic:
            owed["notices"] = corrected_delivery.send_owed(lake, topic, timeout=60)
        if any(owed.values()):
            raise corrected_delivery.NoticesOwed(f"still owed after 60s: {owed}")
        return owed

    drain_outbox()


tidemark_reconcile()
