"""Example consumer DAG that depends on several dates: weekly session metrics.

Scheduled on tidemark.sessions_dedup with PartitionedAssetTimetable and a temporal mapper:
StartOfWeekMapper maps each event's partition_key (an event date, YYYY-MM-DD) to the Monday of its
ISO week, so a correction of any date of a week makes one run for that week (partition_key = the
Monday), and corrections of several dates of one week that arrive before the run starts make one
run. The run reads the current version of every date of the week that has one and replaces
<out>/week=MONDAY/metrics.parquet (tidemark.products.session_metrics.rebuild_week): a function of those
versions only, so a rerun or a cleared week writes the same metrics.

It does not wait for all seven dates (a RollupMapper with WeekWindow would, once, and then never
fire again for a single late correction): corrections arrive for any date at any time.

Where things come from: as dags/example_session_metrics.py; the output root from the Variable
`weekly_session_metrics_root` or TIDEMARK_WEEKLY_SESSION_METRICS_ROOT (default
<lake>/_products/weekly_session_metrics).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, PartitionedAssetTimetable, StartOfWeekMapper, dag, task

if TYPE_CHECKING:
    from airflow.sdk.types import DagRunProtocol

DAG_ID = "example_weekly_session_metrics"


@dag(
    dag_id=DAG_ID,
    description="Example consumer: weekly session metrics, rebuilt when any date of the week is corrected",
    schedule=PartitionedAssetTimetable(
        assets=Asset.ref(name="tidemark.sessions_dedup"),
        # Event dates in, the week's Monday out (both YYYY-MM-DD: the default output adds " (Wnn)").
        default_partition_mapper=StartOfWeekMapper(input_format="%Y-%m-%d", output_format="%Y-%m-%d"),
    ),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=1),
    default_args={"retries": 2, "retry_delay": timedelta(seconds=20)},
    tags=["tidemark", "example"],
    doc_md=__doc__,
)
def example_weekly_session_metrics() -> None:
    """Weekly session metrics of the run's week (see the module)."""

    @task
    def rebuild_week(dag_run: DagRunProtocol | None = None) -> dict[str, Any]:
        """The week of the run's partition key (its Monday), rebuilt from its dates' current versions."""
        # Imported when the task runs: pyarrow stays out of the dag-processor.
        from tidemark.products import consumer_run, session_metrics

        run = consumer_run.resolve(
            consumer_run.Output(
                "weekly_session_metrics_root",
                "TIDEMARK_WEEKLY_SESSION_METRICS_ROOT",
                session_metrics.default_weekly_root,
            ),
            dag_run.partition_key if dag_run else None,
        )
        return session_metrics.rebuild_week(run.lake, run.day, run.out)

    rebuild_week()


example_weekly_session_metrics()
