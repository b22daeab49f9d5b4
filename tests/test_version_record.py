"""The version record: a run's marker as a value, whose bytes on disk are those the dict-building
code wrote.

tests/legacy/run_marker_a2c64df_*.json were written by main at a2c64df (the dedup's
`_write_version` building a dict), from the inputs `_inputs` builds here, with no session and no
context (so no Spark): one version planned on a previous one, one first version. The same inputs
through today's `_write_version` must write the same bytes, plus the keys added since (the staged
changeset's counts, `changes`: tidemark/deduplication/changeset.py, its Spark part stubbed here)."""

from __future__ import annotations

import dataclasses
import json
import os
from datetime import date, datetime, timedelta, timezone

import pytest

from tidemark.base import layout
from tidemark.base.session_rules import SessionRules
from tidemark.deduplication import dedup
from tidemark.iceberg import run_markers
from tidemark.panes.planning import Plan
from tidemark.panes.receipts import ReceiptRef
from tidemark.session import session_schema
from tidemark.store.lake import Lake
from tidemark.store.version_record import MARKER_KEYS, Commit, VersionRecord

LEGACY = os.path.join(os.path.dirname(__file__), "legacy")
D = "2026-03-10"
RUN = "0123456789abcdef0123456789abcdef"


def _legacy(name: str) -> bytes:
    with open(os.path.join(LEGACY, f"run_marker_a2c64df_{name}.json"), "rb") as f:
        return f.read()


def _write_as_dedup(lake: Lake, previous: VersionRecord | None, monkeypatch) -> bytes:
    """The inputs the fixtures were written from (tests/legacy's generator used the same)."""
    monkeypatch.setattr(dedup, "now", lambda: datetime(2026, 3, 11, 4, 5, 6, 789000, tzinfo=timezone.utc))
    monkeypatch.setattr(dedup.changeset, "stage", lambda *args, **kwargs: dict(_NO_CHANGES))
    parts = [
        ReceiptRef(lake, date(2026, 3, 9), "20260310T010000000Z"),
        ReceiptRef(lake, date(2026, 3, 10), "20260310T020000000Z"),
        ReceiptRef(lake, date(2026, 3, 10), "20260310T030000123Z"),
    ]
    lo = datetime(2026, 3, 9, 23, 30, tzinfo=timezone.utc)
    plan = Plan(date(2026, 3, 10), lo, date(2026, 3, 11), parts, "20260310T030000123Z")
    summary = {
        "sessions": 0,
        "context_rows": 0,
        "reach": datetime(2026, 3, 11, 0, 10, 0, 123456, tzinfo=timezone.utc),
        "affected_dates": [date(2026, 3, 9)],
    }
    known = {"2026-03-09/20260310T010000000Z"}
    dedup._write_version(
        lake,
        date(2026, 3, 10),
        RUN,
        None,
        summary,
        plan,
        SessionRules(),
        known,
        previous,
        mode="incremental",
        read=(2, 17),
    )
    with open(lake.run_marker(layout.as_event_date(D), RUN), "rb") as f:
        written = json.loads(f.read())
    assert written.pop("changes") == _NO_CHANGES  # a key added after a2c64df
    return (json.dumps(written, sort_keys=True, indent=1, default=str) + "\n").encode()


_NO_CHANGES = {"inserted": 0, "deleted": 0, "updated": 0}


def _previous() -> VersionRecord:
    commit = Commit("20260310T010000000Z", "f" * 32, None, "2026-03-10T01:00:05Z")
    return VersionRecord(event_date=date(2026, 3, 10), run_id="f" * 32, commit=commit)


@pytest.mark.parametrize(("name", "previous"), [("planned_on", _previous()), ("first", None)])
def test_the_marker_written_is_byte_for_byte_the_dict_codes(tmp_path, monkeypatch, name, previous):
    lake = Lake.open(str(tmp_path / "lake"))
    assert _write_as_dedup(lake, previous, monkeypatch) == _legacy(name)
    # every key of the format written, none other: but the layout's, which a version without
    # sessions (no file) leaves out (tidemark/deduplication/buckets.py)
    assert sorted([*json.loads(_legacy(name)), "changes"]) == sorted(set(MARKER_KEYS) - {"buckets", "carried"})


@pytest.mark.parametrize("name", ["planned_on", "first"])
def test_a_marker_round_trips_through_the_record_unchanged(tmp_path, name):
    lake = Lake.open(str(tmp_path / "lake"))
    record = VersionRecord.from_marker(json.loads(_legacy(name)))
    assert record.event_date == date(2026, 3, 10)
    assert record.receipts[0] == "2026-03-09/20260310T010000000Z"
    assert record.reach == datetime(2026, 3, 11, 0, 10, 0, 123456, tzinfo=timezone.utc)
    assert record.schema_version == 2
    run_markers.write_marker(lake, record)
    with open(lake.run_marker(layout.as_event_date(D), RUN), "rb") as f:
        assert f.read() == _legacy(name)
    assert run_markers.read_marker(lake, layout.as_event_date(D), RUN) == record


