"""The lake's record folders (Lake.notice_records): the notices' files go through them, keep their
paths and bytes, and no notices module touches storage itself."""

from __future__ import annotations

import ast
import json
import os
from datetime import date, timedelta

import pytest

from tidemark.notices import availability_notice, corrected_notice
from tidemark.notices.cadence import PendingGroups
from tidemark.notices.outbox import Outbox
from tidemark.store.lake import Lake

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _partition(lake: Lake, receipt_ts: str, batch_id: int = 0) -> dict:
    return {
        "event_date": "2026-03-06",
        "receipt_ts": receipt_ts,
        "batch_id": batch_id,
        "uri": lake.receipt_dir(date(2026, 3, 6), receipt_ts),
        "rows": 2,
        "events": 5,
        "pane_kinds": ["early"],
        "min_event_ts": "2026-03-06T01:00:00.000000Z",
        "max_event_ts": "2026-03-06T02:00:00.000000Z",
        "watermark": "2026-03-07T12:00:00.000000Z",
        "late": False,
        "extra": {},
    }


def _pretty(record: dict) -> bytes:
    """How the lake writes a small record: sorted keys, one-space indent, a final newline."""
    return (json.dumps(record, sort_keys=True, indent=1, default=str) + "\n").encode()


def test_records_read_write_list_and_delete_by_key(tmp_path):
    records = Lake.open(tmp_path).notice_records("pending")
    assert records.names() == []
    assert records.read("a") is None
    records.write("b", {"x": 1})
    records.write("a", {"y": [1, 2]})
    assert records.exists("a")
    assert records.read("a") == {"y": [1, 2]}
    assert records.create("_since", {"began_at": "t1"}) is True
    assert records.create("_since", {"began_at": "t2"}) is False  # written once
    (tmp_path / "_notices" / "pending" / ".a.json.0123.tmp").write_text("{")  # an atomic write's temp file
    (tmp_path / "_notices" / "pending" / "notes.txt").write_text("stray")
    assert records.names() == ["_since", "a", "b"]
    records.delete("a")
    records.delete("a")  # gone already: nothing happens
    assert records.names() == ["_since", "b"]
    assert (tmp_path / "_notices" / "pending" / "_since.json").read_bytes() == b'{"began_at": "t1"}'


@pytest.mark.parametrize("key", ["", "../x", "a/b", ".hidden", "a\\b"])
def test_a_record_key_is_a_plain_file_name(tmp_path, key):
    with pytest.raises(ValueError, match="invalid record key"):
        Lake.open(tmp_path).notice_records("outbox").path(key)


def test_outbox_and_pending_files_keep_their_paths_and_bytes(tmp_path):
    lake = Lake.open(tmp_path)
    outbox = Outbox(lake)
    body = availability_notice.build("sessions", [_partition(lake, "20260307T100000000Z")])
    outbox.record(body)
    owed = tmp_path / "_notices" / "outbox" / f"{body['notice_id']}.json"
    [entry] = outbox.owed()
    assert owed.read_bytes() == _pretty(entry)
    outbox.mark_sent(entry, "17", "2026-03-07T10:00:01.000Z")
    sent = tmp_path / "_notices" / "sent" / f"{body['notice_id']}.json"
    assert sent.read_bytes() == _pretty({**entry, "message_id": "17", "published_at": "2026-03-07T10:00:01.000Z"})
    assert not owed.exists()

    groups = PendingGroups(lake, "sessions", outbox)
    groups.add(_partition(lake, "20260307T100500000Z", 1), "coalesced", timedelta(minutes=5))
    [group] = groups.waiting()
    pending = tmp_path / "_notices" / "pending" / f"{group['group_id']}.json"
    assert pending.read_bytes() == _pretty(group)


def test_an_attempt_log_keeps_its_start_and_attempts_beside_the_corrected_outbox(tmp_path):
    lake = Lake.open(tmp_path)
    box = Outbox(lake, corrected_notice, "corrected", sinks=("pubsub", "airflow"))
    log = box.attempts("airflow")
    began = log.began()
    folder = tmp_path / "_notices" / "corrected" / "asset_events_attempted"
    assert (folder / "_since.json").read_bytes() == json.dumps({"began_at": began}).encode()
    log.mark("0" * 32)
    assert json.loads((folder / f"{'0' * 32}.json").read_text())["attempted_at"]
    assert log.may_have_been_sent({"notice": {"notice_id": "0" * 32}, "recorded_at": "9999"})
    assert not log.may_have_been_sent({"notice": {"notice_id": "1" * 32}, "recorded_at": "9999"})


def test_only_the_store_imports_storage():
    """Every module names lake files through the Lake's typed locations; tidemark/store does their I/O."""
    importing = []
    for package in ("tidemark", "streaming_job", "dags", "cloud_function", "dedup_sql"):
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            for name in sorted(files):
                path = os.path.join(folder, name)
                relative = os.path.relpath(path, ROOT).replace(os.sep, "/")
                if not name.endswith(".py") or relative.startswith("tidemark/store/"):
                    continue
                with open(path, encoding="utf-8") as handle:
                    tree = ast.parse(handle.read())
                for node in ast.walk(tree):
                    named = []
                    if isinstance(node, ast.Import):
                        named = [alias.name for alias in node.names]
                    elif isinstance(node, ast.ImportFrom):
                        named = [f"{node.module}.{alias.name}" for alias in node.names]
                    if any(n == "tidemark.store.storage" or n.startswith("tidemark.store.storage.") for n in named):
                        importing.append(relative)
    assert importing == []
