"""A published version of an event date, as a value.

What a dedup run's marker holds and what the table says about its commit.

Two records, one per place a version is written:

- `VersionRecord`: a run's marker (`sessions_dedup/data/event_date=D/run=<run_id>/_tidemark_run.json`,
  written once by tidemark.deduplication.dedup before the commit, never rewritten), with, once the
  table has made it current or listed it, its `Commit`;
- `Commit`: what the table holds for a committed version (the version file's name, or the table
  property `tidemark.current.D` of tables written by older tidemarks, or a snapshot's summary): the
  version id, its run, the version it replaced and when.

`VersionRecord.from_marker` / `to_marker` are the only conversions between a marker's JSON and the
record: each typed field (dates, instants, the gap, the rules, the mode) is parsed there once and
written there in its one text form. `Commit.from_json` / `to_json` are the only ones for the older
tables' property. The bytes of a
marker do not change with this type: a marker written from a record is the one the dict-building
code wrote (tests/test_version_record.py holds one as a fixture). A marker is read by newer and
older tidemarks alike, so a round trip keeps what it does not know (`extra`: keys of a newer
writer) and leaves out what it did not hold (`absent`: keys an older writer did not write; a
version without a recorded reach, say, is planned differently from one whose reach is null).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from datetime import date, datetime, timedelta, timezone
from typing import Any, Literal, get_args

from tidemark.base import layout, times
from tidemark.base.durations import format_duration, parse_duration
from tidemark.base.session_rules import SessionRules

# The marker's key of the session schema version its files hold: tidemark.session.session_schema's
# MARKER_KEY (that package is above this one; tests/test_version_record.py checks they agree).
SESSION_SCHEMA_KEY = "session_schema"

# How a version was computed (tidemark/deduplication/incremental.py): from the previous version's
# islands and the new receipts, or from every planned receipt.
Mode = Literal["incremental", "full"]
MODES: tuple[Mode, ...] = get_args(Mode)


@dataclass(frozen=True)
class Commit:
    """A committed version as the table records it."""

    version: str  # the version id: a receipt_ts (tidemark.base.layout's format)
    run_id: str
    previous_version: str | None  # None: the date's first version
    committed_at: str  # UTC instant as ISO 8601 text (tidemark.base.times.iso_z)
    snapshot_id: int | None = None  # the snapshot that published it, when read from the history

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> Commit:
        """The commit recorded in an older table's property `tidemark.current.D`."""
        return cls(
            version=layout.check_receipt_ts(payload["version"]),
            run_id=layout.check_run_id(payload["run_id"]),
            previous_version=payload.get("previous_version"),
            committed_at=str(payload["committed_at"]),
            snapshot_id=payload.get("snapshot_id"),
        )

    def to_json(self) -> dict[str, Any]:
        """The commit as an older table's property held it."""
        out: dict[str, Any] = {
            "version": self.version,
            "run_id": self.run_id,
            "previous_version": self.previous_version,
            "committed_at": self.committed_at,
        }
        if self.snapshot_id is not None:
            out["snapshot_id"] = self.snapshot_id
        return out


