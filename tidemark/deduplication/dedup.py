"""Deduplicate one event date: receipt panes -> one batch-equivalent, versioned, published partition.

The rule is simple on purpose: take every distinct event that can belong to a session starting on
D, re-sessionize them with THE session rule (dedup_sql/sessionize.sql) and keep the sessions that
start on D. Accumulating panes collapse, fragments and bridged sessions stitch, by construction.

Which receipt partitions those events can be in is planned from the markers alone
(tidemark/panes/planning.py): everything from `lo = D0 - gap` on, up to the last date on which a
pane can still join a session touching D, grown with a recomputation while the sessions reach further. The
complete plan is made before the no-op decision: a rerun whose plan holds only receipts the current
version (the Iceberg table's, tidemark.iceberg.commits) includes is a no-op (no Spark).

Dates the run may have made stale (affected dates) are recorded as rerun obligations
(tidemark/orchestration/obligations.py) before the version is published; the obligations of D
listed before planning are discharged once the run has published or found nothing new. An event is
(user_id, event_id, event_ts) and its kept copy the smallest (event_type, payload) of the copies
received (docs/input-contract.md; dedup_sql/dedup_events.sql applies it here).

Two ways to compute, one result: the full path re-sessionizes every planned receipt; the
incremental path (tidemark/deduplication/incremental.py) starts from the previous version's
islands and re-sessionizes only the users the new receipts touch. The incremental path is taken whenever its
precondition holds; `full=True` (`tidemark dedup --full`) forces the full path.

Spark Connect: this module and what it calls use only the DataFrame / SQL API (no sparkContext,
RDD or py4j), so `spark` may be a Spark Connect session.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import date, datetime, timezone
from functools import partial, reduce
from typing import TYPE_CHECKING, Any

import dedup_sql
from dedup_sql import rules as sql_rules
from tidemark.base import layout, times
from tidemark.base.durations import format_duration
from tidemark.base.logs import get_logger
from tidemark.base.phases import Phases
from tidemark.base.session_rules import SessionRules
from tidemark.base.spark import build_session
from tidemark.deduplication import buckets, changeset, execution, incremental, recheck
from tidemark.iceberg import changes, commits, run_markers, table_versions
from tidemark.notices import corrected_delivery
from tidemark.orchestration import obligations
from tidemark.panes import pack_cache, pane_reader, planning
from tidemark.panes.planning import LakeIndex, Plan, plan, receipt_key  # noqa: F401 - re-exported (bench, tests)
from tidemark.session import rules_record, session_schema
from tidemark.store.lake import Lake
from tidemark.store.locations import Folder
from tidemark.store.version_record import Mode, VersionRecord

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from tidemark.deduplication.incremental import Partition

log = get_logger("dedup")

# The table's columns but event_date (written from the run's date): THE session schema's.
OUTPUT_COLUMNS = session_schema.TABLE_COLUMNS[:-1]


@dataclass
class DedupResult:
    """What one dedup run did: the version it published (or found current) and what it read."""

    event_date: date
    version: str | None
    published: bool
    sessions: int
    receipts_read: int
    rows_read: int
    affected_dates: list[date] = field(default_factory=list)
    noop: bool = False
    seconds: float = 0.0
    # how it computed (tidemark/deduplication/incremental.py); full_reason: why not incremental
    mode: Mode = "full"
    full_reason: str = ""
    # Seconds per phase of a run that computed (plan, spark, compute, write, commit, changes, notice): where a
    # dedup's time goes, in its log line and in bench/dedup_partition.py's profile.
    phases: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The result as JSON (the CLI's output, the DAG's log): dates as YYYY-MM-DD."""
        return {
            **asdict(self),
            "event_date": layout.event_date_text(self.event_date),
            "affected_dates": [layout.event_date_text(d) for d in self.affected_dates],
        }


