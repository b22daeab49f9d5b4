"""Affected dates are never lost, and the lake heals itself: rerun obligations survive superseding
versions and crashes at every step of a dedup run, and reconciliation finds every stale date.

The DAG's way is reproduced with the functions its tasks call: `run_dedup` (the dedup task), then
`obligations.reruns_owed_by` (the publish task's list of neighbour runs). Every scenario ends with
every date equal to the batch reference (tests/reference.py through test_dedup_lake.expected)."""

from __future__ import annotations

import json
import os
from datetime import date, datetime, timedelta, timezone

import pytest

from tests.lakekit import RULES, SimulatedStream, expected, published
from tidemark import cli
from tidemark.base import layout
from tidemark.base.session_rules import SessionRules
from tidemark.deduplication.dedup import run_dedup
from tidemark.iceberg import commits, run_markers, table_versions
from tidemark.orchestration import obligations, reconcile, runs
from tidemark.session import rules_record
from tidemark.store.lake import Lake

D6, D7 = "2026-03-06", "2026-03-07"
DAY6, DAY7 = layout.as_event_date(D6), layout.as_event_date(D7)


def t(day: str, hh: int, mm: int) -> datetime:
    return datetime.fromisoformat(f"{day}T{hh:02d}:{mm:02d}:00+00:00")


A = [("u", "a1", t(D6, 23, 20), "play"), ("u", "a2", t(D6, 23, 45), "play")]  # a session on D6
B = [("u", "b1", t(D7, 0, 30), "play"), ("u", "b2", t(D7, 0, 50), "play")]  # 45 min later: D7's
BRIDGE = [("u", "x", t(D7, 0, 10), "play")]  # arrives late, alone: a pane of D7 joining both
OTHER = [("v", "v1", t(D7, 10, 0), "play")]
LATER = [("v", "v2", t(D7, 10, 20), "play")]  # a second notice of D7 that affects no other date


def dag_run(lake, spark, event_date) -> list[str]:
    """One tidemark_dedup run: the dedup task, then the neighbour runs its publish task starts."""
    run_dedup(lake, event_date, RULES, spark=spark)
    owed = obligations.reruns_owed_by(lake, layout.as_event_date(event_date))  # the task's parsed param
    return [spec["conf"]["event_date"] for spec in owed]


def settle(lake, spark, dates) -> None:
    queue, done = list(dates), 0
    while queue:
        queue.extend(d for d in dag_run(lake, spark, queue.pop(0)) if d not in queue)
        done += 1
        assert done < 20, "reruns do not settle"


def check(lake, events) -> None:
    for day in (D6, D7):
        assert published(lake, day) == expected(events, day), day


@pytest.fixture
def lake(tmp_path, spark):
    """D6 and D7 published from A, B and OTHER; then BRIDGE lands (notice: D7)."""
    path = Lake.open(tmp_path / "lake")
    stream = SimulatedStream(path, 1)
    stream.batch(A + B + OTHER, mode=0.5)
    settle(path, spark, [D6, D7])
    check(path, A + B + OTHER)
    stream.batch(BRIDGE, mode=0.0)
    return path, stream, spark


@pytest.mark.slow  # not in make test-fast: dedup runs until the dates settle, 10-15 s apiece
@pytest.mark.spark
def test_a_second_notice_superseding_the_version_does_not_lose_the_neighbour(lake):
    """D7's first run finds D6 affected; a second notice's run publishes a newer version of D7 that
    affects nothing before the first run's publish task reads the lake. Before: that task read
    _CURRENT.json's affected_dates (the second version's: none) and D6 was never rerun."""
    path, stream, spark = lake
    first = run_dedup(path, D7, RULES, spark=spark)
    assert first.affected_dates == [layout.as_event_date(D6)]
    stream.batch(LATER, mode=0.5)
    second = run_dedup(path, D7, RULES, spark=spark)
    assert second.version > first.version
    assert table_versions.current_version(path, layout.as_event_date(D7)).affected_dates == ()
    # the first run's publish task, late:
    owed = obligations.reruns_owed_by(path, layout.as_event_date(D7))
    assert [spec["conf"]["event_date"] for spec in owed] == [D6]
    assert owed[0]["trigger_run_id"] == runs.affected_run_id(DAY6, DAY7, first.version)
    settle(path, spark, [D6])
    check(path, A + B + OTHER + BRIDGE + LATER)
    assert obligations.pending(path) == []


