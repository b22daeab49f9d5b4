"""The sample landing: seeded, realistic mix of lateness, duplicates and malformed lines."""

from __future__ import annotations

import json
import os
from collections import Counter
from datetime import timedelta

from tests.reference import landed_lines, parse_ts, sessions_of_landing, valid_events
from tidemark.cli import main as cli_main
from tidemark.demo.generate import Workload, build


def test_same_seed_same_landing_other_seed_other_landing():
    a, _ = build(Workload(events=2000, users=20, seed=1))
    b, _ = build(Workload(events=2000, users=20, seed=1))
    c, _ = build(Workload(events=2000, users=20, seed=2))
    assert [d.line for d in a] == [d.line for d in b]
    assert [d.line for d in a] != [d.line for d in c]


def test_lateness_duplicates_and_malformed_lines_are_all_present():
    deliveries, counts = build(Workload(events=20_000, users=200, seed=3))
    lateness = []
    ids = Counter()
    bad = 0
    for d in deliveries:
        try:
            obj = json.loads(d.line)
            ts = parse_ts(obj["event_ts"]) if isinstance(obj, dict) and "user_id" in obj else None
        except ValueError:
            ts = None
        if ts is None:
            bad += 1
            continue
        lateness.append((d.arrival - ts).total_seconds())
        ids[obj["event_id"]] += 1
    lateness.sort()
    assert lateness[len(lateness) // 2] < 10  # most arrive within seconds
    assert sum(60 <= x < 3600 for x in lateness) > 0.05 * len(lateness)  # minutes late: flaky network
    assert sum(x >= 2 * 3600 for x in lateness) > 0.005 * len(lateness)  # hours or days: offline
    dup_share = sum(1 for n in ids.values() if n > 1) / len(ids)
    assert 0.01 < dup_share < 0.06
    assert bad == counts["malformed"] > 0
    assert counts["events"] == len(ids)


def test_cli_writes_files_in_arrival_order(tmp_path, capsys):
    landing = str(tmp_path / "landing")
    assert cli_main(["generate", "--landing", landing, "--events", "600", "--users", "10", "--files", "6"]) == 0
    summary = json.loads(capsys.readouterr().out)
    files = sorted(n for n in os.listdir(landing) if not n.startswith(("_", ".")))
    assert len(files) == summary["files"] == 6
    mtimes = [os.path.getmtime(os.path.join(landing, n)) for n in files]
    assert mtimes == sorted(mtimes)
    assert len(set(mtimes)) == 6
    assert len({e for _, e, _ in valid_events(landed_lines(landing))}) == summary["events"]
    # sessions exist and are separated by at least the gap
    assert len(sessions_of_landing(landing, timedelta(minutes=30))) >= 10


def test_cli_refuses_bad_arguments(tmp_path, capsys):
    assert cli_main(["generate", "--landing", str(tmp_path), "--start", "2026-02-30"]) == 2
    assert "invalid event_date" in capsys.readouterr().err
    assert cli_main(["generate", "--landing", str(tmp_path), "--duplicate-rate", "1.5"]) == 2
    assert "between 0 and 1" in capsys.readouterr().err
    assert cli_main(["stream", "--landing", "l", "--lake", "k", "--checkpoint", "c", "--gap", "soon"]) == 2
    assert "invalid duration" in capsys.readouterr().err
