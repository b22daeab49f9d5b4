"""Issue 27 item 5: what is current comes from the date's live files (a zero-row version file per
commit), not from a table property per date; the manifests stay one per half month of event dates; a
table written by the code before (tests/legacy/publish_5f76019.py) keeps working and is migrated by
`tidemark gc` (publish.maintain)."""

from __future__ import annotations

from datetime import date, timedelta
from types import SimpleNamespace
from unittest import mock

import pytest

from tests import icebergkit
from tests.icebergkit import receipt
from tests.legacy import publish_5f76019 as legacy
from tidemark.iceberg import publish, reader
from tidemark.iceberg import table as iceberg
from tidemark.ops import gc
from tidemark.session import rules_record
from tidemark.store.lake import Lake
from tidemark.store.version_record import Commit, VersionRecord


def _days(first: str, n: int) -> list[str]:
    return [(date.fromisoformat(first) + timedelta(days=i)).isoformat() for i in range(n)]


def _manifests(lake: Lake) -> list:
    tbl = iceberg.load(lake)
    return tbl.current_snapshot().manifests(tbl.io)


def _properties(lake: Lake) -> list[str]:
    return [k for k in iceberg.load(lake).properties if k.startswith(publish.CURRENT_PREFIX)]


def test_current_is_read_from_the_live_files_and_no_property_is_written(tmp_path):
    lake = Lake.open(tmp_path / "lake")
    first = icebergkit.publish_run(lake, "2026-03-10", [receipt(1)])
    second = icebergkit.publish_run(lake, "2026-03-10", [receipt(1), receipt(2)])
    icebergkit.publish_run(lake, "2026-03-11", [receipt(3)])
    assert _properties(lake) == []
    current = publish.current_version(lake, "2026-03-10")
    assert current == second.current  # version, run, previous, committed_at: all of the record
    assert current.previous_version == first.current.version
    assert publish.list_dedup_dates(lake) == ["2026-03-10", "2026-03-11"]
    tbl = iceberg.load(lake)
    assert set(publish.current_records(tbl)) == {"2026-03-10", "2026-03-11"}
    assert reader.read_sessions(lake, "2026-03-10").num_rows == 1  # the version file adds no row


def test_a_version_with_no_session_is_still_found(tmp_path):
    lake = Lake.open(tmp_path / "lake")
    icebergkit.publish_run(lake, "2026-03-10", [receipt(1)], sessions=2)
    empty = icebergkit.publish_run(lake, "2026-03-10", [receipt(1), receipt(2)], sessions=0)
    assert empty.committed
    current = publish.current_version(lake, "2026-03-10")
    assert current.run_id == empty.current.run_id
    assert current.sessions == 0
    assert publish.list_dedup_dates(lake) == ["2026-03-10"]
    assert reader.read_sessions(lake, "2026-03-10").num_rows == 0
    # and the next run of the date is judged against it (covered: a no-op)
    assert not icebergkit.publish_run(lake, "2026-03-10", [receipt(2)]).committed


def test_a_bumped_version_id_survives_a_reload(tmp_path):
    """The id chosen inside the commit (current + 1 ms) is the one read back: it lives in the
    version file's name, not only in the snapshot summary that gc expires."""
    lake = Lake.open(tmp_path / "lake")
    icebergkit.publish_run(lake, "2026-03-10", [receipt(2)])
    bumped = icebergkit.publish_run(lake, "2026-03-10", [receipt(1), receipt(2)])
    assert bumped.current.version > receipt(2)
    assert publish.current_version(lake, "2026-03-10").version == bumped.current.version


def test_manifests_stay_one_per_half_month(tmp_path):
    lake = Lake.open(tmp_path / "lake")
    days = _days("2026-01-25", 40)  # Jan 16-31, Feb 1-15, Feb 16-28, Mar 1-15
    for day in days:
        icebergkit.publish_run(lake, day, [receipt(1)])
    for day in days[::7]:
        icebergkit.publish_run(lake, day, [receipt(1), receipt(2)])  # corrections in every month
    manifests = _manifests(lake)
    assert len(manifests) == 4, [m.manifest_path for m in manifests]
    assert publish.buckets_to_merge(iceberg.load(lake)) == set()
    assert publish.list_dedup_dates(lake) == days
    assert publish.maintain(lake) == {"buckets": 0, "migrated": 0}  # nothing to do: no commit
    assert len(iceberg.load(lake).snapshots()) == len(days) + len(days[::7])


