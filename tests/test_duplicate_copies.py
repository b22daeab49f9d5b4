"""Issue 11 point 4: which copy of a duplicated event is kept is a function of the set of copies
received, the same in the stream, the dedup SQL and the batch reference, whatever the arrival order
and the batch boundaries.

An event is (user_id, event_id, event_ts); its copies may differ in event_type and payload, and the
smallest (event_type, payload) is kept (docs/input-contract.md). Before, the stream dropped a new
copy when the open session held the event_id and the dedup took the smallest copy among those that
reached panes, so the kept copy depended on which copy came first.
"""

from __future__ import annotations

import json
from collections import deque
from datetime import date, datetime, timezone

import pytest

from streaming_job.job import StreamConfig, run_stream
from tests import reference
from tests.streamkit import land
from tidemark.base.layout import as_event_date
from tidemark.base.session_rules import SessionRules
from tidemark.deduplication.dedup import run_dedup
from tidemark.iceberg import reader
from tidemark.ingest import contract
from tidemark.store.lake import Lake

# slow (not in make test-fast): a real stream and dedup per arrangement (module fixture)
pytestmark = [pytest.mark.spark, pytest.mark.slow]

RULES = SessionRules()  # gap 30m, allowed lateness 1h, watermark delay 10m
D = "2026-03-07"


def copy(user, event_id, hhmm, event_type="play", **payload) -> str:
    return json.dumps(
        {"event_id": event_id, "user_id": user, "event_type": event_type, "event_ts": f"{D}T{hhmm}:00Z", **payload}
    )


A_BIG, A_SMALL = copy("u1", "a", "10:00", v="2"), copy("u1", "a", "10:00", v="1")  # payload differs
B_BIG, B_SMALL = copy("u1", "b", "10:10", "play"), copy("u1", "b", "10:10", "pause")  # event_type differs
C_1020, C_1025 = copy("u1", "c", "10:20"), copy("u1", "c", "10:25")  # two events
D_BIG, D_SMALL = copy("u2", "d", "11:00", v="9"), copy("u2", "d", "11:00", v="0")  # one after expiry
MOVE_WATERMARK = copy("u3", "w", "14:00")  # watermark 13:50: u1's and u2's sessions expire
BIG = [A_BIG, B_BIG, C_1020, D_BIG]
SMALL = [A_SMALL, B_SMALL, C_1025, D_SMALL]

ARRANGEMENTS = {
    "one batch": [[*SMALL, MOVE_WATERMARK, *BIG]],
    "larger copies first, smaller after expiry": [BIG, [MOVE_WATERMARK], SMALL],
    "smaller copies first": [SMALL, [MOVE_WATERMARK], BIG],
    "interleaved": [[A_BIG, B_SMALL], [C_1025, D_BIG, A_SMALL], [MOVE_WATERMARK], [B_BIG, C_1020, D_SMALL]],
}


def micros(moment: datetime) -> int:
    return int((moment - datetime(1970, 1, 1, tzinfo=timezone.utc)).total_seconds()) * 1_000_000 + moment.microsecond


def published(lake) -> tuple[set, set]:
    table = reader.read_sessions(lake, as_event_date(D))
    sessions, events = set(), set()
    for row in table.to_pylist():
        sessions.add(
            (
                row["user_id"],
                micros(row["session_start"]),
                micros(row["session_end"]),
                tuple(sorted(row["event_ids"])),
                row["event_count"],
            )
        )
        for e in row["events"]:
            events.add((row["user_id"], e["event_id"], micros(e["event_ts"]), e["event_type"], e["payload"]))
    return sessions, events


def expected(landing) -> tuple[set, set]:
    kept = reference.kept_copies_of_landing(landing)
    events = {tuple(e) for e in kept.values() if contract.iso_from_micros(e.event_ts_us).startswith(D)}
    sessions = {
        (
            s.user_id,
            micros(s.session_start),
            micros(s.session_end),
            tuple(
                sorted(
                    e
                    for u, e, ts, *_ in events
                    if u == s.user_id and micros(s.session_start) <= ts <= micros(s.session_end)
                )
            ),
            s.event_count,
        )
        for s in reference.sessions_of_landing(landing, RULES.gap)
        if s.event_date == as_event_date(D)
    }
    return sessions, events


@pytest.fixture(scope="module")
def outcomes(spark, tmp_path_factory):
    out = {}
    for name, files in ARRANGEMENTS.items():
        root = tmp_path_factory.mktemp("copies")
        landing, lake, checkpoint = (str(root / d) for d in ("landing", "lake", "checkpoint"))
        lake = Lake.open(lake)
        land(landing, files)
        dates: set[date] = set()
        run_stream(
            StreamConfig(landing, lake, checkpoint, RULES, available_now=True, max_files_per_trigger=1),
            listeners=[lambda r: dates.update(p.event_date for p in r.partitions)],  # noqa: B023 (run_stream returns before the next iteration)
            spark=spark,
        )
        queue = deque(sorted(dates))
        while queue:  # what the DAG does
            result = run_dedup(lake, queue.popleft(), RULES, spark=spark)
            queue.extend(d for d in result.affected_dates if d not in queue)
        out[name] = {"published": published(lake), "expected": expected(landing)}
    return out


@pytest.mark.parametrize("name", list(ARRANGEMENTS))
def test_stream_and_dedup_keep_the_copies_the_reference_keeps(outcomes, name):
    got, want = outcomes[name]["published"], outcomes[name]["expected"]
    assert got[1] == want[1]
    assert got[0] == want[0]


def test_the_kept_copies_do_not_depend_on_arrival_order_or_batches(outcomes):
    results = {name: o["published"] for name, o in outcomes.items()}
    first = next(iter(results.values()))
    assert all(r == first for r in results.values())
    kept = {(u, e, t): p for u, e, _, t, p in first[1]}
    assert kept[("u1", "a", "play")] == '{"v":"1"}'
    assert ("u1", "b", "pause") in kept
    assert ("u1", "b", "play") not in kept
    assert kept[("u2", "d", "play")] == '{"v":"0"}'
    assert sorted(e for u, e, *_ in first[1] if u == "u1").count("c") == 2  # two times: two events
