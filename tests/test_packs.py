"""Packs (tidemark/panes/pack_cache.py): a full dedup reading a date's pack and the receipt partitions it does
not hold gives what reading every receipt partition gives, a late receipt with an older receipt_ts
included; a pack without its manifest (killed mid-write) is ignored; deleting packs changes nothing;
gc removes only what no reader uses, and never a receipt partition. The lakes are tests/lakekit.py's
simulated stream; PACK_AT is lowered so that a few receipts make a pack."""

from __future__ import annotations

import json
import os
import shutil
from datetime import date, datetime, timedelta, timezone

import pytest

from tests.lakekit import RULES, busiest_date, expected, lake_with, published
from tidemark.base.layout import as_event_date
from tidemark.deduplication import dedup
from tidemark.deduplication.dedup import run_dedup
from tidemark.iceberg import table as iceberg
from tidemark.ops import gc
from tidemark.panes import pack_cache, planning
from tidemark.store.lake import PACK_MANIFEST


def complete_packs(lake, event_date):
    return pack_cache.complete(lake, event_date, dedup._PANES_SCHEMA)


def receipt_folders(lake, event_date) -> list[str]:
    return sorted(os.listdir(lake.event_date_dir(event_date)))


def full_dedup(lake, spark, event_date):
    iceberg.drop(lake)  # a first version each time: the full path, every planned receipt read
    return run_dedup(lake, event_date, RULES, spark=spark, full=True)


def panes_of(spark, lake, event_date, pack_date=None):
    plan = planning.plan_for_rerun(planning.LakeIndex(lake), event_date, RULES, None)
    return dedup.read_panes(spark, lake, plan.partitions, plan.lo, pack_date=pack_date)


@pytest.mark.slow  # five full dedups
@pytest.mark.spark
def test_a_pack_and_the_late_receipts_give_what_every_receipt_gives(spark, tmp_path, monkeypatch):
    from pyspark.testing import assertDataFrameEqual

    monkeypatch.setattr(pack_cache, "PACK_AT", 1)
    lake, stream, events, cut = lake_with(tmp_path, seed=5, batches=6, upto=5)
    event_date = as_event_date(busiest_date(events))
    folders = receipt_folders(lake, event_date)

    first = full_dedup(lake, spark, event_date)
    assert first.published
    [pack] = complete_packs(lake, event_date)
    assert sorted(f"receipt_ts={ts}" for ts in pack.receipts) == [f for f in folders if f.startswith("receipt_ts=")]

    # The last deliveries, received "late" under a receipt_ts older than every one the pack holds.
    stream.batch_id = -3
    written = stream.batch(cut[5] + [e for e in events if e[2].date() == event_date][:3])
    late = [p.receipt_ts for p in written if p.event_date == event_date]
    assert late
    assert max(late) < min(pack.receipts)

    # The panes read with the pack equal the panes read from every receipt partition.
    monkeypatch.setattr(pack_cache, "PACK_AT", 10**9)
    without = panes_of(spark, lake, event_date)
    monkeypatch.setattr(pack_cache, "PACK_AT", 1)
    chosen, rest = pack_cache.cover(
        lake, planning.plan_for_rerun(planning.LakeIndex(lake), event_date, RULES, None).partitions, dedup._PANES_SCHEMA
    )
    assert [p.pack_id for p in chosen] == [pack.pack_id]
    assert set(late) <= {p.receipt_ts for p in rest if p.event_date == event_date}
    assertDataFrameEqual(panes_of(spark, lake, event_date), without)

    # The published version too, with the pack, and with every pack deleted.
    with_pack = full_dedup(lake, spark, event_date)
    assert published(lake, event_date) == expected(events, event_date)
    # That run read the late receipt from its folder and packed the date anew (PACK_AT is 1 here).
    newest = pack_cache.best(complete_packs(lake, event_date), set(pack.receipts) | set(late))
    assert newest is not None
    assert newest.receipts == pack.receipts | set(late)
    shutil.rmtree(lake.packs_root())
    monkeypatch.setattr(pack_cache, "PACK_AT", 10**9)
    again = full_dedup(lake, spark, event_date)
    assert published(lake, event_date) == expected(events, event_date)
    assert (again.sessions, again.affected_dates) == (with_pack.sessions, with_pack.affected_dates)
    assert not os.path.exists(lake.packs_root())
    assert receipt_folders(lake, event_date) == sorted(folders + [f"receipt_ts={ts}" for ts in late])


