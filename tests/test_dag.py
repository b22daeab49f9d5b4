"""The tidemark_dedup DAG: it imports cleanly and cheaply, and `airflow dags test` of real runs
(SparkSubmitOperator on local Spark) over a small lake written by the real stream publishes the
batch reference, emits the asset events, and stays idempotent when run again."""

from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3
import subprocess
import sys
from datetime import date, timedelta

import pytest

from tests import reference
from tests.conftest import sql_settings_kept
from tests.helpers import airflow_on_connect, generate_cli, lake_session_set, reference_session_set
from tidemark import cli
from tidemark.base import class_archive, names
from tidemark.base.layout import as_event_date
from tidemark.orchestration import date_priority, runs
from tidemark.store.lake import Lake

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DAGS = os.path.join(ROOT, "dags")
DAG_ID = names.get("DAG_ID")
GAP = timedelta(minutes=30)

# Run in a fresh interpreter: what does parsing the DAGs folder cost and import?
_IMPORT_PROBE = r"""
import json, sys, time
from airflow.dag_processing.dagbag import DagBag
before = set(sys.modules)
started = time.monotonic()
bag = DagBag(dag_folder=sys.argv[1])
seconds = time.monotonic() - started
dag = bag.dags.get(sys.argv[2])
new = set(sys.modules) - before
out = {"errors": {k: str(v) for k, v in bag.import_errors.items()}, "seconds": seconds,
       "dags": sorted(bag.dags), "heavy": sorted(m for m in new if m.split(".")[0] in
                                               ("pyspark", "py4j", "pyarrow", "pandas")),
       "first_party": sorted(m for m in new if m.split(".")[0] in ("tidemark", "streaming_job"))}
if dag is not None:
    out["tasks"] = sorted(t.task_id for t in dag.tasks)
    out["schedule"] = type(dag.timetable).__name__
    out["params"] = {k: dag.params.get_param(k).schema for k in dag.params}
    refused = {}
    for bad in ("2026-02-30", "2026-3-7", "../../etc", "2026-03-07' OR '1'='1", ""):
        try:
            dag.params.get_param("event_date").resolve(bad)
            refused[bad] = False
        except Exception:
            refused[bad] = True
    out["refused"] = refused
    out["accepts"] = dag.params.get_param("event_date").resolve("2026-03-07")
    out["dedup_concurrency"] = dag.get_task("dedup").max_active_tis_per_dag
    # serialized as the dag-processor does: a weight rule no plugin registers fails here
    from airflow.serialization.serialized_objects import DagSerialization
    out["weight_rules"] = {t["__var"]["task_id"]: t["__var"].get("weight_rule")
                           for t in DagSerialization.to_dict(dag)["dag"]["tasks"]}
    out["inlets"] = sorted(f"{o.name} {o.uri}" for o in dag.get_task("publish").inlets)
    out["outlets"] = sorted(str(o) for t in dag.tasks for o in t.outlets)
    out["consumers"] = {d: type(bag.dags[d].timetable).__name__ for d in bag.dags if d.startswith("example_")}
maintenance = bag.dags.get("tidemark_maintenance")
if maintenance is not None:
    out["maintenance"] = {"tasks": sorted(t.task_id for t in maintenance.tasks),
                          "interval_s": maintenance.timetable.delta.total_seconds()
                          if hasattr(maintenance.timetable, "delta") else type(maintenance.timetable).__name__}
reconcile = bag.dags.get("tidemark_reconcile")
if reconcile is not None:
    out["reconcile"] = {"tasks": sorted(t.task_id for t in reconcile.tasks),
                        "interval_s": reconcile.timetable.delta.total_seconds()
                        if hasattr(reconcile.timetable, "delta") else type(reconcile.timetable).__name__,
                        "max_active_runs": reconcile.max_active_runs}
print(json.dumps(out))
"""


