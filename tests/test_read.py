"""tidemark read and the reader API: current version, --as-of, --raw, formats, and no JVM."""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
from datetime import datetime, timedelta

import pyarrow.parquet as pq
import pytest

from tests.lakekit import RULES, SimulatedStream, arrivals, expected, make_events
from tidemark import cli
from tidemark.base import layout
from tidemark.deduplication.dedup import run_dedup
from tidemark.iceberg import reader
from tidemark.store.lake import Lake

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory):
    """A lake whose busiest date has two versions: after half of the arrivals, and after all."""
    rng = random.Random(21)
    events = make_events(rng, users=4, days=2)
    days = [ts.date().isoformat() for _, _, ts, _ in events]
    day = max(sorted(set(days)), key=days.count)
    path = Lake.open(tmp_path_factory.mktemp("read") / "lake")
    stream = SimulatedStream(path, 21)
    batches = arrivals(rng, events, 4)
    for deliveries in batches[:2]:
        stream.batch(deliveries)
    v1 = run_dedup(path, day, RULES, spark=spark)
    for deliveries in batches[2:]:
        stream.batch(deliveries)
    v2 = run_dedup(path, day, RULES, spark=spark)
    assert v1.version < v2.version
    return {
        "path": path,
        "day": day,  # as the CLI takes it and the reference sessions name it
        "date": layout.as_event_date(day),  # as the reader takes it
        "v1": v1.version,
        "v2": v2.version,
        "events": events,
        "first_half": [e for b in batches[:2] for e in b],
    }


def keyset(table):
    return {
        (
            r["user_id"],
            r["session_start"],
            r["session_end"],
            frozenset(r["event_ids"]),
            r["event_count"],
            r["event_type_count"],
        )
        for r in table.to_pylist()
    }


@pytest.mark.spark
def test_sessions_have_ids_sorted_ids_and_utc_times(lake):
    table = reader.read_sessions(lake["path"], lake["date"])
    assert keyset(table) == expected(lake["events"], lake["day"])
    assert str(table.schema.field("session_start").type) == "timestamp[us, tz=UTC]"
    for row in table.to_pylist():
        micros = int(row["session_start"].timestamp()) * 1_000_000 + row["session_start"].microsecond
        assert row["session_id"] == hashlib.sha256(f"{row['user_id']}|{micros}".encode()).hexdigest()[:32]
        assert row["event_ids"] == sorted(row["event_ids"])
        assert len(row["event_ids"]) == row["event_count"]
        assert [e["event_ts"] for e in row["events"]] == sorted(e["event_ts"] for e in row["events"])
        assert row["session_start"].date().isoformat() == lake["day"]
        assert row["first_receipt_ts"] <= row["last_receipt_ts"] <= lake["v2"]


@pytest.mark.spark
def test_as_of_reproduces_what_the_partition_looked_like_then(lake):
    path, day, v1, v2 = lake["path"], lake["day"], lake["v1"], lake["v2"]
    assert keyset(reader.read_sessions(path, lake["date"], as_of=v1)) == expected(lake["first_half"], day)
    just_before_v2 = layout.format_receipt_ts(layout.parse_receipt_ts(v2) - timedelta(milliseconds=1))
    assert reader.resolve(path, lake["date"], as_of=just_before_v2).version == v1
    assert reader.resolve(path, lake["date"], as_of=v2).version == v2
    rfc3339 = layout.parse_receipt_ts(v1).isoformat()
    assert reader.resolve(path, lake["date"], as_of=rfc3339).version == v1
    with pytest.raises(reader.NoVersion, match="no complete deduplicated version as of"):
        reader.resolve(path, lake["date"], as_of="20000101T000000000Z")
    with pytest.raises(layout.InvalidPartitionValue, match="invalid --as-of"):
        reader.resolve(path, lake["date"], as_of="yesterday")


@pytest.mark.spark
def test_raw_lists_receipt_panes_filtered_by_as_of(lake):
    panes = reader.read_panes(lake["path"], lake["date"])
    stamps = set(panes.column("receipt_ts").to_pylist())
    assert len(stamps) >= 2
    assert {"pane_kind", "session_start", "events"} <= set(panes.column_names)
    early = reader.read_panes(lake["path"], lake["date"], as_of=lake["v1"])
    assert 0 < early.num_rows < panes.num_rows
    assert max(early.column("receipt_ts").to_pylist()) <= lake["v1"]


