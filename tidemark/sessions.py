"""Session rules shared by the stream, the dedup step, the readers and the tests' reference.

The rule itself (gaps and islands) is SQL in dedup_sql/sessionize.sql; this module holds the
parameters and the pane vocabulary, Beam's terms:
  early     a pane of a session whose window (last event + gap) the watermark has not passed
  on_time   the pane emitted in the batch whose watermark passed the session's window end
  late      a later pane of a closed session, updated by an event within the allowed lateness
  too_late  a fragment of events later than the allowed lateness; not kept in state, stitched by dedup
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta

from tidemark.durations import format_duration, parse_duration

PANE_KINDS = ("early", "on_time", "late", "too_late")
# The rules, in the order every message and record lists them.
RULE_NAMES = ("gap", "allowed_lateness", "watermark_delay")


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

    def micros(self) -> dict:
        """The canonical form (integers, so "60m" and "1h" are the same rules): records compare this."""
        return {"gap_us": self.gap_us, "allowed_lateness_us": self.allowed_lateness_us,
                "watermark_delay_us": self.watermark_delay_us}

    @classmethod
    def from_micros(cls, values: dict) -> "SessionRules":
        return cls(**{name: timedelta(microseconds=int(values[f"{name}_us"])) for name in RULE_NAMES})

    def with_overrides(self, overrides: dict[str, timedelta]) -> "SessionRules":
        """These rules with some of them replaced (the options an operator typed)."""
        unknown = set(overrides) - set(RULE_NAMES)
        if unknown:
            raise ValueError(f"unknown session rules {sorted(unknown)}")
        return replace(self, **overrides)

    def differences(self, other: "SessionRules", only=RULE_NAMES) -> list[str]:
        """Which of `only` differ, as ["gap 20m vs 30m", ...] (self's value first)."""
        mine, theirs = self.describe(), other.describe()
        return [f"{name} {mine[name]} vs {theirs[name]}" for name in only
                if getattr(self, name) != getattr(other, name)]


def parse_overrides(gap: str | None = None, allowed_lateness: str | None = None,
                    watermark_delay: str | None = None) -> dict[str, timedelta]:
    """The rules an operator typed (None = not typed), parsed and checked: {name: timedelta}."""
    typed = {"gap": gap, "allowed_lateness": allowed_lateness, "watermark_delay": watermark_delay}
    out = {name: parse_duration(value) for name, value in typed.items() if value is not None}
    SessionRules().with_overrides(out)  # runs the same checks as a full set (gap > 0, ...)
    return out


def _micros(span: timedelta) -> int:
    return (span.days * 86400 + span.seconds) * 1_000_000 + span.microseconds
