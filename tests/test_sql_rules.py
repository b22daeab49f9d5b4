"""The shared SQL rules (session id, kept-copy rule, event struct) have one home: dedup_sql/rules.py.

Pure text checks (no Spark): the rules' behaviour is covered by the stream and dedup tests
(test_duplicate_copies.py, test_dedup_*.py, test_stream_*.py), which run the rendered SQL.
"""

from __future__ import annotations

import pathlib
import re

import pytest

import dedup_sql
from dedup_sql import rules as sql_rules

ROOT = pathlib.Path(__file__).resolve().parents[1]
SQL_FILES = sorted(p.stem for p in (ROOT / "dedup_sql").glob("*.sql"))
# Hand-written spellings of the three rules, anywhere outside dedup_sql/rules.py.
COPIES = {
    "session id": re.compile(r"sha2\s*\(\s*concat", re.I),
    "kept-copy rule": re.compile(r"named_struct\(\s*'event_type'", re.I),
    "event struct": re.compile(r"named_struct\(\s*'event_ts'|event_ts\s*:\s*timestamp\s*,\s*event_id", re.I),
}


def _code(path: pathlib.Path) -> str:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".sql":
        return re.sub(r"--[^\n]*", "", text)
    return text


@pytest.mark.parametrize("rule", sorted(COPIES))
def test_each_rule_is_written_once(rule):
    """The SQL files, the stream, the dedup and the benches take the rule from sql_rules."""
    places = [ROOT / "dedup_sql" / f"{name}.sql" for name in SQL_FILES]
    for folder in ("tidemark", "streaming_job", "bench", "dedup_sql"):
        places += sorted((ROOT / folder).rglob("*.py"))
    home = ROOT / "dedup_sql" / "rules.py"
    found = [str(p.relative_to(ROOT)) for p in places if p != home and COPIES[rule].search(_code(p))]
    # The bench's synthetic panes build events from generated values (data, not the rule).
    assert found in ([], ["bench/dedup_partition.py"]) if rule == "event struct" else found == [], found


@pytest.mark.parametrize("name", SQL_FILES)
def test_every_sql_file_renders(name):
    text = dedup_sql.load(name)
    assert "@" not in re.sub(r"--[^\n]*", "", text)


def test_render_refuses_unknown_macros():
    with pytest.raises(ValueError, match="unknown SQL rule macro @nope"):
        sql_rules.render("SELECT @nope(a) FROM t")
    with pytest.raises(ValueError, match="unknown SQL type macro @NOPE"):
        sql_rules.render("SELECT CAST(NULL AS @NOPE)")
    with pytest.raises(ValueError, match="expected 4 values"):
        sql_rules.render("SELECT @event(a, b) FROM t")
    with pytest.raises(ValueError, match="@copy"):
        sql_rules.render("SELECT @copy(a, b, c) FROM t")


def test_rendered_rules():
    assert sql_rules.render("@session_id(u, s)") == (
        "substr(sha2(concat(u, '|', CAST(unix_micros(s) AS STRING)), 256), 1, 32)"
    )
    with pytest.raises(ValueError, match="unrendered"):  # nesting is not supported: name a column
        sql_rules.render("@kept(@copy(e.event_type, e.payload))")
    assert sql_rules.render("@kept(c)") == "MIN(c)"
    assert sql_rules.render("@copy(t, p)") == "named_struct('event_type', t, 'payload', p)"
    assert sql_rules.render("@event()") == (
        "named_struct('event_ts', event_ts, 'event_id', event_id, 'event_type', event_type, 'payload', payload)"
    )
    assert sql_rules.render("CAST(x AS @EVENTS_TYPE)") == (
        "CAST(x AS ARRAY<STRUCT<event_ts: TIMESTAMP, event_id: STRING, event_type: STRING, payload: STRING>>)"
    )
    assert [f.name for f in sql_rules.event_arrow_type()] == [n for n, _ in sql_rules.EVENT_FIELDS]
