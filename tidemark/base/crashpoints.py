"""Named points where a test can make the process die at once, as a SIGKILL would.

`TIDEMARK_CRASH_AT=<point>` ends the process (os._exit, no cleanup, no flush) the first time it
reaches `<point>`; `<point>@N` the N-th time. Unset (production), `reach` costs one dictionary
lookup. The kill tests use it to stop a stream at an exact step of a micro-batch, where a timed
SIGKILL lands anywhere.

Points:
  receipt-marker   after one receipt partition's marker is written (markers then go one at a time)
  batch-committed  after a micro-batch's "batch committed" line, before Spark's commit log entry
  ledger-recorded  after a micro-batch's landing ledger entry, before any of its outputs
"""

from __future__ import annotations

import os
import sys
import threading

ENV = "TIDEMARK_CRASH_AT"
EXIT_CODE = 137  # what a shell reports for a SIGKILL

_reached: dict[str, int] = {}
_lock = threading.Lock()


def _target() -> tuple[str, int] | None:
    value = os.environ.get(ENV)
    if not value:
        return None
    point, _, count = value.partition("@")
    return point, int(count or 1)


def armed(point: str) -> bool:
    """Whether this process is set to die at `point`."""
    target = _target()
    return target is not None and target[0] == point


def reach(point: str) -> None:
    """Die here if this process is set to die at the current reach of `point`."""
    target = _target()
    if target is None or target[0] != point:
        return
    with _lock:
        _reached[point] = _reached.get(point, 0) + 1
        if _reached[point] == target[1]:
            sys.stderr.write(f"{ENV}: process ended at {point}@{target[1]}\n")
            sys.stderr.flush()
            os._exit(EXIT_CODE)
