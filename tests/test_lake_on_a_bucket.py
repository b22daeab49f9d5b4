"""The gs:// lake drill (docs/architecture.md), run: a lake on a bucket needs nothing but its URI.

An in-memory pyarrow filesystem stands in for the bucket (no GCS here). The lake is opened on a
gs:// URI with that filesystem, and `storage.resolve` refuses every gs:// URI: if any module built
a path and went to the filesystem on its own, instead of through the lake's typed locations, the
test would fail there (or the files would land on this machine's disk). The stream's registration
path (markers, the receipt index), planning, obligations, the notice outbox and the rules record all
run on it.
"""

from __future__ import annotations

import random
from datetime import timedelta

import pyarrow.fs as pafs
import pytest

from tests.markerkit import DAY0, RULES, stamp, write_batch
from tidemark.notices import availability_notice
from tidemark.notices.outbox import Outbox
from tidemark.orchestration import obligations
from tidemark.panes import planning, receipt_index, receipts
from tidemark.session import rules_record
from tidemark.store import storage
from tidemark.store.lake import Lake


@pytest.fixture
def bucket_lake(monkeypatch, tmp_path):
    bucket = pafs._MockFileSystem()
    bucket.create_dir("bucket/lake")
    real = storage.resolve

    def resolve(uri: str):
        if uri.startswith("gs://"):
            raise AssertionError(f"{uri} resolved again instead of through the lake's filesystem")
        return real(uri)

    monkeypatch.setattr(storage, "resolve", resolve)
    monkeypatch.chdir(tmp_path)  # a relative path written by mistake would land here
    return Lake("gs://bucket/lake", filesystem=bucket, root="bucket/lake"), bucket, tmp_path


def test_the_registration_path_planning_and_records_run_on_a_bucket(bucket_lake):
    lake, bucket, cwd = bucket_lake
    receipt_index.start(lake)
    rng = random.Random(7)
    written = [partition for batch in range(12) for partition in write_batch(lake, rng, batch, days=4)]

    # the markers are in the bucket, where the lake's layout puts them, and read back typed
    first = written[0]
    marker = lake.receipt_marker(first.event_date, first.receipt_ts)
    assert marker.startswith("gs://bucket/lake/sessions/event_date=")
    assert bucket.get_file_info(marker.at()[1]).type == pafs.FileType.File
    assert receipts.read_marker(lake, first.event_date, first.receipt_ts) == first
    assert receipts.list_event_dates(lake) == sorted({p.event_date for p in written})
    assert receipt_index.head(lake) == stamp(11)

    # planning reads the index and the markers from the bucket: every partition of the date is planned
    day = first.event_date
    plan = planning.plan(planning.LakeIndex(lake), day, RULES[0], day + timedelta(days=1))
    own = {f"{p.event_date.isoformat()}/{p.receipt_ts}" for p in written if p.event_date == day}
    assert own <= set(plan.keys)

    # obligations, the notice outbox and the rules record: records by key, in the bucket
    obligations.record(lake, [DAY0 + timedelta(days=1)], DAY0, stamp(3))
    assert [o["source_date"] for o in obligations.pending(lake)] == [DAY0.isoformat()]
    notice = availability_notice.build("sessions", [first.to_json()])
    outbox = Outbox(lake)
    assert outbox.record(notice)
    assert [entry["notice"]["notice_id"] for entry in outbox.owed()] == [notice["notice_id"]]
    rules_record.ensure(lake, RULES[0], "test")
    assert rules_record.current(lake) is not None

    # nothing reached this machine's disk
    assert list(cwd.iterdir()) == []
    names = {info.path for info in bucket.get_file_info(pafs.FileSelector("bucket/lake", recursive=True))}
    assert any("/_obligations/" in name for name in names)
    assert any("/_notices/outbox/" in name for name in names)
    assert any("/_rules/" in name for name in names)