def test_keys_of_a_newer_writer_are_kept_and_keys_an_older_one_lacked_stay_absent():
    newer = {**json.loads(_legacy("first")), "event_type_histogram": {"play": 3}, "zone": "eu"}
    record = VersionRecord.from_marker(newer)
    assert record.extra == {"event_type_histogram": {"play": 3}, "zone": "eu"}
    assert record.to_marker() == newer

    # A marker of an older tidemark: no reach, no context, no schema version, no rules id.
    older = {k: v for k, v in json.loads(_legacy("first")).items() if k in {"event_date", "run_id", "files"}}
    older.update(sessions=3, receipts=["2026-03-10/20260310T020000000Z"], gap="30m")
    old = VersionRecord.from_marker(older)
    assert old.to_marker() == older
    assert old.gap == timedelta(minutes=30)
    assert not old.records("reach")
    assert old.reach is None
    assert old.schema_version == 1
    # a recorded null reach (no session touches D) is not the same thing as no recorded reach
    assert VersionRecord.from_marker({**older, "reach": None}).records("reach")


def test_the_commit_is_the_tables_and_shows_beside_the_marker():
    record = VersionRecord.from_marker(json.loads(_legacy("first")))
    assert record.version is None
    assert record.commit is None
    commit = Commit("20260310T030000123Z", RUN, None, "2026-03-11T04:05:07Z")
    done = record.committed(commit)
    assert (done.version, done.previous_version, done.committed_at) == (commit.version, None, commit.committed_at)
    shown = done.to_json()
    assert shown["version"] == commit.version
    assert shown["receipts_read"] == 2
    assert "snapshot_id" not in shown
    assert done.to_marker() == record.to_marker()  # the commit is never written into the marker
    # the older tables' property (`tidemark.current.D`) round-trips
    assert Commit.from_json(json.loads(json.dumps(commit.to_json()))) == commit


def test_a_marker_naming_a_bad_date_or_run_is_refused_before_it_reaches_a_path():
    good = json.loads(_legacy("first"))
    with pytest.raises(layout.InvalidPartitionValue, match="invalid event_date '2026-02-30'"):
        VersionRecord.from_marker({**good, "event_date": "2026-02-30"})
    with pytest.raises(layout.InvalidPartitionValue, match="invalid run id"):
        VersionRecord.from_marker({**good, "run_id": "../../etc"})


def test_the_record_names_the_session_schema_key_the_schema_does():
    assert session_schema.MARKER_KEY in MARKER_KEYS
    record = VersionRecord.from_marker(json.loads(_legacy("first")))
    assert dataclasses.replace(record, session_schema=None).schema_version == 1


def test_each_typed_field_is_parsed_once_and_written_as_the_marker_spells_it():
    marker = json.loads(_legacy("planned_on"))
    record = VersionRecord.from_marker(marker)
    utc = timezone.utc
    assert record.mode == "incremental"
    assert record.lo == datetime(2026, 3, 9, 23, 30, tzinfo=utc)
    assert record.horizon == datetime(2026, 3, 11, 2, 0, tzinfo=utc)
    assert record.reach == datetime(2026, 3, 11, 0, 10, 0, 123456, tzinfo=utc)
    assert record.created_at == datetime(2026, 3, 11, 4, 5, 6, 789000, tzinfo=utc)
    assert record.hi == date(2026, 3, 11)
    assert record.gap == timedelta(minutes=30)
    assert record.rules == SessionRules()
    assert record.affected_dates == (date(2026, 3, 9),)
    # the text forms: whole seconds without a fraction (lo, horizon), the reach to the microsecond,
    # created_at to the millisecond, all with "Z"; the gap as typed; the rules as described
    written = record.to_marker()
    assert (written["lo"], written["horizon"]) == ("2026-03-09T23:30:00Z", "2026-03-11T02:00:00Z")
    assert written["reach"] == "2026-03-11T00:10:00.123456Z"
    assert written["created_at"] == "2026-03-11T04:05:06.789Z"
    assert (written["hi"], written["gap"], written["mode"]) == ("2026-03-11", "30m", "incremental")
    assert written["rules"] == {"allowed_lateness": "1h", "gap": "30m", "watermark_delay": "10m"}
    assert written["affected_dates"] == ["2026-03-09"]
    assert written == marker
    # a fraction of a second is kept (lo and horizon to the microsecond when they hold one), and the
    # rules' boundary is written only when it is not the default
    lo = datetime(2026, 3, 9, 23, 29, 59, 999999, tzinfo=utc)
    merged = dataclasses.replace(record, lo=lo, rules=SessionRules(gap_boundary="merge"), gap=timedelta(hours=1))
    again = merged.to_marker()
    assert again["lo"] == "2026-03-09T23:29:59.999999Z"
    assert again["rules"] == {"allowed_lateness": "1h", "gap": "30m", "watermark_delay": "10m", "gap_boundary": "merge"}
    assert again["gap"] == "1h"
    assert VersionRecord.from_marker(again) == merged
    # a null reach (no session touches D) stays null
    assert VersionRecord.from_marker({**marker, "reach": None}).to_marker()["reach"] is None


def test_a_marker_with_a_field_out_of_its_format_is_refused():
    good = json.loads(_legacy("first"))
    for key, bad, why in (
        ("mode", "partial", "invalid version mode 'partial'"),
        ("lo", "2026-03-09 23:30", "has no UTC offset"),
        ("hi", "2026-02-30", "invalid event_date '2026-02-30'"),
        ("gap", "30 minutes", "invalid duration '30 minutes'"),
        ("affected_dates", ["yesterday"], "invalid event_date 'yesterday'"),
    ):
        with pytest.raises(ValueError, match=why):
            VersionRecord.from_marker({**good, key: bad})
