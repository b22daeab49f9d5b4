"""Kill the stream with SIGKILL at random moments, restart it on the same checkpoint, and check
that no event is lost, none is duplicated once deduplicated, and complete partitions never change."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers import stream_alive, wait_for
from tests.reference import landed_lines, valid_events
from tests.streamkit import panes, partition_snapshot
from tidemark import cli
from tidemark.demo.generate import Workload, build, split_files, write_file
from tidemark.ingest import landing_archive
from tidemark.store.lake import Lake

pytestmark = pytest.mark.slow


def stream_cmd(landing, lake, checkpoint, *extra):
    return [
        sys.executable,
        "-m",
        "tidemark.cli",
        "stream",
        "--landing",
        landing,
        "--lake",
        str(lake),
        "--checkpoint",
        checkpoint,
        "--gap",
        "30m",
        "--allowed-lateness",
        "1h",
        "--max-files-per-trigger",
        "2",
        *extra,
    ]


def wait_for_markers(lake, at_least, timeout, proc):
    wait_for(
        lambda: len(partition_snapshot(lake)) >= at_least,
        timeout,
        f"{at_least} complete partitions",
        interval=0.2,
        abort=lambda: stream_alive(proc),
    )


@pytest.mark.parametrize("bounded", [False, True], ids=["landing", "archive-and-rotation"])
def test_sigkill_and_restart_lose_nothing_and_rewrite_nothing(tmp_path, spark, bounded):
    """bounded: the landing archive and checkpoint generations (tidemark.ingest.landing_archive), a
    rotation every 3 micro-batches, so the kills also land between a commit and the archive's move
    and inside rotations."""
    landing, lake, checkpoint = (str(tmp_path / d) for d in ("landing", "lake", "checkpoint"))
    archive = str(tmp_path / "archive")
    bounded_args = ("--archive", archive, "--checkpoint-rotation", "3") if bounded else ()
    lake = Lake.open(lake)
    deliveries, counts = build(Workload(events=1500, users=30, days=2, seed=11, duplicate_rate=0.05))
    chunks = split_files(deliveries, 24)
    for i, chunk in enumerate(chunks):
        write_file(landing, i, chunk, mtime=time.time() - 100 + i / 100)
    rng = random.Random(5)
    env = {**os.environ, "TIDEMARK_LOG_LEVEL": "WARNING"}
    log = open(tmp_path / "stream.log", "ab")  # noqa: SIM115 - the streams started below write to it until the test ends
    seen: dict = {}
    kills = 0
    for _ in range(3):
        proc = subprocess.Popen(
            stream_cmd(landing, lake, checkpoint, "--trigger-interval", "200ms", *bounded_args),
            stdout=log,
            stderr=log,
            env=env,
            start_new_session=True,
        )
        try:
            wait_for_markers(lake, len(seen) + 1, 240, proc)
            time.sleep(rng.uniform(0.0, 3.0))  # land the kill anywhere inside a batch
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            kills += 1
        snapshot = partition_snapshot(lake)
        for key, value in seen.items():
            assert snapshot.get(key) == value, f"complete partition {key} changed after a restart"
        seen = snapshot
    # finish everything that has landed: the same command in this process, on the shared
    # SparkSession's JVM (the command's builder gets it), not a JVM of its own
    assert cli.main(stream_cmd(landing, lake, checkpoint, "--available-now", *bounded_args)[3:]) == 0
    final = partition_snapshot(lake)
    for key, value in seen.items():
        assert final.get(key) == value, f"complete partition {key} changed"

    rows = panes(lake)
    in_lake = {(r["user_id"], e) for r in rows for e in r["event_ids"]}
    landed = list(landed_lines(landing)) + (list(landed_lines(archive)) if bounded else [])
    sent = {(u, e) for u, e, _ in valid_events(landed)}
    assert kills == 3
    if bounded:  # everything read left the landing, and the stream did rotate
        assert not [name for name in os.listdir(landing) if not name.startswith(".")]
        assert landing_archive.current(checkpoint).generation >= 1
    assert in_lake == sent
    # each batch wrote under exactly one receipt_ts, and no pane was written twice
    receipts_of_batch = {}
    for r in rows:
        receipts_of_batch.setdefault(r["batch_id"], set()).add(r["receipt_ts"])
    assert all(len(v) == 1 for v in receipts_of_batch.values())
    pane_keys = [(r["session_id"], r["pane_index"], r["batch_id"]) for r in rows]
    assert len(pane_keys) == len(set(pane_keys))
