"""The streaming query: landing files -> foreachBatch(BatchProcessor), with a graceful stop.

Run it through the CLI (`tidemark stream ...`) or unchanged through spark-submit
(`spark-submit --master spark://... streaming_job/submit.py stream ...`).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from streaming_job import warmup
from streaming_job.batch import STOP_MARK, BatchProcessor, release_pins
from streaming_job.progress import QueryProgressLog, progress_line
from tidemark.base.durations import format_duration, parse_duration
from tidemark.base.logs import get_logger
from tidemark.base.session_rules import Overrides, SessionRules
from tidemark.base.spark import build_session
from tidemark.ingest import landing_archive, landing_ledger
from tidemark.ingest.contract import InputRules
from tidemark.ingest.landing import LandedFile
from tidemark.notices.cadence import CadencePolicy
from tidemark.notices.service import NoticeService
from tidemark.panes import receipt_index
from tidemark.panes.receipts import BatchReport
from tidemark.session import rules_record
from tidemark.store.lake import Lake

log = get_logger("stream")

QUERY_NAME = "tidemark_sessions"  # the streaming query's name (Spark's UI, its progress reports)

# What signal.signal returns and takes: a handler, SIG_DFL or SIG_IGN, or None (not set from Python).
_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


@dataclass
class StreamConfig:
    """What a stream runs with: where it reads and writes, its rules and its cadences."""

    landing: str
    lake: Lake
    checkpoint: str
    # None: the lake's recorded rules (the defaults on a new lake); Overrides ({name: timedelta or
    # the gap boundary's name}): only those rules were given; a SessionRules: all of them. Given rules must agree with the lake's
    # rules record unless migrate_rules (tidemark/session/rules_record.py).
    rules: SessionRules | Overrides | None = None
    migrate_rules: bool = False
    # How often a running stream re-reads the lake's rules record (a migration stops it).
    rules_check_interval: float = 30.0
    # How often a running stream compares the landing with its ledger (tidemark.ingest.landing_ledger):
    # replaced files are quarantined, files under in-progress names reported. Also once at the end.
    landing_audit_interval: float = 300.0
    input_rules: InputRules = field(default_factory=InputRules)  # the clock guard (tidemark.ingest.contract)
    trigger_interval: str = "10s"
    available_now: bool = False
    max_files_per_trigger: int | None = None
    master: str | None = None
    notify_topic: str | None = None
    # Notice cadence (tidemark.notices.cadence): None = one notice per receipt partition, at once.
    notice_coalesce: str | None = None
    notice_late_horizon: str | None = None
    notice_digest_interval: str = "1h"
    notice_flush_timeout: float = 30.0
    # A bounded landing (tidemark.ingest.landing_archive): read input files moved here once their batch is
    # committed; None keeps them in the landing (every trigger then lists all of them).
    archive: str | None = None
    # With an archive: start a new checkpoint generation (an empty file-source log) after this many
    # micro-batches; None never does (Spark's source log then grows with every file read).
    rotate_after: int | None = None
    archive_interval: float = 2.0  # how often a running stream moves committed batches' files

    def __post_init__(self) -> None:
        """Open the lake given as a URI."""
        self.lake = Lake.open(self.lake)  # the Spark job's boundary: a URI from whoever configures it


def source(spark: SparkSession, config: StreamConfig) -> DataFrame:
    """The stream's landing, as Spark's file source plans it into micro-batches (landing_source)."""
    return landing_source(spark, config.landing, config.max_files_per_trigger)


def landing_source(spark: SparkSession, landing: str, max_files_per_trigger: int | None = None) -> DataFrame:
    """The landed files of `landing`, as Spark's file source plans them into micro-batches.

    Which files each batch takes (its file-source log) and the batch's timestamp (its offset log; a
    batch replayed after a crash has the same, hence the same receipt_ts).

    The batch never reads this frame: it pins the planned files and reads the pins
    (tidemark.ingest.input_pins, streaming_job/batch.py), so that a replay reads the content the
    first attempt read. Which of the files are input is tidemark.ingest.landing's rule, applied per
    batch: Spark's own listing rules differ from it.
    """
    reader = (
        spark.readStream.format("text")
        .option("recursiveFileLookup", "true")
        .option("maxFileAge", NO_MAX_FILE_AGE)
        .option("lineSep", "\n")
    )  # lines as tidemark.ingest.contract splits them
    if max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", int(max_files_per_trigger))
    return reader.load(landing)


# maxFileAge: Spark skips files whose modification time is older than this, measured from the newest
# file it has seen, not from now: with any finite age, files landed with old times (`tar -x`,
# `cp -p`, time 0) were skipped silently, and after one file stamped 2099 every normal file was.
# Modification times must not decide what is read, so the age is unbounded (Long.MaxValue ms: what
# Spark itself uses when it disables the limit). Every file is read once, whatever its time.
NO_MAX_FILE_AGE = f"{2**63 - 1}ms"


def stream_settings() -> dict[str, str]:
    """Runtime SQL settings of the stream's session, set before the query starts.

    A streaming query plans its micro-batches with a copy of the session's settings taken at its
    start.

    The batch's checked lines and its sessions are cached (streaming_job/batch.py), each cache built
    once and scanned two or three times within the batch. Spark's in-memory compression of those
    columns (dictionary and run-length encodings, value by value) cost more CPU than the scans save:
    uncompressed, a warm 3-batch run of 300k lines took 11.75 CPU s against 14.0 (median of two
    interleaved rounds), and a cold million-line batch 31.6 s against 49.7 s in one pair of runs
    under load (BENCHMARKS.md section 1). The caches live for one batch and fit the heap either way
    (about 200 MB each for a million lines); Spark spills what does not fit.

    Adaptive query execution is off for the batch's queries. Its gains do not apply here: each
    batch sizes its shuffles itself (streaming_job.partitions) and joins nothing it could broadcast
    instead; its cost does: every shuffle ends a Spark job and the rest of the plan is optimized
    again before the next, several times per batch on the driver. What it bought, in interleaved
    pairs of `bench stream_throughput` (BENCHMARKS.md section 1): ~3,000-line batches under load 4-8
    took 3.9 / 2.4 s off against 4.7 / 5.2 s on (medians of nine warm batches); quiet, 1.5 / 2.0 s
    against 1.8 / 1.9 s (in-job 26.8 / 30.0 s against 27.9 / 31.6 s); but 100,000-line batches,
    quiet, 52.8 / 50.4 s in-job against 49.5 / 48.1 s: the gain is the small batches' (the local
    stack's, where the driver competes with Airflow and the Spark Connect server), the cost ~5% on
    big ones.
    """
    return {"spark.sql.inMemoryColumnarStorage.compressed": "false", "spark.sql.adaptive.enabled": "false"}


# The JVM of a stream that starts its own SparkSession (`tidemark stream`; not spark-submit, whose
# driver JVM exists before this code runs: docs/production.md gives the flag for it). The default
# G1 collector's concurrent threads compete with the batch for 2 cores; the serial collector's
# pauses on a 2 GB heap cost less: a cold million-line batch took 55-61 CPU s of the process tree
# instead of 68-71 (BENCHMARKS.md section 1). A C1-only JIT (-XX:TieredStopAtLevel=1) was tried
# too: warm batches ~30% slower, not kept.
STREAM_JAVA_OPTIONS = "-XX:+UseSerialGC"
JAVA_OPTIONS_ENV = "TIDEMARK_STREAM_JAVA_OPTIONS"


def stream_jvm_conf() -> dict[str, str]:
    """Launch settings of the JVM a stream starts for itself.

    TIDEMARK_STREAM_JAVA_OPTIONS replaces the options (empty: the JVM's defaults).
    """
    options = os.environ.get(JAVA_OPTIONS_ENV, STREAM_JAVA_OPTIONS)
    return {"spark.driver.extraJavaOptions": options} if options.strip() else {}


def tune_session(spark: SparkSession) -> None:
    """Apply the stream's runtime SQL settings (stream_settings) to `spark`."""
    for key, value in stream_settings().items():
        spark.conf.set(key, value)


def run_stream(
    config: StreamConfig,
    listeners: list[Callable[[BatchReport], None]] | None = None,
    spark: SparkSession | None = None,
) -> None:
    """Run until stopped (or, with available_now, until everything landed so far is processed).

    SIGTERM and SIGINT stop gracefully: the micro-batch under way finishes and commits first.
    """
    if (config.rotate_after or landing_archive.current(config.checkpoint).generation) and not config.archive:
        # a new file-source log reads every file still in the landing again: a checkpoint that has
        # rotated keeps running with the archive, else its next rotation would read files again
        raise ValueError(
            f"tidemark stream: the checkpoint {config.checkpoint} rotates its file-source log "
            "(--checkpoint-rotation, or an earlier rotation): it needs --archive, so that read "
            "files leave the landing first"
        )
    notices = _notice_service(config)  # validates the topic and cadence before Spark starts
    if not config.migrate_rules:
        # Records the rules at the first start on a lake; refuses other rules (before Spark starts).
        rules = rules_record.ensure(config.lake, config.rules, "tidemark stream").rules
    receipt_index.start(config.lake)  # a new lake is indexed from its first partition on
    spark = spark or build_session("tidemark-stream", config.master, conf=stream_jvm_conf())
    tune_session(spark)
    if config.migrate_rules:
        rules = _migrate(config, spark)
    if warmup.enabled(spark):
        # the first landings need not wait for compilation: the same source, one file per trigger
        warmup.warm_up(
            spark,
            rules,
            config.input_rules,
            lambda folder: landing_source(spark, folder, max_files_per_trigger=1),
        )
    guard = _RulesGuard(config.lake, rules, config.rules_check_interval)
    audit = _LandingAudit(config.landing, config.lake, config.landing_audit_interval, config.archive)
    if notices is not None:
        notices.start()  # publishes what an earlier run left owed, in the background
        listeners = [notices.on_batch, *(listeners or [])]
    stop_requested = threading.Event()
    previous = _install_stop_handlers(stop_requested)
    log.info(
        "stream starting",
        landing=config.landing,
        lake=config.lake,
        checkpoint=config.checkpoint,
        trigger=("available-now" if config.available_now else format_duration(parse_duration(config.trigger_interval))),
        rules_id=guard.rules_id,
        archive=config.archive,
        rotate_after=config.rotate_after,
        **rules.describe(),
    )
    changed_to = None
    generation = landing_archive.current(config.checkpoint)
    try:
        if config.archive:
            landing_archive.remove_old_generations(config.checkpoint, generation)
        # batches this generation commits before it rotates; after a skipped rotation, one more
        rotate_at = config.rotate_after
        postponed_at = None  # committed batches when a rotation was last postponed
        while True:
            rotate = threading.Event()  # this generation has run its batches: stop it and rotate
            processor = BatchProcessor(
                config.lake,
                config.checkpoint,
                rules,
                listeners,
                _Either(stop_requested, rotate),
                config.input_rules,
                landing=config.landing,
                generation=generation,
                archive=bool(config.archive),
            )
            changed_to = _run_query(
                spark,
                config,
                processor,
                guard,
                audit,
                stop_requested,
                rotate,
                generation,
                rotate_at,
                0 if postponed_at is None else postponed_at + 1,
            )
            if config.archive:
                landing_archive.drain(config.landing, config.archive, config.checkpoint, _set_aside(config))
            found = audit.run()
            release_pins(config.checkpoint, generation, bool(config.archive))  # the last batch's, once committed
            if changed_to is not None or not config.archive:
                break
            committed = _committed_batches(config.checkpoint, generation)
            # a pending file this generation's query never reads: only the next generation does
            unread = _unread(config, generation, found)
            if not (rotate.is_set() or unread or (rotate_at is not None and committed >= rotate_at)):
                break
            go_on = (rotate.is_set() or bool(unread)) and not stop_requested.is_set()
            archive = config.archive

            def sweep(archive: str = archive) -> int:
                return landing_ledger.sweep_read(config.landing, config.lake, archive)

            nxt = landing_archive.rotate(
                config.landing,
                archive,
                config.checkpoint,
                generation,
                _set_aside(config),
                sweep=sweep,
                lake=config.lake,
            )
            if nxt is not None:
                generation = nxt
                rotate_at, postponed_at = config.rotate_after, None
                if go_on:
                    continue  # the stream goes on in the new generation (which reads the unread files)
            elif go_on and committed != postponed_at:
                # Skipped: a batch of this generation is not committed (a refused or killed one).
                # Stopping here would end a running stream, or leave an --available-now run's files
                # in the landing, so the same generation resumes (its query replays that batch
                # first) and rotation is tried again after its next commit: every retry follows
                # new progress (a retry without it ends the run), so this cannot loop without end.
                postponed_at, rotate_at = committed, committed + 1
                log.info(
                    "checkpoint rotation postponed: resuming the current generation",
                    generation=generation.generation,
                    retry_after_batches=rotate_at,
                )
                continue
            elif go_on:
                log.warning(
                    "checkpoint rotation postponed without progress: stopping; the next run tries again",
                    generation=generation.generation,
                    unread=unread[:5],
                )
            break
    finally:
        _restore_handlers(previous)
        if notices is not None:  # bounded flush; whatever is left stays owed in the outbox
            notices.stop(timeout=config.notice_flush_timeout)
    log.info("stream stopped", lake=config.lake, graceful=stop_requested.is_set())
    if changed_to is not None:
        raise rules_record.RulesMismatch(
            f"tidemark stream: the lake {config.lake} now records {changed_to.describe()}, but this stream "
            f"ran with {rules_record.describe_rules(rules)}: it stopped after its last complete micro-batch. "
            "Start it again without rule options to use the lake's rules."
        )


def _run_query(
    spark: SparkSession,
    config: StreamConfig,
    processor: BatchProcessor,
    guard: _RulesGuard,
    audit: _LandingAudit,
    stop_requested: threading.Event,
    rotate: threading.Event,
    generation: landing_archive.Generation,
    rotate_at: int | None,
    unread_after: int = 0,
) -> rules_record.Recorded | None:
    """Run one generation's query until it stops, fails, rotates or finds files it never reads.

    It rotates once it has committed rotate_at batches; once it has committed unread_after batches
    (after a postponed rotation, the replay first) it stops when the landing audit finds files it
    never reads. Returns the lake's new rules if a migration stopped it.
    """
    writer = (
        source(spark, config)
        .writeStream.queryName(QUERY_NAME)
        .option("checkpointLocation", generation.query_dir(config.checkpoint).uri)
        .foreachBatch(processor)
    )
    if config.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        interval = parse_duration(config.trigger_interval)
        writer = writer.trigger(processingTime=f"{int(interval.total_seconds() * 1000)} milliseconds")
    changed_to = None
    next_drain = time.monotonic() + config.archive_interval
    landing_archive.clear_unfinished_first_write(generation.query_dir(config.checkpoint))
    progress = QueryProgressLog(QUERY_NAME)
    progress.attach(spark)  # before the start: the first trigger's progress too
    query = writer.start()
    try:
        while query.isActive:
            if query.awaitTermination(0.5):  # type: ignore[arg-type]  # pyspark annotates it int; it takes any positive seconds
                break
            changed_to = guard.changed()
            if changed_to is not None:
                log.error(
                    "the lake's session rules were changed while the stream ran: stopping",
                    lake=config.lake,
                    rules_id=changed_to.rules_id,
                    running_rules_id=guard.rules_id,
                )
                stop_requested.set()
            if config.archive and time.monotonic() >= next_drain:
                # committed batches' files out of the landing (beside the running batch: a batch
                # never reads a file of an earlier one), and the rotation's due date, both from
                # small listings of the checkpoint, every archive_interval
                next_drain = time.monotonic() + config.archive_interval
                try:
                    landing_archive.drain(config.landing, config.archive, config.checkpoint, _set_aside(config))
                    if (
                        rotate_at
                        and not rotate.is_set()
                        and _committed_batches(config.checkpoint, generation) >= rotate_at
                    ):
                        log.info(
                            "checkpoint rotation due: finishing the current micro-batch",
                            generation=generation.generation,
                        )
                        rotate.set()
                except OSError as exc:  # a storage hiccup: the files stay queued, moved next time
                    log.warning("could not archive landed files", error=str(exc)[:300])
            if stop_requested.is_set() or rotate.is_set():
                _stop_between_batches(query)
                break
            found = audit.maybe_run()
            if (
                found is not None
                and _committed_batches(config.checkpoint, generation) >= unread_after
                and _unread(config, generation, found)
            ):
                log.info(
                    "checkpoint rotation due: a pending file is under a name this generation has read",
                    generation=generation.generation,
                )
                rotate.set()  # the stop comes between two batches (the next pass)
    except StreamingQueryException:
        pass  # awaitTermination raises the query's failure; judged just below
    finally:
        last = query.lastProgress  # one report (the listener logged each as it came)
        ran = last is not None and progress_line(int(last.batchId), dict(last.durationMs or {})) is not None
        progress.detach(spark, int(last.batchId) if last is not None and ran else None)
    failure = query.exception()
    if failure is not None and not ((stop_requested.is_set() or rotate.is_set()) and STOP_MARK in str(failure)):
        raise failure
    return changed_to


def _set_aside(config: StreamConfig) -> Callable[[list[LandedFile]], None]:
    """What the archive does with a file replaced after it was read.

    Its new content quarantined (as the landing audit does), the file set aside under
    <archive>/_replaced/.
    """

    def set_aside(files: list[LandedFile]) -> None:
        landing_ledger.quarantine_replaced(
            config.landing, config.lake, landing_ledger.Audit(replaced=files), archive=config.archive
        )

    return set_aside


def _unread(
    config: StreamConfig, generation: landing_archive.Generation, found: landing_ledger.Audit | None
) -> list[str]:
    """The audit's pending files that the generation's query never reads.

    A name it has read already, landed again after its file was archived: a rotation lets the next
    one read them.
    """
    if not config.archive or found is None or not found.pending:
        return []
    try:
        return landing_archive.unread(config.landing, config.checkpoint, generation, found.pending)
    except OSError as exc:  # a storage hiccup: tried again at the next audit
        log.warning("could not read the file-source log", error=str(exc)[:300])
        return []


def _committed_batches(checkpoint: str, generation: landing_archive.Generation) -> int:
    """Batches the generation's query has committed (its commit log: the newest id + 1)."""
    ids = [int(n) for n in generation.query_dir(checkpoint).folder("commits").names() if n.isdigit()]
    return max(ids, default=-1) + 1


class _Either:
    """Set when either event is: the processor refuses new batches on a stop or a rotation."""

    def __init__(self, *events: threading.Event) -> None:
        self.events = events

    def is_set(self) -> bool:
        return any(e.is_set() for e in self.events)


def _migrate(config: StreamConfig, spark: SparkSession) -> SessionRules:
    """--migrate-rules: the given rules become the lake's, every date re-deduplicated under them."""
    # Imported here: the migration brings the dedup and its catalog (SQLAlchemy), which only
    # --migrate-rules needs.
    from tidemark.deduplication import rules_migration

    target = rules_migration.target_rules(config.lake, config.rules or {})
    return rules_migration.migrate(
        config.lake, target, spark=spark, recorded_by="tidemark stream --migrate-rules"
    ).record.rules


class _RulesGuard:
    """Re-reads the lake's rules record now and then.

    A migration while the stream runs stops it, so that it never keeps writing with rules the lake
    no longer has.
    """

    def __init__(self, lake: Lake, rules: SessionRules, interval: float) -> None:
        self.lake = lake
        self.rules_id = rules_record.fingerprint(rules)
        self.interval = interval
        self._next = time.monotonic() + interval

    def changed(self) -> rules_record.Recorded | None:
        if time.monotonic() < self._next:
            return None
        self._next = time.monotonic() + self.interval
        try:
            recorded = rules_record.current(self.lake)
        except (OSError, ValueError) as exc:  # a storage hiccup must not stop the stream
            log.warning("could not re-read the lake's session rules", lake=self.lake, error=str(exc)[:300])
            return None
        return recorded if recorded is not None and recorded.rules_id != self.rules_id else None


class _LandingAudit:
    """Now and then (and once when the stream ends), the landing compared with the ledger.

    Replaced files quarantined, in-progress names reported (tidemark.ingest.landing_ledger). A
    listing of the landing, as Spark makes every trigger; never fatal to the stream.
    """

    def __init__(self, landing: str, lake: Lake, interval: float, archive: str | None = None) -> None:
        self.landing, self.lake, self.interval, self.archive = landing, lake, interval, archive
        self._next = time.monotonic() + interval

    def maybe_run(self) -> landing_ledger.Audit | None:
        return self.run() if time.monotonic() >= self._next else None

    def run(self) -> landing_ledger.Audit | None:
        """The audit's findings (None if it could not run)."""
        self._next = time.monotonic() + self.interval
        try:
            return landing_ledger.report(self.landing, self.lake, archive=self.archive)
        except (OSError, ValueError) as exc:
            log.warning("could not audit the landing", landing=self.landing, error=str(exc)[:300])
            return None


def _notice_service(config: StreamConfig) -> NoticeService | None:
    if not config.notify_topic:
        return None
    policy = CadencePolicy(
        coalesce=parse_duration(config.notice_coalesce) if config.notice_coalesce else None,
        late_horizon=parse_duration(config.notice_late_horizon) if config.notice_late_horizon else None,
        digest_interval=parse_duration(config.notice_digest_interval),
    )
    return NoticeService(config.lake, config.notify_topic, policy=policy)


def _stop_between_batches(query: StreamingQuery) -> None:
    """Let the micro-batch under way commit, then stop.

    With a backlog the next batch starts at once, so the query is never idle: the processor
    refuses to start any batch once the stop is requested (StopRequested ends the query), and an
    idle query is stopped here directly.
    """
    log.info("stop requested: finishing the current micro-batch")
    while query.isActive:
        if not query.status.get("isTriggerActive"):
            query.stop()
            break
        try:
            query.awaitTermination(0.2)  # type: ignore[arg-type]  # pyspark annotates it int; it takes any positive seconds
        except StreamingQueryException:
            break  # StopRequested ended it


def _install_stop_handlers(stop_requested: threading.Event) -> dict[signal.Signals, _Handler]:
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous: dict[signal.Signals, _Handler] = {}
    for signum in (signal.SIGTERM, signal.SIGINT):
        previous[signum] = signal.signal(signum, lambda *_: stop_requested.set())
    return previous


def _restore_handlers(previous: dict[signal.Signals, _Handler]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)
