"""The landing rule (tidemark.ingest.landing) and the landing ledger (tidemark.ingest.landing_ledger) without Spark:
which files are input, how a file's bytes become lines, and how the batch reference uses the ledger's
receipt times. The stream's side of the same rules: tests/test_stream_edges.py."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone

import pytest

from tidemark.base import layout
from tidemark.base.times import to_micros
from tidemark.demo import batch_reference
from tidemark.ingest import contract, landing, landing_ledger, quarantine
from tidemark.store.lake import Lake


@pytest.mark.parametrize(
    ("path", "verdict"),
    [
        ("a.jsonl", landing.INPUT),
        ("sub dir/2026/b.json", landing.INPUT),
        ("events_2026.jsonl", landing.INPUT),  # an underscore inside a name is fine
        ("_part=1/x.jsonl", landing.HIDDEN),  # Spark reads it (a partition folder)
        ("sub/_y=2.jsonl", landing.HIDDEN),  # Spark reads it too
        ("_metadata/x.jsonl", landing.HIDDEN),  # Spark keeps _metadata* for Parquet
        ("_metadata_extra/x.jsonl", landing.HIDDEN),
        (".hidden/x.jsonl", landing.HIDDEN),
        ("sub/.x.jsonl", landing.HIDDEN),
        ("_SUCCESS", landing.HIDDEN),
        ("z.jsonl._COPYING_", landing.IN_PROGRESS),  # hadoop fs -put; Spark never lists it
        ("sub/t.jsonl.tmp", landing.IN_PROGRESS),  # Spark lists it
        ("download.jsonl.part", landing.IN_PROGRESS),
        (".z.jsonl._COPYING_", landing.HIDDEN),  # hidden wins
    ],
)
def test_which_landed_files_are_input(path, verdict):
    assert landing.classify(path) == verdict


def test_spark_file_uris_are_named_relative_to_the_landing(tmp_path):
    root = str(tmp_path / "land")
    uri = "file:" + root + "/sub%20dir/b%25c%20\u00e9.jsonl"  # how Spark spells _metadata.file_path
    assert landing.relative_path(root, uri) == "sub dir/b%c \u00e9.jsonl"
    assert landing.relative_path("file://" + root + "/", uri) == "sub dir/b%c \u00e9.jsonl"
    assert landing.relative_path("gs://bucket/land", "gs://bucket/land/_x/y.jsonl") == "_x/y.jsonl"
    assert landing.relative_path(None, uri) == "b%c \u00e9.jsonl"


def test_a_bom_starts_a_file_but_is_part_of_any_later_line():
    bom = landing.UTF8_BOM
    lines = landing.file_lines(bom + b'{"a":1}\n' + bom + b'{"b":2}\n')
    assert lines == [b'{"a":1}', bom + b'{"b":2}']
    assert landing.file_lines(b"") == []
    # the contract then refuses the second: a BOM is not JSON whitespace
    assert contract.check_line(lines[1], 0)[1].startswith(contract.Reason.NOT_JSON)


def _write(root, path, data: bytes, mtime: float | None = None):
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "wb") as out:
        out.write(data)
    if mtime is not None:
        os.utime(full, (mtime, mtime))
    return full


def _line(user, event_id, ts):
    return json.dumps({"event_id": event_id, "user_id": user, "event_type": "play", "event_ts": ts}).encode()


def test_the_reference_reads_input_files_only_and_drops_a_leading_bom(tmp_path):
    root = str(tmp_path / "land")
    _write(root, "a.jsonl", landing.UTF8_BOM + _line("u", "a", "2026-08-05T10:00:00Z") + b"\n")
    _write(root, "_part=1/x.jsonl", _line("u", "hidden1", "2026-08-05T10:01:00Z"))
    _write(root, "sub/_y=2.jsonl", _line("u", "hidden2", "2026-08-05T10:02:00Z"))
    _write(root, "_metadata/z.jsonl", _line("u", "hidden3", "2026-08-05T10:03:00Z"))
    _write(root, "z.jsonl._COPYING_", _line("u", "copying", "2026-08-05T10:04:00Z"))
    _write(
        root,
        "sub/b.jsonl",
        _line("u", "b", "2026-08-05T10:05:00Z")
        + b"\n"
        + landing.UTF8_BOM
        + _line("u", "bom-mid-file", "2026-08-05T10:06:00Z"),
    )
    assert {e for _, e, _ in batch_reference.valid_events(batch_reference.landed_lines(root))} == {"a", "b"}


def _ledger_entry(lake, receipt: datetime, files):
    receipt_ts = layout.format_receipt_ts(receipt)
    landing_ledger.record_batch(lake, receipt_ts, 0, files)
    return receipt_ts


def test_the_reference_judges_the_clock_guard_at_each_files_recorded_receipt_time(tmp_path):
    """Issue 33 item 6: an event more than the max clock skew ahead of its receipt is refused by the
    stream for good; a reference computed later must refuse it too, not accept it because its own
    clock has caught up."""
    root, lake = str(tmp_path / "land"), Lake.open(tmp_path / "lake")
    received = datetime(2026, 8, 5, 10, 0, tzinfo=timezone.utc)
    path = _write(
        root,
        "f.jsonl",
        _line("u", "future", "2026-08-05T12:00:00Z") + b"\n" + _line("u", "now", "2026-08-05T09:59:00Z") + b"\n",
    )
    stat = os.stat(path)
    _ledger_entry(
        lake,
        received,
        [
            {
                "path": "f.jsonl",
                "size": stat.st_size,
                "mtime_ms": int(stat.st_mtime * 1000),
                "lines": 2,
                "verdict": landing.INPUT,
            }
        ],
    )
    later = to_micros(received + timedelta(hours=5))
    with_ledger = {e.event_id for e in batch_reference.events_of_landing(root, lake, now_us=later)}
    without = {e.event_id for e in batch_reference.events_of_landing(root, None, now_us=later)}
    assert with_ledger == {"now"}  # as the stream decided at 10:00
    assert without == {"now", "future"}  # what a reference that ignores receipt times says
    # a file the stream has not read yet is judged at now
    _write(root, "g.jsonl", _line("u", "g-future", "2026-08-05T12:00:00Z"))
    at_ten = to_micros(received)
    assert "g-future" not in {e.event_id for e in batch_reference.events_of_landing(root, lake, now_us=at_ten)}
    assert "g-future" in {e.event_id for e in batch_reference.events_of_landing(root, lake, now_us=later)}


def test_the_audit_finds_replaced_pending_and_in_progress_files_and_quarantines_replacements_once(tmp_path):
    root, lake = str(tmp_path / "land"), Lake.open(tmp_path / "lake")
    read = _write(root, "read.jsonl", _line("u", "r", "2026-08-05T10:00:00Z") + b"\n", mtime=1_700_000_000)
    replaced = _write(root, "replaced.jsonl", _line("u", "old", "2026-08-05T10:00:00Z") + b"\n", mtime=1_700_000_000)
    files = [
        {
            "path": name,
            "size": os.path.getsize(p),
            "mtime_ms": int(os.path.getmtime(p) * 1000),
            "lines": 1,
            "verdict": landing.INPUT,
        }
        for name, p in (("read.jsonl", read), ("replaced.jsonl", replaced))
    ]
    _ledger_entry(lake, datetime(2026, 8, 5, 10, 0, tzinfo=timezone.utc), files)
    # after the batch: one file replaced under its name, one new, one in progress, one empty, one hidden
    _write(
        root,
        "replaced.jsonl",
        _line("u", "new1", "2026-08-05T11:00:00Z") + b"\n" + _line("u", "new2", "2026-08-05T11:01:00Z") + b"\n",
        mtime=1_700_000_100,
    )
    _write(root, "pending.jsonl", _line("u", "p", "2026-08-05T10:00:00Z"))
    _write(root, "late.jsonl.tmp", _line("u", "t", "2026-08-05T10:00:00Z"))
    _write(root, "empty.jsonl", b"")
    _write(root, "_SUCCESS", b"")

    found = landing_ledger.audit(root, lake)
    assert sorted(found.read) == ["empty.jsonl", "read.jsonl"]
    assert found.pending == ["pending.jsonl"]
    assert [f.path for f in found.replaced] == ["replaced.jsonl"]
    assert [f.path for f in found.in_progress] == ["late.jsonl.tmp"]
    assert found.hidden == ["_SUCCESS"]

    landing_ledger.quarantine_replaced(root, lake, found)
    rows = quarantine.read_quarantine(lake)
    assert sorted(r["raw"] for r in rows) == sorted(
        [_line("u", "new1", "2026-08-05T11:00:00Z"), _line("u", "new2", "2026-08-05T11:01:00Z")]
    )
    assert {r["reason"] for r in rows} == {landing_ledger.REPLACED}
    assert {r["source_file"] for r in rows} == {"replaced.jsonl"}
    # recorded: the next audit finds nothing replaced, and quarantines nothing twice
    again = landing_ledger.quarantine_replaced(root, lake)
    assert again.replaced == []
    assert "replaced.jsonl" in again.read
    assert len(quarantine.read_quarantine(lake)) == 2
    # the reference leaves the replaced file's new content out (it is quarantined, not input)
    assert {
        e
        for _, e, _ in batch_reference.valid_events(
            line for _, _, lines in batch_reference.landed_files(root, lake) for line in lines
        )
    } == {"r", "p"}


def test_the_landing_command_lists_what_was_not_read(tmp_path, capsys):
    from tidemark.cli import main

    root, lake = str(tmp_path / "land"), Lake.open(tmp_path / "lake")
    read = _write(root, "read.jsonl", _line("u", "r", "2026-08-05T10:00:00Z"), mtime=1_700_000_000)
    _ledger_entry(
        lake,
        datetime(2026, 8, 5, 10, 0, tzinfo=timezone.utc),
        [
            {
                "path": "read.jsonl",
                "size": os.path.getsize(read),
                "mtime_ms": 1_700_000_000_000,
                "lines": 1,
                "verdict": landing.INPUT,
            }
        ],
    )
    _write(root, "new.jsonl", _line("u", "n", "2026-08-05T10:00:00Z"))
    _write(root, "x.jsonl._COPYING_", b"{")
    assert main(["landing", "--landing", root, "--lake", str(lake), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "read": 1,
        "pending": ["new.jsonl"],
        "replaced": [],
        "in_progress": ["x.jsonl._COPYING_"],
        "hidden": 0,
    }
    _write(root, "read.jsonl", _line("u", "r2", "2026-08-05T10:00:00Z"), mtime=1_700_000_500)
    assert main(["landing", "--landing", root, "--lake", str(lake)]) == 3
    assert "replaced after it was read" in capsys.readouterr().out
