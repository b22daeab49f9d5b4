"""The demo's workload, landed in waves the way a day of phone traffic arrives.

tidemark.demo.generate's deliveries (in arrival order), cut into files, the files grouped into waves that are landed one after another with pauses, the way a day of phone
traffic arrives: mostly on time, some minutes late, a few sessions days late (the last waves),
duplicates, a few malformed lines.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tidemark.demo.batch_reference import parse_ts
from tidemark.demo.generate import Delivery, Workload, build, split_files, write_file

# Small enough for a 2-core CI machine to finish in minutes, big enough to show every kind of
# lateness: more offline (days-late) sessions than the generator's default.
DEMO_WORKLOAD = Workload(
    events=800, users=16, days=2, files=8, seed=23, offline_session_rate=0.12, duplicate_rate=0.04, malformed_rate=0.004
)


@dataclass
class Wave:
    """A group of files landed together, and when and where they were landed."""

    index: int
    files: list[list[Delivery]]
    landed_at: datetime | None = None
    paths: list[str] = field(default_factory=list)

    @property
    def deliveries(self) -> list[Delivery]:
        """The wave's lines, in arrival order."""
        return [d for chunk in self.files for d in chunk]

    def describe(self) -> dict[str, Any]:
        """Counts of what this wave carries, by how late it is (arrival - event time)."""
        counts = {"lines": 0, "malformed": 0, "on_time": 0, "minutes_late": 0, "hours_late": 0, "days_late": 0}
        for _delivery, lateness in lateness_of(self.deliveries):
            counts["lines"] += 1
            if lateness is None:
                counts["malformed"] += 1
            elif lateness < 60:
                counts["on_time"] += 1
            elif lateness < 3600:
                counts["minutes_late"] += 1
            elif lateness < 86400:
                counts["hours_late"] += 1
            else:
                counts["days_late"] += 1
        first, last = self.deliveries[0].arrival, self.deliveries[-1].arrival
        return {
            "wave": self.index + 1,
            "files": len(self.files),
            **counts,
            "arrivals": f"{first:%m-%d %H:%M} .. {last:%m-%d %H:%M}",
        }


def lateness_of(deliveries: list[Delivery]) -> Iterator[tuple[Delivery, float | None]]:
    """(delivery, seconds between event time and arrival), None for a line without a valid event_ts."""
    for delivery in deliveries:
        try:
            moment = parse_ts(json.loads(delivery.line).get("event_ts"))
        except (ValueError, AttributeError):
            moment = None
        yield delivery, None if moment is None else (delivery.arrival - moment).total_seconds()


def plan(workload: Workload = DEMO_WORKLOAD, waves: int = 4) -> tuple[list[Wave], dict[str, Any]]:
    """The workload's files in arrival order, grouped into `waves` waves of consecutive files."""
    if waves < 1 or waves > workload.files:
        raise ValueError(f"waves must be between 1 and the number of files ({workload.files})")
    deliveries, counts = build(workload)
    chunks = split_files(deliveries, workload.files)
    per, extra = divmod(len(chunks), waves)
    out, at = [], 0
    for i in range(waves):
        take = per + (1 if i < extra else 0)
        out.append(Wave(i, chunks[at : at + take]))
        at += take
    return out, counts


def land(landing: str, wave: Wave, first_index: int) -> list[str]:
    """Write the wave's files atomically, with increasing modification times (arrival order)."""
    base = time.time()
    wave.paths = [write_file(landing, first_index + i, chunk, base + i / 1000) for i, chunk in enumerate(wave.files)]
    wave.landed_at = datetime.fromtimestamp(base).astimezone()
    return [os.path.basename(p) for p in wave.paths]
