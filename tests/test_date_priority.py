"""The dedup task's weight rule: older event dates first (tidemark/orchestration/date_priority.py)."""

from __future__ import annotations

from datetime import date
from types import SimpleNamespace

from tidemark.orchestration import date_priority, runs


def test_every_run_id_tidemark_builds_names_its_date_and_others_none():
    day, source = date(2026, 3, 6), date(2026, 3, 7)
    assert runs.date_of_run_id(runs.notice_run_id("sessions", day, "20261127T153745068Z")) == day
    assert runs.date_of_run_id(runs.affected_run_id(day, source, "20261127T153745068Z")) == day
    assert runs.date_of_run_id(runs.reconcile_run_id(day, "0123abcd", 2)) == day
    for other in ("manual__2026-03-06T10:00:00+00:00", "notice__sessions__2026-02-30__x", "notice__x", ""):
        assert runs.date_of_run_id(other) is None, other


def test_an_older_date_weighs_more_and_a_hand_triggered_run_least():
    late = runs.notice_run_id("sessions", date(2026, 3, 6), "20261127T153745068Z")
    open_date = runs.notice_run_id("sessions", date(2026, 3, 7), "20261127T153745068Z")
    neighbour = runs.affected_run_id(date(2026, 3, 5), date(2026, 3, 6), "20261127T153745068Z")
    weights = [date_priority.weight_of(r) for r in (neighbour, late, open_date, "manual__2026-03-06T10:00:00+00:00")]
    assert weights == sorted(weights, reverse=True)
    assert len(set(weights)) == 4
    assert weights[-1] == date_priority.LOWEST
    # what Airflow calls, with the task instance it creates
    assert date_priority.OlderDatesFirst().get_weight(SimpleNamespace(run_id=late)) == weights[1]
    assert 0 < weights[0] < 2**31  # Airflow's integer column
