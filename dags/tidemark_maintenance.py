"""tidemark_maintenance: the lake's upkeep, once a day: `tidemark gc` on a schedule.

    gc (tidemark.ops.gc: expire the table's snapshots that stopped being current longer than the
        retention ago, remove the files nothing references any more (the bucket files corrections
        replaced included), prune the receipt index's arrival entries older than the retention and
        than reconciliation's last pass)
      -> pack (tidemark.panes.pack_maintenance: a pack of every closed date with 500 or more receipt
        partitions no pack holds, at most 50,000 partitions read per run, newest dates first, so
        that a correction's full dedup of such a date reads a few files, not thousands)

A date's files need no compaction here: a version writes one file per bucket of users and a
correction replaces a bucket's file by one file, the dedup itself laying a date out anew when it
outgrows its bucket count (docs/dedup.md "Files in buckets of users").

`tidemark gc` from the shell runs both (`--no-pack`: the first only). Without it a lake that runs for years keeps every snapshot (the table's metadata, rewritten at every
commit, grows with them), every superseded version's files and one arrival entry per receipt
partition ever written. gc's safety floors hold here as from the shell: a retention below 1h is
refused, the current version of every date is never touched, a folder still being written is young.

Configuration: the schedule from the environment variable TIDEMARK_MAINTENANCE_INTERVAL (a duration,
default 1d; `off` for triggered runs only), read when the file is parsed; at run time the Airflow
Variables (else environment variables) tidemark_lake / TIDEMARK_LAKE and tidemark_gc_retention /
TIDEMARK_GC_RETENTION (default 7d). On by default: the local stack and Composer load every DAG of
this folder unpaused.

Top level stays cheap: no pyarrow, no storage access, no Variable reads.
"""

from __future__ import annotations

import os
from collections import Counter
from datetime import datetime, timedelta, timezone
from typing import Any, cast

from airflow.sdk import dag, task

from tidemark.base.durations import parse_duration, parse_interval  # standard library only: cheap at parse time
from tidemark.base.layout import event_date_text  # standard library only: cheap at parse time
from tidemark.orchestration import settings  # standard library only: cheap at parse time

DAG_ID = "tidemark_maintenance"


SCHEDULE = parse_interval(
    os.environ.get("TIDEMARK_MAINTENANCE_INTERVAL", "1d"), "TIDEMARK_MAINTENANCE_INTERVAL", timedelta(hours=1)
)


@dag(
    dag_id=DAG_ID,
    description="Expire old snapshots, remove unreferenced files, prune the receipt index, pack closed dates (tidemark gc)",
    schedule=SCHEDULE,
    start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=2),
    default_args={"retries": 1, "retry_delay": timedelta(minutes=5)},
    tags=["tidemark"],
    doc_md=__doc__,
)
def tidemark_maintenance() -> None:
    """The daily upkeep: gc, then pack (see the module)."""

    @task
    def gc() -> dict[str, int]:
        """tidemark.ops.gc with the configured retention; returns how many of each kind it removed."""
        # Imported when the task runs: the lake's storage stays out of the dag-processor.
        from tidemark.ops import gc as lake_gc
        from tidemark.store.lake import Lake

        lake = settings.lake_uri()
        retention = lake_gc.check_retention(
            parse_duration(settings.setting("tidemark_gc_retention", "TIDEMARK_GC_RETENTION", "7d"))
        )
        removed = lake_gc.gc(Lake.open(lake), retention)
        counts = dict(Counter(item.what for item in removed))
        print(f"gc of {lake} with a retention of {retention}: removed {counts or 'nothing'}")
        return counts

    @task
    def pack(removed: dict[str, int]) -> dict[str, Any]:
        """tidemark.panes.pack_maintenance's pass, after gc; returns the dates packed and those left.

        `removed` orders it after gc: a pack written now is never judged by this run's gc. The
        dates left go to the next run.
        """
        # Imported when the task runs: the lake's storage stays out of the dag-processor.
        from tidemark.panes import pack_maintenance
        from tidemark.store.lake import Lake

        lake = settings.lake_uri()
        done = pack_maintenance.run_pass(Lake.open(lake))
        # XCom is JSON: the dates leave as YYYY-MM-DD
        packed = {event_date_text(p.event_date): p.receipts for p in done.packed}
        print(f"packing of {lake} ({done.how}, {done.examined} dates examined): packed {packed or 'nothing'}")
        return {"packed": packed, "left": [event_date_text(d) for d in done.left]}

    # Airflow's stubs type a task call by the function's signature; the XComArg resolves to gc's
    # counts when pack runs.
    pack(cast("dict[str, int]", gc()))


tidemark_maintenance()
