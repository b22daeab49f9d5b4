"""The landing ledger by day: with the stream's archive, the landing audit reads the entries of the
days that can record a read of the files still in the landing, not every entry the lake ever wrote
(issue 27: an audit every 5 minutes must not grow with the lake's age). Entries a lake wrote before
the day folders are still read."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone

from tidemark.base import layout
from tidemark.ingest import landing, landing_ledger
from tidemark.store.lake import Lake
from tidemark.store.locations import File

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=timezone.utc)


def _land(root: str, name: str, body: bytes, when: datetime) -> dict:
    path = os.path.join(root, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as out:
        out.write(body)
    os.utime(path, (when.timestamp(), when.timestamp()))
    return {
        "path": name,
        "size": len(body),
        "mtime_ms": int(when.timestamp() * 1000),
        "lines": 1,
        "verdict": landing.INPUT,
    }


def _record(lake: Lake, received: datetime, files: list[dict]) -> str:
    receipt_ts = layout.format_receipt_ts(received)
    landing_ledger.record_batch(lake, receipt_ts, 0, files)
    return receipt_ts


def _reads(monkeypatch) -> list[str]:
    read: list[str] = []
    original = File.read_json

    def counted(self):
        read.append(str(self))
        return original(self)

    monkeypatch.setattr(File, "read_json", counted)
    return read


def test_entries_live_in_day_folders(tmp_path):
    lake = Lake.open(tmp_path / "lake")
    receipt_ts = _record(lake, NOW, [])
    assert lake.landing_ledger_path(receipt_ts) == os.path.join(
        str(lake), "_landing", "day=2026-11-25", f"receipt_ts={receipt_ts}.json"
    )
    assert os.path.exists(lake.landing_ledger_path(receipt_ts))


def test_with_the_archive_the_audit_reads_recent_days_only_and_agrees_with_a_full_read(tmp_path, monkeypatch):
    root, lake, archive = str(tmp_path / "land"), Lake.open(tmp_path / "lake"), str(tmp_path / "archive")
    # 60 days of batches whose files were archived long ago (they are no longer in the landing) ...
    for day in range(60, 2, -1):
        _record(
            lake, NOW - timedelta(days=day), [{**_land(root, "gone.jsonl", b"{}\n", NOW), "path": f"old-{day}.jsonl"}]
        )
    os.remove(os.path.join(root, "gone.jsonl"))
    # ... and the landing now: a file read yesterday, one replaced after its read, one not read yet.
    read = _land(root, "read.jsonl", b'{"a":1}\n', NOW - timedelta(days=1, hours=2))
    replaced = _land(root, "replaced.jsonl", b'{"b":1}\n', NOW - timedelta(hours=30))
    _record(lake, NOW - timedelta(days=1), [read, replaced])
    _land(root, "replaced.jsonl", b'{"b":1}\n{"b":2}\n', NOW - timedelta(hours=3))
    _land(root, "pending.jsonl", b'{"c":1}\n', NOW - timedelta(hours=1))

    full = landing_ledger.audit(root, lake)
    paths_read = _reads(monkeypatch)
    bounded = landing_ledger.audit(root, lake, archive)
    assert (
        (bounded.read, bounded.pending, [f.path for f in bounded.replaced])
        == (
            full.read,
            full.pending,
            [f.path for f in full.replaced],
        )
        == (["read.jsonl"], ["pending.jsonl"], ["replaced.jsonl"])
    )
    days = sorted({os.path.basename(os.path.dirname(p)) for p in paths_read})
    assert days == ["day=2026-11-24"]  # the oldest landed file's day minus one: no older entry read


def test_entries_of_a_lake_from_before_the_day_folders_are_still_read(tmp_path):
    root, lake, archive = str(tmp_path / "land"), Lake.open(tmp_path / "lake"), str(tmp_path / "archive")
    item = _land(root, "f.jsonl", b'{"a":1}\n', NOW - timedelta(hours=2))
    receipt_ts = layout.format_receipt_ts(NOW - timedelta(hours=1))
    legacy = lake.legacy_landing_ledger_path(receipt_ts)
    os.makedirs(os.path.dirname(legacy), exist_ok=True)
    with open(legacy, "w") as out:
        json.dump({"receipt_ts": receipt_ts, "batch_id": 0, "source": "stream", "files": [item]}, out)
    assert landing_ledger.read_ledger(lake)["f.jsonl"].receipt_ts == receipt_ts
    assert landing_ledger.audit(root, lake, archive).read == ["f.jsonl"]
    # a newer entry in a day folder wins over the legacy one for the same path
    newer = _record(lake, NOW, [{**item, "verdict": landing.INPUT}])
    assert landing_ledger.read_ledger(lake)["f.jsonl"].receipt_ts == newer
