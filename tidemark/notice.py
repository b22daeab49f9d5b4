"""The availability notice: built, encoded and validated in one place (the JSON Schema file
tidemark/schemas/notice.schema.json), used by the stream, the Cloud Function and the DAG.

Message attributes mirror the body fields that subscription filters need, as strings:
dataset, event_date, late ("true"/"false"), schema_version.
"""
from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from importlib import resources

import jsonschema

from tidemark import layout

SCHEMA_VERSION = 1
ATTRIBUTES = ("dataset", "event_date", "late", "schema_version")


class InvalidNotice(ValueError):
    """A notice that does not follow the schema; the message says which field is wrong and why."""


@lru_cache(maxsize=1)
def schema() -> dict:
    return json.loads(resources.files("tidemark").joinpath("schemas/notice.schema.json").read_text())


@lru_cache(maxsize=1)
def _validator():
    return jsonschema.Draft202012Validator(schema(), format_checker=jsonschema.FormatChecker())


def notice_id(dataset: str, event_date: str, receipt_ts_list: list[str]) -> str:
    """Stable id of a notice: the same partitions always give the same id."""
    key = "|".join([dataset, event_date, *sorted(receipt_ts_list)])
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def validate(body: dict) -> dict:
    """Return the notice when valid; raise InvalidNotice naming the first problem otherwise."""
    if not isinstance(body, dict):
        raise InvalidNotice("notice must be a JSON object")
    errors = sorted(_validator().iter_errors(body), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        where = ".".join(str(p) for p in first.absolute_path) or "notice"
        raise InvalidNotice(f"{where}: {first.message}")
    try:  # the pattern admits 2026-02-31; the lake's own check does not
        layout.check_event_date(body["event_date"])
        for receipt in [body["receipt_ts"], *body.get("receipt_ts_list", [])]:
            layout.check_receipt_ts(receipt)
    except layout.InvalidPartitionValue as exc:
        raise InvalidNotice(str(exc)) from None
    return body


def decode(data: bytes | str) -> dict:
    """Bytes of a Pub/Sub message -> validated notice."""
    try:
        body = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidNotice(f"notice is not valid JSON: {exc}") from None
    return validate(body)


def encode(body: dict) -> bytes:
    return json.dumps(validate(body), sort_keys=True, separators=(",", ":")).encode()


def attributes(body: dict) -> dict[str, str]:
    """Pub/Sub message attributes for subscription filters (strings only)."""
    return {"dataset": body["dataset"], "event_date": body["event_date"],
            "late": "true" if body["late"] else "false", "schema_version": str(body["schema_version"])}
