"""A process killed (os._exit, no cleanup) at each point between a version's files and its changeset
in the changes table (tidemark/iceberg/changes.py): a consumer never sees the changes of a version
that did not commit, and none is lost or doubled once the next run, or the DAG's notify task,
completes it. Versions are built without Spark (tests/changeskit.py); one case kills a real dedup
run between its two commits."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import date

import pytest

from tests import changeskit
from tests.icebergkit import commit_recording, receipt
from tidemark.base import layout
from tidemark.iceberg import changes, commits, table_versions
from tidemark.iceberg import table as iceberg
from tidemark.notices import corrected_delivery
from tidemark.store.lake import Lake

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
D = date(2026, 3, 10)

# Where the child dies: (module, function, "before" or "after" it runs).
POINTS = {
    "before the sessions commit": ("tidemark.iceberg.commits", "_commit_once", "before"),
    "between the two commits": ("tidemark.iceberg.commits", "commit", "after"),
    "changes file written, not appended": ("tidemark.iceberg.changes", "_copy_with_commit", "after"),
    "appended, not recorded": ("tidemark.iceberg.changes", "_in_history", "after-append"),
}

_CHILD = """
import importlib, os, sys
from tests.icebergkit import commit_recording
from datetime import date
from tidemark.iceberg import run_markers
from tidemark.store.lake import Lake

lake, run_id, module, name, when = sys.argv[1:6]
target = importlib.import_module(module)
original = getattr(target, name)
calls = []

def hooked(*args, **kwargs):
    calls.append(1)
    if when == "before":
        os._exit(9)
    result = original(*args, **kwargs)
    # _in_history runs twice before the append (finds nothing) and once after it (finds it)
    if when == "after" or (when == "after-append" and len(calls) == 3):
        os._exit(9)
    return result

