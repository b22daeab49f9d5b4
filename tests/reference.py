"""An independent batch sessionization, the reference the lake is checked against.

Deliberately written without Spark and without tidemark's SQL: plain Python over the raw landed
lines. It applies the input contract (valid JSON object, non-empty event_id, user_id, event_type,
RFC 3339 event_ts with offset), keeps one copy per (user_id, event_id), then splits each user's
time-ordered events wherever two neighbours are at least `gap` apart.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$")


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


def parse_ts(text: str) -> datetime | None:
    if not isinstance(text, str) or not _RFC3339.match(text):
        return None
    text = text.replace("z", "Z").replace("t", "T")
    main, _, frac_and_zone = text.partition(".")
    if frac_and_zone:  # Python parses at most 6 fractional digits: truncate like Spark does
        digits = re.match(r"\d+", frac_and_zone).group(0)
        text = f"{main}.{digits[:6].ljust(6, '0')}{frac_and_zone[len(digits):]}"
    try:
        return datetime.fromisoformat(text.replace(" ", "T")).astimezone(timezone.utc)
    except ValueError:
        return None


def valid_events(lines):
    """(user_id, event_id, event_ts) of every valid line."""
    for line in lines:
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if not isinstance(obj, dict):
            continue
        fields = [obj.get(k) for k in ("event_id", "user_id", "event_type", "event_ts")]
        if any(v is None or str(v).strip() == "" for v in fields):
            continue
        ts = parse_ts(obj["event_ts"])
        if ts is None:
            continue
        yield str(obj["user_id"]), str(obj["event_id"]), ts


def landed_lines(landing: str):
    for root, _, files in os.walk(landing):
        for name in sorted(files):
            if name.startswith((".", "_")):
                continue
            with open(os.path.join(root, name), encoding="utf-8") as handle:
                for line in handle.read().splitlines():
                    yield line


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
