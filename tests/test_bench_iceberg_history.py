"""Smoke test of bench/iceberg_history.py at a tiny scale: it builds tables of two ages the way gc
leaves them, and its counting FileIO sees pyiceberg's own reads and writes (no timing asserted:
speed lives in BENCHMARKS.md)."""

from __future__ import annotations

import pytest

from bench import iceberg_history
from tidemark.base.layout import as_event_date
from tidemark.iceberg import table as iceberg
from tidemark.iceberg import table_versions


@pytest.mark.slow  # not in make test-fast: 30 commits and a gc, as test_bench_iceberg_commit
def test_history_bench_builds_gc_d_tables_and_counts_pyiceberg_io(tmp_path, monkeypatch):
    monkeypatch.delenv("TIDEMARK_LOG_LEVEL", raising=False)
    root = str(tmp_path / "days10")
    built, samples = iceberg_history.measure(10, root, sessions=2, repeats=1, latencies=[0])
    # 10 days of 3 commits, gc keeping 7 days of them: the dates stay, the old snapshots go.
    assert built["dates"] == 10
    assert built["snapshots"] <= 7 * iceberg_history.COMMITS_PER_DAY + 1 < 10 * iceberg_history.COMMITS_PER_DAY
    # issue 27 item 5: no property per date, one manifest per half month (March 1-10 here)
    assert built["per-date properties"] == 0
    assert built["manifests in the current snapshot"] == 1
    # pyiceberg read the table's metadata through the counting FileIO, and wrote a metadata file,
    # a manifest list and manifests: a FileIO that counted nothing would pass none of these.
    (sample,) = samples
    assert sample["metadata read"] >= 3
    assert sample["metadata bytes read"] > 0
    assert sample["metadata written"] >= 3
    assert sample["metadata bytes written"] > 0
    assert sample["other read"] >= 2  # the new file's footer and the current run's marker
    lake = iceberg_history.counted_lake(root)
    assert isinstance(iceberg.load(lake).io, iceberg_history.CountingFileIO)
    newest = table_versions.dates_with_version(lake)[-1]
    assert newest == as_event_date(iceberg_history._day(9))


def test_loading_the_table_reads_its_metadata_file_once(tmp_path):
    # pyiceberg's table_exists loads the table: a load that checked existence first read the
    # metadata file twice, and every reader and commit paid it.
    lake = iceberg_history.counted_lake(str(tmp_path / "lake"))
    assert iceberg.load(lake) is None  # a lake whose catalog has no table yet: nothing to read
    iceberg.load(lake, create=True)
    iceberg_history.COUNTER.reset()
    assert iceberg.load(lake) is not None
    assert iceberg_history.COUNTER.counts["metadata read"] == 1
