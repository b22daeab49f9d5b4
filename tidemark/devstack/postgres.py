"""A real PostgreSQL for the local stack's Airflow metadata: Debian's `postgresql` package.

    server = PostgresServer(home).start()      # initdb on first use, then `postgres` on 127.0.0.1
    server.db_url                              # postgresql+psycopg2://airflow:<password>@127.0.0.1:<port>/airflow
    server.create_database("b", template="a")  # another database, a copy of "a" (the tests' Airflows)
    server.stop()                              # by process group, like every server here
    server.remove()                            # the data folder too (tests)

Why: Airflow calls SQLite a development-only metadata store, and it is the one that made a burst of
notices slow: two concurrent trigger POSTs wait on SQLite's single writer until its 5 s busy timeout
(BENCHMARKS.md section 2). PostgreSQL takes concurrent writers.

Choices:
- The binaries of the newest /usr/lib/postgresql/<version>/bin (Debian installs them off PATH);
  none: `available()` is False and the stack keeps SQLite.
- TCP on 127.0.0.1 only, no Unix socket; one role `airflow` with a random password (mode 0600 in
  the home, like the Airflow admin's), scram-sha-256 for every connection.
- PostgreSQL refuses to run as root. As root (this machine, CI) the server runs as the `postgres`
  system user through runuser, and its data folder is where that user can reach it:
  /var/tmp/tidemark-postgres/<hash of the home> (a pytest or /root home is not traversable by it).
  The home keeps the password and the log; the folder records its home's path, and a folder whose
  home is gone (deleted without `remove()`) is swept when another server makes its own.
- The server is the process group's leader (runuser execs nothing else): stopping the group ends
  the postmaster and its backends; SIGTERM is PostgreSQL's "smart" shutdown, and the stack stops
  Airflow first, so no client holds it up.
"""

from __future__ import annotations

import glob
import hashlib
import os
import pwd
import re
import secrets
import shutil
import subprocess
import time
from typing import Any

from tidemark.base.logs import get_logger
from tidemark.devstack import process

log = get_logger("postgres")

ROLE = "airflow"
DATABASE = "airflow"
SHARED_ROOT = "/var/tmp/tidemark-postgres"
HOME_RECORD = "home"  # in SHARED_ROOT/<hash>/: the path of the home the data folder belongs to
DATABASE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")  # PostgreSQL's 63-byte identifiers, no quoting


def bin_dir() -> str | None:
    """The newest installed PostgreSQL's bin folder (Debian: /usr/lib/postgresql/<major>/bin)."""
    found = [
        d
        for d in glob.glob("/usr/lib/postgresql/*/bin")
        if os.path.exists(os.path.join(d, "postgres")) and os.path.exists(os.path.join(d, "initdb"))
    ]
    if not found:
        return None
    return max(found, key=lambda d: int(d.split("/")[-2]) if d.split("/")[-2].isdigit() else 0)


def available() -> bool:
    """Binaries and the Python drivers Airflow needs (psycopg2; asyncpg for its async engine)."""
    if bin_dir() is None:
        return False
    try:
        import asyncpg  # type: ignore[import-untyped]  # noqa: F401 - no type information shipped
        import psycopg2  # type: ignore[import-untyped]  # noqa: F401 - no type information shipped
    except ImportError:
        return False
    return os.geteuid() != 0 or _system_user() is not None


def _checked(database: str) -> str:
    """`database` if it is a plain lower-case identifier (it goes into SQL and a URL unquoted)."""
    if not DATABASE_NAME.fullmatch(database):
        raise ValueError(f"database name {database!r} is not a lower-case identifier (letters, digits, _)")
    return database


