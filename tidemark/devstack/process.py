"""Run a server as a child in its own process group, wait until it is healthy, stop the group.

Killing only a wrapper (gcloud, `airflow standalone`) orphans its children; every server here is
started with start_new_session=True and stopped by signalling its whole process group, first
SIGTERM, then SIGKILL after a grace period. A pid file records the group so that another process
(`tidemark down`) can stop it, and nothing else. Process facts (alive, zombie, start time, group
members, descendants) come from psutil, not from parsing /proc by hand.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import psutil

from tidemark.base.polling import wait_for

EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
PORTS_BELOW_EPHEMERAL = 12_000  # how wide the band of ports chosen from, below the kernel's range


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now, chosen below the kernel's ephemeral range.

    Why not bind(0): that hands out a port of the ephemeral range, the range the kernel also gives
    every outgoing connection as its local port. A server often starts a while after its port is
    chosen (and `tidemark up` reuses the ports it recorded at every start); by then any connection
    on the machine may hold that port (an Airflow api-server of the test suite failed with "address
    already in use" so). Below the range only listeners compete, and the bind check sees those.
    """
    low = ephemeral_range()[0]
    band = range(max(1024, low - PORTS_BELOW_EPHEMERAL), low)
    chooser = random.SystemRandom()
    for _ in range(64):
        port = chooser.choice(band)
        if _bindable(port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:  # the band is full: any free port
        sock.bind(("127.0.0.1", 0))
        chosen: int = sock.getsockname()[1]  # (host, port) for AF_INET; typed Any by typeshed
        return chosen


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range of local ports for outgoing connections (Linux's default where unknown)."""
    try:
        with open(EPHEMERAL_RANGE_FILE) as handle:
            low, high = (int(part) for part in handle.read().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts TCP connections on host:port (half a second to answer)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


@dataclass
class Managed:
    """A server started in its own process group: its name, the group's leader, its log and URL."""

    name: str
    pid: int
    log_path: str
    url: str = ""

    def alive(self) -> bool:
        """Whether the leader runs (not exited, not a zombie)."""
        return pid_alive(self.pid)


def _running(proc: psutil.Process) -> bool:
    """Alive and not a zombie (exited, not yet reaped: it counts as gone)."""
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid runs (a zombie counts as gone)."""
    try:
        return _running(psutil.Process(pid))
    except psutil.NoSuchProcess:
        return False


def started_at(pid: int) -> float | None:
    """The process's start time (seconds since the epoch, stable for its whole life).

    With the pid, it tells our process from a later one that reused the pid. None when there is no such process.
    """
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def group_members(pgid: int) -> list[psutil.Process]:
    """The live (non-zombie) processes of a process group."""
    members = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and _running(proc):
                members.append(proc)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return members


def descendant_groups(root: int) -> list[int]:
    """Process groups, other than root's own, of root's live descendants.

    These are children that started their own session, such as the task runners of Airflow's
    LocalExecutor.
    """
    try:
        parent = psutil.Process(root)
        own = os.getpgid(root)
        children = parent.children(recursive=True)
    except (psutil.NoSuchProcess, ProcessLookupError):
        return []
    groups: set[int] = set()
    for child in children:
        try:
            if _running(child):  # a zombie waiting for its parent needs no stopping
                groups.add(os.getpgid(child.pid))
        except ProcessLookupError:
            continue
    return sorted(groups - {own})


def start(
    name: str,
    argv: list[str],
    log_path: str,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    url: str = "",
) -> Managed:
    """Start `argv` in a new process group, its output appended to `log_path`; `env` adds to ours."""
    os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
    # The child holds its own copy of the log's descriptor: ours closes once it is started.
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            start_new_session=True,
        )
    return Managed(name, proc.pid, log_path, url)


def wait_until(
    check: Callable[[], bool], timeout: float, what: str, managed: Managed | None = None, interval: float = 0.25
) -> None:
    """Poll `check` until true (any exception from it: not ready yet).

    Fails fast (with the log's tail) if the process died.
    """

    def died() -> None:
        if managed is not None and not managed.alive():
            raise RuntimeError(
                f"{managed.name} exited while starting; see {managed.log_path}:\n{tail(managed.log_path)}"
            )

    wait_for(
        check,
        timeout,
        what,
        interval,
        not_yet=(Exception,),
        abort=died,
        detail=(lambda: f"; see {managed.log_path}:\n{tail(managed.log_path)}") if managed else None,
    )


def wait_gone(pid: int, timeout: float) -> bool:
    """Wait up to `timeout` seconds for a process to exit (reaping it when it is our child).

    Returns True when it is gone.
    """
    try:
        psutil.Process(pid).wait(timeout=timeout)
    except psutil.NoSuchProcess:
        pass
    except psutil.TimeoutExpired:
        return not pid_alive(pid)
    return True


def stop(managed: Managed, grace: float = 10.0) -> None:
    """SIGTERM the process group, then SIGKILL what is left after `grace` seconds."""
    stop_group(managed.pid, grace)


def stop_group(pgid: int, grace: float = 10.0) -> None:
    """SIGTERM the group, wait up to `grace` seconds for every member, then SIGKILL the rest."""
    try:
        for sig, timeout in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            members = group_members(pgid)
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + timeout
            while members and time.monotonic() < deadline:
                # wait_procs reaps those that are our children; a zombie of another parent counts as gone.
                _, members = psutil.wait_procs(members, timeout=0.1)
                members = [m for m in members if _running(m)]
            if not members:
                return
    finally:
        _reap(pgid)


def _reap(pid: int) -> None:
    """Collect the leader's exit status when it is our child (a zombie until then)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def tail(path: str, lines: int = 30) -> str:
    """The last `lines` lines of a log (from its last 16 KiB); "(no log)" when there is none."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 16384))
            return b"\n".join(handle.read().splitlines()[-lines:]).decode("utf-8", "replace")
    except FileNotFoundError:
        return "(no log)"


def write_pidfile(path: str, managed: Managed) -> None:
    """Record a started server in `path` (JSON), for another process to find and stop."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as handle:
        json.dump(asdict(managed), handle)


def read_pidfile(path: str) -> Managed | None:
    """The server a pid file records; None when it is missing or unreadable."""
    try:
        with open(path) as handle:
            return Managed(**json.load(handle))
    except (FileNotFoundError, ValueError, TypeError):
        return None
