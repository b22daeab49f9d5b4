"""The corrected-partition notice: "event date D has a new deduplicated version".

Built, encoded and validated here against tidemark/schemas/corrected_notice.schema.json
(docs/notices.md).

The body is a pure function of the version (what tidemark.notices.corrected_delivery reads from the table
right after the commit): the notice_id is a hash of dataset, event_date and version, so one
published version always gives one notice, however often it is recorded or re-sent.

Message attributes, for subscription filters (strings): dataset, event_date, change (the change
kind: first, changed, unchanged, unknown), version, schema_version, notice_id.
"""

from __future__ import annotations

import hashlib
from datetime import date
from typing import Any

from tidemark.base import layout
from tidemark.notices.availability_notice import (
    InvalidNotice,
    canonical_json,
    first_error,
    load_schema,
    parse_json,
    validator_for,
)

SCHEMA_VERSION = 1
SCHEMA_FILE = "corrected_notice.schema.json"
ATTRIBUTES = ("dataset", "event_date", "change", "version", "schema_version", "notice_id")
CHANGE_KINDS = ("first", "changed", "unchanged", "unknown")
# The example subscription's filter (terraform/pubsub.tf, the local stack): versions that changed.
EXAMPLE_FILTER = 'attributes.dataset = "{dataset}" AND attributes.change != "unchanged"'
COUNTS = ("sessions_added", "sessions_removed", "sessions_changed", "sessions_unchanged")

__all__ = ["InvalidNotice", "build", "validate", "decode", "encode", "attributes", "notice_id", "schema"]


def schema() -> dict[str, Any]:
    """The corrected notice's JSON Schema."""
    return load_schema(SCHEMA_FILE)


def notice_id(dataset: str, event_date: date, version: str) -> str:
    """Stable id: one version of one date of one dataset, one id."""
    key = "|".join(["corrected", dataset, layout.event_date_text(event_date), version])
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def change_of(previous_version: str | None, counts: dict[str, Any] | None) -> dict[str, Any]:
    """The notice's `change` object, from the counts against the previous version.

    The `change` object: counts {sessions_added, ...} compared with the previous version, or
    None when the previous version can no longer be read (its snapshot expired).
    """
    if previous_version is None:
        counts = {**dict.fromkeys(COUNTS, 0), **(counts or {})}
        return {"kind": "first", **{k: int(counts[k]) for k in COUNTS}}
    if counts is None:
        return {"kind": "unknown", **dict.fromkeys(COUNTS)}
    differs = any(counts[k] for k in ("sessions_added", "sessions_removed", "sessions_changed"))
    return {"kind": "changed" if differs else "unchanged", **{k: int(counts[k]) for k in COUNTS}}


def build(
    dataset: str,
    event_date: date,
    version: str,
    previous_version: str | None,
    change: dict[str, Any],
    rows: int,
    table: dict[str, Any],
    path: str,
    affected_dates: list[date],
    committed_at: str,
    changes: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The corrected notice of one published version, validated (its dates as YYYY-MM-DD text, as on the wire)."""
    body = {
        "schema_version": SCHEMA_VERSION,
        "notice_id": notice_id(dataset, event_date, version),
        "dataset": dataset,
        "event_date": layout.event_date_text(event_date),
        "version": version,
        "previous_version": previous_version,
        "change": change,
        "rows": int(rows),
        "table": table,
        "path": path,
        "affected_dates": [layout.event_date_text(day) for day in sorted(set(affected_dates))],
        "committed_at": committed_at,
    }
    if changes is not None:
        body["changes"] = changes
    return validate(body)


def validate(body: dict[str, Any]) -> dict[str, Any]:
    """Return the notice when valid; raise InvalidNotice naming the first problem otherwise."""
    if not isinstance(body, dict):
        raise InvalidNotice("notice must be a JSON object")
    problem = first_error(validator_for(SCHEMA_FILE), body)
    if problem:
        raise InvalidNotice(problem)
    try:  # the patterns admit 2026-02-31; the lake's own parse does not
        event_date = layout.as_event_date(body["event_date"])
        for day in body["affected_dates"]:
            layout.as_event_date(day)
        for receipt in (body["version"], body["previous_version"]):
            if receipt is not None:
                layout.check_receipt_ts(receipt)
    except layout.InvalidPartitionValue as exc:
        raise InvalidNotice(str(exc)) from None
    if body["notice_id"] != notice_id(body["dataset"], event_date, body["version"]):
        raise InvalidNotice("notice_id: does not match dataset, event_date and version")
    if body["previous_version"] is not None and body["previous_version"] >= body["version"]:
        raise InvalidNotice("previous_version: must be older than version")
    if (body["previous_version"] is None) != (body["change"]["kind"] == "first"):
        raise InvalidNotice("change.kind: 'first' exactly when there is no previous_version")
    return body


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
        "change": body["change"]["kind"],
        "version": body["version"],
        "schema_version": str(body["schema_version"]),
        "notice_id": body["notice_id"],
    }
