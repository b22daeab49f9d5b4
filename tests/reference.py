"""An independent batch sessionization, the reference the lake is checked against.

Deliberately written without Spark and without tidemark's SQL: plain Python over the raw landed
lines. The input contract (which lines are events) is read by tidemark.batch_reference, the
Spark-free reference `tidemark demo` uses too; this module keeps the event ids of each session,
which the tests compare. One copy per event (user_id, event_id, event_ts), then each user's time-ordered events
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
    event_count: int

    @property
    def event_date(self) -> str:
        return self.session_start.date().isoformat()


def sessionize(events, gap: timedelta) -> list[RefSession]:
    """events: (user_id, event_id, event_ts); an event is the whole triple, copies repeat it."""
    by_user: dict[str, list[tuple[datetime, str]]] = {}
    for user_id, event_id, ts in set(events):
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
    return RefSession(user_id, items[0][0], items[-1][0], frozenset(e for _, e in items), len(items))


def sessions_of_landing(landing: str, gap: timedelta) -> list[RefSession]:
    return sessionize(valid_events(landed_lines(landing)), gap)


def kept_copies_of_landing(landing: str) -> dict:
    """{(user_id, event_id, event_ts_us): the kept copy (tidemark.contract.Event)} of everything landed."""
    from tidemark import contract
    now = int(datetime.now().timestamp() * 1_000_000)
    return contract.kept_copies(contract.read_lines(landed_lines(landing), now))
