"""Spark SQL of tidemark, kept as .sql files and run with bound parameters.

Values from users never reach SQL text: callers pass them as named parameters (`:gap_us`), which
Spark binds as literals (spark.sql(sqlText, args=...)). Input DataFrames are passed by name and
referenced as `{name}` in the files (spark.sql(sqlText, **dataframes)): Spark gives each a name of
its own for the one query, so concurrent runs on one session (threads of a driver, Spark Connect
clients) never share a view. A literal brace in a file must be doubled (`{{`).

The rules several files share (the session id, the kept-copy rule, the event struct) are written
once, in dedup_sql/rules.py, and referenced as `@name(...)` macros that `load` renders.
"""

from __future__ import annotations

import re
import uuid
from functools import cache
from importlib import resources

from dedup_sql import rules as sql_rules

_NAME = re.compile(r"^[a-z_]+$")


@cache
def load(name: str) -> str:
    """The text of dedup_sql/<name>.sql, its rule macros rendered (comments kept; Spark ignores them)."""
    if not _NAME.match(name):
        raise ValueError(f"invalid SQL file name {name!r}")
    return sql_rules.render(resources.files(__package__).joinpath(f"{name}.sql").read_text(encoding="utf-8"))


def run(spark, name: str, inputs: dict | None = None, views: list | None = None, **params):
    """Run one SQL file: `inputs` the DataFrames its `{name}`s stand for, `params` its `:name`s
    (bound by Spark). Returns the DataFrame.

    With `views` (a list), the inputs are registered as temp views of unique names that are
    appended to it and left for the caller to drop (`drop_views`) once it is done: pyspark drops
    the views of `spark.sql(text, **dataframes)` as soon as the call returns, and dropping a view
    uncaches the DataFrame it was made from, so a persisted input would be recomputed by every later
    query (the 1M-session dedup computed everything twice that way)."""
    inputs = inputs or {}
    for key in inputs:
        if not _NAME.match(key):
            raise ValueError(f"invalid input name {key!r}")
    text = load(name).strip().rstrip(";")
    if views is None:
        return spark.sql(text, args=params, **inputs)
    names = {}
    for key, frame in inputs.items():
        names[key] = f"tidemark_{key}_{uuid.uuid4().hex}"
        frame.createOrReplaceTempView(names[key])
        views.append(names[key])
    # the same `{name}` / `{{` rules as Spark's formatter (both are Python's str.format)
    return spark.sql(text.format(**names), args=params)


def drop_views(spark, views: list) -> None:
    """Drop the temp views `run(..., views=...)` left (uncaching what they were made from)."""
    while views:
        spark.catalog.dropTempView(views.pop())
