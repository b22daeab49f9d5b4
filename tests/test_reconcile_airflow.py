"""Self-healing on the real local Airflow: a date whose dedup task fails every retry (a corrupt receipt
file: a real Spark read failure) stays stale; once the file is repaired, the tidemark_reconcile DAG
starts a tidemark_dedup run for it, a repeated `tidemark reconcile --trigger` adds no second run, and
the date then equals the batch reference.

One Airflow for the module; the reconcile DAG's schedule is off (it is triggered here, so the test
does not wait 15 minutes) and its grace period is 0 s."""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import time
from datetime import date, datetime, timezone

import pytest

from tests.helpers import cli_in_process
from tests.lakekit import SimulatedStream, expected, published
from tidemark.base import layout, names, polling
from tidemark.devstack.airflow import AirflowServer
from tidemark.orchestration import reconcile, runs
from tidemark.panes import receipts
from tidemark.store.lake import Lake

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
DAG_ID = names.get("DAG_ID")
RECONCILE_DAG = "tidemark_reconcile"
D7 = date(2026, 3, 7)


def at(hh: int, mm: int) -> datetime:
    return datetime(2026, 3, 7, hh, mm, tzinfo=timezone.utc)


EVENTS = [
    ("u1", "a1", at(9, 0), "play"),
    ("u1", "a2", at(9, 20), "play"),
    ("u1", "a3", at(10, 30), "play"),
    ("u2", "b1", at(12, 0), "play"),
    ("u2", "b1", at(12, 0), "play"),
    ("u2", "b2", at(12, 25), "play"),
]


wait_for = functools.partial(polling.wait_for, interval=2.0)  # Airflow runs take seconds: poll gently


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    path = Lake.open(tmp_path_factory.mktemp("heal") / "lake")
    written = SimulatedStream(path, 3).batch(EVENTS, mode=0.5)
    assert [p.event_date for p in written] == [D7]
    return path


@pytest.fixture(scope="module")
def airflow(tmp_path_factory, lake, spark_connect_server, airflow_databases):
    server = AirflowServer(
        str(tmp_path_factory.mktemp("airflow")),
        env={
            "TIDEMARK_LAKE": str(lake),
            "TIDEMARK_DAG_RETRIES": "1",
            "TIDEMARK_RECONCILE_INTERVAL": "off",
            "TIDEMARK_RECONCILE_GRACE": "0s",
            "AIRFLOW_CONN_SPARK_DEFAULT": spark_connect_server.airflow_connection(),
        },
        **airflow_databases.new(),
    )
    try:
        server.start()
        server.wait_for_dag()
        server.wait_for_dag(RECONCILE_DAG)
        print(f"\nAirflow timings: {server.timings}")
        yield server
    finally:
        server.stop()


def cli_reconcile(server, lake, tmp_path, capsys, *extra) -> list[dict]:
    secret = tmp_path / "airflow-password"
    secret.write_text(server.password)
    access = ["--airflow-url", server.url, "--airflow-password-file", secret]
    code, out = cli_in_process(capsys, "reconcile", "--lake", lake, "--json", "--grace", "0s", *access, *extra)
    assert code == 0
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_a_date_whose_dedup_fails_every_retry_is_healed_by_the_reconcile_dag(airflow, lake, tmp_path, capsys):
    client = airflow.client()
    (receipt_ts,) = receipts.list_receipts(lake, D7)
    folder = lake.receipt_dir(D7, receipt_ts)
    (data_file,) = [n for n in os.listdir(folder) if n.endswith(".parquet")]
    original = tmp_path / "original.parquet"
    shutil.copyfile(os.path.join(folder, data_file), original)
    with open(os.path.join(folder, data_file), "wb") as broken:  # a corrupt file: Spark cannot read it
        broken.write(b"PAR1 this is not parquet")

    notice_run = runs.notice_run_id("sessions", layout.as_event_date(D7), receipt_ts)
    client.trigger_dag_run(DAG_ID, notice_run, {"event_date": D7.isoformat()})
    assert airflow.wait_for_run(DAG_ID, notice_run) == "failed"
    tries = [ti for ti in client.task_instances(DAG_ID, notice_run) if ti["task_id"] == "dedup"]
    assert tries
    assert tries[0]["state"] == "failed"
    assert tries[0]["try_number"] == 2
    assert [(s.event_date, s.kinds) for s in reconcile.staleness(lake)] == [(D7, ["no_version"])]

    shutil.copyfile(original, os.path.join(folder, data_file))  # repaired; nothing reruns by itself
    (listed,) = cli_reconcile(airflow, lake, tmp_path, capsys)
    assert listed["event_date"] == D7.isoformat()
    assert listed["action"] == "would start (--trigger)"
    heal_run = listed["run_id"]
    assert heal_run.startswith(f"reconcile__{D7}__")
    assert heal_run.endswith("__1")
    assert client.get_dag_run(DAG_ID, heal_run) is None

    client.trigger_dag_run(RECONCILE_DAG, "manual__heal_check", {})
    assert airflow.wait_for_run(RECONCILE_DAG, "manual__heal_check", timeout=600) == "success"
    run = client.get_dag_run(DAG_ID, heal_run)  # the DAG named it as the command did
    assert run is not None
    assert run["conf"]["event_date"] == D7.isoformat()
    assert run["partition_key"] == D7.isoformat()  # the reconcile DAG's REST trigger: the date's partition
    # Reconciling again while that run is queued, running or done adds no run.
    for item in cli_reconcile(airflow, lake, tmp_path, capsys, "--trigger"):
        assert item["run_id"] == heal_run
        assert item["action"] == "run in flight"
    assert airflow.wait_for_run(DAG_ID, heal_run) == "success"

    assert published(lake, D7) == expected(EVENTS, D7)
    assert reconcile.staleness(lake) == []
    assert cli_reconcile(airflow, lake, tmp_path, capsys, "--trigger") == []
    ours = [r["dag_run_id"] for r in client.list_dag_runs(DAG_ID)]
    assert sorted(ours) == sorted([notice_run, heal_run])


def test_a_wait_on_a_run_ends_at_once_when_the_scheduler_dies(airflow):
    """With the scheduler gone a queued run never starts: the wait says so with the scheduler's log
    instead of waiting out its timeout. (Last in the module: it kills the module's scheduler.)"""
    client = airflow.client()
    os.kill(airflow.managed["scheduler"].pid, signal.SIGKILL)
    client.trigger_dag_run(DAG_ID, "after_the_scheduler", {"event_date": D7.isoformat()})
    began = time.monotonic()
    with pytest.raises(RuntimeError, match=r"scheduler exited; see .*scheduler"):
        airflow.wait_for_run(DAG_ID, "after_the_scheduler", timeout=600)
    assert time.monotonic() - began < 60
    assert client.get_dag_run(DAG_ID, "after_the_scheduler")["state"] == "queued"
