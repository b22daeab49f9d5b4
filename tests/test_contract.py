"""tidemark.ingest.contract, the one implementation of the input contract: its guards and their edges."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from tidemark.ingest.contract import InputRules, Reason, check_line, parse_event_ts, split_lines

RECEIPT_US = parse_event_ts("2026-03-08T09:00:00Z")


def line(ts, **extra) -> bytes:
    return json.dumps({"event_id": "e", "user_id": "u", "event_type": "play", "event_ts": ts, **extra}).encode()


def reason(raw: bytes, rules=InputRules(), received=RECEIPT_US) -> str | None:
    return check_line(raw, received, rules)[1]


def test_the_clock_guard_refuses_events_later_than_receipt_plus_the_skew():
    assert reason(line("2026-03-08T10:00:00Z")) is None  # exactly the default 1h
    assert reason(line("2026-03-08T10:00:00.000001Z")).startswith(Reason.FUTURE + ": 1h after ")
    assert reason(line("2099-01-01T00:00:00Z")).startswith(Reason.FUTURE)
    wide = InputRules(max_clock_skew=timedelta(days=2))
    assert reason(line("2026-03-09T10:00:00Z"), wide) is None
    # no receipt time (a caller that has none): the future guard cannot apply
    assert reason(line("2099-01-01T00:00:00Z"), received=None) is None


def test_a_reset_clock_is_refused_but_days_and_months_late_events_are_kept():
    assert (
        reason(line("1970-01-01T00:00:00Z")) == f"{Reason.TOO_OLD}: 2000-01-01T00:00:00.000000Z: 1970-01-01T00:00:00Z"
    )
    assert reason(line("1999-12-31T23:59:59.999999Z")).startswith(Reason.TOO_OLD)
    assert reason(line("2000-01-01T00:00:00Z")) is None
    assert reason(line("2026-03-01T09:00:00Z")) is None  # a week late
    assert reason(line("2025-09-08T09:00:00Z")) is None  # half a year late


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"", "empty line"),
        (b"\r", "empty line"),  # blank line of a CRLF file
        (b" \t ", "empty line"),
        (b"\xff\xfe{}", "not valid UTF-8: byte 0xff at offset 0"),
        (b"\x00", "not valid JSON: Expecting value at character 0"),
        (b'{"event_id":"a\x00"}', "not valid JSON: Invalid control character at character 14"),
        (b"[1,2]", "not a JSON object: array"),
        (b'"text"', "not a JSON object: string"),
        (b"[" * 100_000, None),  # nested too deeply
        (b'{"v":NaN}', "not valid JSON: NaN is not JSON"),
        (b'{"event_id":"a","event_id":"b"}', "duplicate key: event_id"),
        (b'{"x":{"k":1,"k":2}}', "duplicate key: k"),
        (line("2026-03-07T10:00:00Z", event_id=True), f"{Reason.NOT_TEXT}: event_id is a JSON boolean"),
        (line("2026-03-07T10:00:00Z", user_id=1.5), f"{Reason.NOT_TEXT}: user_id is a JSON number"),
        (line("2026-03-07T10:00:00Z", user_id=["u"]), f"{Reason.NOT_TEXT}: user_id is a JSON array"),
        (line("2026-03-07T10:00:00Z", user_id=None), "missing or empty required field: user_id"),
        (line("2026-03-07T10:00:00Z", user_id="\u2028\t\u00a0"), "missing or empty required field: user_id"),
        (
            line("2026-03-07T10:00:00Z", user_id="\ud800"),
            f"{Reason.NOT_UNICODE}: a \\u escape encodes a lone surrogate",
        ),
        (line(1772874000), f"{Reason.NOT_RFC3339}: 1772874000"),
        (line("2026-03-07T10:00:00Z\n"), f"{Reason.NOT_RFC3339}: 2026-03-07T10:00:00Z\\n"),
        (line("２０２６-03-07T10:00:00Z"), None),  # non-ASCII digits
        (line("2026-03-07T24:00:00Z"), f"{Reason.OUT_OF_RANGE}: 2026-03-07T24:00:00Z"),
        (line("2026-02-29T10:00:00Z"), f"{Reason.OUT_OF_RANGE}: 2026-02-29T10:00:00Z"),
        (line("2026-03-07T10:00:00+24:00"), f"{Reason.OUT_OF_RANGE}: 2026-03-07T10:00:00+24:00"),
    ],
)
def test_each_hostile_line_gets_its_reason(raw, expected):
    got = reason(raw)
    assert got is not None
    if expected is None:
        assert got.split(":")[0] in (Reason.NOT_JSON, Reason.NOT_RFC3339)
    else:
        assert got == expected


def test_what_an_event_is():
    event, why = check_line(
        line("2026-03-07t10:00:00.1234567+01:00", event_id=7, n=True, z={"b": 1, "a": None}, s="\u2028"), RECEIPT_US
    )
    assert why is None
    assert (event.user_id, event.event_id, event.event_type) == ("u", "7", "play")
    assert event.event_ts_us == parse_event_ts("2026-03-07T09:00:00.123456Z")  # offset applied, truncated
    # the other fields: keys sorted, strings as they are, other values as compact JSON text
    assert event.payload == '{"n":"true","s":"\u2028","z":"{\\"a\\":null,\\"b\\":1}"}'
    # values are kept as they are: whitespace around an id is part of it
    assert check_line(line("2026-03-07T10:00:00Z", user_id=" u "), RECEIPT_US)[0].user_id == " u "
    # CRLF: the \r is JSON whitespace
    assert check_line(line("2026-03-07T10:00:00Z") + b"\r", RECEIPT_US)[1] is None


def test_lines_are_split_on_newline_only():
    data = b'{"a":1}\r\n\n{"s":"x\xe2\x80\xa8y"}\nlone\rcr\nlast'
    assert split_lines(data) == [b'{"a":1}\r', b"", b'{"s":"x\xe2\x80\xa8y"}', b"lone\rcr", b"last"]
    assert split_lines(b"a\n") == [b"a"]
    assert split_lines(b"") == []


def test_the_payload_is_the_json_encoding_of_the_other_fields_whatever_their_text():
    # read_line spells an all-string payload itself (the common case, for speed); it must be the
    # very text json gives, for any keys and values: quotes, backslashes, control characters,
    # non-ASCII, U+2028, astral characters, empty strings; and with a null among them.
    import random

    alphabet = [
        "a",
        "Z",
        "~",
        '"',
        "\\",
        "/",
        "\x00",
        "\x1f",
        "\x7f",
        "\n",
        "é",
        "e\u0301",
        "\u2028",
        "\U0001f600",
        " ",
        "",
    ]
    rng = random.Random(14)
    for case in range(300):
        fields = {
            "".join(rng.choices(alphabet, k=rng.randrange(4))): "".join(rng.choices(alphabet, k=rng.randrange(6)))
            for _ in range(rng.randrange(5))
        }
        fields = {k: v for k, v in fields.items() if k not in ("event_id", "user_id", "event_type", "event_ts")}
        if case % 3 == 0 and fields:
            fields[next(iter(fields))] = None
        raw = json.dumps(
            {"event_id": "e", "user_id": "u", "event_type": "play", "event_ts": "2026-03-07T10:00:00Z", **fields},
            ensure_ascii=case % 2 == 0,
        ).encode()
        event, why = check_line(raw, RECEIPT_US)
        assert why is None, (raw, why)
        assert event.payload == json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False), raw
