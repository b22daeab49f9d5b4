"""Incremental corrections: re-sessionize only the users that new receipts touch.

A run of event date D computes the islands (sessions) of every distinct event >= lo in the receipts
it plans (tidemark/planning.py). It publishes those starting on D and keeps the others beside the
version (`run=<id>/context/`, not part of the table): together they hold every distinct event >= lo
of the receipts the version read, each already reduced to its kept copy. The next run of D then
needs only that and the new receipts:

- a user with no pane in the new receipts has exactly the events they had: their islands are the
  previous ones, carried over as rows (the sessions of D, and the context);
- a touched user's islands are recomputed from their previous islands' events plus the new panes'
  events (dedup_sql/dedup_events_incremental.sql), with THE session rule (sessionize.sql). Adding
  events only merges islands, so nothing else can change, across any date boundary: the context
  holds the neighbours on both sides of D (before midnight down to lo, after it up to hi).

The result equals the full path's row for row (tests/test_dedup_incremental.py checks it against
the full path and the batch reference). The full path stays the fallback whenever the precondition
below does not hold (`base` says why), and `tidemark dedup --full` forces it.
"""
from __future__ import annotations

from dataclasses import dataclass

from datetime import datetime

from tidemark import layout, planning, publish, rules_record, sql_rules, times
from tidemark.planning import Plan
from tidemark.sessions import SessionRules

# Not "_context": Spark ignores a path whose name starts with "_" or ".", even one given explicitly.
CONTEXT_DIR = "context"
# The columns of an island (dedup_sql/dedup_sessions.sql) as the version and its context store them.
ISLAND_COLUMNS = ("user_id", "session_start", "session_end", "event_count", "event_ids", "events",
                  "first_receipt_ts", "last_receipt_ts")
_ISLANDS_SCHEMA = ("user_id STRING, session_start TIMESTAMP, session_end TIMESTAMP, event_count BIGINT, "
                   f"event_ids ARRAY<STRING>, events {sql_rules.EVENTS_TYPE}, first_receipt_ts STRING, "
                   "last_receipt_ts STRING")


@dataclass
class Base:
    """What an incremental run starts from: the previous version and the receipts it lacks."""
    previous: dict
    new: list  # the plan's receipt partitions (markers) the previous version did not read

    @property
    def rows_read(self) -> int:
        """Pane rows of the new receipts plus the previous version's islands (sessions + context)."""
        return (sum(p.rows for p in self.new) + int(self.previous["sessions"])
                + int(self.previous["context_rows"]))


def base(previous: dict | None, current: Plan, rules: SessionRules) -> tuple[Base | None, str]:
    """(Base, "") when `current` can be computed incrementally from `previous`, else (None, why not).

    Pure Python over the version's marker and the plan: no Spark, no data read.
    """
    if previous is None:
        return None, "no previous version"
    if not planning.recorded_reach(previous)[0]:
        return None, "the previous version records no reach (written by an older tidemark)"
    if rules_record.changed_since(previous, rules):
        return None, "the session rules changed since the previous version"
    if "context_rows" not in previous:
        return None, "the previous version kept no island context (written by an older tidemark)"
    if previous.get("lo") != lo_text(current.lo):
        return None, "the previous version was planned from another lo"
    old = set(previous.get("receipts", []))
    keys = set(current.keys)
    if not old <= keys:
        return None, "the previous version read receipts this plan does not"
    new = [p for p in current.partitions if planning.receipt_key(p.event_date, p.receipt_ts) not in old]
    if not new:
        return None, "no new receipt"
    newest_old = previous.get("max_receipt_ts")
    if newest_old and min(p.receipt_ts for p in new) < newest_old:
        # A new copy of an old event could then carry an earlier first receipt than the island's.
        return None, "a new receipt is older than the previous version's newest (a replayed batch)"
    return Base(previous, new), ""


def lo_text(lo: datetime) -> str:
    """How a version's marker records its lo."""
    return times.iso_z(lo, "auto")  # no fraction for a whole second: as versions have recorded it


def context_dir(lake: str, event_date: str, run_id: str) -> str:
    return layout.join(publish.run_dir(lake, event_date, run_id), CONTEXT_DIR)


def previous_islands(spark, lake: str, previous: dict):
    """Every island of the previous version: its sessions of the date and its context."""
    from pyspark.sql import functions as F

    parts = []
    files = publish.run_files(lake, previous)
    if files:
        parts.append(spark.read.schema(_ISLANDS_SCHEMA + ", event_date DATE").parquet(*files)
                     .select(*ISLAND_COLUMNS, F.date_format("event_date", "yyyy-MM-dd").alias("event_date")))
    if int(previous["context_rows"]):
        parts.append(spark.read.schema(_ISLANDS_SCHEMA + ", event_date STRING")
                     .parquet(context_dir(lake, previous["event_date"], previous["run_id"]))
                     .select(*ISLAND_COLUMNS, "event_date"))
    if not parts:
        return spark.createDataFrame([], _ISLANDS_SCHEMA + ", event_date STRING")
    out = parts[0]
    for part in parts[1:]:
        out = out.unionByName(part)
    return out


def compute_islands(spark, lake: str, current: Plan, rules: SessionRules, start: Base, read_panes):
    """The islands of `current` (dedup_sessions.sql's columns), from `start` and the new receipts'
    panes (`read_panes(spark, lake, partitions, lo)`, the full path's reader): the previous islands
    of untouched users as they are, the touched users' recomputed."""
    import dedup_sql
    from pyspark.sql import functions as F

    panes = read_panes(spark, lake, start.new, current.lo).select("user_id", "events", "receipt_ts")
    touched = F.broadcast(panes.select("user_id").distinct())
    old = previous_islands(spark, lake, start.previous)
    carried = old.join(touched, "user_id", "left_anti").withColumn("has_new", F.lit(False))
    events = dedup_sql.run(spark, "dedup_events_incremental",
                           {"islands": old.join(touched, "user_id", "left_semi"), "panes": panes},
                           lo_us=times.to_micros(current.lo))
    sessionized = dedup_sql.run(spark, "sessionize", {"events": events}, gap_us=rules.gap_us)
    recomputed = dedup_sql.run(spark, "dedup_sessions", {"sessionized": sessionized})
    return recomputed.unionByName(carried.select(*recomputed.columns))
