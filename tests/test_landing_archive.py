"""The bounded landing (tidemark.ingest.landing_archive): read files leave the landing once their batch is
committed, a SIGKILL between the commit and the move loses and repeats nothing, and checkpoint
generations keep the stream exactly-once against the batch reference."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import pytest

from tests.helpers import stream_alive, wait_for
from tests.reference import landed_lines, sessionize, valid_events
from tests.streamkit import panes, partition_snapshot
from tidemark import cli
from tidemark.base import layout
from tidemark.demo.batch_reference import lake_keys
from tidemark.demo.generate import Workload, build, split_files, write_file
from tidemark.iceberg import reader
from tidemark.ingest import landing, landing_archive, landing_ledger
from tidemark.panes import receipts
from tidemark.session import rules_record
from tidemark.store.lake import Lake


def _write(root, path, data: bytes, mtime: float):
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "wb") as out:
        out.write(data)
    os.utime(full, (mtime, mtime))
    return full


def _commit(checkpoint, generation, spark_batch_id):
    """Spark's commit-log file for a batch (what the real stream writes: tests below)."""
    commits = os.path.join(generation.query_dir(checkpoint), "commits")
    os.makedirs(commits, exist_ok=True)
    open(os.path.join(commits, str(spark_batch_id)), "w").close()


def _input_files(root):
    return sorted(f.path for f in landing.list_landing(root) if f.verdict == landing.INPUT)


def test_only_committed_unchanged_files_move_and_a_rotation_waits_for_every_batch(tmp_path):
    landing_dir, archive, checkpoint = (str(tmp_path / d) for d in ("landing", "archive", "checkpoint"))
    gen = landing_archive.current(checkpoint)
    assert gen == landing_archive.Generation(0, 0)
    files = {}
    for name in ("a.jsonl", "sub/b.jsonl", "c.jsonl", "d.jsonl"):
        path = _write(landing_dir, name, b'{"x":1}\n', 1_700_000_000)
        files[name] = {"path": name, "size": os.path.getsize(path), "mtime_ms": 1_700_000_000_000}
    landing_archive.enqueue(checkpoint, gen, 0, "20261125T101500000Z", [files["a.jsonl"], files["sub/b.jsonl"]])
    landing_archive.enqueue(checkpoint, gen, 1, "20261126T000000001Z", [files["c.jsonl"]])
    landing_archive.enqueue(checkpoint, gen, 2, "20261126T000010001Z", [files["d.jsonl"]])
    # nothing committed: nothing moves, and no rotation (a new source log would read them again)
    assert landing_archive.drain(landing_dir, archive, checkpoint) == 0
    assert landing_archive.rotate(landing_dir, archive, checkpoint, gen) is None
    assert _input_files(landing_dir) == ["a.jsonl", "c.jsonl", "d.jsonl", "sub/b.jsonl"]

    _commit(checkpoint, gen, 0)
    _commit(checkpoint, gen, 1)
    _write(landing_dir, "c.jsonl", b'{"x":2}\n{"x":3}\n', 1_700_000_100)  # replaced after batch 1 read it
    assert landing_archive.drain(landing_dir, archive, checkpoint) == 2
    assert _input_files(landing_dir) == ["c.jsonl", "d.jsonl"]  # c: left for the audit's quarantine
    assert os.path.exists(os.path.join(archive, "received=2026-11-25", "sub", "b.jsonl"))
    assert os.path.exists(os.path.join(archive, "received=2026-11-25", "a.jsonl"))
    assert [e["batch_id"] for e in landing_archive.queued(checkpoint)] == [2]
    assert landing_archive.archived_days(archive) == {date(2026, 11, 25): 2}

    # batch 2 committed and a planned batch 3 that the graceful stop refused (offsets only)
    _commit(checkpoint, gen, 2)
    offsets = os.path.join(gen.query_dir(checkpoint), "offsets")
    os.makedirs(offsets)
    for n in range(4):
        open(os.path.join(offsets, str(n)), "w").close()
    nxt = landing_archive.rotate(landing_dir, archive, checkpoint, gen)
    assert nxt == landing_archive.Generation(1, 4)  # batch ids continue after every planned one
    assert landing_archive.current(checkpoint) == nxt
    assert not os.path.exists(gen.query_dir(checkpoint))
    assert _input_files(landing_dir) == ["c.jsonl"]
    assert landing_archive.queued(checkpoint) == []


