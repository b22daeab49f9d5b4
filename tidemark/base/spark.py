"""One SparkSession builder for every Spark entry point (stream, dedup), local or on a cluster."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from tidemark.base import class_archive, pyspark_daemon

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def session_settings(shuffle_partitions: int | None = None) -> dict[str, str]:
    """The Spark settings every tidemark session runs with.

    Used by the builder, and as a Spark Connect server's --conf: a Connect session, and every
    newSession() of it, starts from the server's.
    """
    return {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(shuffle_partitions or os.environ.get("TIDEMARK_SHUFFLE_PARTITIONS", 8)),
        "spark.sql.sources.partitionOverwriteMode": "dynamic",
        "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.ui.showConsoleProgress": "false",
        "spark.ui.enabled": os.environ.get("TIDEMARK_SPARK_UI", "false"),
        "spark.driver.memory": os.environ.get("TIDEMARK_DRIVER_MEMORY", "2g"),
        # The driver keeps the history of finished jobs, stages and SQL executions even with the
        # UI off (1000 each by default); a stream runs ~15 jobs per micro-batch, so the default
        # history alone grew the heap for hours in bench/memory.py. Recent history is plenty.
        "spark.ui.retainedJobs": "100",
        "spark.ui.retainedStages": "200",
        "spark.sql.ui.retainedExecutions": "50",
    }


def build_session(
    app_name: str, master: str | None = None, shuffle_partitions: int | None = None, conf: dict[str, str] | None = None
) -> SparkSession:
    """Get or create the SparkSession. Under spark-submit the master comes from spark-submit.

    Timestamps are handled in UTC everywhere: event_date is the UTC date of a session's start.
    """
    from pyspark.sql import SparkSession  # pyspark is heavy: imported only when a session is built

    builder = SparkSession.builder.appName(app_name)
    # spark-submit sets spark.master in the environment of the driver; only default when alone.
    if not master and "SPARK_ENV_LOADED" not in os.environ and not os.environ.get("PYSPARK_SUBMIT_ARGS"):
        master = os.environ.get("TIDEMARK_SPARK_MASTER", "local[*]")
    if master:
        builder = builder.master(master)
    if master and master.startswith("local"):
        # The stream's input contract runs in Python workers (an Arrow UDF), which need this
        # interpreter's packages (pyarrow, tidemark), not whatever `python3` is first on the PATH.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = session_settings(shuffle_partitions)
    if master and master.startswith("local"):
        # Spark lists more than 32 input paths with a Spark job of one task per path (for a cluster
        # and an object store); locally that job only costs: 1.3-1.8 s for the 100 files of a
        # one-batch stream run (bench/stream_throughput.py's event log), against milliseconds for
        # the driver listing them itself.
        settings["spark.sql.sources.parallelPartitionDiscovery.threshold"] = "100000"
        # Python workers import pyspark from the installed package, not from Spark's zip, which
        # Python compiles from source in every daemon and worker (tidemark.base.pyspark_daemon).
        settings["spark.python.daemon.module"] = pyspark_daemon.MODULE
    settings.update(conf or {})
    if master:
        # The driver JVM is started below, here (not by spark-submit before this code runs): it
        # maps Spark's classes from the class archive when this Java and Spark have one.
        settings = class_archive.with_archive(settings)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("TIDEMARK_SPARK_LOG_LEVEL", "WARN"))
    return spark


# The settings a Connect client sets on its own session (runtime SQL settings); the others (memory,
# UI, history: static) belong to the server, which is started with all of session_settings().
CONNECT_DEFAULT_PORT = 15002  # Spark Connect's own default (spark.connect.grpc.binding.port)
_CONNECT_RUNTIME = (
    "spark.sql.session.timeZone",
    "spark.sql.shuffle.partitions",
    "spark.sql.sources.partitionOverwriteMode",
    "spark.sql.parquet.outputTimestampType",
)


def connect_session(url: str, app_name: str = "tidemark") -> SparkSession:
    """A new Spark Connect session on the server at `url` (sc://host:port[/;params]).

    A session of its own: its own temp views and settings. Only the client runs here (no JVM):
    tidemark.deduplication.dedup works unchanged on it (no sparkContext, RDD or _jvm use). pyspark
    then marks the whole process as Connect (SPARK_CONNECT_MODE_ENABLED in os.environ, inherited by
    child processes): use it in a process of its own, as the DAG's task does.
    """
    connect_address(url)
    return _connect(url, app_name)


def connect_address(url: str) -> tuple[str, int]:
    """(host, port) of a Spark Connect URL, sc://host[:port][/;params]; ValueError for any other scheme."""
    if not url.startswith("sc://"):
        raise ValueError(f"a Spark Connect URL starts with sc://, not {url.split('://')[0]!r}")
    parsed = urlparse("http://" + url.removeprefix("sc://"))
    return parsed.hostname or "localhost", parsed.port or CONNECT_DEFAULT_PORT


def _connect(url: str, app_name: str) -> SparkSession:
    from pyspark.sql import SparkSession  # pyspark is heavy: imported only when a session is built

    builder = SparkSession.builder.remote(url).appName(app_name)
    for key, value in session_settings().items():
        if key in _CONNECT_RUNTIME:
            builder = builder.config(key, value)
    # create(), not getOrCreate(): never the process's cached default session of another run.
    return builder.create()


def close_connect_session(spark: SparkSession) -> None:
    """Close a Spark Connect client and end its server-side session (its views and cache with it)."""
    # pyspark's Connect session reads this attribute in stop(), which takes no argument for it
    spark.release_session_on_close = True  # type: ignore[attr-defined]
    spark.stop()
