"""Issue 29: every dedup DAG run is its event date's partition in Airflow (a real Airflow 3.3.2).

The DAG is paused: the runs stay queued (no Spark), which is enough to see what Airflow recorded.
"""
from __future__ import annotations

import pytest

from tidemark import names
from tidemark.localstack.airflow import AirflowServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
DAG_ID = names.get("DAG_ID")
D7 = "2026-03-07"


@pytest.fixture(scope="module")
def airflow(tmp_path_factory):
    server = AirflowServer(str(tmp_path_factory.mktemp("airflow")),
                           env={"TIDEMARK_LAKE": str(tmp_path_factory.mktemp("lake"))})
    try:
        server.start()
        server.wait_for_dag()
        server.client().set_paused(DAG_ID, True)
        yield server
    finally:
        server.stop()


def test_a_per_date_trigger_is_that_dates_partition_and_stays_idempotent(airflow):
    client = airflow.client()
    # The conf's event_date becomes the partition key: what the function and reconcile send.
    first = client.trigger_dag_run(DAG_ID, "notice__p29", {"event_date": D7})
    assert first.created
    run = client.get_dag_run(DAG_ID, "notice__p29")
    assert run["partition_key"] == D7
    # The same run id again is still "already exists", not a second run of the date.
    again = client.trigger_dag_run(DAG_ID, "notice__p29", {"event_date": D7})
    assert not again.created
    keys = [r["partition_key"] for r in client.list_dag_runs(DAG_ID)]
    assert keys == [D7]
    # An explicit key wins over the conf (the UI's manual trigger sets it by hand).
    client.trigger_dag_run(DAG_ID, "manual__p29", {"event_date": "2026-03-08"},
                           partition_key="2026-03-08")
    assert client.get_dag_run(DAG_ID, "manual__p29")["partition_key"] == "2026-03-08"
