"""The batch reference the tests check the lake against: tidemark.demo.batch_reference (plain Python over
the raw landed lines, sharing nothing with the stream's or the SQL's sessionization), under the
names the tests use. One implementation: `tidemark demo` checks the lake with the same code."""

from __future__ import annotations

from tidemark.demo.batch_reference import (  # noqa: F401 - re-exported
    Session,
    kept_copies_of_landing,
    landed_lines,
    parse_ts,
    sessionize,
    sessions_of_landing,
    valid_events,
)

RefSession = Session
