"""An independent batch sessionization, the reference the lake is checked against.

Deliberately written without Spark and without tidemark's SQL: plain Python over the raw landed
lines. The input contract (which lines are events) is read by tidemark.batch_reference, the
Spark-free reference `tidemark demo` uses too; this module keeps the event ids of each session,
which the tests compare. One copy per (user_id, event_id), then each user's time-ordered events
split wherever two neighbours are at least `gap` apart.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from tidemark.batch_reference import landed_lines, parse_ts, valid_events  # noqa: F401 (re-exported)


@dataclass(frozen=True)
class RefSession:
    user_id: str
    session_start: datetime
    session_end: datetime
    event_ids: frozenset

    @property
    def event_count(self) -> int:
        return len(self.event_ids)

    @property
    def event_date(self) -> str:
        return self.session_start.date().isoformat()


def sessionize(events, gap: timedelta) -> list[RefSession]:
    distinct: dict[tuple[str, str], datetime] = {}
    for user_id, event_id, ts in events:
        key = (user_id, event_id)
        distinct[key] = min(ts, distinct.get(key, ts))
    by_user: dict[str, list[tuple[datetime, str]]] = {}
    for (user_id, event_id), ts in distinct.items():
        by_user.setdefault(user_id, []).append((ts, event_id))
    sessions = []
    for user_id, items in by_user.items():
        items.sort()
        current = [items[0]]
        for item in items[1:]:
            if item[0] - current[-1][0] >= gap:
                sessions.append(_close(user_id, current))
                current = []
            current.append(item)
        sessions.append(_close(user_id, current))
    return sorted(sessions, key=lambda s: (s.user_id, s.session_start))


def _close(user_id, items) -> RefSession:
    return RefSession(user_id, items[0][0], items[-1][0], frozenset(e for _, e in items))


def sessions_of_landing(landing: str, gap: timedelta) -> list[RefSession]:
    return sessionize(valid_events(landed_lines(landing)), gap)
