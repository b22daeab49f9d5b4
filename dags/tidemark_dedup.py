"""tidemark_dedup: deduplicate one event date of the sessions lake.

Its new version becomes one asset event of tidemark.sessions_dedup with the date as partition_key.
Partitioned (schedule=PartitionedAtRuntime(): never scheduled, every run is one event date's
partition): triggered by the Cloud Function, one run per availability notice, with conf
{"event_date": "YYYY-MM-DD", ...} and the date as the run's partition_key; by the reconcile DAG and
by this DAG's neighbour reruns the same way (through the REST API: see trigger_affected); by hand
from the UI (Trigger, partition key = the date, the same date in the Param) or `airflow dags
trigger`. The UI filters, clears and reruns a date by its partition key (docs/airflow.md).

    dedup (first, in pure Python: does the current version already include every receipt
           partition of the date's plan? then the task is skipped; else the back end
           tidemark.orchestration.dedup_backends chooses: DedupOperator on spark_default, a Spark
           Connect client or spark-submit streaming_job/submit.py dedup ...; a Dataproc job when
           TIDEMARK_DATAPROC_CLUSTER is set)
    ──> publish (after the dedup or a skipped one: the corrected outbox's entries owed to Airflow,
                 as asset events, tidemark/notices/asset_events.py; then the neighbour reruns owed)
        ──> trigger_affected (one REST trigger per neighbouring date, mapped)
    ──> notify_corrected (after the dedup or a skipped one: the same entries owed to the
                          corrected topic, docs/notices.md)

Every task reads the date and the lake itself (run_target: the Param parsed again as a calendar
date, a bad one refused with a message saying why; the lake from the Variable or the
environment), so a run is two levels of task processes (the dedup, then publish and
notify_corrected side by side). The skip check is the dedup task's first step, not a task of its
own: each Airflow hop between dependent tasks is a task process and scheduler latency (about
0.8 s of every late correction on the local stack, BENCHMARKS.md section 2).

Asset events: exactly one per committed version, whoever committed it. The commit records the
version's entry in the lake's corrected outbox (tidemark.deduplication.dedup, also for `tidemark dedup` by hand or
`tidemark rules migrate`); publish drains what the outbox owes Airflow through
POST /api/v2/assets/events (so a hand-run's version reaches consumers at the next drain, or at once
when the command finds an Airflow). No task has the asset as an outlet: an outlet would add a second
event for every successful run, and none for versions committed outside the DAG. The entry, not the
task, is the record: with the REST API not configured (`airflow dags test`) or unreachable, the
task succeeds and leaves the entry owed, with a warning naming the date and version; the next drain
posts it once. Likewise trigger_affected, once its retries are spent: the neighbour's obligation
stays pending in the lake and tidemark_reconcile starts its run.

A run with nothing new (the usual case when several notices of one date queue up: the first run
to start picks up every complete receipt of its date) shows dedup as skipped, with the reason in
its log, and takes seconds: no Spark, no new version, no asset event. It still
discharges the date's obligations (as the dedup would have), starts the neighbour runs owed and
drains what an earlier outage left owed.

Idempotency: the dedup step writes a new immutable version and makes it current in one Iceberg
commit (the date's data files and its version file, which names the current version, together:
tidemark/iceberg/), so rerunning a run, clearing a task, or two runs of one date at once leave the
newest complete result.
Nothing here adds side effects of its own: an asset event goes out once per version (the outbox),
and the run a neighbouring date gets has a run id derived from (that date, this date, the version
that owed it), so a rerun finds it already there (HTTP 409: the task is skipped) instead of adding one.

Which neighbours: every rerun obligation a run of this date recorded in the lake and no run of the
neighbour has acted on yet (tidemark/orchestration/obligations.py), not the affected_dates of whatever version
the table's live files of the date name by then: a second run of this date may have
superseded that version, or a killed run left its obligations to this retry. A neighbour run
that fails for good leaves its obligation pending, and the tidemark_reconcile DAG starts another.

Where things come from: the lake from the Airflow Variable `tidemark_lake`, else the environment
TIDEMARK_LAKE; Spark from the connection `spark_default` (local[*] on a laptop via
AIRFLOW_CONN_SPARK_DEFAULT; a cluster, YARN or Dataproc in production); the application from
TIDEMARK_SUBMIT_APP (default: this repository's streaming_job/submit.py); this Airflow's REST API
from the connection `tidemark_airflow_api` (tidemark/orchestration/airflow_api.py; `tidemark up` sets it).

Top level stays cheap (the dag-processor re-parses this file): no pyspark, no storage access, no
Variable reads; the tasks import what they need.
"""

