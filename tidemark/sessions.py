"""Session rules shared by the stream, the dedup step, the readers and the tests' reference.

The rule itself (gaps and islands) is SQL in dedup_sql/sessionize.sql; this module holds the
parameters and the pane vocabulary, Beam's terms:
  early     a pane of a session whose window (last event + gap) the watermark has not passed
  on_time   the pane emitted in the batch whose watermark passed the session's window end
  late      a later pane of a closed session, updated by an event within the allowed lateness
  too_late  a fragment of events later than the allowed lateness; not kept in state, stitched by dedup
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from tidemark.durations import format_duration, parse_duration

PANE_KINDS = ("early", "on_time", "late", "too_late")


@dataclass(frozen=True)
class SessionRules:
    gap: timedelta = timedelta(minutes=30)
    allowed_lateness: timedelta = timedelta(hours=1)
    watermark_delay: timedelta = timedelta(minutes=10)

    def __post_init__(self):
        if self.gap <= timedelta(0):
            raise ValueError("gap must be positive")
        if self.allowed_lateness < timedelta(0) or self.watermark_delay < timedelta(0):
            raise ValueError("allowed lateness and watermark delay must not be negative")

    @classmethod
    def parse(cls, gap: str = "30m", allowed_lateness: str = "1h", watermark_delay: str = "10m"):
        return cls(parse_duration(gap), parse_duration(allowed_lateness), parse_duration(watermark_delay))

    @property
    def gap_us(self) -> int:
        return _micros(self.gap)

    @property
    def allowed_lateness_us(self) -> int:
        return _micros(self.allowed_lateness)

    @property
    def watermark_delay_us(self) -> int:
        return _micros(self.watermark_delay)

    def describe(self) -> dict:
        return {"gap": format_duration(self.gap), "allowed_lateness": format_duration(self.allowed_lateness),
                "watermark_delay": format_duration(self.watermark_delay)}


def _micros(span: timedelta) -> int:
    return (span.days * 86400 + span.seconds) * 1_000_000 + span.microseconds
