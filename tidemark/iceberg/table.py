"""The deduplicated sessions as an Apache Iceberg table: catalog, schema, partitioning, loading.

One table per lake, `tidemark.sessions_dedup`, located in the lake:

    <lake>/sessions_dedup/metadata/                                  Iceberg metadata (pyiceberg writes it)
    <lake>/sessions_dedup/data/event_date=D/run=<run_id>/bucket=<k>/part-*.parquet   one dedup run's output (Spark)
    <lake>/sessions_dedup/data/event_date=D/run=<run_id>/_tidemark_run.json   what that run included

Which catalog holds it (the first that applies):
1. pyiceberg's own configuration of a catalog named `tidemark` (or $TIDEMARK_CATALOG): environment
   variables such as PYICEBERG_CATALOG__TIDEMARK__URI=postgresql+psycopg2://... (a SQL catalog on
   PostgreSQL), or ~/.pyiceberg.yaml;
2. `<lake>/_catalog/catalog.json`: the catalog's pyiceberg properties kept in the lake itself, e.g.
   {"type": "rest", "uri": "https://biglake.googleapis.com/iceberg/v1/restcatalog", ...} (Google's
   BigLake metastore; terraform/iceberg.tf writes it), so that every process that knows the lake
   (Dataproc driver, Composer worker, a laptop) finds the catalog with nothing else to pass. Keep
   secrets out of it: use 1. for a catalog that needs a password;
3. for a local lake, a SQLite SQL catalog inside the lake, `<lake>/_catalog/iceberg.db`: nothing to
   run, and the lake folder is the whole state (the local stack's lake lives in its home).
See docs/production.md.

Spark computes and writes the Parquet files; pyiceberg commits them (tidemark.iceberg.commits) and reads
them (tidemark.iceberg.reader). Everything here is pure Python: no JVM.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Callable
from datetime import date
from typing import Any, Literal, ParamSpec, TypeVar, overload

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.expressions import BooleanExpression, EqualTo
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.utils.config import Config
from sqlalchemy.exc import IntegrityError, OperationalError
from tenacity import retry, retry_if_exception_type, stop_after_attempt, stop_after_delay, wait_random_exponential

from tidemark.base import layout
from tidemark.base.logs import get_logger
from tidemark.session import session_schema
from tidemark.store.lake import Lake

log = get_logger("table")

CATALOG_NAME = os.environ.get("TIDEMARK_CATALOG", "tidemark")
DEFAULT_IDENTIFIER = "tidemark.sessions_dedup"
_CATALOG_TYPES = ("rest", "sql", "glue", "hive", "bigquery")
PARTITION_COLUMN = "event_date"
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$")

# Columns, in the order engines show them: (name, Iceberg type, doc), from THE session schema
# (tidemark/session/session_schema.py). Every field is optional (see session_schema.iceberg_schema).
COLUMNS = tuple((c.name, c.iceberg, c.doc) for c in session_schema.TABLE)


class CatalogNotConfigured(ValueError):
    """A lake on an object store needs a catalog service; none is configured."""


def schema() -> Schema:
    """The table's Iceberg schema.

    Defined in tidemark/session/session_schema.py; `session_schema.evolve` brings an existing table to it.
    """
    table_schema: Schema = session_schema.iceberg_schema()
    return table_schema


def partition_spec(table_schema: Schema) -> PartitionSpec:
    """The table's partitioning: by event date (identity), partition field id 1000."""
    source = table_schema.find_field(PARTITION_COLUMN)
    return PartitionSpec(
        PartitionField(source_id=source.field_id, field_id=1000, transform=IdentityTransform(), name=PARTITION_COLUMN)
    )


def table_location(lake: Lake) -> str:
    """Where the table lives: `<lake>/sessions_dedup`, as a URI pyiceberg and engines resolve."""
    return file_uri(lake.dedup_root())


def date_filter(event_date: date) -> BooleanExpression:
    """The row filter of one event date's partition (scan planning prunes to it)."""
    # pyiceberg's positional form EqualTo(term, literal); its typed signature is keyword-only
    return EqualTo(PARTITION_COLUMN, layout.event_date_text(event_date))  # type: ignore[call-arg, arg-type]


def file_uri(path: str) -> str:
    """A path as the URI Iceberg's metadata records (a local path as file://, absolute)."""
    if "://" in path:
        return path
    return "file://" + os.path.abspath(path)


