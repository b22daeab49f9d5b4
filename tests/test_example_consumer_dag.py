"""The corrected topic, the asset events and the example consumer DAGs on the real local stack
pieces: Airflow 3.3.2 (api-server, scheduler, dag-processor), dedup runs as clients of the worker's
Spark Connect server (as on `tidemark up`), the Pub/Sub emulator. One Airflow for the module (each
test continues on the lake the previous ones left).

A date gets its first version, then a late correction: each published version produces exactly one
corrected notice on the emulator and one asset event of tidemark.sessions_dedup with the date as
partition_key; the example DAG (PartitionedAssetTimetable, identity mapping) runs for that date, its
run's partition_key the date, and its output equals the metrics of the batch reference's sessions of
every event received so far. Rerunning it from the UI for the date, clearing its task, and clearing
the date's partition from the CLI write the same metrics again. A version committed by `tidemark
dedup` by hand reaches the consumer exactly once (the reconcile DAG drains the outbox); three dates
corrected while a consumer run is active each get their run (Airflow issue 56050)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import datetime, timezone

import pytest

from tests.helpers import wait_for
from tests.lakekit import GAP, RULES, SimulatedStream
from tidemark import cli
from tidemark.base import layout, names
from tidemark.base.layout import as_event_date
from tidemark.demo import batch_reference
from tidemark.devstack.airflow import AirflowServer
from tidemark.devstack.pubsub_emulator import PubSubEmulator, ensure_subscription, ensure_topic, pull_all, pull_until
from tidemark.notices import asset_events, corrected_delivery, corrected_notice
from tidemark.products import session_metrics
from tidemark.store.lake import Lake

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
PROJECT = names.get("PROJECT")
DAG_ID = names.get("DAG_ID")
CONSUMER = "example_session_metrics"
WEEKLY = "example_weekly_session_metrics"
RECONCILE = "tidemark_reconcile"
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


def reference_metrics(events: list[tuple], event_date: str = D7) -> dict:
    """Metrics of the batch reference's sessions of a date (tidemark/demo/batch_reference.py)."""
    sessions = [
        s
        for s in batch_reference.sessionize([(u, e, ts) for u, e, ts, _ in events], GAP)
        if s.event_date == as_event_date(event_date)
    ]
    row = session_metrics.from_sessions(
        as_event_date(event_date), None, [(s.user_id, s.session_start, s.session_end) for s in sessions]
    )
    return {k: v for k, v in row.items() if k != "version"}


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    emu = PubSubEmulator(str(tmp_path_factory.mktemp("pubsub"))).start()
    ensure_topic(PROJECT, names.get("CORRECTED_TOPIC"), host=emu.host)
    ensure_subscription(PROJECT, "corrected-all", names.get("CORRECTED_TOPIC"), host=emu.host)
    yield emu
    emu.stop()


@pytest.fixture(scope="module")
def stack(tmp_path_factory, emulator, airflow_databases, spark_connect_server):
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
            "TIDEMARK_CORRECTED_TOPIC_PATH": corrected_delivery.default_topic(PROJECT),
            "AIRFLOW_CONN_SPARK_DEFAULT": spark_connect_server.airflow_connection(),
        },
        **airflow_databases.new(),
    )
    try:
        server.start()
        server.wait_for_dag()
        server.wait_for_dag(CONSUMER)
        server.wait_for_dag(WEEKLY)
        yield {
            "server": server,
            "client": server.client(),
            "lake": lake,
            "out": out,
            "stream": stream,
            "weekly_out": os.path.join(lake, "_products", "weekly_session_metrics"),
        }
    finally:
        server.stop()


def consumer_runs(client) -> list[dict]:
    return sorted(client.list_dag_runs(CONSUMER), key=lambda r: r.get("run_after") or r["dag_run_id"])


def next_consumer_run(server: AirflowServer, seen: set[str], partition_key: str = D7) -> str:
    """The id of the consumer run of `partition_key` an asset event started after `seen`, once it
    succeeded (a neighbour date's version, D7's late events reach 03-08, makes runs of its own)."""
    client = server.client()
    run = wait_for(
        lambda: next(
            (
                r
                for r in consumer_runs(client)
                if r["dag_run_id"] not in seen and r.get("partition_key") == partition_key
            ),
            None,
        ),
        600,
        "an asset-triggered run of the consumer DAG",
    )
    assert run["run_type"] == "asset_triggered", run
    assert server.wait_for_run(CONSUMER, run["dag_run_id"]) == "success"
    return run["dag_run_id"]


