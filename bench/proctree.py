"""Memory of a process tree (the stream's driver, its JVM, its Python workers), through psutil.

Shared by bench.stream_throughput, bench.memory and bench.freshness."""

from __future__ import annotations

import psutil


def tree_pids(pid: int) -> list[int]:
    """pid and every live descendant (empty when pid is gone)."""
    try:
        root = psutil.Process(pid)
        return [pid] + [child.pid for child in root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def rss_bytes(pid: int) -> int:
    """Proportional set size (PSS) of one process, falling back to RSS: forked Python workers share
    pages with their daemon, and summing their RSS would count those pages several times."""
    try:
        proc = psutil.Process(pid)
        try:
            return proc.memory_full_info().pss
        except (psutil.AccessDenied, AttributeError):  # no smaps access, or not Linux
            return proc.memory_info().rss
    except psutil.NoSuchProcess:
        return 0


def is_jvm(pid: int) -> bool:
    try:
        return psutil.Process(pid).name() == "java"
    except psutil.NoSuchProcess:
        return False


def tree_rss(pid: int) -> dict:
    """Resident memory (PSS) of a process tree, split into JVM (java) and the rest (Python)."""
    jvm = other = 0
    for p in tree_pids(pid):
        try:
            name = psutil.Process(p).name()
        except psutil.NoSuchProcess:
            continue
        if name == "java":
            jvm += rss_bytes(p)
        else:
            other += rss_bytes(p)
    return {"jvm": jvm, "python": other, "total": jvm + other}
