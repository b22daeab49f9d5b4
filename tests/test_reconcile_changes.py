"""Reconciliation from what changed (tidemark/orchestration/reconcile.py, `Cursor`): a pass looks at the dates
stale at the last pass, the dates that received receipt partitions since (the receipt index's
arrivals) and the dates owed a rerun, and finds exactly what walking every date finds. No Spark:
versions are committed to the Iceberg table with no data files (what a version of a date without
sessions is), which is all reconciliation reads of them."""

from __future__ import annotations

import os
import random
from dataclasses import replace
from datetime import date, datetime, timedelta, timezone

import pytest

from tests import markerkit
from tests.markerkit import stamp as _stamp
from tests.markerkit import write_batch as _write_batch
from tidemark.base.layout import as_event_date
from tidemark.base.session_rules import SessionRules
from tidemark.iceberg import commits, run_markers, table_versions
from tidemark.orchestration import obligations, reconcile
from tidemark.panes import planning, receipt_index, receipts
from tidemark.session import rules_record
from tidemark.store import lake as lake_layout
from tidemark.store.lake import Lake
from tidemark.store.version_record import VersionRecord

RULES = SessionRules.parse("30m", "1h", "0s")
NOW = datetime(2026, 4, 2, tzinfo=timezone.utc)


def _commit_version(lake: Lake, event_date: date, rng: random.Random) -> None:
    """A version of event_date that includes its complete receipt partitions (all, or all but the
    newest: a version made before the last batch)."""
    stamps = receipts.list_receipts(lake, event_date)
    if stamps and rng.random() < 0.3:
        stamps = stamps[:-1]
    keys = [planning.receipt_key(event_date, ts) for ts in stamps]
    # the keys a dedup run of this test's vintage wrote (no context: never incremental)
    marker = VersionRecord.holding(
        event_date=event_date,
        run_id=run_markers.new_run_id(),
        files=(),
        sessions=0,
        receipts=tuple(keys),
        max_receipt_ts=max(stamps, default=_stamp(0)),
        reach=None,
        hi=event_date,
        planned_through=receipt_index.head(lake),
        affected_dates=(),
        **rules_record.marker_fields(RULES),
    )
    run_markers.write_marker(lake, marker)
    commits.commit(lake, marker)


def _every_date(lake: Lake) -> list[date]:
    return sorted(
        set(receipts.list_event_dates(lake))
        | {as_event_date(d) for d in table_versions.dates_with_version(lake)}
        | {as_event_date(o["event_date"]) for o in obligations.pending(lake)}
    )


def _cursor(lake: Lake) -> dict:

    return lake.reconcile_cursor().read_json()


@pytest.fixture
def lake(tmp_path):
    path = Lake.open(tmp_path / "lake")
    rules_record.ensure(path, RULES, "test")
    receipt_index.start(path)  # what the stream does on an empty lake
    return path


@pytest.mark.parametrize("seed", range(3))
def test_every_pass_finds_what_walking_every_date_finds(lake, seed):
    rng = random.Random(seed)
    batch, walked_at, fewer = 0, set(), 0
    for step in range(36):
        roll = rng.random()
        dates = receipts.list_event_dates(lake)
        if roll < 0.45 or not dates:
            _write_batch(lake, rng, batch, days=8)
            batch += 1
        elif roll < 0.8:
            _commit_version(lake, rng.choice(dates), rng)
        elif roll < 0.85:
            obligations.record(lake, [rng.choice(dates)], rng.choice(dates), _stamp(batch))
        elif roll < 0.9:
            _replay_at_head(lake, rng)
        else:
            owed = obligations.pending(lake)
            if owed:
                obligations.discharge(lake, [rng.choice(owed)])
        found = reconcile.staleness(lake, now=NOW + timedelta(minutes=step))
        walked = reconcile.staleness(lake, event_dates=_every_date(lake))
        assert [s.to_json() for s in found] == [s.to_json() for s in walked], step
        cursor = _cursor(lake)
        walked_at.add(cursor["walked_at"])
        fewer += cursor["examined"] < len(_every_date(lake))
    # only the first pass walked every date; the others looked at what changed (often fewer dates
    # than the lake holds: most stay stale here, as versions are made for a few) and still agreed
    assert len(walked_at) == 1
    assert fewer > 0


