r"""The input contract, in one place: which landed lines are events, and why the others are refused.

One implementation, plain Python, used by everything that reads landed lines: the stream runs it in
a vectorised Arrow UDF over the raw bytes of each line (streaming_job/parse.py), and the batch
reference (tidemark/demo/batch_reference.py) calls it directly, so the two cannot disagree (on
whitespace, JSON booleans, duplicate keys or U+2028). docs/input-contract.md describes the rules;
the reasons below are the only place their text lives.

A line is the bytes between two `\n` (split_lines): a `\r` before the `\n` (CRLF files) is JSON
whitespace and the raw bytes keep it; U+2028/U+2029 and a lone `\r` are not line breaks.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from functools import cached_property
from typing import Any, NamedTuple, NoReturn, cast

from tidemark.base.durations import format_duration
from tidemark.base.times import from_micros, iso_from_micros, to_micros  # noqa: F401 - iso_from_micros: callers use contract's

REQUIRED_FIELDS = ("event_id", "user_id", "event_type", "event_ts")
ID_FIELDS = ("event_id", "user_id", "event_type")

# RFC 3339 date-time; the offset is mandatory, otherwise the instant is ambiguous. ASCII digits
# only (Python's \d also matches other scripts' digits), and fullmatch (a `$` would accept a
# trailing newline).
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:([Zz])|([+-])(\d{2}):(\d{2}))", re.ASCII
)
_JSON_WHITESPACE = " \t\r\n"
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_SHOWN_CHARS = 64

# Defaults of the guards (docs/input-contract.md says why these values).
DEFAULT_MAX_CLOCK_SKEW = timedelta(hours=1)
# No mobile event predates this: earlier timestamps come from a reset device clock (1970-01-01 is
# Unix time 0, 1980-01-06 the GPS epoch). A fixed floor, not an age limit: events days or months late
# are legitimate and are kept, however late.
EARLIEST_EVENT_TS = datetime(2000, 1, 1, tzinfo=timezone.utc)


_micros_of = to_micros


@dataclass(frozen=True)
class InputRules:
    """The configurable guards of the contract."""

    max_clock_skew: timedelta = DEFAULT_MAX_CLOCK_SKEW
    earliest_event_ts: datetime = EARLIEST_EVENT_TS

    def __post_init__(self) -> None:
        """Refuse a negative clock skew."""
        if self.max_clock_skew < timedelta(0):
            raise ValueError("max clock skew must not be negative")

    @cached_property
    def max_clock_skew_us(self) -> int:
        """The clock guard's skew in microseconds."""
        span = self.max_clock_skew
        return (span.days * 86400 + span.seconds) * 1_000_000 + span.microseconds

    @cached_property
    def earliest_us(self) -> int:
        """The earliest accepted event time, in microseconds since the epoch."""
        return _micros_of(self.earliest_event_ts)

    def describe(self) -> dict[str, str]:
        """The rules as text, for logs and ledger entries."""
        return {
            "max_clock_skew": format_duration(self.max_clock_skew),
            "earliest_event_ts": iso_from_micros(self.earliest_us),
        }


class Event(NamedTuple):
    """An accepted line: the event's fields, its time in microseconds, the rest as JSON text."""

    user_id: str
    event_id: str
    event_ts_us: int
    event_type: str
    payload: str

    @property
    def event_ts(self) -> datetime:
        """The event time as an aware UTC datetime."""
        return from_micros(self.event_ts_us)


class Refused(ValueError):
    """A line that is not an event; str() is the reason stored in the quarantine."""


# -- the reasons, in one place ------------------------------------------------------------------


def _show(text: str) -> str:
    """A value quoted in a reason: at most 64 characters, non-printable ones escaped."""
    head = text[:_SHOWN_CHARS]
    return (
        head
        if head.isprintable() and head.isascii()
        else head.encode("unicode_escape", "backslashreplace").decode("ascii")
    )


class Reason:
    """The reasons a line is refused: the text the quarantine stores."""

    EMPTY = "empty line"
    NOT_UTF8 = "not valid UTF-8"
    NOT_JSON = "not valid JSON"
    NOT_OBJECT = "not a JSON object"
    DUPLICATE_KEY = "duplicate key"
    MISSING = "missing or empty required field"
    NOT_TEXT = "required field is not a string or an integer"
    NOT_UNICODE = "not valid Unicode text"
    NOT_RFC3339 = "event_ts is not an RFC 3339 timestamp with offset"
    OUT_OF_RANGE = "event_ts out of range"
    FUTURE = "event_ts later than its receipt time by more than the max clock skew"
    TOO_OLD = "event_ts before the earliest accepted time"


