"""The warm Spark: a real Spark Connect server (tidemark/devstack/spark_connect.py, the one in the
pyspark package), the pytest worker's. tidemark.deduplication.dedup runs unchanged as its client and publishes
the batch reference, two dates at once each in its own session; and the tidemark_dedup DAG, on a
real Airflow whose `spark_default` connection is of type spark_connect, runs its dedup task as a
client of that server (no spark-submit), then skips Spark for a run with nothing new."""

from __future__ import annotations

import os
import random
from concurrent.futures import ThreadPoolExecutor
from datetime import date

import pytest

from tests.lakekit import SimulatedStream, expected, make_events, published
from tidemark.base import names
from tidemark.base.logs import read_log_lines
from tidemark.devstack.spark_connect import SparkConnectServer
from tidemark.store.lake import Lake

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
DAG_ID = names.get("DAG_ID")


def write_lake(lake: Lake, seed: int) -> tuple[list[tuple], set[date]]:
    """A lake of several micro-batches (late and repeated deliveries) over three days."""
    rng = random.Random(seed)
    events = make_events(rng, users=4, days=3)
    stream = SimulatedStream(lake, seed)
    dates: set[date] = set()
    deliveries = events + rng.sample(events, len(events) // 5)  # duplicates
    rng.shuffle(deliveries)
    for part in range(4):
        dates |= {p.event_date for p in stream.batch(deliveries[part::4])}
    return events, dates


def assert_side_by_side_equal_the_reference(dedup, lake: Lake, events: list[tuple], dates: list[date]) -> None:
    """`dedup(event_date)` of every date at once, one thread each: each published, equal to the reference."""
    with ThreadPoolExecutor(len(dates)) as pool:
        results = dict(zip(dates, pool.map(dedup, dates), strict=True))  # a failed dedup raises here
    assert all(r.published for r in results.values()), results
    for event_date in dates:
        assert published(lake, event_date) == expected(events, event_date)


# Creating a Connect session makes pyspark set SPARK_CONNECT_MODE_ENABLED in os.environ for the whole
# process; left set, the worker's later tests get Connect behaviour and the `tidemark stream`s they
# start fail with CONNECT_URL_NOT_SET. tests/conftest.py's environment guard undoes it after each test.


@pytest.fixture(scope="module")
def server(spark_connect_server) -> SparkConnectServer:
    """The worker's Spark Connect server (tests/conftest.py), which other Airflow tests share."""
    return spark_connect_server


def test_dedup_over_spark_connect_equals_the_reference_two_dates_at_once(server, tmp_path):
    from tidemark.base.spark import connect_session
    from tidemark.deduplication.dedup import run_dedup

    lake = Lake.open(tmp_path / "lake")
    events, dates = write_lake(lake, 5)
    first, second = sorted(dates)[:2]

    def run(event_date: date):
        spark = connect_session(server.url, f"test-{event_date}")
        try:
            return run_dedup(lake, event_date, spark=spark)
        finally:
            spark.stop()

    assert_side_by_side_equal_the_reference(run, lake, events, [first, second])
    for event_date in sorted(dates)[2:]:  # the rest one after another, on one session each
        spark = connect_session(server.url)
        try:
            run_dedup(lake, event_date, spark=spark)
        finally:
            spark.stop()
        assert published(lake, event_date) == expected(events, event_date)


def test_the_dag_runs_its_dedup_as_a_spark_connect_client(server, tmp_path, airflow_databases):
    from tidemark.devstack.airflow import AirflowServer

    lake = Lake.open(tmp_path / "lake")
    events, dates = write_lake(lake, 9)
    event_date = sorted(dates)[0]
    airflow = AirflowServer(
        str(tmp_path / "airflow"),
        env={
            "TIDEMARK_LAKE": str(lake),
            "TIDEMARK_DAG_RETRIES": "0",
            "TIDEMARK_RECONCILE_INTERVAL": "off",
            "AIRFLOW_CONN_SPARK_DEFAULT": server.airflow_connection(),
        },
        **airflow_databases.new(),
    )
    try:
        airflow.start()
        airflow.wait_for_dag()
        client = airflow.client()
        client.trigger_dag_run(DAG_ID, "connect_first", {"event_date": event_date.isoformat()})
        assert airflow.wait_for_run(DAG_ID, "connect_first") == "success"
        states = {ti["task_id"]: ti["state"] for ti in client.task_instances(DAG_ID, "connect_first")}
        assert states["dedup"] == "success", states
        assert states["publish"] == "success", states
        log = dedup_log(airflow, "connect_first")
        assert "as a Spark Connect client of sc://127.0.0.1:" in log
        assert "spark-submit" not in log
        # TIDEMARK_DEDUP_CONCURRENCY unset (no limit): the dedup asked Airflow whether a run of its
        # date queued before it was deduplicating (tidemark/orchestration/date_turns.py), and none was.
        assert "cannot ask Airflow" not in log
        assert "is deduplicating this date" not in log
        # tidemark's lines are recorded at their own level (not as the ERRORs of a task's stderr)
        levels = {record.get("level") for record in read_log_lines(log) if "dedup published" in record.get("event", "")}
        assert levels == {"info"}, levels
        assert published(lake, event_date) == expected(events, event_date)

        # Nothing new since: no Spark at all, the dedup shows as skipped.
        client.trigger_dag_run(DAG_ID, "connect_again", {"event_date": event_date.isoformat()})
        assert airflow.wait_for_run(DAG_ID, "connect_again") == "success"
        states = {ti["task_id"]: ti["state"] for ti in client.task_instances(DAG_ID, "connect_again")}
        assert states["dedup"] == "skipped", states
        assert published(lake, event_date) == expected(events, event_date)
    finally:
        airflow.stop()


def dedup_log(airflow, run_id: str) -> str:
    root = os.path.join(airflow.home, "logs", f"dag_id={DAG_ID}", f"run_id={run_id}", "task_id=dedup")
    texts = []
    for folder, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(folder, name), errors="replace") as handle:
                texts.append(handle.read())
    return "\n".join(texts)
