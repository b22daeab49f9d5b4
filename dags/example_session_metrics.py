"""Example consumer DAG: daily session metrics of every event date tidemark corrects.

Copy it as a starting point. Every version tidemark commits (a DAG run, a `tidemark dedup` by hand,
a rules migration) is one asset event of tidemark.sessions_dedup whose partition_key is the event
date (tidemark/notices/asset_events.py). This DAG is scheduled on that asset with
PartitionedAssetTimetable and the identity mapping: one run per corrected date, its partition_key
that date. Events of several dates make several runs, each its own date; two versions of one date
that arrive before its run starts make one run (it reads the newest).

    rebuild (the run's partition_key, or the `event_date` Param of a manual run:
             tidemark.products.session_metrics.rebuild)

rebuild reads the date's current corrected version with pyarrow (tidemark.iceberg.reader: no JVM, no
Spark), computes daily session metrics (sessions, users, median and p95 duration, sessions that
crossed midnight) and replaces the date's partition of the team's own output,
<out>/event_date=D/metrics.parquet, in one atomic write. The output is a function of the date's
current version only: rerunning a run, clearing a date (`airflow dags clear example_session_metrics
--partition-key D`), or triggering the DAG from the UI with the date as partition key writes the
same metrics again (docs/airflow.md).

Where things come from: the lake from the Airflow Variable `tidemark_lake` or TIDEMARK_LAKE; the
output root from the Variable `session_metrics_root` or TIDEMARK_SESSION_METRICS_ROOT (default
<lake>/_products/daily_session_metrics; point it at your own bucket).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, IdentityMapper, Param, PartitionedAssetTimetable, dag, task

if TYPE_CHECKING:
    from airflow.sdk.types import DagRunProtocol

DAG_ID = "example_session_metrics"


@dag(
    dag_id=DAG_ID,
    description="Example consumer: daily session metrics of every date tidemark corrects",
    # One run per corrected date: the asset event's partition_key (the event date) is the run's.
    schedule=PartitionedAssetTimetable(
        assets=Asset.ref(name="tidemark.sessions_dedup"), default_partition_mapper=IdentityMapper()
    ),
    catchup=False,
    # One run at a time (a small box; each run replaces one file). Dates corrected while a run is
    # active still get a run each (apache/airflow#56050 lost such events for classic asset
    # schedules; tests/test_example_consumer_dag.py checks the partitioned one on 3.3.2).
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=1),
    default_args={"retries": 2, "retry_delay": timedelta(seconds=20)},
    params={
        "event_date": Param(
            None,
            type=["null", "string"],
            pattern=r"^\d{4}-\d{2}-\d{2}$",
            title="Event date",
            description="Manual runs without a partition key: rebuild this date",
        )
    },
    tags=["tidemark", "example"],
    doc_md=__doc__,
)
def example_session_metrics() -> None:
    """Daily session metrics of the run's date (see the module)."""

    @task
    def rebuild(params: dict[str, Any] | None = None, dag_run: DagRunProtocol | None = None) -> dict[str, Any]:
        """The run's date (its partition_key, else the Param), checked, then rebuilt."""
        # Imported when the task runs: pyarrow stays out of the dag-processor.
        from tidemark.products import consumer_run, session_metrics

        run = consumer_run.resolve(
            consumer_run.Output("session_metrics_root", "TIDEMARK_SESSION_METRICS_ROOT", session_metrics.default_root),
            dag_run.partition_key if dag_run else None,
            (params or {}).get("event_date"),
        )
        return session_metrics.rebuild(run.lake, run.day, run.out)

    rebuild()


example_session_metrics()
