"""Issue 11 point 8: the stream and the batch reference read landed lines with one implementation of
the input contract. The same hostile lines, landed once, go through the real stream and through the
reference; both must find the same events (every field) and refuse the same lines for the same
reasons. Before, the stream's Spark SQL and the reference's Python disagreed on whitespace (trim
strips spaces only), JSON booleans ("true" vs "True"), duplicate keys and U+2028 (a line break for
str.splitlines, not for Spark)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from streaming_job.job import StreamConfig, run_stream
from tests.streamkit import land_raw, panes
from tidemark.base.session_rules import SessionRules
from tidemark.demo import batch_reference
from tidemark.ingest import contract
from tidemark.ingest.quarantine import read_quarantine
from tidemark.store.lake import Lake

# slow (not in make test-fast): a real stream over the hostile lines (module fixture), tens of seconds
pytestmark = [pytest.mark.spark, pytest.mark.slow]


def ev(event_id, user="u1", ts="2026-03-07T10:00:00Z", event_type="play", **extra) -> bytes:
    return json.dumps(
        {"event_id": event_id, "user_id": user, "event_type": event_type, "event_ts": ts, **extra}, ensure_ascii=False
    ).encode()


LINES = [
    ev("plain"),
    ev("crlf") + b"\r",
    ev("ls-payload", title="a\u2028b\u2029c"),  # raw U+2028/9 inside a string
    ev("ls-user", user="a\u2028b"),
    ev(42),  # integer id
    ev("bools", flag=True, off=False, none=None, n=1.50),
    ev("spaced", user=" u1 "),  # another user than "u1"
    ev("lower", ts="2026-03-07t10:01:00z"),
    ev("space-sep", ts="2026-03-07 10:02:00+05:30"),
    ev("nanos", ts="2026-03-07T10:03:00.123456789Z"),
    ev("nested", x={"b": [1, {"d": 1, "c": 2}], "a": "é"}),
    b'{"event_id":"esc","user_id":"\\u00e9","event_type":"play","event_ts":"2026-03-07T10:04:00Z"}',
    b'  {"event_id":"pad","user_id":"u1","event_type":"play","event_ts":"2026-03-07T10:05:00Z"}\t ',
    ev("nul\x00"),  # an escaped NUL (\u0000) is text
    # refused
    ev(True),
    ev("sp", user="   "),
    ev("tab", user="\t"),
    ev("nbsp", user="\u00a0"),
    ev("ls-only", user="\u2028"),
    b'{"event_id":"dup","user_id":"u1","user_id":"u2","event_type":"play","event_ts":"2026-03-07T10:00:00Z"}',
    b'{"event_id":"dup2","user_id":"u1","event_type":"play","event_ts":"2026-03-07T10:00:00Z","p":{"k":1,"k":2}}',
    b"\xff\xfe" + ev("bom16"),
    b"\xef\xbb\xbf" + ev("bom8"),
    b"nul\x00",
    b"",
    b"\r",
    b"\t",
    b"[1]",
    b'{"event_id":"nan","user_id":"u1","event_type":"play","event_ts":"2026-03-07T10:00:00Z","v":NaN}',
    b'{"event_id":"sur","user_id":"\\ud800","event_type":"play","event_ts":"2026-03-07T10:00:00Z"}',
    ev("nl-ts", ts="2026-03-07T10:00:00Z\n"),
    ev("frac", user=1.5),
    ev("dot", ts="2026-03-07T10:00:00.Z"),
    ev("future", ts="2099-01-01T00:00:00Z"),
    ev("reset", ts="1970-01-01T00:00:00Z"),
    ev("notz", ts="2026-03-07T10:00:00"),
    ev("leap", ts="2026-03-07T23:59:60Z"),
    ev("obj-type", event_type={"a": 1}),
    ev("ts-num", ts=1772877600),
]


@pytest.fixture(scope="module")
def both(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("shared")
    landing, lake, checkpoint = (str(root / d) for d in ("landing", "lake", "checkpoint"))
    lake = Lake.open(lake)
    land_raw(landing, [LINES])
    reports = []
    run_stream(
        StreamConfig(
            landing=landing,
            lake=lake,
            checkpoint=checkpoint,
            rules=SessionRules.parse("30m", "1h", "0s"),
            available_now=True,
        ),
        listeners=[reports.append],
        spark=spark,
    )
    now = int(datetime.now(timezone.utc).timestamp() * 1_000_000)
    lines = list(batch_reference.landed_lines(landing))
    return {"reports": reports, "lake": lake, "lines": lines, "now": now}


def stream_events(lake) -> set[tuple]:
    out = set()
    for row in panes(lake):
        for e in row["events"]:
            ts = e["event_ts"]
            out.add(
                (
                    row["user_id"],
                    e["event_id"],
                    contract.parse_event_ts(ts.isoformat().replace("+00:00", "Z")),
                    e["event_type"],
                    e["payload"],
                )
            )
    return out


def test_the_reference_reads_the_lines_the_stream_reads(both):
    assert both["lines"] == LINES
    assert both["reports"][0].input_lines == len(LINES)


def test_both_find_the_same_events_field_by_field(both):
    reference = {tuple(e) for e in contract.read_lines(both["lines"], both["now"])}
    assert len(reference) == 14
    assert stream_events(both["lake"]) == reference
    assert {(u, e) for u, e, _ in batch_reference.valid_events(both["lines"])} == {(u, e) for u, e, *_ in reference}


def test_both_refuse_the_same_lines_for_the_same_reasons(both):
    reference = {}
    for line in both["lines"]:
        event, reason = contract.check_line(line, both["now"])
        if event is None:
            reference[line] = reason.split(":")[0]
    stream = {row["raw"]: row["reason"].split(":")[0] for row in read_quarantine(both["lake"])}
    assert len(reference) == len(LINES) - 14
    assert stream == reference