from __future__ import annotations

import os
from datetime import date, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Asset, BaseOperator, Param, PartitionedAtRuntime, dag, task
from typing_extensions import assert_never

from tidemark.base import layout, names  # standard library only: cheap at parse time
from tidemark.orchestration import dedup_backends, settings  # standard library only: cheap at parse time
from tidemark.orchestration.date_priority import OlderDatesFirst  # Airflow's and the standard library

if TYPE_CHECKING:
    from airflow.sdk import Context

    from tidemark.store.lake import Lake

DAG_ID = names.get("DAG_ID")
# The corrected table, one asset: each event is one committed version, its partition_key the event
# date, its extra {notice_id, event_date, version, previous_version, change, rows, committed_at}
# (tidemark/notices/asset_events.py holds the same name and URI). Consumers schedule on
# Asset.ref(name="tidemark.sessions_dedup") with PartitionedAssetTimetable.
SESSIONS_DEDUP = Asset(
    name="tidemark.sessions_dedup",
    uri=names.get("ASSET_URI_PREFIX"),
    extra={"layout": "event_date=YYYY-MM-DD/version=<receipt_ts>"},
)
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
APPLICATION = os.environ.get("TIDEMARK_SUBMIT_APP", os.path.join(REPO, "streaming_job", "submit.py"))
EVENT_DATE_PATTERN = r"^\d{4}-\d{2}-\d{2}$"
# Seconds a dedup waits before asking again whether its date's turn has come (about one small dedup),
# and at most in all (a large date's dedup takes minutes) before it goes on anyway.
TURN_POLL_S = 3
TURN_WAIT_S = 30 * 60


def skip_if_up_to_date(lake: Lake, event_date: date) -> None:
    """Skip the dedup task (AirflowSkipException, the reason in its log) when the date has nothing new.

    Decided in pure Python over the markers and the table (tidemark.deduplication.dedup.up_to_date,
    the same no-op decision the Spark dedup makes first): nothing new when the current version
    already includes every receipt partition the date's complete plan holds; the date's pending
    obligations are then discharged, as the dedup would have.
    """
    # Imported when the task runs: pyarrow and pyiceberg stay out of the dag-processor.
    from airflow.sdk.exceptions import AirflowSkipException

    from tidemark.deduplication import dedup

    day = layout.event_date_text(event_date)
    nothing_new = dedup.up_to_date(lake, event_date)
    if nothing_new is None:
        print(f"{day}: receipts not in the current version; running the dedup")
        return
    reason = (
        f"version {nothing_new.version} already includes every planned receipt partition"
        if nothing_new.version
        else "no receipt partition holds events of this date"
    )
    raise AirflowSkipException(f"{day}: nothing new ({reason}); skipping the Spark dedup")


class TaskLog(Protocol):
    """What the dedup's first steps log with: a task's `self.log` (or any logging.Logger)."""

    def info(self, event: Any, *args: Any) -> Any:
        """Log at INFO."""

    def warning(self, event: Any, *args: Any) -> Any:
        """Log at WARNING."""