def sweep_orphaned_data(root: str = SHARED_ROOT) -> list[str]:
    """Delete the folders under `root` whose home is gone and whose server is not running; their paths.

    A home deleted without `remove()` (a killed test, a stack deleted with `rm -rf`) leaves its data
    folder under SHARED_ROOT, which no home can reach again (the role's password went with the
    home). A folder is kept while its postmaster runs, and when it has no home record (made before
    the record existed: whose it is cannot be told).
    """
    swept = []
    for folder in sorted(glob.glob(os.path.join(root, "*"))):
        try:
            with open(os.path.join(folder, HOME_RECORD)) as handle:
                home = handle.read()
        except OSError:
            continue
        if os.path.isdir(home) or _postmaster_running(os.path.join(folder, "data")):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        swept.append(folder)
    return swept


def _postmaster_running(data_dir: str) -> bool:
    """Whether the postmaster of `data_dir` runs (its postmaster.pid names a live process)."""
    try:
        with open(os.path.join(data_dir, "postmaster.pid")) as handle:
            pid = int(handle.readline().strip())
    except (OSError, ValueError):
        return False
    return process.pid_alive(pid)


def _system_user() -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        return None


class PostgresServer:
    """A PostgreSQL server on 127.0.0.1 holding Airflow's metadata database."""

    def __init__(self, home: str, port: int | None = None):
        """A server on `port` (a free one by default); its password and log under `home`."""
        self.home = os.path.abspath(home)
        self.port = port or process.free_port()
        self.log_path = os.path.join(self.home, "postgres.log")
        self.managed: process.Managed | None = None
        self.as_root = os.geteuid() == 0
        if self.as_root:
            digest = hashlib.sha256(self.home.encode()).hexdigest()[:16]
            self.data_dir = os.path.join(SHARED_ROOT, digest, "data")
        else:
            self.data_dir = os.path.join(self.home, "data")

    # -- credentials ---------------------------------------------------------------------------

    @property
    def password_file(self) -> str:
        """The file holding the role's password (mode 0600)."""
        return os.path.join(self.home, ".password")

    @property
    def password(self) -> str:
        """The role's password, made on first use."""
        os.makedirs(self.home, exist_ok=True)
        if not os.path.exists(self.password_file):
            fd = os.open(self.password_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_urlsafe(24))  # URL-safe: no quoting in the db URL
        with open(self.password_file) as handle:
            return handle.read().strip()

    @property
    def db_url(self) -> str:
        """Airflow's SQLAlchemy URL for the database."""
        return self.db_url_of(DATABASE)

    def db_url_of(self, database: str) -> str:
        """Airflow's SQLAlchemy URL for `database` on this server."""
        return f"postgresql+psycopg2://{ROLE}:{self.password}@127.0.0.1:{self.port}/{_checked(database)}"

    def __repr__(self) -> str:
        """Where the server is, never its password."""
        return f"PostgresServer(127.0.0.1:{self.port}, {self.data_dir})"

    # -- lifecycle -----------------------------------------------------------------------------

    def _as_server_user(self, argv: list[str]) -> list[str]:
        return ["runuser", "-u", "postgres", "--", *argv] if self.as_root else argv

    @staticmethod
    def _bin() -> str:
        binaries = bin_dir()
        if binaries is None:
            raise RuntimeError("PostgreSQL is not installed (apt-get install postgresql)")
        return binaries

    def init(self) -> None:
        """Make the data folder with initdb, once (it survives stop/start, as the SQLite file does)."""
        user = _system_user() if self.as_root else None
        if self.as_root and user is None:
            # Checked before anything is written: PostgreSQL refuses to run as root.
            raise RuntimeError(
                "running as root, PostgreSQL needs the `postgres` system user (apt-get install postgresql)"
            )
        if os.path.exists(os.path.join(self.data_dir, "PG_VERSION")):
            if os.path.exists(self.password_file):
                return
            # As root the data folder lives outside the home (SHARED_ROOT, keyed by the home's
            # path): a home deleted and made again at the same path finds the deleted home's
            # folder, whose role has a password this home never had (every connection would be
            # refused). That folder belongs to no home any more: it goes, and initdb runs anew.
            shutil.rmtree(os.path.dirname(self.data_dir) if self.as_root else self.data_dir)
        binaries = self._bin()
        parent = os.path.dirname(self.data_dir)
        if self.as_root:
            for swept in sweep_orphaned_data(os.path.dirname(parent)):
                log.info("data folder of a deleted home removed", folder=swept)
        os.makedirs(parent, exist_ok=True)
        if self.as_root:
            os.makedirs(self.home, exist_ok=True)  # before its record: a sweep never sees a record without its home
            with open(os.path.join(parent, HOME_RECORD), "w") as handle:
                handle.write(self.home)
        pwfile = os.path.join(parent, ".initdb-password")
        fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(self.password + "\n")
        if user is not None:
            os.chmod(os.path.dirname(parent), 0o755)  # SHARED_ROOT: traversable, not listable by others
            for path in (parent, pwfile):
                os.chown(path, user.pw_uid, user.pw_gid)
            os.chmod(parent, 0o700)
        try:
            result = subprocess.run(
                self._as_server_user(
                    [
                        os.path.join(binaries, "initdb"),
                        "-D",
                        self.data_dir,
                        "-U",
                        ROLE,
                        f"--pwfile={pwfile}",
                        "--auth=scram-sha-256",
                        "--encoding=UTF8",
                        "--locale=C.UTF-8",
                    ]
                ),
                capture_output=True,
                text=True,
                timeout=120,
            )
        finally:
            os.remove(pwfile)
        if result.returncode != 0:
            raise RuntimeError(f"initdb failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")

    def start(self, timeout: float = 60) -> PostgresServer:
        """Make the data folder if needed, start the server, wait until it answers, make the database."""
        self.init()
        argv = self._as_server_user(
            [
                os.path.join(self._bin(), "postgres"),
                "-D",
                self.data_dir,
                "-p",
                str(self.port),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "unix_socket_directories=",
                # Airflow's api-server, scheduler, dag-processor and task processes each keep a pool.
                "-c",
                "max_connections=200",
            ]
        )
        self.managed = process.start("postgres", argv, self.log_path)
        process.wait_until(self._ready, timeout, "PostgreSQL", self.managed)
        self.create_database(DATABASE)
        return self

    def _connect(self, database: str) -> Any:  # a psycopg2 connection: psycopg2 ships no types
        import psycopg2  # optional: available() checks for it

        return psycopg2.connect(
            host="127.0.0.1", port=self.port, user=ROLE, password=self.password, dbname=database, connect_timeout=2
        )

    def _ready(self) -> bool:
        self._connect("postgres").close()
        return True

    def create_database(self, name: str, template: str | None = None) -> str:
        """Create database `name` unless it exists; returns its URL.

        Named, `template` is copied (it must have no session open): PostgreSQL copies its files, a
        migrated Airflow database in a fraction of a second, where `airflow db migrate` takes seconds.
        """
        statement = f"CREATE DATABASE {_checked(name)}"  # identifiers cannot be bound parameters
        if template is not None:
            statement += f" TEMPLATE {_checked(template)}"
        conn = self._connect("postgres")
        try:
            conn.autocommit = True  # CREATE DATABASE cannot run in a transaction
            with conn.cursor() as cur:
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                if cur.fetchone() is None:
                    cur.execute(statement)
        finally:
            conn.close()
        return self.db_url_of(name)

    def healthy(self) -> bool:
        """Whether the server accepts a connection."""
        try:
            return self._ready()
        except Exception:  # noqa: BLE001 - any failure to connect is "not healthy"
            return False

    def stop(self) -> None:
        """Stop the server's process group (a smart shutdown first, up to 20 s)."""
        if self.managed is not None:
            process.stop(self.managed, grace=20.0)
            self.managed = None

    def remove(self) -> None:
        """Stop, then delete the data folder (the tests' servers; `tidemark down` keeps it)."""
        self.stop()
        folder = os.path.dirname(self.data_dir) if self.as_root else self.data_dir
        for _ in range(20):  # a backend killed at the end of stop() may still be writing for a moment
            shutil.rmtree(folder, ignore_errors=True)
            if not os.path.exists(folder):
                return
            time.sleep(0.5)
