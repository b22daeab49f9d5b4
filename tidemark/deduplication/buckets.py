"""How a version's sessions are laid out in files: one file per bucket of users.

A version of event date D with B buckets writes each session into the file of its user's bucket,
`pmod(hash(user_id), B)` (Spark's Murmur3 hash, the one its own hash partitioning uses), in the
run's folder:

    event_date=D/run=<run_id>/bucket=<k>/part-*.parquet

A correction re-sessionizes only the users the new receipts touch, so only the buckets holding a
touched user change: the incremental path (tidemark/deduplication/incremental.py) reads and
rewrites those buckets' files alone (their untouched users' rows carried over from them), and the
version keeps every other bucket's file of the version it was planned on (the marker's `carried`:
paths relative to the date's folder, in earlier runs' folders). The commit
(tidemark.iceberg.commits) then replaces only the rewritten files: the snapshot deletes and adds a
few files, the rest stay as they are. Readers are unaffected: the table's partition spec stays
identity(event_date), a version is still the set of D's live files.

B follows the date's size (`count_for`): about SESSIONS_PER_BUCKET sessions per file, a power of
two, so that a one-user correction of a 1M-session date rewrites 1/64 of it and a 150-session date
stays one file. A version keeps its predecessor's B while it fits (`keeps`); a date that grew (or
shrank) past it is written whole into the new B (a full rewrite, as often as the date doubles), so
files neither fragment nor grow without bound. A version written before this layout (no `buckets`
in its marker) is rewritten whole into buckets by the next run of its date.

Why not an Iceberg partition spec of bucket(user_id, B): Iceberg's bucket is Murmur3 with seed 0
over the UTF-8 bytes, which Spark cannot compute without a Python UDF (its own `hash` differs),
the spec's B would be one for every date (a 150-session date in 64 files), and the files tidemark
writes would each have to hold one Iceberg bucket. Here B is per version and Spark computes the
bucket natively; what is given up is scan pruning by user (a one-user scan reads the date).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# About this many sessions per file: 1M sessions -> 64 files, a one-user correction ~1.6% of them.
SESSIONS_PER_BUCKET = 16_384
MAX_BUCKETS = 1024
BUCKET_DIR = "bucket"
# A kept layout may hold up to 2x (or down to 1/4, above 1 bucket) the sessions per file it was
# chosen for before the date is rewritten into another bucket count.
_GROW, _SHRINK = 2, 4

_BUCKETED = re.compile(r"(?:^|/)bucket=(\d+)/[^/]+$")


def count_for(sessions: int) -> int:
    """The bucket count of a version of this many sessions: a power of two, 1 .. MAX_BUCKETS."""
    count = 1
    while count * SESSIONS_PER_BUCKET < sessions and count < MAX_BUCKETS:
        count *= 2
    return count


def keeps(previous: int | None, sessions: int) -> bool:
    """Whether a version of `sessions` sessions can keep its predecessor's `previous` buckets.

    None: written before this layout, never kept.
    """
    if not previous:
        return False
    if previous * SESSIONS_PER_BUCKET * _GROW < sessions and previous < MAX_BUCKETS:
        return False
    return previous == 1 or previous * SESSIONS_PER_BUCKET // _SHRINK <= sessions


def expression(count: int) -> str:
    """The bucket of a row as Spark SQL over its `user_id`.

    The same as Spark's own hash partitioning into `count` partitions.
    """
    return f"pmod(hash(user_id), {int(count)})"


def of_path(path: str) -> int | None:
    """The bucket a file path's `bucket=<k>/` folder names (None: an unbucketed file)."""
    found = _BUCKETED.search(path)
    return int(found.group(1)) if found else None


def write(frame: DataFrame, count: int, folder: str, buckets: int | None = None) -> None:
    """Write `frame` (rows with a `user_id`) as one file per non-empty bucket into `folder/bucket=<k>/`.

    The rows are shuffled by user into `count` partitions, the partitioning the bucket expression
    reproduces, so each task writes exactly one bucket's file; `buckets`: at most that many buckets
    hold rows (a correction's), shuffled into as few partitions (a power of two dividing `count`:
    each bucket still lands in one task) instead of `count` mostly empty ones.
    """
    # pyspark when Spark runs only: the DAG's skip check imports the dedup without it
    from pyspark.sql import functions as F

    tasks = count
    while buckets is not None and tasks > 1 and tasks // 2 >= buckets:
        tasks //= 2
    (
        frame.repartition(tasks, "user_id")
        .withColumn(BUCKET_DIR, F.expr(expression(count)))
        .write.mode("overwrite")
        .partitionBy(BUCKET_DIR)
        .parquet(folder)
    )
