"""An independent batch sessionization of landed files, to check the lake against.

`tidemark demo` and the test suite use it: the one batch reference.

Deliberately shares nothing with the stream's sessionization or the Spark SQL: plain Python over the
raw landed lines. It reads them with the one implementation of the input contract the stream uses
too (tidemark.ingest.contract, docs/input-contract.md), keeps one copy per event
(user_id, event_id, event_ts), sorts each user's events by time and
starts a new session wherever two neighbours are at least the rules' split gap apart (the gap, or
the gap + 1 us under the `merge` gap boundary: tidemark/base/session_rules.py). A session belongs to the UTC
date of its first event. If the stream, the dedup SQL and this agree, the promise holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from typing import Any

from tidemark.base import layout
from tidemark.base.session_rules import SessionRules
from tidemark.base.times import from_micros, parse_iso, to_micros
from tidemark.iceberg import reader, table_versions
from tidemark.ingest import contract, landing, landing_archive, landing_ledger
from tidemark.session import rules_record, session_schema
from tidemark.store.lake import Lake

# The columns two sessionizations must agree on (Session.key, lake_keys): the session row's.
KEY_COLUMNS = tuple(
    c.name
    for c in (
        session_schema.USER_ID,
        session_schema.SESSION_START,
        session_schema.SESSION_END,
        session_schema.EVENT_COUNT,
    )
)


# An event as `sessionize` takes it: (user_id, event_id, event_ts) or with its event_type too.
EventTuple = tuple[str, str, datetime] | tuple[str, str, datetime, str]
# A session as two sessionizations must agree on it: (user_id, start, end as RFC 3339, event_count).
SessionKey = tuple[str, str, str, int]


@dataclass(frozen=True)
class Session:
    """A session of the batch reference: its fields are the session row's columns of the same name."""

    user_id: str
    session_start: datetime
    session_end: datetime
    event_count: int
    event_ids: frozenset[str] = frozenset()  # which events (the tests compare them; the lake keeps them too)
    # distinct event types of its events' kept copies; None when sessionized without types
    event_type_count: int | None = None

    @property
    def event_date(self) -> date:
        """The UTC date of its start: the partition it belongs to."""
        return self.session_start.date()

    def key(self) -> SessionKey:
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


def valid_events(lines: Iterable[bytes | str], received_us: int | None = None) -> Iterator[EventTuple]:
    """(user_id, event_id, event_ts) of every line that follows the input contract (tidemark.ingest.contract).

    received_us: the receipt time the clock guard compares with; by default now. To judge each line
    against the time the stream received it, use events_of_landing with the lake.
    """
    now = received_us if received_us is not None else to_micros(datetime.now(timezone.utc))
    for event in contract.read_lines(lines, now):
        yield event.user_id, event.event_id, event.event_ts


def input_files(landing_uri: str, archive_uri: str | None = None) -> Iterator[tuple[str, str, str, landing.LandedFile]]:
    """(folder, path in that folder, path in the landing, LandedFile) of every input file landed so far.

    Those in the landing and, with the archive (`tidemark stream --archive`,
    tidemark.ingest.landing_archive), every content the stream moved there once its batch was
    committed, under `received=YYYY-MM-DD/<its path in the landing>` and, for another content of a
    name archived the same day, that path with `.sha256-<digest>` appended. Files it set aside
    (`_replaced/`) are hidden names: not input, as in the landing.
    """
    for found in landing.list_landing(landing_uri):
        if found.verdict == landing.INPUT:
            yield landing_uri, found.path, found.path, found
    if not archive_uri:
        return
    for found in landing.list_landing(archive_uri):
        day, _, archived = found.path.partition("/")
        if found.verdict == landing.INPUT and day.startswith(f"{landing_archive.RECEIVED_KEY}=") and archived:
            yield archive_uri, found.path, landing_archive.original_path(archived), found


