"""Every copy of the session column list agrees with THE session schema (tidemark/session/session_schema.py).

The code that can derives its columns from the schema module; what cannot (SQL text, the docs,
fixture rows, a dataclass) is checked here, and a failure names the file and the difference.
Nothing here starts Spark: the SQL's output columns are read from its text.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import re

import pytest

import dedup_sql
from tests.helpers import ROOT
from tidemark.session import session_schema


def _columns(version: int = session_schema.VERSION) -> list[str]:
    """The table's columns at a schema version, in the table's order."""
    return [c.name for c in session_schema.TABLE if c.since <= version]


def _differs(where: str, got: list[str] | tuple[str, ...], want: list[str] | tuple[str, ...]) -> str:
    """An assertion message: the file, what it lacks, what it has extra, or that the order differs."""
    missing = [c for c in want if c not in got]
    extra = [c for c in got if c not in want]
    if missing or extra:
        return f"{where}: lacks {missing}, has extra {extra} (want {list(want)})"
    return f"{where}: order {list(got)}, want {list(want)}"


# --- SQL: the output columns of the final SELECT ------------------------------------------------------


def _without_comments(sql: str) -> str:
    """SQL text without its `--` comments (a `--` inside a quoted literal is kept)."""
    lines = []
    for line in sql.split("\n"):
        quoted = False
        for at, char in enumerate(line):
            if char == "'":
                quoted = not quoted
            elif not quoted and line.startswith("--", at):
                line = line[:at]
                break
        lines.append(line)
    return "\n".join(lines)


def _top_level(sql: str) -> list[tuple[int, str]]:
    """(position, character) of the text outside parentheses and quotes."""
    depth, quoted, out = 0, False, []
    for at, char in enumerate(sql):
        if char == "'":
            quoted = not quoted
        elif not quoted and char == "(":
            depth += 1
        elif not quoted and char == ")":
            depth -= 1
        elif not quoted and depth == 0:
            out.append((at, char))
    return out


def select_columns(sql: str) -> list[str]:
    """The output column names of a query's last top-level SELECT (a CTE's SELECTs are nested)."""
    sql = _without_comments(sql)
    outer = _top_level(sql)
    flat = "".join(char for _, char in outer)
    selects = [m.start() for m in re.finditer(r"\bSELECT\b", flat, re.IGNORECASE)]
    froms = [m.start() for m in re.finditer(r"\bFROM\b", flat, re.IGNORECASE) if m.start() > selects[-1]]
    start, end = outer[selects[-1] + len("SELECT")][0], outer[froms[0]][0]
    items, depth, quoted, current = [], 0, False, ""
    for char in sql[start:end]:
        quoted = not quoted if char == "'" else quoted
        depth += (char == "(") - (char == ")") if not quoted else 0
        if char == "," and depth == 0 and not quoted:
            items.append(current)
            current = ""
        else:
            current += char
    items.append(current)
    names = []
    for item in (" ".join(i.split()) for i in items):
        alias = re.search(r"\bAS\s+([A-Za-z_][A-Za-z0-9_]*)$", item, re.IGNORECASE)
        bare = re.fullmatch(r"(?:[A-Za-z_][A-Za-z0-9_]*\.)?([A-Za-z_][A-Za-z0-9_]*)", item)
        match = alias or bare
        assert match, f"cannot name the SELECT item {item!r}"
        names.append(match.group(1))
    return names


def test_select_columns_reads_aliases_and_bare_names():
    sql = """WITH a AS (SELECT x, y FROM t)
    SELECT -- a comment, with a comma
      s.user_id, MIN(ts) AS start, named_struct('a', 1, 'b', 2) AS pair,
      (p OR (q AND r)) AS flag, 'it''s, here' AS text
    FROM a AS s"""
    assert select_columns(sql) == ["user_id", "start", "pair", "flag", "text"]


def test_dedup_sessions_sql_outputs_the_island_columns():
    """dedup_sessions.sql: the island columns in the schema's order, then has_new and event_date."""
    got = select_columns(dedup_sql.text("dedup_sessions"))
    want = [*session_schema.ISLAND_COLUMNS, "has_new", "event_date"]
    assert got == want, _differs("dedup_sql/dedup_sessions.sql", got, want)


