"""tidemark.devstack.process on real processes: alive vs zombie, start time against pid reuse,
group members, descendants in their own groups, stopping a whole group (a stubborn member too)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from tidemark.devstack import process

# A shell that ignores SIGTERM, with a child that also ignores it: only SIGKILL stops this group.
STUBBORN = "trap '' TERM; sleep 600 & wait"


def test_a_group_and_its_members_are_found_and_stopped(tmp_path):
    managed = process.start("pair", ["sh", "-c", "sleep 600 & sleep 600 & wait"], str(tmp_path / "log"))
    try:
        members = _until(lambda: process.group_members(managed.pid), lambda found: len(found) == 3)
        assert managed.pid in {m.pid for m in members}
        assert process.pid_alive(managed.pid)
    finally:
        process.stop(managed, grace=5)
    assert process.group_members(managed.pid) == []
    assert not process.pid_alive(managed.pid)  # reaped: no zombie left behind either


def test_stop_kills_what_ignores_sigterm_after_the_grace(tmp_path):
    managed = process.start("stubborn", ["sh", "-c", STUBBORN], str(tmp_path / "log"))
    _until(lambda: process.group_members(managed.pid), lambda found: len(found) == 2)
    process.stop_group(managed.pid, grace=0.5)
    assert process.group_members(managed.pid) == []


def test_a_zombie_is_not_alive():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    _until(lambda: process.pid_alive(child.pid), lambda alive: not alive)
    assert os.path.exists(f"/proc/{child.pid}")  # exited, not reaped yet: a zombie
    child.wait()


def test_the_start_time_tells_a_process_from_a_later_one():
    first = subprocess.Popen(["sleep", "600"])
    try:
        started = process.started_at(first.pid)
        assert started is not None
        assert started == process.started_at(first.pid)
        assert abs(started - time.time()) < 3600
    finally:
        first.kill()
        first.wait()
    assert process.started_at(first.pid) is None


def test_descendants_in_their_own_session_are_found(tmp_path):
    # The child starts a grandchild in a new session, as Airflow's task runners do.
    script = "import subprocess, time; subprocess.Popen(['sleep', '600'], start_new_session=True); time.sleep(600)"
    managed = process.start("parent", [sys.executable, "-c", script], str(tmp_path / "log"))
    try:
        groups = _until(lambda: process.descendant_groups(managed.pid), bool)
        assert managed.pid not in groups
        assert len(groups) == 1
        for pgid in groups:
            process.stop_group(pgid, grace=5)
        assert process.descendant_groups(managed.pid) == []
    finally:
        process.stop(managed, grace=5)


def test_a_process_that_is_gone_has_no_facts():
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert not process.pid_alive(gone.pid)
    assert process.descendant_groups(gone.pid) == []
    assert process.group_members(gone.pid) == []
    with pytest.raises(ProcessLookupError):
        os.killpg(gone.pid, signal.SIGTERM)


def _until(get, ok, timeout: float = 60.0):
    """Poll get() until ok(value); the value."""
    deadline = time.monotonic() + timeout
    while True:
        value = get()
        if ok(value) or time.monotonic() > deadline:
            assert ok(value), value
            return value
        time.sleep(0.05)


def test_the_stacks_status_reads_the_last_committed_batch_from_the_streams_log(tmp_path):
    from tidemark.devstack.stack import Record, last_batch

    log = tmp_path / "stream.log"
    log.write_text(
        '{"event": "batch committed", "batch_id": 6, "timestamp": "2026-03-07T10:00:00.1Z"}\n'
        "WARN some JVM line\n"
        '{"event": "batch committed", "batch_id": 7, "timestamp": "2026-03-07T10:00:05.2Z"}\n'
        '{"event": "batch started", "batch_id": 8, "timestamp": "2026-03-07T10:00:10.0Z"}\n'
        '{"event": "batch comm'
    )  # cut short by a kill
    record = Record("stream", 1, None, str(log))
    assert last_batch(record) == "last batch 7 committed at 2026-03-07T10:00:05Z"
    log.write_text("no structured line yet\n")
    assert last_batch(record) == "no batch committed yet"


def test_free_ports_are_chosen_below_the_ephemeral_range():
    """Outgoing connections take their local ports from the ephemeral range: a port chosen there
    could be held by one when its server starts. A port chosen here is outside it and bindable."""
    low, _ = process.ephemeral_range()
    chosen = {process.free_port() for _ in range(200)}
    assert all(low - process.PORTS_BELOW_EPHEMERAL <= port < low for port in chosen), sorted(chosen)[:5]
    assert len(chosen) > 150  # spread over the band, not one port handed out again and again
    for port in list(chosen)[:20]:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", port))  # free when chosen, and still free now


def test_a_free_port_is_never_one_a_listener_holds(monkeypatch):
    low, _ = process.ephemeral_range()
    monkeypatch.setattr(process, "PORTS_BELOW_EPHEMERAL", 3)  # a band of three ports
    band = [low - 3, low - 2, low - 1]
    free = [port for port in band if _can_bind(port)]
    if len(free) < 2:
        pytest.skip(f"ports {band} are in use on this machine")
    held = []
    try:
        for port in free[:-1]:
            listener = socket.socket()
            listener.bind(("127.0.0.1", port))
            listener.listen()
            held.append(listener)
        assert {process.free_port() for _ in range(30)} == {free[-1]}
    finally:
        for listener in held:
            listener.close()


def _can_bind(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
