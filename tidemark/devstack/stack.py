"""The whole system on one machine: `tidemark up | status | down`, and the demo's stack.

    stack = Stack(".tidemark")
    stack.up(say=print)        # emulator, Spark Connect server, Airflow (api-server, scheduler,
                               # dag-processor), function, stream, exporter, Prometheus
    stack.status()             # one row per component: state, pid, URL, log
    stack.down()               # stops exactly what up started, by process id

Everything lives under one state folder (`home`, default ./.tidemark):

    stack.json            ports, project, lake, landing, checkpoint, archive, Airflow DB URL: fixed at the
                          first `up` and reused, so `down` then `up` resumes at the same addresses
    run/<process>.json    one record per started process group: pid, its kernel start time, log
    logs/                 stream.log, function.log, spark-connect-warmup.log (Airflow's under
                          airflow/logs, the emulator's under pubsub/)
    landing/ archive/ lake/ checkpoint/ airflow/ pubsub/ function/ spark-connect/

Why a record holds the start time: `down` may run long after `up`; a pid alone could by then
belong to an unrelated process. A process is only signalled when its pid AND start time match.

Order matters on the way up and on the way down. Up: the emulator, its topics and the push
subscription first; then three chains side by side (the Spark Connect server; PostgreSQL, Airflow
and the function; the stream), then the exporter and Prometheus. Down: the stream first (SIGTERM to
its Python process only, so that it finishes its micro-batch and flushes owed notices before its
JVM goes), then the function, Airflow, its PostgreSQL, and the emulator last. Airflow's metadata
database is a PostgreSQL the stack starts (Debian's package, tidemark/devstack/postgres.py; a burst
of notices then triggers runs without waiting on SQLite's single writer, BENCHMARKS.md section 2)
when it is installed at the first `up`, else SQLite; `--db-url` names a database of your own
instead. The choice is fixed in stack.json.
The Spark Connect server (tidemark/devstack/spark_connect.py) is the DAG's warm Spark: Airflow gets
AIRFLOW_CONN_SPARK_DEFAULT of type spark_connect naming it, so each dedup run is a client of it
instead of a spark-submit (`tidemark up --spark-submit` keeps the spark-submit per run). It starts
beside Airflow and stops after it. When `up` started it, `up` starts its warm-up last, in the
background (tidemark/demo/correction_warmup.py: late corrections of a scratch lake;
TIDEMARK_CONNECT_WARMUP=0 turns it off), recorded as spark-connect-warmup and stopped by `down` if
still running. The emulator keeps topics in memory, so every `up` recreates them (idempotently);
notices the stream owed while it was down are in the lake's outbox and are published when it starts
again.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, TypedDict

import requests
import tenacity

from tidemark.base import names
from tidemark.base.logs import read_log_lines
from tidemark.devstack import connect_warmup, postgres, process
from tidemark.devstack import pubsub_emulator as ps
from tidemark.devstack.airflow import AirflowServer
from tidemark.devstack.function import FunctionServer
from tidemark.devstack.postgres import PostgresServer
from tidemark.devstack.prometheus import PrometheusServer
from tidemark.devstack.prometheus import binary as prometheus_binary
from tidemark.devstack.pubsub_emulator import PubSubEmulator
from tidemark.devstack.spark_connect import SparkConnectServer, connection_json
from tidemark.notices import corrected_notice
from tidemark.ops import function_bundle
from tidemark.session import rules_record
from tidemark.store.lake import Lake
from tidemark.store.locations import File, Root

if TYPE_CHECKING:
    from typing_extensions import Unpack

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPONENTS = ("pubsub", "spark-connect", "airflow", "function", "stream", "exporter", "prometheus")
# Process records, in the order `down` stops them (the observers first: they only read).
STOP_ORDER = (
    "prometheus",
    "exporter",
    "stream",
    "function",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-api-server",
    "postgres",
    "spark-connect-warmup",
    "spark-connect",
    "pubsub",
)
# Records of processes that end by themselves: `down` removes a finished one's record silently.
ONE_SHOT = frozenset({"spark-connect-warmup"})
STREAM_GRACE_S = 120.0  # a micro-batch under load plus the notice flush (30 s)
Step = tuple[str, Callable[[], None]]  # a component's name and what starts it


class SettingsConflict(ValueError):
    """Options of `tidemark up` that the state folder or the machine refuses: nothing was started."""


class StackError(RuntimeError):
    """A component failed: says which one and where its log is."""

    def __init__(self, component: str, message: str, log_path: str | None = None):
        """`component` failed with `message`; `log_path` says where to look."""
        self.component = component
        self.log_path = log_path
        where = f" (log: {log_path})" if log_path else ""
        super().__init__(f"{component}: {message}{where}")


@dataclass
class StackSettings:
    """What the first `up` fixes; stored in stack.json."""

    lake: str
    landing: str
    checkpoint: str
    project: str
    db_url: str | None = None
    # Airflow's metadata database when db_url is not given: "postgres" (the stack's own, started
    # and stopped with it) or "sqlite" (PostgreSQL not installed; homes from before it existed).
    metadata_db: str = "sqlite"
    ports: dict[str, int] = field(default_factory=dict)
    trigger_interval: str = "5s"
    master: str = "local[2]"
    notice_coalesce: str | None = None
    # Task processes at once, and runs of tidemark_dedup at once (different dates, or a date's
    # queued runs, which then skip in seconds). With Spark Connect a dedup task is a light client
    # (the Spark work is in the one server), so 4 fit on 2 cores; a spark-submit per run is a JVM
    # of about 1 GB each, so 2.
    airflow_parallelism: int = 4
    max_active_runs: int = 4
    # The DAG's dedup as a client of a warm Spark Connect server (False: a spark-submit per run).
    spark_connect: bool = True
    # Dedup tasks at once (TIDEMARK_DEDUP_CONCURRENCY): one on 2 cores, so that queued runs of a
    # date wait for the first and then find nothing new, instead of recomputing it side by side.
    dedup_concurrency: int = 1
    # The stream's --archive (docs/input-contract.md, "A bounded landing"): read files leave the
    # landing. A new home gets <home>/archive; None (homes from before): the landing keeps them.
    archive: str | None = None

    @property
    def topic(self) -> str:
        """The availability topic's path in the emulator's project."""
        return names.topic_path(self.project, names.get("AVAILABILITY_TOPIC"))

    @property
    def corrected_topic(self) -> str:
        """The corrected topic's path in the emulator's project."""
        return names.topic_path(self.project, names.get("CORRECTED_TOPIC"))


# ---- process records ----------------------------------------------------------------------------


class UpOptions(TypedDict, total=False):
    """The options of `Stack.up` that it passes on to `Stack.configure`."""

    lake: str | None
    landing: str | None
    checkpoint: str | None
    db_url: str | None
    ports: dict[str, int | None] | None
    project: str | None
    trigger_interval: str | None
    notice_coalesce: str | None
    spark_connect: bool | None
    dedup_concurrency: int | None


class Stopped(TypedDict):
    """What `down` did to one process record."""

    component: str
    pid: int
    stopped: bool  # False: it was not running (only its stale record was removed)
    seconds: float


@dataclass
class Record:
    """One process group a stack started: with its start time, it names that process and no other."""

    name: str
    pid: int
    started: float | None  # process.started_at: with the pid, tells our process from a reused pid
    log_path: str
    url: str = ""

    def alive(self) -> bool:
        """Still the process we started (same pid, same start time), and not a zombie."""
        return process.pid_alive(self.pid) and process.started_at(self.pid) == self.started


# ---- the stack ---------------------------------------------------------------------------------


class Stack:
    """The local stack whose state lives in `home`: `up`, `status` and `down`."""

    def __init__(self, home: str = ".tidemark"):
        """The stack of state folder `home` (nothing is read or started yet)."""
        self.home = os.path.abspath(home)
        self.run_dir = os.path.join(self.home, "run")
        self.logs_dir = os.path.join(self.home, "logs")
        self.state_path = os.path.join(self.home, "stack.json")
        self._state = Root(self.home).file("stack.json")
        self.timings: dict[str, float] = {}

    # -- settings ---------------------------------------------------------------------------------

    def settings(self) -> StackSettings | None:
        """The settings the first `up` stored; None before it."""
        payload = self._state.read_json()
        return None if payload is None else StackSettings(**payload)

    def required_settings(self) -> StackSettings:
        """The stored settings, which every start step after `configure` needs."""
        settings = self.settings()
        if settings is None:
            raise StackError("stack", f"no settings in {self.state_path}: run `tidemark up` first")
        return settings

    def configure(
        self,
        lake: str | None = None,
        landing: str | None = None,
        checkpoint: str | None = None,
        db_url: str | None = None,
        ports: dict[str, int | None] | None = None,
        project: str | None = None,
        trigger_interval: str | None = None,
        notice_coalesce: str | None = None,
        spark_connect: bool | None = None,
        dedup_concurrency: int | None = None,
    ) -> StackSettings:
        """Settings of this home: stored ones, completed (never silently changed) by the options."""
        if dedup_concurrency is not None and dedup_concurrency < 1:
            raise SettingsConflict(f"dedup concurrency must be at least 1, not {dedup_concurrency}")
        given: dict[str, Any] = {
            "lake": _abs(lake),
            "landing": _abs(landing),
            "checkpoint": _abs(checkpoint),
            "db_url": db_url,
            "project": project,
            "trigger_interval": trigger_interval,
            "notice_coalesce": notice_coalesce,
            "spark_connect": spark_connect,
            "dedup_concurrency": dedup_concurrency,
        }
        current = self.settings()
        if current is None:
            current = StackSettings(
                lake=given["lake"] or os.path.join(self.home, "lake"),
                landing=given["landing"] or os.path.join(self.home, "landing"),
                checkpoint=given["checkpoint"] or os.path.join(self.home, "checkpoint"),
                project=project or names.get("PROJECT"),
                db_url=db_url,
                trigger_interval=trigger_interval or "5s",
                notice_coalesce=notice_coalesce,
                spark_connect=True if spark_connect is None else spark_connect,
                archive=os.path.join(self.home, "archive"),
            )
            if dedup_concurrency is not None:
                current.dedup_concurrency = dedup_concurrency
            current.metadata_db = "postgres" if db_url is None and postgres.available() else "sqlite"
            if not current.spark_connect:
                current.airflow_parallelism = current.max_active_runs = 2
        else:
            for key, value in given.items():
                if value is not None and value != getattr(current, key):
                    raise SettingsConflict(
                        f"{self.home} was set up with {key}={getattr(current, key)!r}, not "
                        f"{value!r}; run `tidemark down` and use another --home to change it"
                    )
        for component, port in (ports or {}).items():
            if port is None:
                continue
            if current.ports.get(component) not in (None, port):
                raise SettingsConflict(f"{self.home} uses port {current.ports[component]} for {component}, not {port}")
            current.ports[component] = int(port)
        for component in (
            ("pubsub", "airflow", "function", "stream-metrics", "exporter", "prometheus")
            + (("spark-connect",) if current.spark_connect else ())
            + (("postgres",) if current.metadata_db == "postgres" else ())
        ):
            current.ports.setdefault(component, process.free_port())
        os.makedirs(self.home, exist_ok=True)
        self._state.write_json_atomic(current.__dict__)
        return current

    # -- records ----------------------------------------------------------------------------------

    def _record_path(self, name: str) -> File:
        return Root(self.run_dir).file(f"{name}.json")

    def _write_record(self, managed: process.Managed, name: str) -> Record:
        record = Record(name, managed.pid, process.started_at(managed.pid), managed.log_path, managed.url)
        os.makedirs(self.run_dir, exist_ok=True)
        self._record_path(name).write_json_atomic(record.__dict__)
        return record

    def record(self, name: str) -> Record | None:
        """The record of process `name`; None when there is none (or it is unreadable)."""
        try:
            with open(self._record_path(name)) as handle:
                return Record(**json.load(handle))
        except (FileNotFoundError, ValueError, TypeError):
            return None

    def records(self) -> dict[str, Record]:
        """Every process record, in stop order."""
        return {name: r for name in STOP_ORDER if (r := self.record(name)) is not None}

    def running(self) -> dict[str, Record]:
        """The recorded processes still running."""
        return {name: r for name, r in self.records().items() if r.alive()}

    def exited(self) -> dict[str, Record]:
        """The recorded servers that are no longer running: what a wait on the stack fails on.

        A task `up` starts (ONE_SHOT: the Connect warm-up) ends by itself; its end is not an exit.
        """
        return {name: r for name, r in self.records().items() if name not in ONE_SHOT and not r.alive()}

    # -- up ---------------------------------------------------------------------------------------

    def up(
        self,
        say: Callable[[str], None] = lambda _: None,
        timeout: float = 600,
        rules: dict[str, Any] | None = None,
        **options: Unpack[UpOptions],
    ) -> StackSettings:
        """Start whatever is not running yet; returns the settings.

        On failure, stops what this call started and raises StackError naming the component and its
        log. `options` are configure's.

        `rules` ({name: timedelta}, from `tidemark up --gap ...`): session rules for a new lake,
        recorded in it before anything starts; the stream and the DAG then read them from the lake.
        Rules that disagree with the lake's record raise RulesMismatch, with nothing started.
        """
        _check_db_driver(options.get("db_url"))  # before anything is written
        settings = self.configure(**options)
        _check_db_driver(settings.db_url)
        recorded = rules_record.ensure(Lake.open(settings.lake), rules or None, "tidemark up")
        say(f"session rules of {settings.lake}: {recorded.describe()}")
        for path in (settings.landing, settings.lake, self.logs_dir):
            os.makedirs(path, exist_ok=True)
        running = self.running()
        started: list[str] = []
        try:
            if "pubsub" not in running:
                self._step("pubsub", say, lambda: self._start_pubsub(settings, timeout), started)
            self._step("topics", say, lambda: self._ensure_topics(settings), [])
            # Before the stream can publish: the emulator keeps a message only for the subscriptions
            # that exist when it is published. It needs the function's address, not the function.
            self._step("push subscription", say, lambda: self._ensure_push(settings), [])
            # Three chains that need nothing of each other start side by side: each is mostly a
            # process starting up and a health check waiting on it (BENCHMARKS.md section 2).
            connect: list[Step] = []
            if settings.spark_connect and "spark-connect" not in running:
                connect.append(("spark-connect", lambda: self._start_spark_connect(settings, timeout)))
            orchestration: list[Step] = []
            if settings.metadata_db == "postgres" and "postgres" not in running:
                orchestration.append(("postgres", lambda: self._start_postgres(settings, timeout)))
            if not {"airflow-api-server", "airflow-scheduler", "airflow-dag-processor"} <= set(running):
                orchestration.append(("airflow", lambda: self._start_airflow(settings, timeout, running)))
            if "function" not in running:
                orchestration.append(("function", lambda: self._start_function(settings, timeout)))
            stream: list[Step] = []
            if "stream" not in running:
                stream.append(("stream", lambda: self._start_stream(settings, timeout)))
            self._side_by_side([connect, orchestration, stream], say, started)
            if "exporter" not in running:
                self._step("exporter", say, lambda: self._start_exporter(settings, timeout), started)
            if "prometheus" not in running and _has_prometheus(say):
                self._step("prometheus", say, lambda: self._start_prometheus(settings, timeout), started)
            if "spark-connect" in started and connect_warmup.enabled():
                # Last, and not awaited: beside the other components' start it made `up` take twice as
                # long (its corrections are the server's CPU); BENCHMARKS.md section 2.
                self._start_connect_warmup(settings, say)
        except BaseException:
            self._stop_names([n for n in STOP_ORDER if any(n.startswith(s) for s in started)])
            raise
        return settings

    def _side_by_side(self, chains: list[list[Step]], say: Callable[[str], None], started: list[str]) -> None:
        """Run each chain's steps in order, the chains in parallel threads; then raise the first failure.

        A chain stops at its first failure and the others at their next step, so that `up` does not
        go on starting what it is about to stop. An interrupt (Ctrl-C) waits for the steps under way
        to end, so that every process they started is recorded before `up` stops them all.
        """
        failed = threading.Event()

        def run(chain: list[Step]) -> None:
            for name, action in chain:
                if failed.is_set():
                    return
                try:
                    self._step(name, say, action, started)
                except BaseException:
                    failed.set()
                    raise

        pool = ThreadPoolExecutor(max_workers=max(1, len(chains)), thread_name_prefix="tidemark-up")
        try:
            futures = [pool.submit(run, chain) for chain in chains if chain]
            wait(futures)
        except BaseException:
            failed.set()
            raise
        finally:
            pool.shutdown(wait=True)
        for future in futures:
            error = future.exception()
            if error is not None:
                raise error

    def _step(self, name: str, say: Callable[[str], None], action: Callable[[], None], started: list[str]) -> None:
        say(f"starting {name}")
        began = time.monotonic()
        started.append(name)
        action()
        self.timings[name] = round(time.monotonic() - began, 1)
        say(f"{name} ready in {self.timings[name]:.1f}s")

    def _start_pubsub(self, settings: StackSettings, timeout: float) -> None:
        emulator = PubSubEmulator(
            os.path.join(self.home, "pubsub"), port=settings.ports["pubsub"], start_timeout=timeout
        )
        log_path = os.path.join(emulator.data_dir, "emulator.log")
        try:
            emulator.start()
        except Exception as exc:
            raise StackError("pubsub emulator", str(exc).splitlines()[0], log_path) from exc
        assert emulator.managed is not None  # started above
        self._write_record(emulator.managed, "pubsub")

    def spark_connect(self, settings: StackSettings | None = None) -> SparkConnectServer:
        """The stack's Spark Connect server (started or not)."""
        settings = settings or self.required_settings()
        return SparkConnectServer(
            os.path.join(self.home, "spark-connect"), port=settings.ports["spark-connect"], master=settings.master
        )

    def _start_spark_connect(self, settings: StackSettings, timeout: float) -> None:
        server = self.spark_connect(settings)
        try:
            server.start(timeout=timeout)
        except Exception as exc:
            raise StackError("spark-connect", str(exc).splitlines()[0], server.log_path) from exc
        assert server.managed is not None  # started above
        self._write_record(server.managed, "spark-connect")

    def _start_connect_warmup(self, settings: StackSettings, say: Callable[[str], None]) -> None:
        """Start the Connect server's warm-up, not awaited; a failure to start it is said, never raised."""
        server = self.spark_connect(settings)
        log_path = os.path.join(self.logs_dir, f"{connect_warmup.NAME}.log")
        try:
            managed = connect_warmup.start(server.home, server.url, log_path)
        except OSError as exc:  # it only saves time: the stack is up without it
            say(f"spark-connect warm-up not started ({exc}): the first corrections run on a cold server")
            return
        self._write_record(managed, connect_warmup.NAME)
        say(f"spark-connect warm-up started in the background, a minute or two (log: {log_path})")

    def emulator_host(self, settings: StackSettings | None = None) -> str:
        """host:port of the stack's Pub/Sub emulator (PUBSUB_EMULATOR_HOST)."""
        settings = settings or self.required_settings()
        return f"127.0.0.1:{settings.ports['pubsub']}"

    def _ensure_topics(self, settings: StackSettings) -> None:
        try:
            ps.ensure_topic(settings.project, names.get("AVAILABILITY_TOPIC"), host=self.emulator_host(settings))
            # The corrected topic and its example subscription (docs/notices.md), which keeps the
            # notices for `gcloud pubsub subscriptions pull` (the emulator drops unsubscribed ones).
            ps.ensure_topic(settings.project, names.get("CORRECTED_TOPIC"), host=self.emulator_host(settings))
            ps.ensure_subscription(
                settings.project,
                names.get("CORRECTED_SUBSCRIPTION"),
                names.get("CORRECTED_TOPIC"),
                filter=corrected_notice.EXAMPLE_FILTER.format(dataset=names.get("DATASET")),
                host=self.emulator_host(settings),
            )
        except Exception as exc:
            raise StackError(
                "pubsub emulator", f"cannot create the topics: {exc}", os.path.join(self.home, "pubsub", "emulator.log")
            ) from exc

    def _ensure_push(self, settings: StackSettings) -> None:
        ps.ensure_subscription(
            settings.project,
            names.get("FUNCTION_SUBSCRIPTION"),
            names.get("AVAILABILITY_TOPIC"),
            push_endpoint=self.function_url(settings),
            ack_deadline_seconds=60,
            host=self.emulator_host(settings),
        )

    def postgres(self, settings: StackSettings | None = None) -> PostgresServer:
        """The stack's PostgreSQL for Airflow's metadata (started or not)."""
        settings = settings or self.required_settings()
        return PostgresServer(os.path.join(self.home, "postgres"), port=settings.ports["postgres"])

    def _start_postgres(self, settings: StackSettings, timeout: float) -> None:
        server = self.postgres(settings)
        if process.port_open(server.port):
            raise StackError(
                "postgres", f"port {server.port} (recorded in {self.state_path}) is in use by another program", None
            )
        try:
            server.start(timeout=min(timeout, 120))
        except Exception as exc:
            if server.managed is not None:
                self._write_record(server.managed, "postgres")
            raise StackError("postgres", str(exc)[:2000], server.log_path) from exc
        assert server.managed is not None  # started above
        self._write_record(server.managed, "postgres")

    def airflow_db_url(self, settings: StackSettings) -> str | None:
        """Airflow's metadata database URL: given, the stack's PostgreSQL, or None (SQLite)."""
        if settings.db_url:
            return settings.db_url
        return self.postgres(settings).db_url if settings.metadata_db == "postgres" else None

    def airflow(self, settings: StackSettings | None = None) -> AirflowServer:
        """The stack's Airflow (started or not), configured for the lake and the emulator."""
        settings = settings or self.required_settings()
        env = {
            "TIDEMARK_LAKE": settings.lake,
            "TIDEMARK_DAG_RETRIES": "2",
            "TIDEMARK_DAG_MAX_ACTIVE_RUNS": str(settings.max_active_runs),
            "TIDEMARK_DEDUP_CONCURRENCY": str(settings.dedup_concurrency),
            # the dedup DAG's notify_corrected task sends to the emulator
            "PUBSUB_EMULATOR_HOST": self.emulator_host(settings),
            "TIDEMARK_CORRECTED_TOPIC_PATH": settings.corrected_topic,
        }
        if settings.spark_connect:
            env["AIRFLOW_CONN_SPARK_DEFAULT"] = connection_json(settings.ports["spark-connect"])
        return AirflowServer(
            os.path.join(self.home, "airflow"),
            port=settings.ports["airflow"],
            db_url=self.airflow_db_url(settings),
            parallelism=settings.airflow_parallelism,
            env=env,
        )

    def _start_airflow(self, settings: StackSettings, timeout: float, running: dict[str, Record]) -> None:
        server = self.airflow(settings)
        # A partial Airflow (one process died): stop the rest and start all three afresh.
        self._stop_names([n for n in running if n.startswith("airflow-")])
        if process.port_open(server.port):
            raise StackError(
                "airflow", f"port {server.port} (recorded in {self.state_path}) is in use by another program", None
            )
        try:
            server.start(timeout=timeout)
            for name, managed in server.managed.items():
                self._write_record(managed, f"airflow-{name}")
            server.wait_for_dag(timeout=timeout)
            # Parsed before the first asset event, or its schedule would miss it.
            server.wait_for_dag("example_session_metrics", timeout=timeout)
            server.wait_for_dag("example_weekly_session_metrics", timeout=timeout)
        except Exception as exc:
            for name, managed in server.managed.items():
                self._write_record(managed, f"airflow-{name}")
            raise StackError("airflow", str(exc)[:2000], os.path.join(server.home, "logs")) from exc

    def function_url(self, settings: StackSettings | None = None) -> str:
        """The function's URL: the push endpoint of the availability subscription."""
        settings = settings or self.required_settings()
        return f"http://127.0.0.1:{settings.ports['function']}/"

    def _start_function(self, settings: StackSettings, timeout: float) -> None:
        bundle = function_bundle.build(os.path.join(self.home, "function", "bundle"))
        server = self.airflow(settings)
        # The function reads the password from a file (as from Secret Manager), never from argv.
        secret = os.path.join(self.home, "function", "airflow_password")
        fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(server.password)
        log_path = os.path.join(self.logs_dir, "function.log")
        function = FunctionServer(
            bundle,
            port=settings.ports["function"],
            isolated=True,
            log_path=log_path,
            env={
                "AIRFLOW_BASE_URL": server.url,
                "AIRFLOW_USERNAME": server.username,
                "AIRFLOW_PASSWORD_FILE": secret,
                "AIRFLOW_TIMEOUT_SECONDS": "10",
                "TIDEMARK_DAG_ID": names.get("DAG_ID"),
            },
        )
        try:
            function.start(timeout=timeout)
        except Exception as exc:
            raise StackError("function", str(exc).splitlines()[0], log_path) from exc
        assert function.managed is not None  # started above
        self._write_record(function.managed, "function")

    def stream_argv(self, settings: StackSettings) -> list[str]:
        """The stream's command line (`tidemark stream` on the stack's folders and topic)."""
        argv = [
            os.path.join(os.path.dirname(sys.executable), "tidemark"),
            "stream",
            "--landing",
            settings.landing,
            "--lake",
            settings.lake,
            "--checkpoint",
            settings.checkpoint,
            "--trigger-interval",
            settings.trigger_interval,
            "--master",
            settings.master,
            "--notify-topic",
            settings.topic,
        ]
        if settings.notice_coalesce:
            argv += ["--notice-coalesce", settings.notice_coalesce]
        if settings.archive:
            argv += ["--archive", settings.archive]
        if settings.ports.get("stream-metrics"):
            argv += ["--metrics-port", str(settings.ports["stream-metrics"])]
        return argv

    # -- metrics: the lake's exporter and Prometheus (docs/metrics.md) --------------------------------

    def exporter_argv(self, settings: StackSettings) -> list[str]:
        """The exporter's command line (`tidemark exporter` on the stack's lake)."""
        return [
            os.path.join(os.path.dirname(sys.executable), "tidemark"),
            "exporter",
            "--lake",
            settings.lake,
            "--port",
            str(settings.ports["exporter"]),
            "--home",
            self.home,
            "--refresh",
            "30",
        ]

    def _start_exporter(self, settings: StackSettings, timeout: float) -> None:
        log_path = os.path.join(self.logs_dir, "exporter.log")
        url = f"http://127.0.0.1:{settings.ports['exporter']}/metrics"
        if process.port_open(settings.ports["exporter"]):
            raise StackError("exporter", f"port {settings.ports['exporter']} is in use by another program", log_path)
        managed = process.start("exporter", self.exporter_argv(settings), log_path, url=url)
        self._write_record(managed, "exporter")
        try:
            process.wait_until(
                lambda: process.port_open(settings.ports["exporter"]), timeout, "the exporter", managed, interval=0.5
            )
        except Exception as exc:
            raise StackError("exporter", str(exc).splitlines()[0], log_path) from exc

    def prometheus(self, settings: StackSettings | None = None) -> PrometheusServer:
        """The stack's Prometheus (started or not), scraping the exporter and the stream."""
        settings = settings or self.required_settings()
        return PrometheusServer(
            os.path.join(self.home, "prometheus"),
            port=settings.ports["prometheus"],
            targets={
                "tidemark-exporter": [f"127.0.0.1:{settings.ports['exporter']}"],
                "tidemark-stream": [f"127.0.0.1:{settings.ports['stream-metrics']}"],
            },
        )

    def _start_prometheus(self, settings: StackSettings, timeout: float) -> None:
        server = self.prometheus(settings)
        try:
            server.start(timeout=min(timeout, 120))
        except Exception as exc:
            raise StackError("prometheus", str(exc).splitlines()[0], server.log_path) from exc
        assert server.managed is not None  # started above
        self._write_record(server.managed, "prometheus")

    def _start_stream(self, settings: StackSettings, timeout: float) -> None:
        log_path = os.path.join(self.logs_dir, "stream.log")
        offset = os.path.getsize(log_path) if os.path.exists(log_path) else 0
        workdir = os.path.join(self.home, "stream")  # Spark's scratch files (derby, warehouse)
        os.makedirs(workdir, exist_ok=True)
        managed = process.start(
            "stream",
            self.stream_argv(settings),
            log_path,
            cwd=workdir,
            env={"PUBSUB_EMULATOR_HOST": self.emulator_host(settings), "PYTHONUNBUFFERED": "1"},
        )
        self._write_record(managed, "stream")
        try:
            process.wait_until(
                lambda: _logged_since(log_path, offset, "stream starting"), timeout, "the stream", managed, interval=1.0
            )
        except Exception as exc:
            raise StackError("stream", str(exc).splitlines()[0], log_path) from exc

    # -- down -------------------------------------------------------------------------------------

    def down(self, say: Callable[[str], None] = lambda _: None) -> list[Stopped]:
        """Stop every process this home's records name (and only those); returns what was done."""
        return self._stop_names(list(STOP_ORDER), say)

    def _stop_names(self, wanted: list[str], say: Callable[[str], None] = lambda _: None) -> list[Stopped]:
        done: list[Stopped] = []
        for name in STOP_ORDER:
            if name not in wanted:
                continue
            record = self.record(name)
            if record is None:
                continue
            if record.alive():
                say(f"stopping {name} (pid {record.pid})")
                began = time.monotonic()
                if name == "stream":
                    _stop_stream(record)
                else:
                    process.stop_group(record.pid)
                done.append(
                    {
                        "component": name,
                        "pid": record.pid,
                        "stopped": True,
                        "seconds": round(time.monotonic() - began, 1),
                    }
                )
            elif name not in ONE_SHOT:  # a finished warm-up is not a stale record
                done.append(
                    {"component": name, "pid": record.pid, "stopped": False, "seconds": 0.0}
                )  # already gone: only the stale record is removed
            os.remove(self._record_path(name))
        # The launchers' own pid files describe the same processes: gone with them.
        launcher_pidfiles = {
            "pubsub": os.path.join(self.home, "pubsub", "emulator.pid.json"),
            **{
                f"airflow-{c}": os.path.join(self.home, "airflow", "run", f"{c}.pid")
                for c in ("api-server", "scheduler", "dag-processor")
            },
        }
        for name in wanted:
            if name in launcher_pidfiles and self.record(name) is None:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(launcher_pidfiles[name])
        return done

    # -- status -----------------------------------------------------------------------------------

    def status(self) -> list[dict[str, Any]]:
        """One row per component: name, state, pid, url, log, detail.

        A server's state is running, stopped or unhealthy; a task `up` starts (the Connect warm-up)
        is running or ended. Plain dicts: `tidemark status` prints them as a table or as JSON lines.
        """
        settings = self.settings()
        if settings is None:
            return []
        rows: list[dict[str, Any]] = []
        pubsub = self.record("pubsub")
        rows.append(
            self._row(
                "pubsub emulator",
                pubsub,
                self.emulator_host(settings),
                lambda: process.port_open(settings.ports["pubsub"]),
                f"PUBSUB_EMULATOR_HOST={self.emulator_host(settings)}",
            )
        )
        api = self.record("airflow-api-server")
        server = self.airflow(settings)
        airflow_health = _AirflowHealth(server.url)
        login = ""
        with contextlib.suppress(FileNotFoundError, KeyError, ValueError):
            login = f"login {server.username} / {server.password}"
        if settings.metadata_db == "postgres" and not settings.db_url:
            pg = self.postgres(settings)
            rows.append(
                self._row(
                    "postgres (Airflow's metadata)",
                    self.record("postgres"),
                    f"127.0.0.1:{pg.port}",
                    pg.healthy,
                    f"data {pg.data_dir}",
                )
            )
        rows.append(
            self._row(
                "airflow api-server (UI)",
                api,
                server.url,
                partial(airflow_health.healthy, "metadatabase"),
                login,
            )
        )
        if settings.spark_connect:
            spark = self.spark_connect(settings)
            rows.append(
                self._row(
                    "spark connect (the DAG's Spark)",
                    self.record("spark-connect"),
                    spark.url,
                    spark.healthy,
                    f"master {settings.master}; AIRFLOW_CONN_SPARK_DEFAULT type spark_connect",
                )
            )
            warmup = self.record(connect_warmup.NAME)
            if warmup is not None:  # started by `up` (not with TIDEMARK_CONNECT_WARMUP=0)
                rows.append(_warmup_row(warmup))
        for part, key in (("scheduler", "scheduler"), ("dag-processor", "dag_processor")):
            rows.append(
                self._row(
                    f"airflow {part}",
                    self.record(f"airflow-{part}"),
                    "",
                    partial(airflow_health.healthy, key),
                    "",
                )
            )
        rows.append(
            self._row(
                "function",
                self.record("function"),
                self.function_url(settings),
                lambda: process.port_open(settings.ports["function"]),
                "push endpoint of " + names.get("FUNCTION_SUBSCRIPTION"),
            )
        )
        stream = self.record("stream")
        rows.append(
            self._row(
                "stream",
                stream,
                "",
                lambda: True,
                f"{settings.landing} -> {settings.lake}; {_rules_of(Lake.open(settings.lake))}; {last_batch(stream)}",
            )
        )
        if "exporter" in settings.ports:  # a home set up before the metrics had none
            rows.append(
                self._row(
                    "exporter (lake SLO gauges)",
                    self.record("exporter"),
                    f"http://127.0.0.1:{settings.ports['exporter']}/metrics",
                    lambda: process.port_open(settings.ports["exporter"]),
                    "tidemark exporter",
                )
            )
        # Not installed: `up` skipped it (and said so), so no "stopped" row makes `status` exit 3.
        if "prometheus" in settings.ports and (prometheus_binary() is not None or self.record("prometheus")):
            watcher = self.prometheus(settings)
            rows.append(
                self._row(
                    "prometheus", self.record("prometheus"), watcher.url, watcher.healthy, _alerts_detail(watcher)
                )
            )
        return rows

    @staticmethod
    def _row(
        component: str, record: Record | None, url: str, healthy: Callable[[], bool], detail: str
    ) -> dict[str, Any]:
        state = "stopped"
        if record is not None and record.alive():
            try:
                state = "running" if healthy() else "unhealthy"
            except Exception:  # noqa: BLE001 - a health probe that cannot connect
                state = "unhealthy"
        return _status_row(component, state, record, url, detail)