def test_a_name_landed_again_after_its_file_was_archived_is_pending_not_replaced(tmp_path, capsys):
    root, lake, archive = (str(tmp_path / d) for d in ("land", "lake", "archive"))
    lake = Lake.open(lake)
    path = _write(root, "f.jsonl", b'{"x":1}\n', 1_700_000_000)
    landing_ledger.record_batch(
        lake,
        "20261125T101500000Z",
        0,
        [
            {
                "path": "f.jsonl",
                "size": os.path.getsize(path),
                "mtime_ms": 1_700_000_000_000,
                "lines": 1,
                "verdict": landing.INPUT,
            }
        ],
    )
    target = landing_archive.archive_path(archive, "20261125T101500000Z", "f.jsonl")
    os.makedirs(os.path.dirname(target))
    os.replace(path, target)
    _write(root, "f.jsonl", b'{"x":1}\n{"x":2}\n', 1_700_000_500)
    assert [f.path for f in landing_ledger.audit(root, lake).replaced] == ["f.jsonl"]  # without the archive
    found = landing_ledger.audit(root, lake, archive)
    assert found.pending == ["f.jsonl"]
    assert found.replaced == []
    from tidemark.cli import main

    assert main(["landing", "--landing", root, "--lake", lake, "--archive", archive, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["pending"] == ["f.jsonl"]
    assert out["replaced"] == []
    assert out["archived"] == {"2026-11-25": 1}


def test_the_first_rotation_moves_files_read_before_the_archive_and_sets_replaced_ones_aside(tmp_path):
    """A stream that ran without --archive left read files in the landing: a new file-source log
    would read them again, so the first rotation moves them (the ledger says which), and a file
    replaced after it was read has its new content quarantined once and leaves the landing."""
    from tidemark.ingest import quarantine

    root, lake, archive, checkpoint = (str(tmp_path / d) for d in ("land", "lake", "archive", "checkpoint"))
    lake = Lake.open(lake)
    read = _write(root, "old/a.jsonl", b'{"x":1}\n', 1_700_000_000)
    replaced = _write(root, "r.jsonl", b'{"x":1}\n', 1_700_000_000)
    landing_ledger.record_batch(
        lake,
        "20261120T080000000Z",
        0,
        [
            {
                "path": p,
                "size": os.path.getsize(full),
                "mtime_ms": 1_700_000_000_000,
                "lines": 1,
                "verdict": landing.INPUT,
            }
            for p, full in (("old/a.jsonl", read), ("r.jsonl", replaced))
        ],
    )
    _write(root, "r.jsonl", b'{"x":2}\n{"x":3}\n', 1_700_000_900)
    _write(root, "pending.jsonl", b'{"x":4}\n', 1_700_000_900)
    gen = landing_archive.current(checkpoint)

    def sweep():
        landing_ledger.sweep_read(root, lake, archive)

    # a batch planned in the offset log and not committed, which a run without the archive began
    # (its ledger entry, under its batch timestamp, exists): its replay needs the files, no rotation
    offsets = os.path.join(gen.query_dir(checkpoint), "offsets")
    os.makedirs(offsets)
    with open(os.path.join(offsets, "0"), "w") as out:
        stamp_ms = int(layout.parse_receipt_ts("20261120T080000000Z").timestamp() * 1000)
        out.write(f'v1\n{{"batchWatermarkMs":0,"batchTimestampMs":{stamp_ms},"conf":{{}}}}\n{{"logOffset":0}}\n')
    assert landing_archive.rotate(root, archive, checkpoint, gen, sweep=sweep, lake=lake) is None
    assert _input_files(root) == ["old/a.jsonl", "pending.jsonl", "r.jsonl"]
    _commit(checkpoint, gen, 0)
    nxt = landing_archive.rotate(root, archive, checkpoint, gen, sweep=sweep, lake=lake)
    assert nxt.generation == 1
    assert _input_files(root) == ["pending.jsonl"]
    assert os.path.exists(os.path.join(archive, "received=2026-11-20", "old", "a.jsonl"))
    aside = [
        os.path.join(d, f) for d, _, fs in os.walk(os.path.join(archive, landing_archive.REPLACED_DIR)) for f in fs
    ]
    assert [os.path.basename(p) for p in aside] == ["r.jsonl"]
    assert sorted(r["raw"] for r in quarantine.read_quarantine(lake)) == [b'{"x":2}', b'{"x":3}']
    assert landing_ledger.audit(root, lake, archive).replaced == []
    # the batch reference reads the archive's received= folders, not the set-aside content
    assert sorted(landed_lines(archive)) == [b'{"x":1}']

    def no_sweep():
        raise AssertionError("a later generation ran with the archive throughout: no sweep")

    assert landing_archive.rotate(root, archive, checkpoint, nxt, sweep=no_sweep).generation == 2


def test_a_file_replaced_before_its_batch_was_archived_is_quarantined_and_set_aside(tmp_path):
    from streaming_job.job import StreamConfig, _set_aside
    from tidemark.ingest import quarantine

    root, lake, archive, checkpoint = (str(tmp_path / d) for d in ("land", "lake", "archive", "checkpoint"))
    lake = Lake.open(lake)
    path = _write(root, "f.jsonl", b'{"x":1}\n', 1_700_000_000)
    item = {"path": "f.jsonl", "size": os.path.getsize(path), "mtime_ms": 1_700_000_000_000}
    gen = landing_archive.current(checkpoint)
    landing_archive.enqueue(checkpoint, gen, 0, "20261125T101500000Z", [item])
    landing_ledger.record_batch(lake, "20261125T101500000Z", 0, [{**item, "lines": 1, "verdict": landing.INPUT}])
    _commit(checkpoint, gen, 0)
    _write(root, "f.jsonl", b'{"x":9}\n', 1_700_000_100)
    config = StreamConfig(landing=root, lake=lake, checkpoint=checkpoint, archive=archive)
    assert landing_archive.drain(root, archive, checkpoint, _set_aside(config)) == 0
    assert _input_files(root) == []
    assert landing_archive.queued(checkpoint) == []
    assert [r["raw"] for r in quarantine.read_quarantine(lake)] == [b'{"x":9}']
    assert list(landed_lines(archive)) == []  # set aside, not archived as read


# --- the real stream ---------------------------------------------------------------------------


def stream_cmd(landing_dir, lake, checkpoint, archive, *extra):
    return [
        sys.executable,
        "-m",
        "tidemark.cli",
        "stream",
        "--landing",
        landing_dir,
        "--lake",
        lake,
        "--checkpoint",
        checkpoint,
        "--gap",
        "30m",
        "--allowed-lateness",
        "1h",
        "--archive",
        archive,
        "--max-files-per-trigger",
        "2",
        *extra,
    ]


def _queued_committed_files(checkpoint) -> int:
    return sum(len(e["files"]) for e in landing_archive.queued(checkpoint) if landing_archive.committed(checkpoint, e))


def _source_log_files(query_dir) -> set[str]:
    names = set()
    log_dir = os.path.join(query_dir, "sources", "0")
    for name in os.listdir(log_dir) if os.path.isdir(log_dir) else []:
        if not name.startswith("."):
            with open(os.path.join(log_dir, name)) as handle:
                names |= {json.loads(line)["path"].rsplit("/", 1)[-1] for line in handle.read().splitlines()[1:]}
    return names


def _stream_in_process(argv: list[str]) -> None:
    """`tidemark stream` (stream_cmd's command line) run in this process: the command's session
    builder gets the shared SparkSession, so a restart starts no JVM of its own."""
    assert argv[1:4] == ["-m", "tidemark.cli", "stream"]
    assert cli.main(argv[3:]) == 0


@pytest.mark.slow
@pytest.mark.spark
def test_archive_survives_a_kill_after_commit_and_generations_stay_exactly_once(tmp_path, spark):
    landing_dir, lake, checkpoint, archive = (str(tmp_path / d) for d in ("landing", "lake", "checkpoint", "archive"))
    lake = Lake.open(lake)  # path-like: the CLI's argument as well
    deliveries, _ = build(Workload(events=1200, users=25, days=2, seed=17, duplicate_rate=0.05))
    chunks = split_files(deliveries, 18)
    names = [
        os.path.basename(write_file(landing_dir, i, chunk, mtime=time.time() - 100 + i / 100))
        for i, chunk in enumerate(chunks[:6])
    ]
    env = {**os.environ, "TIDEMARK_LOG_LEVEL": "WARNING"}
    log = open(tmp_path / "stream.log", "ab")  # noqa: SIM115 - the streams started below write to it until the test ends

    # 1. A stream that commits its batches but never gets to move their files (archive interval 1 h),
    #    killed: the state a SIGKILL between Spark's commit and the move leaves.
    proc = subprocess.Popen(
        stream_cmd(landing_dir, lake, checkpoint, archive, "--trigger-interval", "200ms", "--archive-interval", "1h"),
        stdout=log,
        stderr=log,
        env=env,
        start_new_session=True,
    )
    try:
        wait_for(
            lambda: _queued_committed_files(checkpoint) == 6,
            240,
            "6 files in committed batches",
            interval=0.2,
            abort=lambda: stream_alive(proc),
        )
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert _input_files(landing_dir) == sorted(names)  # committed, not moved
    before = partition_snapshot(lake)
    ledger_before = sorted(os.listdir(lake.landing_ledger_dir()))

    # 2. The restart moves them and reads none of them again (this run and the next ones: the same
    #    command in this process, on the shared session's JVM).
    _stream_in_process(stream_cmd(landing_dir, lake, checkpoint, archive, "--available-now"))
    assert _input_files(landing_dir) == []
    assert landing_archive.queued(checkpoint) == []
    assert sum(landing_archive.archived_days(archive).values()) == 6
    assert partition_snapshot(lake) == before
    assert sorted(os.listdir(lake.landing_ledger_dir())) == ledger_before

    # 3. Generations: rotate every 2 batches (2 files each), mid-run and at the end of a run.
    for i, chunk in enumerate(chunks[6:12], start=6):
        write_file(landing_dir, i, chunk, mtime=time.time() - 50 + i / 100)
    _stream_in_process(
        stream_cmd(landing_dir, lake, checkpoint, archive, "--available-now", "--checkpoint-rotation", "2")
    )
    assert landing_archive.current(checkpoint).generation >= 1
    late_names = [
        os.path.basename(write_file(landing_dir, i, chunk, mtime=time.time() - 20 + i / 100))
        for i, chunk in enumerate(chunks[12:], start=12)
    ]
    first = landing_archive.current(checkpoint)
    _stream_in_process(
        stream_cmd(landing_dir, lake, checkpoint, archive, "--available-now", "--checkpoint-rotation", "2")
    )
    gen = landing_archive.current(checkpoint)
    assert gen.generation > first.generation
    # at most the current generation's query folder is left (none if the run ended by rotating),
    # and its source log holds no file of an earlier generation
    assert set(n for n in os.listdir(checkpoint) if n.startswith("query")) <= {
        os.path.basename(gen.query_dir(checkpoint))
    }
    assert _source_log_files(gen.query_dir(checkpoint)) <= set(late_names)
    assert _input_files(landing_dir) == []
    assert sum(landing_archive.archived_days(archive).values()) == len(chunks)

    # exactly once: every valid event landed is in the lake, no pane twice, one receipt_ts per batch
    landed = list(landed_lines(landing_dir)) + list(landed_lines(archive))
    sent = set(valid_events(landed))
    rows = panes(lake)
    assert {(r["user_id"], e) for r in rows for e in r["event_ids"]} == {(u, e) for u, e, _ in sent}
    pane_keys = [(r["session_id"], r["pane_index"], r["batch_id"]) for r in rows]
    assert len(pane_keys) == len(set(pane_keys))
    receipts_of_batch = {}
    for r in rows:
        receipts_of_batch.setdefault(r["batch_id"], set()).add(r["receipt_ts"])
    assert all(len(v) == 1 for v in receipts_of_batch.values())
    assert len({next(iter(v)) for v in receipts_of_batch.values()}) == len(receipts_of_batch)
    # and the deduplicated sessions are the reference's: state carried across every generation
    from tidemark.deduplication.dedup import run_dedup

    rules = rules_record.rules_in_force(lake)[0]
    want = {}
    for session in sessionize(sent, rules):
        want.setdefault(session.event_date, set()).add(session.key())
    for event_date in receipts.list_event_dates(lake):
        run_dedup(lake, event_date, rules, spark=spark)
    for event_date in sorted(set(want) | set(receipts.list_event_dates(lake))):
        table = reader.read_sessions(
            lake, event_date, columns=["user_id", "session_start", "session_end", "event_count"]
        )
        assert lake_keys(reader.to_records(table)) == want.get(event_date, set()), event_date


def test_the_landing_bench_lands_tiny_files_fast_and_counts_the_archive_move(tmp_path):
    from bench import landing_age

    root = str(tmp_path / "landing")
    landing_age.land(root, 2500)
    landing_age.land(root, 10, start=2500)
    found = landing.list_landing(root)
    assert len(found) == 2510
    assert {f.verdict for f in found} == {landing.INPUT}
    assert len(os.listdir(root)) == 3  # 1,000 files a folder
    seconds, ops = landing_age.drain_cost(str(tmp_path))
    assert ops["list"] <= 2
    assert ops["stat"] <= 4


def test_only_a_first_write_that_never_finished_is_cleared(tmp_path):
    """landing_archive.clear_unfinished_first_write removes Spark's hidden leftovers from offsets/
    only while no numbered entry exists (no batch was ever planned there)."""
    query = tmp_path / "query"
    offsets = query / "offsets"
    offsets.mkdir(parents=True)
    (offsets / ".0.abc.tmp").write_text("v1\n")
    (offsets / "..0.abc.tmp.crc").write_text("crc")
    assert sorted(landing_archive.clear_unfinished_first_write(str(query))) == ["..0.abc.tmp.crc", ".0.abc.tmp"]
    assert os.listdir(offsets) == []
    (offsets / "0").write_text("v1\n")
    (offsets / ".1.def.tmp").write_text("v1\n")  # a later write in flight: Spark's to finish or ignore
    assert landing_archive.clear_unfinished_first_write(str(query)) == []
    assert sorted(os.listdir(offsets)) == [".1.def.tmp", "0"]
    assert landing_archive.clear_unfinished_first_write(str(tmp_path / "new")) == []  # nothing there yet


@pytest.mark.slow
@pytest.mark.spark
def test_a_rotation_skipped_for_a_half_done_batch_resumes_the_generation(tmp_path, spark, monkeypatch):
    """A rotation is skipped while a batch of the generation is half done (its ledger entry written,
    no commit). The stream must then resume that generation and replay the batch, not end: an
    --available-now run would otherwise leave files in the landing, and a running stream would exit.
    The stop is made to land before the query's first trigger (what a slow start under load gives),
    so the half-done batch of a crashed run is still there when the rotation is tried."""
    from streaming_job import batch, job
    from streaming_job.job import StreamConfig, run_stream

    landing_dir, checkpoint, archive = (str(tmp_path / d) for d in ("landing", "checkpoint", "archive"))
    lake = Lake.open(tmp_path / "lake")
    deliveries, _ = build(Workload(events=600, users=12, days=2, seed=23, duplicate_rate=0.05))
    for i, chunk in enumerate(split_files(deliveries, 6)):
        write_file(landing_dir, i, chunk, mtime=time.time() - 100 + i / 100)

    # 1. A run that crashes in its third batch right after the batch's ledger entry: batches 0 and
    #    1 committed, batch 2 half done.
    record_batch = landing_ledger.record_batch

    def crash_in_batch_two(lake_, receipt_ts, batch_id, files, **recorded):
        record_batch(lake_, receipt_ts, batch_id, files, **recorded)
        if batch_id == 2:
            raise RuntimeError("crash after batch 2's ledger entry")

    monkeypatch.setattr(batch.landing_ledger, "record_batch", crash_in_batch_two)
    config = dict(available_now=True, max_files_per_trigger=1, archive=archive)
    with pytest.raises(Exception, match="crash after batch 2"):
        run_stream(StreamConfig(landing_dir, lake, checkpoint, **config), spark=spark)
    monkeypatch.setattr(batch.landing_ledger, "record_batch", record_batch)
    generation = landing_archive.current(checkpoint)
    commits = os.listdir(os.path.join(generation.query_dir(checkpoint), "commits"))
    assert sorted(n for n in commits if n.isdigit()) == ["0", "1"]

    # 2. A restart that rotates after every batch, whose stops come at once (before a trigger).
    monkeypatch.setattr(job, "_stop_between_batches", lambda query: query.stop())
    run_stream(StreamConfig(landing_dir, lake, checkpoint, rotate_after=1, archive_interval=0.0, **config), spark=spark)
    assert _input_files(landing_dir) == []
    assert landing_archive.current(checkpoint).generation >= 1
    in_lake = {(r["user_id"], e) for r in panes(lake) for e in r["event_ids"]}
    assert in_lake == {(u, e) for u, e, _ in valid_events(landed_lines(archive))}


# --- a name landed again: every content kept, every run reads it ------------------------------


def _read_batch(root, lake, checkpoint, gen, spark_batch_id, receipt_ts, path):
    """What the stream does for a committed batch that read one landed file: queue entry, ledger
    entry, Spark's commit."""
    full = os.path.join(root, path)
    item = {"path": path, "size": os.path.getsize(full), "mtime_ms": int(os.path.getmtime(full) * 1000)}
    landing_archive.enqueue(checkpoint, gen, spark_batch_id, receipt_ts, [item])
    landing_ledger.record_batch(lake, receipt_ts, spark_batch_id, [{**item, "lines": 1, "verdict": landing.INPUT}])
    _commit(checkpoint, gen, spark_batch_id)


def _archived(archive) -> dict[str, bytes]:
    out = {}
    for folder, _, names in os.walk(archive):
        for name in names:
            full = os.path.join(folder, name)
            with open(full, "rb") as handle:
                out[os.path.relpath(full, archive)] = handle.read()
    return out


def test_a_name_read_again_with_other_content_of_the_same_size_keeps_both_in_the_archive(tmp_path):
    """The archive keeps every content it was handed: a name read again the same day with new
    content of the same size is archived beside the first, told apart by its content's SHA-256; a
    content the archive already holds (a move retried after a kill between a bucket's copy and its
    delete, the same file landed again) stays one copy. The batch reference reads every version,
    each at the receipt time of the batch that read it."""
    import hashlib

    from tidemark.demo.batch_reference import input_files, landed_files

    root, archive, checkpoint = (str(tmp_path / d) for d in ("land", "archive", "checkpoint"))
    lake = Lake.open(tmp_path / "lake")
    gen = landing_archive.current(checkpoint)
    e1, e2 = b'{"e":"one"}\n', b'{"e":"two"}\n'
    assert len(e1) == len(e2)
    _write(root, "sub/r.jsonl", e1, 1_700_000_000)
    _read_batch(root, lake, checkpoint, gen, 0, "20261125T101500000Z", "sub/r.jsonl")
    assert landing_archive.drain(root, archive, checkpoint) == 1
    _write(root, "sub/r.jsonl", e2, 1_700_000_100)
    _read_batch(root, lake, checkpoint, gen, 1, "20261125T121500000Z", "sub/r.jsonl")
    assert landing_archive.drain(root, archive, checkpoint) == 1
    version = f"received=2026-11-25/sub/r.jsonl.sha256-{hashlib.sha256(e2).hexdigest()}"
    assert _archived(archive) == {"received=2026-11-25/sub/r.jsonl": e1, version: e2}
    assert _input_files(root) == []

    # a kill between the copy and the delete of a move: the archive has the copy, the landing the file
    _write(root, "sub/r.jsonl", e2, 1_700_000_200)
    landing_archive.move_read(root, archive, "20261125T131500000Z", "sub/r.jsonl")
    _write(root, "sub/r.jsonl", e1, 1_700_000_300)
    landing_archive.move_read(root, archive, "20261125T141500000Z", "sub/r.jsonl")
    assert _archived(archive) == {"received=2026-11-25/sub/r.jsonl": e1, version: e2}
    assert _input_files(root) == []

    # the reference reads both contents under the landed name, each judged when its batch read it
    assert sorted((original, p) for _, p, original, _ in input_files(root, archive)) == [
        ("sub/r.jsonl", "received=2026-11-25/sub/r.jsonl"),
        ("sub/r.jsonl", version),
    ]
    assert sorted(landed_files(root, lake, archive=archive)) == [
        ("sub/r.jsonl", landing_ledger.receipt_us("20261125T101500000Z"), [b'{"e":"one"}']),
        ("sub/r.jsonl", landing_ledger.receipt_us("20261125T121500000Z"), [b'{"e":"two"}']),
    ]


def _stream(landing_dir, lake, checkpoint, spark, **options):
    from streaming_job.job import StreamConfig, run_stream

    run_stream(StreamConfig(landing_dir, lake, checkpoint, available_now=True, **options), spark=spark)


def _events_in_lake(lake) -> set[tuple[str, str]]:
    return {(r["user_id"], e) for r in panes(lake) for e in r["event_ids"]}


def _deduplicated(lake, spark) -> dict[date, set[tuple]]:
    from tidemark.deduplication.dedup import run_dedup

    rules = rules_record.rules_in_force(lake)[0]
    out = {}
    for event_date in receipts.list_event_dates(lake):
        run_dedup(lake, event_date, rules, spark=spark)
        table = reader.read_sessions(
            lake, event_date, columns=["user_id", "session_start", "session_end", "event_count"]
        )
        out[event_date] = lake_keys(reader.to_records(table))
    return out


def _reused(n: int) -> list[str]:
    """The lines of the n-th content landed as r.jsonl: every content the same byte size, and each
    one's events continue the sessions of the one before."""
    from tests.streamkit import event

    return [event(f"u-r{u}", f"r-{n}-{u}", f"2026-03-06T10:{10 * n:02d}:00Z") for u in range(3)]


@pytest.mark.slow
@pytest.mark.spark
def test_a_lake_rebuilt_from_the_archive_equals_the_original_with_reused_names_of_equal_size(tmp_path, spark):
    """A name read, archived, landed again with other content of the same size and read by the next
    generation: the archive keeps both contents, and a lake rebuilt from it (the stream with the
    archive as its landing, docs/input-contract.md) equals the original, date by date."""
    landing_dir, checkpoint, archive = (str(tmp_path / d) for d in ("landing", "checkpoint", "archive"))
    lake = Lake.open(tmp_path / "lake")
    deliveries, _ = build(Workload(events=300, users=8, days=2, seed=29, duplicate_rate=0.05))
    chunks = split_files(deliveries, 4)
    bounded = dict(archive=archive, rotate_after=1, max_files_per_trigger=2)
    for round_ in (0, 1):
        for i in (2 * round_, 2 * round_ + 1):
            write_file(landing_dir, i, chunks[i], mtime=time.time() - 100 + i)
        os.makedirs(os.path.join(landing_dir, "sub"), exist_ok=True)
        with open(os.path.join(landing_dir, "sub", "r.jsonl"), "w") as out:
            out.write("\n".join(_reused(round_)) + "\n")
        _stream(landing_dir, lake, checkpoint, spark, **bounded)
        assert _input_files(landing_dir) == []
    sizes = {len("\n".join(_reused(n))) for n in (0, 1)}
    assert len(sizes) == 1
    reused = {(f"u-r{u}", f"r-{n}-{u}") for n in (0, 1) for u in range(3)}
    assert reused <= _events_in_lake(lake)
    archived = [p for p in _archived(archive) if os.path.basename(p).startswith("r.jsonl")]
    assert len(archived) == 2, archived  # both contents of sub/r.jsonl

    rebuilt = Lake.open(tmp_path / "rebuilt")
    _stream(archive, rebuilt, str(tmp_path / "rebuilt-checkpoint"), spark)
    assert _events_in_lake(rebuilt) == _events_in_lake(lake)
    original = _deduplicated(lake, spark)
    assert _deduplicated(rebuilt, spark) == original
    from tidemark.demo.batch_reference import sessions_by_date

    assert sessions_by_date(landing_dir, rules_record.rules_in_force(lake)[0], lake, archive) == original


@pytest.mark.slow
@pytest.mark.spark
def test_a_name_landed_again_mid_generation_is_read_by_the_next_run_and_by_a_running_stream(
    tmp_path, spark, monkeypatch
):
    """Spark's file source never reads a name of its generation again: a name landed again after
    its file was archived, mid-generation, makes the stream rotate (at the end of an --available-now
    run, or between two batches of a running stream) so that the next generation reads it, instead
    of leaving it pending until some other file causes a rotation."""
    import threading

    from streaming_job import job
    from tests.streamkit import land

    landing_dir, checkpoint, archive = (str(tmp_path / d) for d in ("landing", "checkpoint", "archive"))
    lake = Lake.open(tmp_path / "lake")
    bounded = dict(archive=archive, rotate_after=100)

    def land_reused(n):
        with open(os.path.join(landing_dir, "r100.jsonl"), "w") as out:
            out.write("\n".join(_reused(n)) + "\n")

    land(landing_dir, [_reused(9)])  # another file, read with the first r100.jsonl
    land_reused(0)
    _stream(landing_dir, lake, checkpoint, spark, **bounded)
    assert landing_archive.current(checkpoint).generation == 0
    assert _input_files(landing_dir) == []

    # 1. --available-now: the run that finds the name pending rotates and reads it
    land_reused(1)
    _stream(landing_dir, lake, checkpoint, spark, **bounded)
    assert _input_files(landing_dir) == []
    assert {(f"u-r{u}", f"r-1-{u}") for u in range(3)} <= _events_in_lake(lake)
    generation = landing_archive.current(checkpoint)
    assert generation.generation == 1

    # 2. a running stream: the landing audit finds it, the stream rotates between two batches
    captured: list[threading.Event] = []  # the stream's stop event, set here instead of by SIGTERM

    def capture(event):
        captured.append(event)
        return {}

    monkeypatch.setattr(job, "_install_stop_handlers", capture)
    wanted = {(f"u-r{u}", f"r-2-{u}") for u in range(3)}

    def watch():
        deadline = time.monotonic() + 120
        while not captured and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)
        land_reused(2)
        while time.monotonic() < deadline and not wanted <= _events_in_lake(lake):
            time.sleep(0.5)
        if captured:
            captured[0].set()

    watcher = threading.Thread(target=watch)
    watcher.start()
    from streaming_job.job import StreamConfig, run_stream

    run_stream(
        StreamConfig(
            landing_dir,
            lake,
            checkpoint,
            trigger_interval="200ms",
            archive_interval=0.2,
            landing_audit_interval=0.5,
            **bounded,
        ),
        spark=spark,
    )
    watcher.join()
    assert wanted <= _events_in_lake(lake)
    assert landing_archive.current(checkpoint).generation == 2


def test_unread_files_are_pending_names_a_committed_batch_of_the_generation_listed(tmp_path):
    """landing_archive.unread: Spark's source log of the generation (the newest compact file and the
    entries after it) says which names its query never reads again; a batch not committed yet
    still reads its files."""
    root, checkpoint = str(tmp_path / "land dir"), str(tmp_path / "checkpoint")
    gen = landing_archive.Generation(1, 40)
    sources = os.path.join(gen.query_dir(checkpoint), "sources", "0")
    os.makedirs(sources)
    url = "file://" + root.replace(" ", "%20")

    def log_file(name, entries):
        with open(os.path.join(sources, name), "w") as out:
            out.write(
                "\n".join(
                    ["v1", *(json.dumps({"path": f"{url}/{p}", "timestamp": 1, "batchId": b}) for p, b in entries)]
                )
            )

    log_file("0", [("gone.jsonl", 0)])  # before the compact file: in it too
    log_file("9.compact", [("gone.jsonl", 0), ("a.jsonl", 3), ("sub/b.jsonl", 9)])
    log_file("10", [("c.jsonl", 10)])
    log_file("11", [("d.jsonl", 11)])  # planned, not committed
    open(os.path.join(sources, ".12.tmp"), "w").close()
    for n in range(11):
        _commit(checkpoint, gen, n)
    pending = ["a.jsonl", "c.jsonl", "d.jsonl", "new.jsonl", "sub/b.jsonl"]
    assert landing_archive.unread(root, checkpoint, gen, pending) == ["a.jsonl", "c.jsonl", "sub/b.jsonl"]
    assert landing_archive.unread(root, checkpoint, gen, []) == []
    assert landing_archive.unread(root, checkpoint, landing_archive.Generation(2, 60), pending) == []


def test_a_name_landed_again_after_its_file_was_set_aside_is_pending(tmp_path):
    """A file replaced after it was read is quarantined and set aside; a file landed later under the
    name is a new one (pending: the stream reads it), not the replaced content again."""
    from streaming_job.job import StreamConfig, _set_aside

    root, archive, checkpoint = (str(tmp_path / d) for d in ("land", "archive", "checkpoint"))
    lake = Lake.open(tmp_path / "lake")
    gen = landing_archive.current(checkpoint)
    _write(root, "f.jsonl", b'{"x":1}\n', 1_700_000_000)
    _read_batch(root, lake, checkpoint, gen, 0, "20261125T101500000Z", "f.jsonl")
    _write(root, "f.jsonl", b'{"x":2}\n', 1_700_000_100)
    config = StreamConfig(landing=root, lake=lake, checkpoint=checkpoint, archive=archive)
    landing_archive.drain(root, archive, checkpoint, _set_aside(config))
    assert _input_files(root) == []
    _write(root, "f.jsonl", b'{"x":3}\n{"x":4}\n', 1_700_000_200)
    found = landing_ledger.audit(root, lake, archive)
    assert found.pending == ["f.jsonl"]
    assert found.replaced == []


def test_a_copy_from_another_filesystem_appears_whole_under_its_name(tmp_path):
    """A move across filesystems copies to a hidden name and renames it into place on a local disk,
    so a kill mid-copy leaves no partial file under an input name (the retry copies again)."""
    import pyarrow.fs as pafs

    (tmp_path / "land").mkdir()
    (tmp_path / "land" / "f.jsonl").write_bytes(b'{"x":1}\n')
    source_fs = pafs.SubTreeFileSystem(str(tmp_path / "land"), pafs.LocalFileSystem())
    target = str(tmp_path / "archive" / "received=2026-11-25" / "f.jsonl")
    landing_archive._transfer(source_fs, "f.jsonl", pafs.LocalFileSystem(), target)
    assert os.listdir(tmp_path / "land") == []
    assert os.listdir(os.path.dirname(target)) == ["f.jsonl"]
    assert Path(target).read_bytes() == b'{"x":1}\n'
