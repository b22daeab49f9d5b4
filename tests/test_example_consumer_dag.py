"""The corrected topic and the example consumer DAG on the real local stack pieces: Airflow 3
(api-server, scheduler, dag-processor), spark-submit dedup runs, the Pub/Sub emulator.

A date gets its first version, then a late correction: each published version produces exactly one
corrected notice on the emulator, the example DAG runs for that date through the per-date asset
event (no cron, no manual trigger), and its output equals the metrics of the batch reference's
sessions of every event received so far. Rerunning it from the UI for the date, and clearing its
task, write the same metrics again."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from tests.helpers import dag_run_finished as finished
from tests.helpers import wait_for
from tests.lakekit import GAP, SimulatedStream
from tidemark import batch_reference, corrected_notice, names, session_metrics
from tidemark.lake import Lake
from tidemark.localstack.airflow import AirflowServer
from tidemark.localstack.pubsub_emulator import PubSubEmulator, ensure_subscription, ensure_topic, pull_all, pull_until
from tidemark.notices import corrected

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
PROJECT = names.get("PROJECT")
DAG_ID = names.get("DAG_ID")
CONSUMER = "example_session_metrics"
D7 = "2026-03-07"


def at(day: int, hh: int, mm: int) -> datetime:
    return datetime(2026, 3, day, hh, mm, tzinfo=timezone.utc)


ON_TIME = [
    ("u1", "a1", at(7, 9, 0), "play"),
    ("u1", "a2", at(7, 9, 20), "play"),
    ("u1", "a3", at(7, 10, 30), "play"),
    ("u2", "b1", at(7, 12, 0), "play"),
    ("u2", "b1", at(7, 12, 0), "play"),
    ("u2", "b2", at(7, 12, 25), "play"),
]
# Days later: u1's two sessions bridged, a new user, and a session that crosses midnight.
LATE = [
    ("u1", "a4", at(7, 9, 50), "seek"),
    ("u1", "a5", at(7, 10, 10), "seek"),
    ("u3", "c1", at(7, 23, 50), "play"),
    ("u3", "c2", at(8, 0, 5), "play"),
    ("u2", "b2", at(7, 12, 25), "play"),
]


def reference_metrics(events: list[tuple]) -> dict:
    """Metrics of the batch reference's sessions of D7 (tidemark/batch_reference.py)."""
    sessions = [
        s for s in batch_reference.sessionize([(u, e, ts) for u, e, ts, _ in events], GAP) if s.event_date == D7
    ]
    row = session_metrics.from_sessions(D7, None, [(s.user_id, s.session_start, s.session_end) for s in sessions])
    return {k: v for k, v in row.items() if k != "version"}


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    emu = PubSubEmulator(str(tmp_path_factory.mktemp("pubsub"))).start()
    ensure_topic(PROJECT, names.get("CORRECTED_TOPIC"), host=emu.host)
    ensure_subscription(PROJECT, "corrected-all", names.get("CORRECTED_TOPIC"), host=emu.host)
    yield emu
    emu.stop()


@pytest.fixture(scope="module")
def stack(tmp_path_factory, emulator):
    home = tmp_path_factory.mktemp("consumer")
    lake, out = Lake.open(home / "lake"), str(home / "metrics")
    stream = SimulatedStream(lake, 5)
    stream.batch(ON_TIME, mode=0.5)
    server = AirflowServer(
        str(home / "airflow"),
        env={
            "TIDEMARK_LAKE": str(lake),
            "TIDEMARK_DAG_RETRIES": "0",
            "TIDEMARK_RECONCILE_INTERVAL": "off",
            "PUBSUB_EMULATOR_HOST": emulator.host,
            "TIDEMARK_SESSION_METRICS_ROOT": out,
            "TIDEMARK_CORRECTED_TOPIC_PATH": corrected.default_topic(PROJECT),
        },
    )
    try:
        server.start()
        server.wait_for_dag()
        server.wait_for_dag(CONSUMER)
        yield {"server": server, "client": server.client(), "lake": lake, "out": out, "stream": stream}
    finally:
        server.stop()