def _covered(keys: list[str], marker: VersionRecord | None, rules: SessionRules) -> bool:
    # Planned receipts all included (tidemark/panes/planning.py: only versions that recorded their reach
    # count), and made under the lake's session rules (rules_record.py): else the date is recomputed.
    return planning.covers(marker, keys) and not rules_record.changed_since(marker, rules)


def _noop(event_date: date, current: VersionRecord | None, started: float) -> DedupResult:
    """Nothing new to include: the current version already has every planned receipt."""
    result = DedupResult(
        event_date,
        current.version if current else None,
        False,
        current.sessions if current else 0,
        0,
        0,
        [],
        noop=True,
        seconds=round(time.monotonic() - started, 3),
    )
    log.info("dedup up to date", event_date=event_date, version=result.version)
    return result


_MAX_REPLANS = 3


def run_dedup(
    lake: Lake,
    event_date: date,
    rules: SessionRules | None = None,
    spark: SparkSession | None = None,
    run_id: str | None = None,
    full: bool = False,
    connect: Callable[[], SparkSession] | None = None,
) -> DedupResult:
    """Deduplicate and publish one event date. Idempotent, restartable, safe to run concurrently.

    `spark` is only started (when not given) if there is something new to compute: by `connect`
    when given (e.g. the result of a Spark Connect session being opened meanwhile, as the DAG's
    task does, so that the session's round trips overlap the planning), else build_session. `full` forces
    the full path (every planned receipt re-sessionized) instead of the incremental one, and is never
    a no-op: it publishes unless its islands equal the current version's (recheck). A run whose
    plan turns out stale at commit time (a concurrent run published receipts it did not read)
    plans again from the lake as it is now.
    """
    # Typed callers pass a date; tests and scripts that still pass text get it parsed here, once
    # (the same transition as the Lake's path methods).
    day = layout.as_event_date(event_date)
    for attempt in range(1, _MAX_REPLANS + 1):
        try:
            return _run_dedup_once(lake, day, rules, spark, run_id if attempt == 1 else None, full, connect)
        except commits.Superseded as exc:
            if attempt == _MAX_REPLANS:
                raise
            log.info("dedup replans: its plan was stale", event_date=event_date, reason=str(exc))
    raise AssertionError("unreachable")


def _run_dedup_once(
    lake: Lake,
    day: date,
    rules: SessionRules | None,
    spark: SparkSession | None,
    run_id: str | None,
    full: bool = False,
    connect: Callable[[], SparkSession] | None = None,
) -> DedupResult:
    started = time.monotonic()
    # The lake's recorded rules; explicit rules that disagree are refused (RulesMismatch).
    rules, rules_id = rules_record.for_dedup(lake, rules)
    run_id = run_id or run_markers.new_run_id()
    # Listed before planning: the obligations this run acts on (see tidemark/orchestration/obligations.py).
    owed = obligations.pending(lake, day)
    result = _run(lake, day, rules, rules_id, spark, run_id, started, full, connect)
    obligations.discharge(lake, owed, result.version)
    return result


