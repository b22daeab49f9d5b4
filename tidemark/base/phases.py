"""Where a run's time went: seconds per named phase, each measured from the end of the one before.

The dedup's runs and the stream's micro-batches log these (`phases`), so an operator (or
bench/) sees which step of which run was slow without a profiler.
"""

from __future__ import annotations

import time


class Phases:
    """Seconds per phase of one run, in the order the phases closed."""

    def __init__(self, started: float):
        """`started`: the run's time.monotonic() at its start, which its first phase counts from."""
        self.seconds: dict[str, float] = {}
        self._mark = started

    def done(self, phase: str) -> None:
        """Close `phase` now: its seconds are the time since the previous phase closed."""
        now = time.monotonic()
        self.seconds[phase] = round(now - self._mark, 3)
        self._mark = now