def test_dag_imports_without_errors_and_without_heavy_work(tmp_path):
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORT_PROBE, DAGS, DAG_ID], env=env, capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"\nDagBag parse of dags/: {out['seconds']:.2f}s")
    assert out["errors"] == {}
    assert out["dags"] == sorted(
        [
            DAG_ID,
            "tidemark_reconcile",
            "tidemark_maintenance",
            "example_session_metrics",
            "example_weekly_session_metrics",
            "example_changes_consumer",
        ]
    )
    # the skip check is the dedup task's first step (one task process fewer per run)
    assert out["tasks"] == ["dedup", "notify_corrected", "publish", "trigger_affected"]
    # PartitionedAtRuntime: runs only when triggered, each with its event date as partition_key
    assert out["schedule"] == "PartitionedAtRuntime"
    assert out["dedup_concurrency"] is None  # TIDEMARK_DEDUP_CONCURRENCY unset: no limit but max_active_runs
    # older dates' dedups first (tidemark/orchestration/date_priority.py), loaded from tidemark's plugin
    assert out["weight_rules"]["dedup"] == "tidemark.orchestration.date_priority.OlderDatesFirst"
    assert out["heavy"] == []  # no pyspark, no pyarrow at parse time
    # standard library only: the schedules' durations, the date's text form, the back end's choice, settings
    assert out["first_party"] == [
        "tidemark",
        "tidemark.base",
        "tidemark.base.durations",
        "tidemark.base.layout",
        "tidemark.base.names",
        "tidemark.orchestration",
        "tidemark.orchestration.date_priority",
        "tidemark.orchestration.dedup_backends",
        "tidemark.orchestration.runs",
        "tidemark.orchestration.settings",
    ]
    assert all(out["refused"].values()), out["refused"]
    assert out["accepts"] == "2026-03-07"
    # One asset, declared (an inlet: the asset events come from the outbox, one per version, and an
    # outlet would add one per successful run); the consumers are partitioned on it.
    from tidemark.notices import asset_events

    assert out["inlets"] == [f"{asset_events.ASSET_NAME} {names.get('ASSET_URI_PREFIX')}/"]  # URI normalised
    assert out["outlets"] == []
    assert out["consumers"] == {
        "example_session_metrics": "PartitionedAssetTimetable",
        "example_weekly_session_metrics": "PartitionedAssetTimetable",
        "example_changes_consumer": "PartitionedAssetTimetable",
    }
    # the self-healing loop: every 15 minutes unless TIDEMARK_RECONCILE_INTERVAL says otherwise
    assert out["reconcile"] == {"tasks": ["drain_outbox", "find", "trigger"], "interval_s": 900.0, "max_active_runs": 1}
    # the lake's upkeep (tidemark gc): daily unless TIDEMARK_MAINTENANCE_INTERVAL says otherwise
    assert out["maintenance"] == {"tasks": ["gc", "pack"], "interval_s": 86400.0}


def test_reconcile_dag_schedule_is_configurable_and_refuses_nonsense(tmp_path):
    base = {**os.environ, "AIRFLOW_HOME": str(tmp_path), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    for value, expected in (("1h", 3600.0), ("off", "NullTimetable")):
        proc = subprocess.run(
            [sys.executable, "-c", _IMPORT_PROBE, DAGS, DAG_ID],
            env={**base, "TIDEMARK_RECONCILE_INTERVAL": value},
            capture_output=True,
            text=True,
            timeout=180,
        )
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        assert out["reconcile"]["interval_s"] == expected, value
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORT_PROBE, DAGS, DAG_ID],
        env={**base, "TIDEMARK_RECONCILE_INTERVAL": "often"},
        capture_output=True,
        text=True,
        timeout=180,
    )
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "invalid duration 'often'" in " ".join(out["errors"].values())
    for value, expected in (("12h", 43200.0), ("off", "NullTimetable"), ("5m", None)):
        proc = subprocess.run(
            [sys.executable, "-c", _IMPORT_PROBE, DAGS, DAG_ID],
            env={**base, "TIDEMARK_MAINTENANCE_INTERVAL": value},
            capture_output=True,
            text=True,
            timeout=180,
        )
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        if expected is None:
            assert "is below 1h" in " ".join(out["errors"].values())
        else:
            assert out["maintenance"]["interval_s"] == expected, value