def _run(
    lake: Lake,
    day: date,
    rules: SessionRules,
    rules_id: str,
    spark: SparkSession | None,
    run_id: str,
    started: float,
    full: bool = False,
    connect: Callable[[], SparkSession] | None = None,
) -> DedupResult:
    event_date = day
    index = LakeIndex(lake)
    previous = table_versions.current_version(lake, day)
    # --full always recomputes: whether to publish is decided on its result (below)
    if not full and _quick_noop(index, event_date, previous, rules):
        return _noop(event_date, previous, started)
    current = planning.plan_for_rerun(index, day, rules, previous)
    nothing_new = _nothing_new(event_date, current, None if full else previous, rules, started)
    if nothing_new is not None:
        return nothing_new
    # A previous run killed between its commit and its changeset's append: appended first, so that
    # the date's changesets reach the changes table in version order (a no-op when done).
    changes.ensure(lake, previous)
    phases = Phases(started)
    phases.done("plan")

    if previous is not None and rules_record.changed_since(previous, rules):
        log.info(
            "session rules changed since the previous version: recomputing the whole date",
            event_date=event_date,
            previous_version=previous.version,
            rules_id=rules_id,
            previous_rules_id=previous.rules_id,
            gap=format_duration(rules.gap),
            previous_gap=format_duration(previous.gap) if previous.gap else None,
        )
    if spark is None:
        spark = connect() if connect is not None else build_session("tidemark-dedup")
    phases.done("spark")  # getting the session: ~0 when it is given (a warm one) or connected meanwhile
    known = set(previous.receipts) if previous else set()

    fallback = "--full" if full else ""
    while True:
        start, why = (None, fallback) if fallback else incremental.base(previous, current, rules)
        execution.tune(spark, start.rows_read if start is not None else current.rows)
        early = None
        if start is not None:
            islands = incremental.correct(spark, lake, current, rules, start, read_panes)
            # A correction that keeps its layout knows where its rows go before its summary: its
            # writes start beside the summary's Spark job, and are discarded if it computes again.
            early = _write_early(lake, day, run_id, islands, start.previous)
        else:
            islands = _full(spark, lake, current, rules, known)
        try:
            summary = islands.summary
        except BaseException:
            if early is not None:
                early.discard()
            raise
        if early is not None and _replans(index, current, rules, summary):
            early.discard()
            early = None
        if start is not None and summary["past_horizon"]:
            # A corrected session may continue into islands the context does not keep.
            islands.release()
            fallback = "a corrected session reaches the context horizon"
            log.info(
                "dedup falls back to the full path",
                event_date=event_date,
                reason=fallback,
                sessions=summary["past_horizon"],
            )
            continue
        bigger = planning.grown(index, current, rules, summary["reach"])
        if bigger is None:
            break
        # Sessions touching D reach further than the plan read: panes of later dates may join them.
        islands.release()
        log.info(
            "dedup extends its look-ahead",
            event_date=event_date,
            hi=bigger.hi,
            reach=summary["reach"],
        )
        current = bigger
    phases.done("compute")  # the islands and their summary (pinned), every replan included
    written = False
    try:
        newest = table_versions.current_version(lake, day)
        if _covered(current.keys, newest, rules):
            if not full:
                if early is not None:
                    early.discard()
                    early = None
                return _noop(event_date, newest, started)  # a concurrent run published all of it already
            unchanged = _full_unchanged(spark, lake, event_date, current, islands, newest, rules, started)
            if unchanged is not None:
                return unchanged
        # Durable before anything is published: a crash from here on cannot lose a neighbour's
        # rerun. Named after the newest receipt read (the version id is chosen at commit time).
        assert current.max_receipt_ts is not None  # a plan with receipts to compute
        obligations.record(lake, summary["affected_dates"], event_date, current.max_receipt_ts, run_id)
        read = (len(start.new), start.rows_read) if start is not None else (len(current.partitions), current.rows)
        mode: Mode = "full" if start is None else "incremental"
        marker = _write_version(
            lake, day, run_id, islands, summary, current, rules, known, previous, mode=mode, read=read, early=early
        )
        written = True
    finally:
        if not written:  # returned early (nothing to publish) or failed: released now
            if early is not None:
                early.wait()
            islands.release()
    phases.done("write")
    # The pinned frames and their views are released beside the commit and what follows it (a few
    # round trips to Spark; the commit reads only the lake), joined before the run returns.
    with ThreadPoolExecutor(1, thread_name_prefix="dedup-release") as pool:
        released = pool.submit(islands.release)
        outcome = commits.commit(lake, marker, replace=full)
        phases.done("commit")
        if outcome.committed:
            changes.ensure_after_commit(lake, outcome.current)
            phases.done("changes")
            # The corrected notice, recorded (not sent) in the process that committed, however the
            # dedup ran; the DAG's notify_corrected task sends it (tidemark/notices/corrected_delivery.py).
            corrected_delivery.record_after_commit(lake, outcome.current)
            phases.done("notice")
    released.result()
    if not outcome.committed:
        if full:  # a concurrent run published more receipts meanwhile: recompute over them
            raise commits.Superseded(f"{event_date}: version {outcome.current.version} read receipts this run did not")
        return _noop(event_date, outcome.current, started)
    version = outcome.current.version
    result = DedupResult(
        event_date,
        version,
        True,
        marker.sessions,
        read[0],
        read[1],
        list(marker.affected_dates),
        seconds=round(time.monotonic() - started, 3),
        mode=mode,
        full_reason=why,
        phases=phases.seconds,
    )
    log.info(
        "dedup published",
        event_date=event_date,
        version=version,
        sessions=result.sessions,
        mode=mode,
        full_reason=why or None,
        receipts_read=result.receipts_read,
        rows_read=result.rows_read,
        affected_dates=result.affected_dates,
        seconds=result.seconds,
        phases=result.phases,
    )
    return result


