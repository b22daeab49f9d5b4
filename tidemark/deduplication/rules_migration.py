"""A deliberate change of a lake's session rules: record the new rules, then re-deduplicate every date.

The rules decide which events form one session, so a change invalidates every published version,
not only the dates that receive events from now on. The migration therefore
  1. adds a rules record (tidemark/session/rules_record.py): from then on every dedup uses the new rules,
     and the stream refuses to start with the old ones;
  2. re-deduplicates every event date of the lake under the new rules. A version made under other
     rules is never "up to date" (tidemark/deduplication/dedup.py), so each date gets a new version, published
     atomically like any other; readers see old-rules or new-rules sessions per date, never a mix.

Restartable and idempotent: run it again with the same rules after a crash, and it records nothing
new and re-deduplicates only the dates not yet done (the others are no-ops). It reports its progress
(tidemark.base.progress: dates done and left, the current one, the time left); stopped (Ctrl-C, a
kill, a failure), it logs the date a rerun resumes at, read from the dates' current versions.
Receipt partitions are never touched: the stream's panes hold events, whatever rules grouped them,
and the dedup re-sessionizes those events. Stop the stream (or start it with --migrate-rules, which runs this first) and pause the
dedup DAG while migrating, so that no run under the old rules publishes meanwhile (one that does is
stale and listed by `tidemark rules show`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import TYPE_CHECKING, Any

from tidemark.base import layout
from tidemark.base.durations import format_duration
from tidemark.base.logs import get_logger
from tidemark.base.progress import Display, Progress
from tidemark.base.session_rules import SessionRules
from tidemark.deduplication.dedup import DedupResult, run_dedup
from tidemark.iceberg import table_versions
from tidemark.session import rules_record
from tidemark.store.lake import Lake

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = get_logger("rules")


@dataclass
class Migration:
    """A migration's record of the rules, whether they changed, and each date's dedup result."""

    record: rules_record.Recorded
    changed: bool
    results: list[DedupResult] = field(default_factory=list)  # one per date
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """The migration as JSON (the CLI's output)."""
        return {
            "kind": "migration",
            "changed": self.changed,
            "rules_id": self.record.rules_id,
            "sequence": self.record.sequence,
            **self.record.rules.describe(),
            "dates": len(self.results),
            "recomputed": sum(1 for r in self.results if not r.noop),
            "seconds": self.seconds,
        }


def target_rules(lake: Lake, requested: SessionRules | dict[str, Any]) -> SessionRules:
    """The rules to migrate to: a full set, or the typed options over the lake's current rules."""
    if isinstance(requested, SessionRules):
        return requested
    rules, _, _ = rules_record.rules_in_force(lake)
    return rules.with_overrides(requested)


def event_dates(lake: Lake) -> list[date]:
    """Every date with receipt partitions or published versions, oldest first."""
    return sorted(set(lake.sessions_root().event_dates()) | set(table_versions.dates_with_version(lake)))


@dataclass(frozen=True)
class StaleDate:
    """A date whose current version was made under other rules than the lake's."""

    event_date: date
    version: str | None
    rules_id: str | None  # None: a version written before versions recorded their rules id
    gap: timedelta | None  # the gap it was made with (None: not recorded)

    def to_json(self) -> dict[str, Any]:
        """As `tidemark rules show --json` prints it: the date as YYYY-MM-DD, the gap as "30m"."""
        return {
            "event_date": layout.event_date_text(self.event_date),
            "version": self.version,
            "rules_id": self.rules_id,
            "gap": None if self.gap is None else format_duration(self.gap),
        }


def stale_dates(lake: Lake, rules: SessionRules | None = None) -> list[StaleDate]:
    """Dates whose current version was made under other rules than the lake's. No Spark: markers only."""
    rules = rules or rules_record.rules_in_force(lake)[0]
    out = []
    for event_date in table_versions.dates_with_version(lake):
        current = table_versions.current_version(lake, event_date)
        if current is not None and rules_record.changed_since(current, rules):
            out.append(StaleDate(current.event_date, current.version, current.rules_id, current.gap))
    return out


def not_migrated(lake: Lake, rules: SessionRules, dates: list[date] | None = None) -> list[date]:
    """The dates (of `dates`, default every date) not migrated to `rules` yet, oldest first.

    Those whose current version was not made under `rules`, or that have none: what a migration to
    `rules` has left to do. Markers only.
    """
    out = []
    for event_date in event_dates(lake) if dates is None else dates:
        current = table_versions.current_version(lake, event_date)
        if current is None or rules_record.changed_since(current, rules):
            out.append(event_date)
    return out


def migrate(
    lake: Lake,
    rules: SessionRules,
    spark: SparkSession | None = None,
    recorded_by: str = "tidemark rules migrate",
    on_result: Callable[[DedupResult], object] | None = None,
    display: Display | None = None,
) -> Migration:
    """Make `rules` the lake's rules and every date's current version one made under them.

    `display`: where to show the progress as it happens (the CLI's terminal bar).
    """
    started = time.monotonic()
    before = rules_record.current(lake)
    record = rules_record.record_change(lake, rules, recorded_by)
    changed = before is None or before.rules_id != record.rules_id
    migration = Migration(record, changed)
    dates = event_dates(lake)
    log.info(
        "re-deduplicating every date under the lake's rules",
        lake=lake,
        dates=len(dates),
        rules_id=record.rules_id,
        changed=changed,
    )
    left = not_migrated(lake, record.rules, dates)
    if left and len(left) < len(dates):  # e.g. a rerun of a stopped migration: the dates before are no-ops
        log.info(
            "dates already made under these rules are checked, the others re-deduplicated",
            lake=lake,
            resume_at=left[0],
            done=len(dates) - len(left),
            left=len(left),
        )
    try:
        with Progress("re-deduplicating dates", len(dates), log=log, display=display, lake=lake) as progress:
            for event_date in progress.each(dates):
                result = run_dedup(lake, event_date, record.rules, spark=spark)
                migration.results.append(result)
                if on_result is not None:
                    on_result(result)
    except BaseException:
        _log_stop(lake, record, dates)
        raise
    migration.seconds = round(time.monotonic() - started, 3)
    log.info(
        "migration done",
        lake=lake,
        rules_id=record.rules_id,
        dates=len(dates),
        recomputed=sum(1 for r in migration.results if not r.noop),
        seconds=migration.seconds,
    )
    return migration


def _log_stop(lake: Lake, record: rules_record.Recorded, dates: list[date]) -> None:
    """Where a stopped migration's rerun resumes (as the lake says, not as this run counted)."""
    try:
        left = not_migrated(lake, record.rules, dates)
    except Exception as exc:  # noqa: BLE001 - the stop's own cause matters more than this line
        log.warning("rules migration stopped; where it stopped is unknown", lake=lake, error=str(exc))
        return
    log.warning(
        "rules migration stopped: run it again with the same rules to resume",
        lake=lake,
        rules_id=record.rules_id,
        resume_at=left[0] if left else None,
        done=len(dates) - len(left),
        left=len(left),
    )
