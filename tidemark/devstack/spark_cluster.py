"""A real Spark standalone cluster on loopback, from the pip-installed pyspark: one master, N workers.

    cluster = SparkStandalone(work_dir, workers=2).start()
    subprocess.run(cluster.submit_argv("streaming_job/submit.py", "stream", ...), env=cluster.env())
    cluster.stop()

Every daemon is a `spark-class` child in its own process group (tidemark.devstack.process), so
stopping the group also ends the executors a worker forked. Logs, pid files, worker scratch space
and local dirs all live under `work_dir`; every port (RPC and web UI) is a free one on 127.0.0.1,
never the defaults (the master UI's 8080 collides with Airflow and functions-framework).
Python jobs run in client deploy mode (standalone cluster mode does not support Python).
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
import zipfile
from typing import Any

from tidemark.base.polling import wait_for
from tidemark.devstack import process


def spark_home() -> str:
    """The pip-installed pyspark folder is a complete SPARK_HOME (bin/, jars/)."""
    import pyspark  # heavy: only when a cluster is started

    return os.environ.get("SPARK_HOME") or os.path.dirname(os.path.abspath(pyspark.__file__))


class WorkerDied(RuntimeError):
    """A daemon of the cluster exited while the cluster was starting."""


class SparkStandalone:
    """A Spark standalone master and `workers` workers on `host`, their files under `work_dir`."""

    def __init__(
        self,
        work_dir: str,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        host: str = "127.0.0.1",
        start_timeout: float = 120.0,
    ):
        """A cluster of `workers` workers of `cores` cores and `memory` each (not started yet)."""
        if workers < 1:
            raise ValueError("a cluster needs at least one worker")
        self.work_dir = os.path.abspath(work_dir)
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.host = host
        self.start_timeout = start_timeout
        self.port = 0
        self.webui_port = 0
        self._managed: list[process.Managed] = []

    @property
    def master_url(self) -> str:
        """spark://host:port of the started master."""
        if not self.port:
            raise RuntimeError("the cluster is not started")
        return f"spark://{self.host}:{self.port}"

    @property
    def webui_url(self) -> str:
        """The master's web UI."""
        return f"http://{self.host}:{self.webui_port}"

    def env(self) -> dict[str, str]:
        """Environment for the daemons and for spark-submit.

        Everything under work_dir, loopback only, and this interpreter (which has tidemark and its dependencies) for drivers and executors.
        """
        home = spark_home()
        return {
            **os.environ,
            "SPARK_HOME": home,
            "SPARK_LOG_DIR": os.path.join(self.work_dir, "logs"),
            "SPARK_PID_DIR": os.path.join(self.work_dir, "pids"),
            "SPARK_WORKER_DIR": os.path.join(self.work_dir, "work"),
            "SPARK_LOCAL_DIRS": os.path.join(self.work_dir, "local"),
            "SPARK_LOCAL_IP": self.host,
            "SPARK_CONF_DIR": os.path.join(self.work_dir, "conf"),  # empty: no stray spark-defaults
            "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
            "PYSPARK_DRIVER_PYTHON": os.environ.get("PYSPARK_DRIVER_PYTHON", sys.executable),
        }

    def start(self) -> SparkStandalone:
        """Start the master, then the workers; return once every worker is ALIVE (stopped on failure)."""
        env = self.env()
        for key in ("SPARK_LOG_DIR", "SPARK_PID_DIR", "SPARK_WORKER_DIR", "SPARK_LOCAL_DIRS", "SPARK_CONF_DIR"):
            os.makedirs(env[key], exist_ok=True)
        spark_class = os.path.join(spark_home(), "bin", "spark-class")
        self.port, self.webui_port = process.free_port(), process.free_port()
        try:
            master = process.start(
                "spark-master",
                [
                    spark_class,
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    self.host,
                    "--port",
                    str(self.port),
                    "--webui-port",
                    str(self.webui_port),
                ],
                os.path.join(env["SPARK_LOG_DIR"], "master.out"),
                env=env,
                cwd=self.work_dir,
                url=self.master_url,
            )
            self._managed.append(master)
            process.wait_until(lambda: self.status() is not None, self.start_timeout, "Spark master", master)
            for index in range(self.workers):
                work = os.path.join(env["SPARK_WORKER_DIR"], f"worker-{index}")
                os.makedirs(work, exist_ok=True)
                self._managed.append(
                    process.start(
                        f"spark-worker-{index}",
                        [
                            spark_class,
                            "org.apache.spark.deploy.worker.Worker",
                            self.master_url,
                            "--host",
                            self.host,
                            "--webui-port",
                            str(process.free_port()),
                            "--cores",
                            str(self.cores),
                            "--memory",
                            self.memory,
                            "--work-dir",
                            work,
                        ],
                        os.path.join(env["SPARK_LOG_DIR"], f"worker-{index}.out"),
                        env=env,
                        cwd=self.work_dir,
                    )
                )
            # Ready when every worker has registered with the master and is ALIVE.
            wait_for(
                self._all_workers_registered,
                self.start_timeout,
                f"{self.workers} Spark workers (registered)",
                detail=lambda: "\n" + self.log_tails(),
            )
        except BaseException:
            self.stop()
            raise
        return self

    def _all_workers_registered(self) -> bool:
        # A worker that died (bad --memory, no free port...) fails the start now, with its log,
        # instead of after the whole timeout.
        for managed in self._managed:
            if not managed.alive():
                raise WorkerDied(
                    f"{managed.name} exited while starting; see {managed.log_path}:\n{process.tail(managed.log_path)}"
                )
        return self.alive_workers() >= self.workers

    def status(self) -> dict[str, Any] | None:
        """The master's own JSON status (its web UI's /json/), or None while it is not up."""
        if not self.webui_port or not process.port_open(self.webui_port, self.host):
            return None
        # Straight to loopback, never through an HTTP proxy from the environment.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(f"{self.webui_url}/json/", timeout=5) as response:
            status: dict[str, Any] = json.load(response)
        return status

    def alive_workers(self) -> int:
        """Workers the master lists as ALIVE (0 while its UI does not answer)."""
        try:
            status = self.status() or {}
        except (OSError, ValueError):  # the master's UI is busy or restarting
            return 0
        return sum(1 for worker in status.get("workers", []) if worker.get("state") == "ALIVE")

    def submit_argv(
        self, app: str, *app_args: str, py_files: str | None = None, conf: dict[str, str] | None = None
    ) -> list[str]:
        """A spark-submit command line for this cluster (client deploy mode)."""
        argv = [
            os.path.join(spark_home(), "bin", "spark-submit"),
            "--master",
            self.master_url,
            "--deploy-mode",
            "client",
            "--conf",
            f"spark.driver.host={self.host}",
            "--conf",
            f"spark.driver.bindAddress={self.host}",
            "--conf",
            "spark.ui.enabled=false",
            # A standalone worker offers exactly --memory to executors (the JVM overhead is
            # not counted), so one executor per worker takes all of it.
            "--conf",
            f"spark.executor.memory={self.memory}",
        ]
        for key, value in (conf or {}).items():
            argv += ["--conf", f"{key}={value}"]
        if py_files:
            argv += ["--py-files", py_files]
        return argv + [app, *app_args]

    def log_tails(self, lines: int = 20) -> str:
        """The tail of every daemon's log, for a failing test's message."""
        return "\n".join(f"--- {m.name} ({m.log_path})\n{process.tail(m.log_path, lines)}" for m in self._managed)

    def stop(self) -> None:
        """Stop every daemon, workers first."""
        # Workers first, so the master does not spend its shutdown re-scheduling their executors.
        for managed in reversed(self._managed):
            process.stop(managed)
        self._managed.clear()

    def __enter__(self) -> SparkStandalone:
        """Start the cluster."""
        return self.start()

    def __exit__(self, *exc: object) -> None:
        """Stop the cluster."""
        self.stop()


# The packages a driver or executor needs to import tidemark's jobs (dedup_sql holds .sql files,
# which importlib.resources reads from inside the zip too).
JOB_PACKAGES = ("tidemark", "streaming_job", "dedup_sql")


def package_zip(dest: str, root: str | None = None) -> str:
    """Zip the job's Python packages for `spark-submit --py-files`: what a cluster's nodes import.

    On Dataproc, ship the tidemark wheel instead (docs/production.md).
    """
    root = root or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in JOB_PACKAGES:
            for folder, dirs, files in os.walk(os.path.join(root, package)):
                dirs[:] = [d for d in dirs if d != "__pycache__"]
                for name in files:
                    if name.endswith((".py", ".sql", ".json")):
                        path = os.path.join(folder, name)
                        archive.write(path, os.path.relpath(path, root))
    return dest
