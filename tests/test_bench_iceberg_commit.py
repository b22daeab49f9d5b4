"""Smoke test of bench/iceberg_commit.py at a tiny scale: it runs and leaves a table equal to what
it committed (no timing asserted: speed lives in BENCHMARKS.md)."""

from __future__ import annotations

import os

import pytest

from bench import iceberg_commit
from tidemark.base.layout import as_event_date
from tidemark.iceberg import reader, table_versions
from tidemark.store.lake import Lake


@pytest.mark.slow  # not in make test-fast: the commit bench at smoke scale, with a process pool
def test_iceberg_commit_bench_runs_and_commits_every_version(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TIDEMARK_LOG_LEVEL", raising=False)
    work = str(tmp_path / "bench")
    assert (
        iceberg_commit.main(
            ["--workdir", work, "--dates", "4", "--history", "2", "--sessions", "5", "--concurrency", "2", "--no-write"]
        )
        == 0
    )
    assert "What the Iceberg commit adds to a publish" in capsys.readouterr().out
    # Its quiet log level must not outlive it: this pytest worker's later tests start stacks whose
    # readiness is read from info logs (the demo waited 900 s for "stream starting" in CI).
    assert "TIDEMARK_LOG_LEVEL" not in os.environ
    lake = Lake.open(f"{work}/lake")
    dates = table_versions.dates_with_version(lake)
    assert len(dates) == 4
    for day in dates:
        # history 2 -> versions 0 and 1, then 'replace' (2) and the concurrent round (3)
        assert table_versions.current_version(lake, as_event_date(day)).version == iceberg_commit.receipts_for(3)[-1]
        assert reader.read_sessions(lake, as_event_date(day)).num_rows == 5
