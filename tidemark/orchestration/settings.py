"""The DAGs' run-time settings: an Airflow Variable, else an environment variable, else a default.

Every DAG reads the lake the same way (`lake_uri`: the Variable `tidemark_lake`, else TIDEMARK_LAKE)
and refuses to run without one, with one message. Read when a task runs, never at parse time (a
Variable read costs a metadata query on every parse).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

# A Variable's value by name, None when unset.
Variables = Callable[[str], "str | None"]

LAKE_VARIABLE = "tidemark_lake"
LAKE_ENV = "TIDEMARK_LAKE"


def airflow_variable(name: str) -> str | None:
    """An Airflow Variable's value as text, None when unset (inside a running task)."""
    # Imported when a task reads a setting: Airflow is in the DAGs' environment only (the function
    # bundle ships tidemark/ without it), and the SDK's Variable needs a task's context anyway.
    from airflow.sdk import Variable

    value = Variable.get(name, default=None)
    return None if value is None else str(value)


def setting(
    variable: str,
    env: str,
    default: str = "",
    *,
    variables: Variables = airflow_variable,
    environ: Mapping[str, str] = os.environ,
) -> str:
    """The Variable `variable` when set, else the environment variable `env`, else `default`."""
    return variables(variable) or environ.get(env) or default


def lake_uri(*, variables: Variables = airflow_variable, environ: Mapping[str, str] = os.environ) -> str:
    """The lake's URI: the Variable tidemark_lake, else TIDEMARK_LAKE.

    Raises:
        ValueError: neither is set (the message says what to set).
    """
    uri = setting(LAKE_VARIABLE, LAKE_ENV, variables=variables, environ=environ)
    if not uri:
        raise ValueError(f"set the Airflow Variable {LAKE_VARIABLE} or {LAKE_ENV} to the lake URI")
    return uri
