"""The local Airflow's migrated-database cache (TIDEMARK_AIRFLOW_DB_CACHE, tidemark/devstack/airflow.py):
the first SQLite home migrates and leaves a copy; a later home without a database starts from that
copy without running `airflow db migrate`; a home with its own database, PostgreSQL, or no variable:
migrated as before. (The suite sets the variable, tests/conftest.py: its Airflows run on copies.)"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
from importlib.metadata import version

import pytest

from tidemark.devstack.airflow import AirflowServer


def test_a_second_sqlite_home_copies_the_first_ones_migrated_database(tmp_path, monkeypatch):
    """A stand-in for `airflow db migrate` (a table and a row); every Airflow test of the suite runs
    on a copy of the real one."""
    monkeypatch.setenv("TIDEMARK_AIRFLOW_DB_CACHE", str(tmp_path / "cache"))
    migrations = []

    def migrate_into(server: AirflowServer):
        def cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
            migrations.append(server.home)
            with contextlib.closing(sqlite3.connect(os.path.join(server.home, "airflow.db"))) as db, db:
                db.execute("create table alembic_version (version_num text)")
                db.execute("insert into alembic_version values ('head')")
            return subprocess.CompletedProcess(["airflow", *args], 0, "", "")

        return cli

    homes = [AirflowServer(str(tmp_path / name)) for name in ("first", "second", "third")]
    for server in homes:
        os.makedirs(server.home)
        monkeypatch.setattr(server, "cli", migrate_into(server))
        server.migrate()
    assert migrations == [homes[0].home]
    assert os.listdir(tmp_path / "cache") == [f"airflow-{version('apache-airflow')}.db"]
    for server in homes:
        with contextlib.closing(sqlite3.connect(os.path.join(server.home, "airflow.db"))) as db:
            assert db.execute("select version_num from alembic_version").fetchall() == [("head",)]


def test_without_the_variable_or_on_postgresql_the_database_is_migrated(tmp_path, monkeypatch):
    calls = []

    def migrated(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        calls.append(args)
        return subprocess.CompletedProcess(["airflow", *args], 0, "", "")

    monkeypatch.setenv("TIDEMARK_AIRFLOW_DB_CACHE", str(tmp_path / "cache"))
    postgres = AirflowServer(str(tmp_path / "pg"), db_url="postgresql+psycopg2://airflow@127.0.0.1:1/airflow")
    os.makedirs(postgres.home)
    monkeypatch.setattr(postgres, "cli", migrated)
    postgres.migrate()
    assert calls == [("db", "migrate")]
    assert not os.path.exists(tmp_path / "cache")

    monkeypatch.delenv("TIDEMARK_AIRFLOW_DB_CACHE")
    sqlite = AirflowServer(str(tmp_path / "sqlite"))
    os.makedirs(sqlite.home)
    monkeypatch.setattr(sqlite, "cli", migrated)
    sqlite.migrate()
    assert calls == [("db", "migrate")] * 2


@pytest.mark.parametrize("present", [False, True])
def test_a_home_with_a_database_of_its_own_is_migrated_not_overwritten(tmp_path, monkeypatch, present):
    """A restarted home (or one migrated by hand) keeps its database: only a missing one is copied."""
    monkeypatch.setenv("TIDEMARK_AIRFLOW_DB_CACHE", str(tmp_path / "cache"))
    os.makedirs(tmp_path / "cache")
    server = AirflowServer(str(tmp_path / "home"))
    os.makedirs(server.home)
    (tmp_path / "cache" / f"airflow-{version('apache-airflow')}.db").write_bytes(b"the cached copy")
    if present:
        (tmp_path / "home" / "airflow.db").write_bytes(b"the home's own")
    calls = []

    def migrated(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        calls.append(args)
        return subprocess.CompletedProcess(["airflow", *args], 0, "", "")

    monkeypatch.setattr(server, "cli", migrated)
    server.migrate()
    own = (tmp_path / "home" / "airflow.db").read_bytes()
    if present:
        assert (calls, own) == ([("db", "migrate")], b"the home's own")
    else:
        assert (calls, own) == ([], b"the cached copy")
