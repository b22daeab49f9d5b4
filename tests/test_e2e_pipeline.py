"""End to end on loopback, every piece real: the stream (--notify-topic) -> Pub/Sub emulator ->
push subscription -> the function bundle under functions-framework -> Airflow 3 REST -> the
tidemark_dedup DAG (its dedup a client of a Spark Connect server, as on `tidemark up`) ->
deduplicated partitions.

The stream runs in the test's process, on the shared SparkSession. Checked: every notice the stream
published led to exactly one DAG run; re-publishing a notice three times added none; Airflow
stopped while notices were being published still ended with every run done (the push subscription
redelivers; the failed deliveries are printed to show the emulator's retry pace); and the published
partitions equal the batch reference (tidemark/demo/batch_reference.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from tests.helpers import generate_cli, lake_session_set, log_lines, reference_session_set, wait_for
from tidemark import cli
from tidemark.base import names
from tidemark.base.session_rules import SessionRules
from tidemark.devstack import pubsub_emulator as ps
from tidemark.devstack.airflow import AirflowServer
from tidemark.devstack.function import FunctionServer
from tidemark.notices import availability_notice
from tidemark.notices.outbox import Outbox
from tidemark.orchestration import runs
from tidemark.panes import receipts
from tidemark.store.lake import Lake

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2700)]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DAG_ID = names.get("DAG_ID")
PROJECT = "tidemark-e2e"
TOPIC = names.get("AVAILABILITY_TOPIC")
AUDIT = "e2e-audit"  # a pull subscription: every notice the stream published
OUTAGE_SECONDS = 45
TERMINAL = {"success", "failed"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory, spark_connect_server, airflow_databases):
    base = tmp_path_factory.mktemp("e2e")
    lake = Lake.open(base / "lake")
    started = []
    try:
        emulator = ps.PubSubEmulator(str(base / "pubsub")).start()
        started.append(emulator)
        ps.ensure_topic(PROJECT, TOPIC, host=emulator.host)
        ps.ensure_subscription(PROJECT, AUDIT, TOPIC, host=emulator.host)

        airflow = AirflowServer(
            str(base / "airflow"),
            env={
                "TIDEMARK_LAKE": str(lake),
                "TIDEMARK_DAG_RETRIES": "2",
                "TIDEMARK_DAG_MAX_ACTIVE_RUNS": "2",
                "AIRFLOW_CONN_SPARK_DEFAULT": spark_connect_server.airflow_connection(),
            },
            **airflow_databases.new(),
        )
        started.append(airflow)
        airflow.start()
        airflow.wait_for_dag()
        print(f"\nAirflow: {airflow.timings}")

        bundle = str(base / "build" / "cloud_function")
        subprocess.run(
            [sys.executable, "-m", "tidemark.cli", "function-bundle", "--out", bundle],
            cwd=ROOT,
            check=True,
            capture_output=True,
            timeout=120,
        )
        function = FunctionServer(
            bundle,
            isolated=True,
            log_path=str(base / "function.log"),
            env={
                "AIRFLOW_BASE_URL": airflow.url,
                "AIRFLOW_USERNAME": airflow.username,
                "AIRFLOW_PASSWORD": airflow.password,
                "AIRFLOW_TIMEOUT_SECONDS": "10",
            },
        ).start()
        started.append(function)
        ps.ensure_subscription(
            PROJECT, names.get("FUNCTION_SUBSCRIPTION"), TOPIC, push_endpoint=function.url, host=emulator.host
        )
        yield {"base": base, "lake": lake, "emulator": emulator, "airflow": airflow, "function": function}
    finally:
        for server in reversed(started):
            server.stop()


def stream(stack, landing: str) -> None:
    """`tidemark stream --available-now`, publishing to the emulator: in this process, on the shared
    SparkSession (a JVM of its own cost 15-45 s more under load); tests/conftest.py puts back the
    SQL settings the stream sets on it."""
    argv = ["stream", "--landing", landing, "--lake", stack["lake"], "--checkpoint", stack["base"] / "checkpoint"]
    argv += ["--available-now", "--notify-topic", f"projects/{PROJECT}/topics/{TOPIC}", "--max-files-per-trigger", "2"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PUBSUB_EMULATOR_HOST", stack["emulator"].host)
        assert cli.main(argv) == 0


def audit(stack, seen: dict) -> dict:
    """Pull the audit subscription into {notice_id: notice} until every notice the stream's
    outbox records as sent is there (one pull may return only part of what is waiting)."""
    sent = {e["notice"]["notice_id"] for e in Outbox(stack["lake"]).sent()} - set(seen)
    got = ps.pull_until(
        PROJECT,
        AUDIT,
        host=stack["emulator"].host,
        done=lambda got: sent <= {availability_notice.decode(m.message.data)["notice_id"] for m in got},
    )
    for received in got:
        body = availability_notice.decode(received.message.data)
        seen[body["notice_id"]] = body
    return seen


def wait_all_done(airflow: AirflowServer, expected_run_ids: set, timeout: float) -> list[dict]:
    """Until every expected run exists and every run is terminal, twice in a row 3 s apart
    (a finishing run may still add an affected-date run: it does so before it ends, so the second
    look only guards against a run created between the listing and its states). An Airflow process
    that exits ends the wait with its log's end."""
    client = airflow.client()
    deadline = time.monotonic() + timeout
    previous = None
    while time.monotonic() < deadline:
        airflow.check_running()
        try:
            all_runs = client.list_dag_runs(DAG_ID)
        except Exception:  # noqa: BLE001 - Airflow restarting
            all_runs = None
        if all_runs is not None:
            ids = {r["dag_run_id"] for r in all_runs}
            done = expected_run_ids <= ids and all(r["state"] in TERMINAL for r in all_runs)
            snapshot = sorted((r["dag_run_id"], r["state"]) for r in all_runs)
            if done and snapshot == previous:
                return all_runs
            previous = snapshot if done else None
        time.sleep(3)
    states = {r["dag_run_id"]: r["state"] for r in (all_runs or [])}
    raise TimeoutError(f"runs not all done after {timeout:.0f}s: expected {sorted(expected_run_ids)}, have {states}")


