"""A class archive of Spark's JVM, so a local Spark driver starts and runs its first queries sooner.

Why: a local SparkSession's JVM loads, verifies and links some 10,000 classes from Spark's jars
before and during its first queries, every time, on cores the first queries need. Mapped from an
archive instead (the JDK's class data sharing), on this 2-core machine: a cold process that starts
a session and runs two small queries took 7.7 s instead of 11.6-11.9 s (bench.spark_start), the
session alone 3.2 s instead of 5.4 s; `tidemark stream`'s one-batch run of a million lines, the whole
process, 26.5 s instead of 30.5 s and ~6 CPU seconds fewer (BENCHMARKS.md section 1).

How: a JVM started with -XX:ArchiveClassesAtExit=F writes the classes it loaded to F when it exits
(streaming_job/class_archive.py runs the stream's warm-up in one, `tidemark class-archive`, run by
scripts/setup.sh); a JVM started with -XX:SharedArchiveFile=F maps them. The JVM checks F against
itself and its class path and ignores an archive that does not match (its default, -Xshare:auto),
so an archive that went stale costs the saving and nothing else. The archive is named after the
java binary and Spark's jars it was built with, so an upgrade of either looks for a new one.
(Java 19's -XX:+AutoCreateSharedArchive does all of this itself; this project runs on Java 17.)

Where: $XDG_CACHE_HOME/tidemark/class-archive/<key>.jsa (~/.cache by default).
TIDEMARK_JVM_CLASS_ARCHIVE=0 neither uses nor builds one; a path ending in .jsa there names the
archive to use.
"""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import os
import shutil

from tidemark.base import switches

ENV = "TIDEMARK_JVM_CLASS_ARCHIVE"
SUFFIX = ".jsa"
JAVA_OPTIONS = "spark.driver.extraJavaOptions"
# A JVM given any of these already decides its class sharing itself: the archive is not added.
_OWN_SHARING = ("-XX:SharedArchiveFile", "-XX:ArchiveClassesAtExit", "-Xshare")
# The JVM's class-sharing messages (classes it leaves out of an archive, a stale archive it ignores)
# go to standard output, where the commands' own output (`--json`) goes: off.
QUIET = "-Xlog:cds*=off"


def spark_jars() -> str | None:
    """The jars folder of the Spark a local session launches: $SPARK_HOME's, else the pyspark package's."""
    home = os.environ.get("SPARK_HOME")
    if not home:
        spec = importlib.util.find_spec("pyspark")  # found without importing pyspark (seconds)
        if spec is None or not spec.submodule_search_locations:
            return None
        home = list(spec.submodule_search_locations)[0]
    # Symlinks resolved, as pyspark resolves the SPARK_HOME it launches from: the JVM records the
    # class path's real paths, and a venv reached through a link (a worktree's) is the same venv.
    jars = os.path.realpath(os.path.join(home, "jars"))
    return jars if os.path.isdir(jars) else None


def java_binary() -> str | None:
    """The java that Spark's launcher runs ($JAVA_HOME/bin/java, else the PATH's), symlinks resolved."""
    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    return os.path.realpath(java) if java and os.path.isfile(java) else None


def folder() -> str:
    """Where archives are kept: $XDG_CACHE_HOME/tidemark/class-archive."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "tidemark", "class-archive")


def archive_path() -> str | None:
    """The archive for this java and these jars (it may not exist yet); None when off or without either."""
    setting = os.environ.get(ENV, "").strip()
    if not switches.switched_on(ENV):
        return None
    if setting and setting.endswith(SUFFIX):
        return os.path.abspath(setting)
    java, jars = java_binary(), spark_jars()
    if java is None or jars is None:
        return None
    digest = hashlib.sha256()
    # what the JVM itself checks an archive against: the JVM binary and every jar of the class path
    for path in [java, *sorted(glob.glob(os.path.join(jars, "*.jar")))]:
        facts = os.stat(path)
        digest.update(f"{path}\0{facts.st_size}\0{facts.st_mtime_ns}\n".encode())
    return os.path.join(folder(), digest.hexdigest()[:16] + SUFFIX)


def built_archive() -> str | None:
    """The archive for this java and these jars when it has been built; None otherwise (archive_path)."""
    path = archive_path()
    return path if path is not None and os.path.isfile(path) else None


def with_archive(conf: dict[str, str]) -> dict[str, str]:
    """`conf` with the driver JVM mapping the archive, when one exists and the options do not decide otherwise."""
    path = built_archive()
    options = conf.get(JAVA_OPTIONS, "")
    if path is None or any(flag in options for flag in _OWN_SHARING):
        return conf
    return {**conf, JAVA_OPTIONS: f"{options} -XX:SharedArchiveFile={path} {QUIET}".strip()}


def stale(keep: str) -> list[str]:
    """The other archives in `keep`'s folder (built for a java or jars since replaced)."""
    return sorted(p for p in glob.glob(os.path.join(os.path.dirname(keep), "*" + SUFFIX)) if p != keep)
