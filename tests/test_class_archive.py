"""The JVM class archive local Spark starts from: which archive a Java and a Spark get, when a
session is given it, and a real build that a JVM then maps (tidemark/base/class_archive.py,
streaming_job/class_archive.py, `tidemark class-archive`)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from tidemark.base import class_archive
from tidemark.devstack.spark_connect import SparkConnectServer

TIDEMARK = os.path.join(os.path.dirname(sys.executable), "tidemark")


@pytest.fixture
def fake_install(tmp_path, monkeypatch):
    """A Java and a Spark of files (the key reads their names, sizes and times), a cache of our own."""
    java_home, spark_home = tmp_path / "java", tmp_path / "spark"
    (java_home / "bin").mkdir(parents=True)
    (java_home / "bin" / "java").write_text("a java")
    (spark_home / "jars").mkdir(parents=True)
    for name in ("spark-core.jar", "spark-sql.jar"):
        (spark_home / "jars" / name).write_text(name)
    monkeypatch.setenv("JAVA_HOME", str(java_home))
    monkeypatch.setenv("SPARK_HOME", str(spark_home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(class_archive.ENV, raising=False)
    return java_home, spark_home


def test_the_archive_is_named_after_the_java_and_the_jars(fake_install, tmp_path):
    java_home, spark_home = fake_install
    first = class_archive.archive_path()
    assert first is not None
    assert first.startswith(str(tmp_path / "cache" / "tidemark" / "class-archive"))
    assert class_archive.archive_path() == first  # the same install, the same archive
    (spark_home / "jars" / "spark-sql.jar").write_text("another spark-sql")  # pyspark upgraded
    second = class_archive.archive_path()
    assert second != first
    (java_home / "bin" / "java").write_text("another java, another size")
    assert class_archive.archive_path() not in (first, second)


def test_off_or_named_by_the_environment(fake_install, tmp_path, monkeypatch):
    monkeypatch.setenv(class_archive.ENV, "0")
    assert class_archive.archive_path() is None
    monkeypatch.setenv(class_archive.ENV, str(tmp_path / "mine.jsa"))
    assert class_archive.archive_path() == str(tmp_path / "mine.jsa")


def test_no_archive_without_a_java(fake_install, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", "/nonexistent")
    assert class_archive.archive_path() is None


def test_a_session_is_given_the_archive_only_when_it_exists(fake_install):
    path = class_archive.archive_path()
    conf = {class_archive.JAVA_OPTIONS: "-XX:+UseSerialGC", "spark.ui.enabled": "false"}
    assert class_archive.with_archive(conf) == conf  # not built yet: the JVM starts as before
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as handle:
        handle.write(b"an archive")
    given = class_archive.with_archive(conf)
    assert given[class_archive.JAVA_OPTIONS] == f"-XX:+UseSerialGC -XX:SharedArchiveFile={path} {class_archive.QUIET}"
    assert given["spark.ui.enabled"] == "false"
    assert class_archive.JAVA_OPTIONS in class_archive.with_archive({})
    # options that decide class sharing themselves (a build, an operator's own archive) are left alone
    for own in ("-Xshare:off", "-XX:SharedArchiveFile=/other.jsa", "-XX:ArchiveClassesAtExit=/new.jsa"):
        assert class_archive.with_archive({class_archive.JAVA_OPTIONS: own}) == {class_archive.JAVA_OPTIONS: own}


def test_stale_archives_are_the_others_in_the_folder(tmp_path):
    keep = tmp_path / "new.jsa"
    for name in ("new.jsa", "old.jsa", "older.jsa", "notes.txt"):
        (tmp_path / name).write_text(name)
    assert class_archive.stale(str(keep)) == [str(tmp_path / "old.jsa"), str(tmp_path / "older.jsa")]


@pytest.mark.slow
def test_a_built_archive_is_mapped_by_a_local_session(tmp_path):
    """Built by the command as setup runs it, removing the archives of an earlier Java or Spark; the
    next build is "up to date"; a session's JVM maps it and runs a query."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop(class_archive.ENV, None)
    folder = tmp_path / "cache" / "tidemark" / "class-archive"
    folder.mkdir(parents=True)
    (folder / "0000000000000000.jsa").write_text("an archive of another install")

    built = subprocess.run([TIDEMARK, "class-archive"], env=env, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    assert "class archive built" in built.stdout
    (path,) = [str(p) for p in folder.glob("*.jsa")]  # the stale one removed
    assert os.path.getsize(path) > 10_000_000
    again = subprocess.run([TIDEMARK, "class-archive"], env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0
    assert f"up to date: {path}" in again.stdout

    # a session as tidemark builds it (no option of ours): its JVM maps the archive
    session = textwrap.dedent(
        """
        from tidemark.base.spark import build_session
        spark = build_session("t", "local[1]")
        print("rows", spark.range(5).selectExpr("id % 2 AS k").groupBy("k").count().count())
        with open(f"/proc/{spark.sparkContext._gateway.proc.pid}/maps") as maps:
            print("mapped", sorted({line.split()[-1] for line in maps if line.rstrip().endswith(".jsa")}))
        """
    )
    mapped = subprocess.run([sys.executable, "-c", session], env=env, capture_output=True, text=True, timeout=300)
    assert mapped.returncode == 0, mapped.stderr[-3000:]
    assert "rows 2" in mapped.stdout
    assert path in mapped.stdout.split("mapped", 1)[1]


def _mapped_archives(pid: int) -> set[str]:
    """The archives the java processes of a process tree have mapped (the JVM maps one it accepts)."""
    root = psutil.Process(pid)
    jvms = [p for p in [root, *root.children(recursive=True)] if p.name() == "java"]
    return {m.path for jvm in jvms for m in jvm.memory_maps() if m.path.endswith(class_archive.SUFFIX)}


@pytest.mark.slow
def test_the_spark_connect_server_maps_the_archive_and_keeps_its_logging(tmp_path):
    """Its class path must be the one the archive was built with (its conf folder first used to
    differ, and the JVM left the archive unmapped); its logging still comes from its own file."""
    # setup built it (scripts/setup.sh); "up to date" then, else built here
    ensured = subprocess.run([TIDEMARK, "class-archive"], capture_output=True, text=True, timeout=600)
    assert ensured.returncode == 0, ensured.stderr[-3000:]
    path = class_archive.archive_path()
    assert path is not None
    assert os.path.isfile(path)
    with SparkConnectServer(str(tmp_path / "connect")) as server:
        assert server.managed is not None
        assert path in _mapped_archives(server.managed.pid)
    log = Path(server.log_path).read_text()
    assert "Spark Connect server started at" in log
    assert " INFO SparkContext:" not in log  # Spark's own defaults log at INFO; ours at WARN but the start
