"""Hostile input (issue 18): a landing file of what real phones and pipes produce goes through the
real stream. Every line is a valid event or quarantined with a reason (counted), the quarantine
keeps every byte and every reader shows it, a phone clock in 2099 or 1970 creates no partition and
moves no watermark, and normal data after it still gets early and on-time panes."""

from __future__ import annotations

import base64
import json
import os
from datetime import date, datetime, timedelta, timezone

import pytest

from streaming_job.batch import BatchProcessor
from streaming_job.job import StreamConfig, run_stream
from streaming_job.state import STATE_MARKER, StateStore
from tests.reference import landed_lines, valid_events
from tests.streamkit import event, land_raw, panes
from tidemark.base import layout
from tidemark.base.session_rules import SessionRules
from tidemark.cli import main as cli_main
from tidemark.ingest.contract import Reason
from tidemark.ingest.quarantine import read_quarantine
from tidemark.panes import receipts
from tidemark.store.lake import Lake
from tidemark.store.locations import Root

# slow (not in make test-fast): a real stream in the shared session (module fixture): a minute and more on a loaded machine
pytestmark = [pytest.mark.spark, pytest.mark.slow]

# Event times near the real clock: the clock guard compares them with the batch's receipt time.
NOW = datetime.now(timezone.utc).replace(second=0, microsecond=0)
BASE = NOW - timedelta(hours=3)


