"""The input contract's fast path against its oracle: tidemark.ingest.contract_fast.verdicts and
tidemark.ingest.contract.check_line on the same lines, which must agree on every line (verdict, reason,
every kept field). Also each one's CPU per line on the landing's lines.

The lines (`corpus`, seeded): valid events of many shapes; lines for every quarantine reason of
docs/input-contract.md and the edges of each rule (dates, times, offsets, clock guards,
whitespace, escapes, duplicate keys); the hostile lines of the test suite (the byte and string
literals of tests/test_hostile_input.py and tests/test_contract*.py, and the events their helper
calls build, read with ast: tests may not import each other); and random byte-level mutations of
valid lines. tests/test_contract_differential.py runs 10^5 of them in the fast lane; this runs as
many as asked:

    .venv/bin/python -m bench.contract_differential --lines 10000000
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import sys
import time
from datetime import date, datetime, timedelta, timezone

import pyarrow as pa

import bench
from tidemark.ingest import contract_fast
from tidemark.ingest.contract import InputRules, split_lines, to_micros

NAME = "contract_differential"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOSTILE_SOURCES = ("tests/test_hostile_input.py", "tests/test_contract.py", "tests/test_contract_shared.py")
RECEIVED = datetime(2026, 3, 8, 9, 0, tzinfo=timezone.utc)
RECEIVED_US = to_micros(RECEIVED)
REQUIRED = ("event_id", "user_id", "event_type", "event_ts")

# Characters that stress a rule: Unicode whitespace (str.isspace, which the contract uses, and
# near misses that are not whitespace), JSON-special and control characters, non-ASCII, astral.
SPACES = [" ", "\t", "\u00a0", "\u2028", "\u2029", "\u3000", "\u1680", "\u200a", "\x1c", "\x1f", "\x85", "\x0b", "\x0c"]
NOT_SPACES = ["\u200b", "\u180e", "\ufeff", "\x7f", "é", "e\u0301", "\U0001f600", "\uffff", "x", "0", "-"]
SPECIAL = ['"', "\\", "/", "\n", "\r", "\x00", "\x01", "\b", "\ud800", "\udc00", "{", "}", ",", ":", "[", "]"]
MUTATION_BYTES = b'"\\{}[],: \t\r\n\x00\x01\x7f\x80\xbf\xc0\xc3\xe2\xed\xf0\xf4\xff0123456789-+.:TtZzeE'


def fixed_ts(rng: random.Random) -> str:
    """An RFC 3339 text near the receipt time, of any accepted spelling."""
    moment = RECEIVED - timedelta(seconds=rng.uniform(0, 10 * 86400))
    offset = rng.choice([0, 0, 60, -300, 330, 345, -720, 840, -59, 1439, -1439])
    local = moment.astimezone(timezone(timedelta(minutes=offset)))
    digits = rng.choice([0, 0, 1, 2, 3, 3, 6, 6, 7, 9])
    text = local.strftime("%Y-%m-%d") + rng.choice("TTTt ") + local.strftime("%H:%M:%S")
    if digits:
        text += "." + "".join(rng.choice("0123456789") for _ in range(digits))
    if offset == 0 and rng.random() < 0.7:
        return text + rng.choice("ZZz")
    sign = "-" if offset < 0 else "+"
    return text + f"{sign}{abs(offset) // 60:02d}:{abs(offset) % 60:02d}"


def edge_ts(rng: random.Random) -> object:
    """An event_ts at or past an edge of the timestamp rules and the clock guards."""
    skew = InputRules().max_clock_skew
    kinds = [
        lambda: (
            f"{rng.choice(['2024', '2023', '1900', '2000', '2100', '2400', '0000', '0001', '9999'])}-"
            f"{rng.choice(['02', '02', '01', '03', '12'])}-{rng.choice(['28', '29', '30', '31', '01'])}"
            f"T{rng.choice(['00:00:00', '10:00:00', '23:59:59.999999'])}"
            f"{rng.choice(['Z', '+23:59', '-23:59', '+01:00'])}"
        ),
        lambda: (
            f"2026-{rng.choice(['00', '01', '04', '06', '09', '11', '12', '13', '99'])}-"
            f"{rng.choice(['00', '01', '30', '31', '32'])}T10:00:00Z"
        ),
        lambda: (
            f"2026-03-01T{rng.choice(['00', '23', '24', '99'])}:{rng.choice(['00', '59', '60'])}:"
            f"{rng.choice(['00', '59', '60', '61'])}Z"
        ),
        lambda: (
            f"2026-03-01T10:00:00{rng.choice(['+', '-'])}{rng.choice(['00', '23', '24', '99'])}:"
            f"{rng.choice(['00', '59', '60'])}"
        ),
        lambda: (RECEIVED + skew + timedelta(microseconds=rng.choice([-1, 0, 0, 1, 1000]))).isoformat(),
        lambda: (RECEIVED + timedelta(days=rng.choice([1, 365 * 70]))).isoformat().replace("+00:00", "Z"),
        lambda: (
            datetime(2000, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=rng.choice([-1, 0, 1]))
        ).isoformat(),
        lambda: rng.choice(
            [
                "1970-01-01T00:00:00Z",
                "1980-01-06T00:00:00Z",
                "1999-12-31T23:59:59.999999Z",
                "2000-01-01T00:59:59+01:00",
                "2000-01-01T01:00:00+01:00",
            ]
        ),
        lambda: rng.choice(
            [
                "",
                " ",
                "\u2028",
                "2026-03-07",
                "2026-03-07T10:00:00",
                "2026-03-07T10:00Z",
                "2026-03-07T10:00:00.Z",
                "2026-03-07T10:00:00.1234567890Z",
                "2026-03-07T10:00:00+0100",
                "2026-03-07T10:00:00+01",
                "2026-03-07T10:00:00Z ",
                " 2026-03-07T10:00:00Z",
                "2026-03-07T10:00:00Z\n",
                "2026-03-07T10:00:00z",
                "2026-03-07t10:00:00Z",
                "２０２６-03-07T10:00:00Z",
                "2026-03-07T10:00:00\u00a0Z",
                "yesterday at noon",
                "2026-03-07T10:00:00,5Z",
                "+2026-03-07T10:00:00Z",
                "2026-3-7T10:00:00Z",
            ]
        ),
        lambda: rng.choice([None, 1772874000, 1.5, True, ["2026-03-07T10:00:00Z"], {"t": 1}]),
    ]
    return rng.choice(kinds)()


def id_value(rng: random.Random) -> object:
    """An id: mostly plain text; sometimes an integer, whitespace, odd characters or a non-text."""
    roll = rng.random()
    if roll < 0.75:
        return f"{rng.choice(['user', 'e', 'play', 'ü', 'a b'])}-{rng.randrange(10 ** rng.randrange(1, 8))}"
    if roll < 0.82:
        return rng.choice([0, 7, -3, 2**63, -(2**70), 10**30])
    if roll < 0.92:
        alphabet = rng.choice([SPACES, SPACES + NOT_SPACES, NOT_SPACES + SPECIAL])
        return "".join(rng.choice(alphabet) for _ in range(rng.randrange(4)))
    return rng.choice([None, True, False, 1.5, 1e300, [], ["u"], {}, {"u": 1}])


def payload_value(rng: random.Random) -> object:
    roll = rng.random()
    if roll < 0.8:
        return rng.choice(["ios", "android", "c42", "", "x y", "é", "\u2028", "null", "a/b", "<&>", "\x7f"])
    alphabet = NOT_SPACES + SPECIAL + SPACES
    return rng.choice(
        [
            None,
            5,
            -0,
            1.25,
            1e21,
            True,
            [1, "a", None],
            {"b": 1, "a": [None]},
            "".join(rng.choice(alphabet) for _ in range(rng.randrange(6))),
        ]
    )


def spell(fields: list[tuple[str, object]], rng: random.Random) -> bytes:
    """JSON text of the pairs (duplicates kept), in any spelling: compact or spaced, ASCII escapes
    or raw UTF-8, whitespace around, CRLF. Lone surrogates are written as \\u escapes."""
    ascii_only = rng.random() < 0.2
    sep = rng.choice([",", ",", ", ", " ,\t"])
    colon = rng.choice([":", ":", ": ", " : "])
    body = sep.join(
        json.dumps(k, ensure_ascii=ascii_only) + colon + json.dumps(v, ensure_ascii=ascii_only) for k, v in fields
    )
    text = rng.choice(["", "", "", " ", "\t"]) + "{" + body + "}" + rng.choice(["", "", "", "", " ", "\r", " \r"])
    return text.encode("utf-8", "surrogatepass")


def valid_fields(rng: random.Random) -> list[tuple[str, object]]:
    fields = [
        ("event_id", f"user-{rng.randrange(10**5):05d}-{rng.randrange(10**6):06d}"),
        ("user_id", f"user-{rng.randrange(10**5):05d}"),
        ("event_type", rng.choice(["app_open", "play", "pause", "stop", "app_close"])),
        ("event_ts", fixed_ts(rng)),
    ]
    extra = rng.choice([["device", "content_id"], ["device", "content_id"], [], ["a"], ["zz", "title", "Z", "é"]])
    fields += [(name, rng.choice(["ios", "android", f"c{rng.randrange(500)}"])) for name in extra]
    rng.shuffle(fields) if rng.random() < 0.3 else None
    return fields


def valid_line(rng: random.Random) -> bytes:
    """A valid event as a producer writes it (mostly the generator's compact shape)."""
    fields = valid_fields(rng)
    if rng.random() < 0.6:
        return json.dumps(dict(fields), separators=(",", ":")).encode()
    return spell(fields, rng)


def edge_line(rng: random.Random) -> bytes:
    """A line at or past the edge of one rule (every reason of the contract has its kind here)."""
    fields = valid_fields(rng)
    kind = rng.randrange(9)
    if kind == 0:  # an id: integer, whitespace, odd text, not text, missing
        name = rng.choice(["event_id", "user_id", "event_type"])
        fields = [(k, id_value(rng)) if k == name else (k, v) for k, v in fields]
        if rng.random() < 0.1:
            fields = [(k, v) for k, v in fields if k != name]
    elif kind == 1:  # event_ts: shapes, ranges, guards, missing
        fields = [(k, edge_ts(rng)) if k == "event_ts" else (k, v) for k, v in fields]
        if rng.random() < 0.05:
            fields = [(k, v) for k, v in fields if k != "event_ts"]
    elif kind == 2:  # the payload: every JSON type, escapes, nesting
        fields += [(f"p{i}{rng.choice(SPECIAL + NOT_SPACES)}", payload_value(rng)) for i in range(rng.randrange(1, 4))]
    elif kind == 3:  # duplicate keys: a required one, a payload one, a nested one
        name, value = rng.choice(fields + [("device", "ios")])
        fields.insert(rng.randrange(len(fields) + 1), (name, rng.choice([value, "other"])))
        if rng.random() < 0.3:
            fields[-1] = ("nested", {"k": 1, "j": {"x": 1}} if rng.random() < 0.5 else None)
            body = spell(fields, rng)
            return body.replace(b'"nested":null', b'"nested":{"k":1,"k":2}')
    elif kind == 4:  # escapes anywhere: the same text written with \u escapes
        return json.dumps(dict(fields), ensure_ascii=True).encode().replace(b"e", b"\\u0065", rng.randrange(1, 3))
    elif kind == 5:  # not an object, or nothing at all
        return rng.choice(
            [
                b"",
                b"\r",
                b" \t ",
                b"[1,2]",
                b'"text"',
                b"7",
                b"null",
                b"true",
                b"{}",
                b"{ }",
                b"\xef\xbb\xbf{}",
                b"[" * 50 + b"]" * 50,
                b'{"v":NaN}',
                b'{"v":-Infinity}',
                b"<html>502 Bad Gateway</html>",
                b'{"a":1',
                b'{"a":1}}',
                b'{"a":1},{"b":2}',
                b"\x00",
            ]
        )
    elif kind == 6:  # whitespace JSON does not allow, around or inside
        text = json.dumps(dict(fields), separators=(",", ":")).encode()
        ws = rng.choice([b"\x0b", b"\x0c", b"\xc2\xa0", b"\xe2\x80\xa8", b"\xef\xbb\xbf", b"\x00", b"\n"])
        return rng.choice([ws + text, text + ws, text.replace(b",", b"," + ws, 1)])
    elif kind == 7:  # invalid UTF-8 inside a string
        text = json.dumps(dict(fields), separators=(",", ":")).encode()
        at = text.index(b'"event_type":"') + 14
        return (
            text[:at]
            + rng.choice([b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80", b"\xe2\x80"])
            + text[at:]
        )
    else:  # raw control characters and U+2028 inside strings
        fields = [
            (
                k,
                v + rng.choice(["\x00", "\x1f", "\u2028", "\x7f", "\t"])
                if isinstance(v, str) and k != "event_ts"
                else v,
            )
            for k, v in fields
        ]
    return spell(fields, rng)


def mutate(line: bytes, rng: random.Random) -> bytes:
    """One to three byte-level edits: replace, insert, delete, duplicate a span."""
    data = bytearray(line)
    for _ in range(rng.choice([1, 1, 2, 3])):
        at = rng.randrange(len(data) + 1)
        roll = rng.random()
        byte = rng.choice(MUTATION_BYTES) if rng.random() < 0.8 else rng.randrange(256)
        if roll < 0.45 and at < len(data):
            data[at] = byte
        elif roll < 0.75:
            data.insert(at, byte)
        elif roll < 0.9 and at < len(data):
            del data[at]
        else:
            end = min(len(data), at + rng.randrange(1, 12))
            data[at:at] = data[at:end]
    return bytes(data)


def _literal(node):
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def hostile_lines(root: str = ROOT) -> list[bytes]:
    """The test suite's hostile lines, read from its source with ast: every bytes literal, every
    string literal (as UTF-8), and the event each helper call with literal arguments builds
    (`line(ts, **extra)`, `ev(event_id, user, ts, ...)`, `event(user, event_id, ts)`)."""
    base = {"event_id": "e", "user_id": "u", "event_type": "play", "event_ts": "2026-03-07T10:00:00Z"}
    names = {"user": "user_id", "ts": "event_ts"}
    found: list[bytes] = []
    for relative in HOSTILE_SOURCES:
        with open(os.path.join(root, relative), encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, bytes):
                if len(node.value) < 1 << 16:
                    found.append(node.value)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.append(node.value.encode("utf-8", "surrogatepass"))
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("line", "ev", "event")
            ):
                args = [_literal(a) for a in node.args]
                extra = {k.arg: _literal(k.value) for k in node.keywords if k.arg}
                fields = dict(base)
                for value in args:  # a timestamp-looking text is event_ts, the others ids in order
                    if isinstance(value, str) and value[:2] in ("19", "20", "２０") and len(value) > 9:
                        fields["event_ts"] = value
                    elif fields.get("_ids", 0) == 0:
                        fields["event_id"], fields["_ids"] = value, 1
                    else:
                        fields["user_id"] = value
                fields.pop("_ids", None)
                fields.update({names.get(k, k): v for k, v in extra.items()})
                for ascii_only in (True, False):
                    found.append(json.dumps(fields, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass"))
    return found


def corpus(lines: int, seed: int, root: str = ROOT) -> list[bytes]:
    """`lines` lines: the hostile ones first, then valid, edge and mutated lines in proportion."""
    rng = random.Random(seed)
    out = hostile_lines(root)[:lines]
    while len(out) < lines:
        roll = rng.random()
        if roll < 0.45:
            out.append(valid_line(rng))
        elif roll < 0.75:
            out.append(edge_line(rng))
        else:
            out.append(mutate(valid_line(rng) if rng.random() < 0.7 else edge_line(rng), rng))
    return out


def received_column(n: int, rng: random.Random) -> pa.Array:
    """Each line's receipt time: the fixed one, or none (the clock guard skipped) for some."""
    return pa.array([None if rng.random() < 0.05 else RECEIVED_US for _ in range(n)], pa.int64())


def compare(lines: list[bytes], seed: int, rules: InputRules = InputRules(), batch: int = 10_000):
    """(disagreements as (line, fast row, reference row), lines the fast path accepted in bulk,
    the reasons' classes counted). Batch sizes vary around `batch` (1 line, a few, many), as the
    stream's Arrow batches do."""
    rng = random.Random(seed)
    disagreements, accepted, reasons = [], 0, {}
    at = 0
    while at < len(lines):
        size = rng.choice([1, 2, 17, 100, batch, batch, batch])
        chunk = lines[at : at + size]
        at += size
        raw = pa.array(chunk, pa.binary())
        received = received_column(len(chunk), rng)
        fast = contract_fast.verdicts(raw, received, rules).to_pylist()
        reference = contract_fast.reference_rows(chunk, received.to_pylist(), rules).to_pylist()
        accepted += len(contract_fast.accepted_positions(raw, received, rules))
        for line, mine, theirs in zip(chunk, fast, reference, strict=False):
            if mine != theirs:
                disagreements.append((line, mine, theirs))
            kind = (theirs["reason"] or "event").split(":")[0]
            reasons[kind] = reasons.get(kind, 0) + 1
    return disagreements, accepted, reasons


def landing_lines(events: int = 100_000) -> list[bytes]:
    """The stream bench's landed lines (tidemark.demo.generate, seed 11), for the cost per line."""
    import tempfile

    from tidemark.demo import generate

    with tempfile.TemporaryDirectory() as folder:
        generate.generate(
            folder,
            generate.Workload(
                events=events, users=max(1, events // 100), days=7, files=10, start=date(2026, 3, 1), seed=11
            ),
            progress=False,
        )
        return [
            line
            for name in sorted(os.listdir(folder))
            if name.endswith(".jsonl")
            for line in split_lines(open(os.path.join(folder, name), "rb").read())
        ]


def cpu_per_line(lines: list[bytes], rounds: int = 3, batch: int = 10_000) -> dict:
    """CPU microseconds per line (the best of `rounds`) of each path, over Arrow batches of
    `batch` lines as the stream's UDF gets them, Arrow conversions included."""
    received_us = RECEIVED_US + 30 * 86400 * 1_000_000  # after every landed event: none refused as future
    chunks = [pa.array(lines[i : i + batch], pa.binary()) for i in range(0, len(lines), batch)]
    received = [pa.array([received_us] * len(c), pa.int64()) for c in chunks]
    paths = {
        "fast path (contract_fast.verdicts)": lambda c, r: contract_fast.verdicts(c, r),
        "reference (contract.check_line per line)": lambda c, r: contract_fast.reference_rows(
            c.to_pylist(), r.to_pylist()
        ),
    }
    out = {}
    for label, run in paths.items():
        best = None
        for _ in range(rounds):
            started = time.process_time()
            for c, r in zip(chunks, received, strict=False):
                run(c, r)
            seconds = time.process_time() - started
            best = seconds if best is None else min(best, seconds)
        out[label] = round(best / len(lines) * 1e6, 2)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.contract_differential",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--lines", type=int, default=1_000_000)
    p.add_argument("--seed", type=int, default=31)
    p.add_argument("--part", type=int, default=1_000_000, help="lines generated and compared at a time (memory)")
    p.add_argument("--landing-events", type=int, default=100_000, help="events of the landing timed per line")
    p.add_argument("--no-write", action="store_true", help="do not write bench/results/")
    args = p.parse_args(argv)
    env = bench.machine()
    load_before = "/".join(f"{x:.1f}" for x in os.getloadavg())
    started = time.perf_counter()
    disagreements, accepted, reasons, done = [], 0, {}, 0
    part = 0
    while done < args.lines:
        n = min(args.part, args.lines - done)
        lines = (
            corpus(n, args.seed + part, ROOT)
            if part == 0
            else corpus(n + len(hostile_lines()), args.seed + part, ROOT)[len(hostile_lines()) :]
        )
        found, took, counted = compare(lines, args.seed + part)
        disagreements += found
        accepted += took
        for k, v in counted.items():
            reasons[k] = reasons.get(k, 0) + v
        done += n
        part += 1
        print(f"{done} lines compared, {len(disagreements)} disagreements", flush=True)
    seconds = round(time.perf_counter() - started, 1)
    landing = landing_lines(args.landing_events)
    cost = cpu_per_line(landing)
    load_after = "/".join(f"{x:.1f}" for x in os.getloadavg())
    rows = [
        ["lines compared", done],
        ["disagreements", len(disagreements)],
        ["accepted by the fast path in bulk", accepted],
        *[[f"reference verdict: {k}", v] for k, v in sorted(reasons.items(), key=lambda kv: -kv[1])],
        *[[f"CPU us per landed line, {k}", v] for k, v in cost.items()],
        ["seconds (generate + compare)", seconds],
        ["load before -> after", f"{load_before} -> {load_after}"],
    ]
    for line, mine, theirs in disagreements[:20]:
        print("DISAGREE", line, mine, theirs)
    notes = (
        f"The fast path (tidemark/ingest/contract_fast.py) and its oracle (tidemark.ingest.contract.check_line) on "
        f"{done} seeded lines (seed {args.seed}): {len(disagreements)} disagreements. CPU per line "
        f"measured on {len(landing)} landed lines (tidemark.demo.generate seed 11, {args.landing_events} events) "
        "in Arrow batches of 10,000 lines, Arrow conversions included, the best of 3 rounds."
    )
    print(notes)
    for row in rows:
        print(*row, sep=": ")
    if not args.no_write:
        path = bench.write_results(
            NAME,
            "Input contract: fast path against its oracle",
            ["what", "value"],
            rows,
            notes,
            {"lines": done, "seed": args.seed, "batch": "1 to 10,000 lines"},
            env,
        )
        print(f"wrote {path}")
    return 1 if disagreements else 0


if __name__ == "__main__":
    sys.exit(main())