setattr(target, name, hooked)
lake = Lake.open(lake)
commit_recording(lake, run_markers.read_marker(lake, date(2026, 3, 10), run_id))
os._exit(0)
"""


def _killed(lake: Lake, marker, point: str) -> int:
    module, name, when = POINTS[point]
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(lake.root), marker.run_id, module, name, when],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    return done.returncode


def _appends(lake: Lake) -> list[str]:
    return [p.get("tidemark.version") for _, p in changes.history(changes.load(lake))]


@pytest.mark.parametrize("point", list(POINTS))
def test_a_kill_at_each_point_loses_nothing_and_shows_nothing_uncommitted(tmp_path, point):
    lake = Lake.open(tmp_path / "lake")
    v1 = commit_recording(
        lake, changeskit.prepared_with_changes(lake, [receipt(1)], {"a": (5, 1), "b": (9, 2)}, None)
    ).current
    marker = changeskit.prepared_with_changes(lake, [receipt(1), receipt(2)], {"a": (7, 2), "c": (3, 1)}, v1)
    assert _killed(lake, marker, point) == 9
    current = table_versions.current_version(lake, D)
    committed = current.run_id == marker.run_id
    assert committed == (point != "before the sessions commit")
    if committed:
        # what the DAG's notify task runs after the dedup (the next dedup run of D: changes.ensure)
        corrected_delivery.record_current(lake, D)
    else:
        assert changeskit.changes_of(lake, D).keys() == {v1.version}  # nothing of the dead run
        current = commit_recording(
            lake, changeskit.prepared_with_changes(lake, [receipt(1), receipt(3)], {"a": (8, 2)}, v1)
        ).current
    # exactly one append per committed version, in version order; the invariant holds
    assert _appends(lake) == [v1.version, current.version]
    steps = changeskit.check_date(lake, D)
    assert [s["version"] for s in steps] == [v1.version, current.version]
    # the notice says where the changes are
    notice = corrected_delivery.build_for(lake, iceberg.load(lake), current)
    assert notice["changes"]["snapshot_id"] == changes.appended(lake, current).snapshot_id
    assert notice["change"]["sessions_changed"] == steps[-1]["updated"]
    # a file the dead child wrote but never appended is no part of the table
    listed = {t.file.file_path for t in changes.load(lake).scan().plan_files()}
    assert len(listed) == sum(1 for s in steps if s["inserted"] + s["deleted"] + s["updated"])


def test_the_next_version_appends_a_killed_runs_changeset_first(tmp_path):
    """Killed between the two commits, and no notify task ran: the next version's changeset does not
    overtake it (dedup's run appends the current version's first)."""
    lake = Lake.open(tmp_path / "lake")
    v1 = commit_recording(lake, changeskit.prepared_with_changes(lake, [receipt(1)], {"a": (5, 1)}, None)).current
    marker = changeskit.prepared_with_changes(lake, [receipt(1), receipt(2)], {"a": (6, 1)}, v1)
    assert _killed(lake, marker, "between the two commits") == 9
    v2 = table_versions.current_version(lake, D)
    changes.ensure(lake, v2)  # what run_dedup does before computing a new version over v2
    v3 = commit_recording(
        lake, changeskit.prepared_with_changes(lake, [receipt(1), receipt(2), receipt(3)], {}, v2)
    ).current
    assert _appends(lake) == [v1.version, v2.version, v3.version]
    assert [(s["deleted"], s["sessions"]) for s in changeskit.check_date(lake, D)][-1] == (1, 0)


def test_a_run_planned_on_another_version_is_not_committed_over_it(tmp_path):
    """Its changeset is relative to the version it was planned on: a concurrent version committed in
    between sends it to replan (Superseded) rather than record a changeset of the wrong previous."""
    lake = Lake.open(tmp_path / "lake")
    v1 = commit_recording(lake, changeskit.prepared_with_changes(lake, [receipt(1)], {"a": (5, 1)}, None)).current
    late = changeskit.prepared_with_changes(lake, [receipt(1), receipt(2), receipt(3)], {"a": (9, 3)}, v1)
    commit_recording(lake, changeskit.prepared_with_changes(lake, [receipt(1), receipt(2)], {"a": (6, 2)}, v1))
    with pytest.raises(commits.Superseded):
        commits.commit(lake, late)
    changeskit.check_date(lake, D)


def test_gc_keeps_every_changeset_and_each_snapshot_as_long_as_its_versions(tmp_path):
    from datetime import datetime, timedelta, timezone

    from tidemark.ops import gc

    lake = Lake.open(tmp_path / "lake")
    v1 = commit_recording(lake, changeskit.prepared_with_changes(lake, [receipt(1)], {"a": (5, 1)}, None)).current
    v2 = commit_recording(
        lake, changeskit.prepared_with_changes(lake, [receipt(1), receipt(2)], {"a": (6, 2), "b": (1, 1)}, v1)
    ).current
    orphan = f"{changes.root(lake)}/data/event_date={D}/killed-append.parquet"
    with open(orphan, "wb") as f:
        f.write(b"PAR1")
    later = datetime.now(timezone.utc) + timedelta(days=1)
    assert [r.what for r in gc.gc(lake, timedelta(hours=2), now=later, dry_run=True) if "changes" in r.what] == [
        "changes snapshot",
        "changes file",
    ]
    removed = gc.gc(lake, timedelta(hours=2), now=later)
    expired = [r for r in removed if r.what == "changes snapshot"]
    assert [(layout.as_event_date(r.event_date), r.version) for r in expired] == [
        (D, v1.version)
    ]  # as its sessions snapshot
    assert not os.path.exists(orphan)
    # every changeset's rows stay; the current version's snapshot stays for its notice
    assert set(changeskit.changes_of(lake, D)) == {v1.version, v2.version}
    assert [p["tidemark.version"] for _, p in changes.history(changes.load(lake))] == [v2.version]
    notice = corrected_delivery.build_for(lake, iceberg.load(lake), table_versions.current_version(lake, D))
    assert notice["changes"]["snapshot_id"] == changes.appended(lake, v2).snapshot_id


def test_the_notice_counts_from_the_changeset_without_reading_either_version(tmp_path, monkeypatch):
    lake = Lake.open(tmp_path / "lake")
    v1 = commit_recording(
        lake, changeskit.prepared_with_changes(lake, [receipt(1)], {"a": (5, 1), "b": (9, 2), "c": (1, 1)}, None)
    ).current
    marker = changeskit.prepared_with_changes(
        lake, [receipt(1), receipt(2)], {"a": (7, 2), "c": (1, 1), "d": (3, 1)}, v1
    )
    current = commits.commit(lake, marker).current

    def no_scan(*_args, **_kwargs):
        raise AssertionError("a version read whole")

    monkeypatch.setattr(corrected_delivery, "_sessions_at", no_scan)
    notice = corrected_delivery.build_for(lake, iceberg.load(lake), current)
    assert notice["change"] == {
        "kind": "changed",
        "sessions_added": 1,
        "sessions_removed": 1,
        "sessions_changed": 1,
        "sessions_unchanged": 1,
    }
    assert notice["rows"] == 3
    assert {k: notice["changes"][k] for k in ("inserted", "deleted", "updated")} == {
        "inserted": 1,
        "deleted": 1,
        "updated": 1,
    }


_DEDUP_CHILD = """
import os, sys
from tests.lakekit import RULES
from tidemark.iceberg import commits
from tidemark.store.lake import Lake

