"""Incremental corrections: re-sessionize only the users that new receipts touch.

A run of event date D computes the islands (sessions) of every distinct event >= lo in the receipts
it plans (tidemark/panes/planning.py). It publishes those starting on D and keeps the others beside the
version (`run=<id>/context/`, not part of the table): together they hold every distinct event >= lo
of the receipts the version read, each already reduced to its kept copy. The next run of D then
needs only that and the new receipts:

- a user with no pane in the new receipts has exactly the events they had: their islands are the
  previous ones, carried over as rows (the sessions of D, and the context);
- a touched user's islands are recomputed from their previous islands' events plus the new panes'
  events (dedup_sql/dedup_events_incremental.sql), with THE session rule (sessionize.sql). Adding
  events only merges islands, so nothing else can change, across any date boundary: the context
  holds the neighbours on both sides of D (before midnight down to lo, after it up to the horizon).

The context stops at a **horizon** H (`horizon()`: D+1 00:00 plus max(2 h, 2 gaps), at most D+2
00:00): islands
starting at or after H are not kept, because only a chain of new events reaching from a session of D
to H could ever join them to D, and that is rare and detected. The islands a correction computes
from "every event < H plus the new ones" are exact wherever they end at least a gap before H: a
missing event (>= H) within the gap of such an island's end is impossible, and one before its start
is too. So a correction checks every recomputed island of D (or earlier) that holds new events:
if one ends less than a gap before H, it might continue into islands the context did not keep,
and the run falls back to the full path (`full_reason` says so). An island starting on D+1 before
H that the run cannot see whole (its continuation is past H or past hi) is kept as it is: should
it ever meet D, it ends within a gap of H, and the same check sends that run to the full path.
This keeps the context to the few islands around D's two midnights instead of all of D+1 .. hi.

The result equals the full path's row for row (tests/test_dedup_incremental.py checks it against
the full path and the batch reference). The full path stays the fallback whenever the precondition
below does not hold (`base` says why), and `tidemark dedup --full` forces it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING, TypedDict

import dedup_sql
from tidemark.base import layout, times
from tidemark.base.session_rules import SessionRules
from tidemark.deduplication import buckets, execution
from tidemark.iceberg import run_markers
from tidemark.panes import planning
from tidemark.panes.planning import Plan
from tidemark.session import rules_record, session_schema
from tidemark.store.lake import Lake
from tidemark.store.locations import Folder
from tidemark.store.version_record import VersionRecord

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row, SparkSession

    from tidemark.panes.receipts import ReceiptPartition, ReceiptRef

    # A receipt partition of a plan: its marker read, or known from listings
    Partition = ReceiptPartition | ReceiptRef
    # The full path's pane reader: (spark, lake, partitions, lo) -> the panes from lo on
    ReadPanes = Callable[[SparkSession, Lake, list[Partition], datetime], DataFrame]

# Not "_context": Spark ignores a path whose name starts with "_" or ".", even one given explicitly.
CONTEXT_DIR = "context"
# The columns of an island (dedup_sql/dedup_sessions.sql) as the version and its context store them:
# THE session schema's (tidemark/session/session_schema.py).
ISLAND_COLUMNS = session_schema.ISLAND_COLUMNS
_ISLANDS_SCHEMA = session_schema.ISLANDS_DDL


@dataclass
class Base:
    """What an incremental run starts from: the previous version and the receipts it lacks."""

    previous: VersionRecord
    new: list[Partition]  # the plan's receipt partitions (markers) the previous version did not read

    @property
    def rows_read(self) -> int:
        """Pane rows of the new receipts plus the previous version's islands (sessions + context)."""
        return sum(int(p.rows) for p in self.new) + self.previous.sessions + (self.previous.context_rows or 0)


