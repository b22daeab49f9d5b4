"""How many shuffle partitions one micro-batch's sessionizing and pane writing use.

Sized to the batch, not the session's fixed default.

Spark's adaptive execution cannot coalesce the sessionizing shuffle (its result is cached, and a
cached plan keeps its partitioning), so every batch ran `spark.sql.shuffle.partitions` (8) tasks
per stage whatever its size: a 100,000-line batch spent more time starting 8 tiny tasks per stage
than computing them (BENCHMARKS.md section 1). Here the count follows the batch's lines: about
LINES_PER_TASK lines per task, in whole waves of the cluster's cores, never more than the
session's setting (its ceiling, TIDEMARK_SHUFFLE_PARTITIONS), never fewer than the cores.

The count is a function of the batch's line count and the cluster's cores, so a batch replayed
after a crash on the same cluster is partitioned as it was; on another it may not be, which is
harmless: the count decides which task computes a user's sessions, never what is computed (every
output is a function of the rows, not of their partition).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession

SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
LINES_PER_TASK = 250_000


def sized(lines: int, cores: int, ceiling: int) -> int:
    """Shuffle partitions for a batch of `lines`.

    Whole waves of `cores` tasks of about LINES_PER_TASK lines each, between `cores` and `ceiling`
    (both at least 1).
    """
    cores = max(1, cores)
    waves = max(1, round(lines / (cores * LINES_PER_TASK)))
    return max(1, min(ceiling, cores * waves))


@contextmanager
def sized_shuffle(spark: SparkSession, lines: int) -> Iterator[int]:
    """The batch's shuffles sized to it within the block.

    The session's setting restored after (the stream's micro-batches share one session, and so do
    callers that run a batch directly).
    """
    ceiling = spark.conf.get(SHUFFLE_PARTITIONS)
    if ceiling is None:  # Spark gives its default when the session sets none
        raise RuntimeError(f"{SHUFFLE_PARTITIONS} has no value")
    try:
        cores = spark.sparkContext.defaultParallelism
    except Exception:  # a session without a SparkContext (Spark Connect): the setting as it is
        cores = int(ceiling)
    count = sized(lines, cores, int(ceiling))
    spark.conf.set(SHUFFLE_PARTITIONS, str(count))
    try:
        yield count
    finally:
        spark.conf.set(SHUFFLE_PARTITIONS, ceiling)