def wait_for_the_dates_turn(run_id: str, day: date, log: TaskLog) -> None:
    """Wait, in this task, while a run of the same date queued before run `run_id` deduplicates it.

    tidemark/orchestration/date_turns.py: with several dedup tasks at once, two dates run side by
    side, two runs of one date do not. Nothing to ask with one dedup at a time. Without this
    Airflow's REST API (not configured, or unreachable), or after TURN_WAIT_S, the dedup goes on:
    the commit keeps the result correct, only the work may be done twice.

    Why not AirflowRescheduleException, which would free the slot meanwhile: in Airflow 3.3 a
    rescheduled task keeps its try number, and when the executor's success for the exited try
    reaches the scheduler after the next try is queued, the scheduler fails the task ("state
    changed externally", apache/airflow#71172): `airflow dags clear` of a date's runs failed runs
    that way. The slot held is one the date's own dedup would otherwise compute twice in.
    """
    if dedup_backends.dedup_concurrency(os.environ) == 1:
        return
    from tidemark.base.polling import wait_for
    from tidemark.orchestration import airflow_api, date_turns

    waited_for: set[str] = set()

    def its_turn() -> bool:
        ahead = date_turns.ahead_of(airflow_api.for_tasks(), DAG_ID, run_id, day)
        if ahead is not None and ahead not in waited_for:
            waited_for.add(ahead)
            log.info("%s: run %s is deduplicating this date; waiting for it to finish", day, ahead)
        return ahead is None

    try:
        wait_for(its_turn, TURN_WAIT_S, f"the turn of run {run_id} of {day}", interval=TURN_POLL_S)
    except (airflow_api.AirflowError, airflow_api.ConfigError) as exc:
        log.warning("%s: cannot ask Airflow which runs of the date are deduplicating (%s)", day, exc)
    except TimeoutError:
        log.warning("%s: still waiting for %s after %s s; deduplicating anyway", day, waited_for, TURN_WAIT_S)


def ready_to_dedup(context: Context, log: TaskLog) -> tuple[Lake, date]:
    """The run's checked lake and date (run_target), once it is its date's turn and it has something new.

    What every back end's dedup task does first: wait_for_the_dates_turn, then skip_if_up_to_date.
    """
    lake, event_date = run_target(context["params"])
    wait_for_the_dates_turn(context["run_id"], event_date, log)
    skip_if_up_to_date(lake, event_date)
    return lake, event_date


class DedupOperator(SparkSubmitOperator):
    """The Spark step, on the `spark_default` connection, decided when the task runs.

    Its date's turn first, then skipped when the date has nothing new (ready_to_dedup); else:

    - connection type `spark_connect` (host, port; SparkConnectHook's URL rules): the task process
      runs tidemark.deduplication.dedup itself as a Spark Connect client of that server (a warm JVM:
      `tidemark up` starts one), in a session of its own;
    - any other type (spark: local[*], a standalone master, YARN ...): spark-submit of
      streaming_job/submit.py, SparkSubmitOperator's own execute (and its on_kill).
    """

    def execute(self, context: Context) -> None:
        """Skipped, spark-submit, or the dedup in this process as a Spark Connect client (see the class)."""
        # Imported when the task runs: the dag-processor parses this file without them, and the
        # spark-submit path needs none of the Spark Connect client's.
        from airflow.sdk import BaseHook

        from tidemark.base import class_archive

        lake, event_date = ready_to_dedup(context, self.log)
        day = layout.event_date_text(event_date)
        self.name = f"tidemark-dedup-{day}"
        connection = BaseHook.get_connection(self._conn_id)
        if connection.conn_type != "spark_connect":
            # the checked values (run_target parsed them), not the raw conf, on the command line
            self.application_args = dedup_backends.dedup_args(lake.uri, event_date)
            if connection.extra_dejson.get("deploy-mode") != "cluster":
                # the driver runs on this machine: it maps Spark's classes from this machine's
                # class archive, when its Java and Spark have one (tidemark.base.class_archive)
                self.conf = class_archive.with_archive(dict(self.conf or {}))
            super().execute(context)
            return
        from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

        from tidemark.deduplication.on_connect import run_on_connect

        url = SparkConnectHook(self._conn_id).get_connection_url()
        self.log.info("dedup of %s as a Spark Connect client of %s", day, url.split(";")[0])
        result = run_on_connect(lake, event_date, url)  # a Connect session of its own (on_connect says why)
        self.log.info("dedup result: %s", result.to_json())


# --- the operator of each back end (tidemark.orchestration.dedup_backends decides which) ----------


