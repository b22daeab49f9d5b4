"""Example consumer DAG that applies changes: per-user totals across all dates (sessions, minutes).

The totals are maintained only from each corrected version's changeset, never by rereading a date.

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

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, IdentityMapper, Param, PartitionedAssetTimetable, dag, task

if TYPE_CHECKING:
    from airflow.sdk.types import DagRunProtocol

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
def example_changes_consumer() -> None:
    """Per-user totals from the date's changesets (see the module)."""

    @task
    def apply(params: dict[str, Any] | None = None, dag_run: DagRunProtocol | None = None) -> dict[str, Any]:
        """The run's date (its partition_key, else the Param), checked, then its changesets applied."""
        # Imported when the task runs: pyiceberg and pyarrow stay out of the dag-processor.
        from tidemark.products import consumer_run, user_totals

        run = consumer_run.resolve(
            consumer_run.Output("user_totals_root", "TIDEMARK_USER_TOTALS_ROOT", user_totals.default_root),
            dag_run.partition_key if dag_run else None,
            (params or {}).get("event_date"),
        )
        return user_totals.apply(run.lake, run.day, run.out)

    apply()


example_changes_consumer()
