"""Dedup over randomized lakes: whatever the arrival order, lateness and duplication, every event
date's published version equals the batch reference (tidemark/demo/batch_reference.py) of every distinct
event. The lakes are written by tests/lakekit.py's simulator of the stream.
"""

from __future__ import annotations

import random

import pytest

# The kit's names are also imported from here by older test modules: import them from tests.lakekit.
from tests.lakekit import DAY0, GAP, RULES, SimulatedStream, arrivals, converge, expected, make_events, published  # noqa: F401
from tidemark.deduplication.dedup import run_dedup
from tidemark.store.lake import Lake


@pytest.mark.slow  # not in make test-fast: many dedup runs per seed
@pytest.mark.spark
@pytest.mark.parametrize(("seed", "reader"), [(1, "spark"), (2, "spark"), (3, "spark"), (1, "arrow"), (4, "arrow")])
def test_published_versions_equal_batch_sessionization_over_random_arrivals(spark, tmp_path, seed, reader, monkeypatch):
    """reader: the panes read by Spark's file source, or by the executors with pyarrow (what a date
    of thousands of receipt partitions gets: tidemark/panes/pane_reader.py), here from the first folder."""
    if reader == "arrow":
        from tidemark.panes import pane_reader

        monkeypatch.setattr(pane_reader, "FOLDERS_FOR_ARROW", 1)
    rng = random.Random(seed)
    events = make_events(rng)
    lake = Lake.open(tmp_path / "lake")
    stream = SimulatedStream(lake, seed)
    batches = arrivals(rng, events, batches=6)
    seen: list[tuple] = []

    # First half of the arrivals, then dedup of every notified date: correct for what was received.
    notified = set()
    for deliveries in batches[:3]:
        notified |= {p.event_date for p in stream.batch(deliveries)}
        seen.extend(deliveries)
    converge(lake, spark, notified)
    for event_date in notified:
        assert published(lake, event_date) == expected(seen, event_date), event_date

    # The rest arrives (late, repeated, bridging); only the dates that got receipts are notified,
    # every other stale date must be reached through affected_dates.
    notified = set()
    for deliveries in batches[3:]:
        notified |= {p.event_date for p in stream.batch(deliveries)}
    converge(lake, spark, notified)
    all_dates = sorted({ts.date().isoformat() for _, _, ts, _ in events})
    for event_date in all_dates:
        assert published(lake, event_date) == expected(events, event_date), event_date
    # Every version records what it read; a rerun without new receipts is a no-op.
    for event_date in all_dates:
        again = run_dedup(lake, event_date, RULES, spark=spark)
        assert again.noop
        assert not again.published
        assert again.affected_dates == []


@pytest.mark.spark
def test_a_session_being_opened_is_waited_for_only_when_there_is_something_to_compute(spark, tmp_path):
    """The DAG's task opens its Spark Connect session beside the plan (`connect`): a run with
    nothing new never asks for it; one that computes asks once and publishes the same result."""
    rng = random.Random(5)
    events = make_events(rng, users=3, days=1)
    lake = Lake.open(tmp_path / "lake")
    day = SimulatedStream(lake, 5).batch(events)[0].event_date
    asked = []

    def connect():
        asked.append(1)
        return spark

    first = run_dedup(lake, day, RULES, connect=connect)
    assert first.published
    assert asked == [1]
    assert published(lake, day) == expected(events, day)
    again = run_dedup(lake, day, RULES, connect=lambda: pytest.fail("nothing new: no session needed"))
    assert again.noop
