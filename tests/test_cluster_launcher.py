"""SparkStandalone, the launcher itself: refuses nonsense, fails fast and leaves nothing behind."""

from __future__ import annotations

import os

import pytest

from tidemark.devstack import process
from tidemark.devstack.spark_cluster import SparkStandalone, WorkerDied, package_zip


def test_a_cluster_needs_a_worker(tmp_path):
    with pytest.raises(ValueError, match="at least one worker"):
        SparkStandalone(str(tmp_path), workers=0)


def test_master_url_only_once_started(tmp_path):
    with pytest.raises(RuntimeError):
        _ = SparkStandalone(str(tmp_path)).master_url


def test_job_zip_holds_the_packages_and_sql(tmp_path):
    import zipfile

    names = zipfile.ZipFile(package_zip(str(tmp_path / "jobs.zip"))).namelist()
    assert "streaming_job/submit.py" in names
    assert "tidemark/cli.py" in names
    assert any(n.startswith("dedup_sql/") and n.endswith(".sql") for n in names)
    assert not any("__pycache__" in n for n in names)


@pytest.mark.slow
def test_a_worker_that_dies_fails_the_start_and_everything_is_stopped(tmp_path):
    cluster = SparkStandalone(str(tmp_path), workers=1, memory="not-a-size", start_timeout=180)
    with pytest.raises(WorkerDied) as failure:
        cluster.start()
    assert "spark-worker-0" in str(failure.value)
    logs = os.path.join(str(tmp_path), "logs")
    assert os.path.exists(os.path.join(logs, "master.out"))
    # The master it had started is gone too: no process runs from the cluster's folder any more
    # (every daemon's command line names <work_dir>/conf).
    assert _processes_mentioning(str(tmp_path)) == []


def _processes_mentioning(text: str) -> list[int]:
    import psutil

    return [
        proc.pid
        for proc in psutil.process_iter(["cmdline"])
        if text in " ".join(proc.info["cmdline"] or []) and process.pid_alive(proc.pid)
    ]