def _full_unchanged(
    spark: SparkSession,
    lake: Lake,
    event_date: date,
    current: Plan,
    islands: incremental.Islands,
    newest: VersionRecord | None,
    rules: SessionRules,
    started: float,
) -> DedupResult | None:
    """A full run whose receipts the current version already read: its result when nothing changed.

    Its result when it recomputed exactly the version's islands (nothing to publish), else None
    (publish it, replacing the version).

    Raises:
        commits.Superseded: the version read more (a concurrent run): the run replans.
    """
    assert newest is not None  # it covers the plan
    if set(newest.receipts) != set(current.keys):
        raise commits.Superseded(
            f"{event_date}: the current version {newest.version} includes receipts this full run did not read"
        )
    if not recheck.same_islands(spark, lake, islands, newest, rules):
        log.info("dedup --full found another result than the current version's", event_date=event_date)
        return None
    log.info("dedup --full recomputed the current version's result", event_date=event_date, version=newest.version)
    rows = current.rows
    return DedupResult(
        event_date,
        newest.version,
        False,
        newest.sessions,
        len(current.partitions),
        rows,
        seconds=round(time.monotonic() - started, 3),
        full_reason="--full",
    )


def _quick_noop(index: LakeIndex, event_date: date, previous: VersionRecord | None, rules: SessionRules) -> bool:
    """The no-op decision from listings and the markers of the partitions the previous version lacks.

    None of those it holds is read: a cost independent of the lake's age (planning.quick_covered).
    """
    return (
        previous is not None
        and not rules_record.changed_since(previous, rules)
        and planning.quick_covered(index, event_date, rules, previous)
    )


def _nothing_new(
    event_date: date, current: Plan, previous: VersionRecord | None, rules: SessionRules, started: float
) -> DedupResult | None:
    """The no-op decision, before any Spark: no receipts at all, or every planned one included."""
    if not current.partitions:
        log.info("dedup: no receipt partitions", event_date=event_date)
        return DedupResult(event_date, None, False, 0, 0, 0, noop=True, seconds=round(time.monotonic() - started, 3))
    if _covered(current.keys, previous, rules):
        return _noop(event_date, previous, started)
    return None


def up_to_date(lake: Lake, event_date: date, rules: SessionRules | None = None) -> DedupResult | None:
    """run_dedup's no-op decision alone, without Spark (the DAG's skip check).

    The no-op result when the current version already includes every receipt partition the date's
    complete plan holds (its pending obligations then discharged, as run_dedup does), else None
    (Spark needed; nothing discharged: the run that computes lists them itself).
    """
    started = time.monotonic()
    event_date = layout.as_event_date(event_date)  # as run_dedup
    rules, _ = rules_record.for_dedup(lake, rules)
    owed = obligations.pending(lake, event_date)  # listed before planning, as in run_dedup
    index = LakeIndex(lake)
    previous = table_versions.current_version(lake, event_date)
    result: DedupResult | None
    if _quick_noop(index, event_date, previous, rules):
        result = _noop(event_date, previous, started)
    else:
        current = planning.plan_for_rerun(index, event_date, rules, previous)
        result = _nothing_new(event_date, current, previous, rules, started)
    if result is not None:
        obligations.discharge(lake, owed, result.version)
    return result