# ---- helpers -----------------------------------------------------------------------------------


def _abs(path: str | None) -> str | None:
    return None if path is None else os.path.abspath(path)


def _check_db_driver(db_url: str | None) -> None:
    """Refuse a PostgreSQL URL before anything starts when its driver is not installed."""
    if not db_url or not db_url.startswith("postgresql"):
        return
    driver = "psycopg" if db_url.startswith("postgresql+psycopg:") else "psycopg2"
    try:
        __import__(driver)
    except ImportError:
        raise SettingsConflict(
            f"--db-url {db_url.split('://')[0]}://... needs the {driver} module: "
            f".venv/bin/pip install {'psycopg[binary]' if driver == 'psycopg' else 'psycopg2-binary'}"
        ) from None


def _rules_of(lake: Lake) -> str:
    """'gap 30m, allowed lateness 1h, watermark delay 10m' as the lake records them."""
    try:
        recorded = rules_record.current(lake)
    except ValueError as exc:  # an unreadable record is shown, not fatal to `status`
        return f"rules record unreadable: {exc}"
    return rules_record.describe_rules(recorded.rules) if recorded else "no rules recorded yet"


def _logged_since(path: str, offset: int, event: str) -> bool:
    """Whether the component logged the structured line `event` after byte `offset` of its log.

    The log of an earlier start is ignored.
    """
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            text = handle.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return False
    return any(entry.get("event") == event for entry in read_log_lines(text))


