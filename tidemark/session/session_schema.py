"""THE session row, written once: its columns, their schema versions, and how old rows get new ones.

Each column's name, Spark type, Iceberg type and doc, the rows besides the table's that hold it (an
island, a pane, the stream's state), the schema version that added it, and how a row of an older
version gets it.

Everything that spells a session row derives from here:

- the dedup's islands (dedup_sql/dedup_sessions.sql's output; the version files and their
  `context/`, tidemark/deduplication/incremental.py's ISLAND_COLUMNS and read schema) and the table's columns
  (tidemark/deduplication/dedup.py's OUTPUT_COLUMNS, tidemark/iceberg/table.py's COLUMNS and schema());
- the stream's panes (dedup_sql/stream_panes.sql, streaming_job/batch.py's select) and its open
  state (streaming_job/state.py's STATE_SCHEMA and STATE_COLUMNS);
- the column tables of docs/lake-layout.md ("Pane rows" and the deduplicated sessions table):
  `markdown_table` renders them, and tests/test_session_schema.py checks the docs hold exactly
  that, and that the SQL files produce exactly these columns.

Adding a column (docs/architecture.md, "Drill: a new session column"): add a Column to TABLE with
the next VERSION as `since`, a `fill` and the `rows` that hold it, compute it in the SQL, and `evolve` adds it to an existing
Iceberg table in place when the table is loaded.

Versions. A dedup version's marker records the schema version its files were written with
(`session_schema`; absent = 1). The incremental path starts from the previous version's files: a
column that version lacks is computed with the column's `fill` (a Spark SQL expression over the
older row's columns, e.g. its `events`), or, when a column has no fill, the run falls back to the
full path (`incremental.base`). The table's files of a version written before a column existed hold
no value for it: Iceberg engines read them as null until that date is deduplicated again.
tidemark's reader (tidemark/iceberg/reader.py) does not hand those nulls on: `complete` computes such a
column with the column's `read_fill` (the same rule as `fill`, over pyarrow rows; tests check the
two agree), and names in the result what it computed and what stays null (a column with no fill).
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dedup_sql import rules as sql_rules

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyiceberg.types import IcebergType
    from pyspark.sql import DataFrame

# The schema version of the rows this tidemark writes. 1: the columns before versioning.
VERSION = 2
# The table property recording the version an evolved table was brought to (a record for operators;
# what counts is the columns: `table_version`).
TABLE_PROPERTY = "tidemark.session-schema"
# The dedup version marker's key recording the schema version of the run's files.
MARKER_KEY = "session_schema"


class Row(enum.Enum):
    """The rows, besides the table's, that hold a session column."""

    ISLAND = "island"  # a dedup island: dedup_sessions.sql's output, a version's files and its context
    PANE = "pane"  # a stream pane: stream_panes.sql + streaming_job/batch.py, a receipt partition's rows
    STATE = "state"  # the stream's open state (a column computed from `events` needs none)


# Shorthands for Column.rows.
_EVERYWHERE = frozenset(Row)
_ISLAND_AND_PANE = frozenset({Row.ISLAND, Row.PANE})


@dataclass(frozen=True)
class Column:
    """One column of the session row: its types, its doc, and which rows hold it."""

    name: str
    spark: str  # Spark SQL DDL type
    iceberg: str  # Iceberg type as docs and `str(field_type)` show it
    doc: str  # the table's doc (Iceberg field doc and the docs' table)
    since: int = 1  # the schema version that added the column
    # Spark SQL expression computing the column from a row of an older version (its other columns);
    # None: it cannot be computed from them (a run starting from such a version takes the full path).
    fill: str | None = None
    # The same computation for readers (tidemark/iceberg/reader.py through `complete`): a row of the older
    # version as a dict of `fill_inputs` -> the value. Given with `fill`, or neither.
    read_fill: Callable[[dict[str, Any]], Any] | None = None
    fill_inputs: tuple[str, ...] = ()
    pane_doc: str | None = None  # the column's meaning in a stream pane, where it differs
    after: str | None = None  # where an evolved table shows it (Iceberg move_after)
    # The rows besides the table's that hold the column (ISLAND, PANE_SESSION and STATE below are
    # TABLE's columns filtered by it): a new column says where it goes.
    rows: frozenset[Row] = field(default=frozenset(), kw_only=True)