@pytest.mark.spark
def test_cli_formats(lake, tmp_path, capsys):
    base = ["read", "--lake", str(lake["path"]), "--event-date", lake["day"]]
    assert cli.main(base + ["--format", "jsonl"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == reader.read_sessions(lake["path"], lake["date"]).num_rows
    for row in rows:
        assert {"user_id", "session_start", "session_end", "event_count"} <= set(row)
        assert "events" not in row
        for key in ("session_start", "session_end"):
            assert row[key].endswith("Z")
            assert datetime.fromisoformat(row[key].replace("Z", "+00:00"))

    out = str(tmp_path / "s.parquet")
    assert cli.main(base + ["--format", "parquet", "--output", out, "--events"]) == 0
    assert keyset(pq.read_table(out)) == keyset(reader.read_sessions(lake["path"], lake["date"]))

    assert cli.main(base + ["--as-of", lake["v1"]]) == 0
    text = capsys.readouterr().out
    assert f"version {lake['v1']}" in text
    assert "session_start" in text

    assert cli.main(base + ["--raw", "--format", "jsonl"]) == 0
    panes = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {p["pane_kind"] for p in panes}
    assert all(layout.check_receipt_ts(p["receipt_ts"]) for p in panes)


def test_unpublished_date_is_a_clear_error(tmp_path, capsys):
    assert cli.main(["read", "--lake", str(tmp_path), "--event-date", "2026-03-06"]) == 1
    assert "2026-03-06 has no deduplicated version yet" in capsys.readouterr().err


@pytest.mark.spark
def test_read_starts_no_jvm(lake):
    code = (
        "import sys\nfrom tidemark.cli import main\n"
        f"rc = main(['read', '--lake', {str(lake['path'])!r}, '--event-date', {lake['day']!r}, '--format', 'jsonl'])\n"
        "assert rc == 0 and 'pyspark' not in sys.modules and 'py4j' not in sys.modules, sorted(sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == reader.read_sessions(lake["path"], lake["date"]).num_rows


def _micros(moment: datetime) -> int:
    return int(moment.timestamp()) * 1_000_000 + moment.microsecond


@pytest.mark.spark
def test_pyiceberg_alone_and_duckdb_read_exactly_what_tidemark_read_gives(lake, capsys):
    """What a consumer with no tidemark code sees: the table through its catalog (pyiceberg), and
    DuckDB over pyiceberg's scan, equal to `tidemark read` and to the batch reference."""
    from pyiceberg.catalog import load_catalog

    path, day = lake["path"], lake["day"]
    want = {
        (u, _micros(s), _micros(e), tuple(sorted(ids)), n) for u, s, e, ids, n, _types in expected(lake["events"], day)
    }

    assert cli.main(["read", "--lake", str(path), "--event-date", day, "--format", "jsonl"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    parse = lambda text: _micros(datetime.fromisoformat(text.replace("Z", "+00:00")))  # noqa: E731
    ours = {
        (r["user_id"], parse(r["session_start"]), parse(r["session_end"]), tuple(r["event_ids"]), r["event_count"])
        for r in rows
    }
    assert len(rows) == len(ours)
    assert ours == want

    catalog = load_catalog("tidemark", type="sql", uri=f"sqlite:///{path}/_catalog/iceberg.db")
    table = catalog.load_table("tidemark.sessions_dedup")
    scan = table.scan(row_filter=f"event_date = '{day}'")
    plain = scan.to_arrow()
    assert {
        (r["user_id"], _micros(r["session_start"]), _micros(r["session_end"]), tuple(r["event_ids"]), r["event_count"])
        for r in plain.to_pylist()
    } == want
    assert plain.num_rows == len(want)
    # The partition prunes: only this date's files are planned.
    assert [f.name for f in table.spec().fields] == ["event_date"]
    assert all(f"/event_date={day}/" in task.file.file_path for task in scan.plan_files())
    assert str(table.schema().find_field("session_start").field_type) == "timestamptz"

    con = scan.to_duckdb(table_name="sessions")
    got = con.execute(
        "SELECT user_id, epoch_us(session_start), epoch_us(session_end), event_ids, event_count FROM sessions"
    ).fetchall()
    assert {(u, s, e, tuple(ids), n) for u, s, e, ids, n in got} == want
    assert len(got) == len(want)
