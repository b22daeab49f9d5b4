"""Spark's own account of each micro-batch, in the stream's structured log.

A micro-batch's time is more than tidemark's foreachBatch (`addBatch`): Spark lists the landing and
plans the offsets (`latestOffset`, `getBatch`), plans the query (`queryPlanning`) and writes its
offset and commit logs (`walCommit`, `commitOffsets`). Each `query progress` line names those
durations per batch, so the fixed cost of a batch is taken apart from a measurement
(bench/stream_throughput.py sums them).

Spark hands each trigger's progress to a listener once, on its listener bus: polling the query's
`recentProgress` instead converted up to 100 progress reports over py4j twice a second (~150 py4j
calls per batch beside the batch, which competed with it for the driver).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)

from tidemark.base.logs import get_logger

log = get_logger("stream")

# Spark's names of the phases of a trigger (StreamingQueryProgress.durationMs), in their order.
PHASES = ("latestOffset", "getBatch", "queryPlanning", "addBatch", "walCommit", "commitOffsets", "triggerExecution")


def progress_line(batch_id: int, durations: dict[str, Any]) -> dict[str, Any] | None:
    """The `query progress` log fields of one trigger, or None for an idle trigger.

    An idle trigger runs no batch (no addBatch). Spark's numInputRows is no guide: the batch reads
    its pinned files itself (streaming_job.batch), not the source's rows.
    """
    if "addBatch" not in durations:
        return None
    return {"batch_id": batch_id, "durations_ms": {name: int(durations[name]) for name in PHASES if name in durations}}


class QueryProgressLog(StreamingQueryListener):
    """Logs each batch's progress of the query named `name`, as Spark reports it (a listener)."""

    def __init__(self, name: str) -> None:
        """The progress of the streaming query called `name` (its queryName)."""
        self.name = name
        self.newest = -1  # the newest trigger whose progress was handled
        self.handled = threading.Condition()

    def onQueryStarted(self, event: QueryStartedEvent) -> None:  # noqa: N802  # Spark's callback names
        """Nothing to log: the stream logs its own start."""

    def onQueryProgress(self, event: QueryProgressEvent) -> None:  # noqa: N802
        """Log the trigger's phases if it ran a batch of this query."""
        progress = event.progress
        if progress.name != self.name:
            return
        batch_id = int(progress.batchId)
        line = progress_line(batch_id, dict(progress.durationMs or {}))
        if line is not None:
            log.info("query progress", **line)
        with self.handled:
            self.newest = max(self.newest, batch_id)
            self.handled.notify_all()

    def onQueryIdle(self, event: QueryIdleEvent) -> None:  # noqa: N802
        """An idle trigger: no batch, nothing to log."""

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:  # noqa: N802
        """Nothing to log: the stream logs its own stop."""

    def attach(self, spark: SparkSession) -> None:
        """Start receiving the session's streaming progress."""
        spark.streams.addListener(self)

    def detach(self, spark: SparkSession, last_batch_id: int | None, timeout: float = 5.0) -> None:
        """Stop receiving it, once the query's last trigger (`last_batch_id`) is logged.

        Spark's listener bus delivers events after the trigger that posts them, on its own thread:
        a stopped query's last report may still be queued. Waited for up to `timeout` seconds.
        """
        deadline = time.monotonic() + timeout
        with self.handled:
            while last_batch_id is not None and self.newest < last_batch_id:
                left = deadline - time.monotonic()
                if left <= 0:
                    log.warning("query progress: the last trigger's report did not arrive", batch_id=last_batch_id)
                    break
                self.handled.wait(left)
        spark.streams.removeListener(self)
