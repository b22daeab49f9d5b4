"""bench/jvm_profile.py: the flight recorder's samples sorted by thread and by the driver's step."""

from __future__ import annotations

from bench import jvm_profile


def _sample(thread: str, *frames: str) -> dict:
    """One `jfr print --json` execution sample, frames innermost first as jfr prints them."""
    parsed = []
    for frame in frames:
        owner, _, method = frame.rpartition(".")
        parsed.append({"method": {"type": {"name": owner}, "name": method}})
    return {"values": {"sampledThread": {"javaName": thread}, "stackTrace": {"frames": parsed}}}


DRIVER = "stream execution thread for tidemark_sessions [id = 1, runId = 2]"
TASK = "Executor task launch worker for task 3.0 in stage 1.0 (TID 4)"


def test_samples_are_counted_by_thread_and_by_the_innermost_planning_step():
    samples = [
        _sample(TASK, "org/apache/spark/unsafe/Platform.copyMemory"),
        _sample(TASK, "org/apache/spark/sql/execution/SortExec.doExecute"),
        # a class loaded while analysing counts as class loading: the innermost step wins
        _sample(
            DRIVER,
            "jdk/internal/loader/BuiltinClassLoader.loadClass",
            "org/apache/spark/sql/catalyst/analysis/Analyzer.execute",
            "org/apache/spark/sql/execution/QueryExecution.$anonfun$lazyAnalyzed$2",
        ),
        _sample(
            DRIVER,
            "org/apache/spark/sql/catalyst/rules/RuleExecutor.execute",
            "org/apache/spark/sql/execution/QueryExecution.$anonfun$lazyAnalyzed$2",
        ),
        _sample(
            DRIVER,
            "org/apache/spark/sql/catalyst/rules/RuleExecutor.execute",
            "org/apache/spark/sql/execution/QueryExecution.$anonfun$lazyOptimizedPlan$2",
        ),
        _sample(DRIVER, "org/antlr/v4/runtime/atn/ParserATNSimulator.closure_"),
        _sample(DRIVER, "py4j/GatewayConnection.run"),
        _sample("spark-listener-group-shared", "java/util/HashMap.get"),
    ]
    profile = jvm_profile.classify(samples)
    assert profile["samples"] == 8
    assert profile["threads"] == {"task": 2, "driver": 5, "other": 1}
    assert profile["driver_steps"] == {
        "class loading": 1,
        "analysis": 1,
        "optimisation": 1,
        "SQL parsing": 1,
        "other (py4j, listing, scheduling, markers)": 1,
    }
    line = jvm_profile.summary_line(profile)
    assert "tasks 25%, driver thread 62%, other 12%" in line
    assert "analysis 20%" in line


CITIME = """
Individual compiler times (for compiled methods only)
------------------------------------------------

  C1 {speed: 125392.866 bytes/s; standard: 20.125 s, 2520603 bytes, 25293 methods; osr:  0.409 s, 54201 bytes, 137 methods; nmethods_size: 44704424 bytes; nmethods_code_size: 29818240 bytes}
  C2 {speed: 14945.159 bytes/s; standard: 124.380 s, 1872709 bytes, 3622 methods; osr:  5.685 s, 71134 bytes, 78 methods; nmethods_size: 10292088 bytes; nmethods_code_size: 5769824 bytes}
"""


def test_the_jits_totals_are_read_from_the_jvms_report():
    assert jvm_profile.compile_totals(CITIME) == {
        "C1": {"seconds": 20.5, "methods": 25293},
        "C2": {"seconds": 130.1, "methods": 3622},
    }
    assert jvm_profile.compile_totals("no report: the JVM ran without -XX:+CITime") == {}
    line = jvm_profile.summary_line(
        {"samples": 0, "threads": {}, "driver_steps": {}, "jit": jvm_profile.compile_totals(CITIME)}
    )
    assert "C2 130.1 s for 3622 methods" in line