# The pane columns stream_rows.sql computes from stream_panes.sql's output (event_ids from the events)
# rather than stream_panes.sql.
PANE_COLUMNS_OF_THE_BATCH = ("event_ids",)
# stream_panes.sql's bookkeeping besides the session columns (what to emit, keep and close).
PANE_SQL_BOOKKEEPING = ("pane_kind", "emit", "retain", "closed", "pane_count")


def test_stream_panes_sql_outputs_the_pane_and_state_columns():
    """stream_panes.sql: the pane's session columns (but what the batch derives) in the schema's
    order, then its bookkeeping; the stream's state is kept from these columns."""
    got = select_columns(dedup_sql.text("stream_panes"))
    session = [c.name for c in session_schema.PANE_SESSION if c.name not in PANE_COLUMNS_OF_THE_BATCH]
    want = [*session, *PANE_SQL_BOOKKEEPING]
    assert got == want, _differs("dedup_sql/stream_panes.sql", got, want)
    lacking = [c for c in session_schema.STATE_COLUMNS if c not in got]
    assert not lacking, f"dedup_sql/stream_panes.sql: lacks the state columns {lacking}"


def test_stream_rows_sql_outputs_the_pane_columns_then_the_state_bookkeeping():
    """stream_rows.sql, what a batch writes: every pane column but the batch's own values (the
    writer adds them), event_date, then what the state keeps beyond them."""
    got = select_columns(dedup_sql.text("stream_rows"))
    batch_values = ("batch_id", "watermark")  # streaming_job.pane_writer.BatchValues, receipt_ts aside
    pane = [c for c in session_schema.PANE_COLUMNS if c not in batch_values]
    assert got == [*pane, "event_date", "closed", "state_pane_count", "emit", "retain"], _differs(
        "dedup_sql/stream_rows.sql", got, [*pane, "event_date", "closed", "state_pane_count", "emit", "retain"]
    )


# --- docs ---------------------------------------------------------------------------------------------


