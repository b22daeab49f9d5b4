"""An interrupted `tidemark rules migrate` says where it stopped, and running it again resumes there:
the dates before are no-ops, the rest are re-deduplicated under the new rules. A small simulated
lake (tests/lakekit.py) on the shared Spark session."""

from __future__ import annotations

import json
import random
from datetime import timedelta

import pytest

from tests.lakekit import SimulatedStream, make_events
from tidemark import cli
from tidemark.base.layout import as_event_date
from tidemark.base.logs import read_log_lines
from tidemark.deduplication import dedup, rules_migration
from tidemark.iceberg import reader
from tidemark.session import rules_record
from tidemark.session.sessions import SessionRules
from tidemark.store.lake import Lake

pytestmark = pytest.mark.spark


def test_an_interrupted_migration_says_where_it_stopped_and_a_rerun_resumes_there(spark, tmp_path, capsys):
    lake = Lake.open(tmp_path / "lake")
    SimulatedStream(lake, seed=5).batch(make_events(random.Random(5), users=3, days=3))
    dates = rules_migration.event_dates(lake)
    assert len(dates) >= 3, dates
    stop_at = dates[1]
    command = ["rules", "migrate", "--lake", str(lake), "--gap", "20m"]

    real = dedup.run_dedup

    def interrupted_at_the_second_date(lake_, event_date, *args, **kwargs):
        if str(event_date) == stop_at:
            raise KeyboardInterrupt  # Ctrl-C (or a kill: tidemark.commands.progress_bar) mid-date
        return real(lake_, event_date, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rules_migration, "run_dedup", interrupted_at_the_second_date)  # where the migration calls it
        assert cli.main(command) == 130
    out, err = capsys.readouterr()
    assert [json.loads(line)["event_date"] for line in out.splitlines()] == [dates[0]]
    assert (
        f"interrupted, stopped at {stop_at}: 1 of {len(dates)} dates are made under the new rules; "
        "run the same command again to resume there"
    ) in err
    (stopped,) = [line for line in read_log_lines(err) if line["event"].startswith("rules migration stopped")]
    assert (stopped["resume_at"], stopped["done"], stopped["left"]) == (stop_at, 1, len(dates) - 1)
    assert rules_migration.not_migrated(lake, SessionRules(gap=timedelta(minutes=20))) == dates[1:]

    assert cli.main(command) == 0
    out, err = capsys.readouterr()
    lines = [json.loads(line) for line in out.splitlines()]
    assert [(line["event_date"], line["noop"]) for line in lines[:-1]] == [(dates[0], True)] + [
        (day, False) for day in dates[1:]
    ]
    assert lines[-1]["kind"] == "migration"
    assert lines[-1]["recomputed"] == len(dates) - 1
    (resumed,) = [line for line in read_log_lines(err) if line.get("resume_at") and line["level"] == "info"]
    assert (resumed["resume_at"], resumed["done"], resumed["left"]) == (stop_at, 1, len(dates) - 1)
    new_rules = rules_record.current(lake)
    assert new_rules.rules.gap == timedelta(minutes=20)
    assert len(rules_record.history(lake)) == 1
    for day in dates:
        assert reader.current_version(lake, as_event_date(day)).rules_id == new_rules.rules_id, day
