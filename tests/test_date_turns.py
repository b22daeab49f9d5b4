"""One dedup of a date at a time while dates run side by side (tidemark/orchestration/date_turns.py)."""

from __future__ import annotations

from datetime import date

from tidemark.orchestration import date_turns

D6, D7 = date(2026, 3, 6), date(2026, 3, 7)


def _run(run_id, key=None, conf=None):
    return {"dag_run_id": run_id, "partition_key": key, "conf": conf or {}}


def _dedup(run_id, queued):
    return {"dag_run_id": run_id, "task_id": "dedup", "queued_when": queued}


RUNS = [
    _run("a", "2026-03-06"),
    _run("b", "2026-03-07"),
    _run("c", None, {"event_date": "2026-03-06"}),  # a run triggered by hand: its date in the conf only
    _run("x", "not-a-date"),  # refused by its own tasks: never a date's run
]


def test_a_run_waits_for_the_run_of_its_date_queued_before_it():
    dedups = [
        _dedup("a", "2026-11-27T08:00:01Z"),
        _dedup("b", "2026-11-27T08:00:00Z"),
        _dedup("c", "2026-11-27T08:00:02Z"),
    ]
    assert date_turns.waiting_for(RUNS, dedups, "c", D6) == "a"
    assert date_turns.waiting_for(RUNS, dedups, "a", D6) is None  # first of its date
    # another date's dedup, queued earlier and running, is no reason to wait
    assert date_turns.waiting_for(RUNS, dedups, "b", D7) is None


def test_of_two_runs_of_a_date_asking_at_once_exactly_one_goes_on():
    same = "2026-11-27T08:00:00Z"
    dedups = [_dedup("c", same), _dedup("a", same)]
    turns = [date_turns.waiting_for(RUNS, dedups, rid, D6) for rid in ("a", "c")]
    assert sorted(map(str, turns)) == ["None", "a"]


def test_a_run_of_the_date_whose_dedup_is_not_running_is_not_waited_for():
    # run a is running, but its dedup is not (skipped, finished, waiting its turn, or not started)
    dedups = [_dedup("c", "2026-11-27T08:00:02Z")]
    assert date_turns.waiting_for(RUNS, dedups, "c", D6) is None


class FakeClient:
    def __init__(self, runs, dedups):
        self.runs, self.dedups, self.calls = runs, dedups, []

    def running_dag_runs(self, dag_id):
        self.calls.append(("runs", dag_id))
        return self.runs

    def running_task_instances(self, dag_id, task_id):
        self.calls.append(("tis", dag_id, task_id))
        return self.dedups


def test_ahead_of_asks_for_the_task_instances_only_when_another_run_of_the_date_runs():
    alone = FakeClient([_run("a", "2026-03-06"), _run("b", "2026-03-07")], [])
    assert date_turns.ahead_of(alone, "tidemark_dedup", "a", D6) is None
    assert alone.calls == [("runs", "tidemark_dedup")]
    busy = FakeClient(RUNS, [_dedup("a", "2026-11-27T08:00:01Z"), _dedup("c", "2026-11-27T08:00:02Z")])
    assert date_turns.ahead_of(busy, "tidemark_dedup", "c", D6) == "a"
    assert busy.calls[-1] == ("tis", "tidemark_dedup", "dedup")


def test_a_runs_date_is_parsed_and_a_malformed_one_is_no_date():
    assert date_turns.run_date(_run("a", "2026-03-06")) == D6
    assert date_turns.run_date(_run("c", None, {"event_date": "2026-03-06"})) == D6
    assert date_turns.run_date(_run("x", "2026-02-30")) is None
    assert date_turns.run_date(_run("y")) is None