def _dataproc_task() -> BaseOperator:
    """A Dataproc PySpark job on TIDEMARK_DATAPROC_CLUSTER, whose init action installs tidemark.

    Its date's turn first, then skipped when the date has nothing new (ready_to_dedup), as
    DedupOperator is; the job it then submits is dedup_backends.dataproc_job's for the run's checked
    date and lake (tests/test_dedup_backends.py checks it). The Google provider is preinstalled on
    Composer and absent here, so this operator is not exercised by this repository's tests.
    """
    # Imported when the back end is chosen: the provider exists on Composer only.
    from airflow.providers.google.cloud.operators.dataproc import DataprocSubmitJobOperator

    target = dedup_backends.dataproc_target(os.environ)
    if target is None:
        raise ValueError(f"the dataproc dedup back end needs {dedup_backends.CLUSTER_ENV}")

    # The provider is untyped here (absent): its class is Any to mypy.
    class DataprocDedupOperator(DataprocSubmitJobOperator):  # type: ignore[misc]
        def execute(self, context: Context) -> Any:
            lake, event_date = ready_to_dedup(context, self.log)
            assert target is not None  # checked when the DAG was built
            self.job = dedup_backends.dataproc_job(target, APPLICATION, lake.uri, event_date)
            return super().execute(context)

    operator: BaseOperator = DataprocDedupOperator(
        task_id="dedup",
        project_id=target.project,
        region=target.region,
        max_active_tis_per_dag=dedup_backends.dedup_concurrency(os.environ),
        weight_rule=OlderDatesFirst(),
        # the run's date and lake are set when the task runs (execute), from its checked params
        job=dedup_backends.dataproc_job(target, APPLICATION),
    )
    return operator


def _spark_task() -> BaseOperator:
    """DedupOperator on the `spark_default` connection.

    spark-submit, or a Spark Connect client when the connection's type is spark_connect (decided
    when the task runs: connections are read then, not at parse time).
    """
    return DedupOperator(
        task_id="dedup",
        max_active_tis_per_dag=dedup_backends.dedup_concurrency(os.environ),
        # the closed date's correction before the open date's (date_priority says why)
        weight_rule=OlderDatesFirst(),
        conn_id="spark_default",
        application=APPLICATION,
        conf={"spark.ui.enabled": "false"},
        verbose=False,
    )


def dedup_task() -> BaseOperator:
    """The Spark step of a run, built for the back end dedup_backends.choose names."""
    backend = dedup_backends.choose(os.environ)
    if backend == "dataproc":
        return _dataproc_task()
    if backend == "spark":
        return _spark_task()
    assert_never(backend)  # a name in BackendName without an operator here fails mypy


def run_target(params: dict[str, Any] | None) -> tuple[Lake, date]:
    """The run's lake and date: every task's first step, from the run's params.

    The date is parsed again as a calendar date (the Param's pattern lets 2026-02-30 through),
    before the lake is touched: a bad one fails the task with a message saying what is wrong
    (layout.InvalidPartitionValue). The lake is the Variable tidemark_lake, else TIDEMARK_LAKE.
    """
    # Imported when a task runs: the lake's storage modules stay out of the dag-processor.
    from tidemark.store.lake import Lake

    event_date = layout.as_event_date((params or {}).get("event_date"))
    return Lake.open(settings.lake_uri()), event_date


