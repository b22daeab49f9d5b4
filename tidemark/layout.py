"""The lake's partition layout: the one place that knows folder names and partition value formats.

Every path the Spark job, the dedup step, the readers, the function and the DAG use is built here,
and every user-supplied partition value is validated here before it can reach a path or SQL.

    <lake>/sessions/event_date=YYYY-MM-DD/receipt_ts=YYYYMMDDTHHMMSSmmmZ/   stream panes (immutable)
        _tidemark_receipt.json      completion marker, written last; readers skip folders without it
    <lake>/sessions_dedup/                                                  the deduplicated sessions:
                                                an Iceberg table (tidemark.table, tidemark.publish)
    <lake>/_catalog/iceberg.db                                              its local SQLite catalog
    <lake>/_quarantine/receipt_ts=<receipt_ts>/                             malformed input lines
    <lake>/_notices/{outbox,sent}/<notice_id>.json                         availability notice outbox
    <lake>/_notices/pending/<group>.json                                   partitions waiting for a coalesced notice
    <lake>/_rules/rules-NNNNNN.json                                        session rules record, one per change
    <lake>/_obligations/event_date=YYYY-MM-DD/<source date>__<version>.json  reruns owed (tidemark.obligations)
    <lake>/_receipts/reach/event_date=E/<event_date>__<receipt_ts>          receipt partitions of earlier dates whose
                                                                           sessions reach into E (tidemark.receipt_index)
    <lake>/_receipts/ends/event_date=E/<receipt_ts>__<max_event_us>         every receipt partition of E with the latest end of its
                                                                           panes (planning without reading markers)
    <lake>/_receipts/arrivals/day=YYYY-MM-DD/<receipt_ts>__<event_date>   every receipt partition, by the day it was received
                                                                           (what changed since a time: tidemark.receipt_index)
    <lake>/_receipts/head.json, _receipts/reach_complete.json              the newest fully written batch; the index's start
    <lake>/_reconcile/cursor.json                                          where reconciliation's last pass stopped
                                                                           (tidemark.reconcile)
    <lake>/_landing/receipt_ts=<receipt_ts>.json                           the landing ledger: files read per batch
                                                                           (tidemark.landing_ledger)
"""
from __future__ import annotations

import re
from datetime import date, datetime, timezone

SESSIONS = "sessions"
SESSIONS_DEDUP = "sessions_dedup"
QUARANTINE = "_quarantine"
NOTICES = "_notices"
RULES = "_rules"
OBLIGATIONS = "_obligations"
LANDING_LEDGER = "_landing"
RECEIPT_INDEX = "_receipts"
RECONCILE = "_reconcile"

RECEIPT_MARKER = "_tidemark_receipt.json"
QUARANTINE_MARKER = "_tidemark_quarantine.json"

# Basic ISO 8601 in UTC with milliseconds: sortable as text and free of ':' (which Hadoop escapes
# in folder names as %3A).
RECEIPT_TS_FORMAT = "%Y%m%dT%H%M%S"
_RECEIPT_TS = re.compile(r"^(\d{8}T\d{6})(\d{3})Z$")
_EVENT_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


class InvalidPartitionValue(ValueError):
    """A partition value that is not in the lake's format; raised before it can reach a path."""


def parse_event_date(value: object) -> date:
    """Validate an event_date (YYYY-MM-DD, a real calendar date) and return it as a date."""
    text = str(value)
    if not _EVENT_DATE.match(text):
        raise InvalidPartitionValue(
            f"invalid event_date {text[:80]!r}: expected a calendar date as YYYY-MM-DD"
        )
    try:
        return date.fromisoformat(text)
    except ValueError as exc:
        raise InvalidPartitionValue(f"invalid event_date {text!r}: {exc}") from None


def check_event_date(value: object) -> str:
    """Return the canonical YYYY-MM-DD text of a valid event_date, refusing anything else."""
    return parse_event_date(value).isoformat()


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
    parse_receipt_ts(value)
    return str(value)


def receipt_ts_from_millis(millis: int) -> str:
    return format_receipt_ts(datetime.fromtimestamp(millis / 1000, tz=timezone.utc))


def join(base: str, *parts: str) -> str:
    """Join URI/path parts with '/', for local paths and Hadoop-style URIs alike."""
    out = base.rstrip("/")
    for part in parts:
        out = f"{out}/{part.strip('/')}"
    return out