_EVENTS_ICEBERG = "list<struct<event_ts: timestamptz, event_id: string, event_type: string, payload: string>>"
# The distinct event types of a session's events (each event is its kept copy): for Spark, and the
# same for pyarrow rows (readers). event_type is never null (tidemark.ingest.contract REQUIRED_FIELDS).
EVENT_TYPE_COUNT_SQL = "size(array_distinct(transform(events, e -> e.event_type)))"


def _event_type_count(row: dict[str, Any]) -> int:
    return len({event["event_type"] for event in row["events"] or ()})


SESSION_ID = Column(
    "session_id",
    "STRING",
    "string",
    "hash of user_id and session_start (32 hex chars): stable id of a session",
    pane_doc="stable id of the session: kept across its panes, and when it absorbs another session "
    "(it keeps the earliest one's). If a session held in state comes apart (the stream "
    "restarted after `tidemark rules migrate` to a shorter gap or to `split`), only the "
    "piece holding its first event keeps the id; the other pieces are new sessions with ids "
    "of their own",
    rows=frozenset({Row.PANE, Row.STATE}),  # an island gets its id when the table's row is written
)
USER_ID = Column(
    "user_id",
    "STRING",
    "string",
    "the user (device) the session belongs to",
    pane_doc="the user (device) the session belongs to",
    rows=_EVERYWHERE,
)
SESSION_START = Column(
    "session_start", "TIMESTAMP", "timestamptz", "first event's event_ts, UTC, microseconds", rows=_EVERYWHERE
)
SESSION_END = Column(
    "session_end", "TIMESTAMP", "timestamptz", "last event's event_ts, UTC, microseconds", rows=_EVERYWHERE
)
EVENT_COUNT = Column(
    "event_count",
    "BIGINT",
    "long",
    "distinct events in the session",
    pane_doc="distinct events (user_id, event_id, event_ts) of the session so far (panes accumulate)",
    rows=_EVERYWHERE,
)
EVENT_TYPE_COUNT = Column(
    "event_type_count",
    "INT",
    "int",
    "distinct event types among the session's events (their kept copies)",
    since=2,
    fill=EVENT_TYPE_COUNT_SQL,
    read_fill=_event_type_count,
    fill_inputs=("events",),
    after="event_count",
    pane_doc="distinct event types among the session's events so far",
    rows=_ISLAND_AND_PANE,  # computed from the events: not in state
)
EVENT_IDS = Column(
    "event_ids",
    "ARRAY<STRING>",
    "list<string>",
    "the ids of the session's events, sorted, one per event: an event is (user_id, event_id, event_ts), "
    'so one id sent at two timestamps is two events and appears twice (`["e1","e1"]`)',
    pane_doc="the ids of the session's events so far, one per event",
    rows=_ISLAND_AND_PANE,  # computed from the events: not in state
)
EVENTS = Column(
    "events",
    sql_rules.EVENTS_TYPE,
    _EVENTS_ICEBERG,
    "the distinct events, by time (one copy of each)",
    pane_doc="the events themselves: `event_ts`, `event_id`, `event_type`, `payload`",
    rows=_EVERYWHERE,
)
FIRST_RECEIPT_TS = Column(
    "first_receipt_ts",
    "STRING",
    "string",
    "receipt_ts (YYYYMMDDTHHMMSSmmmZ) of the earliest arrival of any of the session's events "
    "(not necessarily its first event in time)",
    rows=frozenset({Row.ISLAND}),
)
LAST_RECEIPT_TS = Column(
    "last_receipt_ts",
    "STRING",
    "string",
    "receipt_ts when the last-arriving event first arrived",
    rows=frozenset({Row.ISLAND}),
)
# The partition: a pane's and an island's event_date is written beside their session columns.
EVENT_DATE = Column("event_date", "DATE", "date", "UTC date of session_start; the partition (identity transform)")

