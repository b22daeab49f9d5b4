"""The example changes consumer (tidemark/products/user_totals.py, dags/example_changes_consumer.py):
per-user totals kept only from changesets equal a recomputation from every date's current sessions,
after many corrections (sessions added, removed, changed, a date emptied, unchanged versions) whose
asset events arrive twice and out of order, and after a consumer killed before its write."""

from __future__ import annotations

import random
from datetime import date

import pytest

from tests import changeskit
from tests.icebergkit import commit_recording, receipt
from tidemark.base import layout
from tidemark.products import user_totals
from tidemark.store.lake import Lake
from tidemark.store.locations import File

DATES = ("2026-03-09", "2026-03-10", "2026-03-11")  # as the state's cursor keys them


def _correct(rng: random.Random, sessions: dict) -> dict:
    out = {}
    for sid, (end, count) in sessions.items():
        fate = rng.random()
        if fate < 0.15:
            continue  # merged into another session
        out[sid] = (end + rng.randrange(1, 30), count + 1) if fate < 0.45 else (end, count)
    for _ in range(rng.randrange(0, 4)):
        out[f"{rng.randrange(6)}-{rng.randrange(1000)}"] = (rng.randrange(1, 90), rng.randrange(1, 5))
    if rng.random() < 0.08:
        return {}  # every session of the date moved to the day before
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_totals_from_changesets_equal_the_recomputation(tmp_path, monkeypatch, seed):
    rng = random.Random(seed)
    lake = Lake.open(tmp_path / "lake")
    out = user_totals.default_root(lake)
    sessions = {d: {} for d in DATES}
    versions: dict[str, object] = {d: None for d in DATES}
    receipts = {d: [] for d in DATES}
    events = []  # (event_date, version) of every committed version: its asset event
    owed: list[tuple] = []
    killed = False

    def deliver(day: str) -> None:
        nonlocal killed
        cursor = user_totals.load_state(out)["cursor"].get(day)
        if not killed and len(events) > 9 and user_totals.pending(lake, layout.as_event_date(day), cursor):
            killed = True
            # a consumer dying at its write: nothing applied, the retried task applies it all once
            before = user_totals.load_state(out)
            with monkeypatch.context() as patched:
                patched.setattr(File, "write_json_atomic", _dies)
                with pytest.raises(SystemExit):
                    user_totals.apply(lake, layout.as_event_date(day), out)
            assert user_totals.load_state(out) == before
        user_totals.apply(lake, layout.as_event_date(day), out)

    for step in range(18):
        day = rng.choice(DATES)
        sessions[day] = _correct(rng, sessions[day]) if step % 5 != 4 else dict(sessions[day])  # some unchanged
        receipts[day].append(receipt(1 + step // 60, step % 60))
        marker = changeskit.prepared_with_changes(lake, receipts[day], sessions[day], versions[day], event_date=day)
        versions[day] = commit_recording(lake, marker).current
        events.append((day, versions[day].version))
        owed.append(events[-1])
        # deliveries lag and reorder: a random owed event (a later version's before an earlier
        # one's), sometimes one already delivered again
        for _ in range(rng.randrange(0, 3)):
            if owed:
                deliver(owed.pop(rng.randrange(len(owed)))[0])
            if rng.random() < 0.3:
                deliver(rng.choice(events)[0])
    rng.shuffle(owed)
    for day, _version in owed:
        deliver(day)
    assert killed
    state = user_totals.load_state(out)
    assert state["totals"] == user_totals.recompute(lake)
    applied = {d: [v for day, v in events if day == d and changeskit.changes_of(lake, d).get(v)] for d in DATES}
    assert state["cursor"] == {d: max(vs) for d, vs in applied.items() if vs}
    for day in DATES:  # everything is checked by the invariant too
        changeskit.check_date(lake, day)
    # applying again changes nothing
    assert all(user_totals.apply(lake, layout.as_event_date(d), out)["versions"] == 0 for d in DATES)
    assert user_totals.load_state(out) == state


def _dies(*_args, **_kwargs):
    raise SystemExit(9)


def test_a_date_whose_history_started_before_changesets_is_refused(tmp_path):
    from tests.icebergkit import version_with

    lake = Lake.open(tmp_path / "lake")
    old = version_with(lake, [receipt(1)], {"a": (5, 1)})  # an older tidemark's version: no changeset
    marker = changeskit.prepared_with_changes(lake, [receipt(1), receipt(2)], {"a": (6, 2)}, old)
    commit_recording(lake, marker)
    with pytest.raises(user_totals.NeedsBootstrap):
        user_totals.apply(lake, date(2026, 3, 10), user_totals.default_root(lake))