def events_of(client) -> list[dict]:
    """The asset events of tidemark.sessions_dedup so far, once Airflow can list them (not while a
    run they created is queued: AirflowClient.asset_events_once_listable)."""
    return client.asset_events_once_listable(client.asset_id(asset_events.ASSET_NAME), timeout=600, interval=0.5)


def published(received: list, seen: dict[str, dict]) -> list[dict]:
    """The corrected notices of `received` messages not in `seen` ({message_id: notice}, updated).

    Each published message counts once: the emulator redelivers a message it leased to a pull whose
    client gave up waiting (tidemark/devstack/pubsub_emulator.py pull), with the same message_id;
    a second publish of a notice gets a new message_id, so it still counts twice."""
    new = {}
    for m in received:
        if m.message.message_id not in seen:
            new[m.message.message_id] = corrected_notice.decode(m.message.data)
    seen.update(new)
    return list(new.values())


def corrected_messages(host: str, versions: set[str], seen: dict[str, dict]) -> list[dict]:
    got = pull_until(
        PROJECT,
        "corrected-all",
        host=host,
        done=lambda ms: versions <= {corrected_notice.decode(m.message.data)["version"] for m in ms},
    )
    got += pull_all(PROJECT, "corrected-all", host=host)  # a second publish would show here
    return published(got, seen)


def metrics_without_version(out: str) -> dict:
    return {k: v for k, v in session_metrics.read(out, as_event_date(D7)).items() if k != "version"}


def test_late_correction_notifies_once_and_the_consumer_rebuilds_the_date_through_the_asset_event(stack, emulator):
    server, client, lake, out = stack["server"], stack["client"], stack["lake"], stack["out"]

    # First version of D7; the notice's run (the function's trigger) is the date's partition.
    assert client.trigger_dag_run(DAG_ID, "first", {"event_date": D7})
    assert client.get_dag_run(DAG_ID, "first")["partition_key"] == D7
    assert server.wait_for_run(DAG_ID, "first") == "success"
    first_consumer = next_consumer_run(server, set())
    assert metrics_without_version(out) == reference_metrics(ON_TIME)
    v1 = session_metrics.read(out, as_event_date(D7))["version"]

    # A late correction of the same date, days later.
    stack["stream"].batch(LATE, mode=0.5)
    assert client.trigger_dag_run(DAG_ID, "late", {"event_date": D7})
    assert server.wait_for_run(DAG_ID, "late") == "success"
    second_consumer = next_consumer_run(server, {first_consumer})
    v2 = session_metrics.read(out, as_event_date(D7))["version"]
    assert v2 > v1
    expected = reference_metrics(ON_TIME + LATE)
    assert metrics_without_version(out) == expected
    assert expected["crossed_midnight"] == 1
    assert expected["users"] == 3

    # Exactly one corrected notice and one asset event per published version, and nothing owed,
    # once every dedup run has ended: the late run also starts a run of 03-08 (the late events'
    # neighbour date), whose version has a notice and an asset event of its own.
    dedup_runs_settled(server)
    seen: dict[str, dict] = {}
    notices = corrected_messages(emulator.host, {v1, v2}, seen)
    versions = [(n["event_date"], n["version"]) for n in notices]
    assert len(versions) == len(set(versions)), versions  # no version notified twice, any date
    of_d7 = [n for n in notices if n["event_date"] == D7]
    assert sorted((n["version"], n["change"]["kind"]) for n in of_d7) == [(v1, "first"), (v2, "changed")]
    assert max(of_d7, key=lambda n: n["version"])["rows"] == expected["sessions"]
    assert corrected_delivery.outbox(lake).owed() == []
    assert corrected_delivery.outbox(lake).owed("airflow") == []
    events = [e for e in events_of(client) if e["partition_key"] == D7]
    assert sorted(e["extra"]["version"] for e in events) == [v1, v2]
    assert {e["extra"]["notice_id"] for e in events} == {n["notice_id"] for n in of_d7}

    # Rerun from the UI for the date, and a cleared task: the same metrics, nothing else changes.
    before = session_metrics.read(out, as_event_date(D7))
    assert client.trigger_dag_run(CONSUMER, "manual_rerun", {"event_date": D7})
    assert server.wait_for_run(CONSUMER, "manual_rerun") == "success"
    assert session_metrics.read(out, as_event_date(D7)) == before
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
    assert session_metrics.read(out, as_event_date(D7)) == before
    assert published(pull_all(PROJECT, "corrected-all", host=emulator.host), seen) == []  # the consumer sends nothing


