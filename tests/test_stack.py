"""`tidemark up | status | down` on a temporary state folder, every component real.

Checked: up starts every component and status reports each running with its URL (the Airflow UI
with its login); down stops exactly what up started (every recorded process group gone, every
recorded port free) and leaves alone a process whose pid a record names but which is not the one
up started; a second up resumes with the same ports, lake and checkpoint; bad options are refused."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest
import requests

from tidemark.devstack import postgres, process
from tidemark.devstack.stack import Record, SettingsConflict, Stack, port_states

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
TIDEMARK = os.path.join(os.path.dirname(sys.executable), "tidemark")


def cli(*args, timeout=900):
    return subprocess.run([TIDEMARK, *args], capture_output=True, text=True, timeout=timeout)


def group_alive(pgid: int) -> bool:
    """Any non-zombie member of the process group left?"""
    return bool(process.group_members(pgid))


def status_rows(home: str) -> list[dict]:
    proc = cli("status", "--home", home, "--json", timeout=120)
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


@pytest.fixture
def home(tmp_path):
    path = str(tmp_path / "state")
    yield path
    Stack(path).down()  # whatever a failed test left running, by its records only
    if Stack(path).settings() is not None and Stack(path).settings().metadata_db == "postgres":
        Stack(path).postgres().remove()  # its data folder lives outside the home when run as root


def test_up_status_down_stops_exactly_what_up_started_and_up_resumes(home, tmp_path):
    up = cli("up", "--home", home)
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
    stack = Stack(home)
    settings = stack.settings()
    records = stack.records()
    # exporter and prometheus: the SLO gauges and alerts (docs/metrics.md); prometheus when installed
    # postgres: Airflow's metadata database, where Debian's postgresql is installed (else SQLite)
    assert set(records) == {
        "pubsub",
        "spark-connect",
        "airflow-api-server",
        "airflow-scheduler",
        "airflow-dag-processor",
        "function",
        "stream",
        "exporter",
    } | ({"prometheus"} if shutil.which("prometheus") else set()) | ({"postgres"} if postgres.available() else set())
    assert all(r.alive() for r in records.values())
    assert settings.metadata_db == ("postgres" if postgres.available() else "sqlite")
    assert stack.airflow().db_url.startswith("postgresql" if postgres.available() else "sqlite")

    rows = status_rows(home)
    assert {r["component"]: r["state"] for r in rows} == {r["component"]: "running" for r in rows}, rows
    ui = next(r for r in rows if r["component"].startswith("airflow api-server"))
    assert ui["url"] == f"http://127.0.0.1:{settings.ports['airflow']}"
    user, _, password = ui["detail"].removeprefix("login ").partition(" / ")
    token = requests.post(f"{ui['url']}/auth/token", json={"username": user, "password": password}, timeout=30)
    assert token.status_code in (200, 201)
    assert token.json()["access_token"]
    assert all(port_states(settings).values())
    spark = next(r for r in rows if r["component"].startswith("spark connect"))
    assert spark["url"] == f"sc://127.0.0.1:{settings.ports['spark-connect']}"

    # A process that is not ours, under a record whose start time does not match: never signalled.
    bystander = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        fake = Record("function", bystander.pid, (process.started_at(bystander.pid) or 0) + 1, "/dev/null")
        real_function = stack.record("function")
        with open(os.path.join(stack.run_dir, "function.json"), "w") as handle:
            json.dump(fake.__dict__, handle)

        down = cli("down", "--home", home, timeout=600)
        assert down.returncode == 0, down.stderr[-3000:]
        assert bystander.poll() is None, "down signalled a process it did not start"
    finally:
        bystander.kill()
        bystander.wait()
    # The real function was only recorded in the file we overwrote: stop it by its own pid here.
    os.killpg(real_function.pid, 15)
    time.sleep(1)
    for name, record in records.items():
        if name != "function":
            assert not group_alive(record.pid), f"{name} (pgid {record.pid}) still has live processes"
    deadline = time.monotonic() + 30
    while any(port_states(settings).values()) and time.monotonic() < deadline:
        time.sleep(1)
    assert not any(port_states(settings).values()), port_states(settings)
    assert os.listdir(stack.run_dir) == []
    assert {r["state"] for r in status_rows(home)} == {"stopped"}

    # Up again: same ports and folders, and it is all running again.
    again = cli("up", "--home", home)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert Stack(home).settings() == settings
    assert {r["state"] for r in status_rows(home)} == {"running"}
    assert cli("down", "--home", home, timeout=600).returncode == 0
    assert not any(port_states(settings).values())


def test_a_component_that_cannot_start_stops_what_up_started_beside_it(home):
    """Airflow's port is taken: its chain fails at once while the Spark Connect server and the
    stream start in the chains beside it; up exits 1 naming Airflow, and nothing it started runs."""
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    try:
        port = blocker.getsockname()[1]
        proc = cli("up", "--home", home, "--airflow-port", str(port))
        assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert "airflow" in proc.stderr
        assert f"port {port}" in proc.stderr
        assert "spark-connect ready" in proc.stderr  # the chain beside it had started...
        assert "stream ready" in proc.stderr
        stack = Stack(home)
        assert stack.records() == {}  # ...and was stopped with the rest
        settings = stack.settings()
        assert not any(open_ for name, open_ in port_states(settings).items() if name != "airflow")
    finally:
        blocker.close()


def test_up_refuses_to_change_a_recorded_setting(tmp_path):
    home = str(tmp_path / "state")
    stack = Stack(home)
    stack.configure(lake=str(tmp_path / "lake-a"))
    proc = cli("up", "--home", home, "--lake", str(tmp_path / "lake-b"), timeout=120)
    assert proc.returncode == 2
    assert "lake" in proc.stderr
    assert "lake-b" in proc.stderr
    assert stack.records() == {}


def test_the_dedup_concurrency_is_a_setting_of_the_home_that_reaches_airflow(tmp_path):
    stack = Stack(str(tmp_path / "state"))
    assert stack.configure(dedup_concurrency=2).dedup_concurrency == 2
    assert stack.airflow().extra_env["TIDEMARK_DEDUP_CONCURRENCY"] == "2"
    with pytest.raises(SettingsConflict, match="dedup_concurrency=2"):
        stack.configure(dedup_concurrency=3)
    assert Stack(str(tmp_path / "other")).configure().dedup_concurrency == 1  # the default
    with pytest.raises(SettingsConflict, match="at least 1"):
        Stack(str(tmp_path / "third")).configure(dedup_concurrency=0)
    proc = cli("up", "--home", str(tmp_path / "fourth"), "--dedup-concurrency", "0", timeout=120)
    assert proc.returncode == 2
    assert "--dedup-concurrency: 0 is out of range" in proc.stderr