# Only the columns the dedup needs (spelled once: tidemark/panes/pane_reader.py, which the packs
# share). An explicit schema also spares Spark a job to infer it from the files' footers.
_PANES_SCHEMA = pane_reader.DEDUP_COLUMNS


def read_panes(
    spark: SparkSession, lake: Lake, partitions: list[Partition], lo: datetime, pack_date: date | None = None
) -> DataFrame:
    """The panes of these receipt partitions that end at or after lo, with their event_date and receipt_ts.

    Both as strings: the explicit schema also keeps Spark from inferring their types.

    A date with many partitions needed is read from its best pack (tidemark/panes/pack_cache.py) and the
    partitions that pack does not hold. `pack_date`: a date none of whose panes lo can drop (every
    pane of D ends after D's midnight); when PACK_AT of its partitions were read from their folders,
    a new pack of all its needed partitions is written from the panes read (a cache: a failure to
    write it is logged, not raised).
    """
    packed, rest = pack_cache.cover(lake, partitions, _PANES_SCHEMA)
    parts = [_read_pack(spark, lake, pack, lo) for pack in packed]
    if rest or not parts:
        parts.append(_read_receipts(spark, lake, rest, lo))
    panes = reduce(lambda a, b: a.unionByName(b), parts)
    if pack_date is not None and sum(p.event_date == pack_date for p in rest) >= pack_cache.PACK_AT:
        own = [p.receipt_ts for p in partitions if p.event_date == pack_date]
        try:
            pack_cache.write(lake, pack_date, panes, own, _PANES_SCHEMA)
        except Exception as exc:  # noqa: BLE001 - a cache: the dedup goes on without it
            log.warning("pack not written", event_date=pack_date, error=f"{type(exc).__name__}: {exc}")
    return panes


def _read_pack(spark: SparkSession, lake: Lake, pack: pack_cache.Pack, lo: datetime) -> DataFrame:
    """The panes of a pack that end at or after lo."""
    # pyspark when Spark runs only: the DAG's skip check imports this module without it
    from pyspark.sql import functions as F

    return (
        spark.read.schema(_PANES_SCHEMA)
        # the pack's folder as the base: no partition value is read from its path (its rows hold them)
        .option("basePath", lake.pack_dir(pack.event_date, pack.pack_id))
        .parquet(*pack.file_uris(lake))
        .where(F.col("session_end") >= F.lit(lo))
    )


def _read_receipts(spark: SparkSession, lake: Lake, partitions: list[Partition], lo: datetime) -> DataFrame:
    """The panes of receipt partitions, read from their folders, that end at or after lo."""
    # pyspark when Spark runs only: the DAG's skip check imports this module without it
    from pyspark.sql import functions as F

    paths: list[str] = [lake.receipt_dir(p.event_date, p.receipt_ts) for p in partitions]
    if len(paths) >= pane_reader.FOLDERS_FOR_ARROW:  # thousands of small folders: see tidemark/panes/pane_reader.py
        panes: DataFrame = pane_reader.read(spark, lake.sessions_root(), paths, _PANES_SCHEMA, lo)
        return panes
    return (
        spark.read.schema(_PANES_SCHEMA)
        .option("basePath", lake.sessions_root())
        .parquet(*paths)
        # a pane ending before lo holds no event of interest (row-group statistics skip it)
        .where(F.col("session_end") >= F.lit(lo))
    )


# Every island of a plan's panes: dedup_events.sql into sessionize.sql (THE session rule) into
# dedup_sessions.sql, composed as one query (one analysis, one round trip over Spark Connect).
ISLANDS_QUERY = dedup_sql.compose(
    "dedup_sessions", sessionized=dedup_sql.compose("sessionize", events=dedup_sql.text("dedup_events"))
)


