r"""The input contract's fast path.

A whole batch of landed lines at once, with tidemark.ingest.contract as the oracle for every line it
does not accept.

tidemark/ingest/contract.py stays the specification (and the batch reference's implementation); this
module only ever *accepts* lines, and only lines whose every rule it can decide in bulk: a flat
JSON object of string values, no backslash anywhere in the line, the four required fields present,
ids with a non-whitespace character, `event_ts` of the contract's own RFC 3339 pattern, a date that
exists, times and offsets in range, within both clock guards. Every other line (refused lines
included, so every reason's text comes from contract.py) goes to `contract.check_line` one by one.
tests/test_contract_differential.py holds the two to identical verdicts, reasons and fields.

Why each restriction makes the fast answer the reference's answer:
- no backslash: no JSON escape, so no lone surrogate, no `\"` inside a string, and every string's
  payload spelling is its raw text (json's encode_basestring changes nothing without `"`, `\` or a
  control character, and raw control characters are not valid JSON);
- msgspec's decoder refuses invalid UTF-8, control characters, NaN and trailing text like
  json's, and `dict[str, str]` refuses every non-string value (ints, null, nesting: to the
  reference);
- duplicate keys: msgspec keeps the last, the contract refuses the line; without escapes every `"`
  delimits a string, so a flat object of n distinct keys has exactly 4n of them.

Per line, only msgspec's decode (one call for many lines) and encode run in Python; the field rules
are Arrow compute kernels and numpy over the batch. BENCHMARKS.md section 1 has the costs: about
1.9 us of CPU per landed line against 7.9-12 us for check_line.
"""

from __future__ import annotations

import sys
from typing import Any, cast

import msgspec
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from tidemark.ingest import contract
from tidemark.ingest.contract import InputRules, check_line

VERDICT = pa.struct(
    [
        ("reason", pa.string()),
        ("user_id", pa.string()),
        ("event_id", pa.string()),
        ("event_type", pa.string()),
        ("event_ts_us", pa.int64()),
        ("payload", pa.string()),
    ]
)
_REFUSED = (None, None, None, None, None)

Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]

_decode = msgspec.json.Decoder(dict[str, str]).decode
_encode = msgspec.json.Encoder(order="sorted").encode


# contract's own pattern, anchored as re.fullmatch anchors it: RE2's `$` is the end of the text
# (no multi-line mode) and its `\d` is ASCII [0-9], as re.ASCII makes Python's.
_TS_PATTERN = "^(?:" + contract._RFC3339.pattern + ")$"

# contract's "empty or only whitespace" is str.isspace; a field is certainly not that if it has a
# character outside str.isspace's set, taken from Python itself (not restated).
_SPACES = [c for c in map(chr, range(sys.maxunicode + 1)) if c.isspace()]
_HAS_NON_SPACE = "[^" + "".join(f"\\x{{{ord(c):x}}}" for c in _SPACES) + "]"

_DAYS_BEFORE_MONTH = np.array([0, 0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334], dtype=np.int64)
_DAYS_IN_MONTH = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], dtype=np.int64)
_DECODE_IN_ONE_CALL = 16  # below this many lines, a failed batch decode is retried line by line


def _numpy(array: pa.Array[Any]) -> npt.NDArray[Any]:
    return array.to_numpy(zero_copy_only=False)


def _bools(array: pa.BooleanArray) -> Bools:
    """A boolean array as numpy, null read as False."""
    return _numpy(array.fill_null(False))


