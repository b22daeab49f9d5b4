"""The maintenance pass that packs closed dates (tidemark/panes/pack_maintenance.py): a closed date with many
receipt partitions gets a pack of all of them and the dedup's result does not change; an open date
is not packed; a second pass packs nothing and lists nothing; a pass killed between a pack's data
and its manifest leaves a folder readers ignore, and the next pass packs the date again; a dry run
writes nothing. The lakes are tests/lakekit.py's simulated stream; the fast tests lower PACK_AT so
that a few receipts make a pack, the slow one keeps the real threshold."""

from __future__ import annotations

import json
import os
import random
import shutil
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.lakekit import RULES, SimulatedStream, arrivals, busiest_date, expected, lake_with, make_events, published
from tidemark import cli
from tidemark.base.layout import as_event_date
from tidemark.deduplication import dedup
from tidemark.deduplication.dedup import run_dedup
from tidemark.iceberg import table as iceberg
from tidemark.ops import gc
from tidemark.panes import pack_cache, pack_maintenance, pane_reader, planning, receipt_index, receipts
from tidemark.session.sessions import SessionRules
from tidemark.store.lake import Lake


def newest_receipt(lake: Lake) -> str:
    return max(ts for d in receipts.list_event_dates(lake) for ts in receipts.complete_names(lake, d))


def small_lake(tmp_path, monkeypatch):
    """lakekit's lake, every batch in, the stream's head written (as the stream does after a batch);
    PACK_AT lowered to 3 so its dates are worth a pack."""
    monkeypatch.setattr(pack_cache, "PACK_AT", 3)
    lake, stream, events, _ = lake_with(tmp_path, seed=5, batches=6, upto=6)
    receipt_index.write_head(lake, newest_receipt(lake))
    return lake, stream, events


def pack_rows(lake: Lake, pack: pack_cache.Pack) -> list[dict]:
    import pyarrow.parquet as pq

    rows = [row for uri in pack.file_uris(lake) for row in pq.read_table(lake.locate(uri)[1]).to_pylist()]
    return sorted(rows, key=repr)


def folder_rows(lake: Lake, event_date: date) -> list[dict]:
    folders = [lake.receipt_dir(event_date, ts) for ts in receipts.complete_names(lake, event_date)]
    table = pane_reader.read_table(lake.sessions_root(), folders, [c.name for c in pane_reader.DEDUP_PANE])
    return sorted(table.to_pylist(), key=repr)


def files_under(folder: str) -> dict[str, float]:
    return {
        os.path.join(top, name): os.path.getmtime(os.path.join(top, name))
        for top, _, names in os.walk(folder)
        for name in names
    }


def end_of(event_date: date) -> datetime:
    return planning.midnight(event_date + timedelta(days=1))


