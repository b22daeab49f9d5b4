"""The availability notice: built, encoded and validated in one place.

(the JSON Schema file tidemark/schemas/availability_notice.schema.json), used by the stream, the
Cloud Function and the DAG.

Message attributes mirror the body fields that subscription filters need, as strings:
dataset, event_date, late ("true"/"false"), schema_version, kind, notice_id.
See docs/notices.md for an example and filter recipes.
"""

from __future__ import annotations

import hashlib
import json
from datetime import date
from functools import cache
from importlib import resources
from typing import Any, Protocol

import jsonschema

from tidemark.base import layout

SCHEMA_VERSION = 1
ATTRIBUTES = ("dataset", "event_date", "late", "schema_version", "kind", "notice_id")
KINDS = ("partition", "coalesced", "late_digest")
SCHEMA_FILE = "availability_notice.schema.json"


class InvalidNotice(ValueError):
    """A notice that does not follow the schema; the message says which field is wrong and why."""


class NoticeCodec(Protocol):
    """What the outbox and the senders need of a notice kind's module (this one, corrected_notice)."""

    def validate(self, body: dict[str, Any]) -> dict[str, Any]:
        """The body when it is a valid notice; InvalidNotice otherwise."""
        ...

    def encode(self, body: dict[str, Any]) -> bytes:
        """A valid notice as the bytes of a Pub/Sub message."""
        ...

    def attributes(self, body: dict[str, Any]) -> dict[str, str]:
        """The Pub/Sub message attributes of a valid notice."""
        ...


def load_schema(filename: str) -> dict[str, Any]:
    """A notice JSON Schema shipped in tidemark/schemas, parsed."""
    parsed: dict[str, Any] = json.loads(resources.files("tidemark").joinpath(f"schemas/{filename}").read_text())
    return parsed


@cache
def validator_for(filename: str) -> jsonschema.Draft202012Validator:
    """A Draft 2020-12 validator of tidemark/schemas/<filename> that checks formats (date-time)."""
    checker = jsonschema.FormatChecker()
    # jsonschema silently skips a format whose checker library is missing: refuse to run without
    # the one the schema relies on rather than accept any string as a timestamp.
    if "date-time" not in checker.checkers:
        raise RuntimeError("jsonschema cannot check 'date-time' formats: install rfc3339-validator")
    return jsonschema.Draft202012Validator(load_schema(filename), format_checker=checker)


def first_error(validator: jsonschema.Draft202012Validator, body: object) -> str | None:
    """'field.path: message' of the first schema violation (in path order), or None."""
    errors = sorted(validator.iter_errors(body), key=lambda e: [str(p) for p in e.absolute_path])
    if not errors:
        return None
    where = ".".join(str(p) for p in errors[0].absolute_path) or "notice"
    return f"{where}: {errors[0].message}"


def schema() -> dict[str, Any]:
    """The availability notice's JSON Schema."""
    return load_schema(SCHEMA_FILE)


def _validator() -> jsonschema.Draft202012Validator:
    return validator_for(SCHEMA_FILE)


def notice_id(dataset: str, event_date: date, receipt_ts_list: list[str]) -> str:
    """Stable id of a notice: the same partitions always give the same id."""
    key = "|".join([dataset, layout.event_date_text(event_date), *sorted(receipt_ts_list)])
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def build(dataset: str, partitions: list[dict[str, Any]], kind: str = "partition") -> dict[str, Any]:
    """The notice for receipt partitions of ONE event_date.

    (dicts shaped like a receipt marker: event_date, receipt_ts, batch_id, uri, rows, events,
    pane_kinds, min_event_ts, max_event_ts, watermark, late; the event date as the marker's text or
    a date). The notice's event_date is YYYY-MM-DD text, as on the wire. Counts are summed; receipt_ts,
    uri, watermark, batch_id are the newest; `late` is true when any covered partition is late.
    Deterministic in the set of partitions.
    """
    if not partitions:
        raise InvalidNotice("a notice covers at least one receipt partition")
    if kind not in KINDS:
        raise InvalidNotice(f"kind: {kind!r} is not one of {list(KINDS)}")
    try:
        dates = {layout.as_event_date(p["event_date"]) for p in partitions}
    except layout.InvalidPartitionValue as exc:
        raise InvalidNotice(str(exc)) from None
    if len(dates) != 1:
        raise InvalidNotice(f"a notice covers one event_date, got {[str(d) for d in sorted(dates)]}")
    event_date = dates.pop()
    ordered = sorted({p["receipt_ts"]: p for p in partitions}.values(), key=lambda p: p["receipt_ts"])
    newest = ordered[-1]
    body = {
        "schema_version": SCHEMA_VERSION,
        "notice_id": notice_id(dataset, event_date, [p["receipt_ts"] for p in ordered]),
        "dataset": dataset,
        "kind": kind,
        "event_date": layout.event_date_text(event_date),
        "receipt_ts": newest["receipt_ts"],
        "receipt_ts_list": [p["receipt_ts"] for p in ordered],
        "uri": newest["uri"],
        "uris": [p["uri"] for p in ordered],
        "rows": sum(int(p["rows"]) for p in ordered),
        "events": sum(int(p["events"]) for p in ordered),
        "pane_kinds": sorted({k for p in ordered for k in p["pane_kinds"]}),
        "watermark": max(p["watermark"] for p in ordered),
        "batch_id": max(int(p["batch_id"]) for p in ordered),
        "late": any(bool(p["late"]) for p in ordered),
    }
    starts = [p["min_event_ts"] for p in ordered if p.get("min_event_ts")]
    ends = [p["max_event_ts"] for p in ordered if p.get("max_event_ts")]
    if starts:
        body["min_event_ts"] = min(starts)
    if ends:
        body["max_event_ts"] = max(ends)
    return validate(body)


def validate(body: dict[str, Any]) -> dict[str, Any]:
    """Return the notice when valid; raise InvalidNotice naming the first problem otherwise."""
    if not isinstance(body, dict):
        raise InvalidNotice("notice must be a JSON object")
    problem = first_error(_validator(), body)
    if problem:
        raise InvalidNotice(problem)
    try:  # the pattern admits 2026-02-31; the lake's own parse does not
        layout.as_event_date(body["event_date"])
        for receipt in [body["receipt_ts"], *body.get("receipt_ts_list", [])]:
            layout.check_receipt_ts(receipt)
    except layout.InvalidPartitionValue as exc:
        raise InvalidNotice(str(exc)) from None
    return body


def parse_json(data: bytes | str) -> Any:
    """Bytes of a Pub/Sub message -> the JSON value, not yet validated (shared by both notice kinds)."""
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidNotice(f"notice is not valid JSON: {exc}") from None


def canonical_json(body: dict[str, Any]) -> bytes:
    """A validated notice's message bytes: sorted keys, no spaces (shared by both notice kinds)."""
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def decode(data: bytes | str) -> dict[str, Any]:
    """Bytes of a Pub/Sub message -> validated notice."""
    return validate(parse_json(data))


def encode(body: dict[str, Any]) -> bytes:
    """A valid notice as the bytes of a Pub/Sub message (canonical JSON)."""
    return canonical_json(validate(body))


def attributes(body: dict[str, Any]) -> dict[str, str]:
    """Pub/Sub message attributes for subscription filters (strings only)."""
    return {
        "dataset": body["dataset"],
        "event_date": body["event_date"],
        "late": "true" if body["late"] else "false",
        "schema_version": str(body["schema_version"]),
        "kind": body.get("kind", "partition"),
        "notice_id": body["notice_id"],
    }
