"""Memory and CPU of a process tree (the stream's driver, its JVM, its Python workers), through psutil.

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


# A JVM thread's kind, by the first characters of the name the JVM gives it (Linux keeps 15 of them
# in /proc/<pid>/task/<tid>/comm). The JIT's compiler threads are the ones that matter on two
# cores: a cold Spark job's JIT takes about as much CPU as its tasks (BENCHMARKS.md section 1).
JVM_THREAD_KINDS = (
    ("JIT", ("C1 CompilerThre", "C2 CompilerThre")),
    ("tasks", ("Executor task",)),  # Spark's task threads, renamed for each task they run
    ("GC", ("GC Thread", "G1 ", "VM Thread")),  # the serial collector works in the VM thread
)


def jvm_thread_kind(name: str) -> str:
    """`JIT`, `tasks`, `GC` or `other` (the driver's threads, py4j, listeners) for a JVM thread's name."""
    return next((kind for kind, prefixes in JVM_THREAD_KINDS if name.startswith(prefixes)), "other")


def jvm_threads_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """Each live thread of process `pid`: its kind (jvm_thread_kind) and CPU seconds so far."""
    try:
        threads = psutil.Process(pid).threads()
    except psutil.Error:
        return {}
    found = {}
    for thread in threads:
        try:
            with open(f"/proc/{pid}/task/{thread.id}/comm") as comm:
                name = comm.read().strip()
        except OSError:  # ended since the listing
            continue
        found[thread.id] = (jvm_thread_kind(name), thread.user_time + thread.system_time)
    return found