def consumer_runs(client) -> list[dict]:
    return sorted(client.list_dag_runs(CONSUMER), key=lambda r: r.get("run_after") or r["dag_run_id"])


def next_consumer_run(client, seen: set[str]) -> str:
    """The id of the consumer run an asset event started after `seen`, once it succeeded."""
    run = wait_for(
        lambda: next((r for r in consumer_runs(client) if r["dag_run_id"] not in seen), None),
        600,
        "an asset-triggered run of the consumer DAG",
    )
    assert run["run_type"] == "asset_triggered", run
    assert finished(client, CONSUMER, run["dag_run_id"]) == "success"
    return run["dag_run_id"]


def corrected_messages(host: str, versions: set[str]) -> list[dict]:
    got = pull_until(
        PROJECT,
        "corrected-all",
        host=host,
        done=lambda ms: versions <= {corrected_notice.decode(m.message.data)["version"] for m in ms},
    )
    got += pull_all(PROJECT, "corrected-all", host=host)  # a duplicate would show here
    return [corrected_notice.decode(m.message.data) for m in got]


def metrics_without_version(out: str) -> dict:
    return {k: v for k, v in session_metrics.read(out, D7).items() if k != "version"}


def test_late_correction_notifies_once_and_the_consumer_rebuilds_the_date_through_the_asset_event(stack, emulator):
    client, lake, out = stack["client"], stack["lake"], stack["out"]

    # First version of D7.
    assert client.trigger_dag_run(DAG_ID, "first", {"event_date": D7})
    assert finished(client, DAG_ID, "first") == "success"
    first_consumer = next_consumer_run(client, set())
    assert metrics_without_version(out) == reference_metrics(ON_TIME)
    v1 = session_metrics.read(out, D7)["version"]

    # A late correction of the same date, days later.
    stack["stream"].batch(LATE, mode=0.5)
    assert client.trigger_dag_run(DAG_ID, "late", {"event_date": D7})
    assert finished(client, DAG_ID, "late") == "success"
    second_consumer = next_consumer_run(client, {first_consumer})
    v2 = session_metrics.read(out, D7)["version"]
    assert v2 > v1
    expected = reference_metrics(ON_TIME + LATE)
    assert metrics_without_version(out) == expected
    assert expected["crossed_midnight"] == 1 and expected["users"] == 3

    # Exactly one corrected notice per published version, and nothing owed.
    notices = corrected_messages(emulator.host, {v1, v2})
    assert sorted((n["version"], n["change"]["kind"]) for n in notices) == [(v1, "first"), (v2, "changed")]
    assert notices[-1]["rows"] == expected["sessions"] or notices[0]["rows"] == expected["sessions"]
    assert corrected.outbox(lake).owed() == []

    # Rerun from the UI for the date, and a cleared task: the same metrics, nothing else changes.
    before = session_metrics.read(out, D7)
    assert client.trigger_dag_run(CONSUMER, "manual_rerun", {"event_date": D7})
    assert finished(client, CONSUMER, "manual_rerun") == "success"
    assert session_metrics.read(out, D7) == before
    tries = {ti["task_id"]: ti["try_number"] for ti in client.task_instances(CONSUMER, second_consumer)}
    client._request(
        "POST",
        f"/api/v2/dags/{CONSUMER}/clearTaskInstances",
        json={"dry_run": False, "dag_run_id": second_consumer, "only_failed": False, "reset_dag_runs": True},
    )
    wait_for(
        lambda: all(
            ti["try_number"] > tries[ti["task_id"]] and ti["state"] == "success"
            for ti in client.task_instances(CONSUMER, second_consumer)
        ),
        600,
        "the cleared tasks to run again",
    )
    assert session_metrics.read(out, D7) == before
    assert pull_all(PROJECT, "corrected-all", host=emulator.host) == []  # the consumer sends nothing
