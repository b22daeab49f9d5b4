"""How a dedup run executes, chosen by how many rows it reads.

A small run (a date's late correction: a few hundred rows) spends most of its time planning, not
computing: it runs interpreted and pins its intermediate results with local checkpoints. A bigger
run compiles its plans and caches as usual: there the jobs dominate. Both are execution strategies
only, results do not depend on them (tests/test_dedup_incremental.py compares small interpreted,
checkpointed corrections with compiled, cached full runs, row for row), so setting them on a shared
session is harmless. DataFrame API only: `spark` may be a Spark Connect session.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# Up to this many rows read, a run is small (`tune`, `pin`).
SMALL_RUN_ROWS = 10_000

# What interpreting a plan takes: no whole-stage code generation, and every expression and
# projection built by its interpreted implementation (CodegenObjectFactoryMode).
_INTERPRETED = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}


def tune(spark: SparkSession, rows: int) -> None:
    """Settings for a run that reads `rows` rows: how it lists, and whether it compiles its plans.

    Listing a few hundred receipt folders is faster on the driver than as a Spark job. A small run
    has its operators interpreted instead of code-generated: Spark compiled 84-93 generated classes
    for every correction of a 148-session date (a Spark Connect session has a class loader of its
    own, so none is found compiled), about a second of the server's CPU for 162 rows; interpreted,
    1. Bigger runs compile as usual (the setting is unset), where the generated code pays for itself.
    """
    spark.conf.set("spark.sql.sources.parallelPartitionDiscovery.threshold", "1024")
    for key, interpreted in _INTERPRETED.items():
        if rows <= SMALL_RUN_ROWS:
            spark.conf.set(key, interpreted)
        else:
            spark.conf.unset(key)


def pin(frame: DataFrame, rows: int) -> DataFrame:
    """`frame`, computed once for the several actions of a run that reads `rows` rows.

    A bigger run persists it. A small run takes a lazy local checkpoint instead: each action over a
    persisted frame plans the whole query under it again (Catalyst analyses and optimizes the
    composed query to find its cached part in every summary, write and changeset), and on a small
    correction that planning was ~70% of the Connect server's time (BENCHMARKS.md section 2). A
    checkpoint cuts the lineage: the query is planned once, here, and later plans start from its
    rows (computed by the first action that needs them).

    Its cost, and why small runs only: a local checkpoint's blocks are not recomputed when an
    executor holding them is lost (the run fails; its retry computes again), and unpersist() does
    not free them: Spark's ContextCleaner does once the frame is unreferenced (on a Connect server
    when the session closes and the JVM collects; spark.cleaner.periodicGC.interval bounds that).
    """
    if rows <= SMALL_RUN_ROWS:
        return frame.localCheckpoint(eager=False)
    return frame.persist()