class Crash(BaseException):
    """A kill: not an Exception, so nothing on the way catches it."""


def _raise(*_a, **_k):
    raise Crash()


# Where a dedup run of D7 dies, and what to patch to kill it there.
CRASH_POINTS = {
    "after_data": (run_markers, "write_marker"),  # data files written, no run marker
    "after_marker": (commits, "commit"),  # files and marker written, no commit
    "after_commit": (obligations, "discharge"),  # committed, the run did not return
}


@pytest.mark.slow  # not in make test-fast: dedup runs until the dates settle, 10-15 s apiece
@pytest.mark.spark
@pytest.mark.parametrize("recovery", ["retry", "reconcile"])
@pytest.mark.parametrize("point", [*CRASH_POINTS, "before_neighbour_triggers"])
def test_crash_at_each_step_then_retry_or_reconcile_ends_equal_to_the_reference(lake, monkeypatch, point, recovery):
    path, _, spark = lake
    if point in CRASH_POINTS:
        module, name = CRASH_POINTS[point]
        with monkeypatch.context() as patch:
            patch.setattr(module, name, _raise)
            with pytest.raises(Crash):
                run_dedup(path, D7, RULES, spark=spark)
    else:
        run_dedup(path, D7, RULES, spark=spark)  # the dedup task succeeded; the DAG died before its triggers
    # Whatever was published or not, D6's rerun is owed, durably.
    assert [o["event_date"] for o in obligations.pending(path)] == [D6]

    if recovery == "retry":
        settle(path, spark, [D7])  # Airflow retries the task, the publish task starts the neighbours
    else:
        now = datetime.now(timezone.utc) + timedelta(hours=1)
        for _ in range(4):  # each reconcile starts the runs of the due dates (here: directly)
            decisions = reconcile.decide(reconcile.staleness(path), None, now=now)
            if not decisions:
                break
            for decision in decisions:
                assert decision.action == "trigger"
                run_dedup(path, decision.event_date, RULES, spark=spark)
        assert reconcile.staleness(path) == []
    check(path, A + B + OTHER + BRIDGE)
    assert obligations.pending(path) == []
    assert reconcile.staleness(path) == []


