"""The local stack's PostgreSQL run as root without a `postgres` system user: a clear error, nothing written."""

from __future__ import annotations

import os

import pytest

from tidemark.devstack import postgres


def test_root_without_a_postgres_user_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(postgres, "_system_user", lambda: None)
    monkeypatch.setattr(postgres, "bin_dir", lambda: str(tmp_path / "bin"))
    monkeypatch.setattr(postgres, "SHARED_ROOT", str(tmp_path / "shared"))
    server = postgres.PostgresServer(str(tmp_path / "home"))
    assert server.as_root
    with pytest.raises(RuntimeError, match="`postgres` system user"):
        server.init()
    assert not (tmp_path / "shared").exists()  # no data folder, no password file left behind