def test_every_notice_is_one_run_through_redelivery_and_outage_and_matches_the_reference(stack, tmp_path, spark):
    airflow, function, emulator = stack["airflow"], stack["function"], stack["emulator"]
    generated, landing = str(tmp_path / "generated"), str(tmp_path / "landing")
    generate_cli(
        generated,
        "--events",
        "1200",
        "--users",
        "20",
        "--days",
        "2",
        "--start",
        "2026-03-06",
        "--files",
        "8",
        "--seed",
        "5",
    )
    files = sorted(f for f in os.listdir(generated) if f.endswith(".jsonl"))
    os.makedirs(landing)

    # Phase 1: the first five files; Airflow up.
    for name in files[:5]:
        shutil.copy2(os.path.join(generated, name), os.path.join(landing, name))
    stream(stack, landing)
    seen = audit(stack, {})
    assert seen, "the stream published no notice"
    phase1 = {runs.run_id_for_notice(n) for n in seen.values()}
    wait_all_done(airflow, phase1, 1200)

    # Duplicates: one notice published three more times adds no run.
    some = next(iter(seen.values()))
    publisher = ps.publisher_admin(emulator.host)
    for _ in range(3):
        publisher.publish(
            f"projects/{PROJECT}/topics/{TOPIC}",
            availability_notice.encode(some),
            **availability_notice.attributes(some),
        ).result(timeout=30)
    dup_run = runs.run_id_for_notice(some)
    wait_for(
        lambda: (
            len([l for l in log_lines(function) if l.get("run_id") == dup_run and l.get("outcome") == "already_exists"])
            >= 3
        ),
        120,
        "three duplicate deliveries",
    )
    # (the three copies carry a notice_id already seen: later audits fold them in)

    # Phase 2: Airflow down while the stream publishes the rest; restarted after the outage.
    airflow.stop()
    outage_started = time.monotonic()
    try:
        for name in files[5:]:
            shutil.copy2(os.path.join(generated, name), os.path.join(landing, name))
        stream(stack, landing)
        before = set(seen)
        audit(stack, seen)
        phase2_ids = set(seen) - before
        assert phase2_ids, "phase 2 published no notice"
        phase2 = {runs.run_id_for_notice(seen[i]) for i in phase2_ids}
        wait_for(
            lambda: any(l.get("outcome") == "retry" and l.get("run_id") in phase2 for l in log_lines(function)),
            120,
            "a failed delivery during the outage",
        )
        time.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - outage_started)))
    finally:
        airflow.start()
    outage = time.monotonic() - outage_started
    failed = [l for l in log_lines(function) if l.get("outcome") == "retry"]
    by_run: dict[str, list[str]] = {}
    for line in failed:
        by_run.setdefault(line["run_id"], []).append(line["time"])
    print(
        f"\nAirflow down {outage:.0f}s; failed push deliveries per run: "
        f"{ {k: len(v) for k, v in by_run.items()} }; e.g. {next(iter(by_run.values()))}"
    )

    expected = {runs.run_id_for_notice(n) for n in seen.values()}
    final = wait_all_done(airflow, expected, 1500)

    # Exactly one run per notice (several notices may share a run id only if they share their
    # newest receipt partition, which the stream never does), all successful.
    notice_runs = [r for r in final if r["dag_run_id"].startswith(runs.NOTICE_PREFIX + "__")]
    assert sorted(r["dag_run_id"] for r in notice_runs) == sorted(expected)
    assert len(expected) == len(seen)
    assert {r["dag_run_id"]: r["state"] for r in final} == {r["dag_run_id"]: "success" for r in final}
    for r in final:
        if r["dag_run_id"].startswith(runs.AFFECTED_PREFIX):
            assert r["conf"]["event_date"] in r["dag_run_id"]

    # Every date with data equals the batch reference of everything landed.
    dates = receipts.list_event_dates(stack["lake"])
    assert dates
    for event_date in dates:
        assert lake_session_set(stack["lake"], event_date, with_count=True) == reference_session_set(
            landing, event_date, SessionRules().gap, with_count=True
        ), event_date
    assert airflow.password not in function.log()
