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

import os
from datetime import timedelta

from airflow.sdk import Asset, PartitionedAssetTimetable, StartOfWeekMapper, dag, task

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
def example_weekly_session_metrics():
    @task
    def rebuild_week(dag_run=None) -> dict:
        from airflow.sdk import Variable

        from tidemark.base import layout
        from tidemark.products import session_metrics
        from tidemark.store.lake import Lake

        uri = Variable.get("tidemark_lake", default=None) or os.environ.get("TIDEMARK_LAKE")
        if not uri:
            raise ValueError("set the Airflow Variable tidemark_lake or TIDEMARK_LAKE to the lake URI")
        lake = Lake.open(uri)
        out = (
            Variable.get("weekly_session_metrics_root", default=None)
            or os.environ.get("TIDEMARK_WEEKLY_SESSION_METRICS_ROOT")
            or session_metrics.default_weekly_root(lake)
        )
        week = layout.as_event_date(getattr(dag_run, "partition_key", None))  # the run's Monday, parsed once
        return session_metrics.rebuild_week(lake, layout.event_date_text(week), out)

    rebuild_week()


example_weekly_session_metrics()
