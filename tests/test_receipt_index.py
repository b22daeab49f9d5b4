"""The receipt index (tidemark/panes/receipt_index.py) against planning without it, on random lakes of
markers: the same plans, a no-op decision that never says "covered" when the full plan is not, and
the migration of a lake written before the index. No Spark: planning reads markers only."""

from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import replace
from datetime import date, timedelta

import pytest

from tests.markerkit import DAY0, RULES
from tests.markerkit import random_partition as _partition
from tests.markerkit import stamp as _stamp
from tests.markerkit import write_batch as _write_batch
from tidemark.base import times
from tidemark.base.session_rules import SessionRules
from tidemark.panes import planning, receipt_index, receipts
from tidemark.store import lake as lake_layout
from tidemark.store.lake import Lake
from tidemark.store.version_record import VersionRecord


def _plans(lake: Lake, event_date: date, rules: SessionRules, hi: date) -> tuple[list[str], list[str]]:
    """(plan keys with the index, plan keys reading every marker)."""
    indexed = planning.plan(planning.LakeIndex(lake), event_date, rules, hi)
    flag = os.path.join(lake.receipt_index_dir(), receipt_index.COMPLETE)
    os.rename(flag, flag + ".off")
    try:
        scanned = planning.plan(planning.LakeIndex(lake), event_date, rules, hi)
    finally:
        os.rename(flag + ".off", flag)
    return indexed.keys, scanned.keys


@pytest.mark.parametrize(("seed", "ends"), [(0, "all"), (1, "all"), (2, "some"), (3, "none")])
def test_plans_with_the_index_equal_plans_that_read_every_marker(tmp_path, seed, ends):
    """`ends`: which partitions have end entries: all, some or none (a lake indexed before they
    existed, then written on by today's stream): the partitions without one have their markers read."""
    rng = random.Random(seed)
    lake = Lake.open(tmp_path / "lake")
    receipt_index.start(lake)
    assert receipt_index.is_complete(lake)
    for batch in range(40):
        if batch == 20 and ends == "some":
            shutil.rmtree(os.path.join(lake, lake_layout.RECEIPT_INDEX, "ends"))
        _write_batch(lake, rng, batch)
    if ends == "none":
        shutil.rmtree(os.path.join(lake, lake_layout.RECEIPT_INDEX, "ends"))
    checked = 0
    for offset in range(13):
        event_date = DAY0 + timedelta(days=offset)
        for rules in RULES:
            for extra in (1, 3):
                hi = DAY0 + timedelta(days=offset + extra)
                indexed, scanned = _plans(lake, event_date, rules, hi)
                assert indexed == scanned, (event_date, rules, hi)
                checked += bool(scanned)
    assert checked > 20  # the lakes are not empty


def _version(lake: Lake, event_date: date, rules: SessionRules) -> VersionRecord:
    """What a dedup records about its plan (as tidemark.deduplication.dedup does): keys, hi, reach, planned_through."""
    index = planning.LakeIndex(lake)
    current = planning.plan_for_rerun(index, event_date, rules, None)
    while True:  # grow the plan like a run does, with the partitions' ends as the reach
        reach = max((times.parse_iso(p.max_event_ts) for p in current.partitions), default=None)
        bigger = planning.grown(index, current, rules, reach)
        if bigger is None:
            break
        current = bigger
    return VersionRecord.holding(
        event_date=event_date,
        run_id="0" * 32,
        receipts=tuple(current.keys),
        hi=current.hi,
        reach=reach,
        planned_through=current.planned_through,
    )


def _replay(lake: Lake, rng: random.Random, receipt_ts: str, days: int) -> list[receipts.ReceiptPartition]:
    """What a replay of the batch `receipt_ts` that reached other verdicts writes after the head:
    complete partitions under that old receipt_ts, of dates it had none of (registration and
    marker; no head: the head is already at or past it)."""
    taken = {d for d in receipts.list_event_dates(lake) if receipts.is_complete(lake, d, receipt_ts)}
    dates = sorted({DAY0 + timedelta(days=rng.randrange(days)) for _ in range(rng.randrange(1, 3))})
    written = [replace(_partition(rng, 0, d), receipt_ts=receipt_ts) for d in dates if d not in taken]
    receipts.complete_all(lake, written)
    return written