# -- real runs with `airflow dags test` -------------------------------------------------------


@pytest.fixture(scope="module")
def small_lake(tmp_path_factory, spark):
    """A landing over two days (sessions cross midnight) streamed by the real job: `tidemark stream`
    in this process, on the shared SparkSession (a JVM of its own cost 15-45 s more under load)."""
    base = tmp_path_factory.mktemp("lake")
    landing, lake = str(base / "landing"), Lake.open(base / "lake")
    generate_cli(
        landing,
        "--events",
        "1500",
        "--users",
        "25",
        "--days",
        "2",
        "--start",
        "2026-03-06",
        "--files",
        "6",
        "--seed",
        "11",
    )
    with sql_settings_kept(spark):
        stream = [
            "stream",
            "--landing",
            landing,
            "--lake",
            lake,
            "--checkpoint",
            base / "checkpoint",
            "--available-now",
        ]
        assert cli.main(stream) == 0
    # Untouched by the tests' dedup runs: a test that needs the lake before any version copies it.
    shutil.copytree(lake.uri, base / "pristine")
    return landing, lake


def pristine_copy(small_lake, dest) -> Lake:
    """A copy of the small lake as the stream left it (no version of any date yet)."""
    shutil.copytree(os.path.join(os.path.dirname(small_lake[1].uri), "pristine"), dest)
    return Lake.open(dest)


@pytest.fixture(scope="module")
def airflow_home(tmp_path_factory, small_lake):
    from tidemark.devstack.airflow import AirflowServer

    server = AirflowServer(
        str(tmp_path_factory.mktemp("airflow")), env={"TIDEMARK_LAKE": small_lake[1], "TIDEMARK_DAG_RETRIES": "0"}
    )
    os.makedirs(server.home, exist_ok=True)
    server.migrate()
    print(f"\nairflow db migrate: {server.timings['db_migrate_s']}s")
    # The api-server alone (no scheduler: `dags test` runs the tasks): the tasks that trigger the
    # neighbours and emit the asset events call this Airflow's REST API.
    server.start(components=("api-server",))
    yield server
    server.stop()


def dags_test(server, event_date: str, run_id: str):
    import time

    started = time.monotonic()
    proc = server.cli("dags", "test", DAG_ID, "--conf", json.dumps({"event_date": event_date}), timeout=600)
    print(f"\nairflow dags test {event_date}: {time.monotonic() - started:.1f}s")
    if proc.returncode != 0:
        problems = [
            line
            for line in proc.stdout.splitlines()
            if any(w in line.lower() for w in ("error", "exception", "failed"))
        ]
        pytest.fail("airflow dags test failed:\n" + "\n".join(problems[-30:]) + proc.stderr[-2000:])
    return proc


def db_rows(server, sql: str, *args) -> list[tuple]:
    with sqlite3.connect(os.path.join(server.home, "airflow.db")) as db:
        return db.execute(sql, args).fetchall()


