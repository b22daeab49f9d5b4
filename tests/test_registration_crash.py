"""Registration of receipt partitions through SIGKILL, replays and two writers at once.

A writer process does what the stream's batch does once its panes are computed
(streaming_job/batch.py `_write_panes`): the partitions already complete (a replay) are kept, the
others get their panes file, then are registered (`receipts.complete_all`: arrival entry, reach
entries, marker, each partition on its own), then the head moves. Killed at a random point between
the data write and the end of the registration, then replayed, or run twice at once (a zombie
driver beside its replacement), the lake must keep the receipt index's promises:
  - a partition with a marker has its panes file, its arrival entry and its reach entries;
  - planning with the index equals planning that reads every marker;
  - a reconciliation pass from what changed equals the walk of every date;
  - the head never names a batch with an incomplete partition.
No Spark: the writer is plain Python on pyarrow, like the stream's executors' pane writer."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timedelta, timezone

import pytest

from tests.markerkit import DAY0, RULES
from tidemark.base import layout
from tidemark.orchestration import reconcile
from tidemark.panes import planning, receipt_index, receipts
from tidemark.session import rules_record
from tidemark.store.lake import Lake

WRITER = textwrap.dedent("""
    import os, random, sys
    from datetime import datetime, timedelta, timezone
    import pyarrow as pa, pyarrow.parquet as pq
    from tidemark.base import layout, times
    from tidemark.panes import receipt_index, receipts
    from tidemark.store.lake import Lake

    lake, batch, dates = Lake.open(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(batch)  # a replay computes the same partitions, as the stream's does
    receipt_ts = layout.format_receipt_ts(datetime(2026, 4, 1, tzinfo=timezone.utc) + timedelta(seconds=10 * batch))
    day0 = datetime(2026, 3, 1, tzinfo=timezone.utc)
    partitions = []
    for n in sorted(rng.sample(range(60), dates)):
        start = day0 + timedelta(days=n, seconds=rng.randrange(86400))
        end = start + timedelta(hours=rng.choice([0, 0, 1, 5, 30, 80]), minutes=rng.randrange(60))
        partitions.append(receipts.ReceiptPartition(
            event_date=start.date(), receipt_ts=receipt_ts, batch_id=batch,
            uri=lake.receipt_dir(start.date(), receipt_ts), rows=1, events=1,
            pane_kinds=["early"], min_event_ts=times.iso_z(start), max_event_ts=times.iso_z(end),
            watermark=times.iso_z(start), late=False))
    done = receipts.complete_among(lake, partitions)
    pending = [p for p in partitions if (p.event_date, p.receipt_ts) not in done]
    for p in pending:
        os.makedirs(p.uri, exist_ok=True)
        pq.write_table(pa.table({"user_id": [f"u{batch}"], "rows": [1]}), p.uri + "/part-00000.parquet")
    print("DATA", flush=True)
    receipts.complete_all(lake, pending)
    receipt_index.write_head(lake, receipt_ts)
    print("DONE", flush=True)
""")


def _start(lake: Lake, batch: int, dates: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, lake, str(batch), str(dates)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )


def _wait_for(proc: subprocess.Popen, word: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    for line in proc.stdout:
        if line.strip() == word:
            return
        assert time.monotonic() < deadline
    raise AssertionError(f"the writer ended before {word}")


def _complete(lake: Lake) -> list[receipts.ReceiptPartition]:
    return [
        receipts.read_marker(lake, d, ts)
        for d in receipts.list_event_dates(lake)
        for ts in receipts.list_receipts(lake, d)
    ]


def check_promises(lake: Lake) -> None:
    complete = _complete(lake)
    for p in complete:
        folder = lake.receipt_dir(p.event_date, p.receipt_ts)
        assert os.path.getsize(os.path.join(folder, "part-00000.parquet")) > 0, folder
        assert os.path.exists(lake.arrival_entry(p.receipt_ts, p.event_date)), folder
        for into in receipt_index.reached_dates(p):
            assert os.path.exists(lake.reach_entry(into, p.event_date, p.receipt_ts)), (folder, into)
    head = receipt_index.head(lake)
    if head is not None:  # every partition of a batch at or before the head is complete
        folders = [(d, ts) for d in receipts.list_event_dates(lake) for ts in receipts.list_receipt_names(lake, d)]
        assert {(d, ts) for d, ts in folders if ts <= head} <= {(p.event_date, p.receipt_ts) for p in complete}
    flag = os.path.join(lake.receipt_index_dir(), receipt_index.COMPLETE)
    for day in range(0, 60, 5):
        event_date = DAY0 + timedelta(days=day)
        for rules in RULES:
            hi = DAY0 + timedelta(days=day + 2)
            indexed = planning.plan(planning.LakeIndex(lake), event_date, rules, hi).keys
            os.rename(flag, flag + ".off")
            try:
                scanned = planning.plan(planning.LakeIndex(lake), event_date, rules, hi).keys
            finally:
                os.rename(flag + ".off", flag)
            assert indexed == scanned, (event_date, rules)
    walked = reconcile.staleness(lake, event_dates=receipts.list_event_dates(lake))
    assert [s.to_json() for s in reconcile.staleness(lake)] == [s.to_json() for s in walked]


@pytest.fixture
def lake(tmp_path):
    path = Lake.open(tmp_path / "lake")
    rules_record.ensure(path, RULES[0], "test")
    receipt_index.start(path)
    return path


def test_sigkill_between_the_data_write_and_the_registration_then_a_replay(lake):
    rng = random.Random(1)
    for batch in range(5):
        writer = _start(lake, batch, 40)
        _wait_for(writer, "DATA")
        time.sleep(rng.uniform(0, 0.15))  # killed before, during or after the registration
        writer.send_signal(signal.SIGKILL)
        writer.wait(30)
        check_promises(lake)  # what a reader sees right after the crash
        replay = _start(lake, batch, 40)
        _wait_for(replay, "DONE")
        assert replay.wait(30) == 0
        check_promises(lake)
        assert len({p.event_date for p in _complete(lake) if p.batch_id == batch}) == 40  # all complete now


def test_two_writers_registering_one_batch_at_once(lake):
    for batch in range(3):
        writers = [_start(lake, batch, 40) for _ in range(2)]  # a zombie driver and its replacement
        for writer in writers:
            _wait_for(writer, "DONE")
            assert writer.wait(30) == 0
        check_promises(lake)
    assert receipt_index.head(lake) == layout.format_receipt_ts(
        datetime(2026, 4, 1, tzinfo=timezone.utc) + timedelta(seconds=20)
    )