original = commits.commit

def commit(lake, marker, **options):
    outcome = original(lake, marker, **options)
    os._exit(9)  # the sessions commit landed; its changeset is not appended

commits.commit = commit
from tidemark.deduplication.dedup import run_dedup

run_dedup(Lake.open(sys.argv[1]), sys.argv[2], RULES)
os._exit(0)
"""


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_a_dedup_killed_between_its_two_commits_is_completed_by_the_next_run(spark, tmp_path):
    from tests.lakekit import RULES, busiest_date, lake_with
    from tidemark.deduplication.dedup import run_dedup

    lake, stream, events, batches = lake_with(tmp_path, seed=5, batches=4, upto=2)
    day = layout.as_event_date(busiest_date(events))

    run_dedup(lake, day, RULES, spark=spark)
    stream.batch(batches[2])
    done = subprocess.run(
        [sys.executable, "-c", _DEDUP_CHILD, str(lake.root), day.isoformat()],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1500,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert done.returncode == 9, done.stderr[-3000:]
    killed = table_versions.current_version(lake, day)
    assert changes.appended(lake, killed) is None
    assert killed.version not in changeskit.changes_of(lake, day)
    stream.batch(batches[3])
    run_dedup(lake, day, RULES, spark=spark)  # appends the killed version's changeset before its own commit
    newest = table_versions.current_version(lake, day)
    if newest.run_id == killed.run_id:  # the last batch brought nothing to this date: the notify task
        corrected_delivery.record_current(lake, day)
    else:
        assert newest.previous_version == killed.version
    versions = [p.get("tidemark.version") for _, p in changes.history(changes.load(lake))]
    assert versions.count(killed.version) == 1
    assert versions.index(killed.version) < versions.index(newest.version) + 1
    assert [s["version"] for s in changeskit.check_date(lake, day)][-2:] in (
        [killed.version, newest.version],
        [versions[versions.index(killed.version) - 1], killed.version],
    )


def test_the_asset_event_says_where_the_changes_are(tmp_path):
    from tidemark.notices import asset_events

    lake = Lake.open(tmp_path / "lake")
    version = commit_recording(lake, changeskit.prepared_with_changes(lake, [receipt(1)], {"a": (5, 1)}, None)).current
    (entry,) = corrected_delivery.outbox(lake).owed("airflow")
    extra = asset_events.event_extra(entry["notice"])
    assert extra["changes"]["snapshot_id"] == changes.appended(lake, version).snapshot_id
    assert (extra["changes"]["inserted"], extra["changes"]["identifier"]) == (1, "tidemark.sessions_changes")
