"""tidemark_dedup: deduplicate one event date of the sessions lake and announce it as an asset event.

Triggered (schedule=None) by the Cloud Function, one run per availability notice, with
conf {"event_date": "YYYY-MM-DD", ...}; or by hand from the UI/REST with the same Param.

    prepare ──> needs_spark (short circuit, pure Python: does the current version already
                include every receipt partition of the date's plan? then skip the dedup)
            ──> dedup (DedupOperator on spark_default: a Spark Connect client, or spark-submit
                streaming_job/submit.py dedup ...; a Dataproc job when TIDEMARK_DATAPROC_CLUSTER is set)
            ──> emit_assets (reads the current version, emits the asset events)
            ──> owed_reruns (runs after emit_assets or a skipped dedup: the reruns owed)
            ──> trigger_affected (one TriggerDagRunOperator per neighbouring date, mapped)
    dedup   ──> notify_corrected (after the dedup or a skipped one: the corrected-partition
                notices owed, docs/notices.md)

A run with nothing new (the usual case when several notices of one date queue up: the first run
to start picks up every complete receipt of its date) shows dedup and emit_assets as skipped, with the
reason in needs_spark's log, and takes seconds: no Spark, no repeated asset event. It still
discharges the date's obligations (as the dedup would have) and starts the neighbour runs owed.

Idempotency: the dedup step writes a new immutable version and makes it current in one Iceberg
commit (the date's data files and the table property tidemark.current.<date> together,
tidemark/publish.py), so rerunning a run, clearing a task, or two runs of one date at once leave
the newest complete result.
Nothing here adds side effects of its own: the asset event is a record, and the run a neighbouring
date gets has a run id derived from (that date, this date, the version that owed it), so a rerun
finds it already there (skip_when_already_exists) instead of adding one.

Which neighbours: every rerun obligation a run of this date recorded in the lake and no run of the
neighbour has acted on yet (tidemark/obligations.py), not the affected_dates of whatever version
the table's tidemark.current.<date> property names by then: a second run of this date may have
superseded that version, or a killed run left its obligations to this retry. A neighbour run
that fails for good leaves its obligation pending, and the tidemark_reconcile DAG starts another.

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


def date_asset(event_date: str) -> Asset:
    return Asset(f"{ASSET_PREFIX}/event_date={event_date}")


def read_current(lake: str, event_date: str) -> dict | None:
    """The date's current version from the Iceberg table's current metadata (pyiceberg, no JVM):
    version, receipts, affected_dates, sessions, ... or None."""
    from tidemark import layout, publish
    from tidemark.lake import Lake

    return publish.current_version(Lake.open(lake), layout.check_event_date(event_date))


class DedupOperator(SparkSubmitOperator):
    """The Spark step, on the `spark_default` connection, decided when the task runs:

    - connection type `spark_connect` (host, port; SparkConnectHook's URL rules): the task process
      runs tidemark.dedup itself as a Spark Connect client of that server (a warm JVM: `tidemark
      up` starts one), in a session of its own;
    - any other type (spark: local[*], a standalone master, YARN ...): spark-submit of
      streaming_job/submit.py, as SparkSubmitOperator always did (and its on_kill).
    """

    template_fields = (*SparkSubmitOperator.template_fields, "lake", "event_date")

    def __init__(self, *, lake: str, event_date: str, **kwargs):
        super().__init__(application_args=dedup_args(lake, event_date), **kwargs)
        self.lake = lake
        self.event_date = event_date

    def execute(self, context):
        from airflow.sdk import BaseHook

        self.name = f"tidemark-dedup-{self.event_date}"
        if BaseHook.get_connection(self._conn_id).conn_type != "spark_connect":
            return super().execute(context)
        from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

        from tidemark.dedup import run_dedup
        from tidemark.lake import Lake
        from tidemark.spark import connect_session

        url = SparkConnectHook(self._conn_id).get_connection_url()
        self.log.info("dedup of %s as a Spark Connect client of %s", self.event_date, url.split(";")[0])
        spark = connect_session(url, f"tidemark-dedup-{self.event_date}")
        try:
            result = run_dedup(Lake.open(self.lake), self.event_date, spark=spark)
        finally:
            spark.stop()  # releases this run's server-side session
        self.log.info("dedup result: %s", result.to_json())


def dedup_args(lake, event_date) -> list:
    """The tidemark command line of the Spark step, wherever it runs (spark-submit, Dataproc)."""
    return ["dedup", "--lake", lake, "--event-date", event_date]


DATAPROC_ENV = ("TIDEMARK_DATAPROC_PROJECT", "TIDEMARK_DATAPROC_REGION")


def dataproc_target(environ) -> dict | None:
    """{project, region, cluster} when TIDEMARK_DATAPROC_CLUSTER names a cluster (Composer, set by
    terraform/composer.tf), else None (spark_default decides). A half-set environment is refused
    at parse time, naming what is missing, rather than failing in every run."""
    cluster = (environ.get("TIDEMARK_DATAPROC_CLUSTER") or "").strip()
    if not cluster:
        return None
    missing = [name for name in DATAPROC_ENV if not (environ.get(name) or "").strip()]
    if missing:
        raise ValueError(f"TIDEMARK_DATAPROC_CLUSTER={cluster!r} needs {', '.join(missing)} too")
    return {
        "project": environ["TIDEMARK_DATAPROC_PROJECT"].strip(),
        "region": environ["TIDEMARK_DATAPROC_REGION"].strip(),
        "cluster": cluster,
    }


def dataproc_job(target: dict, application: str, lake, event_date) -> dict:
    """The Dataproc job (DataprocSubmitJobOperator's `job`) of one dedup run on `target`'s cluster."""
    return {
        "reference": {"project_id": target["project"]},
        "placement": {"cluster_name": target["cluster"]},
        "pyspark_job": {"main_python_file_uri": application, "args": dedup_args(lake, event_date)},
    }


def dedup_concurrency(environ) -> int | None:
    """TIDEMARK_DEDUP_CONCURRENCY: dedup tasks running at once across all runs (unset: no limit
    but max_active_runs). On a small box 1 is fastest: runs of one date then never compute the
    same receipts side by side; the one that waited finds them published and is a no-op."""
    text = (environ.get("TIDEMARK_DEDUP_CONCURRENCY") or "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"TIDEMARK_DEDUP_CONCURRENCY must be a positive integer, not {text!r}")
    return int(text)


def dedup_task(lake, event_date):
    """The Spark step: DedupOperator on the `spark_default` connection; on Composer, with
    TIDEMARK_DATAPROC_CLUSTER set (terraform/composer.tf), a Dataproc PySpark job on that
    cluster, whose init action installs tidemark. The operator class is chosen here, at parse
    time; the job it submits is dataproc_job's (tests/test_dag.py checks it). The Google provider
    is preinstalled on Composer and absent here, so only the operator's construction is not
    exercised by this repository's tests."""
    target = dataproc_target(os.environ)
    if target:
        from airflow.providers.google.cloud.operators.dataproc import DataprocSubmitJobOperator

        return DataprocSubmitJobOperator(
            task_id="dedup",
            project_id=target["project"],
            region=target["region"],
            max_active_tis_per_dag=dedup_concurrency(os.environ),
            job=dataproc_job(target, APPLICATION, lake, event_date),
        )
    return DedupOperator(
        task_id="dedup",
        max_active_tis_per_dag=dedup_concurrency(os.environ),
        conn_id="spark_default",
        application=APPLICATION,
        lake=lake,
        event_date=event_date,
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
    default_args={"retries": int(os.environ.get("TIDEMARK_DAG_RETRIES", "2")), "retry_delay": timedelta(seconds=20)},
    params={
        "event_date": Param(
            type="string",
            pattern=EVENT_DATE_PATTERN,
            format="date",
            title="Event date",
            description="UTC date of session starts to deduplicate (YYYY-MM-DD)",
        ),
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

    # Only the dedup task is skipped (ignore_downstream_trigger_rules=False): the tasks after it
    # follow their own trigger rules, so the owed neighbour runs are still started.
    @task.short_circuit(ignore_downstream_trigger_rules=False)
    def needs_spark(prepared: dict) -> bool:
        """Pure Python over the markers and the table (tidemark.dedup.up_to_date, the same no-op
        decision the Spark task makes first): False, and the dedup task skipped, when the current
        version already includes every receipt partition the date's complete plan holds. The
        date's pending obligations are then discharged here, as the dedup would have."""
        from tidemark import dedup
        from tidemark.lake import Lake

        nothing_new = dedup.up_to_date(Lake.open(prepared["lake"]), prepared["event_date"])
        if nothing_new is None:
            print(f"{prepared['event_date']}: receipts not in the current version; running the dedup")
            return True
        reason = (
            f"version {nothing_new.version} already includes every planned receipt partition"
            if nothing_new.version
            else "no receipt partition holds events of this date"
        )
        print(f"{prepared['event_date']}: nothing new ({reason}); skipping the Spark dedup")
        return False

    # XComArgs (resolved when the task runs, and they make prepare upstream of dedup).
    dedup = dedup_task(prepared["lake"], prepared["event_date"])

    @task(outlets=[SESSIONS_DEDUP, PER_DATE])
    def emit_assets(prepared: dict, *, outlet_events=None) -> None:
        """Record the version the dedup published as asset events (named apart from the version
        publish, tidemark/publish.py, and the notices' Pub/Sub send). Skipped with the dedup: a date
        with nothing new has no new version, so consumers get no repeated event."""
        from tidemark import layout
        from tidemark.lake import Lake

        event_date, lake = prepared["event_date"], Lake.open(prepared["lake"])
        pointer = read_current(lake, event_date)
        if not pointer or not pointer.get("version"):
            raise RuntimeError(f"dedup succeeded but {lake.current_pointer(event_date)} names no version")
        version = layout.check_receipt_ts(pointer["version"])
        extra = {"event_date": event_date, "version": version}
        outlet_events[SESSIONS_DEDUP].extra = extra
        outlet_events[PER_DATE].add(date_asset(event_date), extra=extra)

    # none_failed: after emit_assets, and also after a skipped dedup (a run of this date that was
    # killed after recording obligations left them to whichever run of the date comes next).
    @task(trigger_rule="none_failed")
    def owed_reruns(prepared: dict) -> list[dict]:
        """The neighbouring dates owed a rerun by runs of this date (tidemark/obligations.py)."""
        from tidemark import obligations
        from tidemark.lake import Lake

        return obligations.reruns_owed_by(Lake.open(prepared["lake"]), prepared["event_date"])

    neighbours = owed_reruns(prepared)
    needs_spark(prepared) >> dedup >> emit_assets(prepared) >> neighbours

    # One sender at a time (an owed notice goes out once); none_failed: also after a skipped dedup,
    # to send what an earlier outage left owed.
    @task(max_active_tis_per_dag=1, trigger_rule="none_failed")
    def notify_corrected(prepared: dict) -> dict:
        """The corrected-partition notice (tidemark/notices/corrected.py): recorded, then sent."""
        from tidemark.lake import Lake
        from tidemark.notices import corrected

        return corrected.notify(Lake.open(prepared["lake"]), prepared["event_date"])

    dedup >> notify_corrected(prepared)

    TriggerDagRunOperator.partial(
        task_id="trigger_affected",
        trigger_dag_id=DAG_ID,
        logical_date=None,
        skip_when_already_exists=True,
        wait_for_completion=False,
        openlineage_inject_parent_info=False,
    ).expand_kwargs(neighbours)


tidemark_dedup()