def identifier() -> str:
    """The table's catalog identifier, namespace.table ($TIDEMARK_TABLE, by default tidemark.sessions_dedup)."""
    name = os.environ.get("TIDEMARK_TABLE", DEFAULT_IDENTIFIER)
    if not _IDENTIFIER.match(name):
        raise ValueError(f"invalid TIDEMARK_TABLE {name[:80]!r}: expected namespace.table (letters, digits, _)")
    return name


# --- catalogs -------------------------------------------------------------------------------------

# The catalog properties are pyiceberg's own (strings, from JSON or the environment).
CatalogConfig = dict[str, Any]

_catalogs: dict[tuple[tuple[str, Any], ...], Catalog] = {}
_lock = threading.Lock()


def catalog_config(lake: Lake) -> CatalogConfig:
    """The properties of the catalog that holds this lake's table (see the module docstring)."""
    configured = Config().get_catalog_config(CATALOG_NAME)
    if configured:
        return dict(configured)
    in_lake = _lake_config(lake)
    if in_lake is not None:
        return in_lake
    if not lake.is_local:
        raise CatalogNotConfigured(
            f"lake {lake} is not a local folder, so its Iceberg catalog must be configured: set "
            f"PYICEBERG_CATALOG__{CATALOG_NAME.upper()}__URI (postgresql+psycopg2://... for a SQL catalog) "
            f"or PYICEBERG_CATALOG__{CATALOG_NAME.upper()}__TYPE=rest with its __URI and __WAREHOUSE "
            f"(see docs/production.md), or write its properties to {lake.catalog_config()}"
        )
    local_catalog = lake.local_catalog().at()[1]
    return {"type": "sql", "uri": f"sqlite:///{local_catalog}", "warehouse": file_uri(lake.root)}


_lake_configs: dict[Lake, CatalogConfig | None] = {}


def _lake_config(lake: Lake) -> CatalogConfig | None:
    """The catalog properties kept in the lake (read once per process), checked."""
    if lake not in _lake_configs:
        config = lake.catalog_config().read_json()
        if config is not None:
            if (
                not isinstance(config, dict)
                or config.get("type") not in _CATALOG_TYPES
                or not isinstance(config.get("uri", ""), str)
            ):
                raise ValueError(
                    f"{lake.catalog_config()}: expected a JSON object of pyiceberg "
                    f'catalog properties with "type" one of {", ".join(_CATALOG_TYPES)}'
                )
            config = {k: v for k, v in config.items() if not k.startswith("_")}  # "_comment" keys
        _lake_configs[lake] = config
    return _lake_configs[lake]


# What a lost compare-and-swap raises: pyiceberg's, and SQLite's lock of a local SQL catalog.
CONFLICTS: tuple[type[Exception], ...] = (CommitFailedException, OperationalError)
_P = ParamSpec("_P")
_T = TypeVar("_T")


def retrying_conflicts(attempt: Callable[_P, _T], also: tuple[type[Exception], ...] = ()) -> Callable[_P, _T]:
    """`attempt`, retried on a commit conflict (and on `also`) for up to 5 minutes.

    Random exponential backoff: the one policy of every commit to the lake's tables (a version,
    a changeset, maintenance, gc's expiry).
    """
    return retry(
        retry=retry_if_exception_type(CONFLICTS + also),
        stop=stop_after_delay(300),
        wait=wait_random_exponential(multiplier=0.05, max=2),
        reraise=True,
    )(attempt)


# SQLite answers "database is locked" (OperationalError) while another process commits, and two
# processes creating the catalog's own tables at once may collide: both are worth a retry.
_TRANSIENT = (OperationalError,)


def catalog(lake: Lake) -> Catalog:
    """The (cached, thread-safe) pyiceberg catalog of this lake."""
    config = catalog_config(lake)
    key = tuple(sorted(config.items()))
    with _lock:
        found = _catalogs.get(key)
        if found is None:
            if config.get("type") == "sql" and config["uri"].startswith("sqlite:///"):
                os.makedirs(os.path.dirname(config["uri"][len("sqlite:///") :]), exist_ok=True)
            found = _open_catalog(config)
            _catalogs[key] = found
        return found


@retry(
    retry=retry_if_exception_type(_TRANSIENT),
    stop=stop_after_attempt(8),
    wait=wait_random_exponential(multiplier=0.05, max=2),
    reraise=True,
)
def _open_catalog(config: CatalogConfig) -> Catalog:
    return load_catalog(CATALOG_NAME, **config)


def exists(lake: Lake) -> bool:
    """Whether the lake has its table yet (never creates or evolves anything)."""
    return _may_exist(lake) and _load_if_any(lake) is not None


