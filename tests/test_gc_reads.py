"""What gc reads of the table's metadata: each manifest once, however many kept snapshots share it
(the kept snapshots of a lake share the manifests of the half months they did not touch; reading
them per snapshot made a gc of a 189-date table read 5,317 objects, 33 MB: BENCHMARKS.md section 7)."""

from __future__ import annotations

from datetime import timedelta

from bench import iceberg_history
from tidemark.iceberg import table as iceberg
from tidemark.ops import gc


def test_gc_reads_each_manifest_once_across_the_kept_snapshots(tmp_path):
    lake = iceberg_history.counted_lake(str(tmp_path / "lake"))
    iceberg_history.build(lake, 20, sessions=1)  # 20 days (two half months), 3 commits a day: none expired
    tbl = iceberg.load(lake)
    snapshots = tbl.snapshots()
    manifests = {m.manifest_path for s in snapshots for m in s.manifests(tbl.io)}
    shared = sum(len(s.manifests(tbl.io)) for s in snapshots)
    assert len(snapshots) >= 15
    assert shared > len(manifests) + 10
    iceberg_history.COUNTER.reset()
    assert gc.gc(lake, timedelta(days=7), dry_run=True) == []
    reads = iceberg_history.COUNTER.counts["metadata read"]
    # the metadata file, every kept snapshot's manifest list, every distinct manifest once (and the
    # upkeep's look at the current manifest list: maintenance.maintain)
    assert reads <= 1 + len(snapshots) + len(manifests) + 3, (reads, len(snapshots), len(manifests))
