"""Send what an outbox owes: one round (send), or until it is empty or time is up (drain).

Shared by both topics: the stream's NoticeService calls send() from its background thread (its
own retry loop keeps going while the stream runs); the corrected notices are drained with drain()
by whoever published a version (the dedup DAG's task, `tidemark demo`, a test). An entry is marked
sent only after Pub/Sub acknowledged it; what is not acknowledged stays owed in the lake.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

from tenacity import (
    RetryCallState,
    RetryError,
    Retrying,
    retry_if_exception_type,
    stop_after_delay,
    wait_exponential_jitter,
)

from tidemark.base.logs import get_logger
from tidemark.base.times import parse_iso
from tidemark.notices.outbox import Outbox
from tidemark.notices.sender import Sender

log = get_logger("notices")


class SendFailed(RuntimeError):
    """Some owed notices were not acknowledged this round."""


def _seconds_since(iso: str | None) -> float | None:
    """How long a notice was owed (recorded -> acknowledged), for the logs."""
    if not iso:
        return None
    return round((datetime.now(timezone.utc) - parse_iso(iso)).total_seconds(), 3)


def send(
    outbox: Outbox, sender: Sender, entries: list[dict[str, Any]], sink: str = "pubsub"
) -> tuple[list[dict[str, Any]], list[tuple[str, object]]]:
    """Publish outbox entries once to `sender`; mark the acknowledged ones sent.

    Returns (entries sent, [(notice_id, error)] of those not acknowledged).
    """
    if not entries:
        return [], []
    results = sender.send_many(entries)
    sent, failed = [], []
    for entry in entries:
        body = entry["notice"]
        result = results.get(body["notice_id"])
        if isinstance(result, tuple):
            message_id, published_at = result
            outbox.mark_sent(entry, str(message_id), published_at, sink=sink)
            sent.append(entry)
            log.info(
                "notice sent",
                notice_id=body["notice_id"],
                channel=outbox.channel,
                sink=sink,
                destination=sender.destination,
                message_id=str(message_id),
                owed_for_s=_seconds_since(entry.get("recorded_at")),
                **{k: body[k] for k in ("event_date", "receipt_ts", "version", "kind", "late") if k in body},
            )
        else:
            failed.append((body["notice_id"], result))
    return sent, failed


def raise_failed(failed: list[tuple[str, object]]) -> None:
    """Raise SendFailed naming the first failure, when there is any."""
    if failed:
        raise SendFailed(
            f"{len(failed)} notice(s) not acknowledged, first: {type(failed[0][1]).__name__}: {str(failed[0][1])[:200]}"
        )


def drain(
    outbox: Outbox,
    sender: Sender,
    timeout: float = 120.0,
    backoff_initial: float = 0.5,
    backoff_max: float = 15.0,
    sink: str = "pubsub",
    permanent: tuple[type[BaseException], ...] = (),
) -> int:
    """Publish every entry of the outbox owed to `sink` through `sender`, retrying.

    Retries (jittered exponential backoff, tenacity) while the sink is unreachable, for at most
    `timeout` seconds. Returns how many stay owed (0 when all went out); what stays is sent by the next drain.

    An error of a `permanent` type (the sink refused an entry: retrying cannot help, a bug of ours)
    is not retried: once the acknowledged entries of the round are marked sent, it is logged and
    raised, and the refused entry stays owed.
    """
    began = time.monotonic()
    sent_count = 0

    def one_round() -> None:
        nonlocal sent_count
        sent, failed = send(outbox, sender, outbox.owed(sink), sink=sink)
        sent_count += len(sent)
        refused = [(notice_id, error) for notice_id, error in failed if isinstance(error, permanent)]
        if refused:
            for notice_id, error in refused:
                log.error(
                    "sink refused a notice; it stays owed",
                    notice_id=notice_id,
                    channel=outbox.channel,
                    sink=sink,
                    destination=sender.destination,
                    error=str(error)[:300],
                )
            raise refused[0][1]
        if failed:
            sender.reset()  # a fresh channel reconnects at once when Pub/Sub is back
        raise_failed(failed)

    def log_retry(state: RetryCallState) -> None:
        log.warning(
            "sink unreachable, notices stay owed",
            channel=outbox.channel,
            sink=sink,
            lake=outbox.lake,
            attempt=state.attempt_number,
            retry_in_s=round(state.next_action.sleep, 2) if state.next_action else None,
            error=str(state.outcome.exception() if state.outcome else None)[:300],
        )

    try:
        for attempt in Retrying(
            retry=retry_if_exception_type(SendFailed),
            wait=wait_exponential_jitter(initial=backoff_initial, max=backoff_max),
            stop=stop_after_delay(timeout),
            before_sleep=log_retry,
            reraise=False,
        ):
            with attempt:
                one_round()
    except RetryError:
        pass
    left = len(outbox.owed(sink))
    log.info(
        "notices drained",
        channel=outbox.channel,
        sink=sink,
        destination=sender.destination,
        sent=sent_count,
        still_owed=left,
        seconds=round(time.monotonic() - began, 2),
    )
    return left
