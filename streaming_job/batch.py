"""One micro-batch, end to end: parse, quarantine, sessionize against state, write panes, commit.

Everything here is a deterministic function of (state before the batch, the content of the batch's
files, the batch's timestamp from the offset log, its input rules), so a batch that Spark replays
after a crash produces the same receipt_ts, the same panes and the same state, and skips partitions
it had completed. The content is the one its first attempt read: the files are pinned before any
Spark job of the batch and read from the pins (tidemark.ingest.input_pins), and a replay judges
them by the input rules its ledger entry records, whatever the restart was given.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date
from typing import Protocol, TypedDict, cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

import dedup_sql
from streaming_job import pane_writer, parse
from streaming_job.partitions import sized_shuffle
from streaming_job.state import STATE_COLUMNS, StateStore
from streaming_job.state import watermark_text as state_watermark_text
from tidemark.base import crashpoints, layout
from tidemark.base.logs import get_logger
from tidemark.base.phases import Phases
from tidemark.base.session_rules import SessionRules
from tidemark.base.times import iso_from_micros
from tidemark.ingest import input_pins, landing, landing_archive, landing_ledger
from tidemark.ingest.contract import InputRules
from tidemark.ingest.landing import FileEntry
from tidemark.panes import receipt_index, receipts
from tidemark.panes.receipts import BatchReport
from tidemark.session import session_schema
from tidemark.store.lake import QUARANTINE_MARKER, Lake
from tidemark.store.locations import Folder

log = get_logger("stream")


STOP_MARK = "tidemark-stop-requested"

# A batch's refused lines, up to this many bytes of them, are written to the quarantine by the
# driver (collected as Arrow: one Spark job); a larger quarantine by Spark's writer.
DRIVER_QUARANTINE_BYTES = 64 << 20
QUARANTINE_FILE = "part-00000.parquet"

# The state's columns that come from a column of another name in what a batch writes (stream_rows.sql).
STATE_FROM = {"pane_count": "state_pane_count"}

# No value of one batch (its id, receipt time, watermarks) is a literal of the Spark plans a batch
# runs: the pane writer adds the batch's values to its files (pane_writer.BatchValues says why), the
# quarantine's writer to its file, and the watermarks reach the SQL as a row (`watermarks`).

# A micro-batch's sessionizing: stream_input.sql (state and batch merged, one row per event) into
# sessionize.sql (THE session rule) into stream_panes.sql (which panes to emit and keep), composed
# as one query: three spark.sql calls cost ~30-40 ms more of driver time per batch.
STREAM_QUERY = dedup_sql.compose(
    "stream_panes",
    sessionized=dedup_sql.compose(
        "sessionize",
        events=dedup_sql.compose("stream_input", state_events=dedup_sql.text("stream_state_events")),
    ),
)
# What a batch writes (stream_rows.sql over STREAM_QUERY), shuffled by event date: one statement,
# one analysis of the whole plan, where each DataFrame step on top of the sessions analysed it again.
BATCH_ROWS_QUERY = dedup_sql.compose("stream_rows", panes=STREAM_QUERY)


class FileFacts(TypedDict, total=False):
    """What a batch knows of a landed file before reading it: as pinned, or as its ledger records."""

    size: int | None
    mtime_ms: int | None
    sha256: str | None


@dataclass
class Totals:
    """A batch's input files summed: lines, valid events, refused bytes, the newest event time."""

    lines: int = 0
    valid: int = 0
    refused_bytes: int = 0
    max_event_us: int | None = None
    landing_uris: dict[str, str] = field(default_factory=dict)  # the frame's file -> the landing's URI


class StopRequested(RuntimeError):
    """Raised instead of starting a batch after a graceful stop was asked for.

    Returning without processing would let Spark commit the batch, losing its files; failing it
    leaves it uncommitted in the offset log, so the next run replays exactly that batch.
    """


class StopFlag(Protocol):
    """What the processor asks of its stop signal (a threading.Event, or the job's either-of-two)."""

    def is_set(self) -> bool:
        """Whether a stop was asked for."""
        ...


