"""The deployable function bundle, served by functions-framework from its own folder (PYTHONPATH =
the bundle only), fed by real Pub/Sub emulator push deliveries, against a real Airflow 3.

The DAG is paused here: these tests are about runs being created exactly once (the DAG's own runs
are exercised by tests/test_dag.py and tests/test_e2e_pipeline.py), and a paused DAG keeps the
triggered runs queued instead of starting Spark.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.helpers import log_lines, wait_for
from tidemark.base import names
from tidemark.devstack import pubsub_emulator as ps
from tidemark.devstack.airflow import AirflowServer
from tidemark.devstack.function import FunctionServer
from tidemark.notices import availability_notice
from tidemark.orchestration import runs
from tidemark.orchestration.airflow_api import AirflowRejected

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DAG_ID = names.get("DAG_ID")
PROJECT = "tidemark-test"
TOPIC = "tidemark-availability"
DEAD_LETTER = names.get("DEAD_LETTER_TOPIC")
DEAD_LETTER_PULL = "dead-letter-audit"


def notice_for(receipt_ts: str, event_date: str = "2026-03-07") -> dict:
    return availability_notice.build(
        "sessions",
        [
            {
                "event_date": event_date,
                "receipt_ts": receipt_ts,
                "batch_id": 1,
                "uri": f"file:///lake/sessions/event_date={event_date}/receipt_ts={receipt_ts}",
                "rows": 1,
                "events": 2,
                "pane_kinds": ["early"],
                "watermark": f"{event_date}T20:00:00Z",
                "late": False,
            }
        ],
    )


@pytest.fixture(scope="module")
def airflow(tmp_path_factory, airflow_databases):
    server = AirflowServer(
        str(tmp_path_factory.mktemp("airflow")),
        env={"TIDEMARK_LAKE": str(tmp_path_factory.mktemp("lake"))},
        **airflow_databases.new(),
    )
    try:
        server.start()
        server.wait_for_dag()
        server.client().set_paused(DAG_ID, True)
        print(f"\nAirflow timings: {server.timings}")
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    em = ps.PubSubEmulator(str(tmp_path_factory.mktemp("pubsub"))).start()
    try:
        ps.ensure_topic(PROJECT, TOPIC, host=em.host)
        ps.ensure_topic(PROJECT, DEAD_LETTER, host=em.host)
        ps.ensure_subscription(PROJECT, DEAD_LETTER_PULL, DEAD_LETTER, host=em.host)
        yield em
    finally:
        em.stop()


@pytest.fixture(scope="module")
def function(airflow, emulator, tmp_path_factory):
    bundle = str(tmp_path_factory.mktemp("build") / "cloud_function")
    subprocess.run(
        [sys.executable, "-m", "tidemark.cli", "function-bundle", "--out", bundle],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=120,
    )
    server = FunctionServer(
        bundle,
        env={
            "AIRFLOW_BASE_URL": airflow.url,
            "AIRFLOW_AUTH_MODE": "password",
            "AIRFLOW_USERNAME": airflow.username,
            "AIRFLOW_PASSWORD": airflow.password,
            "AIRFLOW_TIMEOUT_SECONDS": "10",
            "PUBSUB_EMULATOR_HOST": emulator.host,
            "DEAD_LETTER_TOPIC": f"projects/{PROJECT}/topics/{DEAD_LETTER}",
        },
        isolated=True,
        log_path=str(tmp_path_factory.mktemp("fnlog") / "function.log"),
    ).start()
    ps.ensure_subscription(
        PROJECT, "tidemark-availability-to-function", TOPIC, push_endpoint=server.url, host=emulator.host
    )
    print(f"\nfunctions-framework (bundle) ready in {server.start_seconds}s")
    try:
        yield server
    finally:
        server.stop()


def publish(emulator, body: bytes, **attributes) -> None:
    client = ps.publisher_admin(emulator.host)
    client.publish(f"projects/{PROJECT}/topics/{TOPIC}", body, **attributes).result(timeout=30)


def test_bundle_served_alone_imports_nothing_from_the_repo(function):
    # The function process runs from the bundle with PYTHONPATH = the bundle; had it imported the
    # repo's tidemark, the bundle check would have failed before this point. Here: it is up.
    assert function.managed.alive()
    assert "Traceback" not in function.log()


def test_each_notice_becomes_exactly_one_run_despite_redelivery(airflow, emulator, function):
    body = notice_for("20260307T201500123Z")
    run_id = runs.run_id_for_notice(body)
    data = availability_notice.encode(body)
    for _ in range(3):  # the same notice published three times: three push deliveries
        publish(emulator, data, **availability_notice.attributes(body))
    client = airflow.client()
    run = wait_for(lambda: client.get_dag_run(DAG_ID, run_id), 60, "the run")
    assert run["conf"]["event_date"] == "2026-03-07"
    assert run["conf"]["notice_id"] == body["notice_id"]
    wait_for(
        lambda: (
            len(
                [
                    l
                    for l in log_lines(function)
                    if l.get("run_id") == run_id and l.get("outcome") in ("triggered", "already_exists")
                ]
            )
            == 3
        ),
        60,
        "three deliveries handled",
    )
    outcomes = sorted(
        l["outcome"]
        for l in log_lines(function)
        if l.get("run_id") == run_id and l.get("outcome") in ("triggered", "already_exists")
    )
    assert outcomes == ["already_exists", "already_exists", "triggered"]
    assert [r["dag_run_id"] for r in client.list_dag_runs(DAG_ID)].count(run_id) == 1


def test_invalid_notices_are_acknowledged_and_never_reach_airflow(airflow, emulator, function):
    client = airflow.client()
    before = {r["dag_run_id"] for r in client.list_dag_runs(DAG_ID)}
    good = notice_for("20260307T203000000Z")
    bad = [
        b"{not json",
        json.dumps({**good, "schema_version": 9}).encode(),
        json.dumps({**good, "event_date": "2026-02-30"}).encode(),
        json.dumps({**good, "event_date": "2026-03-07' OR 1=1 --"}).encode(),
    ]
    for data in bad:
        publish(emulator, data, origin="test")
    rejected = wait_for(
        lambda: (
            [l for l in log_lines(function) if l.get("outcome") == "rejected"]
            if len([l for l in log_lines(function) if l.get("outcome") == "rejected"]) >= 4
            else None
        ),
        60,
        "four rejections",
    )
    reasons = " | ".join(l["reason"] for l in rejected)
    assert "not valid JSON" in reasons
    assert "schema_version" in reasons
    assert "2026-02-30" in reasons
    assert all(l["severity"] == "ERROR" for l in rejected)
    time.sleep(15)  # acknowledged: no redelivery of a rejected message within this window
    assert len([l for l in log_lines(function) if l.get("outcome") == "rejected"]) == 4
    assert {r["dag_run_id"] for r in client.list_dag_runs(DAG_ID)} == before
    # A copy of each rejected message, untouched, with the reason, on the dead-letter topic.
    copies = ps.pull_until(PROJECT, DEAD_LETTER_PULL, lambda got: len(got) >= len(bad), host=emulator.host)
    assert sorted(m.message.data for m in copies) == sorted(bad)
    assert all(
        m.message.attributes["origin"] == "test" and m.message.attributes["tidemark_rejected_reason"] for m in copies
    )


def test_dag_param_refuses_a_bad_event_date(airflow):
    client = airflow.client()
    for bad in ("2026-13-01", "../../etc", "2026-03-07; DROP TABLE sessions"):
        with pytest.raises(AirflowRejected, match="event_date"):
            client.trigger_dag_run(DAG_ID, "manual_bad_param_check", {"event_date": bad})
    assert client.get_dag_run(DAG_ID, "manual_bad_param_check") is None


def test_airflow_down_means_redelivery_until_it_is_back(airflow, emulator, function):
    """Stop the api-server, publish, watch the emulator redeliver (measuring its backoff), restart:
    the run appears once."""
    client = airflow.client()
    body = notice_for("20260307T204500000Z")
    run_id = runs.run_id_for_notice(body)
    airflow.stop(components=("api-server",))
    try:
        publish(emulator, availability_notice.encode(body))
        retries = wait_for(
            lambda: (lambda r: r if len(r) >= 3 else None)(
                [l for l in log_lines(function) if l.get("run_id") == run_id and l.get("outcome") == "retry"]
            ),
            120,
            "three failed deliveries",
        )
    finally:
        airflow.start(components=("api-server",))
    run = wait_for(lambda: airflow.client().get_dag_run(DAG_ID, run_id), 180, "the run after restart", interval=1)
    assert run["conf"]["event_date"] == body["event_date"]
    times = [l["time"] for l in retries]
    print(f"\nfailed push deliveries at {times}")
    assert [r["dag_run_id"] for r in client.list_dag_runs(DAG_ID)].count(run_id) == 1
    secret = airflow.password
    assert secret not in function.log()
