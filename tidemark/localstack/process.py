"""Run a server as a child in its own process group, wait until it is healthy, stop the group.

Killing only a wrapper (gcloud, `airflow standalone`) orphans its children; every server here is
started with start_new_session=True and stopped by signalling its whole process group, first
SIGTERM, then SIGKILL after a grace period. A pid file records the group so that another process
(`tidemark down`) can stop it, and nothing else.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass
from typing import Callable


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


@dataclass
class Managed:
    name: str
    pid: int
    log_path: str
    url: str = ""

    def alive(self) -> bool:
        return pid_alive(self.pid)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped) counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def start(name: str, argv: list[str], log_path: str, env: dict | None = None, cwd: str | None = None,
          url: str = "") -> Managed:
    os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
    log = open(log_path, "ab")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env={**os.environ, **(env or {})}, cwd=cwd, start_new_session=True)
    log.close()
    return Managed(name, proc.pid, log_path, url)


def wait_until(check: Callable[[], bool], timeout: float, what: str, managed: Managed | None = None,
               interval: float = 0.25) -> None:
    """Poll `check` until true; fail fast (with the log's tail) if the process died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception:  # noqa: BLE001 - not ready yet
            pass
        if managed is not None and not managed.alive():
            raise RuntimeError(f"{managed.name} exited while starting; see {managed.log_path}:\n"
                               f"{tail(managed.log_path)}")
        time.sleep(interval)
    where = f"; see {managed.log_path}:\n{tail(managed.log_path)}" if managed else ""
    raise TimeoutError(f"{what} not ready after {timeout:.0f}s{where}")


def stop(managed: Managed, grace: float = 10.0) -> None:
    """SIGTERM the process group, then SIGKILL what is left after `grace` seconds."""
    stop_group(managed.pid, grace)


def stop_group(pid: int, grace: float = 10.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + (grace if sig == signal.SIGTERM else 5)
        while time.monotonic() < deadline:
            _reap(pid)
            if not _group_alive(pid):
                return
            time.sleep(0.1)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    # Members may all be zombies waiting for their parent; treat a group of zombies as gone.
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().split(") ", 1)[1].split()
                if int(fields[2]) == pgid and fields[0] != "Z":
                    return True
            except (FileNotFoundError, IndexError, ValueError):
                continue
    return False


def tail(path: str, lines: int = 30) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 16384))
            return b"\n".join(handle.read().splitlines()[-lines:]).decode("utf-8", "replace")
    except FileNotFoundError:
        return "(no log)"


def write_pidfile(path: str, managed: Managed) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as handle:
        json.dump(asdict(managed), handle)


def read_pidfile(path: str) -> Managed | None:
    try:
        with open(path) as handle:
            return Managed(**json.load(handle))
    except (FileNotFoundError, ValueError, TypeError):
        return None