def landed_files(
    landing_uri: str, lake: Lake | None = None, now_us: int | None = None, archive: str | None = None
) -> Iterator[tuple[str, int, list[bytes]]]:
    """(path, receipt time in us, lines) of every input file of the landing, and of the archive.

    tidemark.ingest.landing's rule: hidden and in-progress names are not input, a leading BOM is not
    part of a line. The archive when given (input_files); paths are the files' paths in the landing.

    With the lake, a file the stream read is judged at the receipt time its landing ledger records
    (tidemark.ingest.landing_ledger), so the clock guard decides here exactly as it did in the stream,
    however much later the reference runs; a file not read yet, at now_us (default: now). A file
    replaced after it was read is left out: its new content is in the quarantine.
    """
    now = now_us if now_us is not None else to_micros(datetime.now(timezone.utc))
    history = landing_ledger.read_history(lake) if lake is not None else {}
    for folder, path, original, found in input_files(landing_uri, archive):
        records = history.get(original, [])
        if folder == landing_uri:
            record = records[-1] if records else None
            if record is not None and record.verdict == landing_ledger.REPLACED_VERDICT and record.matches(found):
                continue
        else:
            record = _archived_read(records, path, original, found)
        received = (
            landing_ledger.receipt_us(record.receipt_ts)
            if record is not None and record.verdict == landing.INPUT
            else now
        )
        yield original, received, landing.file_lines(landing.read_file(folder, path))


def _archived_read(
    records: list[landing_ledger.FileRecord], path: str, original: str, found: landing.LandedFile
) -> landing_ledger.FileRecord | None:
    """The ledger's record of the read that an archived file holds.

    A read of its name on the day of its received= folder with its size (and its modification time, which a move on a local disk
    keeps); of several such reads, the first for the name itself (the first content archived that
    day), the last for a version. Without one (a file archived by hand), the name's newest record.
    """
    try:
        day: date | None = layout.as_event_date(path.partition("/")[0].partition("=")[2])  # the folder's name
    except layout.InvalidPartitionValue:
        day = None  # not a day's folder: no read matches it
    reads = [
        r
        for r in records
        if r.verdict == landing.INPUT
        and layout.parse_receipt_ts(r.receipt_ts).date() == day
        and r.size in (None, found.size)
    ]
    exact = [r for r in reads if r.mtime_ms == found.mtime_ms]
    if exact:
        return exact[0]
    if reads:
        return reads[0] if path.endswith("/" + original) else reads[-1]
    return records[-1] if records else None


def landed_lines(landing_uri: str, archive: str | None = None) -> Iterator[bytes]:
    """Every line (bytes) of every input file of the landing (and the archive), as the stream reads them."""
    for _, _, lines in landed_files(landing_uri, archive=archive):
        yield from lines


def events_of_landing(
    landing_uri: str,
    lake: Lake | None = None,
    now_us: int | None = None,
    rules: contract.InputRules = contract.InputRules(),
    archive: str | None = None,
) -> Iterator[contract.Event]:
    """The events (tidemark.ingest.contract.Event) of the landing (and the archive).

    Each line is judged at its receipt time, by the input rules its batch recorded in the ledger (`rules` for a file no
    recorded batch read).
    """
    ledger = landing_ledger.read_ledger(lake) if lake is not None else {}
    for path, received, lines in landed_files(landing_uri, lake, now_us, archive):
        record = ledger.get(path)
        recorded = record.input_rules if record is not None and record.verdict == landing.INPUT else None
        yield from contract.read_lines(lines, received, recorded or rules)


def sessionize(events: Iterable[EventTuple], rules: SessionRules | timedelta) -> list[Session]:
    """The sessions of `events` under `rules`, by user and start.

    events: (user_id, event_id, event_ts) or (user_id, event_id, event_ts, event_type). An event
    is the triple: copies repeat it, and of copies of different types the kept one has the smallest
    type (THE copy rule, tidemark.ingest.contract.copy_order: the smallest (event_type, payload)).
    rules: the lake's rules (their gap and gap boundary), or a bare gap with the default boundary.
    With types, each session's event_type_count is the number of distinct types of its events.
    """
    gap = SessionRules.of(rules).split_gap
    kept: dict[tuple[str, str, datetime], str | None] = {}
    for event in events:
        triple = (event[0], event[1], event[2])
        kind = event[3] if len(event) > 3 else None
        held = kept.get(triple)
        if triple not in kept or (kind is not None and (held is None or kind < held)):
            kept[triple] = kind
    by_user: dict[str, list[tuple[datetime, str, str | None]]] = {}
    for (user_id, event_id, moment), kind in kept.items():
        by_user.setdefault(user_id, []).append((moment, event_id, kind))
    sessions = []
    for user_id, items in by_user.items():
        items.sort(key=lambda item: item[:2])
        current = [items[0]]
        for item in items[1:]:
            if item[0] - current[-1][0] >= gap:
                sessions.append(_close(user_id, current))
                current = []
            current.append(item)
        sessions.append(_close(user_id, current))
    return sorted(sessions, key=lambda s: (s.user_id, s.session_start))


