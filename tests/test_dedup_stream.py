"""The real stream, then the dedup: sessions crossing midnight, a late event bridging two sessions,
a late event moving a session to the previous date, duplicates, and a shuffled generated workload.
Every published date is compared with tests/reference.py over the landed files."""

from __future__ import annotations

import random
from collections import deque

import pytest

from streaming_job.job import StreamConfig, run_stream
from tests import reference
from tests.helpers import lake_session_set, reference_session_set
from tests.streamkit import event, land
from tidemark.base.layout import as_event_date
from tidemark.base.session_rules import SessionRules
from tidemark.deduplication.dedup import run_dedup
from tidemark.demo import generate
from tidemark.iceberg import reader
from tidemark.store.lake import Lake

RULES = SessionRules()  # gap 30m, allowed lateness 1h, watermark delay 10m: the stream's defaults
D0, D1, D2 = "2026-03-06", "2026-03-07", "2026-03-08"


def stream(spark, landing, lake, checkpoint) -> set[str]:
    """Run the real stream over what has landed; returns the event dates it wrote (its notices)."""
    notified: set[str] = set()
    run_stream(
        StreamConfig(landing, lake, checkpoint, RULES, available_now=True, max_files_per_trigger=1),
        listeners=[lambda report: notified.update(p.event_date.isoformat() for p in report.partitions)],
        spark=spark,
    )
    return notified


def converge(spark, lake, dates) -> list:
    """What the DAG does: dedup every notified date, then every date a run reports as affected."""
    queue, results = deque(sorted(dates)), []
    while queue:
        result = run_dedup(lake, queue.popleft(), RULES, spark=spark)
        results.append(result)
        queue.extend(d for d in map(str, result.affected_dates) if d not in queue)
        assert len(results) < 20
    return results


sessions = lake_session_set


def expected(landing, event_date) -> set[tuple]:
    return reference_session_set(landing, event_date, RULES.gap)


@pytest.mark.slow  # not in make test-fast: the real stream, then dedups
@pytest.mark.spark
def test_crafted_late_bridging_and_midnight_cases(spark, tmp_path):
    landing, lake, ckpt = str(tmp_path / "landing"), Lake.open(tmp_path / "lake"), str(tmp_path / "ckpt")
    a_first = event("a", "a1", f"{D0}T23:40:00Z")
    land(
        landing,
        [
            [
                a_first,
                a_first,
                event("a", "a2", f"{D1}T00:05:00+00:00"),
                event("a", "a3", f"{D1}T01:10:00+01:00"),
                event("b", "b1", f"{D0}T22:00:00Z"),
                event("b", "b2", f"{D0}T22:10:00Z"),
                event("b", "b3", f"{D0}T22:20:00Z"),
                event("c", "c1", f"{D1}T00:05:00Z"),
                event("c", "c2", f"{D1}T00:15:00Z"),
                event("c", "c3", f"{D1}T00:30:00Z"),
            ],
            [
                event("b", "b4", f"{D0}T23:05:00Z"),
                event("b", "b5", f"{D0}T23:20:00Z"),
                event("b", "b6", f"{D0}T23:30:00Z"),
                event("z", "z1", f"{D2}T10:00:00Z"),
            ],  # moves the watermark far past everything above
        ],
    )
    first = stream(spark, landing, lake, ckpt)
    assert first == {D0, D1, D2}
    converge(spark, lake, first)
    for day in (D0, D1, D2):
        assert sessions(lake, day) == expected(landing, day)
    assert {s[0] for s in sessions(lake, D0)} == {"a", "b"}
    assert len(sessions(lake, D0)) == 3
    assert {s[0] for s in sessions(lake, D1)} == {"c"}

    # Days later: b's bridge (22:45) and c's early event (23:50 the day before) arrive, long after
    # their sessions' state expired, plus a redelivery; a new event on D2 moves the watermark again.
    land(
        landing,
        [
            [event("b", "b-bridge", f"{D0}T22:45:00Z"), event("c", "c0", f"{D0}T23:50:00Z"), a_first],
            [event("y", "y1", f"{D2}T20:00:00Z")],
        ],
        start_index=2,
    )
    second = stream(spark, landing, lake, ckpt)
    assert D1 not in second  # D1 gets no receipt: only affected_dates can tell it is stale
    results = converge(spark, lake, second)
    assert D1 in {str(d) for r in results for d in r.affected_dates}
    for day in (D0, D1, D2):
        assert sessions(lake, day) == expected(landing, day), day
    b_sessions = [s for s in sessions(lake, D0) if s[0] == "b"]
    assert len(b_sessions) == 1
    assert len(b_sessions[0][3]) == 7
    assert {s[0] for s in sessions(lake, D0)} == {"a", "b", "c"}  # c moved to the day before
    assert sessions(lake, D1) == set()
    assert reader.current_version(lake, as_event_date(D1)).sessions == 0
    assert {s[0] for s in sessions(lake, D2)} == {"y", "z"}


@pytest.mark.slow  # not in make test-fast: the real stream, then dedups
@pytest.mark.spark
@pytest.mark.parametrize("seed", [11])
def test_shuffled_generated_workload_equals_reference(spark, tmp_path, seed):
    landing, lake, ckpt = str(tmp_path / "landing"), Lake.open(tmp_path / "lake"), str(tmp_path / "ckpt")
    workload = generate.Workload(
        events=300, users=8, days=2, files=4, seed=seed, duplicate_rate=0.1, offline_session_rate=0.1
    )
    deliveries, _ = generate.build(workload)
    random.Random(seed).shuffle(deliveries)  # any arrival order, not just the realistic one
    for i, chunk in enumerate(generate.split_files(deliveries, workload.files)):
        generate.write_file(landing, i, chunk, mtime=1_700_000_000 + i)
    converge(spark, lake, stream(spark, landing, lake, ckpt))
    days = sorted({s.event_date for s in reference.sessions_of_landing(landing, RULES.gap)})
    assert len(days) >= 2
    for day in days:
        assert sessions(lake, day) == expected(landing, day), day
