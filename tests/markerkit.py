"""Random lakes of receipt-partition markers, written through the stream's registration path
(receipts.complete_all, then the head), for tests of planning, the receipt index and
reconciliation that need no Spark: planning and reconciliation read markers only."""

from __future__ import annotations

import random
from datetime import date, datetime, timedelta, timezone

from tidemark.base import layout, times
from tidemark.panes import receipt_index, receipts
from tidemark.session.sessions import SessionRules
from tidemark.store.lake import Lake

DAY0 = date(2026, 3, 1)
RULES = [
    SessionRules.parse("30m", "1h", "0s"),
    SessionRules.parse("10m", "1h", "0s"),
    SessionRules.parse("25h", "1h", "0s"),
]


def stamp(batch: int) -> str:
    return layout.format_receipt_ts(datetime(2026, 4, 1, tzinfo=timezone.utc) + timedelta(seconds=10 * batch))


def random_partition(rng: random.Random, batch: int, event_date: date) -> receipts.ReceiptPartition:
    start = datetime.combine(event_date, datetime.min.time(), tzinfo=timezone.utc) + timedelta(
        seconds=rng.randrange(86400)
    )
    # most sessions are short; some run past midnight, a few for days
    span = rng.choice(
        [timedelta(minutes=rng.randrange(60))] * 6
        + [timedelta(hours=rng.randrange(30))] * 3
        + [timedelta(hours=rng.randrange(100))]
    )
    receipt_ts = stamp(batch)
    return receipts.ReceiptPartition(
        event_date=event_date,
        receipt_ts=receipt_ts,
        batch_id=batch,
        uri="unused",
        rows=1,
        events=1,
        pane_kinds=["early"],
        min_event_ts=times.iso_z(start),
        max_event_ts=times.iso_z(start + span),
        watermark=times.iso_z(start),
        late=False,
    )


def write_batch(lake: Lake, rng: random.Random, batch: int, days: int = 12) -> list[receipts.ReceiptPartition]:
    dates = sorted({DAY0 + timedelta(days=rng.randrange(days)) for _ in range(rng.randrange(1, 4))})
    written = [random_partition(rng, batch, d) for d in dates]
    receipts.complete_all(lake, written)
    receipt_index.write_head(lake, stamp(batch))
    return written
