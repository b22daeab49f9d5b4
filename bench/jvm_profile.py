"""Where a stream's JVM spends its time: Java Flight Recorder samples and the JIT's compile totals.

`bench stream_throughput --jvm-profile` starts each tidemark run's JVM with a flight recording
(execution samples every 10 ms, whole stacks) and the JIT's own accounting (`-XX:+CITime`, printed
when the JVM exits), then sorts what the recording saw:

- by thread: Spark's task threads (the batch's data work), the stream's execution thread (the
  driver: every DataFrame a batch builds is parsed, analysed, optimised and planned there, since
  foreachBatch's py4j calls run on it), and the rest (listeners, scheduler, py4j, start-up);
- the driver thread's samples by planning phase, from the QueryExecution step on their stack
  (analysis, optimisation, physical planning, preparation) or the step itself (SQL parsing,
  closure cleaning, Janino code generation, class loading);
- the JIT: seconds its compiler threads spent (C1 and C2) and methods compiled. Those threads are
  not Java threads, so the samples do not show them; on 2 cores they compete with the batch.

A sample is a running Java thread seen at a tick, so the shares are shares of Java CPU, not of wall
time, and they hold under load better than seconds do. Python (the contract UDF, the pane writer)
and native code are not in them.
"""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import subprocess

import tenacity

STACK_DEPTH = 1024  # Catalyst's recursion is deep: the QueryExecution frame sits far from the leaf

# innermost match wins: a sample inside analysis that loads a class counts as class loading
_DRIVER_STEPS = (
    ("SQL parsing", ("AbstractSqlParser", "org/antlr/")),
    ("class loading", ("ClassLoader.loadClass", "BuiltinClassLoader.")),
    ("code generation (Janino)", ("CodeGenerator", "org/codehaus/janino")),
    ("closure cleaning", ("ClosureCleaner",)),
    ("analysis", ("QueryExecution.$anonfun$lazyAnalyzed", "QueryExecution.assertAnalyzed")),
    ("optimisation", ("QueryExecution.$anonfun$lazyOptimizedPlan", "IncrementalExecution.$anonfun$optimizedPlan")),
    ("physical planning", ("QueryExecution.$anonfun$lazySparkPlan",)),
    ("preparation (exchanges, codegen stages)", ("QueryExecution.$anonfun$lazyExecutedPlan",)),
    ("caching (CacheManager)", ("CacheManager",)),
)


def java_options(recording: str) -> str:
    """JVM options that record `recording` (a .jfr file, written at exit) and print JIT totals."""
    return (
        f"-XX:FlightRecorderOptions=stackdepth={STACK_DEPTH} "
        f"-XX:StartFlightRecording=filename={recording},settings=profile,dumponexit=true "
        "-XX:+UnlockDiagnosticVMOptions -XX:+CITime"
    )


def jfr_tool() -> str | None:
    """The JDK's `jfr` command beside the `java` that runs Spark, if there is one."""
    home = os.environ.get("JAVA_HOME")
    if home and os.path.exists(os.path.join(home, "bin", "jfr")):
        return os.path.join(home, "bin", "jfr")
    java = shutil.which("java")
    if java:
        candidate = os.path.join(os.path.dirname(os.path.realpath(java)), "jfr")
        if os.path.exists(candidate):
            return candidate
    return shutil.which("jfr")


def thread_kind(name: str) -> str:
    """task (a Spark task thread), driver (the stream's execution thread) or other."""
    if name.startswith("Executor task launch worker"):
        return "task"
    if name.startswith("stream execution thread"):
        return "driver"
    return "other"


def driver_step(frames: list[str]) -> str:
    """The planning step a driver sample was in, from its frames (innermost first)."""
    for frame in frames:
        for step, needles in _DRIVER_STEPS:
            if any(needle in frame for needle in needles):
                return step
    return "other (py4j, listing, scheduling, markers)"


def classify(samples: list[dict]) -> dict:
    """Counts of `jfr print --json` execution samples by thread kind and by driver step."""
    threads: collections.Counter[str] = collections.Counter()
    steps: collections.Counter[str] = collections.Counter()
    for sample in samples:
        values = sample["values"]
        thread = values.get("sampledThread") or {}
        kind = thread_kind(thread.get("javaName") or thread.get("osName") or "")
        threads[kind] += 1
        if kind == "driver":
            frames = [f["method"]["type"]["name"] + "." + f["method"]["name"] for f in values["stackTrace"]["frames"]]
            steps[driver_step(frames)] += 1
    return {"samples": sum(threads.values()), "threads": dict(threads), "driver_steps": dict(steps.most_common())}


def samples(recording: str) -> list[dict]:
    """The recording's execution samples, whole stacks, as `jfr print --json` gives them."""
    tool = jfr_tool()
    if tool is None:
        raise RuntimeError("no `jfr` command beside the JDK's `java`: cannot read the flight recording")
    command = [tool, "print", "--json", "--stack-depth", str(STACK_DEPTH), "--events", "jdk.ExecutionSample", recording]
    # The JVM writes the recording as it exits, which can be after the Python process it served.
    for attempt in tenacity.Retrying(stop=tenacity.stop_after_delay(60), wait=tenacity.wait_fixed(1), reraise=True):
        with attempt:
            printed = subprocess.run(command, check=False, capture_output=True, text=True)
            if printed.returncode != 0:
                raise RuntimeError(f"jfr print {recording}: {printed.stderr.strip() or printed.stdout.strip()[:300]}")
    events: list[dict] = json.loads(printed.stdout)["recording"]["events"]
    return events


_TIER = re.compile(
    r"^\s*(C[12]) \{speed: [\d.]+ bytes/s; standard: +([\d.]+) s, \d+ bytes, (\d+) methods; osr: +([\d.]+) s"
)


def compile_totals(jvm_output: str) -> dict:
    """Seconds and methods of each JIT tier, from the JVM's -XX:+CITime report (empty without it)."""
    totals = {}
    for line in jvm_output.splitlines():
        match = _TIER.match(line)
        if match:
            tier, standard, methods, osr = match.groups()
            totals[tier] = {"seconds": round(float(standard) + float(osr), 1), "methods": int(methods)}
    return totals


def summary_line(profile: dict) -> str:
    """One line for the results file: thread shares, the driver's steps, the JIT's totals."""
    total = max(1, profile["samples"])
    threads = profile["threads"]
    driver = max(1, threads.get("driver", 0))
    text = (
        f"JVM samples (flight recorder, {profile['samples']}): tasks {threads.get('task', 0) / total:.0%}, "
        f"driver thread {threads.get('driver', 0) / total:.0%}, other {threads.get('other', 0) / total:.0%}; "
        "the driver's by step: "
        + ", ".join(f"{step} {count / driver:.0%}" for step, count in profile["driver_steps"].items())
    )
    jit = profile.get("jit") or {}
    if jit:
        text += "; JIT compiler threads: " + ", ".join(
            f"{tier} {t['seconds']} s for {t['methods']} methods" for tier, t in sorted(jit.items())
        )
    return text
