"""Sessions longer than a day (a kiosk, a TV app): one session spanning three or four dates, late
fragments that extend or bridge it dates after its start, holes filled later. Every date's published
version is compared with the batch reference (tests/reference.py) after each wave of arrivals, the
dates being run the way the DAG runs them: each notified date, then each date a run owes a rerun
(tidemark.orchestration.obligations).

Crafted lakes use tests/test_dedup_lake.py's simulated stream (exact control of which panes exist
when); one case runs the real stream (tests/streamkit.py)."""

from __future__ import annotations

import random
from collections import deque
from datetime import date, datetime, timedelta

import pytest

from streaming_job.job import StreamConfig, run_stream
from tests.helpers import lake_session_set, reference_session_set
from tests.lakekit import RULES, SimulatedStream, arrivals, expected, published
from tests.streamkit import event, land
from tidemark.base.layout import as_event_date
from tidemark.deduplication.dedup import run_dedup
from tidemark.iceberg import reader, table_versions
from tidemark.orchestration import obligations
from tidemark.panes import planning
from tidemark.store.lake import Lake
from tidemark.store.version_record import VersionRecord

pytestmark = pytest.mark.spark

D6, D7, D8, D9 = "2026-03-06", "2026-03-07", "2026-03-08", "2026-03-09"


def at(day: str, hh: int, mm: int = 0) -> datetime:
    return datetime.fromisoformat(f"{day}T{hh:02d}:{mm:02d}:00+00:00")


def every(user: str, prefix: str, start: datetime, end: datetime, step_min: int = 20) -> list[tuple]:
    out, t, n = [], start, 0
    while t <= end:
        n += 1
        out.append((user, f"{prefix}{n}", t, "play"))
        t += timedelta(minutes=step_min)
    return out


def converge(lake, spark, dates) -> list[dict]:
    """What the DAG does: run each notified date, then each date with a pending obligation."""
    queue, runs = deque(sorted(dates)), []
    while queue:
        event_date = queue.popleft()
        runs.append(run_dedup(lake, event_date, RULES, spark=spark).to_json())
        for owed in obligations.pending(lake):
            if owed["event_date"] not in queue:
                queue.append(owed["event_date"])
        assert len(runs) < 40, f"reruns do not settle: {runs}"
    assert obligations.pending(lake) == []
    return runs


def all_dates(events) -> list[str]:
    first = min(ts for _, _, ts, _ in events).date()
    last = max(ts for _, _, ts, _ in events).date()
    return [(first + timedelta(days=i)).isoformat() for i in range((last - first).days + 1)]


def check(lake, events, dates):
    for day in dates:
        assert published(lake, day) == expected(events, day), day


@pytest.mark.slow  # not in make test-fast: several dedup runs (or a real stream), tens of seconds
def test_fragment_two_dates_after_a_three_date_session_reaches_its_start_date(spark, tmp_path):
    """The first run of D6 saw no later date in the lake; a late fragment on D8 extends the session
    that started on D6. Before: D6's rerun decided 'nothing new' from its old plan and the fragment's
    events were published under no date."""
    lake = Lake.open(tmp_path / "lake")
    stream = SimulatedStream(lake, 1)
    kiosk = every("k", "k", at(D6, 12), at(D8, 2))
    stream.batch(kiosk, mode=0.5)  # accumulating panes: all under D6, the session's start
    converge(lake, spark, {D6})
    check(lake, kiosk, [D6, D7, D8])
    v6 = reader.current_version(lake, as_event_date(D6))
    assert v6.reach.isoformat().startswith(f"{D8}T02:00")
    assert v6.hi >= date.fromisoformat(D8)

    fragment = every("k", "late", at(D8, 2, 20), at(D8, 3, 0))
    written = stream.batch(fragment, mode=0.0)  # a fragment: the state had expired
    assert {p.event_date for p in written} == {date.fromisoformat(D8)}
    converge(lake, spark, {D8})
    check(lake, kiosk + fragment, [D6, D7, D8])
    (session,) = published(lake, D6)
    assert session[4] == len(kiosk) + len(fragment)


