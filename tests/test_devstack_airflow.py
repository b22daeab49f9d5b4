"""The local Airflow's task preload (tidemark/devstack/task_preload.py): what the LocalExecutor's
forkserver imports before it forks the workers, so that task processes start with it loaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tidemark.devstack.airflow import AirflowServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Run in a fresh interpreter, as the forkserver imports its preload modules.
_PROBE = r"""
import importlib, json, os, sys, threading
before = set(sys.modules)
for name in sys.argv[1].split(","):
    importlib.import_module(name)
new = set(sys.modules) - before
preload = sys.modules["tidemark.devstack.task_preload"]
# SQLAlchemy has no public "every mapper configured" query; its registries' flag is what the first
# ORM query of a task process checks (sqlalchemy.orm.mapper._configure_registries).
registries = sys.modules["sqlalchemy.orm.mapper"]._all_registries()
print(json.dumps({
    "missing": preload.preload(),
    "tidemark": sorted(m for m in new if m.split(".")[0] == "tidemark"),
    "unconfigured": sum(1 for r in registries if r._new_mappers),
    "airflow_models": "airflow.models.taskinstance" in sys.modules,
    "heavy": sorted(m for m in ("pyarrow.dataset", "pyiceberg.catalog.sql", "pandas", "pyspark.sql.connect.session")
                    if m in sys.modules),
    "connect_mode": os.environ.get("SPARK_CONNECT_MODE_ENABLED"),
    "threads": threading.active_count(),
}))
"""


def test_the_schedulers_forkserver_preloads_the_task_libraries_and_configures_the_mappers(tmp_path):
    env = AirflowServer(str(tmp_path)).environment()
    assert env["AIRFLOW__SCHEDULER__MP_START_METHOD"] == "forkserver"
    modules = env["AIRFLOW__SCHEDULER__MP_FORKSERVER_PRELOAD"]
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, modules],
        env={**os.environ, **env, "PYTHONPATH": ROOT},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["missing"] == []
    # Airflow's models are among the mapped classes, and all of them are configured before the fork:
    # a task's first query through pyiceberg's SqlCatalog no longer configures them itself.
    assert out["airflow_models"] is True
    assert out["unconfigured"] == 0
    assert out["heavy"] == ["pandas", "pyarrow.dataset", "pyiceberg.catalog.sql", "pyspark.sql.connect.session"]
    # The Spark Connect client is imported, not started: no Connect mode and no thread of its own
    # that a fork would leave half-copied (a task opens its gRPC channel after the fork).
    assert out["connect_mode"] is None
    assert out["threads"] == 1
    # No first-party code but the preload itself: each task imports tidemark as the checkout is then.
    assert out["tidemark"] == ["tidemark", "tidemark.devstack", "tidemark.devstack.task_preload"]
