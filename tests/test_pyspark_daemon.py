"""Python workers of a local session import pyspark from the installed package, not from Spark's
zip (tidemark.base.pyspark_daemon); a zip that is not an installed package's own copy stays."""

from __future__ import annotations

import os

import pytest

from tidemark.base.pyspark_daemon import installed_copies


def _touch(path) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    open(path, "w").close()
    return str(path)


@pytest.fixture
def site(tmp_path):
    """An installed pyspark with its zips, and py4j installed beside it."""
    _touch(tmp_path / "site" / "pyspark" / "__init__.py")
    _touch(tmp_path / "site" / "py4j" / "__init__.py")
    lib = tmp_path / "site" / "pyspark" / "python" / "lib"
    return str(tmp_path / "site"), _touch(lib / "pyspark.zip"), _touch(lib / "py4j-0.10.9.9-src.zip")


def test_the_zips_of_an_installed_pyspark_are_taken_off(site):
    root, pyspark_zip, py4j_zip = site
    assert installed_copies([pyspark_zip, py4j_zip, "/elsewhere", root]) == [pyspark_zip, py4j_zip]


def test_a_clusters_zip_stays(site, tmp_path):
    root, _, _ = site
    cluster = _touch(tmp_path / "opt" / "spark" / "python" / "lib" / "pyspark.zip")  # no package beside it
    assert installed_copies([cluster, root]) == []


def test_the_zips_stay_when_the_package_is_not_importable(site):
    root, pyspark_zip, py4j_zip = site
    assert installed_copies([pyspark_zip, py4j_zip]) == []  # the site folder is not on the path
    os.remove(os.path.join(root, "py4j", "__init__.py"))
    assert installed_copies([pyspark_zip, py4j_zip, root]) == [pyspark_zip]  # py4j only zipped


@pytest.mark.spark
def test_a_local_sessions_workers_import_the_installed_pyspark(spark):
    from pyspark.sql import functions as F
    from pyspark.sql.functions import udf

    @udf("string")
    def where_from(_):
        import pyspark

        return pyspark.__file__

    (found,) = {r[0] for r in spark.range(4).select(where_from(F.col("id"))).collect()}
    assert ".zip" not in found
    assert os.path.isfile(found)


def test_a_site_folder_reached_through_a_symlink_is_the_same_folder(site, tmp_path):
    root, pyspark_zip, py4j_zip = site
    os.symlink(root, tmp_path / "venv-link")  # a worktree's .venv linking to the real one
    assert installed_copies([pyspark_zip, py4j_zip, str(tmp_path / "venv-link")]) == [pyspark_zip, py4j_zip]
