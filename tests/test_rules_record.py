"""The lake's session rules record, without Spark: written once and create-if-absent (concurrent
first starts cannot both win), history kept, disagreeing rules refused with both values named by
every entry point (dedup, stream, up) before anything starts, and version staleness."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from dataclasses import replace
from datetime import date, timedelta
from pathlib import Path

import pytest

from tidemark.base.layout import as_event_date
from tidemark.base.session_rules import SessionRules, parse_overrides
from tidemark.session import rules_record
from tidemark.store import storage
from tidemark.store.lake import Lake
from tidemark.store.version_record import VersionRecord

TIDEMARK = os.path.join(os.path.dirname(sys.executable), "tidemark")
GAP20 = SessionRules(gap=timedelta(minutes=20))


def cli(*args, timeout=120, cwd=None):
    return subprocess.run([TIDEMARK, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd)


def test_first_start_records_the_rules_once_and_later_starts_take_them(tmp_path):
    lake = Lake.open(tmp_path / "lake")
    assert rules_record.current(lake) is None
    first = rules_record.ensure(lake, parse_overrides(gap="20m"), "tidemark stream")
    assert first.sequence == 1
    assert first.rules == GAP20
    assert first.reason == "first start on an empty lake"
    doc = json.loads(Path(lake.rules_record(1)).read_text())
    assert doc["rules"] == {"gap": "20m", "allowed_lateness": "1h", "watermark_delay": "10m"}
    assert doc["rules_id"] == rules_record.fingerprint(GAP20)
    # No options: the lake's rules; the same rules spelled otherwise: accepted; nothing rewritten.
    assert rules_record.ensure(lake, None, "tidemark stream").rules == GAP20
    assert rules_record.ensure(lake, parse_overrides(gap="1200s", allowed_lateness="60m"), "x").rules == GAP20
    assert [r.sequence for r in rules_record.history(lake)] == [1]
    assert Path(lake.rules_record(1)).read_text() == json.dumps(doc, sort_keys=True, indent=1) + "\n"


def test_other_rules_are_refused_naming_both_values(tmp_path):
    lake = Lake.open(tmp_path / "lake")
    rules_record.ensure(lake, GAP20, "tidemark stream")
    with pytest.raises(rules_record.RulesMismatch) as refused:
        rules_record.ensure(lake, parse_overrides(gap="30m"), "tidemark stream")
    message = str(refused.value)
    assert "--gap 30m given, the lake records 20m" in message
    assert "tidemark rules migrate" in message
    # Only what was given is compared: a partial set that agrees is fine.
    assert rules_record.check(lake, parse_overrides(watermark_delay="10m"), "dedup")[0] == GAP20
    with pytest.raises(rules_record.RulesMismatch, match="--allowed-lateness 2h given, the lake records 1h"):
        rules_record.for_dedup(lake, SessionRules(gap=timedelta(minutes=20), allowed_lateness=timedelta(hours=2)))
    assert rules_record.for_dedup(lake) == (GAP20, rules_record.fingerprint(GAP20))


def race_first_starts(lake: Lake, starters: int) -> int:
    """`starters` streams record different rules (gap 10m + index) on a new lake at once: the index
    of the one whose rules the lake now records (exactly one wins; the others are refused)."""
    barrier = threading.Barrier(starters)
    outcomes = {}

    def start(index: int) -> None:
        rules = SessionRules(gap=timedelta(minutes=10 + index))
        barrier.wait()
        try:
            outcomes[index] = rules_record.ensure(lake, rules, f"stream {index}").rules
        except rules_record.RulesMismatch:
            outcomes[index] = "refused"
        except Exception as exc:  # noqa: BLE001 - any other end of a starter fails the test below
            outcomes[index] = exc

    threads = [threading.Thread(target=start, args=(i,)) for i in range(starters)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(outcomes) == starters, outcomes
    assert not [e for e in outcomes.values() if isinstance(e, Exception)], outcomes
    winners = [i for i, got in outcomes.items() if got != "refused"]
    assert len(winners) == 1, outcomes
    assert rules_record.current(lake).rules == SessionRules(gap=timedelta(minutes=10 + winners[0]))
    return winners[0]


def test_concurrent_first_starts_with_different_rules_cannot_both_win(tmp_path):
    for attempt in range(5):
        lake = Lake.open(tmp_path / f"lake{attempt}")
        race_first_starts(lake, 6)
        assert [n for n in os.listdir(lake.rules_dir())] == ["rules-000001.json"]  # no temp files left


def test_a_change_adds_a_record_and_keeps_the_history(tmp_path):
    lake = Lake.open(tmp_path / "lake")
    first = rules_record.ensure(lake, None, "tidemark stream")
    assert first.rules == SessionRules()
    second = rules_record.record_change(lake, GAP20, "tidemark rules migrate")
    assert (second.sequence, second.previous_rules_id, second.reason) == (2, first.rules_id, "migration")
    assert rules_record.record_change(lake, GAP20, "again") == second  # already the lake's: nothing added
    history = rules_record.history(lake)
    assert [(r.sequence, r.rules) for r in history] == [(1, SessionRules()), (2, GAP20)]
    assert history[0].recorded_at <= history[1].recorded_at
    assert rules_record.current(lake) == second
    with pytest.raises(rules_record.RulesMismatch):
        rules_record.ensure(lake, SessionRules(), "tidemark stream")


def test_a_tampered_record_is_refused_with_its_path(tmp_path):
    lake = Lake.open(tmp_path / "lake")
    rules_record.ensure(lake, None, "tidemark stream")
    path = lake.rules_record(1)
    doc = json.loads(Path(path).read_text())
    doc["rules_us"]["gap_us"] = 60_000_000  # edited by hand, id left as it was
    storage.write_json_atomic(path, doc)
    with pytest.raises(rules_record.InvalidRulesRecord, match="rules-000001.json.*fingerprint"):
        rules_record.current(lake)
    storage.write_text_atomic(path, "not json")
    with pytest.raises(rules_record.InvalidRulesRecord, match="rules-000001.json"):
        rules_record.current(lake)


def test_versions_made_under_other_rules_are_stale():
    legacy = VersionRecord(event_date=date(2026, 3, 7), run_id="a" * 32, gap=timedelta(minutes=30))
    marker = replace(legacy, **rules_record.marker_fields(SessionRules()))
    assert not rules_record.changed_since(marker, SessionRules())
    assert rules_record.changed_since(marker, GAP20)
    # Any rule counts (the id covers all three) ...
    assert rules_record.changed_since(marker, SessionRules(allowed_lateness=timedelta(hours=3)))
    # ... a version written before versions recorded an id is judged by its gap.
    assert not rules_record.changed_since(legacy, SessionRules())
    assert rules_record.changed_since(legacy, GAP20)
    assert not rules_record.changed_since(None, GAP20)


def test_a_lake_without_a_record_dedups_with_the_defaults_and_says_so(tmp_path, capsys):
    lake = Lake.open(tmp_path / "lake")
    assert rules_record.for_dedup(lake) == (SessionRules(), rules_record.fingerprint(SessionRules()))
    assert "no session rules record" in capsys.readouterr().err
    # A lake written before the record existed: the stream's next start adopts its rules.
    os.makedirs(os.path.join(lake, "sessions", "event_date=2026-03-07"))
    adopted = rules_record.ensure(lake, GAP20, "tidemark stream")
    assert adopted.rules == GAP20
    assert adopted.reason.startswith("adopted")


# -- the commands refuse disagreeing options before anything starts -------------------------------


@pytest.fixture
def lake20(tmp_path):
    lake = Lake.open(tmp_path / "lake")
    rules_record.ensure(lake, GAP20, "tidemark stream")
    return lake


def test_dedup_command_refuses_disagreeing_options(lake20):
    proc = cli("dedup", "--lake", lake20, "--event-date", "2026-03-07", "--gap", "30m")
    assert proc.returncode == 2, proc.stderr
    assert "--gap 30m given, the lake records 20m" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_dedup_through_spark_submit_app_refuses_disagreeing_options(lake20):
    # What the DAG's SparkSubmitOperator runs, with a rule option added: refused the same way.
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(os.path.dirname(os.path.dirname(__file__)), "streaming_job", "submit.py"),
            "dedup",
            "--lake",
            lake20,
            "--event-date",
            "2026-03-07",
            "--gap",
            "30m",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "the lake records 20m" in proc.stderr


def test_stream_command_refuses_other_rules_before_spark_starts(lake20, tmp_path):
    proc = cli(
        "stream",
        "--landing",
        str(tmp_path / "landing"),
        "--lake",
        lake20,
        "--checkpoint",
        str(tmp_path / "ckpt"),
        "--gap",
        "45m",
        "--available-now",
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "--gap 45m given, the lake records 20m" in proc.stderr
    assert not os.path.exists(tmp_path / "ckpt")  # nothing started
    assert [r.sequence for r in rules_record.history(lake20)] == [1]


def test_up_refuses_other_rules_before_anything_starts(lake20, tmp_path):
    from tidemark.devstack.stack import Stack

    home = str(tmp_path / "state")
    proc = cli("up", "--home", home, "--lake", lake20, "--gap", "30m")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "--gap 30m given, the lake records 20m" in proc.stderr
    assert Stack(home).records() == {}


def test_rules_show_lists_the_history(lake20):
    rules_record.record_change(lake20, SessionRules(gap=timedelta(minutes=45)), "tidemark rules migrate")
    proc = cli("rules", "show", "--lake", lake20, "--json")
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert lines[0]["gap"] == "45m"
    assert lines[0]["recorded"] is True
    assert [(line["sequence"], line["rules"]["gap"]) for line in lines if line["kind"] == "record"] == [
        (1, "20m"),
        (2, "45m"),
    ]
    table = cli("rules", "show", "--lake", lake20)
    assert table.returncode == 0
    assert "rules history" in table.stdout
    assert "20m" in table.stdout


def test_on_an_object_store_concurrent_first_records_leave_one_winner(monkeypatch):
    """The object-store branch (no conditional write): writers that raced to an absent name all read
    back after the settle delay, and only the one whose write is there wins. An in-memory pyarrow
    filesystem stands in for a bucket (no GCS here)."""
    import pyarrow.fs as pafs

    bucket = pafs._MockFileSystem()
    real = storage.resolve
    monkeypatch.setattr(
        storage, "resolve", lambda uri: (bucket, uri[len("mock://") :]) if uri.startswith("mock://") else real(uri)
    )
    monkeypatch.setattr(
        storage,
        "create_text_if_absent_at",
        lambda fs, path, text, settle_seconds=0.5, _create=storage.create_text_if_absent_at: _create(
            fs, path, text, 0.5
        ),
    )
    lake = Lake.open("mock://bucket/lake")
    race_first_starts(lake, 4)
    # Later starts: the record is there, so nothing is written again.
    assert not lake.rules_record(1).create_text_if_absent("other")
    with pytest.raises(rules_record.RulesMismatch):
        rules_record.ensure(lake, SessionRules(gap=timedelta(minutes=99)), "s")


def test_a_run_made_under_rules_the_lake_no_longer_has_is_not_committed(tmp_path):
    """The commit re-reads the record: a run that started before a migration and ends after it
    replans (Superseded) instead of publishing old-rules sessions; same receipts under new rules
    are committed over an old-rules version (not skipped as 'covered')."""
    from tests import icebergkit
    from tidemark.iceberg import commits, run_markers, table_versions

    lake, day = Lake.open(tmp_path / "lake"), "2026-03-06"
    receipts = [icebergkit.receipt(1), icebergkit.receipt(2)]
    rules_record.ensure(lake, None, "tidemark stream")
    old = icebergkit.with_fields(
        icebergkit.prepared_run(lake, day, receipts), **rules_record.marker_fields(SessionRules())
    )
    run_markers.write_marker(lake, old)
    assert commits.commit(lake, old).committed

    late = icebergkit.prepared_run(lake, day, receipts + [icebergkit.receipt(3)])
    late = icebergkit.with_fields(late, **rules_record.marker_fields(SessionRules()))
    run_markers.write_marker(lake, late)
    rules_record.record_change(lake, GAP20, "tidemark rules migrate")  # while `late` was running
    with pytest.raises(commits.Superseded, match="session rules changed"):
        commits.commit(lake, late)

    redone = icebergkit.prepared_run(lake, day, receipts)
    redone = icebergkit.with_fields(redone, **rules_record.marker_fields(GAP20), gap=GAP20.gap)
    run_markers.write_marker(lake, redone)
    outcome = commits.commit(lake, redone)
    assert outcome.committed
    assert table_versions.current_version(lake, as_event_date(day)).rules_id == rules_record.fingerprint(GAP20)


def test_a_migration_replaces_a_version_that_read_receipts_its_own_plan_does_not_need(tmp_path):
    """Issue 33 item 2: a 30m version of D read the previous day's partition whose newest event is
    27 minutes before midnight (lo = D0 - 30m); a run under 25m (lo = D0 - 25m) does not need it.
    The receipt sets of versions made under different rules are not comparable: the run under the
    lake's rules replaces the old-rules version (it used to raise Superseded on every replan, so
    the migration failed for good). Under the same rules the newest complete version still wins:
    a run that lacks a receipt the current (new-rules) version read replans."""
    from tests import icebergkit
    from tidemark.iceberg import commits, run_markers, table_versions

    lake, day, before = Lake.open(tmp_path / "lake"), "2026-03-06", "2026-03-05"
    gap25 = SessionRules(gap=timedelta(minutes=25))
    rules_record.ensure(lake, None, "tidemark stream")  # 30m
    near_midnight = f"{before}/{icebergkit.receipt(1)}"  # the previous day's partition, max_event_ts 23:33

    def run(receipts: list[str], rules: SessionRules, extra: tuple[str, ...] = ()) -> VersionRecord:
        marker = icebergkit.prepared_run(lake, day, receipts)
        marker = icebergkit.with_fields(
            marker,
            **rules_record.marker_fields(rules),
            gap=rules.gap,
            receipts=tuple(sorted(marker.receipts + extra)),
        )
        run_markers.write_marker(lake, marker)
        return marker

    old = run([icebergkit.receipt(2)], SessionRules(), extra=(near_midnight,))
    assert commits.commit(lake, old).committed

    rules_record.record_change(lake, gap25, "tidemark rules migrate")
    migrated = run([icebergkit.receipt(2)], gap25)  # the 25m plan: D's partition only
    outcome = commits.commit(lake, migrated)
    assert outcome.committed
    current = table_versions.current_version(lake, as_event_date(day))
    assert current.run_id == migrated.run_id
    assert current.rules_id == rules_record.fingerprint(gap25)
    assert current.version > old.max_receipt_ts  # ids keep growing (same newest receipt: +1 ms)

    # The race the check exists for, under the (new) same rules: still refused, replan.
    behind = run([icebergkit.receipt(3)], gap25)
    with pytest.raises(commits.Superseded, match="1 receipt partition"):
        commits.commit(lake, behind)
    # ... and a run covering what the current version read replaces it; one covered by it does not.
    fuller = run([icebergkit.receipt(2), icebergkit.receipt(3)], gap25)
    assert commits.commit(lake, fuller).committed
    assert not commits.commit(lake, run([icebergkit.receipt(2), icebergkit.receipt(3)], gap25)).committed
