"""bench/history.py at a tiny size: it builds a lake through the registration path, counts storage
operations at the filesystem layer, and the receipt index's no-op decision reads what arrived after
the version, not the lake's history."""

from __future__ import annotations

from bench import history
from tidemark.base.layout import as_event_date
from tidemark.panes import planning, receipt_index, receipts
from tidemark.store.lake import Lake


def test_the_history_bench_counts_what_planning_reads(tmp_path):
    lake = Lake.open(tmp_path / "lake")
    newest, batches = history.build(lake, 300)
    assert receipt_index.is_complete(lake)
    assert sum(len(receipts.list_receipts(lake, d)) for d in receipts.list_event_dates(lake)) >= 300
    assert receipt_index.head(lake) is not None
    day = as_event_date(newest)  # the bench's text (its built record's), typed for planning
    version = history._version(lake, day)
    history.late_data(lake, batches, 3, newest)

    seconds, ops = history.measure(
        lambda: planning.quick_covered(planning.LakeIndex(lake), day, history.RULES, version), 0
    )
    with history.without_index(lake):
        _, scanned = history.measure(
            lambda: planning.plan_for_rerun(planning.LakeIndex(lake), day, history.RULES, version), 0
        )
    assert ops["read"] <= 3
    assert ops["list"] <= 6
    assert scanned["read"] >= 300  # every marker, the cost the index removes
    rows = history.run_size(200, 0, str(tmp_path / "bench"))
    assert [r[1] for r in rows] == [
        "no-op decision, newest date",
        "plan a correction, newest date",
        "plan a correction, 30 days back",
        "one reconciliation pass, 15 min after the last",
    ]
    print(rows[-1])