@dataclass(frozen=True)
class VersionRecord:
    """A dedup run's version of one event date: its marker, and its commit once committed."""

    event_date: date
    run_id: str
    files: tuple[str, ...] = ()  # the run's Parquet files, paths inside its folder ('bucket=<k>/<name>')
    # The layout of its sessions (tidemark/deduplication/buckets.py): the bucket count (None: files
    # written before buckets), and the files of earlier runs of the date it keeps as they are
    # ('run=<run_id>/bucket=<k>/<name>', relative to the date's folder).
    buckets: int | None = None
    carried: tuple[str, ...] = ()
    sessions: int = 0
    receipts: tuple[str, ...] = ()  # 'YYYY-MM-DD/receipt_ts' keys of the receipt partitions read, sorted
    receipts_read: int | None = None
    rows_read: int | None = None
    mode: Mode | None = None
    context_rows: int | None = None  # island rows kept in the run's context/ for the next run
    max_receipt_ts: str | None = None  # a receipt_ts (a version id's format), compared as text
    planned_through: str | None = None  # the receipt index's head when planned (None: unknown)
    lo: datetime | None = None  # the earliest event the plan can need
    horizon: datetime | None = None  # how far the context's islands are kept
    session_schema: int | None = None  # the session schema version of its files (None: 1)
    hi: date | None = None  # the last event date the plan read
    reach: datetime | None = None  # the latest end of the sessions touching D (None: no session)
    gap: timedelta | None = None  # the session gap
    rules_id: str | None = None
    rules: SessionRules | None = None  # the rules it was made under
    affected_dates: tuple[date, ...] = ()  # earlier dates whose sessions the run may have changed
    planned_on: str | None = None  # the version it was planned on (None: none)
    new_receipts: int | None = None
    # The changeset staged in its folder's changes/ (tidemark/iceberg/changes.py): {inserted, deleted,
    # updated}; None: none staged (an older tidemark's run)
    changes: dict[str, Any] | None = None
    created_at: datetime | None = None  # when its data was written (to the millisecond)
    commit: Commit | None = None  # None: not committed (a run's marker before its commit)
    # Keys of the marker this record does not know (a newer writer's): kept for the round trip.
    extra: dict[str, Any] = field(default_factory=dict)
    # Keys of the marker format the marker read did not hold (an older writer's): left out on write.
    absent: frozenset[str] = frozenset()

    # --- the boundary ------------------------------------------------------------------------------

    @classmethod
    def from_marker(cls, payload: dict[str, Any], commit: Commit | None = None) -> VersionRecord:
        """The record of a marker's JSON (the event date and run id checked: they name paths)."""
        known = {k: payload[k] for k in MARKER_KEYS if k in payload}
        values: dict[str, Any] = {k: v for k, v in known.items() if k not in _REQUIRED}
        for name in ("files", "carried", "receipts"):
            if values.get(name) is not None:
                values[name] = tuple(values[name])
        for name, (parse, _) in _TYPED.items():
            if values.get(name) is not None:
                values[name] = parse(values[name])
        return cls(
            event_date=layout.as_event_date(payload["event_date"]),
            run_id=layout.check_run_id(payload["run_id"]),
            **values,
            commit=commit,
            extra={k: v for k, v in payload.items() if k not in MARKER_KEYS},
            absent=frozenset(k for k in MARKER_KEYS if k not in payload),
        )

    @classmethod
    def holding(cls, **values: Any) -> VersionRecord:
        """A record whose marker holds exactly these keys, the rest absent.

        As a writer that recorded no others wrote it: versions of older tidemarks, in tests
        and benchmarks.
        """
        return cls(**values, absent=frozenset(MARKER_KEYS) - set(values))

    def to_marker(self) -> dict[str, Any]:
        """The marker's JSON: every key of the format but those absent, and the extra keys."""
        out: dict[str, Any] = {}
        for name in MARKER_KEYS:
            if name in self.absent:
                continue
            value = getattr(self, name)
            if name == "event_date":
                value = layout.event_date_text(value)
            elif name in _TYPED and value is not None:
                value = _TYPED[name][1](value)
            elif isinstance(value, tuple):
                value = list(value)
            out[name] = value
        return {**out, **self.extra}

    def to_json(self) -> dict[str, Any]:
        """What people and scripts are shown (`tidemark read`, inspect): the marker and the commit."""
        return {**self.to_marker(), **(self.commit.to_json() if self.commit else {})}

    # --- the commit's fields, as readers ask for them ----------------------------------------------

    @property
    def version(self) -> str | None:
        """The version id, once committed."""
        return self.commit.version if self.commit else None

    @property
    def previous_version(self) -> str | None:
        """The version it replaced, once committed (None: the date's first)."""
        return self.commit.previous_version if self.commit else None

    @property
    def published_at(self) -> datetime | None:
        """When it was committed, else when its data was written (None: a marker without either)."""
        return times.parse_iso(self.commit.committed_at) if self.commit else self.created_at

    @property
    def committed_at(self) -> str | None:
        """When it was committed (ISO), once committed."""
        return self.commit.committed_at if self.commit else None

    @property
    def snapshot_id(self) -> int | None:
        """The snapshot that published it, when read from the table's history."""
        return self.commit.snapshot_id if self.commit else None

    def committed(self, commit: Commit) -> VersionRecord:
        """This run's record with the table's commit of it."""
        return replace(self, commit=commit)

    # --- what older writers may not have recorded --------------------------------------------------

    def records(self, key: str) -> bool:
        """Did the marker hold this key (a version written before it existed did not)?"""
        return key not in self.absent

    @property
    def schema_version(self) -> int:
        """The session schema version of the run's files (markers written before it: 1)."""
        return self.session_schema or 1

    @property
    def event_date_text(self) -> str:
        """The event date as YYYY-MM-DD."""
        return layout.event_date_text(self.event_date)


def _mode(value: object) -> Mode:
    for mode in MODES:
        if value == mode:
            return mode
    raise ValueError(f"invalid version mode {value!r}: expected one of {', '.join(MODES)}")


def _instant(text: str) -> datetime:
    return times.parse_iso(text).astimezone(timezone.utc)


def _affected_dates(values: list[Any]) -> tuple[date, ...]:
    return tuple(layout.as_event_date(value) for value in values)


def _affected_dates_text(values: tuple[date, ...]) -> list[str]:
    return [layout.event_date_text(value) for value in values]


def _rules_text(rules: SessionRules) -> dict[str, str]:
    return rules.describe()


def _rules(described: dict[str, str]) -> SessionRules:
    return SessionRules.parse(**described)


# The typed fields' one parse (from_marker) and one text form (to_marker), each as writers have
# always spelled it: lo and horizon to the second unless they hold a fraction, reach to the
# microsecond, created_at to the millisecond, all UTC with "Z"; the gap as "30m"; the rules as
# SessionRules.describe() writes them.
_TYPED: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    "mode": (_mode, str),
    "lo": (_instant, lambda moment: times.iso_z(moment, "auto")),
    "horizon": (_instant, lambda moment: times.iso_z(moment, "auto")),
    "hi": (layout.as_event_date, layout.event_date_text),
    "reach": (_instant, lambda moment: times.iso_z(moment, "microseconds")),
    "gap": (parse_duration, format_duration),
    "rules": (_rules, _rules_text),
    "affected_dates": (_affected_dates, _affected_dates_text),
    "created_at": (_instant, lambda moment: times.iso_z(moment, "milliseconds")),
}

_NOT_MARKER = {"commit", "extra", "absent"}
# The marker's keys, in the record's order (a marker is written with sorted keys, so order is moot).
MARKER_KEYS: tuple[str, ...] = tuple(f.name for f in fields(VersionRecord) if f.name not in _NOT_MARKER)
_REQUIRED = {"event_date", "run_id"}
assert SESSION_SCHEMA_KEY in MARKER_KEYS