def _doc_table_columns(path: str, header: str) -> list[str]:
    """The first-cell column names of the markdown table under `header` in a doc."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
        text = handle.read()
    lines = text[text.index(header) :].split("\n")[2:]  # past the header and the |---| line
    names = []
    for line in lines:
        if not line.startswith("|"):
            break
        names.append(line.split("|")[1].strip().strip("`"))
    return names


@pytest.mark.parametrize(
    ("header", "columns"),
    [
        ("| column | meaning |", session_schema.PANE_COLUMNS),
        ("| column | Iceberg type | meaning |", session_schema.TABLE_COLUMNS),
    ],
    ids=["pane rows", "sessions table"],
)
def test_docs_lake_layout_tables_list_the_schema_columns(header, columns):
    """docs/lake-layout.md's column tables name the schema's columns in its order (their full text is
    session_schema.markdown_table's: tests/test_session_schema.py)."""
    got = _doc_table_columns("docs/lake-layout.md", header)
    assert got == list(columns), _differs(f"docs/lake-layout.md, the table under {header!r}", got, columns)


def _without_parentheses(text: str) -> str:
    out, depth = "", 0
    for char in text:
        depth += char == "("
        if depth == 0:
            out += char
        depth -= char == ")"
    return out


def test_docs_dedup_output_columns_are_the_table_columns():
    """docs/dedup.md's "Output columns" paragraph names the table's columns, in order (the
    identifiers in backquotes outside its parentheses, each once)."""
    with open(os.path.join(ROOT, "docs", "dedup.md"), encoding="utf-8") as handle:
        text = handle.read()
    start = text.index("Output columns (")
    paragraph = _without_parentheses(text[start : text.index("\n\n", start)])
    got = list(dict.fromkeys(re.findall(r"`([a-z_]+)`", paragraph)))
    assert got == list(session_schema.TABLE_COLUMNS), _differs(
        "docs/dedup.md, Output columns", got, session_schema.TABLE_COLUMNS
    )


# --- Python copies ------------------------------------------------------------------------------------


def test_the_imported_column_lists_are_the_schema():
    """The lists other modules keep, by import: equal to the schema's, or its columns in its order."""
    from streaming_job import state
    from tidemark.deduplication import changeset, dedup, incremental
    from tidemark.demo import batch_reference
    from tidemark.iceberg import reader
    from tidemark.iceberg import table as iceberg
    from tidemark.panes import pane_reader
    from tidemark.products import session_metrics

    table, pane = list(session_schema.TABLE_COLUMNS), list(session_schema.PANE_COLUMNS)
    equal = {
        "tidemark/iceberg/table.py COLUMNS": ([n for n, _, _ in iceberg.COLUMNS], table),
        "tidemark/iceberg/table.py schema()": ([f.name for f in iceberg.schema().fields], table),
        "tidemark/deduplication/dedup.py OUTPUT_COLUMNS": (list(dedup.OUTPUT_COLUMNS), table[:-1]),
        "tidemark/deduplication/changeset.py _COLUMNS": (list(changeset._COLUMNS), table),
        "tidemark/deduplication/incremental.py ISLAND_COLUMNS": (
            list(incremental.ISLAND_COLUMNS),
            list(session_schema.ISLAND_COLUMNS),
        ),
        "streaming_job/state.py STATE_COLUMNS": (list(state.STATE_COLUMNS), list(session_schema.STATE_COLUMNS)),
    }
    for where, (got, want) in equal.items():
        assert got == want, _differs(where, got, want)
    subsets = {
        "tidemark/iceberg/reader.py SUMMARY_COLUMNS": (list(reader.SUMMARY_COLUMNS), table),
        "tidemark/products/session_metrics.py INPUT_COLUMNS": (list(session_metrics.INPUT_COLUMNS), table),
        "tidemark/panes/pane_reader.py DEDUP_PANE": ([c.name for c in pane_reader.DEDUP_PANE], pane),
        "tidemark/demo/batch_reference.py KEY_COLUMNS": (list(batch_reference.KEY_COLUMNS), table),
    }
    for where, (got, want) in subsets.items():
        assert got == [c for c in want if c in got], _differs(where, got, [c for c in want if c in got])


def test_the_batch_reference_session_holds_schema_columns():
    """tidemark/demo/batch_reference.py's Session: each field (and event_date) is a table column of
    the same name."""
    from tidemark.demo.batch_reference import Session

    got = [f.name for f in dataclasses.fields(Session)] + ["event_date"]
    unknown = [name for name in got if name not in session_schema.TABLE_COLUMNS]
    assert not unknown, f"tidemark/demo/batch_reference.py Session: fields the schema lacks: {unknown}"


def _row_literals(path: str) -> list[tuple[int, list[str]]]:
    """(line, keys) of every dict literal in a file that spells a session row (a "session_id" key)."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            keys = [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
            if "session_id" in keys:
                found.append((node.lineno, keys))
    return found


# Files that write session rows by hand, and the schema version their rows are of.
ROW_FIXTURES = {
    "bench/iceberg_commit.py": session_schema.VERSION,
    "tests/changeskit.py": session_schema.VERSION,
    # its markers record no session_schema, so their rows are of schema 1 (no event_type_count)
    "tests/icebergkit.py": 1,
}


@pytest.mark.parametrize(("path", "version"), ROW_FIXTURES.items())
def test_rows_written_by_hand_have_the_schema_columns(path, version):
    literals = _row_literals(path)
    assert literals, f"{path}: no session row found (moved? update ROW_FIXTURES)"
    for line, keys in literals:
        assert keys == _columns(version), _differs(f"{path}:{line}", keys, _columns(version))


def test_test_helpers_read_schema_columns():
    """tests/helpers.py's session functions read rows by column name: each name is a table column."""
    with open(os.path.join(ROOT, "tests", "helpers.py"), encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    functions = [f for f in tree.body if isinstance(f, ast.FunctionDef) and "session" in f.name]
    read = {
        node.slice.value
        for function in functions
        for node in ast.walk(function)
        if isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Name)
        and node.value.id in ("r", "row")
        and isinstance(node.slice, ast.Constant)
    }
    unknown = sorted(read - set(session_schema.TABLE_COLUMNS))
    assert read, "tests/helpers.py: reads no session row (moved? update this test)"
    assert not unknown, f"tests/helpers.py: reads columns the schema lacks: {unknown}"
