"""The dedup of one event date as a Spark Connect client: the DAG task's work on a spark_connect connection.

Only the client runs in the task's process (no JVM); the Spark work runs on the server. The
session's round trips (channel, session, settings) run beside the imports and the plan, which need
no Spark, and the dedup waits for the session only when it has something to compute. A run has a
session of its own unless it asks for the window's shared one (tidemark.base.spark.shared_session_id:
a repeated plan's generated code found compiled; not the DAG's choice, because a client that
fails to attach to a shared id the server has closed delays its process's exit for minutes).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import date, datetime, timezone
from typing import TYPE_CHECKING

from tidemark.base.spark import close_connect_session, connect_session, shared_session_id

if TYPE_CHECKING:
    from tidemark.deduplication.dedup import DedupResult
    from tidemark.store.lake import Lake

# The purpose named in the shared session's id: the dedup tasks' own.
SHARED_SESSION_PURPOSE = "tidemark-dedup"


def run_on_connect(lake: Lake | str, event_date: date, url: str, shared: bool = False) -> DedupResult:
    """Deduplicate `event_date` of `lake` on the Spark Connect server at `url`.

    In a session of its own that ends with the run, or with `shared` in the session the dedups of
    this window share.
    """
    session_id = shared_session_id(SHARED_SESSION_PURPOSE, datetime.now(timezone.utc)) if shared else None
    with ThreadPoolExecutor(1, thread_name_prefix="connect") as pool:
        connecting = pool.submit(connect_session, url, f"tidemark-dedup-{event_date}", session_id)
        try:
            from tidemark.deduplication.dedup import run_dedup  # pyspark's client: beside the session
            from tidemark.store.lake import Lake

            return run_dedup(Lake.open(lake), event_date, connect=connecting.result)
        finally:
            if connecting.exception() is None:  # a failed connection failed the dedup if it needed one
                close_connect_session(connecting.result(), session_id)
