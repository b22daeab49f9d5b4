"""UTC instants as RFC 3339 text with a "Z" suffix, and back.

Markers, notices, records and logs carry them. One spelling everywhere: `2026-03-07T20:15:00.123Z`.

(The compact receipt_ts of partition folders, `20260307T201500123Z`, is tidemark.base.layout's.)
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def iso_z(moment: datetime, timespec: str = "milliseconds") -> str:
    """An aware datetime as UTC RFC 3339 text ending in Z; a naive one is taken as UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).isoformat(timespec=timespec).replace("+00:00", "Z")


def now_iso_z(timespec: str = "milliseconds") -> str:
    """Now, as iso_z text (record and marker timestamps)."""
    return iso_z(datetime.now(timezone.utc), timespec)


def parse_iso(text: str, default_utc: bool = False) -> datetime:
    """RFC 3339 / ISO 8601 text ('...Z', '...z' or '...+02:00') -> an aware datetime.

    Text without an offset is refused (ValueError), or taken as UTC with default_utc.
    """
    moment = datetime.fromisoformat(str(text).replace("Z", "+00:00").replace("z", "+00:00"))
    if moment.tzinfo is None:
        if not default_utc:
            raise ValueError(f"time {str(text)[:80]!r} has no UTC offset")
        moment = moment.replace(tzinfo=timezone.utc)
    return moment


def from_micros(micros: int) -> datetime:
    """Microseconds since the epoch (Spark's timestamp) -> aware UTC datetime."""
    return EPOCH + timedelta(microseconds=int(micros))


def to_micros(moment: datetime) -> int:
    """Aware datetime -> microseconds since the epoch, exactly (no float rounding)."""
    delta = moment - EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def iso_from_micros(micros: int) -> str:
    """Microseconds since the epoch -> iso_z text to the microsecond."""
    return iso_z(from_micros(micros), "microseconds")
