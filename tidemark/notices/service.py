"""NoticeService: the stream's notice listener and the background thread that publishes.

    service = NoticeService(lake, "projects/p/topics/t", policy=CadencePolicy(...)).start()
    run_stream(config, listeners=[service.on_batch])     # inside foreachBatch, before the commit
    service.stop(timeout=30)                             # flush what is owed, bounded

on_batch() only writes to the lake (outbox entries, pending groups): the stream never waits for
Pub/Sub. The thread closes coalescing groups when their window ends and publishes what is owed;
when Pub/Sub is unreachable it backs off exponentially (tenacity) and keeps trying while the
stream keeps writing. start() first publishes whatever an earlier run left owed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from tenacity import RetryCallState, RetryError, Retrying, retry_if_exception_type, wait_exponential_jitter

from tidemark.base import layout, names
from tidemark.base.logs import get_logger
from tidemark.notices import availability_notice
from tidemark.notices.cadence import PARTITION, CadencePolicy, PendingGroups
from tidemark.notices.drain import SendFailed, raise_failed, send
from tidemark.notices.outbox import Outbox
from tidemark.notices.sender import Sender, sender_for
from tidemark.panes.receipts import BatchReport, ReceiptPartition
from tidemark.store.lake import Lake

log = get_logger("notices")


def _partition_dict(partition: ReceiptPartition | dict[str, Any]) -> dict[str, Any]:
    return partition.to_json() if isinstance(partition, ReceiptPartition) else dict(partition)


class NoticeService:
    """The stream's availability notices: record each complete partition's notice, send it in the background."""

    def __init__(
        self,
        lake: Lake,
        topic: str | None = None,
        dataset: str | None = None,
        policy: CadencePolicy | None = None,
        sender: Sender | None = None,
        tick: float = 1.0,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        clock: Callable[[], datetime] | None = None,
        close_groups: bool = True,
    ) -> None:
        """A service for `lake`'s notices, sent to `topic` (None: recorded, not sent) under `policy`."""
        if sender is None and topic is None:
            raise ValueError("NoticeService needs a topic or a sender")
        self.lake = lake
        self.dataset = dataset or names.get("DATASET")
        self.policy = policy or CadencePolicy()
        self.sender: Sender = sender or sender_for(str(topic))
        self.outbox = Outbox(lake)
        self.groups = PendingGroups(lake, self.dataset, self.outbox)
        self.tick = tick
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.clock = clock or (lambda: datetime.now(timezone.utc))
        # Only the process that owns the groups (the stream, or a CLI run while it is stopped) may
        # close them: two writers of one group file could advertise a partition twice.
        self.close_groups = close_groups
        self._owed: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._interrupt = threading.Event()
        self._stopping = threading.Event()
        self._deadline: float | None = None
        self._flush_groups = False
        self._thread: threading.Thread | None = None
        self.sent = 0
        self.failures = 0

    # ---- lifecycle --------------------------------------------------------------------------

    def start(self) -> NoticeService:
        """Load what an earlier run left (pending groups, owed notices) and start publishing."""
        self.groups.load()
        owed = self.outbox.owed()
        with self._lock:
            for entry in owed:
                self._owed[entry["notice"]["notice_id"]] = entry
        log.info(
            "notice service starting",
            lake=self.lake,
            destination=self.sender.destination,
            owed=len(owed),
            waiting_groups=len(self.groups.waiting()),
            **self.policy.describe(),
        )
        self._thread = threading.Thread(target=self._run, name="tidemark-notices", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 30.0, flush_groups: bool = True) -> int:
        """Stop after publishing what is owed, waiting at most `timeout` seconds.

        Returns how many notices are still owed (they stay in the outbox for the next run).
        With flush_groups, open coalescing groups are closed now instead of waiting for
        their windows.
        """
        self._flush_groups = flush_groups
        self._deadline = time.monotonic() + timeout
        self._stopping.set()
        self._interrupt.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(
                timeout + self.sender.send_timeout + 15 if hasattr(self.sender, "send_timeout") else timeout + 15
            )
        self.sender.close()
        left = self.owed_count()
        log.info(
            "notice service stopped",
            lake=self.lake,
            sent=self.sent,
            still_owed=left,
            waiting_groups=len(self.groups.waiting()),
        )
        return left

    def owed_count(self) -> int:
        """How many recorded notices the sender has not had acknowledged yet."""
        with self._lock:
            return len(self._owed)

    def idle(self) -> bool:
        """Nothing owed and no group waiting: everything recorded so far was advertised."""
        return self.owed_count() == 0 and not self.groups.waiting()

    # ---- the stream's listener ----------------------------------------------------------------

    def on_batch(self, report: BatchReport) -> None:
        """BatchProcessor listener: record the batch's notices durably, then wake the sender.

        Runs before Spark commits the batch; an exception fails the batch, which is replayed.
        """
        self.groups.forget_committed(report.batch_id)
        # Older event dates first (a date's own in the batch's order): a file's late correction and
        # its open date complete in one batch, and the run whose notice goes out first is usually
        # started first, so with one dedup at a time the late correction does not wait for the open
        # date's (tidemark/orchestration/date_priority.py orders the dedups of one scheduler loop).
        partitions = [_partition_dict(p) for p in report.partitions]
        for partition in sorted(partitions, key=lambda p: layout.as_event_date(p["event_date"])):
            self.on_partition(partition)
        self._wake.set()

    def on_partition(self, partition: dict[str, Any]) -> None:
        """Record (or group) the notice of a partition the stream completed: the batch listener."""
        kind, window = self.policy.route(partition)
        if window is None:
            body = availability_notice.build(self.dataset, [partition], PARTITION)
            if self.outbox.record(body):
                self._enqueue(body)
        else:
            self.groups.add(partition, kind, window)

    def _enqueue(self, body: dict[str, Any]) -> None:
        """Queue a recorded notice for the sender, unless it was sent already.

        A notice already sent (a group closed again after a crash) has no outbox entry and
        is not sent twice.
        """
        entry = self.outbox.read_owed(body["notice_id"])
        if entry is None:
            return
        with self._lock:
            self._owed.setdefault(body["notice_id"], entry)

    # ---- the sender thread -----------------------------------------------------------------

    def _run(self) -> None:
        while True:
            try:
                for attempt in Retrying(
                    retry=retry_if_exception_type(SendFailed),
                    wait=wait_exponential_jitter(initial=self.backoff_initial, max=self.backoff_max),
                    stop=self._give_up,
                    sleep=self._sleep,
                    reraise=False,
                    before_sleep=self._log_retry,
                ):
                    with attempt:
                        self._round()
            except RetryError:
                pass  # stopping and out of time: what is left stays owed in the outbox
            except Exception:  # noqa: BLE001 - never let the thread die; log and go on
                log.exception("notice sender round failed", lake=self.lake)
                self._sleep(self.backoff_max)
            if self._stopping.is_set() and (self.idle_after_flush() or self._out_of_time()):
                return
            self._wake.wait(self.tick)
            self._wake.clear()

    def idle_after_flush(self) -> bool:
        """Whether a flushing stop has nothing left to send or close."""
        return self.owed_count() == 0 and (not (self._flush_groups and self.close_groups) or not self.groups.waiting())

    def _round(self) -> None:
        everything = self._stopping.is_set() and self._flush_groups
        due = self.groups.due(self.clock(), everything=everything) if self.close_groups else []
        for group_id in due:
            body = self.groups.close(group_id)
            if body is not None:
                self._enqueue(body)
        with self._lock:
            entries = list(self._owed.values())
        if not entries:
            return
        sent, failed = send(self.outbox, self.sender, entries)
        with self._lock:
            for entry in sent:
                self._owed.pop(entry["notice"]["notice_id"], None)
        self.sent += len(sent)
        if failed:
            self.failures += 1
            self.sender.reset()
        raise_failed(failed)

    def _out_of_time(self) -> bool:
        return self._deadline is not None and time.monotonic() >= self._deadline

    def _give_up(self, retry_state: RetryCallState) -> bool:
        return self._stopping.is_set() and self._out_of_time()

    def _sleep(self, seconds: float) -> None:
        if self._deadline is not None:
            seconds = max(0.0, min(seconds, self._deadline - time.monotonic()))
        self._interrupt.wait(seconds)
        self._interrupt.clear()

    def _log_retry(self, retry_state: RetryCallState) -> None:
        log.warning(
            "Pub/Sub unreachable, notices stay owed",
            lake=self.lake,
            owed=self.owed_count(),
            attempt=retry_state.attempt_number,
            retry_in_s=round(retry_state.next_action.sleep, 2) if retry_state.next_action else None,
            error=str(retry_state.outcome.exception() if retry_state.outcome else None)[:300],
        )
