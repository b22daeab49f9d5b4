"""The Spark Connect server's warm-up (tidemark/demo/correction_warmup.py), run as `tidemark up` runs it.

A real server: the warm-up builds its scratch lake once (the stream's code on a local session in a
child process), runs a full dedup and late corrections of it on the server, leaves only the
template, and a second warm-up reuses that template; nothing outside its folder changes. A server
that does not answer is logged and the process still exits 0 at once.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from tidemark.base.logs import read_log_lines
from tidemark.devstack import connect_warmup, process


def run_warmup(folder: str, url: str, corrections: int, timeout: float = 600) -> list[dict]:
    """The warm-up's process as `up` starts it (warm-up on); its structured log lines."""
    env = {**os.environ, connect_warmup.WARMUP_ENV: "1"}
    proc = subprocess.run(
        connect_warmup.argv(folder, url, corrections=corrections),
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return read_log_lines(proc.stderr + proc.stdout)


def tree(root: str) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root) for f in files}


def summary(lines: list[dict]) -> dict:
    return next(line for line in lines if line["event"] == "connect warm-up ended")


def test_an_unreachable_server_is_logged_and_the_warmup_exits_at_once(tmp_path):
    folder = str(tmp_path / "warmup")
    url = f"sc://127.0.0.1:{process.free_port()}"
    lines = run_warmup(folder, url, corrections=1, timeout=60)
    failed = [line for line in lines if line["event"].startswith("connect warm-up failed")]
    assert failed, lines
    assert "no Spark Connect server listens" in failed[0]["error"]
    assert "error" in summary(lines)
    assert os.listdir(folder) == []  # nothing built, no scratch lake left


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_warmup_corrects_a_scratch_lake_on_a_real_server_and_keeps_only_its_template(
    tmp_path, spark_connect_server
):
    home = tmp_path / "home"  # a stack's home: its lake beside the server's folder
    lake = home / "lake"
    lake.mkdir(parents=True)
    (lake / "marker.txt").write_text("the real lake")
    server = spark_connect_server  # the pytest worker's (tests/conftest.py); the folder is this home's
    folder = connect_warmup.scratch_folder(str(home / "spark-connect"))
    first = run_warmup(folder, server.url, corrections=1)
    done = summary(first)
    assert "error" not in done, first
    assert "built_s" in done  # the first warm-up built the template
    assert len(done["corrections_s"]) == 1
    dedups = [line for line in first if line["event"] == "dedup published"]
    assert [line["mode"] for line in dedups][-2:] == ["full", "incremental"], dedups
    assert all(line.get("warmup") is True for line in first if line.get("component") != "stream"), first
    assert sorted(os.listdir(folder)) == ["template", "template.json"]  # the scratch lake is gone

    again = run_warmup(folder, server.url, corrections=1)  # a restart: the template is reused
    assert "built_s" not in summary(again), again
    assert "error" not in summary(again), again
    assert [line["mode"] for line in again if line["event"] == "dedup published"] == ["full", "incremental"]
    assert sorted(os.listdir(folder)) == ["template", "template.json"]
    assert tree(str(lake)) == {"marker.txt"}  # the real lake untouched
    assert sorted(os.listdir(home)) == ["lake", "spark-connect"]
