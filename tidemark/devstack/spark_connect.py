"""A warm Spark for the DAG's dedup: the Spark Connect server that ships in the pyspark package.

    server = SparkConnectServer(home, port=15002).start()
    server.url                      # sc://127.0.0.1:15002 (what a client connects to)
    server.airflow_connection()     # AIRFLOW_CONN_SPARK_DEFAULT naming it (conn_type spark_connect)
    server.stop()

Why: a spark-submit per DAG run pays a JVM start and Spark's fixed job costs every time (most of
a small correction's minute on a 2-core box); a Connect client connects in about a second and runs
the same tidemark.deduplication.dedup code, each run in its own server-side session (own temp views and SQL
settings), several at once.

How it runs: `$SPARK_HOME/sbin/start-connect-server.sh --wait` (SPARK_HOME = the installed pyspark
folder) in the foreground, in its own process group, so that it is stopped by group like the other
components; bound to 127.0.0.1 only, on a port chosen by the caller; started with the same settings
as every tidemark session (tidemark.base.spark.session_settings: UTC, shuffle partitions, ...), which
every Connect session, and every newSession() of one, starts from. SPARK_LOG_DIR, SPARK_PID_DIR and
the driver's scratch files live under `home`. Healthy = the gRPC port accepts connections.
"""

from __future__ import annotations

import json
import os
import sys

from tidemark.base import class_archive
from tidemark.base.spark import session_settings
from tidemark.devstack import process

START_TIMEOUT_S = 180.0


def spark_home() -> str:
    """The installed pyspark package's folder: a SPARK_HOME with sbin/ and jars/.

    Symlinks resolved, as pyspark resolves its own: the server's class path is then the one the
    class archive was built with (tidemark.base.class_archive), wherever the venv is reached from.
    """
    import pyspark  # heavy: only when a server is started

    return os.path.dirname(os.path.realpath(pyspark.__file__))


class SparkConnectServer:
    """A Spark Connect server on 127.0.0.1, its files under `home`."""

    def __init__(self, home: str, port: int | None = None, master: str = "local[2]"):
        """A server on `port` (a free one by default) running its driver on `master`."""
        self.home = os.path.abspath(home)
        self.port = port or process.free_port()
        self.master = master
        self.url = f"sc://127.0.0.1:{self.port}"
        self.log_path = os.path.join(self.home, "spark-connect.log")
        self.log_config = os.path.join(self.home, "conf", "log4j2.properties")
        self.managed: process.Managed | None = None

    def argv(self) -> list[str]:
        """The start script's command line, with tidemark's session settings as --conf."""
        settings = {
            **session_settings(),
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            # The driver's own ports (block manager, RPC) on loopback too.
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.host": "127.0.0.1",
            # A session no client has used for this long is released with its views and
            # cache (a killed task's, or the per-run newSession() tidemark.deduplication.dedup opens).
            "spark.connect.session.manager.defaultSessionTimeout": "15m",
            "spark.local.dir": os.path.join(self.home, "scratch"),
            "spark.sql.warehouse.dir": os.path.join(self.home, "warehouse"),
            # Its logging from our file, given to the JVM directly rather than as SPARK_CONF_DIR
            # (environment() says why), and Spark's classes from the class archive when this Java
            # and Spark have one (tidemark.base.class_archive): it started in 3.1-3.6 s instead of
            # 5.6-6.1 s and ran its first query in 3.3-3.6 s instead of 4.8-5.3 s.
            **class_archive.with_archive({class_archive.JAVA_OPTIONS: f"-Dlog4j2.configurationFile={self.log_config}"}),
        }
        argv = [os.path.join(spark_home(), "sbin", "start-connect-server.sh"), "--wait", "--master", self.master]
        for key, value in sorted(settings.items()):
            argv += ["--conf", f"{key}={value}"]
        return argv

    def environment(self) -> dict[str, str]:
        """The start script's environment (added to ours)."""
        return {
            "SPARK_HOME": spark_home(),
            # Spark's own conf folder (the pip package has none), not the server's: it heads the JVM's
            # class path, which must be the one the class archive was built with for the JVM to map it.
            "SPARK_CONF_DIR": os.path.join(spark_home(), "conf"),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": os.path.join(self.home, "logs"),
            "SPARK_PID_DIR": os.path.join(self.home, "run"),
            # Python workers, if a query ever needs one, get this interpreter and its packages.
            "PYSPARK_PYTHON": sys.executable,
            # spark-submit and java from the venv's PATH, as for the DAG's spark-submit.
            "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
        }

    def start(self, timeout: float = START_TIMEOUT_S) -> SparkConnectServer:
        """Start the server and wait until its gRPC port accepts connections (stopped again on failure)."""
        for sub in ("logs", "run", "scratch", "conf"):
            os.makedirs(os.path.join(self.home, sub), exist_ok=True)
        with open(self.log_config, "w") as handle:
            handle.write(_LOG4J2)
        if process.port_open(self.port):
            raise RuntimeError(f"port {self.port} is already in use; not starting a Spark Connect server there")
        self.managed = process.start(
            "spark-connect", self.argv(), self.log_path, env=self.environment(), cwd=self.home, url=self.url
        )
        try:
            process.wait_until(self.healthy, timeout, "the Spark Connect server", self.managed, interval=0.5)
        except BaseException:
            self.stop()
            raise
        return self

    def healthy(self) -> bool:
        """Whether the gRPC port accepts connections."""
        return process.port_open(self.port)

    def stop(self) -> None:
        """Stop the server's process group."""
        if self.managed is not None:
            process.stop(self.managed)
            self.managed = None

    def airflow_connection(self) -> str:
        """AIRFLOW_CONN_SPARK_DEFAULT for this server: the DAG's dedup then runs as its client."""
        return connection_json(self.port)

    def __enter__(self) -> SparkConnectServer:
        """Start the server."""
        return self.start()

    def __exit__(self, *exc: object) -> None:
        """Stop the server."""
        self.stop()


# WARN and above, plus the server's own start line: at INFO the server logs every session access.
_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.connect.name = org.apache.spark.sql.connect.service.SparkConnectServer
logger.connect.level = info
"""


def connection_json(port: int, host: str = "127.0.0.1") -> str:
    """An Airflow connection (JSON form) of type spark_connect.

    The Spark provider's SparkConnectHook builds sc://host:port from it.
    """
    return json.dumps({"conn_type": "spark_connect", "host": host, "port": int(port)})