def known_receipt(key: Column, planned: list[str], known: set[str]) -> Column:
    """A Column: is this pane's receipt key (`key`, every one among `planned`) one already read?

    Read by the previous version. Spelled with the smaller of the two lists of literals: a date
    whose versions read thousands of receipts (a 10 s trigger writes 8,640 a day) would otherwise
    put all of them in every query's plan, and a 10k-literal IN list cost ~14 s of planning in the
    incremental path (tidemark/deduplication/incremental.py). The receipts new since that version
    are few.
    """
    # pyspark when Spark runs only: the DAG's skip check imports this module without it
    from pyspark.sql import functions as F

    old = sorted(set(planned) & known)
    new = sorted(set(planned) - known)
    if len(new) <= len(old):
        return ~key.isin(new) if new else F.lit(True)
    return key.isin(old) if old else F.lit(False)


def compute_islands(spark: SparkSession, lake: Lake, current: Plan, rules: SessionRules, known: set[str]) -> DataFrame:
    """Every session (island) of the distinct events the plan's partitions hold from lo on: the full path.

    dedup_sessions.sql's columns, as a lazy DataFrame; `known` receipt keys mark old events.
    """
    # pyspark when Spark runs only: the DAG's skip check imports this module without it
    from pyspark.sql import functions as F

    # The date's own panes all end after its midnight, which is after lo: all of them are read, and
    # a pack of them can be written from what is read.
    day = current.event_date
    own = day if planning.midnight(day) >= current.lo else None
    panes = read_panes(spark, lake, current.partitions, current.lo, pack_date=own).select(
        "user_id",
        "events",
        "receipt_ts",
        known_receipt(F.concat_ws("/", "event_date", "receipt_ts"), current.keys, known).alias("known"),
    )
    return dedup_sql.run_text(
        spark, ISLANDS_QUERY, {"panes": panes}, lo_us=times.to_micros(current.lo), gap_us=rules.gap_us
    )


def _full(spark: SparkSession, lake: Lake, current: Plan, rules: SessionRules, known: set[str]) -> incremental.Islands:
    """The full path: every planned receipt's events re-sessionized.

    Pinned (execution.pin) for the summary (one pass: reach (tidemark/panes/planning.py), session
    count, affected dates, context size) and the writes.
    """
    day = current.event_date
    until = incremental.horizon(day, rules)
    # Pinned for the summary and the writes; it goes to SQL through a view kept until release
    # (dedup_sql.run's `views`: pyspark's own views, dropped when spark.sql returns, uncache their
    # DataFrame; the 1M-session event log showed the dedup computed twice, for the summary and the write).
    islands = execution.pin(compute_islands(spark, lake, current, rules, known), current.rows)
    views: list[str] = []
    row = dedup_sql.run(
        spark,
        "dedup_summary",
        {"islands": islands},
        views=views,
        event_date=layout.event_date_text(day),
        horizon_us=times.to_micros(until),
        gap_us=rules.gap_us,
    ).first()
    sessions, context = incremental.split(islands, day, until)
    summary = incremental.summary_of(row, day)
    return incremental.Islands(sessions, context, lambda: summary, [islands], spark=spark, views=views)