def _warmup_row(record: Record) -> dict[str, Any]:
    """The Connect warm-up's row: a task, not a server, so `ended` once it is done (not `stopped`).

    While it runs, the first late corrections after `up` compete with it for the cores (BENCHMARKS.md
    section 2): the row is what tells an operator why they are slow.
    """
    if record.alive():
        state, detail = "running", "warming the Connect server: the first corrections after `up` wait for it"
    else:
        state = "ended"
        detail = connect_warmup.outcome(record.log_path) or "ended without its summary line (killed?): see its log"
    return _status_row("spark connect warm-up", state, record, "", detail)


def _status_row(component: str, state: str, record: Record | None, url: str, detail: str) -> dict[str, Any]:
    """One row of `Stack.status`."""
    return {
        "component": component,
        "state": state,
        "pid": record.pid if record else None,
        "url": url,
        "log": record.log_path if record else "",
        "detail": detail,
    }


def last_batch(record: Record | None) -> str:
    """'last batch 7 committed at ...' from the end of the stream's log (what an operator asks first)."""
    if record is None:
        return "no batch yet"
    for entry in reversed(read_log_lines(process.tail(record.log_path, 200))):
        if entry.get("event") == "batch committed" and not entry.get("warmup"):
            return f"last batch {entry.get('batch_id')} committed at {entry.get('timestamp', '')[:19]}Z"
    return "no batch committed yet"


