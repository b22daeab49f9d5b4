"""What a local Airflow's task processes start with: imported once, by the LocalExecutor's forkserver.

tidemark.devstack.airflow runs the scheduler with `[scheduler] mp_start_method = forkserver` and
this module as `mp_forkserver_preload` (Airflow 3.3): the forkserver imports it before it forks the
executor's workers, and each task process is a fork of a worker, so the dedup DAG's tasks start
with all of this loaded instead of doing it themselves (bench/noop_runs.py measures a run):

- Airflow's task runner and the DAG file's provider, pyarrow (datasets, Parquet), pandas, pyiceberg's
  SQL catalog and table, requests and tenacity: about 2 s of imports per task process on a loaded
  2-core machine;
- the Spark Connect client (pyspark.sql.connect with gRPC) and the provider's Spark Connect hook,
  which the dedup task imports before it connects to the stack's warm server: about 0.4 s of every
  dedup, on the path from a landed file to its readable correction. Importing starts no JVM, no
  gRPC channel and no thread (a channel is opened by the task, after the fork), and does not put
  the process in Connect mode (creating a session does);
- SQLAlchemy's mapper configuration. The first ORM query in a process configures every mapped
  class SQLAlchemy knows of, and in a task process that includes Airflow's own models (importing a
  good part of Airflow): 2-3 s in every task that opens the lake's Iceberg catalog (pyiceberg's
  SqlCatalog is an ORM), done here once.

Third-party code only: tidemark's own modules are imported by each task, so a task runs the
checkout's code as it is when the task starts (a restart of the scheduler picks up a library
upgrade). A library missing here costs only the time it would have saved: the forkserver skips a
preload module that fails to import, and this module imports the optional ones the same way.
"""

from __future__ import annotations

import contextlib
import importlib

from sqlalchemy.exc import SQLAlchemyError

# What the dedup DAG's tasks import, heaviest first; the provider is what the DAG file itself imports.
MODULES = (
    "airflow.sdk",
    "airflow.sdk.execution_time.task_runner",
    "airflow.providers.apache.spark.operators.spark_submit",
    "airflow.providers.apache.spark.hooks.spark_connect",
    "pyspark.sql.connect.session",
    "pandas",
    "pyarrow",
    "pyarrow.dataset",
    "pyarrow.parquet",
    "pyiceberg.catalog.sql",
    "pyiceberg.table",
    "requests",
    "tenacity",
)


def preload() -> list[str]:
    """Import MODULES and configure SQLAlchemy's mappers; returns the modules that did not import."""
    missing = []
    for name in MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    # A mapper that cannot be configured fails the task's first ORM query as it would have without
    # this module; the forkserver itself must not die of it.
    with contextlib.suppress(ImportError, SQLAlchemyError):
        from sqlalchemy.orm import configure_mappers

        configure_mappers()
    return missing


preload()