@pytest.mark.spark
def test_a_pack_without_its_manifest_is_ignored_and_gc_removes_only_leftovers(spark, tmp_path, monkeypatch):
    from pyspark.testing import assertDataFrameEqual

    monkeypatch.setattr(pack_cache, "PACK_AT", 1)
    lake, _, events, _ = lake_with(tmp_path, seed=5, batches=6, upto=6)
    event_date = as_event_date(busiest_date(events))
    folders = receipt_folders(lake, event_date)
    without = panes_of(spark, lake, event_date).toPandas()  # no pack yet: every receipt partition
    panes_of(spark, lake, event_date, pack_date=event_date)  # writes a pack
    [pack] = complete_packs(lake, event_date)

    # A second writer killed after its data, before its manifest: a copy of the pack without one.
    killed = "f" * 32
    shutil.copytree(lake.pack_dir(event_date, pack.pack_id), lake.pack_dir(event_date, killed))
    os.remove(lake.pack_manifest(event_date, killed))
    assert [p.pack_id for p in complete_packs(lake, event_date)] == [pack.pack_id]
    assertDataFrameEqual(panes_of(spark, lake, event_date), spark.createDataFrame(without))

    # gc: young leftovers stay; old enough, the killed one goes, the used pack and receipts stay.
    assert not [r for r in gc.gc(lake, timedelta(hours=1)) if r.what.startswith("pack")]
    later = datetime.now(timezone.utc) + timedelta(hours=2)
    removed = [r for r in gc.gc(lake, timedelta(hours=1), now=later) if r.what.startswith("pack")]
    assert [(r.what, r.path.rsplit("=", 1)[1]) for r in removed] == [("pack (incomplete)", killed)]
    assert os.listdir(lake.packs_dir(event_date)) == [f"pack={pack.pack_id}"]
    assert receipt_folders(lake, event_date) == folders
    assertDataFrameEqual(panes_of(spark, lake, event_date), spark.createDataFrame(without))


def test_gc_removes_a_superseded_pack_once_the_bigger_one_is_older_than_the_retention(tmp_path):
    from tidemark.store.lake import Lake

    lake = Lake.open(tmp_path / "lake")
    day = date(2026, 3, 7)
    now = datetime(2026, 3, 9, 12, tzinfo=timezone.utc)

    def pack(pack_id, receipts, created_at):
        os.makedirs(lake.pack_dir(day, pack_id))
        manifest = dict(
            format=pack_cache.FORMAT,
            event_date=day.isoformat(),
            pack_id=pack_id,
            receipts=receipts,
            files=[],
            rows=0,
            columns="c",
            created_at=created_at,
        )
        with open(lake.pack_manifest(day, pack_id), "w") as f:
            json.dump(manifest, f)

    small, big = "a" * 32, "b" * 32
    pack(small, ["20260307T000000000Z"], "2026-03-08T00:00:00.000Z")
    pack(big, ["20260307T000000000Z", "20260307T000010000Z"], "2026-03-09T11:30:00.000Z")
    assert pack_cache.leftovers(lake, 3600, lambda uri: 10**6, now) == []  # the bigger one is 30 min old
    # A reader needing only the small one's receipt takes it; one needing both, the big one.
    found = pack_cache.complete(lake, day)
    assert pack_cache.best(found, {"20260307T000000000Z"}).pack_id == small
    assert pack_cache.best(found, {"20260307T000000000Z", "20260307T000010000Z", "20260307T000020000Z"}).pack_id == big
    [leftover] = pack_cache.leftovers(lake, 3600, lambda uri: 10**6, now + timedelta(hours=1))
    assert (leftover.pack_id, leftover.why) == (small, "superseded")
    pack_cache.remove(lake, leftover)
    assert os.listdir(lake.packs_dir(day)) == [f"pack={big}"]
    # Two concurrent writers of the same receipts: two complete packs, either one readable; gc
    # keeps one (the newest, then the highest id) once the retention has passed.
    twin = "c" * 32
    pack(twin, ["20260307T000000000Z", "20260307T000010000Z"], "2026-03-09T11:30:00.000Z")
    assert (
        pack_cache.best(pack_cache.complete(lake, day), {"20260307T000000000Z", "20260307T000010000Z"}).pack_id == twin
    )
    [leftover] = pack_cache.leftovers(lake, 3600, lambda uri: 10**6, now + timedelta(hours=1))
    assert (leftover.pack_id, leftover.why) == (big, "superseded")
    assert PACK_MANIFEST in os.listdir(lake.pack_dir(day, big))


def test_pack_paths_take_only_checked_values(tmp_path):
    from tidemark.base.layout import InvalidPartitionValue
    from tidemark.store.lake import Lake

    lake = Lake.open(tmp_path / "lake")
    day = date(2026, 3, 7)
    with pytest.raises(InvalidPartitionValue):
        lake.pack_file(day, "../x", "part-0.parquet")
    with pytest.raises(TypeError):  # a date as text is parsed where it enters, never in a path
        lake.pack_file("2026-03-07", "a" * 32, "part-0.parquet")
    for name in ["../part-0.parquet", "part-0/../../x.parquet", "_tidemark_pack.json", "part-0.json"]:
        with pytest.raises(InvalidPartitionValue):
            lake.pack_file(day, "a" * 32, name)
    assert lake.pack_file(day, "a" * 32, "part-00000-1b2c-c000.snappy.parquet").endswith(
        "/_packs/event_date=2026-03-07/pack=" + "a" * 32 + "/part-00000-1b2c-c000.snappy.parquet"
    )
