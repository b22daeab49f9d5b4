"""What a consumer DAG's run works on (tidemark.products.consumer_run, tidemark.orchestration.settings):
the lake from the Variable or the environment, the output root, the run's date from its partition
key or Param, each refused with a message saying what to give."""

from __future__ import annotations

from datetime import date

import pytest

from tidemark.base.layout import InvalidPartitionValue
from tidemark.orchestration import settings
from tidemark.products import consumer_run
from tidemark.store.lake import Lake

OUT = consumer_run.Output("metrics_root", "TIDEMARK_METRICS_ROOT", lambda lake: lake.path("_products", "m"))


def _variables(values: dict[str, str]) -> settings.Variables:
    return values.get


def test_the_lake_comes_from_the_variable_else_the_environment_else_a_clear_error():
    assert settings.lake_uri(variables=_variables({"tidemark_lake": "/v"}), environ={"TIDEMARK_LAKE": "/e"}) == "/v"
    assert settings.lake_uri(variables=_variables({}), environ={"TIDEMARK_LAKE": "/e"}) == "/e"
    with pytest.raises(ValueError, match="set the Airflow Variable tidemark_lake or TIDEMARK_LAKE"):
        settings.lake_uri(variables=_variables({}), environ={})


def test_a_setting_falls_back_to_the_environment_then_the_default():
    assert settings.setting("v", "E", "d", variables=_variables({"v": "1"}), environ={"E": "2"}) == "1"
    assert settings.setting("v", "E", "d", variables=_variables({}), environ={"E": "2"}) == "2"
    assert settings.setting("v", "E", "d", variables=_variables({}), environ={}) == "d"


def test_the_run_date_is_the_partition_key_or_the_param_and_one_date():
    assert consumer_run.run_date("2026-03-07") == date(2026, 3, 7)
    assert consumer_run.run_date(None, "2026-03-07") == date(2026, 3, 7)
    assert consumer_run.run_date("2026-03-07", "2026-03-07") == date(2026, 3, 7)
    with pytest.raises(ValueError, match="disagree"):
        consumer_run.run_date("2026-03-07", "2026-03-08")
    with pytest.raises(ValueError, match="no event date"):
        consumer_run.run_date(None, None)
    with pytest.raises(InvalidPartitionValue):
        consumer_run.run_date("2026-02-30")


def test_resolve_gives_the_lake_the_output_root_and_the_date(tmp_path):
    lake = str(tmp_path / "lake")
    run = consumer_run.resolve(OUT, "2026-03-07", variables=_variables({}), environ={"TIDEMARK_LAKE": lake})
    assert run.lake == Lake.open(lake)
    assert run.out == Lake.open(lake).path("_products", "m")
    assert run.day == date(2026, 3, 7)
    chosen = consumer_run.resolve(
        OUT,
        None,
        "2026-03-08",
        variables=_variables({"metrics_root": "/mine"}),
        environ={"TIDEMARK_LAKE": lake, "TIDEMARK_METRICS_ROOT": "/env"},
    )
    assert chosen.out == "/mine"
    assert chosen.day == date(2026, 3, 8)
    from_env = consumer_run.resolve(
        OUT, "2026-03-07", variables=_variables({}), environ={"TIDEMARK_LAKE": lake, "TIDEMARK_METRICS_ROOT": "/env"}
    )
    assert from_env.out == "/env"
