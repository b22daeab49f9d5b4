"""Incremental corrections (tidemark/deduplication/incremental.py) give exactly the full path's sessions.

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
from dataclasses import replace
from datetime import date, datetime, timedelta, timezone

import pytest

from tests import reference
from tests.lakekit import DAY0, SimulatedStream, arrivals, make_events
from tidemark.base.layout import as_event_date
from tidemark.base.session_rules import SessionRules
from tidemark.deduplication import buckets, execution, incremental
from tidemark.deduplication.dedup import run_dedup
from tidemark.iceberg import reader
from tidemark.orchestration import obligations
from tidemark.panes import planning
from tidemark.store.lake import Lake
from tidemark.store.version_record import Commit, VersionRecord


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


def rows(lake: Lake, event_date: str) -> list[dict]:
    try:
        table = reader.read_sessions(lake, as_event_date(event_date))
    except reader.NoVersion:
        return []
    return sorted(table.to_pylist(), key=lambda r: (r["user_id"], r["session_start"]))


def expected(events, event_date: str, gap: timedelta) -> set[tuple]:
    ref = reference.sessionize(events, gap)  # (user_id, event_id, event_ts, event_type)
    return {
        (s.user_id, s.session_start, s.session_end, s.event_ids, s.event_count, s.event_type_count)
        for s in ref
        if s.event_date == as_event_date(event_date)
    }


def keys(table_rows: list[dict]) -> set[tuple]:
    return {
        (
            r["user_id"],
            r["session_start"],
            r["session_end"],
            frozenset(r["event_ids"]),
            r["event_count"],
            r["event_type_count"],
        )
        for r in table_rows
    }


@pytest.mark.slow  # not in make test-fast: ~25 dedup runs per case
@pytest.mark.spark
@pytest.mark.timeout(3000)  # ~25 dedup runs: minutes on a quiet machine, far more on a loaded one
@pytest.mark.parametrize(
    ("seed", "rules", "touched_by"),
    [
        (1, SessionRules(), "value"),
        (2, SessionRules(gap=timedelta(minutes=50), allowed_lateness=timedelta(hours=3)), "join"),
    ],
)
def test_incremental_equals_full_path_and_reference_over_random_histories(
    spark, tmp_path, monkeypatch, seed, rules, touched_by
):
    if touched_by == "join":  # the path of many touched users (a broadcast join instead of an IN list)
        monkeypatch.setattr(incremental, "_ISIN_USERS", 0)
        # and dates of several buckets of users (tidemark/deduplication/buckets.py): corrections
        # rewrite some and keep the others, dates that grow are laid out anew
        monkeypatch.setattr(buckets, "SESSIONS_PER_BUCKET", 2)
    rng = random.Random(seed)
    events = make_events(rng, users=4, days=2) + long_sessions(rng, users=1)
    batches = arrivals(rng, events, batches=6)
    lakes = {"incremental": Lake.open(tmp_path / "inc"), "full": Lake.open(tmp_path / "full")}
    # The same seed: both simulators write the same panes under the same receipt_ts.
    streams = {name: SimulatedStream(lake, seed) for name, lake in lakes.items()}
    seen, modes, everything = [], [], set()
    for wave in (batches[:3], batches[3:5], batches[5:]):  # each correction starts from the last version
        notified = set()
        for deliveries in wave:
            written = {name: stream.batch(deliveries) for name, stream in streams.items()}
            assert [(p.event_date, p.receipt_ts, p.rows) for p in written["incremental"]] == [
                (p.event_date, p.receipt_ts, p.rows) for p in written["full"]
            ]
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
            check_counts(lakes["incremental"], day)
    assert "incremental" in modes, modes
    # The full path once over the same receipts: the same rows, column for column. Its plans
    # compiled (code generation) and its islands cached, where the small corrections above ran
    # interpreted from local checkpoints (tidemark.deduplication.execution): the two execution
    # strategies give the same rows too.
    monkeypatch.setattr(execution, "SMALL_RUN_ROWS", -1)
    full_runs = converge(lakes["full"], spark, everything, rules, full=True)
    assert all(r["mode"] == "full" for r in full_runs if r["published"])
    for day in sorted({ts.date().isoformat() for _, _, ts, _ in seen}):
        assert rows(lakes["incremental"], day) == rows(lakes["full"], day), day


def _previous(**changes) -> VersionRecord:
    """A previous version; a change to None leaves the key out of its marker (an older writer's)."""
    version = {
        "event_date": date(2026, 3, 7),
        "run_id": "r1",
        "receipts": ("2026-03-07/20260308T000000000Z",),
        "reach": datetime(2026, 3, 7, 10, tzinfo=timezone.utc),
        "hi": date(2026, 3, 8),
        "lo": datetime(2026, 3, 6, 23, 30, tzinfo=timezone.utc),
        "horizon": datetime(2026, 3, 8, 2, tzinfo=timezone.utc),
        "gap": timedelta(minutes=30),
        "max_receipt_ts": "20260308T000000000Z",
        "sessions": 3,
        "context_rows": 1,
        "rules": {"gap_us": 1_800_000_000, "allowed_lateness_us": 3_600_000_000, "watermark_delay_us": 600_000_000},
    }
    from tidemark.session import rules_record

    version.update(rules_record.marker_fields(SessionRules()))
    version.update(changes)
    commit = Commit("20260308T000000000Z", "r1", None, "2026-03-08T00:00:05Z")
    return replace(VersionRecord.holding(**{k: v for k, v in version.items() if v is not None}), commit=commit)


class _Marker:
    def __init__(self, event_date, receipt_ts, rows=5):
        self.event_date, self.receipt_ts, self.rows = event_date, receipt_ts, rows


def _plan(*stamps) -> planning.Plan:
    rules = SessionRules()
    day = date(2026, 3, 7)
    return planning.Plan(day, planning.lo_of(day, rules), date(2026, 3, 8), [_Marker(day, ts) for ts in stamps])


@pytest.mark.parametrize(
    ("previous", "plan", "why"),
    [
        (None, _plan("20260308T000000000Z", "20260309T000000000Z"), "no previous version"),
        (_previous(reach=None), _plan("20260308T000000000Z", "20260309T000000000Z"), "records no reach"),
        (_previous(context_rows=None), _plan("20260308T000000000Z", "20260309T000000000Z"), "no island context"),
        (_previous(rules_id="other"), _plan("20260308T000000000Z", "20260309T000000000Z"), "rules changed"),
        (
            _previous(lo=datetime(2026, 3, 6, 23, tzinfo=timezone.utc)),
            _plan("20260308T000000000Z", "20260309T000000000Z"),
            "another lo",
        ),
        (_previous(receipts=("2026-03-07/20260301T000000000Z",)), _plan("20260308T000000000Z"), "does not"),
        (_previous(), _plan("20260307T000000000Z", "20260308T000000000Z"), "older than the previous"),
        (_previous(horizon=None), _plan("20260308T000000000Z", "20260309T000000000Z"), "no context horizon"),
        (
            _previous(horizon=datetime(2026, 3, 8, 1, tzinfo=timezone.utc)),
            _plan("20260308T000000000Z", "20260309T000000000Z"),
            "another horizon",
        ),
    ],
)
def test_incremental_precondition_falls_back_to_the_full_path(previous, plan, why):
    start, reason = incremental.base(previous, plan, SessionRules())
    assert start is None
    assert why in reason


def test_incremental_base_names_only_the_new_receipts():
    start, reason = incremental.base(_previous(), _plan("20260308T000000000Z", "20260309T000000000Z"), SessionRules())
    assert reason == ""
    assert [p.receipt_ts for p in start.new] == ["20260309T000000000Z"]
    assert start.rows_read == 5 + 3 + 1


def _at(day: int, hh: int, mm: int):
    return DAY0 + timedelta(days=day, hours=hh, minutes=mm)


@pytest.mark.spark
@pytest.mark.timeout(1800)
def test_context_stops_at_the_horizon_and_a_correction_reaching_it_falls_back(spark, tmp_path):
    """The context keeps only the islands that start before the horizon (D+1 02:00 with a 30 min
    gap). A correction that extends D's session to within a gap of it must not trust the pruned
    context: here late events chain D's 23:50 session to an island at 03:00 on D+1 that the context
    did not keep; the incremental path alone would publish the session without that island's events."""
    rules = SessionRules()
    day, next_day = DAY0.date().isoformat(), (DAY0 + timedelta(days=1)).date().isoformat()
    assert incremental.horizon(DAY0.date(), rules) == _at(1, 2, 0)
    first = (
        [
            ("a", f"a-{n}", t, "play")
            for n, t in enumerate(
                [
                    _at(0, 23, 20),
                    _at(0, 23, 40),
                    _at(0, 23, 50),  # D's session
                    _at(1, 0, 50),
                    _at(1, 1, 0),  # D+1, before the horizon: context
                    _at(1, 3, 0),
                    _at(1, 3, 10),
                ]
            )
        ]  # D+1, after it: not kept
        + [
            ("b", "b-0", _at(0, 12, 0), "play"),
            ("b", "b-1", _at(0, 12, 10), "play"),
            ("c", "c-0", _at(1, 10, 0), "play"),
        ]
    )
    # 23:50 -> 00:15 -> 00:40 -> 00:50: D's session now ends at 01:00, a gap before the horizon.
    within = [("a", "a-w1", _at(1, 0, 15), "bridge"), ("a", "a-w2", _at(1, 0, 40), "bridge")]
    # 01:00 -> 01:25 -> ... -> 02:40 -> 03:00: it reaches the island the context did not keep.
    beyond = [("a", f"a-x{n}", _at(1, 1, 25) + timedelta(minutes=25 * n), "bridge") for n in range(4)]
    lakes = {"incremental": Lake.open(tmp_path / "inc"), "full": Lake.open(tmp_path / "full")}
    streams = {name: SimulatedStream(lake, 5) for name, lake in lakes.items()}
    seen, day_runs = [], []
    for wave in (first, within, beyond):
        for stream in streams.values():
            stream.batch(wave, mode=0.1)  # too_late fragments: the late events arrive on their own
        seen.extend(wave)
        runs = converge(lakes["incremental"], spark, {day, next_day}, rules, full=False)
        day_runs.append([r for r in runs if r["event_date"] == day and r["published"]][0])
        for d in (day, next_day):
            assert keys(rows(lakes["incremental"], d)) == expected(seen, d, rules.gap), (d, runs)
            check_counts(lakes["incremental"], d)
        if wave is first:
            # D+1's 00:50 island is context; the 03:00 and 10:00 islands are past the horizon.
            assert planning_context_rows(lakes["incremental"], day) == 1
    assert [r["mode"] for r in day_runs] == ["full", "incremental", "full"], day_runs
    assert "horizon" in day_runs[2]["full_reason"], day_runs[2]
    converge(lakes["full"], spark, {day, next_day}, rules, full=True)
    for d in (day, next_day):
        assert rows(lakes["incremental"], d) == rows(lakes["full"], d), d


def check_counts(lake: Lake, event_date: str) -> None:
    """The marker's counts (an incremental run derives them from the previous version's) are the
    rows really written: the table's sessions and the context folder's islands."""
    import os

    import pyarrow.dataset as ds

    from tidemark.iceberg import table_versions

    version = table_versions.current_version(lake, as_event_date(event_date))
    if version is None:
        return
    assert int(version.sessions) == len(rows(lake, event_date)), (event_date, version)
    folder = incremental.context_dir(lake, version.event_date, version.run_id)
    written = ds.dataset(folder, format="parquet").count_rows() if os.path.isdir(folder) else 0
    assert int(version.context_rows) == written, (event_date, version)


def planning_context_rows(lake: Lake, event_date: str) -> int:
    from tidemark.iceberg import table_versions

    return int(table_versions.current_version(lake, as_event_date(event_date)).context_rows)


@pytest.mark.spark
def test_a_small_run_is_interpreted_and_a_big_one_compiled_on_the_same_session(spark):
    for rows, whole_stage, factory in ((execution.SMALL_RUN_ROWS, "false", "NO_CODEGEN"), (10**6, "true", "FALLBACK")):
        execution.tune(spark, rows)
        assert spark.conf.get("spark.sql.codegen.wholeStage") == whole_stage, rows
        assert spark.conf.get("spark.sql.codegen.factoryMode") == factory, rows
