"""PySpark's worker daemon, importing pyspark from the installed package rather than Spark's zip.

Spark starts Python workers (the stream's input contract, an Arrow UDF; its pane writer,
mapInArrow) through a daemon, `python -m pyspark.daemon`, with `$SPARK_HOME/python/lib/pyspark.zip`
first on the workers' PYTHONPATH. Python cannot cache compiled modules inside a zip, so every
daemon and every worker it forks compiles pyspark's modules from source again: 0.57 s for the
daemon and 0.7 s for each worker's `import pyspark.worker`, against 0.15 s from an installed
package's cached bytecode (measured here; BENCHMARKS.md section 1). A stream's first micro-batch
starts two daemons and several workers, on a 2-core machine beside the JVM's own warm-up.

When Spark is the pip-installed pyspark (SPARK_HOME is the package, as in local mode), the zip is
that package's own copy, so the workers lose nothing by importing the package instead. This module
takes the zip off sys.path only then, and leaves any other Spark's zip alone (a cluster's zip
belongs to its Spark, whatever is installed beside the job). Nothing else is imported before the
fork: pyspark imports the worker after it, because modules such as pyarrow start threads.

Used through `spark.python.daemon.module` (tidemark.base.spark sets it for local masters).
"""

from __future__ import annotations

import os
import sys

MODULE = "tidemark.base.pyspark_daemon"


def installed_copies(path: list[str]) -> list[str]:
    """The entries of `path` that are Spark's zips of an installed pyspark package.

    An entry counts when it is one of Spark's zips (pyspark, py4j) inside an installed pyspark
    package (`<site>/pyspark/python/lib/*.zip`), `<site>` is on the path too and holds the zipped
    module as a package of its own: every module in the zip is importable from there.
    """
    on_path = {os.path.realpath(entry) for entry in path}  # a venv reached through a symlink is one folder
    found = []
    for entry in path:
        lib = os.path.dirname(entry)
        package = os.path.dirname(os.path.dirname(lib))
        site = os.path.dirname(package)
        module = next((m for m in ("pyspark", "py4j") if os.path.basename(entry).startswith(m)), None)
        if (
            module
            and entry.endswith(".zip")
            and os.path.basename(lib) == "lib"
            and os.path.basename(package) == "pyspark"
            and os.path.realpath(site) in on_path
            and os.path.isfile(os.path.join(site, module, "__init__.py"))
        ):
            found.append(entry)
    return found


def main() -> None:
    """Run PySpark's worker daemon with the installed package's copies of Spark's zips off sys.path."""
    for entry in installed_copies(sys.path):
        sys.path.remove(entry)
    # Imported only after the path is settled, so it comes from the package, not the zip.
    from pyspark import daemon

    daemon.manager()  # reads the worker module from sys.argv, as `python -m pyspark.daemon` does


if __name__ == "__main__":
    main()