def test_closed_dates_are_packed_once_open_ones_not_and_a_dry_run_writes_nothing(tmp_path, monkeypatch):
    lake, stream, events = small_lake(tmp_path, monkeypatch)
    day = as_event_date(busiest_date(events))
    stamps = receipts.complete_names(lake, day)
    assert len(stamps) >= pack_cache.PACK_AT
    rules = SessionRules()  # the lake has no rules record: the defaults are in force
    still_open = end_of(day) + rules.watermark_delay + rules.allowed_lateness + pack_maintenance.SETTLE

    # Open (its end not yet older than watermark delay + allowed lateness + SETTLE): not packed.
    assert day not in [p.event_date for p in pack_maintenance.run_pass(lake, now=still_open).packed]
    assert pack_cache.listed(lake, day) == []
    os.remove(pack_maintenance.state_file(lake))  # as if that pass never ran: the next ones start afresh

    # A dry run says what it would pack and writes nothing at all.
    closed = still_open + timedelta(seconds=1)
    before = files_under(lake.packs_root())  # the earlier date, closed already, may be packed
    dry = pack_maintenance.run_pass(lake, now=closed, dry_run=True)
    assert day in [p.event_date for p in dry.packed]
    assert all(p.pack_id is None for p in dry.packed)
    assert files_under(lake.packs_root()) == before

    # Closed: packed, every complete receipt partition in one pack of the dedup's columns, holding
    # exactly the panes of those partitions.
    first = pack_maintenance.run_pass(lake, now=closed)
    assert first.how == "every date"
    [done] = [p for p in first.packed if p.event_date == day]
    [pack] = pack_cache.complete(lake, day, pane_reader.DEDUP_COLUMNS)
    assert (pack.pack_id, pack.receipts) == (done.pack_id, frozenset(stamps))
    assert pack_rows(lake, pack) == folder_rows(lake, day)
    assert pack.rows == len(folder_rows(lake, day))

    # A second pass packs nothing, and looks at no date: nothing arrived, no date closed since.
    second = pack_maintenance.run_pass(lake, now=closed + timedelta(hours=1))
    assert (second.how, second.examined, second.packed) == ("what changed", 0, [])

    # Late data into the packed date: that date alone is looked at; one new partition is below
    # PACK_AT, the receipts it adds are read from their folders beside the pack.
    own = [e for e in events if e[2].date() == day]
    written = stream.batch(own[:1], mode=0.0)  # a fragment: its event alone, in its own date
    assert day in [p.event_date for p in written]
    third = pack_maintenance.run_pass(lake, now=closed + timedelta(hours=2))
    assert 1 <= third.examined <= len({p.event_date for p in written})
    assert third.packed == []
    assert [p.pack_id for p in pack_cache.complete(lake, day)] == [pack.pack_id]

    # The command: gc, then the pass; --no-pack skips it; --dry-run reports without writing.
    for extra in range(3):  # enough new partitions of the date to pack it again
        stream.batch(own[extra + 1 : extra + 2], mode=0.0)
    state = Path(pack_maintenance.state_file(lake)).read_text()
    assert cli.main(["gc", "--lake", str(lake), "--retention", "1h", "--no-pack"]) == 0
    assert cli.main(["gc", "--lake", str(lake), "--retention", "1h", "--dry-run"]) == 0
    assert Path(pack_maintenance.state_file(lake)).read_text() == state
    assert len(pack_cache.listed(lake, day)) == 1
    assert cli.main(["gc", "--lake", str(lake), "--retention", "1h"]) == 0
    newest = pack_cache.best(pack_cache.complete(lake, day), set(receipts.complete_names(lake, day)))
    assert newest is not None
    assert newest.receipts == frozenset(receipts.complete_names(lake, day))


