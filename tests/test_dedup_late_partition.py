"""A complete receipt partition written under an old receipt_ts after a version planned through it
(what a replay of the batch at the head writes when it reaches other verdicts: a crash after
head.json, before Spark's commit), and `tidemark dedup --full`: the no-op decision is never fooled,
`--full` always recomputes and publishes only another result (docs/dedup.md, "What planning
reads" and "Incremental corrections"). The lake is tests/lakekit.py's simulated stream with the
receipt index and its head, as the stream writes them; the replay is written by hand.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta

import pyarrow.parquet as pq
import pytest

from tests.lakekit import DAY0, RULES, SimulatedStream, expected, published
from tidemark import cli
from tidemark.base.layout import as_event_date
from tidemark.deduplication.dedup import run_dedup, up_to_date
from tidemark.iceberg import table_versions
from tidemark.orchestration import reconcile
from tidemark.panes import receipt_index, receipts
from tidemark.session import rules_record
from tidemark.store.lake import Lake

pytestmark = pytest.mark.spark

D = DAY0.date().isoformat()
NEXT = (DAY0 + timedelta(days=1)).date().isoformat()


def _event(user: str, n: int, hours: float, kind: str = "play") -> tuple:
    return (user, f"{user}-e{n}", DAY0 + timedelta(hours=hours), kind)


def _lake(tmp_path) -> tuple[Lake, SimulatedStream, list[tuple]]:
    """Two batches: the first with sessions of D, the second (the head) with one of D+1 only. A
    version of D is then planned through the head, which holds no partition of D."""
    lake = Lake.open(tmp_path / "lake")
    rules_record.ensure(lake, RULES, "test")
    receipt_index.start(lake)
    stream = SimulatedStream(lake, 1)
    events = [_event("a", 1, 10), _event("a", 2, 10.2), _event("b", 1, 15)]
    for deliveries in (events, [_event("c", 1, 30)]):
        written = stream.batch(deliveries, mode=0.5)
        receipt_index.write_head(lake, written[0].receipt_ts)
    return lake, stream, events + [_event("c", 1, 30)]


def _replay(stream: SimulatedStream, deliveries: list[tuple]) -> list[receipts.ReceiptPartition]:
    """The replay of the batch at the head: panes of `deliveries` written and completed under the
    head's receipt_ts (the head does not move)."""
    head = receipt_index.head(stream.lake)
    assert head is not None
    stream.batch_id -= 1  # the same batch: its receipt_ts
    written = stream.batch(deliveries, mode=0.5)
    assert {p.receipt_ts for p in written} == {head}
    return written


def _partitions_pending(lake: Lake, capsys) -> list[str]:
    """`tidemark partitions --json`'s pending receipts of D."""
    capsys.readouterr()
    assert cli.main(["partitions", "--lake", str(lake), "--json", "--since", D, "--until", D]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    return [ts for row in rows if row["event_date"] == D for ts in row["pending_receipts"]]


@pytest.mark.parametrize("full", [False, True], ids=["dedup", "dedup --full"])
def test_a_partition_written_under_the_planned_through_receipt_ts_is_deduplicated(spark, tmp_path, full, capsys):
    lake, stream, events = _lake(tmp_path)
    first = run_dedup(lake, D, RULES, spark=spark)
    assert first.published
    version = table_versions.current_version(lake, as_event_date(D))
    assert version is not None
    assert version.planned_through == receipt_index.head(lake)

    late = [_event("d", 1, 12)]  # an event the first attempt refused, accepted by the replay
    written = _replay(stream, late)
    assert [p.event_date for p in written] == [DAY0.date()]
    key = f"{D}/{written[0].receipt_ts}"

    # every reader of the lake agrees that D lacks the partition
    assert up_to_date(lake, D) is None  # the DAG's skip check: Spark needed
    stale = {s.event_date: s for s in reconcile.staleness(lake, event_dates=[DAY0.date()])}
    assert stale[DAY0.date()].pending_receipts == [key]
    assert _partitions_pending(lake, capsys) == [written[0].receipt_ts]

    result = run_dedup(lake, D, RULES, spark=spark, full=full)
    assert result.published, result
    assert not result.noop, result
    assert key in table_versions.current_version(lake, as_event_date(D)).receipts
    assert published(lake, D) == expected(events + late, D)
    assert reconcile.staleness(lake, event_dates=[DAY0.date()]) == []
    assert _partitions_pending(lake, capsys) == []
    again = run_dedup(lake, D, RULES, spark=spark)
    assert again.noop
    assert not again.published
    if not full:  # an incremental version: a full run finds the same islands (sessions and context)
        assert result.mode == "incremental", result
        recomputed = run_dedup(lake, D, RULES, spark=spark, full=True)
        assert not recomputed.published, recomputed
        assert not recomputed.noop, recomputed


def test_full_always_recomputes_and_publishes_only_another_result(spark, tmp_path):
    lake, stream, events = _lake(tmp_path)
    first = run_dedup(lake, D, RULES, spark=spark)
    assert first.published
    assert run_dedup(lake, D, RULES, spark=spark).noop

    # the same receipts, the same result: recomputed, nothing published
    same = run_dedup(lake, D, RULES, spark=spark, full=True)
    assert not same.noop, same
    assert not same.published, same
    assert same.mode == "full"
    assert same.full_reason == "--full"
    assert same.version == first.version
    assert table_versions.current_version(lake, as_event_date(D)).version == first.version

    # a receipt partition's panes replaced under the same key (not something the stream does): only
    # a full run can see it; it publishes the other result as a new version
    key = next(k for k in table_versions.current_version(lake, as_event_date(D)).receipts if k.startswith(D))
    folder = lake.receipt_dir(as_event_date(D), key.split("/", 1)[1])
    table = pq.read_table(os.path.join(folder, "part-00000.parquet"))
    rows = table.to_pylist()
    extra = dict(rows[0], user_id="z", session_id="z" * 32)
    pq.write_table(table.from_pylist([*rows, extra], schema=table.schema), os.path.join(folder, "part-00000.parquet"))
    assert run_dedup(lake, D, RULES, spark=spark).noop  # the incremental decision looks at keys

    replaced = run_dedup(lake, D, RULES, spark=spark, full=True)
    assert replaced.published, replaced
    assert not replaced.noop, replaced
    current = table_versions.current_version(lake, as_event_date(D))
    assert current.version > first.version
    assert current.previous_version == first.version
    assert "z" in {s[0] for s in published(lake, D)}
    assert run_dedup(lake, D, RULES, spark=spark).noop