def _replay_at_head(lake: Lake, rng: random.Random) -> list[receipts.ReceiptPartition]:
    """What a replay of the batch at the head that reached other verdicts writes (a crash after its
    head, before Spark's commit): complete partitions under the head's receipt_ts, of dates the
    first attempt wrote none of; the head stays."""
    head = receipt_index.head(lake)
    if head is None:
        return []
    day = markerkit.DAY0 + timedelta(days=rng.randrange(8))
    if receipts.is_complete(lake, day, head):
        return []
    written = [replace(markerkit.random_partition(rng, 0, day), receipt_ts=head)]
    receipts.complete_all(lake, written)
    return written


def test_a_partition_written_under_the_last_pass_head_is_found(lake):
    """A pass at head H; a replay of H's batch then completes a partition of another date under H.
    The next pass finds that date stale, as a walk does, before the stream writes anything else."""
    rng = random.Random(21)
    for batch in range(6):
        _write_batch(lake, rng, batch, days=6)
    for event_date in receipts.list_event_dates(lake):
        _commit_version(lake, event_date, random.Random(0))  # rng 0: every receipt included
    assert reconcile.staleness(lake, now=NOW) == []
    written = []
    while not written:
        written = _replay_at_head(lake, rng)
    found = reconcile.staleness(lake, now=NOW)
    assert [s.event_date for s in found] == [written[0].event_date]
    assert found[0].pending_receipts == [planning.receipt_key(written[0].event_date, written[0].receipt_ts)]
    walked = reconcile.staleness(lake, event_dates=_every_date(lake))
    assert [s.to_json() for s in found] == [s.to_json() for s in walked]
    # once seen, the head's arrivals are not looked at again by a pass with nothing new
    at_head = [as_event_date(d) for d in _cursor(lake)["at_head"]]  # the cursor's JSON: YYYY-MM-DD
    assert at_head == sorted({p.event_date for p in written} | _head_dates(lake))


def _head_dates(lake: Lake) -> set[date]:
    head = receipt_index.head(lake)
    return {d for d in receipts.list_event_dates(lake) if receipts.is_complete(lake, d, head)}


def test_a_pass_lists_only_the_dates_that_changed(lake, monkeypatch):
    rng = random.Random(11)
    for batch in range(12):
        _write_batch(lake, rng, batch, days=6)
    for event_date in receipts.list_event_dates(lake):
        _commit_version(lake, event_date, random.Random(0))  # rng 0: every receipt included
    assert reconcile.staleness(lake, now=NOW) == []  # the first pass walks every date
    listed = []
    real = receipts.list_receipt_names
    monkeypatch.setattr(receipts, "list_receipt_names", lambda lk, d: listed.append(d) or real(lk, d))
    assert reconcile.staleness(lake, now=NOW) == []
    assert listed == []
    written = _write_batch(lake, rng, 12, days=6)
    stale = reconcile.staleness(lake, now=NOW)
    assert sorted(listed) == sorted({p.event_date for p in written})
    assert [s.event_date for s in stale] == sorted({p.event_date for p in written})
    listed.clear()
    assert [s.event_date for s in reconcile.staleness(lake, now=NOW)] == [s.event_date for s in stale]
    assert sorted(listed) == [s.event_date for s in stale]  # the stale ones are looked at again


def test_a_pass_walks_every_date_when_it_cannot_know_what_changed(lake):
    rng = random.Random(2)
    _write_batch(lake, rng, 0)
    assert reconcile.Cursor.start(lake, RULES, NOW, full=False).full  # no previous pass
    reconcile.staleness(lake, now=NOW)
    assert not reconcile.Cursor.start(lake, RULES, NOW, full=False).full
    assert reconcile.Cursor.start(lake, RULES, NOW, full=True).full
    assert reconcile.Cursor.start(lake, SessionRules.parse("45m", "1h", "0s"), NOW, full=False).full
    assert reconcile.Cursor.start(lake, RULES, NOW + reconcile.FULL_EVERY, full=False).full
    receipt_index.write_head(lake, _stamp(-1))  # a head older than the cursor's
    assert reconcile.Cursor.start(lake, RULES, NOW, full=False).full


