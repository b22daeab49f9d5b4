"""A simulated lake for dedup tests: randomized events, arrival orders, and a small simulator of
what the stream may legitimately write, as real receipt partitions (parquet + marker written last).

Each micro-batch emits, per user, the sessions (islands) of its new events together with some, all
or none of the user's earlier events: all = accumulating panes of open sessions, none = a too_late
fragment after the state expired, some = a mix. An island of a subset of the events always lies
inside one final session, which is all the stream promises the dedup step. Driving the real stream
through many arrival orders would be slow (tests/test_dedup_stream.py runs it on crafted cases).
"""

from __future__ import annotations

import hashlib
import os
import random
from collections import defaultdict, deque
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.parquet as pq

from dedup_sql import rules as sql_rules
from tests import reference
from tests.helpers import lake_session_set, session_set
from tidemark.base import layout
from tidemark.base.session_rules import SessionRules
from tidemark.base.times import iso_z
from tidemark.deduplication.dedup import run_dedup
from tidemark.panes import receipts
from tidemark.store.lake import Lake

GAP = timedelta(minutes=30)
RULES = SessionRules(gap=GAP)
DAY0 = datetime(2026, 3, 6, tzinfo=timezone.utc)
RECEIPT0 = datetime(2026, 3, 10, 12, 0, tzinfo=timezone.utc)

EVENT_TYPE = sql_rules.event_arrow_type()
PANE_SCHEMA = pa.schema(
    [
        ("session_id", pa.string()),
        ("user_id", pa.string()),
        ("session_start", pa.timestamp("us", tz="UTC")),
        ("session_end", pa.timestamp("us", tz="UTC")),
        ("event_count", pa.int64()),
        ("event_ids", pa.list_(pa.string())),
        ("events", pa.list_(EVENT_TYPE)),
        ("pane_kind", pa.string()),
        ("pane_index", pa.int32()),
        ("batch_id", pa.int64()),
        ("watermark", pa.timestamp("us", tz="UTC")),
    ]
)


# --- workload: sessions around midnights, bridging events, duplicates -----------------------------


def make_events(rng: random.Random, users: int = 5, days: int = 3) -> list[tuple]:
    """(user_id, event_id, event_ts, event_type) of sessions clustered around midnight, so that many
    cross it, and pairs of sessions 35-55 minutes apart with an event in between (a bridge)."""
    events = []
    for u in range(users):
        user = f"u{u}"
        n = 0
        for day in range(days):
            for _ in range(rng.randint(1, 3)):
                start = DAY0 + timedelta(days=day, hours=rng.choice([rng.uniform(22.5, 24.4), rng.uniform(0, 24)]))
                t = start
                for _ in range(rng.randint(1, 6)):
                    n += 1
                    events.append((user, f"{user}-e{n}", t, rng.choice(["play", "pause", "seek"])))
                    t += timedelta(minutes=rng.uniform(1, 28))
                if rng.random() < 0.5:  # a second session just over a gap later, bridged by one event
                    bridge = t + timedelta(minutes=rng.uniform(5, 25))
                    later = bridge + timedelta(minutes=rng.uniform(5, 25))
                    n += 1
                    events.append((user, f"{user}-e{n}", bridge, "bridge"))
                    for _ in range(rng.randint(1, 3)):
                        n += 1
                        events.append((user, f"{user}-e{n}", later, "play"))
                        later += timedelta(minutes=rng.uniform(1, 20))
    return events


def arrivals(rng: random.Random, events: list[tuple], batches: int) -> list[list[tuple]]:
    """Deliveries in a random order, some repeated, cut into micro-batches."""
    deliveries = list(events) + [e for e in events if rng.random() < 0.25]
    rng.shuffle(deliveries)
    cuts = sorted(rng.sample(range(1, len(deliveries)), batches - 1))
    return [deliveries[a:b] for a, b in zip([0] + cuts, cuts + [len(deliveries)], strict=False)]


# --- the simulated stream --------------------------------------------------------------------------


