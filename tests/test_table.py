"""The Iceberg table itself: which catalog holds it, its schema as documented, and refusals."""

from __future__ import annotations

import json
import os
import re
from datetime import date
from pathlib import Path

import pytest

from tests import icebergkit
from tidemark.iceberg import reader, table_versions
from tidemark.iceberg import table as iceberg
from tidemark.store.lake import Lake

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DAY = date(2026, 3, 6)


@pytest.fixture(autouse=True)
def fresh_catalogs(monkeypatch):
    """Each test resolves catalogs anew (they are cached per process)."""
    monkeypatch.setattr(iceberg, "_catalogs", {})
    monkeypatch.setattr(iceberg, "_lake_configs", {})


def test_local_default_is_a_sqlite_catalog_in_the_lake_that_pyiceberg_alone_opens(tmp_path):
    from pyiceberg.catalog import load_catalog

    lake = Lake.open(tmp_path / "lake")
    assert iceberg.load(lake) is None
    assert not os.path.exists(lake)
    icebergkit.publish_run(lake, DAY, [icebergkit.receipt(1)], sessions=2)
    assert os.path.exists(os.path.join(lake, "_catalog", "iceberg.db"))
    tbl = load_catalog("tidemark", type="sql", uri=f"sqlite:///{lake}/_catalog/iceberg.db").load_table(
        "tidemark.sessions_dedup"
    )
    assert tbl.location() == f"file://{lake}/sessions_dedup"
    assert tbl.scan(row_filter=f"event_date = '{DAY}'").to_arrow().num_rows == 2


def test_a_catalog_described_in_the_lake_is_used(tmp_path):
    lake, elsewhere = Lake.open(tmp_path / "lake"), tmp_path / "catalogs"
    elsewhere.mkdir()
    os.makedirs(os.path.join(lake, "_catalog"))
    with open(os.path.join(lake, "_catalog", "catalog.json"), "w") as out:
        json.dump(
            {
                "_comment": "a SQL catalog kept outside the lake",
                "type": "sql",
                "uri": f"sqlite:///{elsewhere}/shared.db",
            },
            out,
        )
    icebergkit.publish_run(lake, DAY, [icebergkit.receipt(1)])
    assert os.path.exists(elsewhere / "shared.db")
    assert not os.path.exists(os.path.join(lake, "_catalog", "iceberg.db"))
    assert reader.read_sessions(lake, DAY).num_rows == 1


def test_a_bad_catalog_description_is_refused(tmp_path):
    lake = Lake.open(tmp_path / "lake")
    os.makedirs(os.path.join(lake, "_catalog"))
    with open(os.path.join(lake, "_catalog", "catalog.json"), "w") as out:
        json.dump({"type": "nessie-or-whatever"}, out)
    with pytest.raises(ValueError, match="catalog.json: expected a JSON object of pyiceberg catalog properties"):
        table_versions.current_version(lake, DAY)


def test_a_shared_catalog_never_mixes_two_lakes_up(tmp_path, monkeypatch):
    monkeypatch.setenv("PYICEBERG_CATALOG__TIDEMARK__URI", f"sqlite:///{tmp_path}/shared.db")
    first, second = Lake.open(tmp_path / "first"), Lake.open(tmp_path / "second")
    icebergkit.publish_run(first, DAY, [icebergkit.receipt(1)])
    with pytest.raises(RuntimeError, match="not in lake .*second: set TIDEMARK_TABLE"):
        table_versions.current_version(second, DAY)
    monkeypatch.setenv("TIDEMARK_TABLE", "tidemark.second_lake")
    icebergkit.publish_run(second, DAY, [icebergkit.receipt(1)], sessions=3)
    assert reader.read_sessions(second, DAY).num_rows == 3
    monkeypatch.setenv("TIDEMARK_TABLE", "x; DROP TABLE y")
    with pytest.raises(ValueError, match="invalid TIDEMARK_TABLE"):
        table_versions.current_version(second, DAY)


def test_columns_and_types_are_the_documented_ones():
    """docs/lake-layout.md lists every column of the table with its Iceberg type."""
    schema = iceberg.schema()
    assert [f.name for f in schema.fields] == [name for name, _, _ in iceberg.COLUMNS]
    for name, typ, _ in iceberg.COLUMNS:
        shown = re.sub(r"\d+: |optional ", "", str(schema.find_field(name).field_type))
        assert shown.replace(" ", "") == typ.replace(" ", ""), name
    assert str(schema.find_field("session_start").field_type) == "timestamptz"  # UTC, microseconds
    spec = iceberg.partition_spec(schema)
    assert [(f.name, str(f.transform)) for f in spec.fields] == [("event_date", "identity")]
    doc = Path(os.path.join(ROOT, "docs", "lake-layout.md")).read_text()
    documented = dict(re.findall(r"^\| `(\w+)` \| `([^`]+)` \|", doc, re.M))
    assert documented == {name: typ for name, typ, _ in iceberg.COLUMNS}