def last_run_states(server) -> dict[str, str]:
    """task_id -> state of the newest run that `airflow dags test` made (mapped tasks: any index)."""
    (run_id,) = db_rows(
        server,
        "select run_id from dag_run where dag_id = ? and run_id not like 'affected__%' order by id desc limit 1",
        DAG_ID,
    )[0]
    return dict(
        db_rows(server, "select task_id, state from task_instance where dag_id = ? and run_id = ?", DAG_ID, run_id)
    )


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_dags_test_publishes_the_reference_and_is_idempotent(small_lake, airflow_home):
    from tidemark.iceberg import reader

    landing, lake = small_lake
    server = airflow_home
    event_date = "2026-03-06"
    dags_test(server, event_date, "first")
    pointer = reader.current_version(lake, as_event_date(event_date))
    assert pointer
    assert pointer.version
    assert lake_session_set(lake, event_date, True) == reference_session_set(landing, event_date, GAP, True)

    # One asset event: tidemark.sessions_dedup, the date as partition_key, the version in extra.
    from tidemark.notices import asset_events

    events = [
        (name, key, json.loads(extra) if isinstance(extra, str) else extra)
        for name, key, extra in db_rows(
            server, "select a.name, e.partition_key, e.extra from asset_event e join asset a on a.id = e.asset_id"
        )
    ]
    assert [(n, k, x["event_date"], x["version"]) for n, k, x in events] == [
        (asset_events.ASSET_NAME, event_date, event_date, pointer.version)
    ]

    # Affected neighbours became runs with deterministic ids. A first version holds only new events,
    # so every other date a session touching event_date spans is affected (dedup_summary.sql); the
    # two-day landing has sessions crossing midnight, so the list is not empty.
    affected = sorted({str(d) for d in pointer.affected_dates} - {event_date})
    spanned = {
        str(s.session_start.date() + timedelta(days=n))
        for s in reference.sessions_of_landing(landing, GAP)
        if str(s.session_start.date()) <= event_date <= str(s.session_end.date())
        for n in range((s.session_end.date() - s.session_start.date()).days + 1)
    }
    assert affected, pointer
    assert affected == sorted(spanned - {event_date}), pointer
    triggered = sorted(r[0] for r in db_rows(server, "select run_id from dag_run where run_id like 'affected__%'"))
    day = as_event_date(event_date)
    assert triggered == sorted(runs.affected_run_id(as_event_date(d), day, pointer.version) for d in affected)

    assert last_run_states(server)["dedup"] == "success"

    # Again: nothing new to include -> no Spark at all: the dedup task is skipped (with the reason
    # in the log), the same version stays current, no repeated asset event, no extra neighbour
    # runs, and an obligation owed to this date is discharged as a dedup would have.
    from tidemark.orchestration import obligations

    obligations.record(lake, [as_event_date(event_date)], date(2026, 3, 5), pointer.version)
    assert [o["source_date"] for o in obligations.pending(lake, as_event_date(event_date))] == ["2026-03-05"]
    events_before = len(db_rows(server, "select id from asset_event"))
    proc = dags_test(server, event_date, "second")
    states = last_run_states(server)
    assert "needs_spark" not in states, states
    assert states["dedup"] == "skipped", states
    assert states["publish"] == "success", states
    assert "skipping the Spark dedup" in proc.stdout + proc.stderr
    assert len(db_rows(server, "select id from asset_event")) == events_before
    assert obligations.pending(lake, as_event_date(event_date)) == []
    again = reader.current_version(lake, as_event_date(event_date))
    assert again.version == pointer.version
    assert lake_session_set(lake, event_date, True) == reference_session_set(landing, event_date, GAP, True)
    assert (
        sorted(r[0] for r in db_rows(server, "select run_id from dag_run where run_id like 'affected__%'")) == triggered
    )

    # The neighbour date too (whether or not it was listed as affected).
    dags_test(server, "2026-03-07", "neighbour")
    assert lake_session_set(lake, "2026-03-07", True) == reference_session_set(landing, "2026-03-07", GAP, True)


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_dags_test_without_an_api_server_leaves_the_asset_event_owed_and_a_later_drain_posts_it_once(
    small_lake, tmp_path, spark_connect_server
):
    """`airflow dags test` with no api-server (the tidemark_airflow_api connection names a port where
    nothing listens, as in the cluster and rules tests): the run succeeds, the version's outbox entry
    stays owed to Airflow, a warning names the date and version, the neighbour's obligation stays
    pending; once an api-server is up, `tidemark notices --emit-asset-events` posts exactly one
    event, and draining again posts nothing. Its dedup runs on the worker's Spark Connect server (the
    test above runs spark-submit)."""
    from tidemark.iceberg import reader
    from tidemark.notices import asset_events, corrected_delivery
    from tidemark.orchestration import obligations

    event_date = "2026-03-06"
    lake = pristine_copy(small_lake, tmp_path / "lake")
    server = airflow_on_connect(str(tmp_path / "airflow"), lake, spark_connect_server)
    os.makedirs(server.home, exist_ok=True)
    server.migrate()
    proc = dags_test(server, event_date, "offline")
    states = last_run_states(server)
    assert states["dedup"] == "success", states
    assert states["publish"] == "success", states
    assert states["notify_corrected"] == "success", states
    pointer = reader.current_version(lake, as_event_date(event_date))
    box = corrected_delivery.outbox(lake)
    assert [(e["notice"]["event_date"], e["notice"]["version"]) for e in box.owed("airflow")] == [
        (event_date, pointer.version)
    ]
    assert db_rows(server, "select id from asset_event") == []
    output = proc.stdout + proc.stderr
    warned = [line for line in output.splitlines() if "asset events stay owed: Airflow API unreachable" in line]
    assert warned, output[-3000:]
    assert event_date in warned[0], output[-3000:]
    assert pointer.version in warned[0], output[-3000:]
    # The neighbours owed a rerun were not started (no API): their obligations stay pending.
    affected = sorted({str(d) for d in pointer.affected_dates} - {event_date})
    assert affected, pointer  # the two-day landing has sessions crossing midnight
    assert states["trigger_affected"] == "skipped", states
    assert all(obligations.pending(lake, as_event_date(d)) for d in affected)

    # Later, Airflow's REST API is up: a drain posts the owed event, once.
    server.start(components=("api-server",))
    try:
        for _ in range(2):
            drained = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "tidemark.cli",
                    "notices",
                    "--lake",
                    lake.uri,
                    "--topic",
                    "corrected",
                    "--emit-asset-events",
                    "--airflow-url",
                    server.url,
                    "--airflow-user",
                    server.username,
                    "--format",
                    "summary",
                    "--timeout",
                    "60",
                ],
                env={**os.environ, "AIRFLOW_PASSWORD": server.password, "PYTHONPATH": ROOT},
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert drained.returncode == 0, drained.stderr[-3000:]
            events = [
                (name, key, json.loads(extra) if isinstance(extra, str) else extra)
                for name, key, extra in db_rows(
                    server,
                    "select a.name, e.partition_key, e.extra from asset_event e join asset a on a.id = e.asset_id",
                )
            ]
            assert [(n, k, x["version"]) for n, k, x in events] == [
                (asset_events.ASSET_NAME, event_date, pointer.version)
            ]
        assert box.owed("airflow") == []
        assert [e["notice"]["version"] for e in box.sent("airflow")] == [pointer.version]
    finally:
        server.stop(components=("api-server",))