@pytest.mark.parametrize(("seed", "at_most"), [(0, 16), (1, 0), (2, 16), (3, 0)])
def test_the_quick_no_op_decision_is_the_full_plans_whenever_a_partition_was_written(
    tmp_path, seed, at_most, monkeypatch
):
    """`quick_covered` answers what the full plan answers (`covers`), also when partitions were
    completed after the version's plan under a receipt_ts at or before its `planned_through` (a
    replayed batch reaching other verdicts). `at_most`: how many of a date's partitions are looked
    at through their markers before its end entries are listed instead (0: always listed)."""
    monkeypatch.setattr(planning, "_MARKERS_AT_MOST", at_most, raising=False)
    rng = random.Random(100 + seed)
    lake = Lake.open(tmp_path / "lake")
    receipt_index.start(lake)
    for batch in range(30):
        _write_batch(lake, rng, batch, days=6)
    verdicts = {True: 0, False: 0}
    late = 0
    for round_ in range(6):
        versions = {
            (d, i): _version(lake, DAY0 + timedelta(days=d), rules) for d in range(7) for i, rules in enumerate(RULES)
        }
        head = receipt_index.head(lake)
        assert head is not None
        if rng.random() < 0.6:
            # the batch at the head (the crash case), or an older one
            old = head if rng.random() < 0.5 else _stamp(rng.randrange(30 + 5 * round_))
            late += len(_replay(lake, rng, old, days=6))
        for batch in range(30 + 5 * round_, 30 + 5 * round_ + rng.randrange(0, 4)):
            _write_batch(lake, rng, batch, days=6)
        for (d, i), version in versions.items():
            event_date, rules = DAY0 + timedelta(days=d), RULES[i]
            quick = planning.quick_covered(planning.LakeIndex(lake), event_date, rules, version)
            full = planning.plan_for_rerun(planning.LakeIndex(lake), event_date, rules, version)
            assert quick == planning.covers(version, full.keys), (round_, event_date, rules)
            verdicts[quick] += 1
    assert verdicts[True]
    assert verdicts[False]
    assert late


def test_a_partition_written_under_the_planned_through_receipt_ts_is_not_covered(tmp_path):
    """The crash case, deterministic: a version planned through the head H; a replay of H's batch
    then completes a partition of the version's date under H. Not covered: the run must compute."""
    rng = random.Random(12)
    lake = Lake.open(tmp_path / "lake")
    receipt_index.start(lake)
    for batch in range(8):
        _write_batch(lake, rng, batch, days=3)
    receipts.complete_all(lake, [replace(_partition(rng, 8, DAY0 + timedelta(days=2)), receipt_ts=_stamp(8))])
    receipt_index.write_head(lake, _stamp(8))  # the head's batch has no partition of DAY0
    event_date = DAY0
    version = _version(lake, event_date, RULES[0])
    assert version.planned_through == _stamp(8)
    assert planning.quick_covered(planning.LakeIndex(lake), event_date, RULES[0], version)
    receipts.complete_all(lake, [replace(_partition(rng, 8, DAY0), receipt_ts=_stamp(8))])  # the replay's
    assert not planning.quick_covered(planning.LakeIndex(lake), event_date, RULES[0], version)
    plan = planning.plan_for_rerun(planning.LakeIndex(lake), event_date, RULES[0], version)
    assert planning.receipt_key(event_date, _stamp(8)) in plan.keys
    assert not planning.covers(version, plan.keys)