@dag(
    dag_id=DAG_ID,
    description="Deduplicate one event date of the sessions lake (Spark) and publish it atomically",
    # Never scheduled (triggered per notice), but partitioned: Airflow then accepts the event date
    # as each run's partition_key, so the UI and `airflow partitions` can filter, clear and
    # backfill one date.
    schedule=PartitionedAtRuntime(),
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
def tidemark_dedup() -> None:
    """The run of one event date (see the module)."""
    dedup = dedup_task()

    # none_failed: after the dedup, and also after a skipped one (what an earlier outage, a killed
    # run or a version committed outside the DAG left owed). One sender at a time: an owed asset
    # event goes out once. Declared as an inlet, not an outlet: the asset must exist in Airflow for
    # the REST events, and an outlet would emit an event of its own.
    @task(inlets=[SESSIONS_DEDUP], max_active_tis_per_dag=1, trigger_rule="none_failed")
    def publish(params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """The asset events owed, posted once; then the neighbouring dates owed a rerun.

        Asset events (tidemark/notices/asset_events.py): this date's current version's outbox
        entry recorded if missing, then every entry owed to Airflow posted. The outbox entry is the
        source of truth: with this Airflow's REST API not configured (no tidemark_airflow_api
        connection, as under `airflow dags test`) or unreachable for 30 s
        (TIDEMARK_ASSET_EVENTS_TIMEOUT), the task goes on, the entries stay owed, a warning names
        their dates and versions, and the next drain posts them (any later run, reconcile's
        drain_outbox, `tidemark notices --topic corrected --emit-asset-events`). A refusal (a 4xx:
        our bug) fails the task.

        Then the reruns owed by runs of this date (tidemark/orchestration/obligations.py), one
        trigger_affected each: after a skipped dedup too (a run of this date that was killed after
        recording obligations left them to whichever run of the date comes next).
        """
        # Imported when the task runs: the notices' storage and senders stay out of the dag-processor.
        from tidemark.notices import corrected_delivery
        from tidemark.orchestration import airflow_api, obligations

        lake, event_date = run_target(params)
        emitted = corrected_delivery.emit(
            lake, event_date, airflow_api.for_tasks, timeout=corrected_delivery.emit_timeout(os.environ)
        )
        print(f"{layout.event_date_text(event_date)}: asset events {emitted}")
        return obligations.reruns_owed_by(lake, event_date)

    # One sender at a time (an owed notice goes out once); none_failed: also after a skipped dedup,
    # to send what an earlier outage left owed.
    @task(max_active_tis_per_dag=1, trigger_rule="none_failed")
    def notify_corrected(params: dict[str, Any] | None = None) -> dict[str, Any]:
        """The corrected-partition notice (tidemark/notices/corrected_delivery.py): recorded, then sent."""
        # Imported when the task runs: the notices' storage and senders stay out of the dag-processor.
        from tidemark.notices import corrected_delivery

        lake, event_date = run_target(params)
        return corrected_delivery.notify(lake, event_date)

    neighbours = publish()
    dedup >> [neighbours, notify_corrected()]

    @task
    def trigger_affected(trigger_run_id: str, conf: dict[str, Any]) -> str:
        """One neighbour's run, with its date as partition_key, through the REST API.

        The standard provider's TriggerDagRunOperator (1.21.0) and the SDK's trigger message cannot
        set a partition_key in 3.3.2 (tests/test_airflow_partitions.py shows it). The run id is
        deterministic: an existing run (HTTP 409, a retried or rerun task) skips this task.
        """
        # Imported when the task runs: the REST client and the run context exist in a task only.
        from airflow.sdk import get_current_context
        from airflow.sdk.exceptions import AirflowSkipException

        from tidemark.base.logs import get_logger
        from tidemark.orchestration import airflow_api

        # the conf came through XCom (JSON): parsed, then its text is the partition key
        event_date = layout.event_date_text(layout.as_event_date(conf.get("event_date")))
        try:
            result = airflow_api.for_tasks().trigger_dag_run(DAG_ID, trigger_run_id, conf, partition_key=event_date)
        except (airflow_api.NotConfigured, airflow_api.TransientAirflowError) as exc:
            # The obligation is in the lake and stays pending until a run of the neighbour acts on
            # it: Airflow's retries first (a blip), then the next run of this date (publish) or
            # tidemark_reconcile starts it. Not configured (`airflow dags test`): no retry helps.
            ti = get_current_context()["ti"]
            if isinstance(exc, airflow_api.TransientAirflowError) and ti.try_number <= ti.max_tries:
                raise
            get_logger("dag").warning(
                "neighbour run not started: Airflow API unavailable; its obligation stays pending for "
                "tidemark_reconcile",
                event_date=event_date,
                run_id=trigger_run_id,
                source_date=conf.get("source_date"),
                source_version=conf.get("source_version"),
                try_number=ti.try_number,
                error=str(exc)[:300],
            )
            raise AirflowSkipException(
                f"run {trigger_run_id} of {event_date} not started ({exc}); "
                "its obligation stays pending (tidemark_reconcile)"
            ) from None
        if not result.created:
            raise AirflowSkipException(f"run {trigger_run_id} of {event_date} already exists")
        return trigger_run_id

    trigger_affected.expand_kwargs(neighbours)


tidemark_dedup()