D5 = "2026-03-05"
HAND = [("u5", "e1", at(5, 8, 0), "play"), ("u5", "e2", at(5, 8, 20), "play"), ("u6", "f1", at(5, 14, 0), "play")]


def consumer_runs_of(client, key: str, dag_id: str = CONSUMER) -> list[dict]:
    return [r for r in client.list_dag_runs(dag_id) if r.get("partition_key") == key]


def run_reconcile(server: AirflowServer, run_id: str) -> None:
    assert server.client().trigger_dag_run(RECONCILE, run_id, {}).created
    assert server.wait_for_run(RECONCILE, run_id) == "success"


def dedup_runs_settled(server: AirflowServer) -> None:
    """Every tidemark_dedup run (the neighbour runs the first test's versions owed) has ended, so the
    outbox holds what this test commits and nothing a DAG run is about to drain."""
    server.wait_for_runs_ended(DAG_ID)


def test_a_version_committed_by_hand_reaches_the_consumer_exactly_once(stack, tmp_path, spark):
    server, client, lake, out = stack["server"], stack["client"], stack["lake"], stack["out"]
    dedup_runs_settled(server)
    assert corrected_delivery.outbox(lake).owed("airflow") == []
    stack["stream"].batch(HAND, mode=0.5)
    # `tidemark dedup` by hand, outside Airflow: it commits and records the outbox entry, nothing more.
    # In this process, on the shared SparkSession (a Spark driver of its own costs seconds more).
    assert cli.main(["dedup", "--lake", lake, "--event-date", D5]) == 0
    owed = corrected_delivery.outbox(lake).owed("airflow")
    assert [e["notice"]["event_date"] for e in owed] == [D5]
    assert not [e for e in events_of(client) if e["partition_key"] == D5]

    # The reconcile DAG's drain emits it: one event, one consumer run of D5 with the reference's metrics.
    run_reconcile(server, "drain_1")
    assert corrected_delivery.outbox(lake).owed("airflow") == []
    wait_for(lambda: consumer_runs_of(client, D5), 300, "the consumer run of the hand-committed version")
    (run,) = consumer_runs_of(client, D5)
    assert run["run_type"] == "asset_triggered"
    assert server.wait_for_run(CONSUMER, run["dag_run_id"]) == "success"
    got = {k: v for k, v in session_metrics.read(out, as_event_date(D5)).items() if k != "version"}
    assert got == reference_metrics(HAND, D5)

    # Drained again, by the DAG and from the command line: nothing new.
    run_reconcile(server, "drain_2")
    secret = tmp_path / "password"
    secret.write_text(server.password)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tidemark.cli",
            "notices",
            "--lake",
            lake,
            "--topic",
            "corrected",
            "--emit-asset-events",
            "--airflow-url",
            server.url,
            "--airflow-password-file",
            str(secret),
            "--format",
            "summary",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    time.sleep(8)  # a few scheduler loops: a second event would have made a second run by now
    assert len([e for e in events_of(client) if e["partition_key"] == D5]) == 1
    assert len(consumer_runs_of(client, D5)) == 1


THREE = ["2026-03-11", "2026-03-12", "2026-03-13"]


def three_dates_events() -> list[tuple]:
    out = []
    for n, day in enumerate((11, 12, 13)):
        out += [
            (f"w{n}", f"w{n}a", at(day, 9, 0), "play"),
            (f"w{n}", f"w{n}b", at(day, 9, 10 + n), "play"),
            (f"x{n}", f"x{n}a", at(day, 18, 0), "play"),
        ]
    return out