def at(minutes: float) -> str:
    return (BASE + timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")


def line(*args, **kwargs) -> bytes:
    return event(*args, **kwargs).encode()


BIG = b'{"event_id":"big","user_id":"u9","event_type":"play","blob":"' + b"x" * (4 * 1024 * 1024) + b'"}'
VALID = [
    line("u1", "a1", at(0)),
    line("u1", "a2", at(5)) + b"\r",  # CRLF ending
    json.dumps(
        {"event_id": "s1", "user_id": "u4", "event_type": "play", "event_ts": at(1), "title": "a\u2028b"},
        ensure_ascii=False,
    ).encode(),  # raw U+2028 inside
    line("u3", "old", (BASE - timedelta(days=5)).isoformat().replace("+00:00", "Z")),  # days late: kept
]
REFUSED = {  # line -> reason class
    b"\xff\xfe" + line("u5", "x1", at(2)): Reason.NOT_UTF8,
    b'{"event_id":"n\x00","user_id":"u5","event_type":"play","event_ts":"' + at(2).encode() + b'"}': Reason.NOT_JSON,
    b"\x00": Reason.NOT_JSON,
    b"[1,2,3]": Reason.NOT_OBJECT,
    b"": Reason.EMPTY,
    b"\r": Reason.EMPTY,
    BIG: Reason.MISSING,
    line("u7", "future", "2099-01-01T00:00:00Z"): Reason.FUTURE,
    line("u8", "reset", "1970-01-01T00:00:00Z"): Reason.TOO_OLD,
    b'{"event_id":"d1","user_id":"u6","event_type":"play","event_ts":"'
    + at(3).encode()
    + b'","user_id":"u6b"}': Reason.DUPLICATE_KEY,
    line("u5", True, at(2)): Reason.NOT_TEXT,
}
HOSTILE = [VALID[0], *list(REFUSED)[:6], VALID[1], VALID[2], *list(REFUSED)[6:], VALID[3]]
AFTER = [
    [line("u1", "a3", at(10)), line("u2", "b1", at(12))],  # early panes
    [line("u5", "e1", at(120))],
]  # closes u1, u2: on_time


def receipt_us(report) -> int:
    moment = layout.parse_receipt_ts(report.receipt_ts)
    return int((moment - datetime(1970, 1, 1, tzinfo=timezone.utc)).total_seconds()) * 1_000_000 + moment.microsecond


@pytest.fixture(scope="module")
def streamed(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    landing, lake, checkpoint = (str(root / d) for d in ("landing", "lake", "checkpoint"))
    lake = Lake.open(lake)
    land_raw(landing, [HOSTILE, *AFTER])
    reports = []
    config = StreamConfig(
        landing=landing,
        lake=lake,
        checkpoint=checkpoint,
        rules=SessionRules.parse("30m", "1h", "10m"),
        available_now=True,
        max_files_per_trigger=1,
    )
    run_stream(config, listeners=[reports.append], spark=spark)
    return {
        "lake": lake,
        "landing": landing,
        "checkpoint": checkpoint,
        "config": config,
        "reports": reports,
        "panes": panes(lake),
    }


def test_every_line_is_an_event_or_quarantined_with_a_reason(streamed):
    first = streamed["reports"][0]
    assert len(HOSTILE) == 15
    assert (first.input_lines, first.valid_events, first.quarantined) == (15, 4, 11)
    rows = [r for r in read_quarantine(streamed["lake"]) if r["batch_id"] == 0]
    assert sorted(r["raw"] for r in rows) == sorted(REFUSED)  # every byte, the 4 MB line too
    assert {r["raw"]: r["reason"].split(":")[0] for r in rows} == REFUSED
    in_lake = {(r["user_id"], e) for r in streamed["panes"] for e in r["event_ids"]}
    assert in_lake == {(u, e) for u, e, _ in valid_events(landed_lines(streamed["landing"]))}
    assert {("u1", "a1"), ("u1", "a2"), ("u4", "s1"), ("u3", "old")} <= in_lake


def test_a_wrong_clock_creates_no_partition_and_never_moves_the_watermark(streamed):
    dates = receipts.list_event_dates(streamed["lake"])
    assert not [d for d in dates if d.year in (2099, 1970)]
    for report in streamed["reports"]:
        assert report.watermark_us <= receipt_us(report)
    assert streamed["reports"][0].watermark_us == int(
        (BASE + timedelta(minutes=5 - 10) - datetime(1970, 1, 1, tzinfo=timezone.utc)).total_seconds() * 1_000_000
    )


def test_normal_data_after_the_bad_clock_still_gets_early_and_on_time_panes(streamed):
    kinds = {(r["batch_id"], r["user_id"]): r["pane_kind"] for r in streamed["panes"]}
    assert kinds[(1, "u1")] == "early"
    assert kinds[(1, "u2")] == "early"
    assert kinds[(2, "u1")] == "on_time"
    assert kinds[(2, "u2")] == "on_time"
    old = [r for r in streamed["panes"] if r["user_id"] == "u3"]  # five days late: kept, in its date
    assert [r["event_date"] for r in old] == [(BASE - timedelta(days=5)).date()]


def test_every_reader_shows_any_bytes(streamed, capsys):
    assert cli_main(["quarantine", "--lake", streamed["lake"], "--format", "jsonl"]) == 0
    records = [json.loads(text) for text in capsys.readouterr().out.splitlines()]
    assert len(records) == len(REFUSED)
    decoded = sorted(
        base64.b64decode(r["raw"]) if r["raw_encoding"] == "base64" else r["raw"].encode() for r in records
    )
    assert decoded == sorted(REFUSED)
    assert {r["raw_encoding"] for r in records} == {"utf-8", "base64"}
    assert max(r["raw_bytes"] for r in records) == len(BIG)
    assert cli_main(["quarantine", "--lake", streamed["lake"], "--format", "table"]) == 0
    table = capsys.readouterr().out
    assert "\\xff\\xfe" in table
    assert "\\x00" in table
    assert f"({len(BIG)} bytes)" in table


def test_a_watermark_poisoned_before_the_guard_heals(spark, streamed):
    """State written by a stream without the guard holds a watermark in 2099: pulled back to now."""
    store = StateStore(spark, streamed["checkpoint"])
    newest = store.versions()[-1]
    marker = Root(streamed["checkpoint"]).file("state", f"batch_id={newest}", STATE_MARKER)
    meta = marker.read_json()
    meta["watermark_us"] = 4_070_908_800_000_000  # 2099-01-01
    marker.write_json_atomic(meta)
    # pulled back to the receipt time: an event of now opens a session, early. Now when the test
    # runs, not when the module was collected: in a full suite that can be most of an hour earlier,
    # which made the event late.
    now = datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")
    land_raw(streamed["landing"], [[line("u6", "f1", now)]], start_index=3)
    reports = []
    run_stream(streamed["config"], listeners=[reports.append], spark=spark)
    assert [r.batch_id for r in reports] == [3]
    assert reports[0].watermark_us <= receipt_us(reports[0])
    kinds = {r["user_id"]: r["pane_kind"] for r in panes(streamed["lake"]) if r["batch_id"] == 3}
    assert kinds["u6"] == "early"  # with the poisoned watermark: too_late


def test_an_event_inside_the_skew_cannot_push_the_watermark_past_the_receipt_time(spark, tmp_path):
    frame = spark.createDataFrame(
        [(event("u1", "a1", "2026-03-08T09:50:00Z"), "f", "2026-03-08 09:00:00")],  # 50 min ahead
        "value string, source_file string, receipt_time string",
    ).selectExpr("value", "source_file", "CAST(receipt_time AS TIMESTAMP) AS receipt_time")
    reports = []
    BatchProcessor(
        str(tmp_path / "lake"),
        str(tmp_path / "ckpt"),
        SessionRules.parse("30m", "1h", "10m"),
        listeners=[reports.append],
    )(frame, 0)
    assert reports[0].valid_events == 1
    assert receipts.iso_from_micros(reports[0].watermark_us) == "2026-03-08T09:00:00.000000Z"
    assert os.path.isdir(Lake.open(tmp_path / "lake").receipt_dir(date(2026, 3, 8), reports[0].receipt_ts))
