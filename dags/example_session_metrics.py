"""example_session_metrics: what a downstream team copies to rebuild its own product whenever
tidemark publishes a corrected version of an event date.

Scheduled on tidemark's per-date asset events, not on a cron: the dedup DAG's `emit_assets` task emits
one event per published version on the asset tidemark://sessions_dedup/event_date=D through the
alias tidemark://sessions_dedup/by_event_date, and this DAG is scheduled on that alias, so it runs
for exactly the dates that changed (one run may carry several events: several dates, or several
versions of one date, each date rebuilt once).

    dates (which dates: the triggering asset events, or the `event_date` Param of a manual run)
      ──> rebuild (mapped, one per date: tidemark.session_metrics.rebuild)

rebuild reads the date's current corrected version with pyarrow (tidemark.reader: no JVM, no
Spark), computes daily session metrics (sessions, users, median and p95 duration, sessions that
crossed midnight) and replaces the date's partition of the team's own output,
<out>/event_date=D/metrics.parquet, in one atomic write. The output is a function of the date's
current version only: rerunning a run, clearing a task, or triggering the DAG from the UI with
{"event_date": "D"} writes the same metrics again.

Where things come from: the lake from the Airflow Variable `tidemark_lake` or TIDEMARK_LAKE; the
output root from the Variable `session_metrics_root` or TIDEMARK_SESSION_METRICS_ROOT (default
<lake>/_products/daily_session_metrics; point it at your own bucket).
"""

from __future__ import annotations

import os
from datetime import timedelta

from airflow.sdk import AssetAlias, Param, dag, task

from tidemark import names

DAG_ID = "example_session_metrics"
# The alias the dedup DAG emits its per-date asset events through (dags/tidemark_dedup.py).
PER_DATE = AssetAlias(f"{names.get('ASSET_URI_PREFIX')}/by_event_date")


@dag(
    dag_id=DAG_ID,
    description="Example consumer: daily session metrics of every date tidemark corrects",
    schedule=[PER_DATE],
    catchup=False,
    max_active_runs=1,  # runs of one date never interleave their writes
    dagrun_timeout=timedelta(hours=1),
    default_args={"retries": 2, "retry_delay": timedelta(seconds=20)},
    params={
        "event_date": Param(
            None,
            type=["null", "string"],
            pattern=r"^\d{4}-\d{2}-\d{2}$",
            title="Event date",
            description="Rebuild this date (manual runs); asset-triggered runs leave it empty",
        )
    },
    tags=["tidemark", "example"],
    doc_md=__doc__,
)
def example_session_metrics():
    @task
    def dates(params: dict | None = None, triggering_asset_events=None) -> list[dict]:
        """The dates to rebuild, each once, with the lake and output root resolved."""
        from airflow.sdk import Variable

        from tidemark import layout, session_metrics
        from tidemark.lake import Lake

        lake = Variable.get("tidemark_lake", default=None) or os.environ.get("TIDEMARK_LAKE")
        if not lake:
            raise ValueError("set the Airflow Variable tidemark_lake or TIDEMARK_LAKE to the lake URI")
        out = (
            Variable.get("session_metrics_root", default=None)
            or os.environ.get("TIDEMARK_SESSION_METRICS_ROOT")
            or session_metrics.default_root(Lake.open(lake))
        )
        wanted = set()
        if (params or {}).get("event_date"):
            wanted.add(layout.check_event_date(params["event_date"]))
        else:
            for event in (triggering_asset_events or {}).get(PER_DATE, []):
                wanted.add(
                    layout.check_event_date(
                        (event.extra or {}).get("event_date") or event.asset.uri.rsplit("event_date=", 1)[-1]
                    )
                )
        if not wanted:
            raise ValueError('no event date: trigger with {"event_date": "YYYY-MM-DD"} or through the asset')
        return [{"lake": lake, "out": out, "event_date": d} for d in sorted(wanted)]

    @task
    def rebuild(item: dict) -> dict:
        from tidemark import session_metrics
        from tidemark.lake import Lake

        return session_metrics.rebuild(Lake.open(item["lake"]), item["event_date"], item["out"])

    rebuild.expand(item=dates())


example_session_metrics()
