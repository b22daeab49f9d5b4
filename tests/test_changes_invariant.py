"""Every committed version's changeset (tidemark/iceberg/changes.py): applying version v's changeset to
the sessions of v's previous version gives exactly v's sessions (tests/changeskit.py, pyiceberg
alone), over random histories of merges, late bridging events and sessions crossing midnight,
corrected incrementally, then a `--full` run, then rules migrations to another gap (splits) and
another gap boundary; and on crafted cases: the first version of a date, a version equal to its
previous one (an empty changeset), a date whose only session moved to the day before (an empty
version)."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import pytest

from tests import changeskit
from tests.lakekit import SimulatedStream, arrivals, converge_obligations, make_events
from tidemark.base.session_rules import SessionRules
from tidemark.deduplication import rules_migration
from tidemark.iceberg import table_versions
from tidemark.store.lake import Lake

pytestmark = pytest.mark.spark


def every_date(lake) -> list[str]:
    return table_versions.dates_with_version(lake)


@pytest.mark.slow
@pytest.mark.timeout(3000)
def test_changesets_rebuild_every_version_over_corrections_a_full_run_and_migrations(spark, tmp_path):
    rng = random.Random(11)
    events = make_events(rng, users=4, days=2)
    batches = arrivals(rng, events, batches=5)
    lake = Lake.open(tmp_path / "lake")
    stream = SimulatedStream(lake, 11)
    modes = []
    for deliveries in batches[:4]:  # the first version of each date, then incremental corrections
        written = stream.batch(deliveries)
        modes += [
            r["mode"] for r in converge_obligations(lake, spark, {p.event_date for p in written}) if r["published"]
        ]
    assert "incremental" in modes, modes
    written = stream.batch(batches[4])  # a --full run
    converge_obligations(lake, spark, {p.event_date for p in written}, full=True)
    # migrations: a shorter gap splits sessions, another boundary moves some ends
    rules_migration.migrate(lake, SessionRules(gap=timedelta(minutes=12)), spark=spark)
    converge_obligations(lake, spark, set(), rules=SessionRules(gap=timedelta(minutes=12)))
    boundary = SessionRules(gap=timedelta(minutes=12), gap_boundary="merge")
    rules_migration.migrate(lake, boundary, spark=spark)
    kinds = set()
    for event_date in every_date(lake):
        for step in changeskit.check_date(lake, event_date):
            kinds |= {k for k in ("inserted", "deleted", "updated") if step[k]}
    assert kinds == {"inserted", "deleted", "updated"}, kinds


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text + "+00:00")


def test_first_version_an_unchanged_version_and_an_empty_version(spark, tmp_path):
    lake = Lake.open(tmp_path / "lake")
    stream = SimulatedStream(lake, 3)
    d6, d7 = "2026-03-06", "2026-03-07"
    # u1's only session of D7 starts 10 minutes after midnight
    late = [("u1", "a1", _at(f"{d7}T00:10:00"), "play"), ("u1", "a2", _at(f"{d7}T00:20:00"), "play")]
    before = [("u2", "b1", _at(f"{d6}T23:00:00"), "play"), ("u2", "b2", _at(f"{d6}T10:00:00"), "play")]
    stream.batch(late + before, mode=0.5)
    converge_obligations(lake, spark, {d6, d7})
    # duplicates only: a new version of D7 equal to its previous one
    stream.batch(late, mode=0.5)
    converge_obligations(lake, spark, {d7})
    # an event at 23:50 on D6 joins u1's session to D6: D7 is left without a session
    stream.batch([("u1", "a0", _at(f"{d6}T23:50:00"), "play")], mode=0.5)
    converge_obligations(lake, spark, {d6, d7})
    steps = changeskit.check_date(lake, d7)
    assert [(s["inserted"], s["deleted"], s["updated"], s["sessions"]) for s in steps][0] == (1, 0, 0, 1)
    assert (0, 0, 0, 1) in [(s["inserted"], s["deleted"], s["updated"], s["sessions"]) for s in steps]
    assert [(s["inserted"], s["deleted"], s["updated"], s["sessions"]) for s in steps][-1] == (0, 1, 0, 0)
    d6_steps = changeskit.check_date(lake, d6)
    assert d6_steps[0]["previous"] is None
    assert d6_steps[-1]["inserted"] + d6_steps[-1]["updated"] >= 1