@pytest.mark.slow  # not in make test-fast: dedup runs until the dates settle, 10-15 s apiece
@pytest.mark.spark
def test_staleness_lists_every_reason_and_partitions_shows_it(lake, capsys):
    path, stream, spark = lake
    stale = {s.event_date.isoformat(): s for s in reconcile.staleness(path)}
    assert list(stale) == [D7]
    assert stale[D7].kinds == ["pending_receipts"]
    assert len(stale[D7].pending_receipts) == 1

    # D7's run records D6's obligation, then dies before its commit.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(commits, "commit", _raise)
        with pytest.raises(Crash):
            run_dedup(path, D7, RULES, spark=spark)
    stale = {s.event_date.isoformat(): s for s in reconcile.staleness(path)}
    assert stale[D6].kinds == ["obligation"]
    assert stale[D7].kinds == ["pending_receipts"]

    # A date with receipts and no version yet.
    written = stream.batch([("w", "w1", t("2026-03-09", 12, 0), "play")], mode=0.5)
    assert {s.event_date: s.kinds for s in reconcile.staleness(path)}[date(2026, 3, 9)] == ["no_version"]

    assert cli.main(["partitions", "--lake", path, "--json"]) == 0
    rows = {r["event_date"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert rows[D6]["stale"] == ["obligation"]
    assert "rerun owed by 2026-03-07" in rows[D6]["why"][0]
    assert rows[D7]["stale"] == ["pending_receipts"]
    assert rows["2026-03-09"]["stale"] == ["no_version"]
    assert written

    assert cli.main(["reconcile", "--lake", path, "--json", "--grace", "0s", "--home", str(path) + "-none"]) == 0
    listed = {r["event_date"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert set(listed) == {D6, D7, "2026-03-09"}
    assert all(
        r["action"] == "would start (--trigger)" and r["run_id"].startswith(f"reconcile__{d}__")
        for d, r in listed.items()
    )

    # The lake's session rules change (tidemark rules migrate records it first): every version
    # made under the old ones is stale.
    rules_record.record_change(path, SessionRules(gap=timedelta(minutes=20)), "test")
    stale = {s.event_date.isoformat(): s for s in reconcile.staleness(path)}
    assert "rules_changed" in stale[D6].kinds
    assert "rules_changed" in stale[D7].kinds
    assert "gap 30m" in " ".join(stale[D6].reasons)
    assert "20m" in " ".join(stale[D6].reasons)


def test_decide_names_runs_by_the_stale_state_and_moves_on_only_when_a_run_ended():
    item = reconcile.Staleness(DAY7, "20260307T010000000Z")
    item.add("pending_receipts", "1 receipt partition(s) not included", t(D7, 1, 0))
    item.pending_receipts = ["2026-03-07/20260307T010000000Z"]
    now = t(D7, 2, 0)
    states: dict[str, str] = {}
    first = reconcile.decide([item], states.get, now=now)[0]
    assert first.action == "trigger"
    assert first.run_id == runs.reconcile_run_id(DAY7, item.fingerprint, 1)
    assert first.conf == {"event_date": D7, "reconcile": "pending_receipts", "fingerprint": item.fingerprint}
    assert reconcile.decide([item], states.get, now=now)[0].run_id == first.run_id  # same state, same id
    states[first.run_id] = "running"
    assert reconcile.decide([item], states.get, now=now)[0].action == "in_flight"
    states[first.run_id] = "failed"
    second = reconcile.decide([item], states.get, now=now)[0]
    assert second.action == "trigger"
    assert second.run_id.endswith("__2")
    states[second.run_id] = states[runs.reconcile_run_id(DAY7, item.fingerprint, 3)] = "failed"
    assert reconcile.decide([item], states.get, now=now)[0].action == "given_up"
    # within the grace period: left to the notice's own run
    assert reconcile.decide([item], states.get, now=t(D7, 1, 5))[0].action == "waiting"
    # another stale state (a new receipt): another run
    item.pending_receipts.append("2026-03-07/20260307T013000000Z")
    assert reconcile.decide([item], {}.get, now=now)[0].run_id != first.run_id


@pytest.mark.parametrize(
    "bad",
    [
        (DAY7, "../x", 1),
        (DAY7, "abcdef012345", 0),
        (DAY7, "ABCDEF012345", 1),
    ],
)
def test_reconcile_run_ids_refuse_bad_parts(bad):
    with pytest.raises(runs.InvalidRunKey):
        runs.reconcile_run_id(*bad)
    assert runs.ALLOWED_RUN_ID.match(runs.reconcile_run_id(DAY7, "abcdef012345", 1))


@pytest.mark.parametrize("text", ["2026-02-30", "2026-03-07"])
def test_a_reconcile_run_id_takes_a_date_never_its_text(text):
    """Text is parsed where it enters (a CLI option, a notice, a marker), never here: even a valid one is refused."""
    with pytest.raises(TypeError):
        runs.reconcile_run_id(text, "abcdef012345", 1)


def test_reconcile_trigger_without_an_airflow_is_a_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("AIRFLOW_BASE_URL", raising=False)
    lake = Lake.open(tmp_path / "lake")
    os.makedirs(lake)
    assert cli.main(["reconcile", "--lake", str(lake), "--trigger", "--home", str(tmp_path / "home")]) == 2
    assert "--trigger needs an Airflow" in capsys.readouterr().err
    assert cli.main(["reconcile", "--lake", str(tmp_path / "nope")]) == 2
    assert cli.main(["reconcile", "--lake", str(lake), "--grace", "soon"]) == 2


def test_obligations_are_idempotent_and_refuse_bad_values(tmp_path):
    lake = Lake.open(tmp_path)
    first = obligations.record(lake, [DAY6, DAY7], DAY7, "20260307T010000000Z", "r1")
    again = obligations.record(lake, [DAY6], DAY7, "20260307T010000000Z", "r2")
    assert [o["event_date"] for o in first] == [D6]  # the file's JSON spells the date
    assert again == first
    # what is not a date never reaches a path: no folder but D6's is made
    with pytest.raises((layout.InvalidPartitionValue, TypeError)):
        obligations.record(lake, ["../etc"], DAY7, "20260307T010000000Z")
    with pytest.raises(layout.InvalidPartitionValue):
        obligations.record(lake, [DAY6], DAY7, "20260307T010000000Z'; --")
    assert os.listdir(lake.obligations_root()) == [f"event_date={D6}"]
    with open(layout.join(lake.obligations_dir(layout.as_event_date(D6)), "junk.json"), "w") as handle:
        handle.write('{"event_date": "x"}')
    assert [o["source_run_id"] for o in obligations.pending(lake)] == ["r1"]
    obligations.discharge(lake, first)
    assert obligations.pending(lake) == []