@pytest.mark.slow  # not in make test-fast: several dedup runs (or a real stream), tens of seconds
def test_bridged_hole_then_extensions_walk_back_to_the_start_date(spark, tmp_path):
    """Two multi-day sessions with an hour's hole; a late bridge joins them into one session from
    D6; then late fragments extend it into D9. Before: D7's rerun, planned only as far as sessions
    starting on D7 reached, missed the last fragment, so D6 never heard of it."""
    lake = Lake.open(tmp_path / "lake")
    stream = SimulatedStream(lake, 2)
    first = every("h", "a", at(D6, 20), at(D7, 20))  # D6 20:00 .. D7 20:00
    second = every("h", "b", at(D7, 21), at(D8, 20))  # a hole of an hour, then D7 .. D8
    other = every("o", "o", at(D9, 9), at(D9, 10))  # someone else, later
    seen = first + second + other
    converge(lake, spark, {p.event_date for p in stream.batch(seen, mode=0.5)})
    check(lake, seen, all_dates(seen))
    assert len(published(lake, D7)) == 1  # the second session starts on D7

    for late in (
        every("h", "x", at(D7, 20, 20), at(D7, 20, 40)),  # fills the hole: one session
        every("h", "c", at(D8, 20, 20), at(D9, 5)),  # extends it into D9
        every("h", "d", at(D9, 5, 20), at(D9, 6)),
    ):  # and further, on D9
        seen += late
        converge(lake, spark, {p.event_date for p in stream.batch(late, mode=0.0)})
        check(lake, seen, all_dates(seen))
    assert {s[0] for s in published(lake, D6)} == {"h"}
    assert published(lake, D7) == set()
    assert published(lake, D6).pop()[4] == len([e for e in seen if e[0] == "h"])


def test_rerun_after_a_multi_day_session_is_still_a_noop_without_spark(spark, tmp_path, monkeypatch):
    lake = Lake.open(tmp_path / "lake")
    stream = SimulatedStream(lake, 3)
    kiosk = every("k", "k", at(D6, 12), at(D9, 1))
    stream.batch(kiosk, mode=0.5)
    converge(lake, spark, {D6})
    import tidemark.base.spark

    monkeypatch.setattr(tidemark.base.spark, "build_session", lambda *a, **k: pytest.fail("Spark started"))
    for day in all_dates(kiosk):
        again = run_dedup(lake, day, RULES)
        assert again.noop, day
        assert not again.published, day
        assert again.affected_dates == [], day


def test_planning_follows_sessions_touching_the_date_whatever_day_they_start():
    """needed_hi: from a session's reach, the last date whose panes can still join it."""
    d7, d8, d9 = (date.fromisoformat(d) for d in (D7, D8, D9))
    assert planning.needed_hi(d7, RULES, None) == d8
    assert planning.needed_hi(d7, RULES, at(D8, 23, 29)) == d8
    assert planning.needed_hi(d7, RULES, at(D8, 23, 30)) == d9  # exactly a gap before midnight
    assert planning.needed_hi(d7, RULES, at(D9, 5)) == d9
    version = {"event_date": date.fromisoformat(D7), "run_id": "0" * 32, "receipts": ("a",)}
    assert planning.covers(VersionRecord.holding(**version), ["a"]) is False  # no recorded reach: never trusted
    assert planning.covers(VersionRecord.holding(**version, reach=None), ["a"]) is True


# -- random long sessions, holes and bridges, random arrivals ----------------------------------------


