"""Shared fixtures. One local SparkSession for the whole run: Spark start-ups are the slowest
part of the suite, so every Spark test shares this one.

Environment guard: every test, and every test module, leaves `os.environ` as it found it. A
variable left behind changes the tests that follow in the same pytest worker, and the processes
they start (pyspark's SPARK_CONNECT_MODE_ENABLED made later `tidemark stream`s fail;
TIDEMARK_LOG_LEVEL=warning hid the line the demo waited for). pytest sets up higher-scoped fixtures
first, so the per-test snapshot is taken after the session and module fixtures: what they set on
purpose stays for the tests that use them, and the per-module guard undoes it when the module ends.

Order: the longest test files run first (FILE_SECONDS). `make test` hands whole files to two
workers (--dist loadfile, --no-loadscope-reorder: collection order); a long file taken last keeps
one worker busy alone at the end, so the run is as long as that tail.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# The stream's warm-up (streaming_job/warmup.py) costs seconds at every stream start, and the suite
# starts many streams: off for the whole run (the processes tests start inherit it), on in the
# tests of the warm-up itself.
os.environ.setdefault("TIDEMARK_STREAM_WARMUP", "0")
# Likewise the Spark Connect server's warm-up (tidemark/demo/correction_warmup.py), which `up` starts
# in the background: a minute of a server's CPU after every start; on in its own tests.
os.environ.setdefault("TIDEMARK_CONNECT_WARMUP", "0")

# Seconds per test file in a full run of the suite (setup + call + teardown of its tests, summed from
# the junit xml of `make test`, -n 2; minus the cuts measured since): the longest first, the rest in
# collection order. Refresh from a run's `--junitxml` when a file grows past the last ones listed.
FILE_SECONDS = {
    "test_cluster": 435,
    "test_demo": 345,
    "test_dag": 330,
    "test_stream_crash": 315,
    "test_bench_smoke": 310,
    "test_stack": 295,
    "test_e2e_pipeline": 280,
    "test_example_consumer_dag": 265,
    "test_stream_input_pins": 225,
    "test_dedup_multiday": 155,
    "test_connect_warmup": 150,
    "test_rules_stream": 150,
    "test_notices_crash": 145,
    "test_landing_archive": 120,
    "test_reconcile": 115,
    "test_dedup_incremental": 100,
    "test_spark_connect": 95,
    "test_function_airflow": 90,
    "test_changes_kill": 75,
    "test_dedup_publish": 75,
    "test_graceful_stop": 70,
    "test_dedup_lake": 70,
    "test_session_schema": 70,
    "test_reconcile_airflow": 70,
    "test_prometheus_slo": 60,
    "test_prometheus_given_up": 50,
    "test_registration_crash": 45,
    "test_receipt_index": 45,
    "test_pubsub_notices": 40,
    "test_airflow_partitions": 30,
    "test_changes_invariant": 30,
    "test_dedup_stream": 30,
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest files first (FILE_SECONDS); a stable sort keeps each file's tests in order."""
    items.sort(key=lambda item: -FILE_SECONDS.get(item.path.stem, 0))


