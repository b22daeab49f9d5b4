"""tidemark.demo.batch_reference (what `tidemark demo` and the test suite check the lake against): every
valid event in exactly one session, and the input contract on edge cases."""

from __future__ import annotations

import json
from datetime import date, timedelta

from tidemark.demo import batch_reference
from tidemark.demo.generate import Workload, generate

GAP = timedelta(minutes=30)


def test_every_valid_event_is_in_exactly_one_session(tmp_path):
    landing = str(tmp_path / "landing")
    generate(landing, Workload(events=3000, users=30, days=3, files=12, seed=19), progress=False)
    events = set(batch_reference.valid_events(batch_reference.landed_lines(landing)))
    sessions = batch_reference.sessions_of_landing(landing, GAP)
    assert sum(s.event_count for s in sessions) == len(events)
    placed = {}
    for s in sessions:
        for user_id, event_id, ts in events:
            if user_id == s.user_id and s.session_start <= ts <= s.session_end:
                assert event_id in s.event_ids
                placed[(user_id, event_id, ts)] = placed.get((user_id, event_id, ts), 0) + 1
    assert set(placed) == events
    assert set(placed.values()) == {1}
    by_date = batch_reference.sessions_by_date(landing, GAP)
    assert len(by_date) >= 3
    assert sum(map(len, by_date.values())) == len(sessions)


def test_contract_duplicates_and_the_gap_boundary(tmp_path):
    def event(event_id, ts, user="u1"):
        return json.dumps({"event_id": event_id, "user_id": user, "event_type": "play", "event_ts": ts})

    lines = [
        event("a", "2026-03-06T23:50:00Z"),
        event("a", "2026-03-06T23:50:00Z"),  # duplicate: counted once
        event("b", "2026-03-07T01:20:00+01:00"),  # 00:20 UTC: exactly the gap later -> new session
        event("c", "2026-03-07T00:49:59.9999999Z"),  # 7 fraction digits, truncated; under the gap
        event("d", "2026-03-07T00:30:00"),  # no offset: not an event
        '{"event_id": "e", "user_id": "u1"',  # truncated JSON
        json.dumps(["not", "an", "object"]),
        event("", "2026-03-07T00:30:00Z"),  # empty event_id
    ]
    (tmp_path / "f.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "_manifest.json").write_text("{}")  # not data
    got = batch_reference.sessionize(batch_reference.valid_events(batch_reference.landed_lines(str(tmp_path))), GAP)
    assert [(s.event_date, s.event_count, s.event_ids) for s in got] == [
        (date(2026, 3, 6), 1, frozenset("a")),
        (date(2026, 3, 7), 2, frozenset("bc")),
    ]
    assert got[1].session_end.isoformat() == "2026-03-07T00:49:59.999999+00:00"


def test_the_reference_reads_the_archive_the_stream_moved_read_files_to(tmp_path):
    """`tidemark stream --archive` moves read files to <archive>/received=D/<path>: the reference of
    the landing and the archive is the reference of everything landed; set-aside files are not input."""
    import os
    import shutil

    from tidemark.ingest import landing as landing_files

    landing, archive = str(tmp_path / "landing"), str(tmp_path / "archive")
    generate(landing, Workload(events=600, users=10, days=2, files=6, seed=3), progress=False)
    before = batch_reference.sessions_by_date(landing, GAP)
    landed = landing_files.list_landing(landing)
    moved = sorted(f.path for f in landed if f.verdict == landing_files.INPUT)[::2]
    for path in moved:
        target = os.path.join(archive, "received=2026-03-07", path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.move(os.path.join(landing, path), target)
    # a replaced file set aside by the stream (its new content is in the quarantine): not input
    os.makedirs(os.path.join(archive, "_replaced", "received=2026-03-07"))
    with open(os.path.join(archive, "_replaced", "received=2026-03-07", "x.jsonl"), "w") as handle:
        handle.write(json.dumps({"user_id": "u-x", "event_id": "x", "event_ts": "2026-03-07T10:00:00Z"}) + "\n")
    assert moved
    assert batch_reference.sessions_by_date(landing, GAP) != before
    assert batch_reference.sessions_by_date(landing, GAP, archive=archive) == before
    paths = [original for _, _, original, _ in batch_reference.input_files(landing, archive)]
    # each file once, by its path in the landing
    assert len(paths) == len(set(paths))
    assert set(moved) <= set(paths)
