"""The formats of the lake's partition values, checked before any of them can reach a path or SQL.

Event dates (YYYY-MM-DD), receipt times (basic ISO 8601 in UTC with milliseconds) and dedup run ids.
The folders they name are tidemark.store.lake's (`Lake`, the only place that knows folder names); every
user-supplied value is validated here on its way there.
"""

from __future__ import annotations

import re
from datetime import date, datetime, timezone

# Basic ISO 8601 in UTC with milliseconds: sortable as text and free of ':' (which Hadoop escapes
# in folder names as %3A).
RECEIPT_TS_FORMAT = "%Y%m%dT%H%M%S"
_RECEIPT_TS = re.compile(r"^(\d{8}T\d{6})(\d{3})Z$")
_EVENT_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_RUN_ID = re.compile(r"^[0-9a-f]{32}$")


class InvalidPartitionValue(ValueError):
    """A partition value that is not in the lake's format; raised before it can reach a path."""


def parse_event_date(value: object) -> date:
    """Validate an event_date (YYYY-MM-DD, a real calendar date) and return it as a date."""
    text = str(value)
    if not _EVENT_DATE.match(text):
        raise InvalidPartitionValue(f"invalid event_date {text[:80]!r}: expected a calendar date as YYYY-MM-DD")
    try:
        return date.fromisoformat(text)
    except ValueError as exc:
        raise InvalidPartitionValue(f"invalid event_date {text!r}: {exc}") from None


def check_event_date(value: object) -> str:
    """Return the canonical YYYY-MM-DD text of a valid event_date, refusing anything else."""
    return parse_event_date(value).isoformat()


def as_event_date(value: object) -> date:
    """THE parse of an event date at a boundary: YYYY-MM-DD text -> `date`.

    The boundaries are a CLI option, a notice, a DAG param, a marker and the function. Anything else
    is refused with a message saying what is wrong. A `date` passes as it is (a `datetime`, which is
    one too, is refused: an instant is not a date). Inside, the date travels typed;
    `event_date_text` is its one text form.
    """
    if isinstance(value, datetime):
        raise InvalidPartitionValue(f"invalid event_date {value!r}: an instant, expected a calendar date")
    if isinstance(value, date):
        return value
    if not isinstance(value, str):
        raise InvalidPartitionValue(
            f"invalid event_date {value!r}: a {type(value).__name__}, expected YYYY-MM-DD text or a date"
        )
    return parse_event_date(value)


def event_date_text(value: date) -> str:
    """The one text form of an event date (YYYY-MM-DD): in paths, markers, notices, SQL literals."""
    if isinstance(value, datetime) or not isinstance(value, date):
        raise TypeError(f"event_date_text takes a date (parse text with as_event_date), got {value!r}")
    return value.isoformat()


def format_receipt_ts(moment: datetime) -> str:
    """UTC datetime -> '20260307T201500123Z'."""
    if moment.tzinfo is None:
        raise ValueError("receipt_ts must be timezone-aware")
    moment = moment.astimezone(timezone.utc)
    return f"{moment.strftime(RECEIPT_TS_FORMAT)}{moment.microsecond // 1000:03d}Z"


def parse_receipt_ts(value: object) -> datetime:
    """'20260307T201500123Z' -> aware UTC datetime; refuses anything else."""
    text = str(value)
    match = _RECEIPT_TS.match(text)
    if not match:
        raise InvalidPartitionValue(
            f"invalid receipt_ts {text[:80]!r}: expected UTC basic format like 20260307T201500123Z"
        )
    try:
        moment = datetime.strptime(match.group(1), RECEIPT_TS_FORMAT)
    except ValueError as exc:
        raise InvalidPartitionValue(f"invalid receipt_ts {text!r}: {exc}") from None
    return moment.replace(microsecond=int(match.group(2)) * 1000, tzinfo=timezone.utc)


def check_receipt_ts(value: object) -> str:
    """Return a valid receipt_ts (basic ISO 8601 UTC with milliseconds) as text, refusing anything else."""
    parse_receipt_ts(value)
    return str(value)


def check_run_id(run_id: object) -> str:
    """A dedup run's id: 32 lowercase hex digits (uuid4().hex)."""
    if not _RUN_ID.match(str(run_id)):
        raise InvalidPartitionValue(f"invalid run id {str(run_id)[:80]!r}: expected 32 lowercase hex digits")
    return str(run_id)


def receipt_ts_from_millis(millis: int) -> str:
    """Milliseconds since the epoch -> receipt_ts text ('20260307T201500123Z')."""
    return format_receipt_ts(datetime.fromtimestamp(millis / 1000, tz=timezone.utc))


def join(base: str, *parts: str) -> str:
    """Join URI/path parts with '/', for local paths and Hadoop-style URIs alike."""
    out = base.rstrip("/")
    for part in parts:
        out = f"{out}/{part.strip('/')}"
    return out


def partition_value(name: str, key: str) -> str | None:
    """'event_date=2026-03-07' -> '2026-03-07' when the key matches, else None."""
    prefix = f"{key}="
    return name[len(prefix) :] if name.startswith(prefix) else None