def base(previous: VersionRecord | None, current: Plan, rules: SessionRules) -> tuple[Base | None, str]:
    """(Base, "") when `current` can be computed incrementally from `previous`, else (None, why not).

    Pure Python over the version's marker and the plan: no Spark, no data read.
    """
    if previous is None:
        return None, "no previous version"
    if not planning.recorded_reach(previous)[0]:
        return None, "the previous version records no reach (written by an older tidemark)"
    if rules_record.changed_since(previous, rules):
        return None, "the session rules changed since the previous version"
    if previous.context_rows is None:
        return None, "the previous version kept no island context (written by an older tidemark)"
    if previous.horizon is None:
        return None, "the previous version records no context horizon (written by an older tidemark)"
    written = previous.schema_version
    if written > session_schema.VERSION:
        return None, f"the previous version was written with a newer session schema ({written})"
    unfillable = session_schema.unfillable_since(written)
    if unfillable:
        # its rows lack columns that cannot be computed from them: they would be carried over null
        return None, (
            f"the previous version was written with session schema {written}, without "
            + ", ".join(c.name for c in unfillable)
        )
    if previous.lo != current.lo:
        return None, "the previous version was planned from another lo"
    # H is a function of the date and the rules (checked above); another H (another tidemark's
    # margin) holds other islands, and the counts the summary starts from would not add up.
    if previous.horizon != horizon(current.event_date, rules):
        return None, "the previous version kept its context to another horizon"
    old = set(previous.receipts)
    keys = set(current.keys)
    if not old <= keys:
        return None, "the previous version read receipts this plan does not"
    new = [p for p in current.partitions if planning.receipt_key(p.event_date, p.receipt_ts) not in old]
    if not new:
        return None, "no new receipt"
    newest_old = previous.max_receipt_ts
    if newest_old and min(p.receipt_ts for p in new) < newest_old:
        # A new copy of an old event could then carry an earlier first receipt than the island's.
        return None, "a new receipt is older than the previous version's newest (a replayed batch)"
    return Base(previous, new), ""


# How far past D+1 00:00 the context reaches, at least (and at least two gaps): a session of D that
# a correction extends to end after H - gap sends the run to the full path, so the margin is what
# midnight-crossing sessions get before that happens; each hour costs an hour of D+1's islands.
HORIZON_MARGIN = timedelta(hours=2)


def horizon(event_date: date, rules: SessionRules) -> datetime:
    """H: the context of a version of event_date holds the islands that start before H.

    At most D+2 00:00: every event before H is then in a pane of a date <= D+1 <= hi, so every
    version (and every run's new panes) holds all of them, which is what the check relies on.
    """
    next_day = planning.midnight(event_date + timedelta(days=1))
    # split_gap: the check below (dedup_summary.sql) compares session ends + :gap_us with H, and
    # :gap_us is the split threshold (the gap + 1 us under `merge`).
    return min(next_day + max(HORIZON_MARGIN, 2 * rules.split_gap), next_day + timedelta(days=1))


def context_dir(lake: Lake, event_date: date, run_id: str) -> Folder:
    """The folder of a version's island context."""
    return lake.run_context_dir(event_date, run_id)


class Summary(TypedDict):
    """dedup_summary.sql's row as a run uses it (`summary_of`)."""

    reach: datetime | None
    sessions: int
    context_rows: int
    affected_dates: list[date]  # other dates whose versions the run may have made stale
    past_horizon: int