def _write_version(
    lake: Lake,
    day: date,
    run_id: str,
    islands: incremental.Islands,
    summary: incremental.Summary,
    current: Plan,
    rules: SessionRules,
    known: set[str],
    previous: VersionRecord | None,
    mode: Mode = "full",
    read: tuple[int, int] | None = None,
    early: _EarlyWrites | None = None,
) -> VersionRecord:
    """Write the run's sessions of event_date as Parquet into its own folder, then the rest, then its marker.

    The other islands go into its `context/` (tidemark/deduplication/incremental.py: the next run's
    starting point), its changeset into its `changes/` (tidemark/deduplication/changeset.py), then
    its marker. The version id is chosen at commit time (tidemark.iceberg.commits.commit), on the
    table's fresh state. `early`: the writes `_write_early` started before the summary was known,
    waited for here, and made what the summary says (a context written again in another file
    count, the folders of what the version does not have removed).
    """
    sessions = summary["sessions"]
    folder = lake.run_dir(day, run_id)
    names: list[str] = []
    count = None
    writes: list[Callable[[], None]] = []
    if early is not None:
        early.wait()
    if sessions:
        # One file per bucket of users (tidemark/deduplication/buckets.py): the buckets the run
        # rewrote, in the count its predecessor's layout keeps, or all of them. Not sorted: a file
        # of this size is one row group, so a sort would buy readers nothing.
        count = islands.buckets or buckets.count_for(sessions)
        if early is None:
            rewritten = islands.rewritten if islands.buckets else None
            writes.append(partial(buckets.write, _table_rows(islands.sessions, day), count, folder, rewritten))
    elif early is not None:
        early.drop_sessions()  # no session of the date is left: no file, as without an early write
    context_dir = incremental.context_dir(lake, day, run_id)
    if summary["context_rows"]:
        # Not part of the table (files are registered by name, this folder is not listed):
        # only the next incremental run of this date reads it.
        files = _context_files(summary["context_rows"])
        if early is None or early.context_files != files:
            writes.append(partial(_write_context, islands.context, files, context_dir))
    elif early is not None:
        context_dir.delete()  # no island besides the date's: no context, as without an early write
    _run_side_by_side(writes)
    if sessions:
        names = _bucket_files(folder)
    # Its changeset against `previous` (tidemark/deduplication/changeset.py), staged inside the folder
    # the writes above replaced; its counts go into the marker.
    carried = islands.carried if sessions else ()
    staged = changeset.stage(lake, day, run_id, islands, previous, written=names, carried=carried)
    receipts_read, rows_read = read or (len(current.partitions), current.rows)
    marker = VersionRecord(
        event_date=day,
        run_id=run_id,
        files=tuple(names),
        buckets=count,
        carried=carried,
        # a version without sessions has no files, so no layout: its marker says nothing of one
        absent=frozenset() if sessions else frozenset({"buckets", "carried"}),
        sessions=int(sessions),
        receipts=tuple(current.keys),
        receipts_read=receipts_read,
        rows_read=rows_read,
        mode=mode,
        context_rows=summary["context_rows"],
        max_receipt_ts=current.max_receipt_ts,
        planned_through=current.planned_through,
        lo=current.lo,
        horizon=incremental.horizon(day, rules),
        session_schema=session_schema.VERSION,  # the columns its files (and context) hold
        hi=current.hi,
        reach=summary["reach"],
        gap=rules.gap,
        **rules_record.marker_fields(rules),
        affected_dates=tuple(summary["affected_dates"]),
        planned_on=previous.version if previous else None,
        new_receipts=len(set(current.keys) - known),
        changes=staged,
        created_at=now(),
    )
    run_markers.write_marker(lake, marker)
    return marker


def _table_rows(sessions: DataFrame, day: date) -> DataFrame:
    """A run's sessions of `day` as the table's rows (its files' columns)."""
    # pyspark when Spark runs only: the DAG's skip check imports this module without it
    from pyspark.sql import functions as F

    # event_date is inside the files: Iceberg reads the identity partition value from them.
    return sessions.select(
        F.expr(sql_rules.session_id()).alias("session_id"),
        *OUTPUT_COLUMNS[1:],
        F.lit(layout.event_date_text(day)).cast("date").alias("event_date"),
    )


