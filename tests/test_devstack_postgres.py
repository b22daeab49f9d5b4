"""The local stack's PostgreSQL (tidemark.devstack.postgres) across a home deleted and made again."""

from __future__ import annotations

import os
import shutil

import pytest

from tidemark.devstack import postgres

pytestmark = [
    pytest.mark.slow,  # starts a server
    pytest.mark.skipif(not postgres.available(), reason="PostgreSQL (Debian's postgresql) is not installed"),
]


def test_a_home_deleted_and_made_again_at_the_same_path_starts_with_its_own_password(tmp_path):
    """As root the data folder is kept outside the home: a new home at the same path used to find
    the old folder and fail every connection ('password authentication failed')."""
    home = str(tmp_path / "stack" / "postgres")
    first = postgres.PostgresServer(home).start()
    try:
        assert first.healthy()
    finally:
        first.stop()
    shutil.rmtree(tmp_path / "stack")  # what `rm -rf` of a stack home does; the data folder may stay
    again = postgres.PostgresServer(home)
    try:
        again.start()
        assert again.healthy()
    finally:
        again.stop()
    if again.as_root:  # the data folder is outside the home: another home's start sweeps it once it is gone
        shutil.rmtree(tmp_path / "stack")
        other = postgres.PostgresServer(str(tmp_path / "other"))
        try:
            other.start()
            assert not os.path.exists(again.data_dir)
            assert os.path.exists(other.data_dir)
        finally:
            other.remove()
    else:
        again.remove()


def test_a_database_made_from_a_template_holds_the_templates_tables_and_names_are_checked(airflow_databases):
    """The suite's Airflows each get a copy of one migrated database (tests/helpers.AirflowDatabases):
    the copy holds what the template held, and a name that is not a plain identifier never reaches SQL."""
    server = airflow_databases.server
    server.create_database("template_probe")
    conn = server._connect("template_probe")
    try:
        with conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE probe (n int)")
            cur.execute("INSERT INTO probe VALUES (7)")
    finally:
        conn.close()
    url = server.create_database("copy_probe", template="template_probe")
    assert url.endswith(f":{server.port}/copy_probe")
    assert server.create_database("copy_probe", template="template_probe") == url  # exists: kept as is
    copy = server._connect("copy_probe")
    try:
        with copy.cursor() as cur:
            cur.execute("SELECT n FROM probe")
            assert cur.fetchall() == [(7,)]
    finally:
        copy.close()
    for bad in ("Airflow", "a; DROP DATABASE airflow", "x" * 64, "1st", ""):
        with pytest.raises(ValueError, match="not a lower-case identifier"):
            server.create_database(bad)