@dataclass
class Islands:
    """A run's islands as the version writer takes them.

    Lazy DataFrames of ISLAND_COLUMNS plus event_date ('YYYY-MM-DD'), the sessions of D to write and
    the context (not D, starting before the horizon); the summary (`summary_of`'s keys); the frames
    pinned (execution.pin), released once written. The layout (tidemark/deduplication/buckets.py):
    `buckets`, the bucket count the sessions are written in (None: chosen from the summary's session
    count, every bucket written), and `carried`, the previous version's files of the buckets not
    written, kept as they are.
    """

    sessions: DataFrame
    context: DataFrame
    # Computes the summary (a Spark action) when the run first asks for it: the run may start its
    # writes beside it (tidemark.deduplication.dedup).
    count: Callable[[], Summary]
    cached: list[DataFrame]
    spark: SparkSession | None = None
    views: list[str] = field(default_factory=list)  # dedup_sql.run(..., views=): dropped on release
    buckets: int | None = None
    carried: tuple[str, ...] = ()
    rewritten: int | None = None  # how many buckets the sessions can hold (None: all of them)
    # The touched users' sessions of the date before and after (the same columns as `sessions`),
    # when the run knows them: its changeset (tidemark/deduplication/changeset.py). None: a full run.
    before: DataFrame | None = None
    after: DataFrame | None = None
    _summary: Summary | None = field(default=None, init=False, repr=False)

    @property
    def summary(self) -> Summary:
        """dedup_summary.sql's row as the run uses it (`summary_of`), computed once, when first asked."""
        if self._summary is None:
            self._summary = self.count()
        return self._summary

    def release(self) -> None:
        """Unpersist the pinned inputs, then drop the views, once the version is written.

        In this order: a cached frame's plan may name the views (a query run with `views`), and
        Spark Connect analyses that plan again to unpersist it. (A small run's checkpoints are
        freed by Spark's cleaner instead: execution.pin.)
        """
        for frame in self.cached:
            frame.unpersist()
        if self.spark is not None:
            dedup_sql.drop_views(self.spark, self.views)


def split(islands: DataFrame, event_date: date, until: datetime) -> tuple[DataFrame, DataFrame]:
    """(sessions, context) of a run's islands: those of event_date, and the others before the horizon.

    The others start before the horizon `until` (what a version keeps beside its sessions); both
    come as ISLAND_COLUMNS + event_date. The full and the incremental path both split with this, so
    their versions hold the same rows.
    """
    # pyspark when Spark runs only: the DAG's skip check imports the dedup without it
    from pyspark.sql import functions as F

    on_date = F.col("event_date") == F.lit(layout.event_date_text(event_date))
    columns = (*ISLAND_COLUMNS, "event_date")
    return (
        islands.where(on_date).select(*columns),
        islands.where(~on_date & (F.col("session_start") < F.lit(until))).select(*columns),
    )


def summary_of(row: Row | None, event_date: date) -> Summary:
    """dedup_summary.sql's row as the run uses it (its dates, YYYY-MM-DD text, parsed)."""
    assert row is not None  # an aggregate without GROUP BY has one row
    return {
        "reach": None if row["reach_us"] is None else times.from_micros(row["reach_us"]),
        "sessions": int(row["sessions"]),
        "context_rows": int(row["context_rows"]),
        "affected_dates": [d for d in map(layout.as_event_date, row["affected_dates"]) if d != event_date],
        "past_horizon": int(row["past_horizon"]),
    }


def _previous_sessions(
    spark: SparkSession, lake: Lake, previous: VersionRecord, files: list[str] | None = None
) -> DataFrame:
    """The previous version's sessions: in `files` of its (default: all of them)."""
    # pyspark when Spark runs only: the DAG's skip check imports the dedup without it
    from pyspark.sql import functions as F

    if files is None:
        files = run_markers.run_files(lake, previous)
    if not files:
        return spark.createDataFrame([], _ISLANDS_SCHEMA + ", event_date STRING")
    # Files of an older session schema lack its newer columns (read as null): computed by their fill.
    filled: DataFrame = session_schema.fill_older(
        spark.read.schema(_ISLANDS_SCHEMA + ", event_date DATE")
        .parquet(*files)
        .select(*ISLAND_COLUMNS, F.date_format("event_date", "yyyy-MM-dd").alias("event_date")),
        previous.schema_version,
    )
    return filled


def _previous_context(spark: SparkSession, lake: Lake, previous: VersionRecord, until: datetime) -> DataFrame:
    """The previous version's island context, the islands that start before `until`."""
    # pyspark when Spark runs only: the DAG's skip check imports the dedup without it
    from pyspark.sql import functions as F

    if not previous.context_rows:
        return spark.createDataFrame([], _ISLANDS_SCHEMA + ", event_date STRING")
    filled: DataFrame = session_schema.fill_older(
        spark.read.schema(_ISLANDS_SCHEMA + ", event_date STRING")
        .parquet(context_dir(lake, previous.event_date, previous.run_id))
        .where(F.col("session_start") < F.lit(until))
        .select(*ISLAND_COLUMNS, "event_date"),
        previous.schema_version,
    )
    return filled