def may_exist(lake: Lake) -> bool:
    """Whether the lake can have tables in its catalog, without loading any table.

    exists() reads the sessions table's metadata file; this reads nothing of the table.
    """
    return _may_exist(lake)


def _load_if_any(lake: Lake) -> Table | None:
    try:
        return _load(lake)
    except (NoSuchTableError, NoSuchNamespaceError):
        return None


def _may_exist(lake: Lake) -> bool:
    """False when the lake cannot have a table.

    That is a local lake without its catalog file and no catalog configured (opening the catalog
    would create the file).
    """
    return not (
        lake.is_local and not lake.local_catalog().exists() and not _configured() and _lake_config(lake) is None
    )


def _configured() -> bool:
    return bool(Config().get_catalog_config(CATALOG_NAME))


@overload
def load(lake: Lake, create: Literal[True]) -> Table: ...


@overload
def load(lake: Lake, create: bool = False) -> Table | None: ...


def load(lake: Lake, create: bool = False) -> Table | None:
    """The lake's table, freshly loaded from its catalog (None when it does not exist and not create).

    Refuses a table that lives elsewhere: a catalog shared by several lakes must not mix them up.
    """
    if not create and not _may_exist(lake):
        return None
    # One load, no existence check first: pyiceberg's table_exists loads the table (reads its
    # metadata file), so checking then loading read the metadata twice per load.
    table = _load_if_any(lake)
    if table is None:
        if not create:
            return None
        table = _create(lake)
    if table.location().rstrip("/") != table_location(lake).rstrip("/"):
        raise RuntimeError(
            f"catalog table {identifier()} lives at {table.location()}, not in lake {lake}: "
            "set TIDEMARK_TABLE to a table of its own for this lake"
        )
    # An existing table written with an older session schema is evolved in place, once (a no-op
    # without a commit when it is current; safe under processes doing it at once).
    evolved: Table = session_schema.evolve(table)
    return evolved


def put_back(lake: Lake, metadata_location: str) -> None:
    """Point the catalog at an earlier metadata file of the table, as it was before a correction.

    A correction timed over and over (the benchmarks, the Connect server's warm-up) then does the
    same work again each time. The catalog's entry only: the files the correction wrote stay.
    """
    tables = catalog(lake)
    tables.drop_table(identifier())
    tables.register_table(identifier(), metadata_location)


def load_existing(lake: Lake) -> Table:
    """The lake's table where it must exist (a version was committed); raises when it does not.

    The same reads as `load`.
    """
    table = load(lake)
    if table is None:
        raise RuntimeError(f"lake {lake} has no table {identifier()}, yet a version of it was read")
    return table


@retry(
    retry=retry_if_exception_type(_TRANSIENT),
    stop=stop_after_attempt(8),
    wait=wait_random_exponential(multiplier=0.05, max=2),
    reraise=True,
)
def _load(lake: Lake) -> Table:
    return catalog(lake).load_table(identifier())


@retry(
    retry=retry_if_exception_type(_TRANSIENT),
    stop=stop_after_attempt(8),
    wait=wait_random_exponential(multiplier=0.05, max=2),
    reraise=True,
)
def _create(lake: Lake) -> Table:
    cat = catalog(lake)
    namespace = identifier().split(".")[0]
    # another process may create it between the check and the insert (the SQL catalog's race)
    with contextlib.suppress(NamespaceAlreadyExistsError, IntegrityError):
        cat.create_namespace_if_not_exists(namespace)
    table_schema = schema()
    try:
        table = cat.create_table(
            identifier(),
            table_schema,
            location=table_location(lake),
            partition_spec=partition_spec(table_schema),
            properties={
                # tidemark.iceberg.commits retries conflicts itself, re-checking on the fresh snapshot that
                # it does not replace a more complete version; pyiceberg's own retry would not.
                "commit.retry.num-retries": "0",
                # Spark writes Parquet without Iceberg field ids: engines map columns by name.
                "schema.name-mapping.default": table_schema.name_mapping.model_dump_json(),
                "format-version": "2",
            },
        )
    except (TableAlreadyExistsError, IntegrityError):
        return cat.load_table(identifier())
    log.info("iceberg table created", table=identifier(), location=table.location())
    return table


def drop(lake: Lake) -> None:
    """Remove the lake's table: its catalog entry and its folder (benchmarks and tests start over)."""
    if _may_exist(lake):
        with contextlib.suppress(NoSuchTableError):
            catalog(lake).drop_table(identifier())
    lake.dedup_root().delete()
