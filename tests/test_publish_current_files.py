"""What is current comes from the date's live files (a zero-row version file per commit), not from a
table property per date; the manifests stay one per half month of event dates; a table in an older
tidemark's layout (tests/icebergkit.py's older_layout_commit) keeps working and is migrated by
`tidemark gc` (maintenance.maintain)."""

from __future__ import annotations

from datetime import date, timedelta

import pytest

from tests import icebergkit
from tests.icebergkit import receipt
from tidemark.iceberg import commits, compat, maintenance, reader, table_versions
from tidemark.iceberg import table as iceberg
from tidemark.ops import gc
from tidemark.store.lake import Lake


def _days(first: date, n: int) -> list[date]:
    return [first + timedelta(days=i) for i in range(n)]


def _manifests(lake: Lake) -> list:
    tbl = iceberg.load(lake)
    return tbl.current_snapshot().manifests(tbl.io)


def _properties(lake: Lake) -> list[str]:
    return [k for k in iceberg.load(lake).properties if k.startswith(table_versions.CURRENT_PREFIX)]


def test_current_is_read_from_the_live_files_and_no_property_is_written(tmp_path):
    lake = Lake.open(tmp_path / "lake")
    first = icebergkit.publish_run(lake, date(2026, 3, 10), [receipt(1)])
    second = icebergkit.publish_run(lake, date(2026, 3, 10), [receipt(1), receipt(2)])
    icebergkit.publish_run(lake, date(2026, 3, 11), [receipt(3)])
    assert _properties(lake) == []
    current = table_versions.current_version(lake, date(2026, 3, 10))
    assert current == second.current  # version, run, previous, committed_at: all of the record
    assert current.previous_version == first.current.version
    assert table_versions.dates_with_version(lake) == [date(2026, 3, 10), date(2026, 3, 11)]
    tbl = iceberg.load(lake)
    assert set(table_versions.current_commits(tbl)) == {date(2026, 3, 10), date(2026, 3, 11)}
    assert reader.read_sessions(lake, date(2026, 3, 10)).num_rows == 1  # the version file adds no row


def test_a_version_with_no_session_is_still_found(tmp_path):
    lake = Lake.open(tmp_path / "lake")
    icebergkit.publish_run(lake, date(2026, 3, 10), [receipt(1)], sessions=2)
    empty = icebergkit.publish_run(lake, date(2026, 3, 10), [receipt(1), receipt(2)], sessions=0)
    assert empty.committed
    current = table_versions.current_version(lake, date(2026, 3, 10))
    assert current.run_id == empty.current.run_id
    assert current.sessions == 0
    assert table_versions.dates_with_version(lake) == [date(2026, 3, 10)]
    assert reader.read_sessions(lake, date(2026, 3, 10)).num_rows == 0
    # and the next run of the date is judged against it (covered: a no-op)
    assert not icebergkit.publish_run(lake, date(2026, 3, 10), [receipt(2)]).committed


def test_a_bumped_version_id_survives_a_reload(tmp_path):
    """The id chosen inside the commit (current + 1 ms) is the one read back: it lives in the
    version file's name, not only in the snapshot summary that gc expires."""
    lake = Lake.open(tmp_path / "lake")
    icebergkit.publish_run(lake, date(2026, 3, 10), [receipt(2)])
    bumped = icebergkit.publish_run(lake, date(2026, 3, 10), [receipt(1), receipt(2)])
    assert bumped.current.version > receipt(2)
    assert table_versions.current_version(lake, date(2026, 3, 10)).version == bumped.current.version


def test_manifests_stay_one_per_half_month(tmp_path):
    lake = Lake.open(tmp_path / "lake")
    days = _days(date(2026, 1, 25), 40)  # Jan 16-31, Feb 1-15, Feb 16-28, Mar 1-15
    for day in days:
        icebergkit.publish_run(lake, day, [receipt(1)])
    for day in days[::7]:
        icebergkit.publish_run(lake, day, [receipt(1), receipt(2)])  # corrections in every month
    manifests = _manifests(lake)
    assert len(manifests) == 4, [m.manifest_path for m in manifests]
    assert maintenance.buckets_to_merge(iceberg.load(lake)) == set()
    assert table_versions.dates_with_version(lake) == days
    assert maintenance.maintain(lake) == {"buckets": 0, "migrated": 0}  # nothing to do: no commit
    assert len(iceberg.load(lake).snapshots()) == len(days) + len(days[::7])


