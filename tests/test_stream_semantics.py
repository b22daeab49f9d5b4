"""The stream's panes on a crafted arrival order, one file per micro-batch, checked pane by pane.

gap 30m, allowed lateness 1h, watermark delay 0 (the watermark is the max event time seen), so
every pane kind can be predicted by hand.
"""

from __future__ import annotations

import json
import os
from datetime import date

import pytest

from streaming_job.job import StreamConfig, run_stream
from tests.reference import valid_events
from tests.streamkit import event, land, panes
from tidemark.base.session_rules import SessionRules
from tidemark.cli import main as cli_main
from tidemark.store.lake import Lake

# slow (not in make test-fast): a real stream in the shared session (module fixture): a minute and more on a loaded machine
pytestmark = [pytest.mark.spark, pytest.mark.slow]

D6, D7 = date(2026, 3, 6), date(2026, 3, 7)

FILES = [
    # batch 0: u1 opens a session at 10:00 (watermark 10:10: still open)
    [event("u1", "a1", f"{D6}T10:00:00Z"), event("u1", "a2", f"{D6}T11:10:00+01:00")],
    # batch 1: u2's session crosses midnight; u3 at 12:00 on the 7th moves the watermark to
    # D7 12:00, which closes and expires u1's and u2's sessions (on_time panes)
    [event("u2", "b1", f"{D6}T23:50:00Z"), event("u2", "b2", f"{D7}T00:10:00Z"), event("u3", "c1", f"{D7}T12:00:00Z")],
    # batch 2: u1's event joins a session whose state has expired: a too_late fragment;
    # u3 gets an earlier event (still open: early) and a duplicate of c1
    [event("u1", "a3", f"{D6}T10:20:00Z"), event("u3", "c0", f"{D7}T11:50:00Z"), event("u3", "c1", f"{D7}T12:00:00Z")],
    # batch 3: malformed lines; u4 starts a session behind the watermark but within lateness
    [
        "{not json",
        '{"event_id": "x", "event_type": "play", "event_ts": "2026-03-07T10:00:00Z"}',
        event("u9", "bad-ts", "2026-03-07 10:00:00"),
        event("u4", "d1", f"{D7}T11:20:00Z"),
    ],
    # batch 4: u5 moves the watermark to 12:45: u3's window (ends 12:30) closes: on_time
    [event("u5", "e1", f"{D7}T12:45:00Z")],
    # batch 5: u3 gets an event after its on-time pane, within lateness: late pane with 3 events
    [event("u3", "c2", f"{D7}T12:10:00Z")],
]


@pytest.fixture(scope="module")
def streamed(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("semantics")
    landing, lake, checkpoint = (str(root / d) for d in ("landing", "lake", "checkpoint"))
    lake = Lake.open(lake)
    land(landing, FILES)
    reports = []
    config = StreamConfig(
        landing=landing,
        lake=lake,
        checkpoint=checkpoint,
        rules=SessionRules.parse("30m", "1h", "0s"),
        available_now=True,
        max_files_per_trigger=1,
    )
    run_stream(config, listeners=[reports.append], spark=spark)
    return {
        "lake": lake,
        "landing": landing,
        "checkpoint": checkpoint,
        "reports": reports,
        "config": config,
        "panes": panes(lake),
    }


def by_batch(rows, batch_id):
    return sorted(
        (r["user_id"], r["pane_kind"], r["event_count"], r["event_date"]) for r in rows if r["batch_id"] == batch_id
    )


def test_one_batch_per_file_in_arrival_order(streamed):
    assert [r.batch_id for r in streamed["reports"]] == list(range(len(FILES)))


def test_pane_kinds_follow_the_watermark(streamed):
    rows = streamed["panes"]
    assert by_batch(rows, 0) == [("u1", "early", 2, D6)]
    # u2 crosses midnight and stays in the event_date of its start; the watermark (D7 12:00)
    # passes both windows in this batch: on_time
    assert by_batch(rows, 1) == [("u1", "on_time", 2, D6), ("u2", "on_time", 2, D6), ("u3", "early", 1, D7)]
    assert by_batch(rows, 2) == [("u1", "too_late", 1, D6), ("u3", "early", 2, D7)]
    assert by_batch(rows, 3) == [("u4", "late", 1, D7)]
    assert by_batch(rows, 4) == [("u3", "on_time", 2, D7), ("u5", "early", 1, D7)]
    assert by_batch(rows, 5) == [("u3", "late", 3, D7)]


def test_panes_accumulate_and_keep_a_stable_session_id(streamed):
    u3 = sorted((r for r in streamed["panes"] if r["user_id"] == "u3"), key=lambda r: r["batch_id"])
    assert len({r["session_id"] for r in u3}) == 1
    assert [r["pane_index"] for r in u3] == [1, 2, 3, 4]
    assert sorted(u3[-1]["event_ids"]) == ["c0", "c1", "c2"]
    # the duplicate delivery of c1 did not count twice
    assert [r["event_count"] for r in u3] == [1, 2, 2, 3]


def test_timestamps_are_utc_and_offsets_are_honoured(streamed):
    u1 = [r for r in streamed["panes"] if r["user_id"] == "u1" and r["batch_id"] == 0][0]
    # a2 was 11:10+01:00 = 10:10Z
    assert u1["session_start"].isoformat().startswith(f"{D6}T10:00:00")
    assert u1["session_end"].isoformat().startswith(f"{D6}T10:10:00")


def test_receipt_partitions_are_one_per_batch_and_date(streamed):
    rows = streamed["panes"]
    receipts_of_batch = {}
    for r in rows:
        receipts_of_batch.setdefault(r["batch_id"], set()).add(r["receipt_ts"])
    assert all(len(v) == 1 for v in receipts_of_batch.values())
    assert len({next(iter(v)) for v in receipts_of_batch.values()}) == len(receipts_of_batch)
    report = streamed["reports"][1]
    assert sorted(p.event_date for p in report.partitions) == [D6, D7]
    assert {p.late for p in report.partitions if p.event_date == D6} == {True}


def test_every_valid_event_is_in_the_lake(streamed):
    in_lake = {(r["user_id"], e) for r in streamed["panes"] for e in r["event_ids"]}
    sent = {(user, event_id) for user, event_id, _ in valid_events(line for lines in FILES for line in lines)}
    assert len(sent) == 10
    assert in_lake == sent


def test_state_expires_with_the_watermark(streamed):
    opened = [r.open_sessions for r in streamed["reports"]]
    # after batch 1 only u3 is open (u1 and u2 expired); after batch 5 (watermark 12:45):
    # u3 (kept until 13:40), u4 (until 11:50 + 1h = 12:50) and u5
    assert opened[1] == 1
    assert opened[-1] == 3


def test_malformed_lines_are_quarantined_with_reasons(streamed, capsys):
    assert cli_main(["quarantine", "--lake", streamed["lake"], "--format", "jsonl"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    reasons = sorted(r["reason"].split(":")[0] for r in rows)
    assert reasons == [
        "event_ts is not an RFC 3339 timestamp with offset",
        "missing or empty required field",
        "not valid JSON",
    ]
    assert {os.path.basename(r["source_file"]) for r in rows} == {"file-00003.jsonl"}
    assert any(r["raw"] == "{not json" for r in rows)
    assert streamed["reports"][3].quarantined == 3


def test_a_run_with_no_new_input_writes_nothing(spark, streamed):
    before = panes(streamed["lake"])
    reports = []
    run_stream(streamed["config"], listeners=[reports.append], spark=spark)
    assert reports == []
    assert len(panes(streamed["lake"])) == len(before)