def test_arrivals_name_the_dates_received_between_two_times(lake):
    rng = random.Random(4)
    written = [_write_batch(lake, rng, batch) for batch in range(0, 8640 * 2 + 1, 2160)]  # 2 days
    for a, b in [(0, 3), (2, 6), (4, 8), (0, 8)]:
        expected = {p.event_date for batch in written[a + 1 : b + 1] for p in batch}
        assert receipt_index.arrived(lake, written[a][0].receipt_ts, written[b][0].receipt_ts) == expected
        since = {p.event_date for batch in written[a + 1 :] for p in batch}
        assert receipt_index.arrived(lake, written[a][0].receipt_ts) == since  # up to the newest
    with pytest.raises(ValueError, match="needs a start"):
        receipt_index.arrived(lake, None, written[-1][0].receipt_ts)


def test_partitions_shows_a_range_of_dates_with_what_reconcile_finds(lake, capsys):
    import json

    from tidemark import cli

    rng = random.Random(8)
    for batch in range(10):
        _write_batch(lake, rng, batch, days=6)
    dates = receipts.list_event_dates(lake)
    for event_date in dates[::2]:
        _commit_version(lake, event_date, random.Random(0))
    _write_batch(lake, rng, 10, days=6)
    since, until = dates[1], dates[-2]
    capsys.readouterr()
    argv = ["partitions", "--lake", str(lake), "--json", "--since", since.isoformat(), "--until", until.isoformat()]
    assert cli.main(argv) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [r["event_date"] for r in rows] == [d.isoformat() for d in dates if since <= d <= until]
    stale = {s.event_date: s for s in reconcile.staleness(lake, event_dates=dates)}
    for row in rows:
        day = as_event_date(row["event_date"])
        expected = stale.get(day)
        assert row["pending_receipts"] == ([k.split("/", 1)[1] for k in expected.pending_receipts] if expected else [])
        assert row["receipts"] == len(receipts.list_receipts(lake, day))
    assert cli.main(["partitions", "--lake", str(lake), "--since", "2026-02-30"]) != 0


def test_gc_prunes_arrivals_reconciliation_no_longer_needs_and_a_pass_behind_them_walks(lake):
    from tidemark.ops import gc

    rng = random.Random(9)
    written = [_write_batch(lake, rng, batch) for batch in range(0, 8640 * 3, 2880)]  # 3 days of receipts
    arrivals = os.path.join(lake, lake_layout.RECEIPT_INDEX, "arrivals")
    assert len(os.listdir(arrivals)) == 3
    reconcile.staleness(lake, now=NOW)  # a cursor at the newest head (day 3)
    day3 = datetime(2026, 4, 3, 12, tzinfo=timezone.utc)
    removed = gc.gc(lake, timedelta(hours=1), now=day3)
    assert sorted(r.path.rsplit("=", 1)[1] for r in removed if r.what == "arrivals") == ["2026-04-01", "2026-04-02"]
    assert os.listdir(arrivals) == ["day=2026-04-03"]
    assert not reconcile.Cursor.start(lake, RULES, NOW, full=False).full  # the last pass is after them
    # a cursor from before the pruned days: the next pass cannot read what arrived since, so it walks
    cursor = _cursor(lake)
    lake.reconcile_cursor().write_json_atomic({**cursor, "head": written[1][0].receipt_ts})
    assert reconcile.Cursor.start(lake, RULES, NOW, full=False).full
    walked = reconcile.staleness(lake, event_dates=receipts.list_event_dates(lake))
    assert [s.to_json() for s in reconcile.staleness(lake, now=NOW)] == [s.to_json() for s in walked]