# THE list of the session columns: the Iceberg table's, in the order engines show them. Every other
# row's columns are these, filtered by `Column.rows`, in this order.
TABLE = (
    SESSION_ID,
    USER_ID,
    SESSION_START,
    SESSION_END,
    EVENT_COUNT,
    EVENT_TYPE_COUNT,
    EVENT_IDS,
    EVENTS,
    FIRST_RECEIPT_TS,
    LAST_RECEIPT_TS,
    EVENT_DATE,
)


def holding(row: Row) -> tuple[Column, ...]:
    """TABLE's columns that `row` holds, in the table's order."""
    return tuple(c for c in TABLE if row in c.rows)


# An island of the dedup (dedup_sessions.sql's session columns): what a version's files and its
# context hold, besides event_date.
ISLAND = holding(Row.ISLAND)

# A stream pane (dedup_sql/stream_panes.sql + streaming_job/batch.py), docs/lake-layout.md "Pane rows".
_PANE_ONLY = (
    (
        "pane_kind",
        "STRING",
        "`early` (window still open), `on_time` (watermark passed the window end), "
        "`late` (updated within the allowed lateness), `too_late` (a fragment later "
        "than the allowed lateness)",
    ),
    ("pane_index", "INT", "the pane's ordinal for its session"),
    ("batch_id", "BIGINT", "the micro-batch that wrote the pane"),
    ("watermark", "TIMESTAMP", "the watermark after that micro-batch"),
)
PANE_SESSION = holding(Row.PANE)
# The stream's open state keeps the session's events (everything else is recomputed from them by
# stream_panes.sql each batch) and its pane bookkeeping; a column computed from events needs no state.
STATE = holding(Row.STATE)
_STATE_ONLY = (("closed", "BOOLEAN"), ("pane_count", "INT"))

ISLAND_COLUMNS = tuple(c.name for c in ISLAND)
TABLE_COLUMNS = tuple(c.name for c in TABLE)
PANE_COLUMNS = tuple(c.name for c in PANE_SESSION) + tuple(n for n, _, _ in _PANE_ONLY)
STATE_COLUMNS = tuple(c.name for c in STATE) + tuple(n for n, _ in _STATE_ONLY)


def ddl(columns: Iterable[Column]) -> str:
    """Spark DDL of columns (a read schema, an empty frame's schema)."""
    return ", ".join(f"{c.name} {c.spark}" for c in columns)


ISLANDS_DDL = ddl(ISLAND)
STATE_DDL = ddl(STATE) + ", " + ", ".join(f"{n} {t}" for n, t in _STATE_ONLY)


def by_name(name: str) -> Column:
    """The column of TABLE named `name` (KeyError when there is none)."""
    return {c.name: c for c in TABLE}[name]


def added_since(version: int) -> tuple[Column, ...]:
    """The columns a row of schema `version` lacks."""
    return tuple(c for c in TABLE if c.since > version)


def unfillable_since(version: int) -> tuple[Column, ...]:
    """The columns a row of schema `version` lacks and that cannot be computed from it."""
    return tuple(c for c in added_since(version) if c.fill is None)


def marker_version(marker: dict[str, Any]) -> int:
    """The schema version of a dedup version's files (a marker written before versioning: 1)."""
    return int(marker.get(MARKER_KEY, 1))


def fill_older(frame: DataFrame, version: int) -> DataFrame:
    """Island rows read from files of schema `version`, with the newer columns computed by their `fill`.

    The newer columns read as null (absent from the files). Same columns, same order.
    """
    from pyspark.sql import functions as F  # lazy: only the Spark jobs fill, readers need no pyspark

    for column in added_since(version):
        if column.name in frame.columns:
            if column.fill is None:
                raise ValueError(f"column {column.name} cannot be computed from rows of schema {version}")
            frame = frame.withColumn(column.name, F.expr(column.fill).cast(column.spark))
    return frame