_AIRFLOW_DB_CACHE = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    """One migrated Airflow database per run, copied into every test's Airflow home.

    tidemark/devstack/airflow.py: the first `airflow db migrate` leaves it in
    TIDEMARK_AIRFLOW_DB_CACHE. Made by the process that starts the run; the xdist workers inherit
    the variable, so they share it.
    """
    if "TIDEMARK_AIRFLOW_DB_CACHE" not in os.environ:
        folder = tempfile.mkdtemp(prefix="tidemark-airflow-db-")
        os.environ["TIDEMARK_AIRFLOW_DB_CACHE"] = folder
        config.stash[_AIRFLOW_DB_CACHE] = folder


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the run's migrated Airflow database (by the process that made its folder)."""
    folder = config.stash.get(_AIRFLOW_DB_CACHE, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop("TIDEMARK_AIRFLOW_DB_CACHE", None)


# pytester: tests/test_conftest.py runs small pytest sessions to show the guard at work.
pytest_plugins = ["pytester"]

# pytest's own per-phase variable: set and removed by pytest around every phase.
_NOT_GUARDED = frozenset({"PYTEST_CURRENT_TEST"})


def restore_environ(snapshot: dict[str, str]) -> dict[str, str | None]:
    """Put os.environ back to `snapshot` (only the variables that differ); returns what was undone:
    {name: the leaked value, or None for a variable that was removed}."""
    undone = {}
    for name in (set(os.environ) | set(snapshot)) - _NOT_GUARDED:
        if os.environ.get(name) == snapshot.get(name):
            continue
        undone[name] = os.environ.get(name)
        if name in snapshot:
            os.environ[name] = snapshot[name]
        else:
            del os.environ[name]
    return undone


@pytest.fixture(scope="module", autouse=True)
def environ_guard_per_module():
    """Undo at the end of a module what its module-scoped fixtures (or its tests) set."""
    snapshot = dict(os.environ)
    yield
    restore_environ(snapshot)


@pytest.fixture(autouse=True)
def environ_guard_per_test():
    """Undo after each test what the test (or its function-scoped fixtures) set or removed."""
    snapshot = dict(os.environ)
    yield
    restore_environ(snapshot)


@pytest.fixture(autouse=True)
def spark_settings_guard(request):
    """Undo after each test that uses the shared session the SQL settings set on it meanwhile.

    A stream run in this process (`tidemark stream` through cli.main, or run_stream) applies its
    own settings (streaming_job.job.stream_settings: adaptive execution off, ...) to the session
    it is given; without this, every later test of the worker would run with them.
    """
    if "spark" not in request.fixturenames:
        yield
        return
    with sql_settings_kept(request.getfixturevalue("spark")):
        yield


@contextlib.contextmanager
def sql_settings_kept(session: SparkSession) -> Iterator[None]:
    """Put back on `session` at the end the spark.sql.* settings it had at the start.

    For a module-scoped fixture that runs a stream in this process (the per-test guard above sees
    only what a test changes).
    """
    before = session.conf.getAll
    try:
        yield
    finally:
        after = session.conf.getAll
        for key in sorted(set(before) | set(after)):
            if not key.startswith("spark.sql.") or before.get(key) == after.get(key):
                continue
            if key in before:
                session.conf.set(key, before[key])
            else:
                session.conf.unset(key)


@pytest.fixture(scope="session")
def spark():
    from tidemark.base.spark import build_session

    session = build_session("tidemark-tests", "local[2]", shuffle_partitions=4)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_connect_server(tmp_path_factory):
    """One Spark Connect server per pytest worker, started by the first test that asks for it.

    Most Airflow tests whose subject is not spark-submit run the DAG's dedup as this server's client,
    as `tidemark up` does: a spark-submit per DAG run cost 35-60 s of JVM start on this 2-core box,
    most of test_e2e_pipeline's time. spark-submit stays covered by test_dag, test_rules_stream and
    test_cluster. Each DAG run opens a session of its own on the server, so tests do not share state.
    """
    from tidemark.devstack.spark_connect import SparkConnectServer

    with SparkConnectServer(str(tmp_path_factory.mktemp("spark-connect"))) as running:
        yield running


@pytest.fixture(scope="session")
def airflow_databases(tmp_path_factory):
    """One PostgreSQL per pytest worker, started by the first test that asks for it: every Airflow
    that runs a scheduler or tasks keeps its metadata there, a database each (tests/helpers.py
    AirflowDatabases says why not SQLite)."""
    from tests.helpers import AirflowDatabases
    from tidemark.devstack import postgres

    if not postgres.available():
        yield AirflowDatabases(None, "")
        return
    server = postgres.PostgresServer(str(tmp_path_factory.mktemp("postgres"))).start()
    try:
        yield AirflowDatabases(server, str(tmp_path_factory.mktemp("airflow-migration")))
    finally:
        server.remove()
