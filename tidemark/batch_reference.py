"""An independent batch sessionization of landed files, to check the lake against (`tidemark demo`).

Deliberately shares nothing with the stream or the Spark SQL: plain Python over the raw landed
lines. It applies the input contract (docs/input-contract.md: a JSON object with non-empty
event_id, user_id, event_type and an RFC 3339 event_ts with offset), keeps one copy per
(user_id, event_id) (the earliest event_ts if copies disagree), sorts each user's events by time and
starts a new session wherever two neighbours are at least `gap` apart. A session belongs to the UTC
date of its first event. If the stream, the dedup SQL and this agree, the promise holds.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$")


@dataclass(frozen=True)
class Session:
    user_id: str
    session_start: datetime
    session_end: datetime
    event_count: int

    @property
    def event_date(self) -> str:
        return self.session_start.date().isoformat()

    def key(self) -> tuple:
        """What two sessionizations must agree on."""
        return (self.user_id, _iso(self.session_start), _iso(self.session_end), self.event_count)


def _iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat(timespec="microseconds")


def parse_ts(text: object) -> datetime | None:
    """RFC 3339 with an offset -> aware UTC datetime (fraction truncated to microseconds), else None."""
    if not isinstance(text, str) or not _RFC3339.match(text):
        return None
    text = text.replace("z", "Z").replace("t", "T").replace(" ", "T")
    head, dot, rest = text.partition(".")
    if dot:
        digits = re.match(r"\d+", rest).group(0)
        text = f"{head}.{digits[:6].ljust(6, '0')}{rest[len(digits):]}"
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(timezone.utc)
    except ValueError:
        return None


def valid_events(lines):
    """(user_id, event_id, event_ts) of every line that follows the input contract."""
    for line in lines:
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if not isinstance(obj, dict):
            continue
        if any(obj.get(k) is None or str(obj.get(k)).strip() == ""
               for k in ("event_id", "user_id", "event_type", "event_ts")):
            continue
        moment = parse_ts(obj["event_ts"])
        if moment is not None:
            yield str(obj["user_id"]), str(obj["event_id"]), moment


def landed_lines(landing: str):
    """Every line of every landed file (hidden and _-prefixed names are not data, as for Spark)."""
    for root, _, files in os.walk(landing):
        for name in sorted(files):
            if name.startswith((".", "_")):
                continue
            with open(os.path.join(root, name), encoding="utf-8", errors="replace") as handle:
                yield from handle.read().splitlines()


def sessionize(events, gap: timedelta) -> list[Session]:
    first_seen: dict[tuple[str, str], datetime] = {}
    for user_id, event_id, moment in events:
        key = (user_id, event_id)
        first_seen[key] = min(moment, first_seen.get(key, moment))
    by_user: dict[str, list[datetime]] = {}
    for (user_id, _), moment in first_seen.items():
        by_user.setdefault(user_id, []).append(moment)
    sessions = []
    for user_id, moments in by_user.items():
        moments.sort()
        start = previous = moments[0]
        count = 1
        for moment in moments[1:]:
            if moment - previous >= gap:
                sessions.append(Session(user_id, start, previous, count))
                start, count = moment, 0
            previous = moment
            count += 1
        sessions.append(Session(user_id, start, previous, count))
    return sorted(sessions, key=lambda s: (s.user_id, s.session_start))


def sessions_by_date(landing: str, gap: timedelta) -> dict[str, set[tuple]]:
    """{event_date: {session key}} of everything landed so far."""
    out: dict[str, set[tuple]] = {}
    for session in sessionize(valid_events(landed_lines(landing)), gap):
        out.setdefault(session.event_date, set()).add(session.key())
    return out


def lake_keys(records: list[dict]) -> set[tuple]:
    """Session keys of `tidemark.reader` records (session_start/session_end as RFC 3339 text)."""
    out = set()
    for row in records:
        start = datetime.fromisoformat(str(row["session_start"]).replace("Z", "+00:00"))
        end = datetime.fromisoformat(str(row["session_end"]).replace("Z", "+00:00"))
        out.add((row["user_id"], _iso(start), _iso(end), int(row["event_count"])))
    return out


@dataclass
class DateCheck:
    event_date: str
    expected: int
    published: int
    missing: int      # in the recomputation, not in the lake's current version
    unexpected: int   # in the lake, not in the recomputation
    version: str | None

    @property
    def ok(self) -> bool:
        return self.missing == 0 and self.unexpected == 0


def check_lake(lake: str, landing: str, gap: timedelta) -> list[DateCheck]:
    """Compare every date's current deduplicated version (tidemark.reader) with the recomputation."""
    from tidemark import publish, reader
    from streaming_job import receipts

    expected = sessions_by_date(landing, gap)
    dates = sorted(set(expected) | set(receipts.list_event_dates(lake)) | set(publish.list_dedup_dates(lake)))
    out = []
    for event_date in dates:
        want = expected.get(event_date, set())
        try:
            table = reader.read_sessions(lake, event_date,
                                         columns=["user_id", "session_start", "session_end", "event_count"])
            got, version = lake_keys(reader.to_records(table)), table.schema.metadata[b"tidemark.version"].decode()
        except reader.NoVersion:
            got, version = set(), None
        out.append(DateCheck(event_date, len(want), len(got), len(want - got), len(got - want), version))
    return out