def test_gc_prints_the_dates_it_packs(tmp_path, monkeypatch, capsys):
    lake, _, events = small_lake(tmp_path, monkeypatch)
    day = as_event_date(busiest_date(events))
    assert cli.main(["gc", "--lake", str(lake), "--retention", "1h", "--no-pack"]) == 0
    assert "pack written" not in capsys.readouterr().out
    assert cli.main(["gc", "--lake", str(lake), "--retention", "1h", "--dry-run"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {"what": "pack written", "event_date": day.isoformat(), "pack_id": None, "dry_run": True}.items() <= next(
        line for line in lines if line.get("event_date") == day.isoformat() and line["what"] == "pack written"
    ).items()
    assert not os.path.exists(lake.packs_root())


def test_a_killed_pass_leaves_a_pack_readers_ignore_and_the_next_pass_packs_again(tmp_path, monkeypatch):
    lake, _, _ = small_lake(tmp_path, monkeypatch)

    class Killed(BaseException):
        """The process dies between the pack's data and its manifest."""

    def killed(*args, **kwargs):
        raise Killed

    with monkeypatch.context() as patch:
        patch.setattr(pack_cache, "write_manifest", killed)
        with pytest.raises(Killed):
            pack_maintenance.run_pass(lake)
    [day] = [d for d in receipts.list_event_dates(lake) if pack_cache.listed(lake, d)]  # the first one it packed
    [leftover] = pack_cache.listed(lake, day)
    assert pack_cache.complete(lake, day) == []
    assert not os.path.exists(pack_maintenance.state_file(lake))

    redone = pack_maintenance.run_pass(lake)
    assert day in [p.event_date for p in redone.packed]
    [pack] = pack_cache.complete(lake, day)
    assert pack.pack_id != leftover
    assert sorted(pack_cache.listed(lake, day)) == sorted([leftover, pack.pack_id])

    # gc removes the leftover once older than the retention, never the pack in use.
    later = datetime.now(timezone.utc) + timedelta(hours=2)
    removed = [r for r in gc.gc(lake, timedelta(hours=1), now=later) if r.what.startswith("pack")]
    assert [(r.what, r.path.rsplit("=", 1)[1]) for r in removed] == [("pack (incomplete)", leftover)]
    assert pack_cache.listed(lake, day) == [pack.pack_id]


def test_the_budget_takes_the_newest_dates_first_and_leaves_the_rest_to_the_next_pass(tmp_path, monkeypatch):
    lake, _, _ = small_lake(tmp_path, monkeypatch)
    dates = [d for d in receipts.list_event_dates(lake) if len(receipts.complete_names(lake, d)) >= pack_cache.PACK_AT]
    assert len(dates) >= 2
    first = pack_maintenance.run_pass(lake, budget=1)  # a date alone over the budget still goes
    assert [p.event_date for p in first.packed] == [dates[-1]]
    assert first.left == dates[:-1][::-1]
    second = pack_maintenance.run_pass(lake, budget=1)
    assert second.how == "what changed"
    assert [p.event_date for p in second.packed] == [dates[-2]]


@pytest.mark.spark
def test_the_dedup_reads_the_same_panes_from_a_maintenance_pack(spark, tmp_path, monkeypatch):
    """The pack's columns are what the dedup reads: it takes the pack (pack_cache.cover with its columns)
    and the panes it gets are the panes of every receipt partition."""
    from pyspark.testing import assertDataFrameEqual

    lake, _, events = small_lake(tmp_path, monkeypatch)
    day = as_event_date(busiest_date(events))
    plan = planning.plan_for_rerun(planning.LakeIndex(lake), day, RULES, None)
    without = dedup.read_panes(spark, lake, plan.partitions, plan.lo).toPandas()
    pack_maintenance.run_pass(lake)
    [pack] = pack_cache.complete(lake, day)
    chosen, rest = pack_cache.cover(lake, plan.partitions, pane_reader.DEDUP_COLUMNS)  # what read_panes passes
    assert [p.pack_id for p in chosen] == [pack.pack_id]
    assert not [p for p in rest if p.event_date == day]
    assertDataFrameEqual(dedup.read_panes(spark, lake, plan.partitions, plan.lo), spark.createDataFrame(without))


def many_receipts(tmp_path, count: int, seed: int = 5):
    """A lake whose busiest date has more than `count` receipt partitions: every event delivered,
    then one redelivery of an event of that date per micro-batch (a 10 s trigger's day: many tiny
    partitions of the same sessions)."""
    rng = random.Random(seed)
    events = make_events(rng, users=3, days=2)
    lake = Lake.open(tmp_path / "lake")
    stream = SimulatedStream(lake, seed)
    for deliveries in arrivals(rng, events, 4):
        stream.batch(deliveries)
    day = as_event_date(busiest_date(events))
    own = [e for e in events if e[2].date() == day]
    for n in range(count):
        stream.batch([own[n % len(own)]], mode=0.0)  # a fragment: one partition, of its own date
    receipt_index.write_head(lake, newest_receipt(lake))
    return lake, events, day


@pytest.mark.slow  # two full dedups of 500+ receipt partitions
@pytest.mark.spark
def test_a_closed_date_of_many_receipts_is_packed_and_the_dedup_result_is_unchanged(spark, tmp_path, monkeypatch):
    lake, events, day = many_receipts(tmp_path, pack_cache.PACK_AT + 20)
    stamps = receipts.complete_names(lake, day)
    assert len(stamps) >= pack_cache.PACK_AT  # the real threshold

    result = pack_maintenance.run_pass(lake)
    assert day in [p.event_date for p in result.packed]
    [pack] = pack_cache.complete(lake, day, pane_reader.DEDUP_COLUMNS)
    assert pack.receipts == frozenset(stamps)

    iceberg.drop(lake)
    with_pack = run_dedup(lake, day, RULES, spark=spark, full=True)
    assert published(lake, day) == expected(events, day)
    # It read the pack: a full dedup reading PACK_AT partitions from their folders writes a pack.
    assert pack_cache.listed(lake, day) == [pack.pack_id]

    shutil.rmtree(lake.packs_root())
    monkeypatch.setattr(pack_cache, "PACK_AT", 10**9)  # no pack read nor written
    iceberg.drop(lake)
    without = run_dedup(lake, day, RULES, spark=spark, full=True)
    assert published(lake, day) == expected(events, day)
    assert (without.sessions, without.affected_dates) == (with_pack.sessions, with_pack.affected_dates)
