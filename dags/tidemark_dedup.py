"""tidemark_dedup: deduplicate one event date of the sessions lake and publish it as an asset.

Triggered (schedule=None) by the Cloud Function, one run per availability notice, with
conf {"event_date": "YYYY-MM-DD", ...}; or by hand from the UI/REST with the same Param.

    prepare ──> dedup (SparkSubmitOperator: spark-submit streaming_job/submit.py dedup ...)
            ──> publish (reads _CURRENT.json, emits the asset events, lists the reruns owed)
            ──> trigger_affected (one TriggerDagRunOperator per neighbouring date, mapped)

Idempotency: the dedup step writes a new immutable version and swaps the pointer atomically, so
rerunning a run, clearing a task, or two runs of one date at once leave the newest complete result.
Nothing here adds side effects of its own: the asset event is a record, and the run a neighbouring
date gets has a run id derived from (that date, this date, the version that owed it), so a rerun
finds it already there (skip_when_already_exists) instead of adding one.

Which neighbours: every rerun obligation a run of this date recorded in the lake and no run of the
neighbour has acted on yet (tidemark/obligations.py), not the affected_dates of whatever version
_CURRENT.json names by then: a second run of this date may have superseded that version, or a
killed run left its obligations to this retry. A neighbour run that fails for good leaves its
obligation pending, and the tidemark_reconcile DAG starts another.

Where things come from: the lake from the Airflow Variable `tidemark_lake`, else the environment
TIDEMARK_LAKE; Spark from the connection `spark_default` (local[*] on a laptop via
AIRFLOW_CONN_SPARK_DEFAULT; a cluster, YARN or Dataproc in production); the application from
TIDEMARK_SUBMIT_APP (default: this repository's streaming_job/submit.py).

Top level stays cheap (the dag-processor re-parses this file): no pyspark, no storage access, no
Variable reads; the tasks import what they need.
"""
from __future__ import annotations

import os
from datetime import timedelta

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import Asset, AssetAlias, Param, dag, task

from tidemark import names

DAG_ID = names.get("DAG_ID")
ASSET_PREFIX = names.get("ASSET_URI_PREFIX")
# One asset for "some date of sessions_dedup changed" (extra says which date and version) ...
SESSIONS_DEDUP = Asset(ASSET_PREFIX, extra={"layout": "event_date=YYYY-MM-DD/version=<receipt_ts>"})
# ... and, through an alias, one asset per date (tidemark://sessions_dedup/event_date=2026-03-07),
# so a downstream DAG can schedule on exactly the date it needs.
PER_DATE = AssetAlias(f"{ASSET_PREFIX}/by_event_date")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
APPLICATION = os.environ.get("TIDEMARK_SUBMIT_APP", os.path.join(REPO, "streaming_job", "submit.py"))
EVENT_DATE_PATTERN = r"^\d{4}-\d{2}-\d{2}$"
PREPARED = "ti.xcom_pull(task_ids='prepare')"


def date_asset(event_date: str) -> Asset:
    return Asset(f"{ASSET_PREFIX}/event_date={event_date}")


def read_current(lake: str, event_date: str) -> dict | None:
    """The date's current version from the Iceberg table's current metadata (pyiceberg, no JVM):
    version, receipts, affected_dates, sessions, ... or None."""
    from tidemark import layout, publish

    return publish.current_version(lake, layout.check_event_date(event_date))


def dedup_task(args: list[str]):
    """The Spark step. SparkSubmitOperator on the `spark_default` connection (local[*], a
    standalone master, YARN ...); on Composer, with TIDEMARK_DATAPROC_CLUSTER set (terraform/
    composer.tf), a Dataproc PySpark job on that cluster, whose init action installs tidemark.
    The Dataproc branch needs the Google provider (preinstalled on Composer, absent here): it is
    not exercised by this repository's tests."""
    cluster = os.environ.get("TIDEMARK_DATAPROC_CLUSTER")
    if cluster:
        from airflow.providers.google.cloud.operators.dataproc import DataprocSubmitJobOperator

        project = os.environ["TIDEMARK_DATAPROC_PROJECT"]
        return DataprocSubmitJobOperator(
            task_id="dedup", project_id=project, region=os.environ["TIDEMARK_DATAPROC_REGION"],
            job={"reference": {"project_id": project}, "placement": {"cluster_name": cluster},
                 "pyspark_job": {"main_python_file_uri": APPLICATION, "args": args}})
    return SparkSubmitOperator(
        task_id="dedup",
        conn_id="spark_default",
        application=APPLICATION,
        name="tidemark-dedup-{{ %s['event_date'] }}" % PREPARED,
        application_args=args,
        conf={"spark.ui.enabled": "false"},
        verbose=False,
    )


@dag(
    dag_id=DAG_ID,
    description="Deduplicate one event date of the sessions lake (Spark) and publish it atomically",
    schedule=None,
    catchup=False,
    max_active_runs=int(os.environ.get("TIDEMARK_DAG_MAX_ACTIVE_RUNS", "4")),
    dagrun_timeout=timedelta(hours=2),
    default_args={"retries": int(os.environ.get("TIDEMARK_DAG_RETRIES", "2")),
                  "retry_delay": timedelta(seconds=20)},
    params={
        "event_date": Param(
            type="string", pattern=EVENT_DATE_PATTERN, format="date",
            title="Event date", description="UTC date of session starts to deduplicate (YYYY-MM-DD)"),
    },
    tags=["tidemark"],
    doc_md=__doc__,
)
def tidemark_dedup():
    @task
    def prepare(params: dict | None = None) -> dict:
        """Validate the date again (a calendar date, not just the Param's pattern) and resolve the
        lake; the Spark task reads both from here, never from raw user input."""
        from airflow.sdk import Variable

        from tidemark import layout

        event_date = layout.check_event_date((params or {}).get("event_date"))
        lake = Variable.get("tidemark_lake", default=None) or os.environ.get("TIDEMARK_LAKE")
        if not lake:
            raise ValueError("set the Airflow Variable tidemark_lake or TIDEMARK_LAKE to the lake URI")
        return {"event_date": event_date, "lake": lake}

    prepared = prepare()

    dedup = dedup_task(["dedup", "--lake", "{{ %s['lake'] }}" % PREPARED,
                        "--event-date", "{{ %s['event_date'] }}" % PREPARED])

    @task(outlets=[SESSIONS_DEDUP, PER_DATE])
    def publish(prepared: dict, *, outlet_events=None) -> list[dict]:
        """Record the published version as asset events; list the neighbouring dates owed a rerun."""
        from tidemark import layout, obligations

        event_date, lake = prepared["event_date"], prepared["lake"]
        pointer = read_current(lake, event_date)
        if not pointer or not pointer.get("version"):
            raise RuntimeError(f"dedup succeeded but {layout.current_pointer(lake, event_date)} "
                               "names no version")
        version = layout.check_receipt_ts(pointer["version"])
        extra = {"event_date": event_date, "version": version}
        outlet_events[SESSIONS_DEDUP].extra = extra
        outlet_events[PER_DATE].add(date_asset(event_date), extra=extra)

        return obligations.reruns_owed_by(lake, event_date)

    neighbours = publish(prepared)
    prepared >> dedup >> neighbours

    TriggerDagRunOperator.partial(
        task_id="trigger_affected",
        trigger_dag_id=DAG_ID,
        logical_date=None,
        skip_when_already_exists=True,
        wait_for_completion=False,
        openlineage_inject_parent_info=False,
    ).expand_kwargs(neighbours)


tidemark_dedup()
