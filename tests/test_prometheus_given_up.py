"""TidemarkReconcileGaveUp on a real Prometheus, from a real Airflow: a date whose dedup always
fails (a corrupt receipt file: a real Spark read failure) is retried by reconciliation until its
attempts are spent; the exporter, asking Airflow for reconcile's runs, reports it given up, the
alert fires and `tidemark health` exits 4 naming it; once the file is repaired and the date
deduplicated, the alert clears and `tidemark health` exits 0."""

from __future__ import annotations

import os
import shutil
import sys
from datetime import date, datetime, timezone

import pytest

from tests.helpers import cli_in_process
from tests.lakekit import SimulatedStream
from tidemark.base import names
from tidemark.base.polling import wait_for
from tidemark.devstack import process
from tidemark.devstack.airflow import AirflowServer
from tidemark.devstack.prometheus import PrometheusServer, binary
from tidemark.orchestration import reconcile
from tidemark.panes import receipts
from tidemark.store.lake import Lake

pytestmark = [
    pytest.mark.slow,
    pytest.mark.spark,
    pytest.mark.timeout(1800),
    pytest.mark.skipif(binary() is None, reason="prometheus not installed (apt-get install prometheus)"),
]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
D7 = date(2026, 3, 7)


def at(hh: int, mm: int) -> datetime:
    return datetime(2026, 3, 7, hh, mm, tzinfo=timezone.utc)


EVENTS = [("u1", "a1", at(9, 0), "play"), ("u1", "a2", at(9, 20), "play"), ("u2", "b1", at(12, 0), "play")]


def _cli(*args):
    return [sys.executable, "-m", "tidemark.cli", *args]


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    path = Lake.open(tmp_path_factory.mktemp("gaveup") / "lake")
    assert [p.event_date for p in SimulatedStream(path, 3).batch(EVENTS, mode=0.5)] == [D7]
    return path


@pytest.fixture(scope="module")
def airflow(tmp_path_factory, lake, spark_connect_server, airflow_databases):
    server = AirflowServer(
        str(tmp_path_factory.mktemp("airflow")),
        env={
            "TIDEMARK_LAKE": str(lake),
            "TIDEMARK_DAG_RETRIES": "0",
            "TIDEMARK_RECONCILE_INTERVAL": "off",
            "TIDEMARK_RECONCILE_GRACE": "0s",
            "AIRFLOW_CONN_SPARK_DEFAULT": spark_connect_server.airflow_connection(),
        },
        **airflow_databases.new(),
    )
    try:
        server.start()
        server.wait_for_dag()
        yield server
    finally:
        server.stop()


def test_a_date_reconciliation_gave_up_on_fires_and_clears(airflow, lake, tmp_path, spark, capsys):
    from tidemark.deduplication.dedup import run_dedup

    secret = tmp_path / "airflow-password"
    secret.write_text(airflow.password)
    access = ["--airflow-url", airflow.url, "--airflow-password-file", str(secret), "--max-attempts", "1"]
    (receipt_ts,) = receipts.list_receipts(lake, D7)
    folder = lake.receipt_dir(D7, receipt_ts)
    (data_file,) = [n for n in os.listdir(folder) if n.endswith(".parquet")]
    shutil.copyfile(os.path.join(folder, data_file), tmp_path / "original.parquet")
    with open(os.path.join(folder, data_file), "wb") as broken:  # a dedup that always fails
        broken.write(b"PAR1 this is not parquet")

    # Reconciliation's one allowed attempt, and its failure.
    code, _ = cli_in_process(capsys, "reconcile", "--lake", lake, "--grace", "0s", "--trigger", "--json", *access)
    assert code == 0
    stale = reconcile.staleness(lake)
    run_id = f"reconcile__{D7}__{stale[0].fingerprint}__1"
    assert airflow.wait_for_run(names.get("DAG_ID"), run_id, timeout=600) == "failed"

    port = process.free_port()
    exporter = process.start(
        "exporter",
        _cli("exporter", "--lake", str(lake), "--port", str(port), "--refresh", "1", "--correction", "1000d", *access),
        str(tmp_path / "exporter.log"),
        cwd=ROOT,
        env={"PYTHONPATH": ROOT},
    )
    try:
        process.wait_until(lambda: process.port_open(port), 60, "the exporter", exporter)
        with PrometheusServer(
            str(tmp_path / "prometheus"),
            targets={"tidemark-exporter": [f"127.0.0.1:{port}"]},
            scrape_interval="1s",
            evaluation_interval="1s",
        ) as prometheus:
            wait_for(lambda: prometheus.firing("TidemarkReconcileGaveUp"), 90, "the given-up alert", 1.0)
            assert prometheus.firing("TidemarkReconcileGaveUp")[0]["annotations"]["summary"].startswith(
                "reconciliation gave up on 1 event date(s)"
            )
            assert not prometheus.firing("TidemarkEventDateStale")  # within its (here huge) objective

            code, out = cli_in_process(capsys, "health", "--lake", lake, "--correction", "1000d", *access)
            assert code == 4, out
            assert out.strip() == f"BREACHED given_up: reconciliation gave up on 1 event date(s): {D7}"

            # A person repairs the file and deduplicates the date.
            shutil.copyfile(tmp_path / "original.parquet", os.path.join(folder, data_file))
            run_dedup(lake, D7, spark=spark)
            wait_for(lambda: not prometheus.firing("TidemarkReconcileGaveUp"), 90, "the alert to clear", 1.0)
            assert prometheus.query("tidemark_reconcile_given_up")[0]["value"][1] == "0"
    finally:
        process.stop(exporter)
    code, out = cli_in_process(capsys, "health", "--lake", lake, "--correction", "1000d", *access)
    assert code == 0, out
