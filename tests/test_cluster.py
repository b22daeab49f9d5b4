"""The stream and the dedup job run unchanged through spark-submit on a real Spark standalone cluster
(one master, two workers, on loopback, from the pip-installed pyspark) and write what a local run
writes.

Receipt timestamps come from the wall clock of each run, so the runs are compared on everything
else: the panes' content, the receipt markers' facts, the quarantined lines, the published sessions
(which must also equal the plain-Python batch reference). Last, the unchanged Airflow DAG runs its
dedup on the cluster when AIRFLOW_CONN_SPARK_DEFAULT names the cluster's master.
"""

from __future__ import annotations

import os
import subprocess

import pyarrow.parquet as pq
import pytest

from tidemark.base import layout
from tidemark.devstack.spark_cluster import SparkStandalone, package_zip
from tidemark.panes import receipts
from tidemark.store import lake as lake_layout
from tidemark.store import storage
from tidemark.store.lake import Lake

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUBMIT = os.path.join(ROOT, "streaming_job", "submit.py")
FILES_PER_BATCH = 4

# A test's timeout covers its fixtures: the first dedup test sets up the local and cluster dedups of
# every date (one spark-submit each), which on a loaded 2-core machine can pass the suite's 20 min.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    spark_cluster = SparkStandalone(str(tmp_path_factory.mktemp("spark-cluster")), workers=2, cores=1, memory="1g")
    spark_cluster.start()
    yield spark_cluster
    spark_cluster.stop()


@pytest.fixture(scope="module")
def landing(tmp_path_factory):
    from tidemark.demo.generate import Workload, generate

    folder = str(tmp_path_factory.mktemp("landing"))
    # Duplicates, minutes-late and days-late deliveries, malformed lines: every path of the job.
    generate(
        folder,
        Workload(events=3000, users=40, files=12, days=2, seed=11, malformed_rate=0.01, offline_session_rate=0.05),
    )
    return folder


@pytest.fixture(scope="module")
def py_files(tmp_path_factory):
    return package_zip(str(tmp_path_factory.mktemp("dist") / "tidemark-jobs.zip"))


def spark_submit(cluster: SparkStandalone, py_files: str, *args: str) -> None:
    argv = cluster.submit_argv(SUBMIT, *args, py_files=py_files)
    try:
        done = subprocess.run(
            argv, env=cluster.env(), cwd=cluster.work_dir, capture_output=True, text=True, timeout=900
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"spark-submit timed out\n{cluster.log_tails()}") from exc
    assert done.returncode == 0, (
        f"spark-submit {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-4000:]}\n{cluster.log_tails()}"
    )


def canonical_panes(lake: Lake) -> list[tuple]:
    """Every pane row of every complete receipt partition, without its receipt_ts, lists sorted."""
    rows = []
    for event_date in receipts.list_event_dates(lake):
        for receipt_ts in receipts.list_receipts(lake, event_date):
            table = pq.read_table(lake.receipt_dir(event_date, receipt_ts))
            for row in table.to_pylist():
                row["event_ids"] = sorted(row["event_ids"])
                row["events"] = sorted(tuple(sorted(e.items())) for e in row["events"])
                rows.append((event_date, *sorted((k, repr(v)) for k, v in row.items())))
    return sorted(rows)


def canonical_markers(lake: Lake) -> list[dict]:
    out = []
    for event_date in receipts.list_event_dates(lake):
        for receipt_ts in receipts.list_receipts(lake, event_date):
            marker = receipts.read_marker(lake, event_date, receipt_ts).to_json()
            out.append({k: v for k, v in marker.items() if k not in ("receipt_ts", "uri")})
    return sorted(out, key=lambda m: (m["event_date"], m["batch_id"]))


def canonical_quarantine(lake: Lake) -> list[tuple]:
    root = lake.quarantine_root()
    rows = []
    for name in storage.list_subdirs(root):
        folder = layout.join(root, name)
        if storage.exists(layout.join(folder, lake_layout.QUARANTINE_MARKER)):
            rows += [
                (r["raw"], r["reason"], r["source_file"], r["batch_id"])
                for r in pq.read_table(folder, columns=["raw", "reason", "source_file", "batch_id"]).to_pylist()
            ]
    return sorted(rows)