def _legacy_table(lake: Lake) -> tuple[list[date], dict]:
    """A table in an older tidemark's layout: a property per date, a manifest per commit."""
    days = _days(date(2026, 2, 20), 15)
    before = {
        day: icebergkit.older_layout_commit(lake, icebergkit.prepared_run(lake, day, [receipt(1)])) for day in days
    }
    for day, sessions in ((days[1], 1), (days[2], 0)):
        marker = icebergkit.prepared_run(lake, day, [receipt(1), receipt(2)], sessions=sessions)
        before[day] = icebergkit.older_layout_commit(lake, marker)
    assert len(_properties(lake)) == len(days)
    assert len(_manifests(lake)) >= len(days)  # a manifest per commit: none merged
    return days, before


def test_an_older_table_is_read_committed_to_and_migrated(tmp_path):
    lake = Lake.open(tmp_path / "lake")
    days, before = _legacy_table(lake)
    # read as it is
    assert table_versions.dates_with_version(lake) == days
    assert {day: table_versions.current_version(lake, day) for day in days} == before
    # a commit of one date moves that date off its property, in the same commit
    outcome = icebergkit.publish_run(lake, days[0], [receipt(1), receipt(3)])
    assert outcome.current.previous_version == before[days[0]].version
    assert table_versions.current_commits(iceberg.load(lake), days[0])[days[0]].run_id == outcome.current.run_id
    assert table_versions.CURRENT_PREFIX + days[0].isoformat() not in _properties(lake)
    assert len(_properties(lake)) == len(days) - 1
    # a run that lacks a receipt the (property-named) current version holds is still refused
    with pytest.raises(commits.Superseded):
        icebergkit.publish_run(lake, days[1], [receipt(1), receipt(4)])
    # the migration: tidemark gc (maintenance.maintain), one commit
    snapshots = len(iceberg.load(lake).snapshots())
    gc.gc(lake, timedelta(days=7))
    tbl = iceberg.load(lake)
    assert _properties(lake) == []
    assert len(tbl.snapshots()) == snapshots + 1
    assert len(_manifests(lake)) == 2  # Feb 16-28, Mar 1-15
    after = {day: table_versions.current_version(lake, day) for day in days}
    assert after[days[0]] == outcome.current
    assert {d: v for d, v in after.items() if d != days[0]} == {d: v for d, v in before.items() if d != days[0]}
    assert after[days[2]].sessions == 0  # a version with no session: its version file was written
    assert table_versions.dates_with_version(lake) == days
    assert maintenance.maintain(lake) == {"buckets": 0, "migrated": 0}  # done once
    # and commits go on from the migrated table
    assert icebergkit.publish_run(lake, days[5], [receipt(1), receipt(5)]).committed
    assert len(_manifests(lake)) == 2


def test_migration_is_safe_to_rerun_after_a_crash_before_its_commit(tmp_path, monkeypatch):
    lake = Lake.open(tmp_path / "lake")
    days, before = _legacy_table(lake)
    real = compat.CachedTransaction

    class Dies(real):
        def commit_transaction(self):
            raise KeyboardInterrupt("killed before the catalog commit")

    monkeypatch.setattr(compat, "CachedTransaction", Dies)
    with pytest.raises(KeyboardInterrupt):
        maintenance.maintain(lake)
    monkeypatch.setattr(compat, "CachedTransaction", real)
    assert len(_properties(lake)) == len(days)  # nothing changed: the version files are not live
    assert {day: table_versions.current_version(lake, day) for day in days} == before
    assert maintenance.maintain(lake) == {"buckets": 2, "migrated": len(days)}
    assert _properties(lake) == []
    assert {day: table_versions.current_version(lake, day) for day in days} == before