def test_a_lake_without_the_index_is_never_quick_and_planned_through_is_not_needed(tmp_path):
    rng = random.Random(7)
    lake = Lake.open(tmp_path / "lake")
    for batch in range(10):
        _write_batch(lake, rng, batch, days=3)
    version = _version(lake, DAY0, RULES[0])
    assert not receipt_index.is_complete(lake)  # markers written, but no stream started it
    assert not planning.quick_covered(planning.LakeIndex(lake), DAY0, RULES[0], version)
    receipt_index.mark_complete(lake, "test")
    version_now = _version(lake, DAY0, RULES[0])
    assert planning.quick_covered(planning.LakeIndex(lake), DAY0, RULES[0], version_now)
    # a version of a tidemark that did not record planned_through is decided from listings alike
    assert planning.quick_covered(planning.LakeIndex(lake), DAY0, RULES[0], replace(version_now, planned_through=None))


def test_end_entries_of_a_rewritten_partition_answer_its_latest_end(tmp_path):
    """A replay that rewrote a partition its first attempt left incomplete registers another end:
    planning takes the latest (a partition read for nothing, never one left out)."""
    lake = Lake.open(tmp_path / "lake")
    first = _partition(random.Random(1), 3, DAY0)
    later = replace(first, max_event_ts=times.iso_z(times.parse_iso(first.max_event_ts) + timedelta(hours=30)))
    for partition in (later, first):
        receipt_index.record_end(lake, partition)
    latest = times.iso_z(times.parse_iso(later.max_event_ts), "microseconds")
    assert receipt_index.ends(lake, DAY0) == {first.receipt_ts: latest}


def _entries(lake: Lake) -> list[str]:
    """The reach and end entries of the receipt index (what `tidemark reindex` rebuilds)."""
    return sorted(
        os.path.relpath(os.path.join(root, name), lake)
        for kind in ("reach", "ends")
        for root, _, names in os.walk(os.path.join(lake, lake_layout.RECEIPT_INDEX, kind))
        for name in names
    )


def test_reindex_migrates_a_lake_written_before_the_index(tmp_path):
    rng = random.Random(3)
    lake = Lake.open(tmp_path / "lake")
    for batch in range(40):
        _write_batch(lake, rng, batch)
    entries = _entries(lake)
    assert any("/reach/" in e for e in entries)  # some sessions run past midnight
    shutil.rmtree(os.path.join(lake, lake_layout.RECEIPT_INDEX))  # a lake of yesterday's layout
    assert not receipt_index.is_complete(lake)
    spanning = receipts.reindex(lake)
    again = _entries(lake)
    assert again == entries
    assert spanning > 0
    assert receipt_index.is_complete(lake)
    assert receipts.reindex(lake) == spanning  # idempotent


def test_reach_entries_name_every_later_date_a_partition_reaches():
    rng = random.Random(0)
    p = _partition(rng, 0, DAY0)
    p = receipts.ReceiptPartition.from_json(
        {**p.to_json(), "min_event_ts": "2026-03-01T23:50:00Z", "max_event_ts": "2026-03-04T00:10:00Z"}
    )
    assert receipt_index.reached_dates(p) == [date(2026, 3, 2), date(2026, 3, 3), date(2026, 3, 4)]
    same_day = receipts.ReceiptPartition.from_json({**p.to_json(), "max_event_ts": "2026-03-01T23:59:59.999999Z"})
    assert receipt_index.reached_dates(same_day) == []


def test_the_reindex_command_migrates_a_lake(tmp_path, capsys):
    from tidemark.cli import main

    rng = random.Random(5)
    lake = Lake.open(tmp_path / "lake")
    for batch in range(20):
        _write_batch(lake, rng, batch)
    shutil.rmtree(os.path.join(lake, lake_layout.RECEIPT_INDEX))
    assert main(["reindex", "--lake", str(lake)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["complete"]
    assert out["event_dates"] == len(receipts.list_event_dates(lake))
    assert receipt_index.is_complete(lake)
