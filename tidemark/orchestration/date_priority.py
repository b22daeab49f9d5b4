"""Older event dates first: the priority of a dedup task instance, from the date its run corrects.

Each file the stream reads usually touches two dates: the open one (on-time data) and a closed one
(a late correction). Their two runs start in the same scheduler loop, and with one dedup at a time
(TIDEMARK_DEDUP_CONCURRENCY=1, the local stack's default) the one Airflow picks first makes the
other wait for its whole dedup: on the local stack a late correction became readable 5.7-9.9 s
after its file landed when its dedup went first, and 15.5-16.8 s when it went second (BENCHMARKS.md
section 2). Airflow orders the task instances it may queue by priority weight, so the dedup task's
weight rule gives an older date a higher weight: the closed date's correction goes before the open
date's, and among queued runs the oldest data goes first.

The weight is computed when Airflow creates the task instance, from its run id alone (Airflow
passes no run conf to a weight rule): tidemark's run ids name their date
(tidemark.orchestration.runs.date_of_run_id). A run triggered by hand has another id and gets the lowest
weight, as every task had before.

Airflow loads the rule from tidemark's plugin (tidemark.orchestration.airflow_plugin, the
`airflow.plugins` entry point of the installed distribution): a DAG whose task names a rule that no
plugin registers fails to serialize.
"""

from __future__ import annotations

from datetime import date
from typing import TYPE_CHECKING

from airflow.task.priority_strategy import PriorityWeightStrategy

from tidemark.orchestration import runs

if TYPE_CHECKING:
    from airflow.models.taskinstance import TaskInstance

# Weights count the days from a date to this one: every event date tidemark accepts is before it,
# and the weights fit Airflow's integer column.
_LAST_DAY = date(2199, 12, 31)
# The weight of a run whose id names no date (a hand-triggered run): below every dated run's.
LOWEST = 1


def weight_of(run_id: str) -> int:
    """The priority weight of a dedup task instance of run `run_id`: higher for older dates."""
    day = runs.date_of_run_id(run_id)
    if day is None:
        return LOWEST
    return LOWEST + 1 + max(0, (_LAST_DAY - day).days)


class OlderDatesFirst(PriorityWeightStrategy):
    """Airflow's weight rule for the dedup task: `weight_of` its run's id."""

    def get_weight(self, ti: TaskInstance) -> int:
        """The task instance's priority weight (Airflow calls this when it creates the instance)."""
        return weight_of(ti.run_id)
