"""Human durations ("30m", "1h", "10s", "7d") used by every CLI option that takes a span of time."""

from __future__ import annotations

import re
from datetime import timedelta

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> timedelta:
    """Parse "30m" / "1h" / "10s" / "250ms" / "7d"; refuse anything else with a clear message."""
    match = _DURATION.match(str(text))
    if not match:
        raise ValueError(f"invalid duration {text!r}: expected a number followed by ms, s, m, h or d (e.g. 30m)")
    value, unit = match.groups()
    return timedelta(seconds=float(value) * _UNIT_SECONDS[unit])


def format_duration(span: timedelta) -> str:
    """Shortest exact spelling of a duration, the inverse of parse_duration for whole units."""
    micros = round(span.total_seconds() * 1_000_000)
    for unit, seconds in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if micros % (seconds * 1_000_000) == 0:
            return f"{micros // (seconds * 1_000_000)}{unit}"
    return f"{micros / 1000:g}ms"


def parse_interval(text: str, name: str, minimum: timedelta) -> timedelta | None:
    """A schedule interval from the environment (the DAGs' TIDEMARK_*_INTERVAL).

    A duration of at least `minimum`, or "off"/"none"/"" for None (triggered runs only). A bad value
    raises, so the DAG fails to parse with a clear import error instead of running on a silent
    default.
    """
    if text.strip().lower() in ("off", "none", ""):
        return None
    span = parse_duration(text.strip())
    if span < minimum:
        raise ValueError(f"{name} {text!r} is below {format_duration(minimum)}")
    return span