# A correction's islands: dedup_events_incremental.sql into sessionize.sql (THE session rule) into
# dedup_sessions.sql, composed as one query (one analysis on the driver, one round trip over Spark
# Connect, where three spark.sql calls cost one each).
CORRECT_QUERY = dedup_sql.compose(
    "dedup_sessions", sessionized=dedup_sql.compose("sessionize", events=dedup_sql.text("dedup_events_incremental"))
)

# Up to this many touched users are filtered by value (an IN list in the plan), more by a join.
_ISIN_USERS = 200


def correct(
    spark: SparkSession, lake: Lake, current: Plan, rules: SessionRules, start: Base, read_panes: ReadPanes
) -> Islands:
    """The islands of `current` from `start` and the new receipts' panes.

    The panes come from `read_panes(spark, lake, partitions, lo)`, the full path's reader: the
    previous islands of untouched users as they are, the touched users' recomputed.

    Only the touched users' part is computed and pinned (small). Only the files of the buckets
    holding a touched user are read (tidemark/deduplication/buckets.py): their untouched users'
    rows are streamed from them into the new files when they are written, and every other bucket's
    file is kept by the new version as it is (`Islands.carried`). The summary is the previous version's,
    corrected by the difference the touched users make: adding events only merges islands, so every
    previous island touching D lies in a new one touching D (the reach can only grow: the new reach
    is the larger of the previous one and the recomputed islands'), and only recomputed islands
    hold new events (affected dates, the horizon check). Its Spark job runs when the run first asks
    for `Islands.summary`: the run may have started its writes by then.
    """
    # pyspark when Spark runs only: the DAG's skip check imports the dedup without it
    from pyspark.sql import functions as F

    day = current.event_date
    until = horizon(day, rules)
    panes = read_panes(spark, lake, start.new, current.lo).select("user_id", "events", "receipt_ts")
    # The touched users, once, on the driver. A correction's few go to the queries below as an IN
    # list: a broadcast join would read the new panes again in every query, one more Spark job each
    # (a 152-session date's correction: 3.4 s with the join, 2.2 s by value, two quiet runs of
    # bench/correction_cost.py; the bound of 200 is a judgement, not measured). Many go as a
    # broadcast semi/anti join: with 10k touched users the list put 10k literals in every query's
    # plan, and planning them (analysis, AQE's re-optimizations) took ~14 s of the 1M-session
    # correction's 20 s (BENCHMARKS.md section 4).
    read, carried, count, users, rewritten = _layout(lake, start.previous, panes)
    keep: Callable[[DataFrame], DataFrame]
    drop: Callable[[DataFrame], DataFrame]
    if len(users) <= _ISIN_USERS:
        is_touched = F.col("user_id").isin(users) if users else F.lit(False)
        keep, drop = (lambda frame: frame.where(is_touched)), (lambda frame: frame.where(~is_touched))
    else:
        touched = F.broadcast(panes.select("user_id").distinct())
        keep = lambda frame: frame.join(touched, "user_id", "left_semi")  # noqa: E731
        drop = lambda frame: frame.join(touched, "user_id", "left_anti")  # noqa: E731
    old_sessions = _previous_sessions(spark, lake, start.previous, read)
    old_context = _previous_context(spark, lake, start.previous, until)
    # Pinned inputs (execution.pin) go to SQL through views kept until release (dedup_sql.run's `views`).
    views: list[str] = []
    old = execution.pin(keep(old_sessions.unionByName(old_context)), start.rows_read)
    recomputed = execution.pin(
        dedup_sql.run_text(
            spark,
            CORRECT_QUERY,
            {"islands": old, "panes": panes},
            views,
            lo_us=times.to_micros(current.lo),
            gap_us=rules.gap_us,
        ),
        start.rows_read,
    )

    params = {"event_date": layout.event_date_text(day), "horizon_us": times.to_micros(until), "gap_us": rules.gap_us}
    new = dedup_sql.run(spark, "dedup_summary", {"islands": recomputed}, views=views, **params)
    gone = dedup_sql.run(
        spark, "dedup_summary", {"islands": old.withColumn("has_new", F.lit(False))}, views=views, **params
    )
    _, previous_reach = planning.recorded_reach(start.previous)

    def summarize() -> Summary:
        row = new.crossJoin(
            gone.select(F.col("sessions").alias("gone_sessions"), F.col("context_rows").alias("gone_context"))
        ).first()
        assert row is not None  # a cross join of two one-row aggregates
        summary = summary_of(row, day)
        summary["reach"] = max((r for r in (previous_reach, summary["reach"]) if r is not None), default=None)
        summary["sessions"] += start.previous.sessions - int(row["gone_sessions"])
        summary["context_rows"] += (start.previous.context_rows or 0) - int(row["gone_context"])
        return summary

    new_sessions, new_context = split(recomputed, day, until)
    # The untouched users of the buckets read are carried over as rows, streamed from those files
    # into the new ones (buckets.write shuffles them by user: one file per bucket).
    sessions = drop(old_sessions).unionByName(new_sessions)
    context = drop(old_context).unionByName(new_context)
    islands = Islands(
        sessions,
        context,
        summarize,
        [recomputed, old],
        spark=spark,
        views=views,
        buckets=count,
        carried=carried,
        rewritten=rewritten,
    )
    if start.previous.schema_version == session_schema.VERSION:  # else carried-over rows get filled columns
        # the touched users are all in the buckets read: `old` holds every old session of theirs
        islands.before = old.where(F.col("event_date") == F.lit(layout.event_date_text(day))).select(
            *ISLAND_COLUMNS, "event_date"
        )
        islands.after = new_sessions
    return islands


