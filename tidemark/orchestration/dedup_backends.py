"""Where a tidemark_dedup run's Spark step runs: the dedup back ends, chosen in one place.

The registry (`BACKENDS`), the choice from the environment (`choose`), its validation and the
settings each back end reads (`dataproc_target`, `dedup_concurrency`) and the work it submits
(`dedup_args`, `dataproc_job`) are here; dags/tidemark_dedup.py builds the Airflow operator of the
chosen name (an exhaustive match over `BackendName`, so mypy refuses a name without a builder).
Every back end runs the same command line, `tidemark dedup --lake L --event-date D`: the planning,
the commit and the notices are the library's, the back end only decides where Spark runs.

Standard library only: the DAG file imports this module at parse time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from typing import Final, Literal, get_args

from tidemark.base import layout

BackendName = Literal["dataproc", "spark"]

# name -> where its Spark step runs (the registry; `choose` refuses any other name)
BACKENDS: Final[Mapping[BackendName, str]] = {
    "dataproc": "a Dataproc PySpark job on TIDEMARK_DATAPROC_CLUSTER (Composer)",
    "spark": "the spark_default connection: spark-submit, or a Spark Connect client",
}
assert set(BACKENDS) == set(get_args(BackendName))

BACKEND_ENV: Final = "TIDEMARK_DEDUP_BACKEND"
CLUSTER_ENV: Final = "TIDEMARK_DATAPROC_CLUSTER"
DATAPROC_ENV: Final = ("TIDEMARK_DATAPROC_PROJECT", "TIDEMARK_DATAPROC_REGION")
CONCURRENCY_ENV: Final = "TIDEMARK_DEDUP_CONCURRENCY"


@dataclass(frozen=True)
class DataprocTarget:
    """The Dataproc cluster a dedup job runs on."""

    project: str
    region: str
    cluster: str


def _text(environ: Mapping[str, str], name: str) -> str:
    return (environ.get(name) or "").strip()


def dataproc_target(environ: Mapping[str, str]) -> DataprocTarget | None:
    """The cluster TIDEMARK_DATAPROC_CLUSTER names (Composer; terraform/composer.tf sets it), else None.

    A half-set environment is refused at parse time, naming what is missing, rather than failing in
    every run.

    Raises:
        ValueError: the cluster is set without its project or region.
    """
    cluster = _text(environ, CLUSTER_ENV)
    if not cluster:
        return None
    missing = [name for name in DATAPROC_ENV if not _text(environ, name)]
    if missing:
        raise ValueError(f"{CLUSTER_ENV}={cluster!r} needs {', '.join(missing)} too")
    project, region = (_text(environ, name) for name in DATAPROC_ENV)
    return DataprocTarget(project=project, region=region, cluster=cluster)


def choose(environ: Mapping[str, str]) -> BackendName:
    """The back end of this environment's runs.

    TIDEMARK_DEDUP_BACKEND when set, else `dataproc` when TIDEMARK_DATAPROC_CLUSTER is set
    (Composer), else `spark`.

    Raises:
        ValueError: an unknown name (the message lists the choices), or an incomplete Dataproc
            environment.
    """
    name = _text(environ, BACKEND_ENV)
    if not name:
        return "dataproc" if dataproc_target(environ) else "spark"
    for known in BACKENDS:
        if name == known:
            return known
    raise ValueError(f"{BACKEND_ENV}={name!r}: expected one of {', '.join(sorted(BACKENDS))}")


def dedup_concurrency(environ: Mapping[str, str]) -> int | None:
    """TIDEMARK_DEDUP_CONCURRENCY: dedup tasks running at once across all runs (unset: no limit).

    max_active_runs still bounds them. On a small box 1 is fastest: runs of one date then never
    compute the same receipts side by side; the one that waited finds them published and is a no-op.

    Raises:
        ValueError: anything but a positive integer.
    """
    text = _text(environ, CONCURRENCY_ENV)
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{CONCURRENCY_ENV} must be a positive integer, not {text!r}")
    return int(text)


def dedup_args(lake: str, event_date: date) -> list[str]:
    """The tidemark command line of the Spark step, wherever it runs (spark-submit, Dataproc)."""
    return ["dedup", "--lake", lake, "--event-date", layout.event_date_text(event_date)]


def dataproc_job(
    target: DataprocTarget, application: str, lake: str | None = None, event_date: date | None = None
) -> dict[str, object]:
    """The Dataproc job (DataprocSubmitJobOperator's `job`) of one dedup run on `target`'s cluster.

    Without a lake and a date, the job without its arguments (the operator's, until its task runs).
    """
    pyspark_job: dict[str, object] = {"main_python_file_uri": application}
    if lake is not None and event_date is not None:
        pyspark_job["args"] = dedup_args(lake, event_date)
    return {
        "reference": {"project_id": target.project},
        "placement": {"cluster_name": target.cluster},
        "pyspark_job": pyspark_job,
    }
