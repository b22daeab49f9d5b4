"""The stream at the edges of its input (issue 33): a first batch without a valid line, landing names
and bytes the landing rule decides, modification times, files replaced under a read name, and
events from the future judged against their receipt time. Each case runs the real stream
(available-now) in the shared session and compares with the batch reference or the quarantine."""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

import pytest

from streaming_job.job import StreamConfig, run_stream
from tests.streamkit import event, land, land_raw, panes
from tidemark.base.session_rules import SessionRules
from tidemark.base.times import iso_z, to_micros
from tidemark.demo import batch_reference
from tidemark.ingest import contract, landing, landing_ledger, quarantine
from tidemark.store.lake import Lake

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _dirs(tmp_path):
    return str(tmp_path / "landing"), Lake.open(tmp_path / "lake"), str(tmp_path / "checkpoint")


def _run(spark, landing_dir, lake, checkpoint, reports=None, **extra):
    config = StreamConfig(
        landing=landing_dir,
        lake=lake,
        checkpoint=checkpoint,
        rules=SessionRules.parse("30m", "1h", "0s"),
        available_now=True,
        **extra,
    )
    run_stream(config, listeners=[reports.append] if reports is not None else None, spark=spark)


def _lake_events(lake) -> set[tuple[str, str]]:
    return {(r["user_id"], e) for r in panes(lake) for e in r["event_ids"]}


def _reference_events(landing_dir, lake) -> set[tuple[str, str]]:
    return {(e.user_id, e.event_id) for e in batch_reference.events_of_landing(landing_dir, lake)}


def _write(root, path, data: bytes, mtime: float | None = None) -> str:
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    tmp = os.path.join(os.path.dirname(full), ".writing")
    with open(tmp, "wb") as out:
        out.write(data)
    if mtime is not None:
        os.utime(tmp, (mtime, mtime))
    os.replace(tmp, full)  # appears whole, as the contract asks
    return full


def test_a_first_batch_of_only_refused_lines_commits_and_later_files_are_read(spark, tmp_path):
    """Item 1: the batch's log line formatted "no watermark yet" and failed, so the batch was never
    committed and every restart replayed it; nothing landed later was ever read."""
    landing_dir, lake, checkpoint = _dirs(tmp_path)
    land(landing_dir, [['{"event_id":"q1","user_id":"u","event_type":"play","event_ts":"2026-08-05T10:00:00"}']])
    _run(spark, landing_dir, lake, checkpoint)
    refused = quarantine.read_quarantine(lake)
    assert [r["reason"].split(":")[0] for r in refused] == [contract.Reason.NOT_RFC3339]
    assert panes(lake) == []

    land(landing_dir, [[event("u", "v1", "2026-08-05T10:00:00Z")]], start_index=1)
    reports = []
    _run(spark, landing_dir, lake, checkpoint, reports)
    assert _lake_events(lake) == {("u", "v1")}
    assert [r.valid_events for r in reports] == [1]
    assert len(quarantine.read_quarantine(lake)) == 1  # the first batch was not replayed


