"""Deduplicate one event date: receipt panes -> one batch-equivalent, versioned, published partition.

The rule is simple on purpose: take every distinct event that can belong to a session starting on
D, re-sessionize them with THE session rule (dedup_sql/sessionize.sql) and keep the sessions that
start on D. Accumulating panes collapse, fragments and bridged sessions stitch, by construction.

Which events can belong to a session starting on D (00:00 UTC of D is `D0`):
- none before `lo = D0 - gap`: a session starting at s >= D0 is preceded by a gap, so nothing at or
  before s - gap joins it, and s - gap >= lo;
- a pane holds a subset of one final session and its event_date is its start date, which is never
  later than any of its events. So the panes that matter are in receipt partitions whose marker's
  max_event_ts >= lo and whose event_date <= `hi`, where hi starts at D+1 (a session starting on D
  crossing midnight) and moves a day later while some session starting on D ends within the gap of
  midnight after hi (a pane starting the day after hi could join it).

Reruns are cheap: the receipts a run would read are planned from the markers alone (no Spark), and
when the current version (the Iceberg table's, tidemark.publish) already includes all of them the
run is a no-op. Assumes what the input contract says: copies of one (user_id, event_id) are the same event,
with the same event_ts.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import date, datetime, timedelta, timezone

from streaming_job import receipts
from tidemark import layout, publish, rules_record, storage
from tidemark.durations import format_duration
from tidemark.logs import get_logger
from tidemark.sessions import SessionRules

log = get_logger("dedup")

OUTPUT_COLUMNS = ("session_id", "user_id", "session_start", "session_end", "event_count", "event_ids",
                  "events", "first_receipt_ts", "last_receipt_ts")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _midnight(day: date) -> datetime:
    return datetime.combine(day, datetime.min.time(), tzinfo=timezone.utc)


def _micros(moment: datetime) -> int:
    delta = moment - _EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def _parse_iso(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def receipt_key(event_date: str, receipt_ts: str) -> str:
    """How versions name the receipt partitions they include: 'YYYY-MM-DD/receipt_ts'."""
    return f"{event_date}/{receipt_ts}"


class LakeIndex:
    """The complete receipt partitions of a lake and their markers, read once per run."""

    def __init__(self, lake: str):
        self.lake = lake
        self.dates = receipts.list_event_dates(lake)
        self._markers: dict[str, list[receipts.ReceiptPartition]] = {}

    def partitions(self, event_date: str) -> list[receipts.ReceiptPartition]:
        if event_date not in self._markers:
            stamps = receipts.list_receipts(self.lake, event_date)
            # Markers are tiny objects: on a bucket, reading them concurrently hides the latency.
            with ThreadPoolExecutor(max_workers=16) as pool:
                found = list(pool.map(lambda ts: receipts.read_marker(self.lake, event_date, ts), stamps))
            self._markers[event_date] = [m for m in found if m is not None]
        return self._markers[event_date]

    def has_dates_after(self, event_date: str) -> bool:
        return any(d > event_date for d in self.dates)


@dataclass
class Plan:
    event_date: str
    lo: datetime
    hi: str
    partitions: list[receipts.ReceiptPartition]

    @property
    def keys(self) -> list[str]:
        return sorted(receipt_key(p.event_date, p.receipt_ts) for p in self.partitions)

    @property
    def max_receipt_ts(self) -> str | None:
        return max((p.receipt_ts for p in self.partitions), default=None)

    @property
    def rows(self) -> int:
        return sum(p.rows for p in self.partitions)


def plan(index: LakeIndex, event_date: str, rules: SessionRules, hi: str) -> Plan:
    """The receipt partitions that can hold events of the sessions starting on event_date."""
    lo = _midnight(date.fromisoformat(event_date)) - rules.gap
    chosen = []
    for candidate in index.dates:
        if candidate > hi:
            break
        chosen.extend(p for p in index.partitions(candidate) if _parse_iso(p.max_event_ts) >= lo)
    return Plan(event_date, lo, hi, chosen)


@dataclass
class DedupResult:
    event_date: str
    version: str | None
    published: bool
    sessions: int
    receipts_read: int
    rows_read: int
    affected_dates: list[str] = field(default_factory=list)
    noop: bool = False
    seconds: float = 0.0

    def to_json(self) -> dict:
        return asdict(self)


def _covered(keys: list[str], marker: dict | None, rules: SessionRules) -> bool:
    # A version made under other session rules is stale whatever it includes (rules_record.py).
    return marker is not None and set(keys) <= set(marker.get("receipts", [])) \
        and not rules_record.changed_since(marker, rules)


def _noop(event_date: str, current: dict | None, started: float) -> DedupResult:
    """Nothing new to include: the current version already has every planned receipt."""
    result = DedupResult(event_date, current and current["version"], False,
                         int(current["sessions"]) if current else 0, 0, 0, [],
                         noop=True, seconds=round(time.monotonic() - started, 3))
    log.info("dedup up to date", event_date=event_date, version=result.version)
    return result


_MAX_REPLANS = 3


def run_dedup(lake: str, event_date: str, rules: SessionRules | None = None, spark=None,
              run_id: str | None = None) -> DedupResult:
    """Deduplicate and publish one event date. Idempotent, restartable, safe to run concurrently.

    `spark` is only started (when not given) if there is something new to compute. A run whose
    plan turns out stale at commit time (a concurrent run published receipts it did not read)
    plans again from the lake as it is now.
    """
    for attempt in range(1, _MAX_REPLANS + 1):
        try:
            return _run_dedup_once(lake, event_date, rules, spark, run_id if attempt == 1 else None)
        except publish.Superseded as exc:
            if attempt == _MAX_REPLANS:
                raise
            log.info("dedup replans: its plan was stale", event_date=event_date, reason=str(exc))
    raise AssertionError("unreachable")


def _run_dedup_once(lake: str, event_date: str, rules: SessionRules | None, spark,
                    run_id: str | None) -> DedupResult:
    started = time.monotonic()
    event_date = layout.check_event_date(event_date)
    # The lake's recorded rules; explicit rules that disagree are refused (RulesMismatch).
    rules, rules_id = rules_record.for_dedup(lake, rules)
    run_id = run_id or publish.new_run_id()
    index = LakeIndex(lake)
    previous = publish.newest_version(lake, event_date)
    day = date.fromisoformat(event_date)
    hi = max((day + timedelta(days=1)).isoformat(), previous["hi"] if previous else "")
    current = plan(index, event_date, rules, hi)
    if not current.partitions:
        log.info("dedup: no receipt partitions", event_date=event_date)
        return DedupResult(event_date, None, False, 0, 0, 0, noop=True,
                           seconds=round(time.monotonic() - started, 3))
    if _covered(current.keys, previous, rules):
        return _noop(event_date, previous, started)

    if rules_record.changed_since(previous, rules):
        log.info("session rules changed since the previous version: recomputing the whole date",
                 event_date=event_date, previous_version=previous["version"], rules_id=rules_id,
                 previous_rules_id=previous.get("rules_id"), gap=format_duration(rules.gap),
                 previous_gap=previous.get("gap"))
    if spark is None:
        from tidemark.spark import build_session
        spark = build_session("tidemark-dedup")
    session = isolated_session(spark)
    known = set(previous["receipts"]) if previous else set()

    while True:
        islands = compute_islands(session, lake, current, rules, known).persist()
        summary = _summary(session, islands, event_date)
        next_midnight = _midnight(date.fromisoformat(current.hi) + timedelta(days=1))
        if summary["last_end"] is not None and summary["last_end"] >= next_midnight - rules.gap \
                and index.has_dates_after(current.hi):
            # A session starting on D may continue in panes starting after hi: look one day further.
            islands.unpersist()
            hi = (date.fromisoformat(current.hi) + timedelta(days=1)).isoformat()
            log.info("dedup extends its look-ahead", event_date=event_date, hi=hi)
            current = plan(index, event_date, rules, hi)
            continue
        break
    try:
        newest = publish.newest_version(lake, event_date)
        if _covered(current.keys, newest, rules):
            return _noop(event_date, newest, started)  # a concurrent run published all of it already
        marker = _write_version(lake, event_date, run_id, islands, summary, current, rules, known, previous)
    finally:
        islands.unpersist()
    outcome = publish.commit(lake, marker)
    if not outcome.committed:
        return _noop(event_date, outcome.current, started)
    version = outcome.current["version"]
    result = DedupResult(event_date, version, True, marker["sessions"], len(current.partitions), current.rows,
                         marker["affected_dates"], seconds=round(time.monotonic() - started, 3))
    log.info("dedup published", event_date=event_date, version=version, sessions=result.sessions,
             receipts_read=result.receipts_read, rows_read=result.rows_read,
             affected_dates=result.affected_dates, seconds=result.seconds)
    return result


def isolated_session(spark):
    """A session of the same driver with its own temp views and SQL settings, so that concurrent
    runs (threads of one driver) never share views."""
    session = spark.newSession()
    session.conf.set("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
    # Listing a few hundred receipt folders is faster on the driver than as a Spark job.
    session.conf.set("spark.sql.sources.parallelPartitionDiscovery.threshold", "1024")
    return session


# Only the columns the dedup needs; the partition columns as plain strings. An explicit schema also
# spares Spark a job to infer it from the files' footers.
_PANES_SCHEMA = ("user_id STRING, session_end TIMESTAMP, "
                 "events ARRAY<STRUCT<event_ts: TIMESTAMP, event_id: STRING, event_type: STRING, payload: STRING>>, "
                 "event_date STRING, receipt_ts STRING")


def compute_islands(session, lake: str, current: Plan, rules: SessionRules, known: set[str]):
    """Every session (island) of the distinct events the plan's partitions hold from lo on
    (dedup_sessions.sql's columns), as a lazy DataFrame; `known` receipt keys mark old events.
    The session must not infer partition column types (see run_dedup)."""
    import dedup_sql
    from pyspark.sql import functions as F

    paths = [layout.receipt_dir(lake, p.event_date, p.receipt_ts) for p in current.partitions]
    panes = (session.read.schema(_PANES_SCHEMA).option("basePath", layout.sessions_root(lake)).parquet(*paths)
             # a pane ending before lo holds no event of interest (row-group statistics skip it)
             .where(F.col("session_end") >= F.lit(current.lo))
             .select("user_id", "events", "receipt_ts",
                     F.concat_ws("/", "event_date", "receipt_ts")
                     .isin(sorted(known & set(current.keys))).alias("known")))
    panes.createOrReplaceTempView("tm_dedup_panes")
    dedup_sql.run(session, "dedup_events", lo_us=_micros(current.lo)).createOrReplaceTempView("tm_session_input")
    dedup_sql.run(session, "sessionize", gap_us=rules.gap_us).createOrReplaceTempView("tm_sessionized")
    return dedup_sql.run(session, "dedup_sessions")


def _summary(session, islands, event_date: str) -> dict:
    """One pass over the (cached) islands: look-ahead need, session count, affected dates."""
    import dedup_sql

    islands.createOrReplaceTempView("tm_dedup_islands")
    row = dedup_sql.run(session, "dedup_summary", event_date=event_date).first()
    return {
        "last_end": None if row["last_end_us"] is None else _EPOCH + timedelta(microseconds=row["last_end_us"]),
        "sessions": int(row["sessions"]),
        "affected_dates": [d for d in row["affected_dates"] if d != event_date],
    }


def _write_version(lake, event_date, run_id, islands, summary, current: Plan,
                   rules: SessionRules, known, previous) -> dict:
    """Write the run's sessions of event_date as Parquet into its own folder, then its marker.
    The version id is chosen at commit time (tidemark.publish.commit), on the table's fresh state."""
    from pyspark.sql import functions as F

    from tidemark.spark import session_id_sql

    sessions = summary["sessions"]
    folder = publish.run_dir(lake, event_date, run_id)
    names: list[str] = []
    if sessions:
        # event_date is inside the files: Iceberg reads the identity partition value from them.
        out = (islands.where(F.col("event_date") == F.lit(event_date))
               .select(F.expr(session_id_sql()).alias("session_id"), *OUTPUT_COLUMNS[1:],
                       F.lit(event_date).cast("date").alias("event_date")))
        # About a million sessions per file, sorted so that row-group statistics on user_id help readers.
        files = max(1, -(-sessions // 1_000_000))
        out = out.coalesce(1) if files == 1 else out.repartition(files, "user_id")
        out.sortWithinPartitions("user_id", "session_start").write.mode("overwrite").parquet(folder)
        names = sorted(path.rsplit("/", 1)[1] for path in storage.data_files(folder))
    marker = {
        "event_date": event_date,
        "run_id": run_id,
        "files": names,
        "sessions": int(sessions),
        "receipts": current.keys,
        "receipts_read": len(current.partitions),
        "rows_read": current.rows,
        "max_receipt_ts": current.max_receipt_ts,
        "lo": current.lo.isoformat().replace("+00:00", "Z"),
        "hi": current.hi,
        "gap": format_duration(rules.gap),
        **rules_record.marker_fields(rules),
        "affected_dates": summary["affected_dates"],
        "planned_on": previous and previous["version"],
        "new_receipts": len(set(current.keys) - known),
        "created_at": datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
    }
    publish.write_marker(lake, marker)
    return marker
