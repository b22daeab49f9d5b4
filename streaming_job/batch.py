"""One micro-batch, end to end: parse, quarantine, sessionize against state, write panes, commit.

Everything here is a deterministic function of (state before the batch, the batch's files, the
batch's timestamp from the offset log), so a batch that Spark replays after a crash produces the
same receipt_ts, the same panes and the same state, and skips partitions it had completed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

import dedup_sql
from streaming_job import pane_writer, parse
from streaming_job.partitions import sized_shuffle
from streaming_job.state import STATE_COLUMNS, StateStore
from streaming_job.state import watermark_text as state_watermark_text
from tidemark.base import layout
from tidemark.base.logs import get_logger
from tidemark.base.phases import Phases
from tidemark.ingest import landing, landing_archive, landing_ledger
from tidemark.ingest.contract import InputRules
from tidemark.panes import receipt_index, receipts
from tidemark.panes.receipts import BatchReport
from tidemark.session import session_schema
from tidemark.session.sessions import SessionRules
from tidemark.store import storage
from tidemark.store.lake import QUARANTINE_MARKER, Lake

log = get_logger("stream")


STOP_MARK = "tidemark-stop-requested"

# A batch's refused lines, up to this many bytes of them, are written to the quarantine by the
# driver (collected as Arrow: one Spark job); a larger quarantine by Spark's writer.
DRIVER_QUARANTINE_BYTES = 64 << 20
QUARANTINE_FILE = "part-00000.parquet"

# The columns of what a batch writes (BatchProcessor._rows) beyond the panes': the state's own and
# which of the two a row goes to; and the state's columns that come from a column of another name.
NOT_PANE = ("closed", "state_pane_count", "emit", "retain")
STATE_FROM = {"pane_count": "state_pane_count"}

# No value of one batch (its id, receipt time, watermarks) is a literal of the Spark plans a batch
# runs: the pane writer adds the batch's values to its files (pane_writer.BatchValues says why), the
# quarantine's writer to its file, and the watermarks reach the SQL as a row (`watermarks`).

# A micro-batch's sessionizing: stream_input.sql (state and batch merged, one row per event) into
# sessionize.sql (THE session rule) into stream_panes.sql (which panes to emit and keep), composed
# as one query: three spark.sql calls cost ~30-40 ms more of driver time per batch.
STREAM_QUERY = dedup_sql.compose(
    "stream_panes", sessionized=dedup_sql.compose("sessionize", events=dedup_sql.text("stream_input"))
)


class StopRequested(RuntimeError):
    """Raised instead of starting a batch after a graceful stop was asked for.

    Returning without processing would let Spark commit the batch, losing its files; failing it
    leaves it uncommitted in the offset log, so the next run replays exactly that batch.
    """


class StopFlag(Protocol):
    """What the processor asks of its stop signal (a threading.Event, or the job's either-of-two)."""

    def is_set(self) -> bool: ...


class BatchProcessor:
    """The foreachBatch function of the stream. `listeners` get a BatchReport after each commit."""

    def __init__(
        self,
        lake: Lake,
        checkpoint: str,
        rules: SessionRules,
        listeners: list[Callable[[BatchReport], None]] | None = None,
        stop_requested: StopFlag | None = None,
        input_rules: InputRules | None = None,
        landing: str | None = None,
        generation: landing_archive.Generation | None = None,
        archive: bool = False,
    ):
        self.lake = Lake.open(lake)  # the Spark job's boundary: a URI or a Lake
        # Spark's batch ids restart at 0 in each checkpoint generation (tidemark.ingest.landing_archive);
        # the batch id everywhere else (state versions, panes, ledger, notices) is batch_base + it.
        self.generation = generation or landing_archive.Generation(0, 0)
        self.archive = archive  # record each batch's input files for the archive (landing_archive)
        self.landing = landing  # the landing folder: files are named relative to it (tidemark.ingest.landing)
        self.checkpoint = checkpoint
        self.rules = rules
        self.input_rules = input_rules or InputRules()
        self.listeners = list(listeners or [])
        self.stop_requested = stop_requested

    def __call__(self, batch: DataFrame, spark_batch_id: int) -> None:
        batch_id = self.generation.batch_base + spark_batch_id
        if self.stop_requested is not None and self.stop_requested.is_set():
            log.info("stop requested: batch left for the next run", batch_id=batch_id)
            raise StopRequested(f"{STOP_MARK}: batch {batch_id} left uncommitted for the next run")
        started = time.monotonic()
        phases = Phases(started)
        report = self._process(batch, batch_id, phases)  # caches the parsed batch: one read of the files
        if report is None:
            return
        report.seconds = round(time.monotonic() - started, 3)
        report.phases = phases.seconds
        log.info(
            "batch committed",
            batch_id=batch_id,
            receipt_ts=report.receipt_ts,
            input_lines=report.input_lines,
            valid_events=report.valid_events,
            quarantined=report.quarantined,
            open_sessions=report.open_sessions,
            watermark=state_watermark_text(report.watermark_us),
            partitions=[p.event_date for p in report.partitions],
            seconds=report.seconds,
            phases=report.phases,
        )
        for listener in self.listeners:
            listener(report)

    def _process(self, batch: DataFrame, batch_id: int, phases: Phases) -> BatchReport | None:
        spark = batch.sparkSession
        parsed = parse.with_parse(batch, self.input_rules).persist()
        try:
            by_file = self._by_file(parsed)
            phases.done("check")  # the input contract over every line, cached, and the totals
            if not by_file:
                return None  # a batch without lines writes nothing
            receipt_ts = layout.receipt_ts_from_millis(max(row["receipt_ms"] for row in by_file))
            receipt_us = max(int(row["receipt_us"]) for row in by_file)
            # Only a batch replayed after a crash can find receipt partitions of its own complete:
            # this batch's ledger entry, written before anything else of it, is already there.
            replay = self.lake.has_landing_ledger_entry(receipt_ts)
            totals, skipped = self._admit(by_file, receipt_ts, batch_id)
            if skipped:  # lines of files the landing rule does not take as input: not events, not quarantined
                parsed = parsed.where(~F.col("source_file").isin(skipped))
            if not totals["lines"]:
                return None  # only files that are not input: recorded in the ledger, nothing else
            quarantined = int(totals["lines"] - totals["valid"])
            if quarantined:
                self._write_quarantine(parsed, receipt_ts, batch_id, quarantined, int(totals["refused_bytes"]))
            phases.done("quarantine")

            store = StateStore(spark, self.checkpoint)
            before, state = store.before(batch_id)
            w_prev_us, watermark_us = self._watermarks(
                before.watermark_us, totals["max_event_us"], receipt_us, batch_id
            )

            # the shuffles sized to the batch: set before the queries below are planned
            with sized_shuffle(spark, int(totals["lines"])):
                result = sessionize(spark, parse.valid_events(parsed), state, self.rules, w_prev_us, watermark_us)
                rows = self._rows(result)
                complete = self._complete(rows, receipt_ts) if replay else frozenset()
                # One pass: sessionized, the panes and the state's files written, their statistics
                # back. Not cached: nothing else reads the sessions (three actions did before).
                stats, open_sessions = pane_writer.write_batch(
                    rows,
                    self.lake.sessions_root(),
                    store.prepare(batch_id),
                    self._pane_columns() + [F.col(name) for name in NOT_PANE],
                    [*session_schema.PANE_COLUMNS, "event_date", "receipt_ts"],
                    {name: STATE_FROM.get(name, name) for name in STATE_COLUMNS},
                    pane_writer.BatchValues(batch_id, receipt_ts, watermark_us),
                    complete,
                )
            phases.done("sessionize")  # state read, merged, sessionized; panes and state files written
        finally:
            parsed.unpersist()
        written = self._register(stats, complete, receipt_ts, batch_id, watermark_us)
        store.commit(batch_id, open_sessions, watermark_us, receipt_ts)
        phases.done("markers")  # the receipt partitions registered and completed, the state's version
        return BatchReport(
            batch_id,
            receipt_ts,
            int(totals["lines"]),
            int(totals["valid"]),
            quarantined,
            watermark_us,
            open_sessions,
            written,
        )

    @staticmethod
    def _by_file(parsed: DataFrame) -> list:
        """One Spark action over the checked batch: per file, its lines, valid events, newest event
        time and (when the source gives them) size and modification time; and the batch's time."""
        valid = F.col("reason").isNull()
        facts = [F.max(name).alias(name) for name in parse.FILE_FACTS if name in parsed.columns]
        return (
            parsed.groupBy("source_file")
            .agg(
                F.count(F.lit(1)).alias("lines"),
                F.count_if(valid).alias("valid"),
                F.sum(F.length("raw")).alias("refused_bytes"),  # `raw` is kept for refused lines only
                F.max(F.when(valid, F.unix_micros("event_ts"))).alias("max_event_us"),
                F.max(F.unix_millis("receipt_time")).alias("receipt_ms"),
                F.max(F.unix_micros("receipt_time")).alias("receipt_us"),
                *facts,
            )
            .collect()
        )

    def _admit(self, by_file: list, receipt_ts: str, batch_id: int) -> tuple[dict, list[str]]:
        """The landing rule over the batch's files (tidemark.ingest.landing), the batch's ledger entry
        written, and the totals of its input files. Returns (totals, URIs of files not read)."""
        files, skipped, newest = [], [], []
        totals: dict[str, Any] = {"lines": 0, "valid": 0, "refused_bytes": 0}
        for found in by_file:
            row = found.asDict()
            path = landing.relative_path(self.landing, row["source_file"])
            verdict = landing.classify(path)
            files.append(
                {
                    "path": path,
                    "size": row.get("file_size"),
                    "mtime_ms": row.get("file_mtime_ms"),
                    "lines": int(row["lines"]),
                    "verdict": verdict,
                }
            )
            if verdict != landing.INPUT:
                skipped.append(row["source_file"])
                continue
            totals["lines"] += int(row["lines"])
            totals["valid"] += int(row["valid"])
            totals["refused_bytes"] += int(row["refused_bytes"] or 0)
            if row["max_event_us"] is not None:
                newest.append(row["max_event_us"])
        totals["max_event_us"] = max(newest, default=None)
        if self.archive:  # before the ledger entry: an empty queue means no batch did half its work
            landing_archive.enqueue(
                self.checkpoint,
                self.generation,
                batch_id - self.generation.batch_base,
                receipt_ts,
                [f for f in files if f["verdict"] == landing.INPUT],
            )
        landing_ledger.record_batch(self.lake, receipt_ts, batch_id, files)
        if skipped:
            log.warning(
                "landed files not read: not input by the landing rule",
                batch_id=batch_id,
                receipt_ts=receipt_ts,
                files={f["path"]: f["verdict"] for f in files if f["verdict"] != landing.INPUT},
            )
        return totals, skipped

    def _watermarks(self, stored_us: int, max_event_us: int | None, receipt_us: int, batch_id: int) -> tuple[int, int]:
        """(watermark at the start of the batch, watermark after it).

        The watermark follows the newest event time minus the delay, but never runs ahead of the
        batch's receipt time: no event comes from the future, so a clock that is wrong by less
        than the clock guard's skew still cannot close everyone's sessions early. A stored
        watermark ahead of the receipt time (state written before this guard, poisoned by a
        far-future event) is pulled back to it, which heals such a stream.
        """
        w_prev_us = stored_us
        if stored_us > receipt_us:
            log.warning(
                "stored watermark ahead of the receipt time: pulled back",
                batch_id=batch_id,
                stored=receipts.iso_from_micros(stored_us),
                receipt=receipts.iso_from_micros(receipt_us),
            )
            w_prev_us = receipt_us
        watermark_us = w_prev_us
        if max_event_us is not None:
            watermark_us = max(w_prev_us, min(max_event_us - self.rules.watermark_delay_us, receipt_us))
        return w_prev_us, watermark_us

    @staticmethod
    def _panes(result: DataFrame, receipt_ts: str, batch_id: int, watermark_us: int) -> DataFrame:
        """The pane rows as their files hold them: THE session schema's pane columns
        (tidemark/session/session_schema.py), then event_date and receipt_ts. The stream's writer
        adds the batch's values itself (pane_writer.BatchValues); here they are Spark columns, for
        whoever wants a batch's panes as a DataFrame."""
        values = {
            "batch_id": F.lit(batch_id).cast("bigint"),
            "watermark": F.timestamp_micros(F.lit(watermark_us)),
            "receipt_ts": F.lit(receipt_ts),
        }
        return (
            BatchProcessor._rows(result)
            .where("emit")
            .select(*BatchProcessor._pane_columns(), *(value.alias(name) for name, value in values.items()))
            .select(*session_schema.PANE_COLUMNS, "event_date", "receipt_ts")
        )

    @staticmethod
    def _rows(result: DataFrame) -> DataFrame:
        """What the batch writes, before the shuffle by date: the sessions emitted (`emit`: a pane)
        or kept (`retain`: state), with the pane columns but the batch's own values (added by the
        writer: pane_writer.BatchValues) and the ones `_pane_columns` derives from others (event_ids, a copy of
        the events' ids: shuffling it too made the pane shuffle ~40% bigger, BENCHMARKS.md section
        1), and the state's own (NOT_PANE)."""
        derived = {"event_ids"}
        return result.where("emit OR retain").select(
            *(c.name for c in session_schema.PANE_SESSION if c.name not in derived),
            "pane_kind",
            (F.col("pane_count") + 1).alias("pane_index"),
            F.date_format("session_start", "yyyy-MM-dd").alias("event_date"),
            "closed",
            # the panes a kept session has had, this batch's included
            (F.col("pane_count") + F.col("emit").cast("int")).alias("state_pane_count"),
            "emit",
            "retain",
        )

    @staticmethod
    def _pane_columns() -> list:
        """`_rows`' pane columns, event_ids from the events (the events' event_id field: no lambda,
        whose variable Spark names anew in every plan), the batch's own values left out."""
        session = [
            F.col("events.event_id").alias("event_ids") if name == "event_ids" else F.col(name)
            for name in (c.name for c in session_schema.PANE_SESSION)
        ]
        return [*session, *(F.col(name) for name in ("pane_kind", "pane_index", "event_date"))]

    def _complete(self, rows: DataFrame, receipt_ts: str) -> frozenset[str]:
        """A replayed batch's event dates whose receipt partitions an earlier attempt completed: kept
        as they are (one more Spark job, on replays only)."""
        dates = [row["event_date"] for row in rows.where("emit").select("event_date").distinct().collect()]
        return frozenset(date for date, _ in receipts.complete_keys(self.lake, [(d, receipt_ts) for d in dates]))

    def _register(
        self, stats: list[dict], complete: frozenset[str], receipt_ts: str, batch_id: int, watermark_us: int
    ) -> list[receipts.ReceiptPartition]:
        """The batch's receipt partitions (their files written) registered and completed, markers
        last; a replay's partitions completed already are left as they are."""
        partitions = [
            receipts.ReceiptPartition(
                event_date=row["event_date"],
                receipt_ts=receipt_ts,
                batch_id=batch_id,
                uri=self.lake.receipt_dir(row["event_date"], receipt_ts),
                rows=int(row["rows"]),
                events=int(row["events"]),
                pane_kinds=list(row["kinds"]),
                min_event_ts=receipts.iso_from_micros(row["min_us"]),
                max_event_ts=receipts.iso_from_micros(row["max_us"]),
                watermark=receipts.iso_from_micros(watermark_us),
                late=receipts.is_late(row["event_date"], watermark_us),
            )
            for row in sorted(stats, key=lambda r: r["event_date"])
        ]
        pending = [p for p in partitions if p.event_date not in complete]
        receipts.complete_all(self.lake, pending)  # markers last: each partition complete at once
        for partition in pending:
            log.info(
                "receipt partition written",
                event_date=partition.event_date,
                receipt_ts=receipt_ts,
                rows=partition.rows,
                pane_kinds=partition.pane_kinds,
                late=partition.late,
            )
        if partitions:  # every partition of this batch, hence of every earlier one, is complete
            receipt_index.write_head(self.lake, receipt_ts)
        return partitions

    def _write_quarantine(self, parsed: DataFrame, receipt_ts: str, batch_id: int, count: int, size: int) -> None:
        folder = self.lake.quarantine_dir(receipt_ts)
        marker = layout.join(folder, QUARANTINE_MARKER)
        if storage.exists(marker):
            return
        refused = parse.quarantined(parsed)
        if size <= DRIVER_QUARANTINE_BYTES:
            # one Spark job without a shuffle (Spark's writer took two and a shuffle); the Arrow
            # schema keeps the frame's nullability, as Spark's writer does. The batch's values
            # are added here, not as literals of the plan (pane_writer.BatchValues says why).
            table = pane_writer.with_constants(
                refused.toArrow(), {"receipt_ts": pa.scalar(receipt_ts), "batch_id": pa.scalar(batch_id, pa.int64())}
            )
            storage.delete_dir(folder)  # an interrupted attempt's files: the folder has no marker yet
            fs, path = storage.resolve(folder)
            fs.create_dir(path, recursive=True)
            pq.write_table(table, f"{path}/{QUARANTINE_FILE}", filesystem=fs)
        else:
            # one file, but not coalesce(1): that would scan the whole cached batch in one task
            refused.withColumn("receipt_ts", F.lit(receipt_ts)).withColumn(
                "batch_id", F.lit(batch_id).cast("bigint")
            ).repartition(1).write.mode("overwrite").parquet(folder)
        storage.write_json_atomic(marker, {"receipt_ts": receipt_ts, "batch_id": batch_id, "rows": count})
        log.warning("malformed lines quarantined", receipt_ts=receipt_ts, rows=count, path=folder)


def state_events(state: DataFrame) -> DataFrame:
    """The events of the open sessions in state, one row each, with their session's state_* columns:
    stream_input.sql's {state_events}."""
    return state.select(
        "user_id",
        F.explode("events").alias("e"),
        F.col("session_id").alias("state_session_id"),
        F.col("session_start").alias("state_session_start"),
        F.col("closed").alias("state_closed"),
        F.col("pane_count").alias("state_pane_count"),
    ).select(
        "user_id",
        "e.event_id",
        "e.event_ts",
        "e.event_type",
        "e.payload",
        "state_session_id",
        "state_session_start",
        "state_closed",
        "state_pane_count",
    )


def sessionize(
    spark, events: DataFrame, state: DataFrame, rules: SessionRules, w_prev_us: int, w_new_us: int
) -> DataFrame:
    """A micro-batch's sessions (stream_panes.sql's rows): the batch's valid `events` merged into the
    open sessions of `state`, one row per distinct event (user_id, event_id, event_ts) with the kept
    copy chosen by the copy rule whatever the arrival order, sessionized, each session's pane
    decided (STREAM_QUERY: the three files as one query, one analysis in the driver)."""
    return dedup_sql.run_text(
        spark,
        STREAM_QUERY,
        {
            "state_events": state_events(state),
            "batch_events": events.select("user_id", "event_id", "event_ts", "event_type", "payload"),
            "watermarks": watermarks(spark, w_prev_us, w_new_us),
        },
        gap_us=rules.gap_us,
        lateness_us=rules.allowed_lateness_us,
    )


def watermarks(spark, w_prev_us: int, w_new_us: int) -> DataFrame:
    """stream_panes.sql's {watermarks}: one row, planned as a local relation (a VALUES list is
    data, not code: every batch's plan compiles to the same code, whatever its watermarks)."""
    return spark.sql(
        "SELECT * FROM VALUES (CAST(:w_prev_us AS BIGINT), CAST(:w_new_us AS BIGINT)) AS w(w_prev_us, w_new_us)",
        args={"w_prev_us": w_prev_us, "w_new_us": w_new_us},
    )