def sessions_root(lake: str) -> str:
    return join(lake, SESSIONS)


def event_date_dir(lake: str, event_date: object) -> str:
    return join(lake, SESSIONS, f"event_date={check_event_date(event_date)}")


def receipt_dir(lake: str, event_date: object, receipt_ts: object) -> str:
    return join(event_date_dir(lake, event_date), f"receipt_ts={check_receipt_ts(receipt_ts)}")


def dedup_root(lake: str) -> str:
    return join(lake, SESSIONS_DEDUP)


def current_pointer(lake: str, event_date: object) -> str:
    """Where the current version of a date is recorded, for messages: the table property
    tidemark.current.<date> of the Iceberg table at <lake>/sessions_dedup (see tidemark.publish)."""
    return f"{dedup_root(lake)} (table property tidemark.current.{check_event_date(event_date)})"


def quarantine_root(lake: str) -> str:
    return join(lake, QUARANTINE)


def quarantine_dir(lake: str, receipt_ts: object) -> str:
    return join(lake, QUARANTINE, f"receipt_ts={check_receipt_ts(receipt_ts)}")


def receipt_index_dir(lake: str) -> str:
    return join(lake, RECEIPT_INDEX)


def reach_dir(lake: str, event_date: object) -> str:
    """Entries naming the receipt partitions of earlier dates whose panes reach into event_date."""
    return join(lake, RECEIPT_INDEX, "reach", f"event_date={check_event_date(event_date)}")


def reach_entry(lake: str, into: object, event_date: object, receipt_ts: object) -> str:
    return join(reach_dir(lake, into), f"{check_event_date(event_date)}__{check_receipt_ts(receipt_ts)}")


def ends_dir(lake: str, event_date: object) -> str:
    """Entries naming each receipt partition of event_date and the latest end of its panes."""
    return join(lake, RECEIPT_INDEX, "ends", f"event_date={check_event_date(event_date)}")


def end_entry(lake: str, event_date: object, receipt_ts: object, max_event_us: int) -> str:
    if isinstance(max_event_us, bool) or not isinstance(max_event_us, int):
        raise InvalidPartitionValue(f"invalid max_event_us {max_event_us!r}: expected microseconds")
    return join(ends_dir(lake, event_date), f"{check_receipt_ts(receipt_ts)}__{max_event_us}")


def arrivals_root(lake: str) -> str:
    return join(lake, RECEIPT_INDEX, "arrivals")


def arrivals_dir(lake: str, day: object) -> str:
    """Entries naming the receipt partitions received on `day` (UTC), one per partition."""
    return join(arrivals_root(lake), f"day={check_event_date(day)}")


def arrival_entry(lake: str, receipt_ts: object, event_date: object) -> str:
    received = parse_receipt_ts(receipt_ts).date().isoformat()
    return join(arrivals_dir(lake, received), f"{check_receipt_ts(receipt_ts)}__{check_event_date(event_date)}")


def reconcile_cursor_path(lake: str) -> str:
    return join(lake, RECONCILE, "cursor.json")


def landing_ledger_dir(lake: str) -> str:
    return join(lake, LANDING_LEDGER)


def landing_ledger_path(lake: str, receipt_ts: object) -> str:
    return join(lake, LANDING_LEDGER, f"receipt_ts={check_receipt_ts(receipt_ts)}.json")


def obligations_dir(lake: str, event_date: object) -> str:
    return join(lake, OBLIGATIONS, f"event_date={check_event_date(event_date)}")


def notices_dir(lake: str, which: str) -> str:
    if which not in ("outbox", "sent", "pending"):
        raise ValueError(f"unknown notices folder {which!r}")
    return join(lake, NOTICES, which)


def rules_dir(lake: str) -> str:
    return join(lake, RULES)


def rules_record_path(lake: str, sequence: int) -> str:
    """The rules record number `sequence` (1 = the first rules the lake was written with)."""
    if isinstance(sequence, bool) or not isinstance(sequence, int) or not 0 < sequence < 1_000_000:
        raise ValueError(f"invalid rules record sequence {sequence!r}")
    return join(lake, RULES, f"rules-{sequence:06d}.json")


def partition_value(name: str, key: str) -> str | None:
    """'event_date=2026-03-07' -> '2026-03-07' when the key matches, else None."""
    prefix = f"{key}="
    return name[len(prefix):] if name.startswith(prefix) else None