@pytest.fixture(scope="module")
def local_run(spark, landing, tmp_path_factory):
    """The reference: the same stream in this process on the local[2] session of the suite."""
    from streaming_job.job import StreamConfig, run_stream

    base = tmp_path_factory.mktemp("local-run")
    lake, checkpoint = Lake.open(base / "lake"), str(base / "checkpoint")
    run_stream(
        StreamConfig(
            landing=landing, lake=lake, checkpoint=checkpoint, available_now=True, max_files_per_trigger=FILES_PER_BATCH
        ),
        spark=spark,
    )
    return lake


@pytest.fixture(scope="module")
def cluster_run(cluster, py_files, landing, tmp_path_factory):
    base = tmp_path_factory.mktemp("cluster-run")
    lake, checkpoint = Lake.open(base / "lake"), str(base / "checkpoint")
    spark_submit(
        cluster,
        py_files,
        "stream",
        "--landing",
        landing,
        "--lake",
        str(lake),
        "--checkpoint",
        checkpoint,
        "--available-now",
        "--max-files-per-trigger",
        str(FILES_PER_BATCH),
    )
    return lake


def test_stream_ran_on_the_cluster_executors(cluster, cluster_run):
    apps = cluster.status()["completedapps"] + cluster.status()["activeapps"]
    stream_apps = [a for a in apps if a["name"] == "tidemark-stream"]
    assert stream_apps, f"no tidemark-stream application on the master: {[a['name'] for a in apps]}"
    # Both workers' single cores were granted to it: the work ran on the cluster, not in the driver.
    assert stream_apps[0]["cores"] == 2
    # And each worker launched an executor for it (its work dir holds the app's executor folder).
    app_id = stream_apps[0]["id"]
    for index in range(cluster.workers):
        work = os.path.join(cluster.env()["SPARK_WORKER_DIR"], f"worker-{index}", app_id)
        assert os.path.isdir(work), f"worker {index} ran no executor of {app_id}"
        assert os.listdir(work), f"worker {index} ran no executor of {app_id}"


def test_stream_on_cluster_writes_what_a_local_run_writes(local_run, cluster_run):
    local_panes, cluster_panes = canonical_panes(local_run), canonical_panes(cluster_run)
    assert len(local_panes) > 0
    batches = {m["batch_id"] for m in canonical_markers(local_run)}
    assert len(batches) >= 2, "the workload should span several micro-batches"
    assert len(cluster_panes) == len(local_panes)
    assert cluster_panes == local_panes
    assert canonical_markers(cluster_run) == canonical_markers(local_run)


def test_stream_on_cluster_quarantines_the_same_lines(local_run, cluster_run):
    local_rows = canonical_quarantine(local_run)
    assert local_rows, "the workload has malformed lines"
    assert canonical_quarantine(cluster_run) == local_rows


def test_receipt_partitions_of_the_two_runs_are_distinct(local_run, cluster_run):
    """Sanity check of the comparison itself: the runs are separate, each with its own receipts."""

    def receipt_set(lake):
        return {(d, r) for d in receipts.list_event_dates(lake) for r in receipts.list_receipts(lake, d)}

    assert receipt_set(local_run).isdisjoint(receipt_set(cluster_run))


# -- the dedup job ---------------------------------------------------------------------------------


def canonical_sessions(lake: Lake, event_date: str) -> list[tuple]:
    """The published sessions of a date, without the receipt timestamps that differ between runs."""
    from tidemark.iceberg import reader

    return sorted(
        (
            r["session_id"],
            r["user_id"],
            r["session_start"],
            r["session_end"],
            r["event_count"],
            tuple(sorted(r["event_ids"])),
        )
        for r in reader.read_sessions(lake, layout.as_event_date(event_date)).to_pylist()
    )


@pytest.fixture(scope="module")
def event_dates(local_run, cluster_run):
    dates = receipts.list_event_dates(local_run)
    assert dates == receipts.list_event_dates(cluster_run)
    return dates


