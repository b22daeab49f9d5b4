"""Session rules shared by the stream, the dedup step, the readers and the tests' reference.

The rule itself (gaps and islands) is SQL in dedup_sql/sessionize.sql; this module holds the
parameters and the pane vocabulary, Beam's terms:
  early     a pane of a session whose window (last event + gap) the watermark has not passed
  on_time   the pane emitted in the batch whose watermark passed the session's window end
  late      a later pane of a closed session, updated by an event within the allowed lateness
  too_late  a fragment of events later than the allowed lateness; not kept in state, stitched by dedup
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from tidemark.base.durations import format_duration, parse_duration

PANE_KINDS = ("early", "on_time", "late", "too_late")
# The duration rules, in the order every message and record lists them.
DURATION_RULES = ("gap", "allowed_lateness", "watermark_delay")
# Every rule: the durations, then what happens at exactly one gap (GAP_BOUNDARIES).
RULE_NAMES = DURATION_RULES + ("gap_boundary",)
# Two events of one user exactly one gap apart:
#   split  start two sessions (Beam's Sessions: IntervalWindow treats touching windows as disjoint);
#          the default, what every lake was written with before the boundary was a rule
#   merge  join one session (Spark's session_window; Flink's TimeWindow.intersects is inclusive)
# Timestamps are whole microseconds, so merging at gap G is splitting at G + 1 us: the SQL and every
# bound derived from the gap take that one split threshold (SessionRules.split_gap / gap_us).
GAP_BOUNDARIES = ("split", "merge")
DEFAULT_GAP_BOUNDARY = "split"
_ONE_US = timedelta(microseconds=1)


# Rules an operator typed: {name: timedelta (a duration rule) or str (gap_boundary)}.
Overrides = dict[str, "timedelta | str"]


@dataclass(frozen=True)
class SessionRules:
    """The session rules: the gap, the allowed lateness, the watermark delay and the gap boundary."""

    gap: timedelta = timedelta(minutes=30)
    allowed_lateness: timedelta = timedelta(hours=1)
    watermark_delay: timedelta = timedelta(minutes=10)
    gap_boundary: str = DEFAULT_GAP_BOUNDARY

    def __post_init__(self) -> None:
        """Refuse rules that break a rule (a gap that is not positive, an unknown boundary, ...)."""
        if self.gap_boundary not in GAP_BOUNDARIES:
            raise ValueError(f"gap boundary must be one of {', '.join(GAP_BOUNDARIES)}, got {self.gap_boundary!r}")
        if self.gap <= timedelta(0):
            raise ValueError("gap must be positive")
        if self.allowed_lateness < timedelta(0) or self.watermark_delay < timedelta(0):
            raise ValueError("allowed lateness and watermark delay must not be negative")

    @classmethod
    def parse(
        cls,
        gap: str = "30m",
        allowed_lateness: str = "1h",
        watermark_delay: str = "10m",
        gap_boundary: str = DEFAULT_GAP_BOUNDARY,
    ) -> SessionRules:
        """Rules from their text ("30m", "1h", "split")."""
        return cls(parse_duration(gap), parse_duration(allowed_lateness), parse_duration(watermark_delay), gap_boundary)

    @classmethod
    def of(cls, rules: SessionRules | timedelta) -> SessionRules:
        """Rules, or a bare gap meaning the default rules with that gap (the boundary `split`)."""
        if isinstance(rules, SessionRules):
            return rules
        if isinstance(rules, timedelta):
            return cls(gap=rules)
        raise TypeError(f"expected SessionRules or a gap (timedelta), got {type(rules).__name__}")

    @property
    def split_gap(self) -> timedelta:
        """The smallest distance between neighbours that starts a new session.

        The gap under `split`, the gap + 1 us under `merge` (timestamps are whole microseconds, so
        the two are one rule). Everything that splits, closes a window or bounds a read by the gap uses this.
        """
        return self.gap + _ONE_US if self.gap_boundary == "merge" else self.gap

    @property
    def gap_us(self) -> int:
        """split_gap in microseconds: what the SQL's `:gap_us` takes.

        dedup_sql/sessionize.sql splits where neighbours are at least this far apart; a session's
        window ends this long after its last event. Equal to the gap under the default boundary `split`.
        """
        return _micros(self.split_gap)

    @property
    def allowed_lateness_us(self) -> int:
        """The allowed lateness in microseconds (the SQL's `:lateness_us`)."""
        return _micros(self.allowed_lateness)

    @property
    def watermark_delay_us(self) -> int:
        """The watermark delay in microseconds."""
        return _micros(self.watermark_delay)

    def _boundary(self) -> dict[str, str]:
        # The default boundary is left out of records, markers and ids, so that the lakes written
        # before it was a rule keep their rules_id (and with it every version's freshness).
        return {} if self.gap_boundary == DEFAULT_GAP_BOUNDARY else {"gap_boundary": self.gap_boundary}

    def value(self, name: str) -> str:
        """One rule as an operator types it ("30m", "merge")."""
        if name == "gap_boundary":
            return self.gap_boundary
        if name not in DURATION_RULES:
            raise ValueError(f"unknown session rule {name!r}")
        return format_duration(getattr(self, name))

    def describe(self) -> dict[str, str]:
        """The rules as typed; the boundary only when it is not the default `split`."""
        return {**{name: self.value(name) for name in DURATION_RULES}, **self._boundary()}

    def micros(self) -> dict[str, int | str]:
        """The canonical form (integers, so "60m" and "1h" are the same rules): records compare this.

        The gap here is the true gap (not split_gap): the boundary is its own field.
        """
        return {
            "gap_us": _micros(self.gap),
            "allowed_lateness_us": self.allowed_lateness_us,
            "watermark_delay_us": self.watermark_delay_us,
            **self._boundary(),
        }

    @classmethod
    def from_micros(cls, values: Mapping[str, Any]) -> SessionRules:
        """Rules from their canonical form (`micros`, as a record or marker holds it: JSON)."""
        return cls(
            **{name: timedelta(microseconds=int(values[f"{name}_us"])) for name in DURATION_RULES},
            gap_boundary=values.get("gap_boundary", DEFAULT_GAP_BOUNDARY),
        )

    def with_overrides(self, overrides: Overrides) -> SessionRules:
        """These rules with some of them replaced (the options an operator typed)."""
        unknown = set(overrides) - set(RULE_NAMES)
        if unknown:
            raise ValueError(f"unknown session rules {sorted(unknown)}")
        return replace(self, **overrides)  # type: ignore[arg-type]  # names checked against RULE_NAMES above

    def differences(self, other: SessionRules, only: Iterable[str] = RULE_NAMES) -> list[str]:
        """Which of `only` differ, as ["gap 20m vs 30m", ...] (self's value first)."""
        return [
            f"{name} {self.value(name)} vs {other.value(name)}"
            for name in only
            if getattr(self, name) != getattr(other, name)
        ]


def parse_overrides(
    gap: str | None = None,
    allowed_lateness: str | None = None,
    watermark_delay: str | None = None,
    gap_boundary: str | None = None,
) -> Overrides:
    """The rules an operator typed (None = not typed), parsed and checked: {name: timedelta or str}."""
    typed = {"gap": gap, "allowed_lateness": allowed_lateness, "watermark_delay": watermark_delay}
    out: Overrides = {name: parse_duration(value) for name, value in typed.items() if value is not None}
    if gap_boundary is not None:
        out["gap_boundary"] = gap_boundary
    SessionRules().with_overrides(out)  # runs the same checks as a full set (gap > 0, boundary known, ...)
    return out


def _micros(span: timedelta) -> int:
    return (span.days * 86400 + span.seconds) * 1_000_000 + span.microseconds