def _has_prometheus(say: Callable[[str], None]) -> bool:
    """Whether Debian's prometheus is installed.

    Without it the stack runs unwatched (said, not fatal: every other component works the same).
    """
    if prometheus_binary() is None:
        say("prometheus is not installed (apt-get install prometheus): starting without it")
        return False
    return True


def _alerts_detail(server: PrometheusServer) -> str:
    """'firing: TidemarkEventDateStale (2026-03-07)' or 'no alert firing' (what on call asks first)."""
    try:
        firing = server.firing()
    except Exception:  # noqa: BLE001 - Prometheus not up: the row's state says so
        return "rules: ops/prometheus/rules.yml"
    if not firing:
        return "no alert firing"
    return "firing: " + ", ".join(
        sorted(
            a["labels"]["alertname"]
            + (f" ({a['labels']['tidemark_event_date']})" if "tidemark_event_date" in a["labels"] else "")
            for a in firing
        )
    )


class _AirflowHealth:
    """Airflow's /api/v2/monitor/health, asked once per status (its three rows read one answer).

    Patient: on a loaded machine the api-server can take seconds to answer, and a slow answer is
    not an unhealthy one (a refused connection still fails at once).
    """

    def __init__(self, url: str, timeout: float = 10.0):
        self.url = url
        self.timeout = timeout
        self._answer: dict[str, Any] | None = None

    def healthy(self, key: str) -> bool:
        """Whether Airflow reports `key` (metadatabase, scheduler, dag_processor) healthy."""
        if self._answer is None:
            self._answer = self._fetch()
        return bool(self._answer.get(key, {}).get("status") == "healthy")

    def _fetch(self) -> dict[str, Any]:
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(requests.Timeout), stop=tenacity.stop_after_attempt(2), reraise=True
        )
        answer: dict[str, Any] = retrying(
            lambda: requests.get(f"{self.url}/api/v2/monitor/health", timeout=self.timeout).json()
        )
        return answer


def _stop_stream(record: Record, grace: float = STREAM_GRACE_S) -> None:
    """SIGTERM to the stream's Python process only, then what is left of its group.

    The stream finishes the micro-batch under way and flushes its notices, then exits (its JVM with
    it). Signalling the whole group would kill the JVM mid-batch. What is left of the group after that (or after `grace`) is stopped by group.
    """
    try:
        os.kill(record.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    process.wait_gone(record.pid, grace)
    process.stop_group(record.pid, grace=10)


def port_states(settings: StackSettings) -> dict[str, bool]:
    """Whether each recorded port accepts connections (tests: all closed after down)."""
    return {name: process.port_open(port) for name, port in settings.ports.items()}
