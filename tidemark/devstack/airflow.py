"""A local Airflow 3 for tests and `tidemark up`.

The api-server, scheduler and dag-processor run as three processes (each in its own process group),
on 127.0.0.1, SQLite by default, LocalExecutor.

    server = AirflowServer(home, env={"TIDEMARK_LAKE": lake}).start()
    server.url, server.username, server.password     # REST: POST {url}/auth/token
    server.stop()

Choices, and why:
- Separate processes rather than `airflow standalone`: each can be stopped and restarted alone
  (the end-to-end test stops Airflow while notices keep coming), and the scheduler runs with
  --skip-serve-logs, so no log server listens on all interfaces (the api-server reads task logs
  from the shared local AIRFLOW_HOME/logs instead). No triggerer: nothing here defers.
- Login: Airflow 3's simple auth manager (works offline, no extra package). We write its passwords
  file ourselves before the start (a random password, mode 0600), so nothing is generated or echoed
  into a log; AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS names the admin user.
- One JWT secret and the execution API URL are set explicitly for all processes: the LocalExecutor's
  task processes call the api-server's execution API, and tokens must verify across processes.
- AIRFLOW__CORE__PARALLELISM defaults to 2 (a Spark task is about 1 GB); DAGs are not paused at
  creation; the dag-processor lists the DAGs folder every 5 s.
- Short hops between dependent tasks (a dedup run with nothing new is a few seconds of Python
  around Airflow's scheduling; bench/noop_runs.py measures it). The scheduler sleeps
  [scheduler] scheduler_idle_sleep_time after a loop that queued nothing, and a finished task's
  downstream is only queued by the next loop: 0.2 s instead of 1 s on every hop, for a few percent
  of a core while idle. And the LocalExecutor's workers come from a forkserver that preloads the
  libraries the tasks import ([scheduler] mp_start_method = forkserver, mp_forkserver_preload,
  Airflow 3.3): each task process is a fork of a worker, so it no longer imports pyarrow, pyiceberg,
  pandas and Airflow's task runner, nor configures SQLAlchemy's mappers, itself (seconds per task
  on a loaded 2-core machine; tidemark/devstack/task_preload.py).
- A migrated SQLite database can be copied instead of migrated: with TIDEMARK_AIRFLOW_DB_CACHE
  set to a folder, the first `airflow db migrate` of an Airflow version leaves a copy there and
  every later SQLite home starts from that copy (8-15 s of migration each; the test suite starts
  a dozen Airflows and sets it for its run, tests/conftest.py). A fresh database is the same
  whatever the home: tables, the default pool, the log templates.
- The venv's bin/ goes first on PATH, so SparkSubmitOperator finds spark-submit and the Python
  that has tidemark installed.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import secrets
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterable
from typing import Any

import requests

from tidemark.base import names
from tidemark.base.polling import wait_for
from tidemark.devstack import process
from tidemark.orchestration.airflow_api import RUN_ENDED, AirflowClient, AirflowError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DAGS_FOLDER = os.path.join(REPO, "dags")
COMPONENTS = ("api-server", "scheduler", "dag-processor")
# The scheduler's sleep after a loop with nothing to queue: 0.2 s instead of Airflow's 1 s.
SCHEDULER_IDLE_SLEEP_S = "0.2"
# How long a task's supervisor may sleep between two looks at its task process (Airflow's [workers]
# min_heartbeat_interval, default 5 s; also how often a running task heartbeats). The supervisor
# learns of the exit at once when the process's last log socket closes after it has been reaped;
# when the sockets close first (the exit still under way), it sleeps its whole poll before it
# looks again: in a freshness run, 32 of 120 task processes ended 5.0 s after their last log line,
# each a hop of a DAG run (a skipped dedup's run took 5-7 s instead of ~1). 1 s bounds that wait,
# for a heartbeat per running task per second.
WORKER_POLL_S = "1"
# What the LocalExecutor's forkserver imports before it forks the workers: Airflow and the executor
# (each worker runs them), then the libraries the tasks import (tidemark.devstack.task_preload).
TASK_PRELOAD = ("airflow", "airflow.executors.local_executor", "tidemark.devstack.task_preload")


def spark_connection_uri(master: str = "local[*]") -> str:
    """AIRFLOW_CONN_SPARK_DEFAULT for SparkSubmitOperator: JSON form, so local[*] needs no escaping."""
    return json.dumps({"conn_type": "spark", "host": master, "extra": {"deploy-mode": "client"}})


class AirflowServer:
    """Airflow's api-server, scheduler and dag-processor on 127.0.0.1, their files under `home`."""

    def __init__(
        self,
        home: str,
        port: int | None = None,
        db_url: str | None = None,
        dags_folder: str = DAGS_FOLDER,
        env: dict[str, str] | None = None,
        username: str = "admin",
        parallelism: int = 2,
        spark_master: str = "local[*]",
        api_workers: int | None = None,
        db_migrated: bool = False,
    ):
        """An Airflow on `port` (a free one by default) with its metadata at `db_url` (SQLite by default).

        `env` is added to every Airflow process's environment; `parallelism` caps running tasks;
        `spark_master` is the Spark connection's master; `db_migrated` says the database at `db_url`
        is already migrated by this Airflow version (a copy of one that was), so `airflow db migrate`
        is not run.
        """
        self.home = os.path.abspath(home)
        self.port = port or process.free_port()
        self.db_url = db_url or f"sqlite:///{os.path.join(self.home, 'airflow.db')}"
        self.dags_folder = dags_folder
        self.extra_env = dict(env or {})
        self.username = username
        self.parallelism = parallelism
        self.spark_master = spark_master
        self.url = f"http://127.0.0.1:{self.port}"
        # api-server worker processes: one on SQLite (a second only adds writers waiting on its
        # single lock), two on PostgreSQL, which takes concurrent writers: a burst of trigger POSTs
        # is then served by both cores (BENCHMARKS.md section 2).
        self.api_workers = api_workers or (2 if self.db_url.startswith("postgresql") else 1)
        self.db_migrated = db_migrated
        self.managed: dict[str, process.Managed] = {}
        self.timings: dict[str, float] = {}

    # -- configuration ------------------------------------------------------------------------

    @property
    def passwords_file(self) -> str:
        """The simple auth manager's passwords file (mode 0600)."""
        return os.path.join(self.home, "simple_auth_manager_passwords.json")

    def _secret(self, name: str) -> str:
        """A random secret kept in the home, so a restart keeps tokens and logins valid."""
        path = os.path.join(self.home, f".{name}")
        if not os.path.exists(path):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_urlsafe(32))
        with open(path) as handle:
            return handle.read().strip()

    def environment(self) -> dict[str, str]:
        """The environment every Airflow process (and an `airflow` CLI call) needs."""
        venv_bin = os.path.dirname(sys.executable)
        env = {
            "AIRFLOW_HOME": self.home,
            "AIRFLOW__CORE__DAGS_FOLDER": self.dags_folder,
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": str(self.parallelism),
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__AUTH_MANAGER": "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{self.username}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": self.passwords_file,
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.db_url,
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__API__WORKERS": str(self.api_workers),
            "AIRFLOW__API_AUTH__JWT_SECRET": self._secret("jwt_secret"),
            "AIRFLOW__API__SECRET_KEY": self._secret("api_secret_key"),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "30",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            # Latency between dependent tasks (see the module): a loop that queued nothing sleeps
            # this long before it looks at finished tasks again (default 1 s, on every hop).
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": SCHEDULER_IDLE_SLEEP_S,
            # A task's end seen within a second, not up to 5 s later (see WORKER_POLL_S).
            "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": WORKER_POLL_S,
            # LocalExecutor workers forked from a forkserver that imported the tasks' libraries
            # once: each task process (a fork of a worker) starts with them loaded.
            "AIRFLOW__SCHEDULER__MP_START_METHOD": "forkserver",
            "AIRFLOW__SCHEDULER__MP_FORKSERVER_PRELOAD": ",".join(TASK_PRELOAD),
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(process.free_port()),
            "AIRFLOW_CONN_SPARK_DEFAULT": spark_connection_uri(self.spark_master),
            "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
            # spark-submit from a task binds its driver ports to loopback too (local stack only).
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "TIDEMARK_PYTHON": sys.executable,
            # This Airflow's REST API for its own tasks (tidemark/orchestration/airflow_api.py for_tasks): the
            # per-date triggers with a partition_key and the asset events of the outbox.
            "AIRFLOW_CONN_TIDEMARK_AIRFLOW_API": json.dumps(
                {"conn_type": "http", "host": self.url, "login": self.username, "password": self.password}
            ),
        }
        env.update(self.extra_env)
        return env

    @property
    def password(self) -> str:
        """The admin's password, made on first use."""
        self._write_passwords()
        with open(self.passwords_file) as handle:
            passwords: dict[str, str] = json.load(handle)  # written by _write_passwords
        return passwords[self.username]

    def _write_passwords(self) -> None:
        os.makedirs(self.home, exist_ok=True)
        if os.path.exists(self.passwords_file):
            return  # a restart keeps the password
        fd = os.open(self.passwords_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump({self.username: secrets.token_urlsafe(18)}, handle)

    def cli(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        """Run `airflow <args>` against this home (e.g. `dags test`)."""
        return subprocess.run(
            [os.path.join(os.path.dirname(sys.executable), "airflow"), *args],
            env={**os.environ, **self.environment()},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    # -- lifecycle ----------------------------------------------------------------------------

    def migrate(self) -> None:
        """Create or upgrade the metadata database (`airflow db migrate`).

        Nothing to do for a database made `db_migrated`. A new SQLite database is copied from
        TIDEMARK_AIRFLOW_DB_CACHE when that folder holds one migrated by this Airflow version (and
        left there by the first migration).
        """
        started = time.monotonic()
        if self.db_migrated:
            self.timings["db_migrate_s"] = 0.0
            return
        cached = self._cached_database()
        if cached is not None and os.path.exists(cached) and not os.path.exists(self._sqlite_path()):
            shutil.copyfile(cached, self._sqlite_path())
            self.timings["db_migrate_s"] = round(time.monotonic() - started, 1)
            return
        result = self.cli("db", "migrate", timeout=300)
        if result.returncode != 0:
            raise RuntimeError(f"airflow db migrate failed:\n{result.stdout[-2000:]}{result.stderr[-3000:]}")
        if cached is not None and not os.path.exists(cached):
            self._keep_copy(cached)
        self.timings["db_migrate_s"] = round(time.monotonic() - started, 1)

    def _sqlite_path(self) -> str:
        return self.db_url.removeprefix("sqlite:///")

    def _cached_database(self) -> str | None:
        """Where a migrated database of this Airflow version is kept, or None (no cache, or not SQLite)."""
        folder = os.environ.get("TIDEMARK_AIRFLOW_DB_CACHE")
        if not folder or not self.db_url.startswith("sqlite:///"):
            return None
        # The installed distribution's version: importing airflow here would configure it.
        return os.path.join(folder, f"airflow-{importlib.metadata.version('apache-airflow')}.db")

    def _keep_copy(self, cached: str) -> None:
        """Copy the freshly migrated database to `cached` whole.

        SQLite's backup, then a rename: homes copying it meanwhile see no file or all of it.
        """
        os.makedirs(os.path.dirname(cached), exist_ok=True)
        partial = f"{cached}.{os.getpid()}.partial"
        with (
            contextlib.closing(sqlite3.connect(self._sqlite_path())) as source,
            contextlib.closing(sqlite3.connect(partial)) as copy,
        ):
            source.backup(copy)
        os.replace(partial, cached)

    def start(self, timeout: float = 180, components: Iterable[str] = COMPONENTS) -> AirflowServer:
        """Start the `components` not running yet (migrating the database once) and wait until healthy."""
        components = tuple(components)
        os.makedirs(self.home, exist_ok=True)
        self._write_passwords()
        if not os.path.exists(os.path.join(self.home, ".migrated")):
            self.migrate()
            open(os.path.join(self.home, ".migrated"), "w").close()
        started = time.monotonic()
        airflow = os.path.join(os.path.dirname(sys.executable), "airflow")
        argv = {
            "api-server": [
                airflow,
                "api-server",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--workers",
                str(self.api_workers),
            ],
            "scheduler": [airflow, "scheduler", "--skip-serve-logs"],
            "dag-processor": [airflow, "dag-processor"],
        }
        env = self.environment()
        for name in components:
            if name in self.managed and self.managed[name].alive():
                continue
            managed = process.start(
                f"airflow-{name}",
                argv[name],
                os.path.join(self.home, "logs", f"{name}.out"),
                env=env,
                cwd=self.home,
                url=self.url if name == "api-server" else "",
            )
            self.managed[name] = managed
            process.write_pidfile(self.pidfile(name), managed)
        process.wait_until(lambda: self._healthy(components), timeout, "Airflow", self.managed.get("api-server"))
        self.timings["start_s"] = round(time.monotonic() - started, 1)
        return self

    def pidfile(self, name: str) -> str:
        """The pid file of component `name`, for another process to stop it."""
        return os.path.join(self.home, "run", f"{name}.pid")

    def check_running(self) -> None:
        """Raise RuntimeError, with the end of its log, if a component this object started has exited.

        A wait on DAG runs calls it to end there instead of at its timeout: a dead scheduler queues nothing.
        """
        for managed in self.managed.values():
            if not managed.alive():
                raise RuntimeError(f"{managed.name} exited; see {managed.log_path}:\n{process.tail(managed.log_path)}")

    def _healthy(self, components: Iterable[str]) -> bool:
        self.check_running()
        health: dict[str, Any] = requests.get(f"{self.url}/api/v2/monitor/health", timeout=2).json()
        wanted = {"api-server": "metadatabase", "scheduler": "scheduler", "dag-processor": "dag_processor"}
        return all(health.get(wanted[c], {}).get("status") == "healthy" for c in components)

    def stop(self, components: Iterable[str] = COMPONENTS) -> None:
        """Stop the `components` (and the task processes the scheduler started), the scheduler first."""
        # The scheduler first: it owns the LocalExecutor's workers. Each task process runs in a
        # process group of its own (measured: `airflow worker -- <ti id>` calls setsid), so its
        # spark-submit JVM would outlive the scheduler's group: end those groups too.
        for name in sorted(components, key=lambda c: c != "scheduler"):
            managed = self.managed.pop(name, None) or process.read_pidfile(self.pidfile(name))
            if managed is not None:
                task_groups = process.descendant_groups(managed.pid)
                process.stop(managed)
                for pgid in task_groups:
                    process.stop_group(pgid)
                with contextlib.suppress(FileNotFoundError):
                    os.remove(self.pidfile(name))

    def client(self) -> AirflowClient:
        """A REST client logged in as the admin (cloud_function's client)."""
        return AirflowClient(self.url, "password", self.username, self.password)

    def wait_for_dag(self, dag_id: str | None = None, timeout: float = 120) -> dict[str, Any]:
        """Wait until the dag-processor has parsed `dag_id` (default names.DAG_ID); returns the DAG's JSON.

        Fails on an import error instead of waiting it out.
        """
        wanted = dag_id or names.get("DAG_ID")
        client = self.client()
        found: dict[str, Any] = {}

        def parsed() -> bool:
            errors = client.import_errors()
            if errors:
                raise RuntimeError(f"DAG import errors: {errors}")
            found.update(client.get_dag(wanted) or {})
            return bool(found)

        # RuntimeError (an import error) ends the wait; an api-server still busy is "not yet".
        wait_for(
            parsed,
            timeout,
            f"DAG {wanted} (parsed)",
            interval=1,
            not_yet=(requests.RequestException, AirflowError, ValueError),
            detail=lambda: "; see " + self.managed.get("dag-processor", process.Managed("", 0, "")).log_path,
        )
        return found

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 900) -> str:
        """Wait until DAG run `run_id` of `dag_id` ends (success or failed); its state.

        Every poll also checks this object's processes (check_running): a scheduler that exited
        ends the wait at once with its log's end, where its queued runs would wait out `timeout`.
        """
        client = self.client()

        def ended() -> dict[str, Any] | None:
            run = client.get_dag_run(dag_id, run_id)
            return run if run and run["state"] in RUN_ENDED else None

        run = wait_for(ended, timeout, f"{dag_id} run {run_id} to finish", interval=2.0, abort=self.check_running)
        return str(run["state"])

    def wait_for_runs_ended(self, dag_id: str, timeout: float = 900) -> list[dict[str, Any]]:
        """Wait until every run of `dag_id` has ended (as wait_for_run); the runs."""
        client = self.client()

        def every_run_ended() -> list[dict[str, Any]] | None:
            found = client.list_dag_runs(dag_id)
            return found if all(r["state"] in RUN_ENDED for r in found) else None

        ended: list[dict[str, Any]] = wait_for(
            every_run_ended, timeout, f"every {dag_id} run to end", interval=0.5, abort=self.check_running
        )
        return ended

    def __enter__(self) -> AirflowServer:
        """Start Airflow."""
        return self.start()

    def __exit__(self, *exc: object) -> None:
        """Stop Airflow."""
        self.stop()