def long_sessions(rng: random.Random, users: int = 4) -> list[tuple]:
    """Per user: a session of 50-90 hours with events 5-25 minutes apart and a few holes of 35-90
    minutes, some holes later bridged (the bridge events are part of the workload, arriving in any
    order like every other event); plus short sessions around midnights."""
    events = []
    for u in range(users):
        user, n = f"u{u}", 0
        t = at(D6, rng.randint(0, 23), rng.randint(0, 59))
        end = t + timedelta(hours=rng.uniform(50, 90))
        while t < end:
            n += 1
            events.append((user, f"{user}-{n}", t, "play"))
            if rng.random() < 0.03:
                hole = timedelta(minutes=rng.uniform(35, 90))
                if rng.random() < 0.5:
                    n += 1
                    events.append((user, f"{user}-{n}", t + hole / 2, "bridge"))
                t += hole
            else:
                t += timedelta(minutes=rng.uniform(5, 25))
        for day in (D7, D8):
            s = at(day, 23, rng.randint(0, 59))
            for _ in range(rng.randint(1, 3)):
                n += 1
                events.append((f"s{u}", f"s{u}-{n}", s, "play"))
                s += timedelta(minutes=rng.uniform(1, 28))
    return events


@pytest.mark.slow  # not in make test-fast: several dedup runs (or a real stream), tens of seconds
@pytest.mark.parametrize("seed", [2, 4])
def test_random_long_sessions_equal_batch_sessionization(spark, tmp_path, seed):
    rng = random.Random(seed)
    events = long_sessions(rng)
    lake = Lake.open(tmp_path / "lake")
    stream = SimulatedStream(lake, seed)
    batches = arrivals(rng, events, batches=6)
    seen: list[tuple] = []
    for wave in (batches[:2], batches[2:4], batches[4:]):
        notified = set()
        for deliveries in wave:
            notified |= {p.event_date for p in stream.batch(deliveries)}
            seen.extend(deliveries)
        converge(lake, spark, notified)
        check(lake, seen, all_dates(events))


# -- the real stream ---------------------------------------------------------------------------------

real_sessions = lake_session_set


def reference_sessions(landing, event_date) -> set[tuple]:
    return reference_session_set(landing, event_date, RULES.gap)


@pytest.mark.slow  # not in make test-fast: several dedup runs (or a real stream), tens of seconds
def test_real_stream_four_date_session_and_a_too_late_fragment_three_dates_later(spark, tmp_path):
    """A kiosk active from D6 12:00 to D9 02:00. Its state expires; then events from 02:20 on D9
    arrive (a too_late fragment under D9). The reruns must walk back D9 -> D8 -> D7 -> D6: before,
    D7's rerun (which only followed sessions starting on D7) never read the D9 fragment."""
    landing, lake, ckpt = str(tmp_path / "landing"), Lake.open(tmp_path / "lake"), str(tmp_path / "ckpt")
    kiosk, t, n = [], at(D6, 12), 0
    while t <= at(D9, 2):
        n += 1
        kiosk.append(event("k", f"k{n}", t.isoformat().replace("+00:00", "Z")))
        t += timedelta(minutes=20)
    land(landing, [kiosk, [event("z", "z1", f"{D9}T10:00:00Z")]])

    def stream() -> set[str]:
        notified: set[str] = set()
        run_stream(
            StreamConfig(landing, lake, ckpt, RULES, available_now=True, max_files_per_trigger=1),
            listeners=[lambda report: notified.update(p.event_date.isoformat() for p in report.partitions)],
            spark=spark,
        )
        return notified

    converge(lake, spark, stream())
    for day in (D6, D7, D8, D9):
        assert real_sessions(lake, day) == reference_sessions(landing, day), day

    land(landing, [[event("k", "late1", f"{D9}T02:20:00Z"), event("k", "late2", f"{D9}T02:40:00Z")]], start_index=2)
    notified = stream()
    assert notified == {D9}
    converge(lake, spark, notified)
    for day in (D6, D7, D8, D9):
        assert real_sessions(lake, day) == reference_sessions(landing, day), day
    (session,) = [s for s in real_sessions(lake, D6) if s[0] == "k"]
    assert {"late1", "late2"} <= session[3]
    assert table_versions.current_version(lake, as_event_date(D6)).reach.isoformat().startswith(f"{D9}T02:40")