def _buffers(array: pa.BinaryArray | pa.StringArray) -> tuple[Ints, npt.NDArray[np.uint8]]:
    """(offsets of each value's bytes, the data bytes) of a string or binary array, as numpy views."""
    large = pa.types.is_large_binary(array.type) or pa.types.is_large_string(array.type)
    _, offsets_buffer, data_buffer = array.buffers()
    # numpy's stubs take no pyarrow Buffer: a memoryview of it is the same zero-copy view.
    if offsets_buffer is None:  # Arrow's format lets an array of no values omit its offsets
        offsets = np.zeros(len(array) + 1, np.int64)
    else:
        all_offsets = np.frombuffer(memoryview(offsets_buffer), np.int64 if large else np.int32)
        offsets = all_offsets[array.offset : array.offset + len(array) + 1].astype(np.int64)
    data = np.frombuffer(memoryview(data_buffer), np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    return offsets, data


def _event_ts_us(event_ts: pa.StringArray) -> tuple[Ints, Bools]:
    """(microseconds since the epoch, decided) per event_ts (null: undecided).

    `decided` is False where the text does not match contract's pattern or its date, time or offset is
    out of range (the reference then says which).

    A text that matches the pattern is ASCII with its fields at fixed places (YYYY-MM-DDTHH:MM:SS,
    then an optional fraction, then Z or +HH:MM at the end), so the digits are read straight from
    the Arrow data buffer, in numpy, for the whole batch.
    """
    n = len(event_ts)
    matched = _bools(pc.match_substring_regex(event_ts, _TS_PATTERN))
    offsets, data = _buffers(event_ts)
    if not len(data):
        data = np.zeros(1, np.uint8)
    start, end = offsets[:-1], offsets[1:]
    start = np.where(matched, start, 0)  # unmatched rows read harmless bytes, then are undecided
    end = np.where(matched, end, 0)
    top = len(data) - 1

    def byte(at: Ints) -> Ints:
        return data[np.clip(at, 0, top)].astype(np.int64)

    def digits(at: Ints, count: int) -> Ints:
        value = np.zeros(n, np.int64)
        for k in range(count):
            value = value * 10 + byte(at + k) - 48
        return value

    year, month, day = digits(start, 4), digits(start + 5, 2), digits(start + 8, 2)
    hour, minute, second = digits(start + 11, 2), digits(start + 14, 2), digits(start + 17, 2)
    last = byte(end - 1)
    zulu = (last == ord("Z")) | (last == ord("z"))
    off_h = np.where(zulu, 0, digits(end - 5, 2))
    off_m = np.where(zulu, 0, digits(end - 2, 2))
    sign = np.where(byte(end - 6) == ord("-"), -1, 1)
    fraction_end = np.where(zulu, end - 1, end - 6)  # the fraction's digits: start + 20 up to here
    fraction = np.zeros(n, np.int64)
    for k in range(6):  # digits past microseconds are truncated
        place = start + 20 + k
        fraction = fraction * 10 + np.where(place < fraction_end, byte(place) - 48, 0)
    leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
    month_index = np.clip(month, 0, 12)
    in_month = _DAYS_IN_MONTH[month_index] + (leap & (month == 2))
    decided = (
        matched
        & (year >= 1)
        & (month >= 1)
        & (month <= 12)
        & (day >= 1)
        & (day <= in_month)
        & (hour <= 23)
        & (minute <= 59)
        & (second <= 59)
        & (off_h <= 23)
        & (off_m <= 59)
    )
    # Days since 1970-01-01 of a proleptic Gregorian date (what date.toordinal counts).
    y = year - 1
    ordinal = y * 365 + y // 4 - y // 100 + y // 400 + _DAYS_BEFORE_MONTH[month_index] + (leap & (month > 2)) + day
    seconds = (
        (ordinal - contract._EPOCH_ORDINAL) * 86400
        + hour * 3600
        + minute * 60
        + second
        - sign * (off_h * 3600 + off_m * 60)
    )
    return seconds * 1_000_000 + fraction, decided


_decode_many = msgspec.json.Decoder(list[dict[str, str]]).decode


def _decode_each(lines: list[bytes]) -> list[dict[str, str] | None]:
    """Each line as msgspec reads it, a flat object of strings; None where msgspec refuses it.

    One decode call for many lines (a JSON array of them) costs less than one per line; a batch
    that fails (a line msgspec refuses, or a line of two objects) is split in halves until the
    lines at fault are found and read alone.
    """
    if not lines:
        return []
    if len(lines) > _DECODE_IN_ONE_CALL:
        try:
            objects: list[dict[str, str]] | None = _decode_many(b"[" + b",".join(lines) + b"]")
        except Exception:  # noqa: BLE001 - a line msgspec refuses: find it
            objects = None
        if objects is not None and len(objects) == len(lines):  # one element per line (_accepted)
            return list[dict[str, str] | None](objects)
        half = len(lines) // 2
        return _decode_each(lines[:half]) + _decode_each(lines[half:])
    out: list[dict[str, str] | None] = []
    for line in lines:
        try:
            out.append(_decode(line))
        except Exception:  # noqa: BLE001 - whatever msgspec refuses, the reference decides
            out.append(None)
    return out


def _per_line_count(raw: pa.BinaryArray, byte: int) -> Ints:
    """How many times `byte` occurs in each line, from the Arrow buffers.

    Numpy, no per-line Python: the byte's places in the data, counted between each line's offsets.
    """
    offsets, data = _buffers(raw)
    places = np.flatnonzero(data == byte)
    return np.diff(np.searchsorted(places, offsets))


def _accepted(
    raw: pa.BinaryArray, received_us: Ints, has_received: Bools, rules: InputRules
) -> tuple[Ints, list[pa.Array[Any]] | None]:
    """The lines the fast path accepts: (their positions, the verdict's columns for them)."""
    # Candidates for one decode call over many lines (a JSON array of them): a line that starts with
    # `{` and ends with `}` (or `}\r`, CRLF), has no backslash and an even number of `"`. Then every
    # `"` delimits a string and a line ends outside one, and a flat object of strings cannot run on
    # past its line's closing brace: each line is one or more whole elements of the array, so the
    # array has exactly one element per line or the lines are read one by one (_decode_each).
    quotes = _per_line_count(raw, ord('"'))
    braces = pc.and_(pc.starts_with(raw, "{"), pc.or_(pc.ends_with(raw, "}"), pc.ends_with(raw, "}\r")))
    candidate = _bools(braces)
    candidate &= (_per_line_count(raw, ord("\\")) == 0) & (quotes % 2 == 0)
    positions = np.flatnonzero(candidate)
    if not len(positions):
        return positions, None
    lines = raw.take(pa.array(positions, pa.int64()))
    # a null line fails the brace test (null read as False), so no candidate is null
    found = _decode_each(cast("list[bytes]", lines.to_pylist()))
    decoded = np.fromiter((obj is not None for obj in found), bool, len(found))
    objects = [obj if obj is not None else {} for obj in found]
    keys = np.fromiter(map(len, objects), np.int64, len(objects))
    user_ids, event_ids, event_types, event_tss = (
        pa.array([obj.pop(name, None) for obj in objects], pa.string())
        for name in ("user_id", "event_id", "event_type", "event_ts")
    )
    payloads = pa.array(list(map(_encode, objects)), pa.binary())
    ok = decoded
    for column in (user_ids, event_ids, event_types):  # present (not null) and not only whitespace
        ok &= _bools(pc.match_substring_regex(column, _HAS_NON_SPACE))
    # Duplicate keys: no backslash, so every `"` delimits a string; 4 per distinct key otherwise.
    ok &= quotes[positions] == 4 * keys
    ts_us, decided = _event_ts_us(event_tss)
    ok &= decided & (ts_us >= rules.earliest_us)
    ok &= ~has_received[positions] | (ts_us <= received_us[positions] + rules.max_clock_skew_us)
    keep = pa.array(ok)
    columns: list[pa.Array[Any]] = [
        *(c.filter(keep) for c in (user_ids, event_ids, event_types)),
        pa.array(ts_us[ok], pa.int64()),
        payloads.filter(keep).cast(pa.string()),
    ]
    return positions[ok], columns


def _received(received_us: pa.Array[Any]) -> tuple[Ints, Bools]:
    """(receipt time per line, 0 where none; whether the line has one)."""
    return _numpy(received_us.cast(pa.int64()).fill_null(0)), _numpy(received_us.is_valid())


def accepted_positions(raw: pa.BinaryArray, received_us: pa.Array[Any], rules: InputRules = InputRules()) -> Ints:
    """The positions of the lines the fast path decides itself (the others go to check_line).

    For the tests (the bulk path must take the common lines) and the benchmark.
    """
    return _accepted(raw, *_received(received_us), rules)[0]


def verdicts(raw: pa.BinaryArray, received_us: pa.Array[Any], rules: InputRules = InputRules()) -> pa.StructArray:
    """The contract's verdict on every line of a batch.

    `raw` holds the lines' bytes, `received_us` the clock guard's now per line (null skips it). The
    verdict's fields: reason (null for an event), user_id, event_id, event_type, event_ts_us,
    payload; the same values `contract.check_line` gives, line by line.
    """
    n = len(raw)
    received, has_received = _received(received_us)
    fast_at, fast = _accepted(raw, received, has_received, rules)
    undecided = np.ones(n, dtype=bool)
    undecided[fast_at] = False
    slow_at = np.flatnonzero(undecided)
    slow = reference_rows(
        raw.take(pa.array(slow_at, pa.int64())).to_pylist(),
        [int(received[i]) if has_received[i] else None for i in slow_at],
        rules,
    )
    if fast is None or not len(fast_at):
        return slow
    fast_rows = pa.StructArray.from_arrays([pa.nulls(len(fast_at), pa.string()), *fast], fields=list(VERDICT))
    if not len(slow_at):
        return fast_rows
    # Back in the batch's order: row i of the output is line i.
    order = np.argsort(np.concatenate([fast_at, slow_at]), kind="stable")
    return pa.concat_arrays([fast_rows, slow]).take(pa.array(order, pa.int64()))


def reference_rows(
    lines: list[bytes | None], received_us: list[int | None], rules: InputRules = InputRules()
) -> pa.StructArray:
    """contract.check_line on each line, as verdict rows: the oracle, and the fast path's fallback."""
    out: list[tuple[str | int | None, ...]] = []
    for line, received in zip(lines, received_us, strict=False):
        event, reason = check_line(line, received, rules)
        out.append(
            (reason, *_REFUSED)
            if event is None
            else (None, event.user_id, event.event_id, event.event_type, event.event_ts_us, event.payload)
        )
    columns = list(zip(*out, strict=False)) if out else [()] * len(VERDICT)
    return pa.StructArray.from_arrays(
        [pa.array(col, type=VERDICT.field(i).type) for i, col in enumerate(columns)], fields=list(VERDICT)
    )