@dataclass
class BatchInput:
    """What a micro-batch reads.

    Its lines (`frame`: value, source_file[, file facts][, receipt_time]), the input rules and
    receipt time its lines are judged by, and, when its files are pinned
    (tidemark.ingest.input_pins), what the ledger records of each.

    A batch built by hand (no offset entry in the checkpoint: tests, tools) is read as given: its
    receipt time is its `receipt_time` column, and whether it is a replay is known from the ledger.
    """

    frame: DataFrame | None  # None: not one file left to read
    rules: InputRules
    receipt_ms: int | None = None
    replay: bool | None = None
    pins: Folder | None = None  # the batch's pin folder: the frame's files are named inside it
    landing_uris: dict[str, str] = field(default_factory=dict)  # path relative to the landing -> its URI
    facts: dict[str, FileFacts] = field(default_factory=dict)  # path -> {size, mtime_ms[, sha256]}
    # the first attempt's {path: sha256}, computed beside the first Spark job
    digests: Future[dict[str, str | None]] | None = None
    unreadable: list[FileEntry] = field(default_factory=list)  # ledger records of files it could not read

    def landing_file(self, frame_file: str, landing_root: str | None) -> tuple[str, str]:
        """(path relative to the landing, the URI a line's source_file holds) of a frame's file."""
        if self.pins is None:
            return landing.relative_path(landing_root, frame_file), frame_file
        path = landing.relative_path(self.pins, frame_file)
        return path, self.landing_uris.get(path) or layout.join(landing_root or "", path)


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
        log_fields: dict[str, object] | None = None,
    ) -> None:
        """Process batches into `lake`, with the state and pins under `checkpoint`.

        `landing` names the files relative to it (None: a batch built by hand); `generation` is the
        checkpoint generation whose query runs; `archive` records each batch's input files for the
        archive; `log_fields` are added to every log line of the processor (the warm-up's).
        """
        self.log = log.bind(**(log_fields or {}))
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
        """Process one micro-batch end to end, then hand its report to the listeners."""
        batch_id = self.generation.batch_base + spark_batch_id
        if self.stop_requested is not None and self.stop_requested.is_set():
            self.log.info("stop requested: batch left for the next run", batch_id=batch_id)
            raise StopRequested(f"{STOP_MARK}: batch {batch_id} left uncommitted for the next run")
        started = time.monotonic()
        phases = Phases(started)
        release_pins(self.checkpoint, self.generation, self.archive)  # earlier batches' pins, once committed
        # caches the parsed batch: one read of the files
        report = self._process(batch, batch_id, spark_batch_id, phases)
        if report is None:
            return
        report.seconds = round(time.monotonic() - started, 3)
        report.phases = phases.seconds
        self.log.info(
            "batch committed",
            batch_id=batch_id,
            receipt_ts=report.receipt_ts,
            input_lines=report.input_lines,
            valid_events=report.valid_events,
            quarantined=report.quarantined,
            open_sessions=report.open_sessions,
            watermark=state_watermark_text(report.watermark_us),
            partitions=[layout.event_date_text(p.event_date) for p in report.partitions],
            seconds=report.seconds,
            phases=report.phases,
        )
        for listener in self.listeners:
            listener(report)
        crashpoints.reach("batch-committed")

    def _process(self, batch: DataFrame, batch_id: int, spark_batch_id: int, phases: Phases) -> BatchReport | None:
        spark = batch.sparkSession
        source = self._input(batch, batch_id, spark_batch_id)
        if source.frame is None:  # every planned file gone: recorded, nothing read
            if source.unreadable and source.receipt_ms is not None:
                self._admit([], layout.receipt_ts_from_millis(source.receipt_ms), batch_id, source)
            return None
        received_us = None if source.receipt_ms is None else source.receipt_ms * 1000
        parsed = parse.with_parse(source.frame, source.rules, received_us).persist()
        try:
            # one row per file out of the aggregate: as few shuffle tasks as the cores, where the
            # session's setting started 8 for a few rows
            with sized_shuffle(spark, 0):
                by_file = self._by_file(parsed)
            phases.done("check")  # the input contract over every line, cached, and the totals
            if not by_file and not source.unreadable:
                return None  # a batch without lines writes nothing
            if source.receipt_ms is None:
                receipt_ts = layout.receipt_ts_from_millis(max(row["receipt_ms"] for row in by_file))
                receipt_us = max(int(row["receipt_us"]) for row in by_file)
            else:
                receipt_ts, receipt_us = layout.receipt_ts_from_millis(source.receipt_ms), source.receipt_ms * 1000
            # Only a batch replayed after a crash can find receipt partitions of its own complete:
            # this batch's ledger entry, written before anything else of it, is already there.
            replay = source.replay if source.replay is not None else self.lake.has_landing_ledger_entry(receipt_ts)
            totals, skipped = self._admit(by_file, receipt_ts, batch_id, source)
            crashpoints.reach("ledger-recorded")
            if skipped:  # lines of files the landing rule does not take as input: not events, not quarantined
                parsed = parsed.where(~F.col("source_file").isin(skipped))
            if not totals.lines:
                return None  # only files that are not input: recorded in the ledger, nothing else
            quarantined = totals.lines - totals.valid
            if quarantined:
                self._write_quarantine(
                    parsed, receipt_ts, batch_id, quarantined, totals.refused_bytes, totals.landing_uris
                )
            phases.done("quarantine")

            store = StateStore(spark, self.checkpoint)
            before, state = store.before(batch_id)
            w_prev_us, watermark_us = self._watermarks(before.watermark_us, totals.max_event_us, receipt_us, batch_id)

            # the shuffles sized to the batch: set before the queries below are planned
            with sized_shuffle(spark, totals.lines):
                rows = batch_rows(spark, parse.valid_events(parsed), state, self.rules, w_prev_us, watermark_us)
                complete = self._complete(rows, receipt_ts) if replay else frozenset()
                # One pass: sessionized, the panes and the state's files written, their statistics
                # back. Not cached: nothing else reads the sessions.
                stats, open_sessions = pane_writer.write_batch(
                    rows,
                    self.lake,
                    store.prepare(batch_id),
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
            totals.lines,
            totals.valid,
            quarantined,
            watermark_us,
            open_sessions,
            written,
        )

    def _input(self, batch: DataFrame, batch_id: int, spark_batch_id: int) -> BatchInput:
        """The batch's input.

        Its pinned files, pinned now on a first attempt (tidemark.ingest.input_pins), checked
        against the ledger on a replay; or the batch as given when no streaming query planned it.
        """
        plan = (
            input_pins.planned(self.generation.query_dir(self.checkpoint), spark_batch_id, self.landing)
            if self.landing is not None
            else None
        )
        if plan is None:
            return BatchInput(batch, self.input_rules)
        receipt_ts = layout.receipt_ts_from_millis(plan.receipt_ms)
        entry = landing_ledger.read_entry(self.lake, receipt_ts)
        recorded = landing_ledger.rules_of(entry) if entry is not None else None
        source = BatchInput(None, self.input_rules, plan.receipt_ms, entry is not None, landing_uris=plan.files)
        source.pins = input_pins.pin_dir(self.checkpoint, batch_id)
        if entry is not None and recorded is not None:
            self._replay_input(source, entry, recorded, batch_id, plan)
        else:  # a first attempt (or a replay of a batch whose entry predates pins: its files as they are now)
            pins, missing = input_pins.pin(
                self.checkpoint, batch_id, self.generation.generation, self.landing or "", plan
            )
            source.facts = {p.path: {"size": p.size, "mtime_ms": p.mtime_ms} for p in pins.values()}
            source.unreadable = [_unreadable(path, input_pins.MISSING) for path in missing]
            if pins:
                pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pin-digests")
                source.digests = pool.submit(input_pins.digests, self.checkpoint, batch_id, sorted(pins))
                pool.shutdown(wait=False)
        if input_pins.pinned_files(self.checkpoint, batch_id):
            source.frame = read_pinned(batch.sparkSession, source.pins.uri)
        return source

    def _replay_input(
        self,
        source: BatchInput,
        entry: landing_ledger.Entry,
        recorded: InputRules,
        batch_id: int,
        plan: input_pins.PlannedBatch,
    ) -> None:
        """A replay reads what its first attempt recorded.

        The same pins (checked against their digests), judged by the same input rules.
        """
        if recorded != self.input_rules:
            self.log.warning(
                "replayed batch: judged by the input rules of its first attempt, not the given ones",
                batch_id=batch_id,
                recorded=recorded.describe(),
                given=self.input_rules.describe(),
            )
        source.rules = recorded
        files = entry.get("files", [])
        known = {f["path"]: f for f in files if f["verdict"] == landing_ledger.UNREADABLE_VERDICT}
        source.facts = {
            f["path"]: {"size": f.get("size"), "mtime_ms": f.get("mtime_ms"), "sha256": f.get("sha256")}
            for f in files
            if f.get("sha256") and f["path"] not in known
        }
        readable = [f for f in files if f["path"] in source.facts]
        input_pins.restore(self.checkpoint, batch_id, self.generation.generation, self.landing or "", plan, readable)
        lost, changed = input_pins.verify(self.checkpoint, batch_id, readable)
        source.unreadable = list(known.values())
        for path, reason in sorted(lost.items()):
            lines = next(int(f.get("lines") or 0) for f in files if f["path"] == path)
            source.unreadable.append(_unreadable(path, reason, source.facts.pop(path), lines))
        if changed:
            landing_ledger.quarantine_contents(
                self.lake,
                [(path, None, None, data) for path, data in sorted(changed.items())],
                input_pins.PIN_CHANGED,
                landing_ledger.UNREADABLE_VERDICT,
                source="replay",
                batch_id=batch_id,
            )
        if lost:
            self.log.error(
                "replayed batch: input files not read as its first attempt read them",
                batch_id=batch_id,
                files=lost,
            )

    @staticmethod
    def _by_file(parsed: DataFrame) -> list[Row]:
        """One Spark action over the checked batch.

        Per file, its lines, valid events, newest event time and (when the source gives them) size
        and modification time; and, for a batch built by hand, the batch's time.
        """
        valid = F.col("reason").isNull()
        facts = [F.max(name).alias(name) for name in parse.FILE_FACTS if name in parsed.columns]
        if "receipt_time" in parsed.columns:
            facts += [
                F.max(F.unix_millis("receipt_time")).alias("receipt_ms"),
                F.max(F.unix_micros("receipt_time")).alias("receipt_us"),
            ]
        return (
            parsed.groupBy("source_file")
            .agg(
                F.count(F.lit(1)).alias("lines"),
                F.count_if(valid).alias("valid"),
                F.sum(F.length("raw")).alias("refused_bytes"),  # `raw` is kept for refused lines only
                F.max(F.when(valid, F.unix_micros("event_ts"))).alias("max_event_us"),
                *facts,
            )
            .collect()
        )

    def _admit(
        self, by_file: list[Row], receipt_ts: str, batch_id: int, source: BatchInput
    ) -> tuple[Totals, list[str]]:
        """Apply the landing rule to the batch's files and write the batch's ledger entry.

        Returns the totals of its input files and the URIs of the files not read (as the frame names
        them).
        """
        files: list[FileEntry] = []
        skipped: list[str] = []
        newest: list[int] = []
        totals = Totals()
        digests = source.digests.result() if source.digests is not None else {}
        for found in by_file:
            row = found.asDict()
            path, uri = source.landing_file(row["source_file"], self.landing)
            totals.landing_uris[row["source_file"]] = uri
            verdict = landing.classify(path)
            facts = source.facts.get(path, {"size": row.get("file_size"), "mtime_ms": row.get("file_mtime_ms")})
            record: FileEntry = {
                "path": path,
                "size": facts["size"],
                "mtime_ms": facts["mtime_ms"],
                "lines": int(row["lines"]),
                "verdict": verdict,
            }
            sha = facts.get("sha256") or digests.get(path)
            if sha is not None:
                record["sha256"] = sha
            files.append(record)
            if verdict != landing.INPUT:
                skipped.append(row["source_file"])
                continue
            totals.lines += int(row["lines"])
            totals.valid += int(row["valid"])
            totals.refused_bytes += int(row["refused_bytes"] or 0)
            if row["max_event_us"] is not None:
                newest.append(row["max_event_us"])
        totals.max_event_us = max(newest, default=None)
        if self.archive:  # before the ledger entry: an empty queue means no batch did half its work
            landing_archive.enqueue(
                self.checkpoint,
                self.generation,
                batch_id - self.generation.batch_base,
                receipt_ts,
                # files a replay could not read too: they leave the landing (a later generation
                # must not read them as new), their changed content handed on as replaced
                [f for f in files if f["verdict"] == landing.INPUT] + source.unreadable,
            )
        landing_ledger.record_batch(
            self.lake, receipt_ts, batch_id, files + source.unreadable, input_rules=source.rules
        )
        if skipped:
            self.log.warning(
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
        watermark ahead of the receipt time (poisoned by a far-future event) is pulled back to it,
        which heals such a stream.
        """
        w_prev_us = stored_us
        if stored_us > receipt_us:
            self.log.warning(
                "stored watermark ahead of the receipt time: pulled back",
                batch_id=batch_id,
                stored=iso_from_micros(stored_us),
                receipt=iso_from_micros(receipt_us),
            )
            w_prev_us = receipt_us
        watermark_us = w_prev_us
        if max_event_us is not None:
            watermark_us = max(w_prev_us, min(max_event_us - self.rules.watermark_delay_us, receipt_us))
        return w_prev_us, watermark_us

    @staticmethod
    def _panes(result: DataFrame, receipt_ts: str, batch_id: int, watermark_us: int) -> DataFrame:
        """The pane rows of stream_panes.sql's `result` as their files hold them.

        THE session schema's pane columns (tidemark/session/session_schema.py), then event_date and
        receipt_ts. The stream's writer adds the batch's values itself (pane_writer.BatchValues);
        here they are Spark columns, for whoever wants a batch's panes as a DataFrame.
        """
        values = {
            "batch_id": F.lit(batch_id).cast("bigint"),
            "watermark": F.timestamp_micros(F.lit(watermark_us)),
            "receipt_ts": F.lit(receipt_ts),
        }
        rows = dedup_sql.run(result.sparkSession, "stream_rows", {"panes": result})
        return (
            rows.where("emit")
            .select(*rows.columns, *(value.alias(name) for name, value in values.items()))
            .select(*session_schema.PANE_COLUMNS, "event_date", "receipt_ts")
        )

    def _complete(self, rows: DataFrame, receipt_ts: str) -> frozenset[date]:
        """A replayed batch's event dates whose receipt partitions an earlier attempt completed.

        Kept as they are (one more Spark job, on replays only). The panes' event_date column holds
        the date as text: parsed here.
        """
        dates = [
            layout.as_event_date(row["event_date"])
            for row in rows.where("emit").select("event_date").distinct().collect()
        ]
        keys = receipts.complete_keys(self.lake, [(d, receipt_ts) for d in dates])
        return frozenset(event_date for event_date, _ in keys)

    def _register(
        self,
        stats: list[pane_writer.DateStats],
        complete: frozenset[date],
        receipt_ts: str,
        batch_id: int,
        watermark_us: int,
    ) -> list[receipts.ReceiptPartition]:
        """Register and complete the batch's receipt partitions, whose files are written.

        Markers last; a replay's partitions completed already are left as they are.
        """
        partitions = [
            receipts.ReceiptPartition(
                event_date=row["event_date"],
                receipt_ts=receipt_ts,
                batch_id=batch_id,
                uri=self.lake.receipt_dir(row["event_date"], receipt_ts),
                rows=int(row["rows"]),
                events=int(row["events"]),
                pane_kinds=list(row["kinds"]),
                min_event_ts=iso_from_micros(row["min_us"]),
                max_event_ts=iso_from_micros(row["max_us"]),
                watermark=iso_from_micros(watermark_us),
                late=receipts.is_late(row["event_date"], watermark_us),
            )
            for row in sorted(stats, key=lambda r: r["event_date"])
        ]
        pending = [p for p in partitions if p.event_date not in complete]
        receipts.complete_all(self.lake, pending)  # markers last: each partition complete at once
        for partition in pending:
            self.log.info(
                "receipt partition written",
                event_date=layout.event_date_text(partition.event_date),
                receipt_ts=receipt_ts,
                rows=partition.rows,
                pane_kinds=partition.pane_kinds,
                late=partition.late,
            )
        if partitions:  # every partition of this batch, hence of every earlier one, is complete
            receipt_index.write_head(self.lake, receipt_ts)
        return partitions

    def _write_quarantine(
        self, parsed: DataFrame, receipt_ts: str, batch_id: int, count: int, size: int, uris: dict[str, str]
    ) -> None:
        """Write the batch's refused lines to its quarantine folder, each with its landed file's URI.

        `uris` maps the frame's file to the landing's, for pinned input.
        """
        folder = self.lake.quarantine_dir(receipt_ts)
        marker = folder.file(QUARANTINE_MARKER)
        if marker.exists():
            return
        refused = parse.quarantined(parsed)
        renamed = {frame: uri for frame, uri in uris.items() if frame != uri}
        if size <= DRIVER_QUARANTINE_BYTES:
            # one Spark job without a shuffle (Spark's writer took two and a shuffle); the Arrow
            # schema keeps the frame's nullability, as Spark's writer does. The batch's values
            # are added here, not as literals of the plan (pane_writer.BatchValues says why).
            table = pane_writer.with_constants(
                _renamed(refused.toArrow(), "source_file", renamed),
                {"receipt_ts": pa.scalar(receipt_ts), "batch_id": pa.scalar(batch_id, pa.int64())},
            )
            folder.delete()  # an interrupted attempt's files: the folder has no marker yet
            fs, path = folder.at()
            fs.create_dir(path, recursive=True)
            pq.write_table(table, f"{path}/{QUARANTINE_FILE}", filesystem=fs)
        else:
            # one file, but not coalesce(1): that would scan the whole cached batch in one task
            if renamed:
                names = F.create_map(*(F.lit(x) for pair in renamed.items() for x in pair))
                refused = refused.withColumn("source_file", F.coalesce(names[F.col("source_file")], "source_file"))
            refused.withColumn("receipt_ts", F.lit(receipt_ts)).withColumn(
                "batch_id", F.lit(batch_id).cast("bigint")
            ).repartition(1).write.mode("overwrite").parquet(folder.uri)
        marker.write_json_atomic({"receipt_ts": receipt_ts, "batch_id": batch_id, "rows": count})
        self.log.warning("malformed lines quarantined", receipt_ts=receipt_ts, rows=count, path=folder)


def read_pinned(spark: SparkSession, folder: str) -> DataFrame:
    """A batch's pinned files as the streaming source gives lines (streaming_job.job.source).

    Every line, split as the contract splits, with its file's URI (in the pin folder).
    """
    return (
        spark.read.format("text")
        .option("recursiveFileLookup", "true")
        .option("lineSep", "\n")
        .load(folder)
        .select("value", F.col("_metadata.file_path").alias("source_file"))
    )


def release_pins(checkpoint: str, generation: landing_archive.Generation, archive: bool) -> list[int]:
    """Remove the pins of committed batches.

    With the archive, not before the archive has taken the batch's files (its queue entry is gone).
    """
    keep = frozenset(entry["batch_id"] for entry in landing_archive.queued(checkpoint)) if archive else frozenset()
    return input_pins.release(checkpoint, generation.generation, generation.query_dir(checkpoint), keep)


def _unreadable(path: str, reason: str, facts: FileFacts | None = None, lines: int = 0) -> FileEntry:
    """A ledger record of a file the batch could not read as its first attempt did."""
    facts = facts or {}
    entry: FileEntry = {
        "path": path,
        "size": facts.get("size"),
        "mtime_ms": facts.get("mtime_ms"),
        "lines": lines,
        "verdict": landing_ledger.UNREADABLE_VERDICT,
        "reason": reason,
    }
    sha = facts.get("sha256")
    if sha:
        entry["sha256"] = sha
    return entry


def _renamed(table: pa.Table, column: str, names: dict[str, str]) -> pa.Table:
    """`table` with each value of `column` found in `names` replaced by its new name."""
    if not names or not table.num_rows:
        return table
    values = table.column(column)
    unique = pc.unique(values)
    # a column of file names (source_file): never null
    renamed = pa.array([names.get(v, v) for v in cast("list[str]", unique.to_pylist())], values.type)
    index = table.schema.get_field_index(column)
    return table.set_column(index, table.schema.field(index), pc.take(renamed, pc.index_in(values, unique)))


def state_events(state: DataFrame) -> DataFrame:
    """The events of the open sessions in state, one row each, with their session's state_* columns.

    stream_input.sql's {state_events} (stream_state_events.sql; the stream's queries compose it).
    """
    frame: DataFrame = dedup_sql.run(state.sparkSession, "stream_state_events", {"state": state})
    return frame


def sessionize(
    spark: SparkSession, events: DataFrame, state: DataFrame, rules: SessionRules, w_prev_us: int, w_new_us: int
) -> DataFrame:
    """A micro-batch's sessions (stream_panes.sql's rows).

    The batch's valid `events` merged into the open sessions of `state`, one row per distinct event
    (user_id, event_id, event_ts) with the kept copy chosen by the copy rule whatever the arrival
    order, sessionized, each session's pane decided (STREAM_QUERY: the four files as one query, one
    analysis in the driver).
    """
    return _run_batch_query(spark, STREAM_QUERY, events, state, rules, w_prev_us, w_new_us)


def batch_rows(
    spark: SparkSession, events: DataFrame, state: DataFrame, rules: SessionRules, w_prev_us: int, w_new_us: int
) -> DataFrame:
    """What a micro-batch writes: `sessionize`'s sessions as stream_rows.sql shapes them.

    The sessions emitted or kept, shuffled by event date, with the pane columns (but the batch's
    own values) and the state's bookkeeping (BATCH_ROWS_QUERY: one statement, one analysis).
    """
    return _run_batch_query(spark, BATCH_ROWS_QUERY, events, state, rules, w_prev_us, w_new_us)


def _run_batch_query(
    spark: SparkSession,
    query: str,
    events: DataFrame,
    state: DataFrame,
    rules: SessionRules,
    w_prev_us: int,
    w_new_us: int,
) -> DataFrame:
    """`query` (STREAM_QUERY, or a composition over it) with a batch's inputs and parameters."""
    frame: DataFrame = dedup_sql.run_text(
        spark,
        query,
        {
            "state": state,
            "batch_events": events.select("user_id", "event_id", "event_ts", "event_type", "payload"),
            "watermarks": watermarks(spark, w_prev_us, w_new_us),
        },
        gap_us=rules.gap_us,
        lateness_us=rules.allowed_lateness_us,
    )
    return frame


def watermarks(spark: SparkSession, w_prev_us: int, w_new_us: int) -> DataFrame:
    """stream_panes.sql's {watermarks}.

    One row, planned as a local relation (a VALUES list is data, not code: every batch's plan
    compiles to the same code, whatever its watermarks).
    """
    return spark.sql(
        "SELECT * FROM VALUES (CAST(:w_prev_us AS BIGINT), CAST(:w_new_us AS BIGINT)) AS w(w_prev_us, w_new_us)",
        args={"w_prev_us": w_prev_us, "w_new_us": w_new_us},
    )