def test_landing_names_and_a_leading_bom_follow_the_one_landing_rule(spark, tmp_path):
    """Item 3: the stream read _part=1/, sub/_y=2.jsonl and _metadata* folders (Spark's listing
    rules) and took a first line with a BOM that the reference refused."""
    landing_dir, lake, checkpoint = _dirs(tmp_path)
    day = "2026-08-05"
    _write(
        landing_dir,
        "a.jsonl",
        landing.UTF8_BOM
        + event("u1", "a", f"{day}T10:00:00Z").encode()
        + b"\n"
        + landing.UTF8_BOM
        + event("u1", "bom-mid-file", f"{day}T10:01:00Z").encode()
        + b"\n",
    )
    _write(landing_dir, "_part=1/x.jsonl", event("u2", "hidden-partition", f"{day}T10:00:00Z").encode())
    _write(landing_dir, "sub/_y=2.jsonl", event("u3", "hidden-name", f"{day}T10:00:00Z").encode())
    _write(landing_dir, "_metadata_x/y.jsonl", event("u4", "hidden-metadata", f"{day}T10:00:00Z").encode())
    _write(landing_dir, "sub/t.jsonl.tmp", event("u5", "in-progress", f"{day}T10:00:00Z").encode())
    _write(landing_dir, "z.jsonl._COPYING_", event("u6", "copying", f"{day}T10:00:00Z").encode())
    _write(landing_dir, "sub dir/b c.jsonl", event("u7", "b", f"{day}T10:00:00Z").encode())
    _run(spark, landing_dir, lake, checkpoint)

    assert _lake_events(lake) == _reference_events(landing_dir, lake) == {("u1", "a"), ("u7", "b")}
    assert [r["raw"][:3] for r in quarantine.read_quarantine(lake)] == [landing.UTF8_BOM]
    ledger = landing_ledger.read_ledger(lake)
    assert {path: record.verdict for path, record in ledger.items()} == {
        "a.jsonl": landing.INPUT,
        "sub dir/b c.jsonl": landing.INPUT,
        "_part=1/x.jsonl": landing.HIDDEN,
        "sub/_y=2.jsonl": landing.HIDDEN,
        "_metadata_x/y.jsonl": landing.HIDDEN,
        "sub/t.jsonl.tmp": landing.IN_PROGRESS,
    }
    audit = landing_ledger.audit(landing_dir, lake)
    assert sorted(f.path for f in audit.in_progress) == ["sub/t.jsonl.tmp", "z.jsonl._COPYING_"]
    assert audit.pending == []
    assert audit.replaced == []

    # in-progress files are read once complete, under their final names
    os.replace(os.path.join(landing_dir, "z.jsonl._COPYING_"), os.path.join(landing_dir, "z.jsonl"))
    os.replace(os.path.join(landing_dir, "sub/t.jsonl.tmp"), os.path.join(landing_dir, "sub/t.jsonl"))
    _run(spark, landing_dir, lake, checkpoint)
    assert (
        _lake_events(lake)
        == _reference_events(landing_dir, lake)
        == {("u1", "a"), ("u7", "b"), ("u6", "copying"), ("u5", "in-progress")}
    )


def test_modification_times_do_not_decide_what_is_read(spark, tmp_path):
    """Item 4: with maxFileAge measured from the newest file seen, a file stamped 1970 was skipped,
    and after a file stamped 2099 every later normal file was skipped, silently."""
    landing_dir, lake, checkpoint = _dirs(tmp_path)
    day = "2026-08-05"
    _write(landing_dir, "epoch.jsonl", event("u", "epoch", f"{day}T10:00:00Z").encode(), mtime=0)
    _write(landing_dir, "old.jsonl", event("u", "old", f"{day}T10:05:00Z").encode(), mtime=946684800)  # 2000
    _write(landing_dir, "future.jsonl", event("u", "future-mtime", f"{day}T10:10:00Z").encode(), mtime=4070908800)
    _run(spark, landing_dir, lake, checkpoint)
    _write(landing_dir, "normal.jsonl", event("u", "normal", f"{day}T10:15:00Z").encode())
    _write(landing_dir, "another-old.jsonl", event("u", "another-old", f"{day}T10:20:00Z").encode(), mtime=1)
    _run(spark, landing_dir, lake, checkpoint)
    assert _lake_events(lake) == {("u", e) for e in ("epoch", "old", "future-mtime", "normal", "another-old")}
    audit = landing_ledger.audit(landing_dir, lake)
    assert audit.pending == []
    assert len(audit.read) == 5


def test_a_file_replaced_under_a_read_name_is_quarantined_not_lost(spark, tmp_path):
    """Item 5: Spark's source reads each name once; new content under a read name was lost without
    a trace. It is quarantined (exact lines, a reason), once, and the reference leaves it out."""
    landing_dir, lake, checkpoint = _dirs(tmp_path)
    day = "2026-08-05"
    path = _write(landing_dir, "f.jsonl", event("u", "first", f"{day}T10:00:00Z").encode() + b"\n", mtime=1_780_000_000)
    _run(spark, landing_dir, lake, checkpoint)
    new_lines = [event("u", "first", f"{day}T10:00:00Z").encode(), event("u", "second", f"{day}T10:05:00Z").encode()]
    _write(landing_dir, "f.jsonl", b"\n".join(new_lines) + b"\n", mtime=1_780_000_100)
    _run(spark, landing_dir, lake, checkpoint)
    assert _lake_events(lake) == {("u", "first")}
    rows = quarantine.read_quarantine(lake)
    assert sorted(r["raw"] for r in rows) == sorted(new_lines)
    assert {(r["reason"], r["source_file"]) for r in rows} == {(landing_ledger.REPLACED, "f.jsonl")}
    _run(spark, landing_dir, lake, checkpoint)  # reported once, not at every run
    assert len(quarantine.read_quarantine(lake)) == 2
    assert _reference_events(landing_dir, lake) == set()  # the current bytes are quarantined, not input
    assert os.path.exists(path)


