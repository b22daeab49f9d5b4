"""Spark's own account of each micro-batch, in the stream's structured log.

A micro-batch's time is more than tidemark's foreachBatch (`addBatch`): Spark lists the landing and
plans the offsets (`latestOffset`, `getBatch`), plans the query (`queryPlanning`) and writes its
offset and commit logs (`walCommit`, `commitOffsets`). Each `query progress` line names those
durations per batch, so the fixed cost of a batch is taken apart from a measurement
(bench/stream_throughput.py sums them).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.streaming.query import StreamingQuery

from tidemark.base.logs import get_logger

log = get_logger("stream")

# Spark's names of the phases of a trigger (StreamingQueryProgress.durationMs), in their order.
PHASES = ("latestOffset", "getBatch", "queryPlanning", "addBatch", "walCommit", "commitOffsets", "triggerExecution")


class QueryProgressLog:
    """Logs each batch's progress once, from the query's recent progress (polled by the driver)."""

    def __init__(self, query: StreamingQuery) -> None:
        """The progress of `query`; nothing is logged until `flush`."""
        self.query = query
        self.logged: set[int] = set()

    def flush(self) -> None:
        """Log every batch that ran since the last call (idle triggers left out)."""
        for progress in self.query.recentProgress:
            batch_id = int(progress.batchId)
            durations: dict[str, Any] = dict(progress.durationMs or {})
            # An idle trigger runs no batch (no addBatch). Spark's numInputRows is no guide: the
            # batch reads its pinned files itself (streaming_job.batch), not the source's rows.
            if batch_id in self.logged or "addBatch" not in durations:
                continue
            self.logged.add(batch_id)
            log.info(
                "query progress",
                batch_id=batch_id,
                durations_ms={name: int(durations[name]) for name in PHASES if name in durations},
            )
        if len(self.logged) > 10_000:  # a long-running stream: keep the ids recentProgress can still hold
            self.logged = set(sorted(self.logged)[-1_000:])