class SimulatedStream:
    def __init__(self, lake: Lake, seed: int):
        self.lake = lake
        self.rng = random.Random(seed * 7919)
        self.seen: dict[str, dict[str, tuple]] = defaultdict(dict)
        self.batch_id = 0

    def batch(self, deliveries: list[tuple], mode: float | None = None) -> list[receipts.ReceiptPartition]:
        """One micro-batch; `mode` < 0.3 forces fragments, < 0.7 accumulation (default: random)."""
        receipt_time = RECEIPT0 + timedelta(seconds=10 * self.batch_id)
        receipt_ts = layout.format_receipt_ts(receipt_time)
        new_by_user: dict[str, dict[str, tuple]] = defaultdict(dict)
        for user, event_id, ts, kind in deliveries:
            new_by_user[user][event_id] = (user, event_id, ts, kind)
        rows = []
        for user, new in sorted(new_by_user.items()):
            old = list(self.seen[user].values())
            mode = self.rng.random() if mode is None else mode
            if mode < 0.3:
                pool_old = []  # a too_late fragment: state long gone
            elif mode < 0.7:
                pool_old = old  # accumulating panes of open sessions
            else:
                pool_old = [e for e in old if self.rng.random() < 0.5]
            pool = {e[1]: e for e in pool_old}
            pool.update(new)
            for island in _islands(list(pool.values())):
                if any(e[1] in new for e in island) or self.rng.random() < 0.1:
                    rows.append(_pane(island, self.batch_id, receipt_time))
            self.seen[user].update(new)
        written = self._write(rows, receipt_ts)
        self.batch_id += 1
        return written

    def _write(self, rows: list[dict], receipt_ts: str) -> list[receipts.ReceiptPartition]:
        by_date = defaultdict(list)
        for row in rows:
            by_date[row["session_start"].date()].append(row)
        out = []
        for event_date, part in sorted(by_date.items()):
            folder = self.lake.receipt_dir(event_date, receipt_ts)
            os.makedirs(folder, exist_ok=True)
            pq.write_table(pa.Table.from_pylist(part, schema=PANE_SCHEMA), f"{folder}/part-00000.parquet")
            partition = receipts.ReceiptPartition(
                event_date=event_date,
                receipt_ts=receipt_ts,
                batch_id=self.batch_id,
                uri=folder,
                rows=len(part),
                events=sum(r["event_count"] for r in part),
                pane_kinds=sorted({r["pane_kind"] for r in part}),
                min_event_ts=iso_z(min(r["session_start"] for r in part), "microseconds"),
                max_event_ts=iso_z(max(r["session_end"] for r in part), "microseconds"),
                watermark=iso_z(part[0]["watermark"], "microseconds"),
                late=False,
            )
            receipts.complete(self.lake, partition)
            out.append(partition)
        return out


def _islands(events: list[tuple]) -> list[list[tuple]]:
    events = sorted(events, key=lambda e: (e[2], e[1]))
    out, current = [], [events[0]]
    for e in events[1:]:
        if e[2] - current[-1][2] >= GAP:
            out.append(current)
            current = []
        current.append(e)
    out.append(current)
    return out


def _pane(island: list[tuple], batch_id: int, receipt_time: datetime) -> dict:
    user = island[0][0]
    start, end = island[0][2], island[-1][2]
    return {
        "session_id": hashlib.sha256(f"{user}|{start.isoformat()}".encode()).hexdigest()[:32],
        "user_id": user,
        "session_start": start,
        "session_end": end,
        "event_count": len(island),
        "event_ids": [e[1] for e in island],
        "events": [{"event_ts": e[2], "event_id": e[1], "event_type": e[3], "payload": "{}"} for e in island],
        "pane_kind": "early",
        "pane_index": 1,
        "batch_id": batch_id,
        "watermark": receipt_time,
    }


# --- checks ------------------------------------------------------------------------------------------


def lake_with(tmp_path, seed=5, batches=4, upto=None):
    """A simulated lake of 3 users over 2 days, fed `upto` of its `batches` arrival batches:
    returns (lake, stream, events, batches) so a test can feed the rest later."""
    rng = random.Random(seed)
    events = make_events(rng, users=3, days=2)
    lake = Lake.open(tmp_path / "lake")
    stream = SimulatedStream(lake, seed)
    cut = arrivals(rng, events, batches)
    for deliveries in cut[:upto]:
        stream.batch(deliveries)
    return lake, stream, events, cut


def busiest_date(events) -> str:
    """The event date with the most events (the first such date on a tie)."""
    days = [ts.date().isoformat() for _, _, ts, _ in events]
    return max(sorted(set(days)), key=days.count)


def published(lake: Lake, event_date: str) -> set[tuple]:
    """Empty for a date never notified nor affected: it must then have no session (checked by caller)."""
    return lake_session_set(lake, event_date, with_count=True)


def expected(events: list[tuple], event_date: str) -> set[tuple]:
    return session_set(reference.sessionize(events, GAP), event_date, with_count=True)


def converge(lake: Lake, spark, dates: set[str]) -> list[dict]:
    """What the DAG does: run every notified date, then every date a run says it affected."""
    queue, runs = deque(sorted(dates)), []
    while queue:
        event_date = queue.popleft()
        result = run_dedup(lake, event_date, RULES, spark=spark)
        runs.append(result.to_json())
        queue.extend(d for d in map(str, result.affected_dates) if d not in queue)
        assert len(runs) < 40, f"affected dates do not settle: {runs}"
    return runs


def converge_obligations(lake, spark, dates, rules=RULES, full=False) -> list[dict]:
    """Dedup `dates`, then every date their runs owe a rerun, until no obligation is pending."""
    from tidemark.orchestration import obligations

    queue, runs = sorted(dates), []
    while queue:
        event_date = queue.pop(0)
        runs.append(run_dedup(lake, event_date, rules, spark=spark, full=full).to_json())
        queue += [o["event_date"] for o in obligations.pending(lake) if o["event_date"] not in queue]
        assert len(runs) < 60, runs
    return runs