def test_an_event_from_the_future_is_judged_at_its_receipt_time_by_stream_and_reference(spark, tmp_path):
    """Item 6: the stream refuses an event more than the max clock skew ahead of its receipt; a
    reference computed hours later used to accept it. Both now judge it at the recorded receipt."""
    landing_dir, lake, checkpoint = _dirs(tmp_path)
    now = datetime.now(timezone.utc).replace(microsecond=0)
    ahead, behind = iso_z(now + timedelta(hours=2)), iso_z(now - timedelta(minutes=5))
    land_raw(landing_dir, [[event("u", "ahead", ahead).encode(), event("u", "behind", behind).encode()]])
    _run(spark, landing_dir, lake, checkpoint)  # --max-clock-skew 1h, the default
    assert _lake_events(lake) == {("u", "behind")}
    assert [r["reason"].split(":")[0] for r in quarantine.read_quarantine(lake)] == [contract.Reason.FUTURE]
    later = to_micros(now + timedelta(hours=3))  # when the event's time has passed
    assert {
        (e.user_id, e.event_id) for e in batch_reference.events_of_landing(landing_dir, lake, now_us=later)
    } == _lake_events(lake)
    # without the ledger's receipt times, a later reference disagrees with the stream: the old bug
    assert ("u", "ahead") in {
        (e.user_id, e.event_id) for e in batch_reference.events_of_landing(landing_dir, None, now_us=later)
    }


def test_the_stream_caches_its_batches_uncompressed(spark, tmp_path, monkeypatch):
    """streaming_job.job.stream_settings reaches the micro-batches (the query copies the session's
    settings at its start): the batch's caches are built without Spark's in-memory compression,
    which cost more CPU than it saved (BENCHMARKS.md section 1)."""
    from streaming_job import batch

    seen = []
    process = batch.BatchProcessor._process

    def spy(self, frame, *args):
        seen.append(frame.sparkSession.conf.get("spark.sql.inMemoryColumnarStorage.compressed"))
        return process(self, frame, *args)

    monkeypatch.setattr(batch.BatchProcessor, "_process", spy)
    landing_dir, lake, checkpoint = _dirs(tmp_path)
    land(landing_dir, [[event("u1", "e1", "2026-03-01T10:00:00Z")]])
    _run(spark, landing_dir, lake, checkpoint)
    assert seen == ["false"]
    assert _lake_events(lake) == {("u1", "e1")}


def test_a_query_killed_in_its_first_offset_write_starts_again(spark, tmp_path):
    """Found by the SIGKILL test (tests/test_stream_crash.py, archive-and-rotation): a stream killed
    while Spark wrote offset 0 of a new checkpoint (or of a generation after a rotation) leaves only
    Spark's hidden temporary file in offsets/; Spark 4 then refused every restart
    (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY). The restart must read everything landed."""
    landing_dir, lake, checkpoint = _dirs(tmp_path)
    land(landing_dir, [[event("u1", "e1", "2026-03-01T10:00:00Z")], [event("u2", "e2", "2026-03-01T11:00:00Z")]])
    offsets = os.path.join(checkpoint, "query", "offsets")
    os.makedirs(offsets)
    leftover = ".0.d5efcf97-1304-45c0-9f2d-555ce6435fe9.tmp"
    with open(os.path.join(offsets, leftover), "w") as out:  # what the kill left: never renamed to "0"
        out.write('v1\n{"batchWatermarkMs":0,"batchTimestampMs":1764000000000,"conf":{}}\n{"logOffset":0}\n')
    with open(os.path.join(offsets, f".{leftover}.crc"), "wb") as out:
        out.write(b"crc\x00\x00\x00\x00")
    _run(spark, landing_dir, lake, checkpoint)
    assert _lake_events(lake) == {("u1", "e1"), ("u2", "e2")} == _reference_events(landing_dir, lake)
    assert "0" in os.listdir(offsets)
    assert leftover not in os.listdir(offsets)
