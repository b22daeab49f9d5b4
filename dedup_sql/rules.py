"""The SQL spelling of tidemark's shared rules, written once.

The session id, the kept-copy rule and the event struct. The stream, the dedup, the SQL files and the benches all take them from here.

Why Python text rendered into the SQL files, and not a shared SQL file or SQL functions: a rule is an
expression used inside other queries (a column of a SELECT, the argument of an aggregate, a type in
a CAST or a read schema), which SQL files cannot include from one another; temporary SQL functions
would be session state that every Spark (Connect) session must create before each run, and a DDL type
cannot be one. So `dedup_sql.load` renders these macros when it reads a file, once per process:

    @session_id(user_col, start_col)   the session's id (also `session_id()` here, for DataFrame code)
    @copy(type_col, payload_col)       an event copy's rank: of an event's copies the kept one ...
    @kept(copy_col)                    ... is the aggregate of their ranks this names (the smallest)
    @event(ts_col, id_col, type_col, payload_col)   one event as the struct sessions and panes hold
    @COPY_TYPE, @EVENT_TYPE, @EVENTS_TYPE           the DDL types of those structs

Arguments are column names or simple expressions written in the SQL files themselves (never user
input), without parentheses. The rule texts are documented in docs/input-contract.md (copies) and
docs/dedup.md (output columns).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

# The event struct: field order matters (it is the sort order of a session's `events`: by time,
# then id) and is the layout of panes, state, versions and context files.
EVENT_FIELDS = (("event_ts", "TIMESTAMP"), ("event_id", "STRING"), ("event_type", "STRING"), ("payload", "STRING"))
EVENT_TYPE = "STRUCT<" + ", ".join(f"{name}: {kind}" for name, kind in EVENT_FIELDS) + ">"
EVENTS_TYPE = f"ARRAY<{EVENT_TYPE}>"

# THE copy rule (docs/input-contract.md, tidemark/ingest/contract.py's copy_order): an event is
# (user_id, event_id, event_ts); of its copies the one with the smallest (event_type, payload) is
# kept, compared as a struct (field order = comparison order). A function of the set of copies,
# whatever their order of arrival.
COPY_FIELDS = (("event_type", "STRING"), ("payload", "STRING"))
COPY_TYPE = "STRUCT<" + ", ".join(f"{name}: {kind}" for name, kind in COPY_FIELDS) + ">"


def _struct(fields: Sequence[tuple[str, str]], values: Sequence[str]) -> str:
    if len(values) != len(fields):
        raise ValueError(f"expected {len(fields)} values ({', '.join(f for f, _ in fields)}), got {len(values)}")
    return (
        "named_struct("
        + ", ".join(f"'{name}', {value}" for (name, _), value in zip(fields, values, strict=False))
        + ")"
    )


def copy(type_col: str = "event_type", payload_col: str = "payload") -> str:
    """An event copy's rank, compared with the other copies' by `kept`."""
    return _struct(COPY_FIELDS, (type_col, payload_col))


def kept(copy_col: str) -> str:
    """The aggregate that picks the kept copy among ranks built by `copy`."""
    return f"MIN({copy_col})"


def event(*cols: str) -> str:
    """One event as sessions, panes and state hold it; the field names as columns by default."""
    return _struct(EVENT_FIELDS, cols or tuple(name for name, _ in EVENT_FIELDS))


def session_id(user_col: str = "user_id", start_col: str = "session_start") -> str:
    """A session's id: a hash of its user and start (32 hex chars), stable for a given start.

    tests/test_read.py recomputes it with hashlib.
    """
    return f"substr(sha2(concat({user_col}, '|', CAST(unix_micros({start_col}) AS STRING)), 256), 1, 32)"


def event_arrow_type() -> pa.StructType:
    """The event struct as a pyarrow type (timestamps in microseconds, UTC, as Spark writes them)."""
    import pyarrow as pa  # lazy: only readers need the Arrow type, the SQL's users need no pyarrow

    kinds: dict[str, pa.DataType] = {"TIMESTAMP": pa.timestamp("us", tz="UTC"), "STRING": pa.string()}
    return pa.struct([(name, kinds[kind]) for name, kind in EVENT_FIELDS])


_FUNCTIONS: dict[str, Callable[..., str]] = {"session_id": session_id, "copy": copy, "kept": kept, "event": event}
_TYPES = {"COPY_TYPE": COPY_TYPE, "EVENT_TYPE": EVENT_TYPE, "EVENTS_TYPE": EVENTS_TYPE}
_CALL = re.compile(r"@([a-z_]+)\(([^()]*)\)")
_TYPE = re.compile(r"@([A-Z_]+)\b")


def render(text: str) -> str:
    """SQL text with every macro above replaced by its rule; an unknown macro is an error."""

    def call(match: re.Match[str]) -> str:
        name, args = match.group(1), match.group(2).strip()
        if name not in _FUNCTIONS:
            raise ValueError(f"unknown SQL rule macro @{name}(...)")
        try:
            return _FUNCTIONS[name](*[a.strip() for a in args.split(",")] if args else ())
        except TypeError as exc:  # a wrong number of arguments
            raise ValueError(f"@{name}({args}): {exc}") from None

    def kind(match: re.Match[str]) -> str:
        if match.group(1) not in _TYPES:
            raise ValueError(f"unknown SQL type macro @{match.group(1)}")
        return _TYPES[match.group(1)]

    out = _TYPE.sub(kind, _CALL.sub(call, text))
    if "@" in re.sub(r"'[^']*'", "", re.sub(r"--[^\n]*", "", out)):
        raise ValueError("SQL text still holds an unrendered @ macro")
    return out
