"""Incremental corrections (tidemark/incremental.py) give exactly the full path's sessions.

Two lakes receive the same simulated stream (tests/test_dedup_lake.py's simulator: accumulating
panes, too_late fragments, redeliveries, bridging events, sessions across midnight and sessions
longer than a day), wave after wave. After each wave every notified date, and every date a run owes
a rerun, is deduplicated: incrementally in one lake, with `full=True` in the other. Every date's
published rows must be equal, column for column (events, receipts, ids), and equal to the batch
reference; and the incremental lake must really have taken the incremental path.
"""
from __future__ import annotations

import random
from collections import deque
from datetime import timedelta

import pytest

from tests import reference
from tests.lakekit import DAY0, SimulatedStream, arrivals, make_events
from tidemark import incremental, obligations, planning, reader
from tidemark.dedup import run_dedup
from tidemark.sessions import SessionRules


def long_sessions(rng: random.Random, users: int = 2) -> list[tuple]:
    """Sessions of 20-40 hours (a kiosk), one event every 20 minutes, starting on the first days."""
    out = []
    for u in range(users):
        user = f"k{u}"
        t = DAY0 + timedelta(hours=rng.uniform(6, 30))
        for n in range(rng.randint(60, 120)):
            out.append((user, f"{user}-k{n}", t, "play"))
            t += timedelta(minutes=20)
    return out


def converge(lake, spark, dates, rules, full) -> list[dict]:
    queue, runs = deque(sorted(dates)), []
    while queue:
        event_date = queue.popleft()
        runs.append(run_dedup(lake, event_date, rules, spark=spark, full=full).to_json())
        for owed in obligations.pending(lake):
            if owed["event_date"] not in queue:
                queue.append(owed["event_date"])
        assert len(runs) < 60, f"reruns do not settle: {runs}"
    return runs


def rows(lake: str, event_date: str) -> list[dict]:
    try:
        table = reader.read_sessions(lake, event_date)
    except reader.NoVersion:
        return []
    return sorted(table.to_pylist(), key=lambda r: (r["user_id"], r["session_start"]))


def expected(events, event_date: str, gap: timedelta) -> set[tuple]:
    ref = reference.sessionize([(u, e, ts) for u, e, ts, _ in events], gap)
    return {(s.user_id, s.session_start, s.session_end, s.event_ids, s.event_count)
            for s in ref if s.event_date == event_date}


def keys(table_rows: list[dict]) -> set[tuple]:
    return {(r["user_id"], r["session_start"], r["session_end"], frozenset(r["event_ids"]), r["event_count"])
            for r in table_rows}


@pytest.mark.slow  # not in make test-fast: ~25 dedup runs per case
@pytest.mark.spark
@pytest.mark.timeout(3000)  # ~25 dedup runs: minutes on a quiet machine, far more on a loaded one
@pytest.mark.parametrize("seed,rules", [
    (1, SessionRules()),
    (2, SessionRules(gap=timedelta(minutes=50), allowed_lateness=timedelta(hours=3))),
])
def test_incremental_equals_full_path_and_reference_over_random_histories(spark, tmp_path, seed, rules):
    rng = random.Random(seed)
    events = make_events(rng, users=4, days=2) + long_sessions(rng, users=1)
    batches = arrivals(rng, events, batches=6)
    lakes = {"incremental": str(tmp_path / "inc"), "full": str(tmp_path / "full")}
    # The same seed: both simulators write the same panes under the same receipt_ts.
    streams = {name: SimulatedStream(lake, seed) for name, lake in lakes.items()}
    seen, modes, everything = [], [], set()
    for wave in (batches[:3], batches[3:5], batches[5:]):  # each correction starts from the last version
        notified = set()
        for deliveries in wave:
            written = {name: stream.batch(deliveries) for name, stream in streams.items()}
            assert [(p.event_date, p.receipt_ts, p.rows) for p in written["incremental"]] == \
                [(p.event_date, p.receipt_ts, p.rows) for p in written["full"]]
            notified |= {p.event_date for p in written["full"]}
            seen.extend(deliveries)
        everything |= notified
        # Incremental after every wave: each correction starts from the version the last one made.
        runs = converge(lakes["incremental"], spark, notified, rules, full=False)
        modes += [r["mode"] for r in runs if r["published"]]
        for day in sorted({ts.date().isoformat() for _, _, ts, _ in seen}):
            got = rows(lakes["incremental"], day)
            if got or day in notified:
                assert keys(got) == expected(seen, day, rules.gap), day
    assert "incremental" in modes, modes
    # The full path once over the same receipts: the same rows, column for column.
    full_runs = converge(lakes["full"], spark, everything, rules, full=True)
    assert all(r["mode"] == "full" for r in full_runs if r["published"])
    for day in sorted({ts.date().isoformat() for _, _, ts, _ in seen}):
        assert rows(lakes["incremental"], day) == rows(lakes["full"], day), day


def _previous(**changes) -> dict:
    version = {"event_date": "2026-03-07", "run_id": "r1", "version": "20260308T000000000Z",
               "receipts": ["2026-03-07/20260308T000000000Z"], "reach": "2026-03-07T10:00:00.000000Z",
               "hi": "2026-03-08", "lo": "2026-03-06T23:30:00Z", "gap": "30m",
               "max_receipt_ts": "20260308T000000000Z", "sessions": 3, "context_rows": 1,
               "rules": {"gap_us": 1_800_000_000, "allowed_lateness_us": 3_600_000_000,
                         "watermark_delay_us": 600_000_000}}
    from tidemark import rules_record
    version.update(rules_record.marker_fields(SessionRules()))
    version.update(changes)
    return {k: v for k, v in version.items() if v is not None}


class _Marker:
    def __init__(self, event_date, receipt_ts, rows=5):
        self.event_date, self.receipt_ts, self.rows = event_date, receipt_ts, rows


def _plan(*stamps) -> planning.Plan:
    rules = SessionRules()
    return planning.Plan("2026-03-07", planning.lo_of("2026-03-07", rules), "2026-03-08",
                         [_Marker("2026-03-07", ts) for ts in stamps])


@pytest.mark.parametrize("previous,plan,why", [
    (None, _plan("20260308T000000000Z", "20260309T000000000Z"), "no previous version"),
    (_previous(reach="__drop__"), _plan("20260308T000000000Z", "20260309T000000000Z"), "records no reach"),
    (_previous(context_rows=None), _plan("20260308T000000000Z", "20260309T000000000Z"), "no island context"),
    (_previous(rules_id="other"), _plan("20260308T000000000Z", "20260309T000000000Z"), "rules changed"),
    (_previous(lo="2026-03-06T23:00:00Z"), _plan("20260308T000000000Z", "20260309T000000000Z"), "another lo"),
    (_previous(receipts=["2026-03-07/20260301T000000000Z"]), _plan("20260308T000000000Z"), "does not"),
    (_previous(), _plan("20260307T000000000Z", "20260308T000000000Z"), "older than the previous"),
])
def test_incremental_precondition_falls_back_to_the_full_path(previous, plan, why):
    if previous is not None and previous.get("reach") == "__drop__":
        del previous["reach"]
    start, reason = incremental.base(previous, plan, SessionRules())
    assert start is None and why in reason


def test_incremental_base_names_only_the_new_receipts():
    start, reason = incremental.base(_previous(), _plan("20260308T000000000Z", "20260309T000000000Z"),
                                     SessionRules())
    assert reason == "" and [p.receipt_ts for p in start.new] == ["20260309T000000000Z"]
    assert start.rows_read == 5 + 3 + 1
