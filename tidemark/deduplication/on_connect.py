"""The dedup of one event date as a Spark Connect client: the DAG task's work on a spark_connect connection.

Only the client runs in the task's process (no JVM); the Spark work runs on the server, in a
session of the run's own that ends with it. The session's round trips (channel, session,
settings) run beside the imports and the plan, which need no Spark, and the dedup waits for the
session only when it has something to compute.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import date
from typing import TYPE_CHECKING

from tidemark.base.spark import close_connect_session, connect_session

if TYPE_CHECKING:
    from tidemark.deduplication.dedup import DedupResult
    from tidemark.store.lake import Lake


def run_on_connect(lake: Lake | str, event_date: date, url: str, full: bool = False) -> DedupResult:
    """Deduplicate `event_date` of `lake` on the Spark Connect server at `url`, in a session of its own.

    `full`: run_dedup's (every planned receipt re-sessionized).
    """
    with ThreadPoolExecutor(1, thread_name_prefix="connect") as pool:
        connecting = pool.submit(connect_session, url, f"tidemark-dedup-{event_date}")
        try:
            from tidemark.deduplication.dedup import run_dedup  # pyspark's client: beside the session
            from tidemark.store.lake import Lake

            return run_dedup(Lake.open(lake), event_date, full=full, connect=connecting.result)
        finally:
            if connecting.exception() is None:  # a failed connection failed the dedup if it needed one
                close_connect_session(connecting.result())