# -- the dedup step: the operator of the back end tidemark.orchestration.dedup_backends chooses ----


def _dag_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("tidemark_dedup_dag", os.path.join(DAGS, "tidemark_dedup.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_dag_builds_the_operator_of_the_chosen_back_end(monkeypatch, tmp_path):
    dag = _dag_module()
    monkeypatch.delenv("TIDEMARK_DEDUP_BACKEND", raising=False)
    monkeypatch.delenv("TIDEMARK_DATAPROC_CLUSTER", raising=False)
    task = dag.dedup_task()  # outside a DAG: the operator alone
    assert isinstance(task, dag.DedupOperator)
    assert isinstance(task.weight_rule, date_priority.OlderDatesFirst)
    # spark-submit's command line is built when the task runs, from the run's checked params
    monkeypatch.setattr(dag, "run_target", lambda params: (Lake.open("/lake"), date(2026, 3, 7)))
    monkeypatch.setattr(dag, "skip_if_up_to_date", lambda lake, day: None)
    monkeypatch.setattr(dag, "wait_for_the_dates_turn", lambda run_id, day, log: None)
    monkeypatch.setattr(dag.SparkSubmitOperator, "execute", lambda self, context: None)
    extra: dict[str, str] = {}
    connection = type("C", (), {"conn_type": "spark", "extra_dejson": extra})()
    monkeypatch.setattr("airflow.sdk.BaseHook.get_connection", lambda conn_id: connection)
    archive = tmp_path / "classes.jsa"
    archive.write_bytes(b"an archive")
    monkeypatch.setenv(class_archive.ENV, str(archive))
    task.execute({"params": {"event_date": "2026-03-07"}, "run_id": "notice__1"})
    assert task.application_args == ["dedup", "--lake", Lake.open("/lake").uri, "--event-date", "2026-03-07"]
    # spark-submit's driver runs here: it starts from this machine's class archive
    assert f"-XX:SharedArchiveFile={archive}" in task.conf[class_archive.JAVA_OPTIONS]
    assert task.conf["spark.ui.enabled"] == "false"
    # in cluster deploy mode the driver runs elsewhere, where this machine's archive is not
    extra["deploy-mode"] = "cluster"
    in_cluster = dag.dedup_task()
    in_cluster.execute({"params": {"event_date": "2026-03-07"}, "run_id": "notice__2"})
    assert class_archive.JAVA_OPTIONS not in in_cluster.conf
    monkeypatch.setenv("TIDEMARK_DEDUP_BACKEND", "databricks")
    with pytest.raises(ValueError, match="expected one of dataproc, spark"):
        dag.dedup_task()


def test_the_dedup_of_a_date_waits_for_an_earlier_run_of_that_date_when_several_run_at_once(monkeypatch):
    from tidemark.orchestration import airflow_api, date_turns

    dag = _dag_module()
    log = logging.getLogger("test_dag")
    asked = []
    finishes_after = {"asks": 3}  # the earlier run's dedup ends once the later one asked this often

    def ahead_of(client, dag_id, run_id, event_date):
        asked.append((dag_id, run_id, event_date))
        still_running = len(asked) < finishes_after["asks"]
        return "notice__first" if run_id == "notice__second" and still_running else None

    monkeypatch.setattr(airflow_api, "for_tasks", lambda: object())
    monkeypatch.setattr(date_turns, "ahead_of", ahead_of)
    monkeypatch.setattr(dag, "TURN_POLL_S", 0.01)
    monkeypatch.setenv("TIDEMARK_DEDUP_CONCURRENCY", "2")
    day = date(2026, 3, 7)  # parsed from the run's param before Airflow is asked (execute)
    # Waits in the task (no AirflowRescheduleException: Airflow 3.3 can fail a rescheduled task,
    # apache/airflow#71172) until the earlier run's dedup is gone, asking each time.
    dag.wait_for_the_dates_turn("notice__second", day, log)
    assert asked == [(DAG_ID, "notice__second", day)] * 3
    asked.clear()
    dag.wait_for_the_dates_turn("notice__first", day, log)  # its turn: goes on
    assert asked == [(DAG_ID, "notice__first", day)]
    # An earlier run that never finishes: after TURN_WAIT_S the dedup goes on (the commit guards it).
    finishes_after["asks"] = 10**6
    asked.clear()
    monkeypatch.setattr(dag, "TURN_WAIT_S", 0.05)
    dag.wait_for_the_dates_turn("notice__second", day, log)
    assert len(asked) >= 3

    def unreachable():
        raise airflow_api.TransientAirflowError("GET /api/v2/dags -> HTTP 503")

    monkeypatch.setattr(airflow_api, "for_tasks", unreachable)
    dag.wait_for_the_dates_turn("notice__second", day, log)  # no Airflow to ask: the commit guards it
    monkeypatch.setenv("TIDEMARK_DEDUP_CONCURRENCY", "1")
    monkeypatch.setattr(date_turns, "ahead_of", lambda *a: pytest.fail("one dedup at a time: nothing to ask"))
    dag.wait_for_the_dates_turn("notice__second", day, log)
