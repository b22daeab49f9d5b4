"""The input contract's fast path (tidemark/ingest/contract_fast.py, what the stream runs) against its
oracle, tidemark.ingest.contract.check_line: identical verdicts, reasons and kept fields on every line of
a seeded corpus of 10^5 lines (bench/contract_differential.py: valid events, every quarantine
reason, the test suite's hostile lines, random byte mutations). The benchmark runs the same
comparison over 10^7 lines."""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta, timezone

import pyarrow as pa
import pytest

from bench import contract_differential as differential
from tidemark.demo import generate
from tidemark.ingest import contract_fast
from tidemark.ingest.contract import InputRules, Reason, split_lines

REASONS = {value for name, value in vars(Reason).items() if not name.startswith("_")}


def rows(lines, received_us=differential.RECEIVED_US, rules=InputRules(), binary=pa.binary()):
    raw = pa.array(lines, binary)
    received = pa.array([received_us] * len(lines), pa.int64())
    return (
        contract_fast.verdicts(raw, received, rules).to_pylist(),
        contract_fast.reference_rows(lines, [received_us] * len(lines), rules).to_pylist(),
    )


def test_the_fast_path_agrees_with_the_contract_on_a_hundred_thousand_lines():
    lines = differential.corpus(100_000, seed=31)
    disagreements, accepted, reasons = differential.compare(lines, seed=31)
    assert not disagreements, disagreements[:5]
    # The corpus reaches every rule: each reason of the contract is the verdict on some line...
    assert set(reasons) >= REASONS, REASONS - set(reasons)
    # ...and the comparison is not vacuous: most events were decided in bulk, not by the oracle.
    assert accepted > 0.4 * reasons["event"]


def test_the_bulk_path_decides_every_event_of_a_landing(tmp_path):
    generate.generate(
        str(tmp_path),
        generate.Workload(events=3000, users=30, days=2, files=2, start=date(2026, 3, 1), seed=11),
        progress=False,
    )
    lines = [line for path in sorted(tmp_path.glob("*.jsonl")) for line in split_lines(path.read_bytes())]
    received = differential.RECEIVED_US + 365 * 86400 * 1_000_000
    fast, reference = rows(lines, received)
    assert fast == reference
    events = {i for i, row in enumerate(reference) if row["reason"] is None}
    raw = pa.array(lines, pa.binary())
    bulk = set(contract_fast.accepted_positions(raw, pa.array([received] * len(lines), pa.int64())).tolist())
    assert bulk == events
    assert len(events) > 2900


def test_lines_that_could_misalign_one_decode_call_for_many():
    # Without escapes and with balanced quotes no object runs past its line; a line holding two
    # objects, a string that would swallow the comma between two lines, a nested object split
    # over lines: each must still get its own verdict, in a batch big enough for one decode call.
    valid = [
        json.dumps(
            {"event_id": f"e{i}", "user_id": "u", "event_type": "play", "event_ts": "2026-03-07T10:00:00Z"},
            separators=(",", ":"),
        ).encode()
        for i in range(40)
    ]
    tricky = [
        b'{"a":"x}',
        b'{"}',
        b'{"c":"1"},{"d":"2"}',
        b'{"n":{"m":"1"}',
        b'{"o":"p"}}',
        b'{"q":[{}',
        b"{}]}",
        valid[0] + b"," + valid[1],
        b"{" + valid[2][1:-1] + b"}\r",
        valid[3] + b"\r\r",
    ]
    for at in range(len(tricky)):
        lines = valid[:20] + tricky[at:] + tricky[:at] + valid[20:]
        fast, reference = rows(lines)
        assert fast == reference


def test_large_binary_lines_and_other_rules_agree():
    # With guards that refuse nothing, every date of the edge lines (1900, 2100, 9999, 0001) is
    # decided by the date arithmetic alone; with no skew, the clock guard at its edge.
    lines = differential.corpus(20_000, seed=7)
    strict = InputRules(max_clock_skew=timedelta(0))
    open_ended = InputRules(
        max_clock_skew=timedelta(days=3_000_000), earliest_event_ts=datetime(1, 1, 1, tzinfo=timezone.utc)
    )
    for binary, rules in ((pa.large_binary(), InputRules()), (pa.binary(), strict), (pa.binary(), open_ended)):
        fast, reference = rows(lines, rules=rules, binary=binary)
        assert fast == reference


@pytest.mark.parametrize("lines", [[], [None], [b""], [None, b'{"event_id":"e"}']])
def test_batches_without_any_fast_line(lines):
    raw = pa.array(lines, pa.binary())
    received = pa.array([differential.RECEIVED_US] * len(lines), pa.int64())
    assert (
        contract_fast.verdicts(raw, received).to_pylist()
        == contract_fast.reference_rows(lines, [differential.RECEIVED_US] * len(lines)).to_pylist()
    )


def test_a_batch_of_no_lines_without_an_offsets_buffer():
    # Arrow lets an array of no values omit its offsets buffer (pyarrow validates this one): the
    # verdict is an empty batch, not a TypeError from reading the missing buffer.
    raw = pa.Array.from_buffers(pa.binary(), 0, [None, None, pa.py_buffer(b"")])
    verdict = contract_fast.verdicts(raw, pa.nulls(0, pa.int64()))
    assert verdict.type == contract_fast.VERDICT
    assert verdict.to_pylist() == []