def test_dates_corrected_while_a_consumer_run_is_active_each_get_their_run(stack, spark):
    """Airflow issue 56050: with max_active_runs=1, classic asset schedules lost events that arrived
    while a run was active. Here the consumer's run is held (no pool slot for its task) while three
    dates are corrected; each must still get its own run once the hold ends."""
    from tidemark.deduplication.dedup import run_dedup

    server, client, lake, out = stack["server"], stack["client"], stack["lake"], stack["out"]
    slots = client._request("GET", "/api/v2/pools/default_pool").json()["slots"]
    client._request("PATCH", "/api/v2/pools/default_pool", params={"update_mask": "slots"}, json={"slots": 0})
    try:
        assert client.trigger_dag_run(CONSUMER, "held", {"event_date": D7}).created
        wait_for(lambda: client.get_dag_run(CONSUMER, "held")["state"] == "running", 120, "the held consumer run")
        events = three_dates_events()
        stack["stream"].batch(events, mode=0.5)
        for day in THREE:  # three corrections, committed while the run is active
            assert run_dedup(lake, day, RULES, spark=spark).published
        assert corrected_delivery.emit_owed(lake, client, timeout=60) == 0
        # What Airflow acknowledged (its listing fails while the runs these events make are queued,
        # see events_of); the events themselves are counted once the runs have started, below.
        emitted = sorted(e["notice"]["event_date"] for e in corrected_delivery.outbox(lake).sent("airflow"))
        assert [d for d in emitted if d in THREE] == THREE
        time.sleep(6)
        assert client.get_dag_run(CONSUMER, "held")["state"] == "running"
        # Each date has its pending run already (one per partition key), queued behind the held
        # one: max_active_runs=1 holds them, it does not merge or drop them.
        waiting = [r for d in THREE for r in consumer_runs_of(client, d)]
        assert all(r["state"] == "queued" for r in waiting), waiting
    finally:
        client._request("PATCH", "/api/v2/pools/default_pool", params={"update_mask": "slots"}, json={"slots": slots})
    assert server.wait_for_run(CONSUMER, "held") == "success"
    for day in THREE:
        wait_for(lambda day=day: consumer_runs_of(client, day), 600, f"the consumer run of {day}")
        (run,) = consumer_runs_of(client, day)
        assert server.wait_for_run(CONSUMER, run["dag_run_id"]) == "success"
        got = {k: v for k, v in session_metrics.read(out, as_event_date(day)).items() if k != "version"}
        assert got == reference_metrics(events, day), day
    assert sorted(e["partition_key"] for e in events_of(client) if e["partition_key"] in THREE) == THREE
    # The weekly example: one run for the week of the three dates (Monday 2026-03-09), on every
    # date of it that has a version.
    week = "2026-03-09"
    wait_for(
        lambda: any(r["state"] == "success" for r in consumer_runs_of(client, week, WEEKLY)), 600, "the weekly run"
    )
    weekly = session_metrics.read_week(stack["weekly_out"], as_event_date(week))
    sessions = [
        s
        for s in batch_reference.sessionize([(u, e, ts) for u, e, ts, _ in events], GAP)
        if layout.event_date_text(s.event_date) in THREE
    ]
    expected = session_metrics.from_sessions(
        as_event_date(week), None, [(s.user_id, s.session_start, s.session_end) for s in sessions]
    )
    assert {k: v for k, v in weekly.items() if k != "version"} == {k: v for k, v in expected.items() if k != "version"}


def test_clearing_a_dates_partition_from_the_cli_reruns_it_with_the_same_result(stack):
    client, server, out, _lake = stack["client"], stack["server"], stack["out"], stack["lake"]
    before = session_metrics.read(out, as_event_date(D7))
    tries = {
        r["dag_run_id"]: {ti["task_id"]: ti["try_number"] for ti in client.task_instances(CONSUMER, r["dag_run_id"])}
        for r in consumer_runs_of(client, D7)
    }
    events_before = len(events_of(client))
    proc = server.cli("dags", "clear", CONSUMER, "--partition-key", D7, "--yes")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    wait_for(
        lambda: all(
            ti["state"] == "success" and ti["try_number"] > tries[run_id][ti["task_id"]]
            for run_id in tries
            for ti in client.task_instances(CONSUMER, run_id)
        ),
        600,
        "the cleared runs of the date to run again",
    )
    assert session_metrics.read(out, as_event_date(D7)) == before
    # The producer's side: clearing the date's dedup runs reruns them as no-ops (nothing new to
    # include): the same version stays current and no asset event is emitted.
    version = before["version"]
    dedup_runs = [r["dag_run_id"] for r in client.list_dag_runs(DAG_ID) if r.get("partition_key") == D7]
    assert dedup_runs
    proc = server.cli("dags", "clear", DAG_ID, "--partition-key", D7, "--yes")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    for run_id in dedup_runs:
        assert server.wait_for_run(DAG_ID, run_id, timeout=600) == "success"
        states = {ti["task_id"]: ti["state"] for ti in client.task_instances(DAG_ID, run_id)}
        assert states["dedup"] == "skipped", states
    assert len(events_of(client)) == events_before
    assert session_metrics.read(out, as_event_date(D7))["version"] == version