def _refuse(kind: str, detail: str | None = None) -> Refused:
    return Refused(kind if detail is None else f"{kind}: {detail}")


# -- lines --------------------------------------------------------------------------------------


def split_lines(data: bytes) -> list[bytes]:
    r"""The lines of a landed file, as Spark's text source (lineSep "\n") reads them."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # a final "\n" ends the last line, it does not start an empty one
    return lines


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _refuse(Reason.DUPLICATE_KEY, _show(key))
            seen.add(key)
    return obj


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


_decoder = json.JSONDecoder(object_pairs_hook=_unique_keys, parse_constant=_no_constant)


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    return {str: "string", int: "number", float: "number", list: "array", dict: "object"}[type(value)]


def _id_text(name: str, value: object) -> str:
    # JSON integers are accepted as ids (their decimal text); booleans, fractions, objects and arrays
    # are refused rather than spelled one way or another.
    if type(value) is str:  # the common case first: read_line runs once per landed line
        text = value
    elif value is None:
        raise _refuse(Reason.MISSING, name)
    elif isinstance(value, int) and not isinstance(value, bool):
        text = str(value)
    else:
        raise _refuse(Reason.NOT_TEXT, f"{name} is a JSON {_json_type(value)}")
    if not text or text.isspace():  # empty or only whitespace (Unicode whitespace, as str.isspace)
        raise _refuse(Reason.MISSING, name)
    return text


# Compact, keys sorted: copies that differ only in key order or spacing get the same payload.
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, sort_keys=True).encode


def _payload(obj: dict[str, Any]) -> str:
    """The fields besides the required ones, as compact JSON with sorted keys.

    A nested value is kept as its own compact JSON text (a string column holds it).
    """
    fields = {
        key: value if type(value) is str or value is None else _encode(value)
        for key, value in obj.items()
        if key not in _REQUIRED
    }
    if None in fields.values():
        return _encode(fields)
    # Every value is a string (the common case): the same text as _encode, spelled with the
    # encoder's own string escaping (json.encoder.encode_basestring, ensure_ascii=False), in a
    # third of the time; read_line runs once per landed line.
    strings = cast("dict[str, str]", fields)  # no None left (returned above)
    return "{" + ",".join([_quote(key) + ":" + _quote(value) for key, value in sorted(strings.items())]) + "}"


_quote = json.encoder.encode_basestring


_REQUIRED = frozenset(REQUIRED_FIELDS)


def parse_event_ts(text: object) -> int:
    """RFC 3339 with an offset -> microseconds since the epoch (UTC), digits past micros truncated."""
    if not isinstance(text, str):
        raise _refuse(Reason.NOT_RFC3339, _show(json.dumps(text)))
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise _refuse(Reason.NOT_RFC3339, _show(text))
    _, _, _, hour, minute, second, fraction, _, sign, off_h, off_m = match.groups()
    hour, minute, second = int(hour), int(minute), int(second)
    day_number = _day_number(text[:10])  # the regex anchors YYYY-MM-DD at the start
    if day_number is None or hour > 23 or minute > 59 or second > 59:
        raise _refuse(Reason.OUT_OF_RANGE, _show(text))
    offset_s = 0
    if sign is not None:
        off_h, off_m = int(off_h), int(off_m)
        if off_h > 23 or off_m > 59:
            raise _refuse(Reason.OUT_OF_RANGE, _show(text))
        offset_s = (off_h * 3600 + off_m * 60) * (1 if sign == "+" else -1)
    seconds = day_number * 86400 + hour * 3600 + minute * 60 + second - offset_s
    return seconds * 1_000_000 + (int(fraction[:6].ljust(6, "0")) if fraction else 0)


@functools.lru_cache(maxsize=4096)
def _day_number(ymd: str) -> int | None:
    """Days since 1970-01-01 of a YYYY-MM-DD text, None for a date that does not exist.

    Cached: a landing holds few distinct dates, and date() is a third of parse_event_ts's time.
    """
    try:
        return date(int(ymd[:4]), int(ymd[5:7]), int(ymd[8:10])).toordinal() - _EPOCH_ORDINAL
    except ValueError:
        return None


def read_line(raw: bytes | None, received_us: int | None, rules: InputRules = InputRules()) -> Event:
    """The event a landed line holds, or Refused with the reason it is quarantined.

    received_us: when the line was received (the stream: its micro-batch's timestamp from the
    offset log, so a replayed batch decides the same way); None skips the future-clock guard.
    """
    if raw is None:
        raise _refuse(Reason.EMPTY)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise _refuse(Reason.NOT_UTF8, f"byte 0x{raw[err.start]:02x} at offset {err.start}") from None
    if text.strip(_JSON_WHITESPACE) == "":
        raise _refuse(Reason.EMPTY)
    try:
        obj = _decoder.decode(text)
    except Refused:
        raise
    except json.JSONDecodeError as err:
        message = err.msg.removesuffix(" at")  # "Invalid control character at"
        raise _refuse(Reason.NOT_JSON, f"{message} at character {err.pos}") from None
    except (ValueError, RecursionError) as err:
        raise _refuse(Reason.NOT_JSON, _show(str(err) or type(err).__name__)) from None
    if type(obj) is not dict:
        raise _refuse(Reason.NOT_OBJECT, _json_type(obj))
    event_id = _id_text("event_id", obj.get("event_id"))
    user_id = _id_text("user_id", obj.get("user_id"))
    event_type = _id_text("event_type", obj.get("event_type"))
    event_ts = obj.get("event_ts")
    if event_ts is None or (type(event_ts) is str and (not event_ts or event_ts.isspace())):
        raise _refuse(Reason.MISSING, "event_ts")
    event_ts_us = parse_event_ts(event_ts)
    if event_ts_us < rules.earliest_us:
        raise _refuse(Reason.TOO_OLD, f"{iso_from_micros(rules.earliest_us)}: {_show(event_ts)}")
    if received_us is not None and event_ts_us > received_us + rules.max_clock_skew_us:
        raise _refuse(
            Reason.FUTURE,
            f"{rules.describe()['max_clock_skew']} after {iso_from_micros(received_us)}: {_show(event_ts)}",
        )
    event = Event(user_id, event_id, event_ts_us, event_type, _payload(obj))
    # A \\ud800 escape decodes to a lone surrogate, which no UTF-8 column can hold. Only a \\u
    # escape can make one (the UTF-8 decoder above refuses encoded surrogates), so a line without
    # one skips the check.
    if "\\u" in text:
        try:
            for value in (event.user_id, event.event_id, event.event_type, event.payload):
                value.encode("utf-8")
        except UnicodeEncodeError:
            raise _refuse(Reason.NOT_UNICODE, "a \\u escape encodes a lone surrogate") from None
    return event


def check_line(
    raw: bytes | None, received_us: int | None, rules: InputRules = InputRules()
) -> tuple[Event | None, str | None]:
    """(event, None) for an event, (None, reason) for a line to quarantine. Never raises."""
    try:
        return read_line(raw, received_us, rules), None
    except Refused as refused:
        return None, str(refused)


def read_lines(
    lines: Iterable[bytes | str], received_us: int | None, rules: InputRules = InputRules()
) -> Iterator[Event]:
    """The events among lines (bytes, or str encoded as UTF-8); refused lines are skipped."""
    for line in lines:
        event, _ = check_line(
            line.encode("utf-8", "surrogatepass") if isinstance(line, str) else line, received_us, rules
        )
        if event is not None:
            yield event


# -- copies of one event --------------------------------------------------------------------------


def event_key(event: Event) -> tuple[str, str, int]:
    """What makes an event: two lines with the same user_id, event_id and event_ts are copies of it."""
    return event.user_id, event.event_id, event.event_ts_us


def copy_order(event: Event) -> tuple[str, str]:
    """THE copy rule.

    Of an event's copies the smallest (event_type, payload) is kept (compared as UTF-8 bytes, which
    is code point order: Spark's string order too). The stream (dedup_sql/stream_input.sql) and the
    dedup (dedup_sql/dedup_events.sql) apply it in SQL.
    """
    return event.event_type, event.payload


def kept_copies(events: Iterable[Event]) -> dict[tuple[str, str, int], Event]:
    """{event_key: the kept copy} of a set of copies, whatever their order."""
    kept: dict[tuple[str, str, int], Event] = {}
    for event in events:
        key = event_key(event)
        if key not in kept or copy_order(event) < copy_order(kept[key]):
            kept[key] = event
    return kept