# --- Iceberg ----------------------------------------------------------------------------------------


def _iceberg_type(text: str, ids: Iterator[int]) -> IcebergType:
    """The pyiceberg type of an Iceberg type string of this module.

    Its ids are placeholders from `ids`; Iceberg assigns the real ones: at create time in order, at
    evolution after the table's last.
    """
    # lazy, here and below: pyiceberg takes half a second to import, and the stream's driver and the
    # markers' readers need only the columns
    from pyiceberg.types import (
        DateType,
        IntegerType,
        ListType,
        LongType,
        NestedField,
        StringType,
        StructType,
        TimestamptzType,
    )

    text = text.strip()
    primitive: dict[str, type[IcebergType]] = {
        "string": StringType,
        "long": LongType,
        "int": IntegerType,
        "date": DateType,
        "timestamptz": TimestamptzType,
    }
    if text in primitive:
        return primitive[text]()
    if text.startswith("list<") and text.endswith(">"):
        return ListType(next(ids), _iceberg_type(text[5:-1], ids), element_required=False)
    if text.startswith("struct<") and text.endswith(">"):
        parts = [p.split(":", 1) for p in text[7:-1].split(",")]
        return StructType(
            *(NestedField(next(ids), name.strip(), _iceberg_type(kind, ids), required=False) for name, kind in parts)
        )
    raise ValueError(f"unknown Iceberg type {text!r}")


def iceberg_type(column: Column) -> IcebergType:
    """The pyiceberg type of a column (placeholder ids: Iceberg assigns the real ones)."""
    return _iceberg_type(column.iceberg, itertools.count(1000))


def iceberg_schema(version: int = VERSION) -> Schema:
    """The table's Iceberg schema at a schema version, its ids assigned as a new table's are.

    pyiceberg's create_table assigns fresh ids in this order anyway: so the name mapping a creator
    derives from this schema matches the table's ids.
    """
    # lazy: pyiceberg (see _iceberg_type)
    from pyiceberg.schema import Schema, assign_fresh_schema_ids
    from pyiceberg.types import NestedField

    ids = itertools.count(1000)
    # Optional: Spark writes nullable Parquet columns, and Iceberg refuses to register a nullable
    # file column under a required field; tidemark never writes a null in any of them.
    return assign_fresh_schema_ids(
        Schema(
            *(
                NestedField(next(ids), c.name, _iceberg_type(c.iceberg, ids), required=False, doc=c.doc)
                for c in _ordered(version)
            )
        )
    )


def _ordered(version: int) -> list[Column]:
    """TABLE's columns of a version, in the order engines show them (an evolved table's too)."""
    return [c for c in TABLE if c.since <= version]


def table_version(table: Table) -> int:
    """The schema version of an Iceberg table (by its columns, which is what matters to a write)."""
    names = {f.name for f in table.schema().fields}
    return max((v for v in range(1, VERSION + 1) if all(c.name in names for c in _ordered(v))), default=0)


def evolve(table: Table, attempts: int = 8) -> Table:
    """Bring an existing Iceberg table's schema to VERSION in place (pyiceberg's update_schema).

    Each missing column is added, after its `after` column. Idempotent (a table already at VERSION is
    left alone, no commit), and safe under processes doing it at once: a commit that loses the race
    (CommitFailedException: the schema changed under it) reloads the table and looks again.
    Returns the (refreshed) table. Files written before hold no value for the new columns (null).
    """
    # lazy: pyiceberg and its SQL catalog's sqlalchemy (see _iceberg_type)
    from pyiceberg.exceptions import CommitFailedException
    from sqlalchemy.exc import OperationalError  # SQLite's "database is locked" while another commits

    for _ in range(attempts):
        present = {f.name for f in table.schema().fields}
        missing = [c for c in TABLE if c.name not in present]
        if not missing:  # current (a new table is created at VERSION): no commit
            return table
        try:
            with table.transaction() as tx:
                with tx.update_schema() as update:
                    for column in missing:
                        # pyiceberg assigns the new ids (after the table's last) and adds the
                        # column to the table's name mapping (files carry no field ids)
                        update.add_column(column.name, iceberg_type(column), doc=column.doc)
                        if column.after:
                            update.move_after(column.name, column.after)
                tx.set_properties({TABLE_PROPERTY: str(VERSION)})
            return table.refresh()
        except (CommitFailedException, OperationalError):
            table = table.refresh()
    raise RuntimeError(f"could not evolve table {table.name()} to session schema {VERSION}")