@pytest.fixture(scope="module")
def local_dedup(spark, local_run, event_dates):
    from tidemark.deduplication.dedup import run_dedup

    for event_date in event_dates:
        run_dedup(local_run, event_date, spark=spark)
    return local_run


@pytest.fixture(scope="module")
def cluster_dedup(cluster, py_files, cluster_run, event_dates):
    for event_date in event_dates:
        spark_submit(cluster, py_files, "dedup", "--lake", cluster_run, "--event-date", event_date.isoformat())
    return cluster_run


def test_dedup_ran_on_the_cluster(cluster, cluster_dedup, event_dates):
    apps = cluster.status()["completedapps"]
    assert len([a for a in apps if a["name"] == "tidemark-dedup"]) == len(event_dates)


def test_dedup_on_cluster_publishes_what_a_local_run_publishes(local_dedup, cluster_dedup, event_dates):
    assert len(event_dates) >= 2
    for event_date in event_dates:
        local_sessions = canonical_sessions(local_dedup, event_date)
        assert local_sessions, f"no session published for {event_date}"
        assert canonical_sessions(cluster_dedup, event_date) == local_sessions, event_date


def test_dedup_on_cluster_equals_the_batch_reference(landing, cluster_dedup, event_dates):
    """The promise, on the cluster: each date equals a plain-Python batch sessionization."""
    from tests.reference import sessions_of_landing
    from tidemark.base.session_rules import SessionRules

    expected: dict = {}  # by event date (a date)
    for session in sessions_of_landing(landing, SessionRules().gap):
        expected.setdefault(session.event_date, []).append(
            (session.user_id, session.session_start, session.session_end, session.event_ids)
        )
    assert sorted(expected) == event_dates
    for event_date in event_dates:
        published = sorted((s[1], s[2], s[3], frozenset(s[5])) for s in canonical_sessions(cluster_dedup, event_date))
        assert published == sorted(expected[event_date]), event_date


# -- the Airflow DAG, pointed at the cluster by its connection alone -----------------------------


@pytest.fixture(scope="module")
def undeduplicated_lake(cluster_run, tmp_path_factory):
    """The cluster stream's receipt partitions only (no sessions_dedup/): work for the DAG."""
    import shutil

    lake = Lake.open(tmp_path_factory.mktemp("dag-lake") / "lake")
    shutil.copytree(Lake.open(cluster_run).sessions_root(), lake.sessions_root())
    return lake


def test_dag_runs_its_dedup_on_the_cluster_chosen_by_spark_default(
    cluster, undeduplicated_lake, cluster_dedup, event_dates, tmp_path_factory
):
    """The DAG is unchanged; AIRFLOW_CONN_SPARK_DEFAULT = the cluster's master URL sends its
    SparkSubmitOperator there instead of local[*]."""
    import json

    from tidemark.devstack.airflow import AirflowServer

    event_date = event_dates[0]
    dedup_apps_before = [a["id"] for a in cluster.status()["completedapps"] if a["name"] == "tidemark-dedup"]
    server = AirflowServer(
        str(tmp_path_factory.mktemp("airflow")),
        spark_master=cluster.master_url,
        env={
            "TIDEMARK_LAKE": undeduplicated_lake,
            "TIDEMARK_DAG_RETRIES": "0",
            "SPARK_LOCAL_IP": cluster.host,
            # no api-server under `dags test`: the publish task's wait for it, 2 s instead of 30 s
            "TIDEMARK_ASSET_EVENTS_TIMEOUT": "2s",
        },
    )
    os.makedirs(server.home, exist_ok=True)
    server.migrate()
    done = server.cli(
        "dags", "test", "tidemark_dedup", "--conf", json.dumps({"event_date": event_date.isoformat()}), timeout=900
    )
    assert done.returncode == 0, f"airflow dags test failed:\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}"
    dedup_apps_after = [a["id"] for a in cluster.status()["completedapps"] if a["name"] == "tidemark-dedup"]
    assert len(dedup_apps_after) == len(dedup_apps_before) + 1, "the DAG's Spark job did not run on the cluster"
    assert canonical_sessions(undeduplicated_lake, event_date) == canonical_sessions(cluster_dedup, event_date)