def _as_record(version: dict) -> VersionRecord:
    """A version of the frozen code ({**marker, **the table's record}, or a marker) as a record."""
    marker = {k: v for k, v in version.items() if k not in ("version", "previous_version", "committed_at")}
    commit = Commit.from_json(version) if "version" in version else None
    return VersionRecord.from_marker(marker, commit)


# The frozen code calls today's rules_record with its dicts: converted on the way in.
_RULES_FOR_LEGACY = SimpleNamespace(
    outdated=lambda lake, marker: rules_record.outdated(lake, _as_record(marker)),
    same_rules=lambda a, b: rules_record.same_rules(_as_record(a), _as_record(b)),
)


def _legacy_commit(lake: Lake, marker: VersionRecord) -> None:
    """The frozen code's commit, which takes the marker as the dict it is on disk."""
    with mock.patch.object(legacy, "rules_record", _RULES_FOR_LEGACY):
        legacy.commit(lake, marker.to_marker())


def _legacy_current(lake: Lake, day: str) -> VersionRecord:
    return _as_record(legacy.current_version(lake, day))


def _legacy_table(lake: Lake) -> tuple[list[str], dict]:
    """A table as the code before issue 27 left it: a property per date, a manifest per date."""
    days = _days("2026-02-20", 15)
    for day in days:
        _legacy_commit(lake, icebergkit.prepared_run(lake, day, [receipt(1)]))
    _legacy_commit(lake, icebergkit.prepared_run(lake, days[1], [receipt(1), receipt(2)]))
    _legacy_commit(lake, icebergkit.prepared_run(lake, days[2], [receipt(1), receipt(2)], sessions=0))
    before = {day: _legacy_current(lake, day) for day in days}
    assert len(_properties(lake)) == len(days)
    assert len(_manifests(lake)) == len(days)
    return days, before


def test_an_older_table_is_read_committed_to_and_migrated(tmp_path):
    lake = Lake.open(tmp_path / "lake")
    days, before = _legacy_table(lake)
    # read as it is
    assert publish.list_dedup_dates(lake) == days
    assert {day: publish.current_version(lake, day) for day in days} == before
    # a commit of one date moves that date off its property, in the same commit
    outcome = icebergkit.publish_run(lake, days[0], [receipt(1), receipt(3)])
    assert outcome.current.previous_version == before[days[0]].version
    assert publish.current_record(iceberg.load(lake), days[0]).run_id == outcome.current.run_id
    assert publish.CURRENT_PREFIX + days[0] not in _properties(lake)
    assert len(_properties(lake)) == len(days) - 1
    # a run that lacks a receipt the (property-named) current version holds is still refused
    with pytest.raises(publish.Superseded):
        icebergkit.publish_run(lake, days[1], [receipt(1), receipt(4)])
    # the migration: tidemark gc (publish.maintain), one commit
    snapshots = len(iceberg.load(lake).snapshots())
    gc.gc(lake, timedelta(days=7))
    tbl = iceberg.load(lake)
    assert _properties(lake) == []
    assert len(tbl.snapshots()) == snapshots + 1
    assert len(_manifests(lake)) == 2  # Feb 16-28, Mar 1-15
    after = {day: publish.current_version(lake, day) for day in days}
    assert after[days[0]] == outcome.current
    assert {d: v for d, v in after.items() if d != days[0]} == {d: v for d, v in before.items() if d != days[0]}
    assert after[days[2]].sessions == 0  # a version with no session: its version file was written
    assert publish.list_dedup_dates(lake) == days
    assert publish.maintain(lake) == {"buckets": 0, "migrated": 0}  # done once
    # and commits go on from the migrated table
    assert icebergkit.publish_run(lake, days[5], [receipt(1), receipt(5)]).committed
    assert len(_manifests(lake)) == 2


def test_migration_is_safe_to_rerun_after_a_crash_before_its_commit(tmp_path, monkeypatch):
    lake = Lake.open(tmp_path / "lake")
    days, before = _legacy_table(lake)
    real = publish._transaction_class()

    class Dies(real):
        def commit_transaction(self):
            raise KeyboardInterrupt("killed before the catalog commit")

    monkeypatch.setattr(publish, "_TRANSACTION", Dies)
    with pytest.raises(KeyboardInterrupt):
        publish.maintain(lake)
    monkeypatch.setattr(publish, "_TRANSACTION", real)
    assert len(_properties(lake)) == len(days)  # nothing changed: the version files are not live
    assert {day: publish.current_version(lake, day) for day in days} == before
    assert publish.maintain(lake) == {"buckets": 2, "migrated": len(days)}
    assert _properties(lake) == []
    assert {day: publish.current_version(lake, day) for day in days} == before