def _close(user_id: str, items: list[tuple[datetime, str, str | None]]) -> Session:
    kinds = {kind for _, _, kind in items}
    return Session(
        user_id,
        items[0][0],
        items[-1][0],
        len(items),
        frozenset(e for _, e, _ in items),
        None if None in kinds else len(kinds),
    )


def sessions_of_landing(
    landing_uri: str, rules: SessionRules | timedelta, lake: Lake | None = None, archive: str | None = None
) -> list[Session]:
    """Every session of everything landed so far (with the lake: each line judged at its receipt time)."""
    events = events_of_landing(landing_uri, lake, archive=archive)
    return sessionize(((e.user_id, e.event_id, e.event_ts, e.event_type) for e in events), rules)


def kept_copies_of_landing(landing_uri: str, lake: Lake | None = None) -> dict[tuple[str, str, int], contract.Event]:
    """{(user_id, event_id, event_ts_us): the kept copy (tidemark.ingest.contract.Event)} of everything landed."""
    return contract.kept_copies(events_of_landing(landing_uri, lake))


def sessions_by_date(
    landing_uri: str, rules: SessionRules | timedelta, lake: Lake | None = None, archive: str | None = None
) -> dict[date, set[SessionKey]]:
    """{event_date: {session key}} of everything landed so far (the archive too, when given)."""
    out: dict[date, set[SessionKey]] = {}
    for session in sessions_of_landing(landing_uri, rules, lake, archive):
        out.setdefault(session.event_date, set()).add(session.key())
    return out


def lake_keys(records: list[dict[str, Any]]) -> set[SessionKey]:
    """Session keys of `tidemark.iceberg.reader` records (session_start/session_end as RFC 3339 text)."""
    user_id, session_start, session_end, event_count = KEY_COLUMNS
    out = set()
    for row in records:
        start, end = parse_iso(row[session_start]), parse_iso(row[session_end])
        out.add((row[user_id], _iso(start), _iso(end), int(row[event_count])))
    return out


@dataclass
class DateCheck:
    """One date of `check_lake`: the sessions expected and published, and how they differ."""

    event_date: date
    expected: int
    published: int
    missing: int  # in the recomputation, not in the lake's current version
    unexpected: int  # in the lake, not in the recomputation
    version: str | None

    @property
    def ok(self) -> bool:
        """The lake's current version holds exactly the recomputed sessions."""
        return self.missing == 0 and self.unexpected == 0


def check_lake(
    lake: Lake, landing: str, rules: SessionRules | timedelta | None = None, archive: str | None = None
) -> list[DateCheck]:
    """Compare every date's current deduplicated version with the recomputation of everything landed.

    The version as tidemark.iceberg.reader reads it, the recomputation under `rules` (default: the rules the lake records, gap boundary included) of everything landed:
    the landing, and the archive the stream moved read files to (`tidemark stream --archive`).
    """
    if rules is None:
        rules = rules_record.rules_in_force(lake)[0]
    expected = sessions_by_date(landing, rules, lake, archive)
    dates = sorted(
        set(expected) | set(lake.sessions_root().event_dates()) | set(table_versions.dates_with_version(lake))
    )
    out = []
    for event_date in dates:
        want = expected.get(event_date, set())
        try:
            table = reader.read_sessions(lake, event_date, columns=list(KEY_COLUMNS))
            got, version = lake_keys(reader.to_records(table)), table.schema.metadata[b"tidemark.version"].decode()
        except reader.NoVersion:
            got, version = set(), None
        out.append(DateCheck(event_date, len(want), len(got), len(want - got), len(got - want), version))
    return out
