"""Spark SQL of tidemark, kept as .sql files and run with bound parameters.

Values from users never reach SQL text: callers pass them as named parameters (`:gap_us`), which
Spark binds as literals (spark.sql(sqlText, args=...)). View names are fixed by the code.
"""
from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources

_NAME = re.compile(r"^[a-z_]+$")


@lru_cache(maxsize=None)
def load(name: str) -> str:
    """The text of dedup_sql/<name>.sql (comments kept; Spark ignores them)."""
    if not _NAME.match(name):
        raise ValueError(f"invalid SQL file name {name!r}")
    return resources.files(__package__).joinpath(f"{name}.sql").read_text(encoding="utf-8")


def run(spark, name: str, **params):
    """Run one SQL file with named parameters bound by Spark; returns the DataFrame."""
    return spark.sql(load(name).strip().rstrip(";"), args=params)
