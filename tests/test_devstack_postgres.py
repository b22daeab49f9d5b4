"""The local stack's PostgreSQL (tidemark.devstack.postgres) across a home deleted and made again."""

from __future__ import annotations

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
        again.remove()