# --- pyarrow (readers) -------------------------------------------------------------------------------


def read_inputs(columns: Collection[str], version: int) -> tuple[str, ...]:
    """The columns a reader must also read to `complete` `columns` of a version of schema `version`.

    The inputs of their read fills, beyond those asked for.
    """
    wanted = [c for c in TABLE if c.name in set(columns) and c.since > version and c.read_fill is not None]
    extra: list[str] = []
    for column in wanted:
        extra += [name for name in column.fill_inputs if name not in columns and name not in extra]
    return tuple(extra)


def pane_version(names: Collection[str]) -> int:
    """The schema version of stream pane files holding the columns `names`.

    Receipt partitions record no version: a partition written before a pane column existed lacks it.
    """
    return max(
        (v for v in range(1, VERSION + 1) if all(c.name in names for c in PANE_SESSION if c.since <= v)), default=1
    )


@dataclass(frozen=True)
class Completed:
    """Rows of one version as a reader returns them (tidemark/iceberg/reader.py)."""

    table: pa.Table
    computed: tuple[str, ...]  # columns the version's files lack, computed from its rows (read_fill)
    null: tuple[str, ...]  # columns the version's files lack that no fill computes: all null


def complete(table: pa.Table, version: int, wanted: Collection[str]) -> Completed:
    """One dedup version's rows with each `wanted` column of a later schema computed by its `read_fill`.

    `table` is read from the Iceberg table; its files are of schema `version`, the marker's. In it such a column reads as null (the version's files lack
    it) or is absent (a snapshot from before the table was evolved). A wanted column the version
    lacks and no fill computes (or whose inputs were not read: `read_inputs`) is null, added when
    absent, and named in `null`. Added columns come last: the caller orders and selects.
    """
    import pyarrow as pa  # lazy: as pyiceberg above

    computed: list[str] = []
    null: list[str] = []
    rows: list[dict[str, Any]] | None = None
    for column in added_since(version):
        if column.name not in wanted:
            continue
        arrow_type = iceberg_schema().as_arrow().field(column.name).type
        if column.read_fill is not None and all(n in table.column_names for n in column.fill_inputs):
            if rows is None:
                inputs = dict.fromkeys(n for c in added_since(version) for n in c.fill_inputs)
                rows = table.select([n for n in inputs if n in table.column_names]).to_pylist()
            values = pa.array([column.read_fill(row) for row in rows], arrow_type)
            computed.append(column.name)
        else:
            values = pa.nulls(table.num_rows, arrow_type)
            null.append(column.name)
        if column.name in table.column_names:
            index = table.column_names.index(column.name)
            table = table.set_column(index, pa.field(column.name, arrow_type), values)
        else:
            table = table.append_column(pa.field(column.name, arrow_type), values)
    return Completed(table, tuple(computed), tuple(null))


# --- docs ---------------------------------------------------------------------------------------------


def markdown_table(kind: str) -> str:
    """The column table docs/lake-layout.md holds: kind "table" (the Iceberg table) or "pane"."""
    if kind == "table":
        lines = ["| column | Iceberg type | meaning |", "|---|---|---|"]
        lines += [f"| `{c.name}` | `{c.iceberg}` | {c.doc} |" for c in TABLE]
    elif kind == "pane":
        lines = ["| column | meaning |", "|---|---|"]
        lines += [f"| `{c.name}` | {c.pane_doc or c.doc} |" for c in PANE_SESSION]
        lines += [f"| `{name}` | {doc} |" for name, _, doc in _PANE_ONLY]
    else:
        raise ValueError(kind)
    return "\n".join(lines)
