"""Releasing a new version of the stream without disturbing the data flow: SIGTERM to a running
`tidemark stream --notify-topic ...` while it still has files to take.

Checked: the process exits 0 (it finishes the micro-batch under way instead of dying in it); no
receipt partition folder lacks its completion marker; every complete partition's notice was
published (it reached a subscriber) or is still owed in the lake's outbox; and a restarted job
continues from its checkpoint: it takes every remaining file, no file is read by two committed
batches, and the partitions of the first run are neither rewritten nor repeated.
With a backlog, the micro-batch after the one under way is refused (left uncommitted), so the job
stops after at most the batch it was in."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tidemark import cli
from tidemark.base import layout, names
from tidemark.demo.generate import Workload, build, split_files, write_file
from tidemark.demo.wait import processed_files
from tidemark.devstack import pubsub_emulator as ps
from tidemark.notices import availability_notice
from tidemark.notices.outbox import Outbox
from tidemark.panes import receipts
from tidemark.store import lake as lake_layout
from tidemark.store import storage
from tidemark.store.lake import Lake

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]
PROJECT = "tidemark-graceful"
TOPIC = names.get("AVAILABILITY_TOPIC")
AUDIT = "graceful-audit"
STOP_WITHIN_S = 600  # generous bound on a loaded 2-core machine: stopped, not hung


def stream_argv(landing, lake, checkpoint, *extra):
    return [
        os.path.join(os.path.dirname(sys.executable), "tidemark"),
        "stream",
        "--landing",
        landing,
        "--lake",
        str(lake),
        "--checkpoint",
        checkpoint,
        "--master",
        "local[2]",
        "--notify-topic",
        f"projects/{PROJECT}/topics/{TOPIC}",
        "--max-files-per-trigger",
        "1",
        *extra,
    ]


def committed_batches(log_path: str) -> int:
    with open(log_path, encoding="utf-8", errors="replace") as handle:
        return handle.read().count('"batch committed"')


def folders_without_marker(lake: Lake) -> list[str]:
    torn = []
    for event_date in receipts.list_event_dates(lake):
        folder = lake.event_date_dir(event_date)
        for name in folder.subfolder_names():
            if name.startswith("receipt_ts=") and not folder.file(name, lake_layout.RECEIPT_MARKER).exists():
                torn.append(f"{event_date}/{name}")
    return torn


def snapshot(lake: Lake) -> dict:
    """Every complete receipt partition -> its marker."""
    return {
        (d, ts): receipts.read_marker(lake, d, ts).to_json()
        for d in receipts.list_event_dates(lake)
        for ts in receipts.list_receipts(lake, d)
    }


def file_batches(checkpoint: str) -> list[str]:
    """Every (file) entry of committed batches, repeated if a file were read twice."""
    query = layout.join(checkpoint, "query")
    committed = {int(n) for n in storage.list_dir(layout.join(query, "commits")) if n.isdigit()}
    import json

    out = []
    source_log = layout.join(query, "sources", "0")
    for name in storage.list_dir(source_log):
        if name.startswith("."):
            continue
        for line in (storage.read_text(layout.join(source_log, name)) or "").splitlines()[1:]:
            entry = json.loads(line)
            if entry["batchId"] in committed:
                out.append(entry["path"].rsplit("/", 1)[-1])
    return out


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    with ps.PubSubEmulator(str(tmp_path_factory.mktemp("pubsub"))) as emu:
        ps.ensure_topic(PROJECT, TOPIC, host=emu.host)
        ps.ensure_subscription(PROJECT, AUDIT, TOPIC, host=emu.host)
        yield emu


@pytest.fixture(scope="module")
def stopped(emulator, tmp_path_factory):
    """A stream with one file per micro-batch and files still to take gets SIGTERM; then more
    files land. Returns what was observed."""
    base = tmp_path_factory.mktemp("graceful")
    landing, lake, checkpoint = (str(base / d) for d in ("landing", "lake", "checkpoint"))
    lake = Lake.open(lake)
    deliveries, _ = build(Workload(events=900, users=12, days=2, seed=31))
    chunks = split_files(deliveries, 9)
    now = time.time()
    first = [os.path.basename(write_file(landing, i, chunk, now + i / 1000)) for i, chunk in enumerate(chunks[:6])]
    log_path = str(base / "stream.log")
    env = {**os.environ, "PUBSUB_EMULATOR_HOST": emulator.host, "PYTHONUNBUFFERED": "1"}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            stream_argv(landing, lake, checkpoint, "--trigger-interval", "1s"),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 600
        while committed_batches(log_path) < 2:  # running, with files still to take (one per batch)
            assert proc.poll() is None, f"stream exited early:\n{Path(log_path).read_text()[-3000:]}"
            assert time.monotonic() < deadline, "stream committed no batch in 600 s"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        sent_at = time.monotonic()
        at_signal = committed_batches(log_path)
        code = proc.wait(timeout=STOP_WITHIN_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    stop_seconds = round(time.monotonic() - sent_at, 1)
    log_text = Path(log_path).read_text(encoding="utf-8", errors="replace")
    at_exit = committed_batches(log_path)
    print(f"\nstopped {stop_seconds}s after SIGTERM; batches committed: {at_signal} at the signal, {at_exit} at exit")
    observed = {
        "code": code,
        "log": log_text,
        "at_signal": at_signal,
        "at_exit": at_exit,
        "landing": landing,
        "lake": lake,
        "checkpoint": checkpoint,
        "env": env,
        "first_files": first,
        "stop_seconds": stop_seconds,
        "first_run": snapshot(lake),
        "taken": processed_files(checkpoint),
        "torn": folders_without_marker(lake),
    }
    # New files after the stop: the restarted job must take exactly these and what was left.
    observed["all_files"] = first + [
        os.path.basename(write_file(landing, 6 + i, chunk, time.time() + i / 1000))
        for i, chunk in enumerate(chunks[6:])
    ]
    return observed


def test_sigterm_exits_0_with_every_partition_complete_and_every_notice_published_or_owed(stopped, emulator):
    assert stopped["code"] == 0, stopped["log"][-3000:]
    assert '"graceful": true' in stopped["log"]
    assert stopped["first_run"], "nothing was written before the stop"
    assert stopped["torn"] == []
    lake = stopped["lake"]
    outbox = Outbox(lake)
    published = {ts for e in outbox.sent() for ts in e["notice"]["receipt_ts_list"]}
    owed = {ts for e in outbox.owed() for ts in e["notice"]["receipt_ts_list"]}
    assert {ts for _, ts in stopped["first_run"]} <= published | owed
    sent = {e["notice"]["notice_id"] for e in outbox.sent()}
    # Pull until each sent notice arrived (one pull may return only part of what is waiting);
    # a notice that never arrives fails the pull with a timeout.
    ps.pull_until(
        PROJECT,
        AUDIT,
        host=emulator.host,
        done=lambda got: sent <= {availability_notice.decode(m.message.data)["notice_id"] for m in got},
    )


def test_a_restarted_job_continues_from_its_checkpoint(stopped, spark, monkeypatch):
    """The restart runs the same command line in this process, on the shared SparkSession's JVM (the
    command's builder gets it; a JVM of its own cost 15-45 s more under load)."""
    lake, checkpoint = stopped["lake"], stopped["checkpoint"]
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", stopped["env"]["PUBSUB_EMULATOR_HOST"])
    assert cli.main(stream_argv(stopped["landing"], lake, checkpoint, "--available-now")[1:]) == 0
    # Every file in exactly one committed batch: none skipped, none read again after the restart.
    assert sorted(file_batches(checkpoint)) == sorted(stopped["all_files"])
    after = snapshot(lake)
    first_run = stopped["first_run"]
    assert {k: after[k] for k in first_run} == first_run  # complete partitions never rewritten
    new = {k: m for k, m in after.items() if k not in first_run}
    assert new, "the restarted job wrote nothing for the files landed after the stop"
    assert min(m["batch_id"] for m in new.values()) > max(m["batch_id"] for m in first_run.values())
    assert folders_without_marker(lake) == []
    assert Outbox(lake).owed() == []  # what the first run still owed went out on the restart


def test_sigterm_finishes_only_the_micro_batch_under_way(stopped):
    assert stopped["code"] == 0
    assert stopped["at_exit"] - stopped["at_signal"] <= 1, (
        f"{stopped['at_exit'] - stopped['at_signal']} batches committed after SIGTERM"
    )
    assert len(stopped["taken"]) < len(stopped["first_files"])
