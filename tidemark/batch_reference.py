"""An independent batch sessionization of landed files, to check the lake against (`tidemark demo`
and the test suite: the one batch reference).

Deliberately shares nothing with the stream's sessionization or the Spark SQL: plain Python over the
raw landed lines. It reads them with the one implementation of the input contract the stream uses
too (tidemark.contract, docs/input-contract.md), keeps one copy per event
(user_id, event_id, event_ts), sorts each user's events by time and
starts a new session wherever two neighbours are at least `gap` apart. A session belongs to the UTC
date of its first event. If the stream, the dedup SQL and this agree, the promise holds.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from tidemark import contract
from tidemark.times import from_micros, parse_iso, to_micros


@dataclass(frozen=True)
class Session:
    user_id: str
    session_start: datetime
    session_end: datetime
    event_count: int
    event_ids: frozenset = frozenset()  # which events (the tests compare them; the lake keeps them too)

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
    try:
        return from_micros(contract.parse_event_ts(text))
    except contract.Refused:
        return None


def valid_events(lines, received_us: int | None = None):
    """(user_id, event_id, event_ts) of every line that follows the input contract (tidemark.contract).

    received_us: the receipt time the clock guard compares with; by default now, which is never
    earlier than any micro-batch of the stream that read these lines, so an event refused here as
    from the future was refused by the stream too.
    """
    now = received_us if received_us is not None else to_micros(datetime.now(timezone.utc))
    for event in contract.read_lines(lines, now):
        yield event.user_id, event.event_id, event.event_ts


def landed_lines(landing: str):
    """Every line (bytes) of every landed file, split as the stream splits them (contract.split_lines).

    Hidden and _-prefixed names are not data, as for Spark.
    """
    for root, dirs, files in os.walk(landing):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
        for name in sorted(files):
            if name.startswith((".", "_")):
                continue
            with open(os.path.join(root, name), "rb") as handle:
                yield from contract.split_lines(handle.read())


def sessionize(events, gap: timedelta) -> list[Session]:
    """events: (user_id, event_id, event_ts). An event is the whole triple: copies repeat it."""
    by_user: dict[str, list[tuple[datetime, str]]] = {}
    for user_id, event_id, moment in set(events):
        by_user.setdefault(user_id, []).append((moment, event_id))
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


def _close(user_id: str, items: list[tuple[datetime, str]]) -> Session:
    return Session(user_id, items[0][0], items[-1][0], len(items), frozenset(e for _, e in items))


def sessions_of_landing(landing: str, gap: timedelta) -> list[Session]:
    """Every session of everything landed so far."""
    return sessionize(valid_events(landed_lines(landing)), gap)


def kept_copies_of_landing(landing: str) -> dict:
    """{(user_id, event_id, event_ts_us): the kept copy (tidemark.contract.Event)} of everything landed."""
    now = to_micros(datetime.now(timezone.utc))
    return contract.kept_copies(contract.read_lines(landed_lines(landing), now))


def sessions_by_date(landing: str, gap: timedelta) -> dict[str, set[tuple]]:
    """{event_date: {session key}} of everything landed so far."""
    out: dict[str, set[tuple]] = {}
    for session in sessions_of_landing(landing, gap):
        out.setdefault(session.event_date, set()).add(session.key())
    return out


def lake_keys(records: list[dict]) -> set[tuple]:
    """Session keys of `tidemark.reader` records (session_start/session_end as RFC 3339 text)."""
    out = set()
    for row in records:
        start, end = parse_iso(row["session_start"]), parse_iso(row["session_end"])
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
    from tidemark import receipts

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