def _layout(
    lake: Lake, previous: VersionRecord, panes: DataFrame
) -> tuple[list[str], tuple[str, ...], int | None, list[str], int | None]:
    """Which of the previous version's files a correction reads, keeps and writes.

    (the previous version's files to read, the files to keep as they are, the bucket count to write
    in, the touched users: up to _ISIN_USERS + 1 of the users in `panes`, how many buckets they are
    in). With the previous layout kept (buckets.keeps), only the files of the touched
    users' buckets are read and rewritten; otherwise every file is read and the version written
    whole, in the bucket count its size asks for (None, and None buckets: all). One Spark job over
    the new panes finds the users and their buckets.
    """
    # pyspark when Spark runs only: the DAG's skip check imports the dedup without it
    from pyspark.sql import functions as F

    files = run_markers.run_files(lake, previous)
    # Files of an older session schema are not kept as they are: their rows get the newer columns.
    if previous.schema_version != session_schema.VERSION or not buckets.keeps(previous.buckets, previous.sessions):
        users = [r["user_id"] for r in panes.select("user_id").distinct().limit(_ISIN_USERS + 1).collect()]
        return files, (), None, users, None
    count = int(previous.buckets or 1)
    # Per bucket, up to _ISIN_USERS + 1 of its users: more than _ISIN_USERS in all iff the union is.
    found = (
        panes.groupBy(F.expr(buckets.expression(count)).alias("bucket"))
        .agg(F.slice(F.array_sort(F.collect_set("user_id")), 1, _ISIN_USERS + 1).alias("users"))
        .collect()
    )
    touched = {r["bucket"] for r in found}
    users = sorted({u for r in found for u in r["users"]})[: _ISIN_USERS + 1]
    read = [uri for uri in files if buckets.of_path(uri) in touched]
    kept = tuple(run_markers.carried_path(lake, previous, uri) for uri in files if buckets.of_path(uri) not in touched)
    return read, kept, count, users, len(touched)
