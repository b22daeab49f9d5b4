"""The sweep of data folders whose home is gone (tidemark.devstack.postgres.sweep_orphaned_data):
no server needed, the folders are made by hand as PostgresServer.init makes them as root."""

from __future__ import annotations

import os

from tests.helpers import ended_pid
from tidemark.devstack import postgres


def _folder(root, name: str, home: str | None, postmaster_pid: int | None = None) -> str:
    folder = root / name
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "PG_VERSION").write_text("17\n")
    if home is not None:
        (folder / postgres.HOME_RECORD).write_text(home)
    if postmaster_pid is not None:
        (folder / "data" / "postmaster.pid").write_text(f"{postmaster_pid}\n/var/tmp/x\n")
    return str(folder)


def test_only_folders_whose_home_is_gone_and_whose_server_is_stopped_are_swept(tmp_path):
    root, living_home = tmp_path / "shared", tmp_path / "living-home"
    living_home.mkdir()
    dead_pid = ended_pid()

    orphan = _folder(root, "orphan", str(tmp_path / "deleted-home"))
    orphan_with_a_dead_server = _folder(root, "dead-server", str(tmp_path / "deleted-too"), dead_pid)
    kept_home = _folder(root, "kept", str(living_home))
    running = _folder(root, "running", str(tmp_path / "deleted-but-running"), os.getpid())
    unrecorded = _folder(root, "unrecorded", None)

    assert postgres.sweep_orphaned_data(str(root)) == sorted([orphan, orphan_with_a_dead_server])
    assert sorted(os.listdir(root)) == sorted(os.path.basename(f) for f in (kept_home, running, unrecorded))
    assert postgres.sweep_orphaned_data(str(root)) == []  # nothing more to do


def test_a_missing_shared_root_sweeps_nothing(tmp_path):
    assert postgres.sweep_orphaned_data(str(tmp_path / "never-made")) == []
