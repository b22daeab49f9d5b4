"""`tidemark demo` end to end, as a newcomer runs it: the whole local stack, a workload landed in
waves, every notice, DAG run and corrected partition, the report and its charts, the stack down.

The final check is independent of the demo's own: every event date's current deduplicated version
(tidemark.iceberg.reader) must equal tests/reference.py's batch sessionization of every line the demo
landed. Also checked: late data corrected at least one published date (a date has several
versions), the charts and the HTML page exist, and nothing the demo started is left running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import date, timedelta
from pathlib import Path

import pytest

from tests.reference import sessions_of_landing
from tidemark.base.layout import as_event_date
from tidemark.devstack.stack import Stack, port_states
from tidemark.iceberg import reader
from tidemark.panes import receipts
from tidemark.store.lake import Lake

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]
GAP = timedelta(minutes=30)


def _key(user_id, start, end, count) -> tuple:
    from datetime import datetime, timezone

    def iso(value):
        if isinstance(value, str):
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        return value.astimezone(timezone.utc).isoformat(timespec="microseconds")

    return (user_id, iso(start), iso(end), int(count))


def test_demo_runs_the_whole_system_and_ends_equal_to_a_batch_recomputation(tmp_path):
    home = str(tmp_path / "state")
    proc = subprocess.run(
        [
            os.path.join(os.path.dirname(sys.executable), "tidemark"),
            "demo",
            "--home",
            home,
            "--waves",
            "3",
            "--pause",
            "1",  # after each wave is streamed and published: idle time, nothing below depends on it
            "--timeout",
            "900",
        ],
        capture_output=True,
        text=True,
        timeout=2300,
        # As a newcomer's `make demo` runs it: the stream's and the Connect server's warm-ups on
        # (the suite turns them off elsewhere). When the Connect warm-up ends inside one of the
        # demo's waits depends on timing: tests/test_demo_wait.py holds that case to a test.
        env={**os.environ, "TIDEMARK_STREAM_WARMUP": "1", "TIDEMARK_CONNECT_WARMUP": "1"},
    )
    stack = Stack(os.path.join(home, "demo"))
    try:
        print(proc.stdout[-12000:])
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
        settings = stack.settings()
        lake, landing = Lake.open(settings.lake), settings.landing

        # Independent final check: the current version of every date == the reference.
        expected: dict[date, set] = {}
        # The stack runs the stream with the archive on: read files left the landing for it.
        assert settings.archive
        assert any(name.startswith("received=") for name in os.listdir(settings.archive))
        for s in sessions_of_landing(landing, GAP, archive=settings.archive):
            expected.setdefault(s.event_date, set()).add(_key(s.user_id, s.session_start, s.session_end, s.event_count))
        dates = receipts.list_event_dates(lake)
        assert set(expected) <= set(dates)
        assert len(dates) >= 2
        for event_date in dates:
            got = {
                _key(r["user_id"], r["session_start"], r["session_end"], r["event_count"])
                for r in reader.to_records(reader.read_sessions(lake, as_event_date(event_date)))
            }
            assert got == expected.get(event_date, set()), event_date

        data = json.loads(Path(os.path.join(stack.home, "report", "report.json")).read_text())
        assert data["ok"]
        assert {as_event_date(c["event_date"]) for c in data["checks"]} == set(dates)
        assert any(len(versions) > 1 for versions in data["versions"].values()), "no date was ever corrected"
        assert any(r["late"] for r in data["receipts"]), "no late receipt partition"
        assert all(r["version"] for r in data["receipts"])
        for name in ("lateness.png", "corrections.png", "steps.png", "report.html"):
            path = os.path.join(stack.home, "report", name)
            assert os.path.getsize(path) > 1000, name
        assert "equals the batch recomputation" in proc.stdout

        # Both topics' notices, and the example consumer DAG's output for the corrected dates.
        assert data["notices"]["availability"]["sent"] > 0
        assert data["notices"]["availability"]["owed"] == 0
        published_versions = {(d, v["version"]) for d, versions in data["versions"].items() for v in versions}
        corrected_notices = [(n["event_date"], n["version"]) for n in data["notices"]["corrected"]]
        assert sorted(corrected_notices) == sorted(published_versions)  # exactly one per version
        assert all(n["state"] == "sent" for n in data["notices"]["corrected"])
        corrected_dates = {d for d, versions in data["versions"].items() if len(versions) > 1}
        assert corrected_dates
        assert {r["event_date"] for r in data["consumer"]} == corrected_dates
        for row in data["consumer"]:  # the DAG's metrics == the batch reference's, from the current version
            assert row["ok"]
            assert row["metrics"]["version"] == data["versions"][row["event_date"]][-1]["version"]
        assert "corrected topic" in proc.stdout
        assert "example consumer DAG" in proc.stdout

        # Airflow's partitions: every dedup run is its date's partition, one asset event per version
        # (the date as partition_key), and every date with events got consumer runs.
        partitions = {r["partition_key"]: r for r in data["partitions"]}
        assert "-" not in partitions, partitions
        assert all(r["ok"] for r in partitions.values()), partitions
        assert sorted((k, v) for k, r in partitions.items() for v in r["versions"]) == sorted(published_versions)
        assert all(partitions[d]["consumer_runs"] >= 1 for d in corrected_dates)
        assert "Airflow partitions" in proc.stdout

        # Down: no process the demo recorded is alive, no recorded port open.
        assert stack.records() == {}
        assert not any(port_states(settings).values())
    finally:
        stack.down()
