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
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING

from dedup_sql import rules as sql_rules

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_NAME = re.compile(r"^[a-z_]+$")


@cache
def load(name: str) -> str:
    """The text of dedup_sql/<name>.sql, its rule macros rendered (comments kept; Spark ignores them)."""
    if not _NAME.match(name):
        raise ValueError(f"invalid SQL file name {name!r}")
    return sql_rules.render(resources.files(__package__).joinpath(f"{name}.sql").read_text(encoding="utf-8"))


def text(name: str) -> str:
    """The query of dedup_sql/<name>.sql as `run` sends it (rendered, no trailing semicolon)."""
    return load(name).strip().rstrip(";")


def compose(name: str, **queries: str) -> str:
    """The query of <name>.sql with some of its `{input}`s replaced by whole queries, as subqueries.

    The queries are `text` of another file, or another `compose`. Several files that feed each other run as
    one query, analysed by one spark.sql call instead of one per file (each call is a round trip
    and an analysis in the driver: the stream's three files cost ~30-40 ms more per batch run
    apart). The remaining `{input}`s are `run_text`'s inputs; the parameters of every part are
    bound together, so parts that share a name (`:gap_us`) share its value.
    """
    lines = text(name).split("\n")
    for key, sub in queries.items():
        placeholder = "{" + key + "}"
        found = False
        for number, line in enumerate(lines):
            code, comment = _split_comment(line)
            found = found or placeholder in code
            # newlines: a part's trailing `--` comment must not swallow the closing parenthesis;
            # the comments that name the input keep its name without braces (Spark's formatter
            # reads comments too)
            lines[number] = code.replace(placeholder, f"(\n{sub}\n)") + comment.replace(placeholder, key)
        if not _NAME.match(key) or not found:
            raise ValueError(f"{name}.sql has no input {placeholder}")
    return "\n".join(lines)


def _split_comment(line: str) -> tuple[str, str]:
    """(code, `--` comment) of one line of SQL; a `--` inside a quoted literal is code."""
    quoted = False
    for at, char in enumerate(line):
        if char == "'":
            quoted = not quoted
        elif not quoted and line.startswith("--", at):
            return line[:at], line[at:]
    return line, ""


def run_text(
    spark: SparkSession,
    query: str,
    inputs: Mapping[str, DataFrame] | None = None,
    views: list[str] | None = None,
    **params: object,
) -> DataFrame:
    """Run a query made by `text` / `compose`: `inputs` its `{name}`s, `params` its `:name`s.

    `views`: as `run`'s.
    """
    inputs = _checked(inputs)
    if views is None or _is_connect(spark):
        return spark.sql(query, args=params, **inputs)
    names: dict[str, str] = {}
    for key, frame in inputs.items():
        names[key] = f"tidemark_{key}_{uuid.uuid4().hex}"
        frame.createOrReplaceTempView(names[key])
        views.append(names[key])
    # the same `{name}` / `{{` rules as Spark's formatter (both are Python's str.format)
    return spark.sql(query.format(**names), args=params)


def run(
    spark: SparkSession,
    name: str,
    inputs: Mapping[str, DataFrame] | None = None,
    views: list[str] | None = None,
    **params: object,
) -> DataFrame:
    """Run one SQL file; its DataFrame.

    `inputs` are the DataFrames its `{name}`s stand for, `params` its `:name`s (bound by Spark).

    With `views` (a list), the inputs are registered as temp views of unique names that are
    appended to it and left for the caller to drop (`drop_views`) once it is done: pyspark drops
    the views of `spark.sql(text, **dataframes)` as soon as the call returns, and dropping a view
    uncaches the DataFrame it was made from, so a persisted input would be recomputed by every later
    query (the 1M-session dedup computed everything twice that way). A Spark Connect session needs
    no views (none is appended): its client sends the inputs' plans with the query (the server
    resolves `{name}` to them, no view is made or dropped), saving a round trip per input and
    per drop.
    """
    return run_text(spark, text(name), inputs, views, **params)


def _is_connect(spark: SparkSession) -> bool:
    """Whether `spark` is a Spark Connect session (pyspark.sql.connect), not a classic one."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _checked(inputs: Mapping[str, DataFrame] | None) -> Mapping[str, DataFrame]:
    """The inputs, each name checked (a name is written into the SQL text)."""
    for key in inputs or {}:
        if not _NAME.match(key):
            raise ValueError(f"invalid input name {key!r}")
    return inputs or {}


def drop_views(spark: SparkSession, views: list[str]) -> None:
    """Drop the temp views `run(..., views=...)` left (uncaching what they were made from)."""
    while views:
        spark.catalog.dropTempView(views.pop())
