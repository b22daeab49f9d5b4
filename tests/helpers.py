"""Helpers shared by several test modules (a test module imports helpers from here or a *kit module,
never from another test module).

Session sets: what the lake's current version of a date holds vs what the batch reference says it
must hold, as comparable sets of (user_id, session_start, session_end, event_ids[, event_count, event_type_count]).
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections import defaultdict
from datetime import date, timedelta
from typing import Any

from tests import reference
from tidemark.base import polling
from tidemark.base.layout import as_event_date
from tidemark.base.logs import read_log_lines
from tidemark.devstack import process
from tidemark.devstack.airflow import AirflowServer
from tidemark.devstack.postgres import PostgresServer
from tidemark.iceberg import reader
from tidemark.notices import availability_notice
from tidemark.store.lake import Lake

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Poll every half second (servers and runs take seconds); see tidemark.base.polling.wait_for.
wait_for = functools.partial(polling.wait_for, interval=0.5)


def write_stack_record(stack, name: str, pid: int, log_path: str) -> None:
    """A process record in `stack`'s run folder, written as `up` writes one for a process it started
    (no process started here: `pid` is this test's own, alive, or one that has ended)."""
    stack._write_record(process.Managed(name, pid, log_path), name)


def ended_pid() -> int:
    """The pid of a process that has ended (not reused this fast)."""
    return int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True).stdout)


def stream_alive(proc) -> None:
    """For wait_for's abort: a stream subprocess that exited will make no more progress."""
    if proc.poll() is not None:
        raise AssertionError(f"stream exited early with {proc.returncode}")


def log_lines(server) -> list[dict]:
    """The structured log lines of a local server (FunctionServer, ...) so far."""
    return read_log_lines(server.log())


def lake_session_set(lake: Lake, event_date: str, with_count: bool = False) -> set[tuple]:
    """The sessions of the date's current deduplicated version (empty when it has none yet)."""
    try:
        table = reader.read_sessions(lake, as_event_date(event_date))
    except reader.NoVersion:
        return set()
    return {
        (r["user_id"], r["session_start"], r["session_end"], frozenset(r["event_ids"]))
        + ((r["event_count"], r["event_type_count"]) if with_count else ())
        for r in table.to_pylist()
    }


def session_set(sessions, event_date: date | str, with_count: bool = False) -> set[tuple]:
    """Reference sessions (tidemark.demo.batch_reference.Session) of one date, as lake_session_set gives them."""
    wanted = as_event_date(event_date)  # a Session's event_date is a date
    return {
        (s.user_id, s.session_start, s.session_end, s.event_ids)
        + ((s.event_count, s.event_type_count) if with_count else ())
        for s in sessions
        if s.event_date == wanted
    }


def reference_session_set(landing: str, event_date: str, gap: timedelta, with_count: bool = False) -> set[tuple]:
    """What the date must hold: the batch reference over everything landed."""
    return session_set(reference.sessions_of_landing(landing, gap), event_date, with_count)


def cli_in_process(capsys, *argv) -> tuple[int, str]:
    """`tidemark ARGV` in this process, for a command that starts no server (a process of its own
    spends 3-4 s importing under load): its exit status and what it printed on stdout."""
    from tidemark import cli

    capsys.readouterr()  # what the test printed before is not the command's
    code = cli.main([os.fspath(a) if isinstance(a, os.PathLike) else str(a) for a in argv])
    return code, capsys.readouterr().out


def generate_cli(landing: str, *args: str) -> None:
    """The real `tidemark generate --landing LANDING ARGS...` in its own process."""
    proc = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "tidemark"), "generate", "--landing", landing, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr


def same_notice_copies(received: list[tuple[dict, dict]]) -> dict[str, dict]:
    """Availability notices received as (body, attributes): every copy of one notice_id is the same
    notice (but for published_at) with its body's attributes. {notice_id: body without published_at}."""
    by_id = defaultdict(list)
    for body, attrs in received:
        assert attrs == availability_notice.attributes(body)
        by_id[body["notice_id"]].append({k: v for k, v in body.items() if k != "published_at"})
    for copies in by_id.values():
        assert all(copy == copies[0] for copy in copies)
    return {notice_id: copies[0] for notice_id, copies in by_id.items()}


def airflow_on_connect(home: str, lake: Lake | str, connect_server) -> AirflowServer:
    """An Airflow (not started) for `lake`, no task retries, whose DAG runs its dedup as a client of
    `connect_server` (tests/conftest.py spark_connect_server) instead of a spark-submit.

    For `airflow dags test` without an api-server: the publish task tries the unreachable REST API
    for 2 s, not its 30 s default, before it leaves the asset events owed."""
    return AirflowServer(
        home,
        env={
            "TIDEMARK_LAKE": str(lake),
            "TIDEMARK_DAG_RETRIES": "0",
            "AIRFLOW_CONN_SPARK_DEFAULT": connect_server.airflow_connection(),
            "TIDEMARK_ASSET_EVENTS_TIMEOUT": "2s",
        },
    )


class AirflowDatabases:
    """A fresh metadata database for every Airflow a test starts, on one PostgreSQL per pytest worker
    (tests/conftest.py airflow_databases); SQLite, AirflowServer's default, where PostgreSQL is not
    installed.

    Why not SQLite: an Airflow's scheduler, dag-processor, api-server and task processes all write
    its metadata, and SQLite has one writer at a time. On a loaded 2-core machine a writer waited
    past SQLite's 5 s busy timeout and the scheduler exited on "database is locked" (CI, test_e2e_pipeline:
    its runs stayed queued until the test's 20-minute wait ended). PostgreSQL takes concurrent
    writers, as on `tidemark up`. Each database is a copy of one migrated once per worker (0.3 s,
    where `airflow db migrate` takes 6 s and more under load).
    """

    TEMPLATE = "airflow_migrated"

    def __init__(self, server: PostgresServer | None, scratch: str):
        """Databases on `server` (None: SQLite); `scratch` is the home of the migration's Airflow CLI."""
        self.server = server
        self.scratch = scratch
        self.made = 0

    def new(self) -> dict[str, Any]:
        """AirflowServer keyword arguments for a database of its own: {} for SQLite."""
        if self.server is None:
            return {}
        if self.made == 0:
            os.makedirs(self.scratch, exist_ok=True)
            AirflowServer(self.scratch, db_url=self.server.create_database(self.TEMPLATE)).migrate()
        self.made += 1
        url = self.server.create_database(f"airflow_{self.made}", template=self.TEMPLATE)
        # One api-server worker: the suite's bursts are small, and a second worker is one more
        # process importing Airflow on a 2-core machine.
        return {"db_url": url, "db_migrated": True, "api_workers": 1}
