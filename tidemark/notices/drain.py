"""Send what an outbox owes: one round (send), or until it is empty or time is up (drain).

Shared by both topics: the stream's NoticeService calls send() from its background thread (its
own retry loop keeps going while the stream runs); the corrected notices are drained with drain()
by whoever published a version (the dedup DAG's task, `tidemark demo`, a test). An entry is marked
sent only after Pub/Sub acknowledged it; what is not acknowledged stays owed in the lake.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

from tenacity import RetryError, Retrying, retry_if_exception_type, stop_after_delay, wait_exponential_jitter

from tidemark.logs import get_logger
from tidemark.notices.outbox import Outbox
from tidemark.times import parse_iso

log = get_logger("notices")


class SendFailed(RuntimeError):
    """Some owed notices were not acknowledged this round."""


def _seconds_since(iso: str | None) -> float | None:
    """How long a notice was owed (recorded -> acknowledged), for the logs."""
    if not iso:
        return None
    return round((datetime.now(timezone.utc) - parse_iso(iso)).total_seconds(), 3)


def send(outbox: Outbox, sender, entries: list[dict]) -> tuple[list[dict], list[tuple[str, object]]]:
    """Publish outbox entries once; mark the acknowledged ones sent.
    Returns (entries sent, [(notice_id, error)] of those not acknowledged)."""
    if not entries:
        return [], []
    results = sender.send_many(entries)
    sent, failed = [], []
    for entry in entries:
        body = entry["notice"]
        result = results.get(body["notice_id"])
        if isinstance(result, tuple):
            message_id, published_at = result
            outbox.mark_sent(entry, str(message_id), published_at)
            sent.append(entry)
            log.info(
                "notice sent",
                notice_id=body["notice_id"],
                channel=outbox.channel,
                topic=getattr(sender, "topic", None),
                message_id=str(message_id),
                owed_for_s=_seconds_since(entry.get("recorded_at")),
                **{k: body[k] for k in ("event_date", "receipt_ts", "version", "kind", "late") if k in body},
            )
        else:
            failed.append((body["notice_id"], result))
    return sent, failed


def raise_failed(failed: list[tuple[str, object]]) -> None:
    if failed:
        raise SendFailed(
            f"{len(failed)} notice(s) not acknowledged, first: {type(failed[0][1]).__name__}: {str(failed[0][1])[:200]}"
        )


def drain(
    outbox: Outbox, sender, timeout: float = 120.0, backoff_initial: float = 0.5, backoff_max: float = 15.0
) -> int:
    """Publish every owed entry of the outbox, retrying (jittered exponential backoff, tenacity)
    while Pub/Sub is unreachable, for at most `timeout` seconds. Returns how many stay owed (0 when
    all went out); what stays is sent by the next drain."""
    began = time.monotonic()
    sent_count = 0

    def one_round() -> None:
        nonlocal sent_count
        sent, failed = send(outbox, sender, outbox.owed())
        sent_count += len(sent)
        if failed:
            sender.reset()  # a fresh channel reconnects at once when Pub/Sub is back
        raise_failed(failed)

    def log_retry(state) -> None:
        log.warning(
            "Pub/Sub unreachable, notices stay owed",
            channel=outbox.channel,
            lake=outbox.lake,
            attempt=state.attempt_number,
            retry_in_s=round(state.next_action.sleep, 2) if state.next_action else None,
            error=str(state.outcome.exception())[:300],
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
    left = len(outbox.owed())
    log.info(
        "notices drained",
        channel=outbox.channel,
        topic=getattr(sender, "topic", None),
        sent=sent_count,
        still_owed=left,
        seconds=round(time.monotonic() - began, 2),
    )
    return left
