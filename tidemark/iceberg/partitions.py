"""Event dates as the table's partition values, and the half months its manifests are grouped by.

The table is partitioned by `event_date` (an Iceberg `date`: days since 1970-01-01). The commits keep
one manifest per half month of event dates (the 1st to the 15th, the 16th to the end): a month's
manifest (up to 31 dates, ~450 bytes per file) made a commit on a table a year old write about 1.45x
the bytes of one on a week-old table (estimated from the 60-day build: BENCHMARKS.md section 7); half
months bound it to 16 dates, and the manifest list grows by 24 short entries a year.
"""

from __future__ import annotations

from datetime import date, timedelta

from pyiceberg.conversions import from_bytes
from pyiceberg.manifest import ManifestFile
from pyiceberg.types import DateType

_EPOCH_DAY = date(1970, 1, 1)


def day_of(event_date: date) -> int:
    """An event date as the table's partition value (days since 1970-01-01)."""
    return (event_date - _EPOCH_DAY).days


def date_of(day: int) -> date:
    """A partition value as the event date it stands for."""
    return _EPOCH_DAY + timedelta(days=day)


def manifest_bucket(day: int) -> int:
    """The half month an event date's files are kept in (one manifest per half month)."""
    moment = _EPOCH_DAY + timedelta(days=day)
    return (moment.year * 12 + moment.month - 1) * 2 + (moment.day > 15)


def buckets_spanned(span: tuple[int, int]) -> set[int]:
    """The half months a range of event dates (as days, inclusive) touches."""
    return set(range(manifest_bucket(span[0]), manifest_bucket(span[1]) + 1))


def day_range(manifest: ManifestFile) -> tuple[int, int] | None:
    """The event dates (as days) a manifest's partition summary spans; None when it does not say."""
    summary = manifest.partitions[0] if manifest.partitions else None
    if summary is None or summary.lower_bound is None or summary.upper_bound is None:
        return None
    # A DateType bound decodes to its day number; pyiceberg types from_bytes' result as any literal.
    lower = from_bytes(DateType(), summary.lower_bound)
    upper = from_bytes(DateType(), summary.upper_bound)
    return int(lower), int(upper)
