"""What a consumer DAG's run works on: the lake, its output root and its event date.

The example consumers (dags/example_*.py) resolve these the same way: the lake from the Variable
tidemark_lake or TIDEMARK_LAKE, the output root from the consumer's own Variable or environment
variable (default: a folder under the lake's _products), and the date from the run's partition key
(an asset event's event date, or a week's Monday) or, for a manual run, the `event_date` Param.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date

from tidemark.base import layout
from tidemark.orchestration import settings
from tidemark.store.lake import Lake


@dataclass(frozen=True)
class Output:
    """Where a consumer writes: its Variable, else its environment variable, else default(lake)."""

    variable: str
    env: str
    default: Callable[[Lake], str]


@dataclass(frozen=True)
class ConsumerRun:
    """One consumer run's inputs, resolved and checked."""

    lake: Lake
    out: str
    day: date


def run_date(partition_key: str | None, param: str | None = None) -> date:
    """The run's date: its partition key, else the `event_date` Param (`param`, its text), parsed once.

    Raises:
        ValueError: both are given and differ, or neither is (layout.InvalidPartitionValue, a
            ValueError, for text that is not a date).
    """
    days = {layout.as_event_date(value) for value in (partition_key, param) if value}
    if len(days) > 1:
        raise ValueError(f"partition key {partition_key!r} and event_date {param!r} disagree: give one date")
    if not days:
        raise ValueError('no event date: trigger with the date as partition key (or {"event_date": "YYYY-MM-DD"})')
    (day,) = days
    return day


def resolve(
    output: Output,
    partition_key: str | None,
    param: str | None = None,
    *,
    variables: settings.Variables = settings.airflow_variable,
    environ: Mapping[str, str] = os.environ,
) -> ConsumerRun:
    """The lake, the output root and the date of a consumer run (see the module).

    `partition_key` and `param` (the `event_date` Param) are the run's text, parsed here (run_date).
    """
    lake = Lake.open(settings.lake_uri(variables=variables, environ=environ))
    out = settings.setting(output.variable, output.env, variables=variables, environ=environ) or output.default(lake)
    return ConsumerRun(lake=lake, out=out, day=run_date(partition_key, param))
