"""Example consumer DAG that applies changes: per-user totals across all dates (sessions, minutes),
maintained only from each corrected version's changeset, never by rereading a date.

Copy it as a starting point for a table kept up to date from tidemark's change feed. Every version
tidemark commits is one asset event of tidemark.sessions_dedup whose partition_key is the event
date, and its changeset (the sessions it retracted and inserted) is in the Iceberg table
tidemark.sessions_changes before the event is posted (docs/consumers.md). This DAG is scheduled on
that asset with PartitionedAssetTimetable and the identity mapping: one run per corrected date.

    apply (the run's partition_key, or the `event_date` Param of a manual run:
           tidemark.products.user_totals.apply)

apply reads the date's changeset rows of every version after the date's cursor (the last version
it applied to that date) with pyiceberg (no JVM), applies them in version order and writes the
totals and the cursor together in one atomic replace of <out>/state.json. Exactly once: an event
delivered twice, a cleared task or a retried run finds nothing after the cursor; events in any order
apply every version up to the newest. Its totals equal a recomputation from every date's current
sessions (tests/test_user_totals.py).

Where things come from: the lake from the Airflow Variable `tidemark_lake` or TIDEMARK_LAKE; the
output root from the Variable `user_totals_root` or TIDEMARK_USER_TOTALS_ROOT (default
<lake>/_products/user_totals).
"""

from __future__ import annotations

import os
from datetime import timedelta

from airflow.sdk import Asset, IdentityMapper, Param, PartitionedAssetTimetable, dag, task

DAG_ID = "example_changes_consumer"


@dag(
    dag_id=DAG_ID,
    description="Example consumer: per-user totals kept from every corrected version's changeset",
    # One run per corrected date: the asset event's partition_key (the event date) is the run's.
    schedule=PartitionedAssetTimetable(
        assets=Asset.ref(name="tidemark.sessions_dedup"), default_partition_mapper=IdentityMapper()
    ),
    catchup=False,
    # One run at a time: the state is one document every run replaces.
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=1),
    default_args={"retries": 2, "retry_delay": timedelta(seconds=20)},
    params={
        "event_date": Param(
            None,
            type=["null", "string"],
            pattern=r"^\d{4}-\d{2}-\d{2}$",
            title="Event date",
            description="Manual runs without a partition key: apply this date's changesets",
        )
    },
    tags=["tidemark", "example"],
    doc_md=__doc__,
)
def example_changes_consumer():
    @task
    def apply(params: dict | None = None, dag_run=None) -> dict:
        """The run's date (its partition_key, else the Param), checked, then its changesets applied."""
        from airflow.sdk import Variable

        from tidemark.base import layout
        from tidemark.products import user_totals
        from tidemark.store.lake import Lake

        uri = Variable.get("tidemark_lake", default=None) or os.environ.get("TIDEMARK_LAKE")
        if not uri:
            raise ValueError("set the Airflow Variable tidemark_lake or TIDEMARK_LAKE to the lake URI")
        lake = Lake.open(uri)
        out = (
            Variable.get("user_totals_root", default=None)
            or os.environ.get("TIDEMARK_USER_TOTALS_ROOT")
            or user_totals.default_root(lake)
        )
        key = getattr(dag_run, "partition_key", None)
        wanted = (params or {}).get("event_date")
        days = {layout.as_event_date(value) for value in (key, wanted) if value}
        if len(days) > 1:
            raise ValueError(f"partition key {key!r} and event_date {wanted!r} disagree: give one date")
        if not days:
            raise ValueError('no event date: trigger with the date as partition key (or {"event_date": "YYYY-MM-DD"})')
        (day,) = days
        return user_totals.apply(lake, layout.event_date_text(day), out)

    apply()


example_changes_consumer()