def _context_files(rows: int) -> int:
    """How many files a version's island context of this many rows is written in."""
    return max(1, min(8, rows // 1_000_000 + 1))


def _write_context(context: DataFrame, files: int, folder: Folder) -> None:
    """Write a version's island context into its folder (`incremental.context_dir`)."""
    context.coalesce(files).write.mode("overwrite").parquet(folder)


@dataclass
class _EarlyWrites:
    """A correction's writes, started beside the Spark job of its summary (`_write_early`)."""

    pool: ThreadPoolExecutor
    futures: list[Future[None]]
    folder: Folder  # the run's folder: its bucket folders, and its context folder inside
    context_files: int  # the file count the context was written in

    def wait(self) -> None:
        """Wait for both writes; the first error, if any, raised."""
        self.pool.shutdown(wait=True)
        for future in self.futures:
            future.result()

    def drop_sessions(self) -> None:
        """Remove the bucket folders written (there are none when no session of the date is left)."""
        for name in self.folder.subfolder_names():
            if name.startswith(buckets.BUCKET_DIR + "="):
                self.folder.folder(name).delete()

    def discard(self) -> None:
        """Wait for the writes to end, then remove the run's folder: the run computes again, publishes nothing, or failed.

        What they wrote is not used, so neither is how they ended.
        """
        self.pool.shutdown(wait=True)
        self.folder.delete()


def _write_early(
    lake: Lake, day: date, run_id: str, islands: incremental.Islands, previous: VersionRecord
) -> _EarlyWrites | None:
    """Start a correction's two writes (its sessions' buckets, its context) before its summary is known.

    Only for a correction that keeps its predecessor's layout (`islands.buckets`): where its rows go
    does not depend on the summary then. The context's file count is the previous version's;
    `_write_version` writes it again if the summary asks for another, and removes what the summary
    says the version does not have. None when the layout is not kept (the writes wait for the summary).
    """
    if not islands.buckets:
        return None
    files = _context_files(previous.context_rows or 0)
    pool = ThreadPoolExecutor(2, thread_name_prefix="dedup-write")
    futures = [
        pool.submit(
            buckets.write,
            _table_rows(islands.sessions, day),
            islands.buckets,
            lake.run_dir(day, run_id),
            islands.rewritten,
        ),
        pool.submit(_write_context, islands.context, files, incremental.context_dir(lake, day, run_id)),
    ]
    return _EarlyWrites(pool, futures, lake.run_dir(day, run_id), files)


def _replans(index: LakeIndex, current: Plan, rules: SessionRules, summary: incremental.Summary) -> bool:
    """Whether a correction with this summary computes again (the loop in `_run`), so its writes are not the version's."""
    return bool(summary["past_horizon"]) or planning.grown(index, current, rules, summary["reach"]) is not None


def _run_side_by_side(actions: list[Callable[[], None]]) -> None:
    """Run Spark actions at once, one thread each; the first one's error, if any, raised when all have ended.

    A small correction's writes are a few fixed-cost Spark jobs each (planning, scheduling, a
    file committer) on a few hundred rows: side by side they overlap on the driver's cores. They
    write into separate folders, so neither sees the other's files.
    """
    if len(actions) <= 1:
        for action in actions:
            action()
        return
    with ThreadPoolExecutor(len(actions), thread_name_prefix="dedup-write") as pool:
        futures = [pool.submit(action) for action in actions]
    for future in futures:
        future.result()


def now() -> datetime:
    """Now, UTC, to the millisecond: a version's created_at as its marker keeps it."""
    moment = datetime.now(timezone.utc)
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def _bucket_files(folder: Folder) -> list[str]:
    """The Parquet files buckets.write wrote into a run's folder, as 'bucket=<k>/<name>'."""
    base = folder.at()[1].rstrip("/") + "/"
    names = []
    for info in folder.walk_files():
        relative = info.path[len(base) :] if info.path.startswith(base) else info.path
        top, _, name = relative.partition("/")
        if top.startswith(buckets.BUCKET_DIR + "=") and name.endswith(".parquet") and not name.startswith(("_", ".")):
            names.append(relative)
    return sorted(names)
