"""Environment switches that are on unless turned off (TIDEMARK_STREAM_WARMUP, TIDEMARK_CONNECT_WARMUP).

One reading for all of them, so "off" is spelled the same way everywhere.
"""

from __future__ import annotations

import os

OFF = frozenset({"0", "false", "no", "off"})


def switched_on(name: str) -> bool:
    """False when environment variable `name` is 0, false, no or off (any case, spaces ignored); True otherwise."""
    return os.environ.get(name, "1").strip().lower() not in OFF
