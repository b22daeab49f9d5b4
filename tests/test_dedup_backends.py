"""The dedup back ends (tidemark.orchestration.dedup_backends): one registry, one choice from the
environment, refused with a message naming the choices; the Dataproc job submits a valid dedup."""

from __future__ import annotations

from datetime import date
from typing import get_args

import pytest

from tidemark.cli import build_parser
from tidemark.orchestration import dedup_backends
from tidemark.orchestration.dedup_backends import DataprocTarget
from tidemark.store.lake import Lake

COMPOSER = {"TIDEMARK_DATAPROC_CLUSTER": "c", "TIDEMARK_DATAPROC_PROJECT": "p", "TIDEMARK_DATAPROC_REGION": "r"}


def test_the_registry_is_the_names_the_dag_builds():
    assert set(dedup_backends.BACKENDS) == set(get_args(dedup_backends.BackendName)) == {"dataproc", "spark"}


def test_the_dedup_back_end_is_chosen_in_one_place():
    assert dedup_backends.choose({}) == "spark"
    assert dedup_backends.choose(COMPOSER) == "dataproc"
    assert dedup_backends.choose({**COMPOSER, "TIDEMARK_DEDUP_BACKEND": "spark"}) == "spark"  # forced
    assert dedup_backends.choose({"TIDEMARK_DEDUP_BACKEND": " dataproc "}) == "dataproc"
    with pytest.raises(ValueError, match="expected one of dataproc, spark"):
        dedup_backends.choose({"TIDEMARK_DEDUP_BACKEND": "databricks"})


def test_the_dataproc_branch_is_chosen_only_with_a_complete_environment_and_submits_a_valid_dedup():
    assert dedup_backends.dataproc_target({}) is None
    assert dedup_backends.dataproc_target({"TIDEMARK_DATAPROC_CLUSTER": ""}) is None  # Spark Connect on Composer
    with pytest.raises(ValueError, match="TIDEMARK_DATAPROC_REGION"):
        dedup_backends.dataproc_target({"TIDEMARK_DATAPROC_CLUSTER": "c", "TIDEMARK_DATAPROC_PROJECT": "p"})
    with pytest.raises(ValueError, match="TIDEMARK_DATAPROC_REGION"):
        dedup_backends.choose({"TIDEMARK_DATAPROC_CLUSTER": "c", "TIDEMARK_DATAPROC_PROJECT": "p"})
    target = dedup_backends.dataproc_target(
        {
            "TIDEMARK_DATAPROC_CLUSTER": "tidemark-spark ",
            "TIDEMARK_DATAPROC_PROJECT": "proj",
            "TIDEMARK_DATAPROC_REGION": "europe-west1",
        }
    )
    assert target == DataprocTarget(project="proj", region="europe-west1", cluster="tidemark-spark")
    job = dedup_backends.dataproc_job(target, "gs://ops/code/submit.py", "gs://lake", date(2026, 3, 7))
    assert job["placement"] == {"cluster_name": "tidemark-spark"}
    assert job["reference"] == {"project_id": "proj"}
    pyspark_job = job["pyspark_job"]
    assert isinstance(pyspark_job, dict)
    assert pyspark_job["main_python_file_uri"] == "gs://ops/code/submit.py"
    parsed = build_parser().parse_args(pyspark_job["args"])  # what submit.py hands to tidemark's CLI
    assert parsed.command == "dedup"
    assert parsed.lake == Lake.open("gs://lake")
    assert parsed.event_date == date(2026, 3, 7)


def test_dedup_concurrency_comes_from_the_environment_and_refuses_nonsense():
    assert dedup_backends.dedup_concurrency({}) is None
    assert dedup_backends.dedup_concurrency({"TIDEMARK_DEDUP_CONCURRENCY": "1"}) == 1
    for bad in ("0", "-1", "two", "1.5"):
        with pytest.raises(ValueError, match="TIDEMARK_DEDUP_CONCURRENCY"):
            dedup_backends.dedup_concurrency({"TIDEMARK_DEDUP_CONCURRENCY": bad})
