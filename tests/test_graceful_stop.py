"""Releasing a new version of the stream without disturbing the data flow: SIGTERM to a running
`tidemark stream --notify-topic ...` while it still has files to take.

Checked: the process exits 0 (it finishes the micro-batch under way instead of dying in it); no
receipt partition folder lacks its completion marker; every complete partition's notice was
published (it reached a subscriber) or is still owed in the lake's outbox; and a restarted job
continues from its checkpoint: it takes every remaining file, no file is read by two committed
batches, and the partitions of the first run are neither rewritten nor repeated."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from streaming_job import receipts
from tidemark import layout, names, notice, storage
from tidemark.demo.wait import processed_files
from tidemark.generate import Workload, build, split_files, write_file
from tidemark.localstack import pubsub_emulator as ps
from tidemark.notices.outbox import Outbox

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]
PROJECT = "tidemark-graceful"
TOPIC = names.get("AVAILABILITY_TOPIC")
AUDIT = "graceful-audit"
STOP_WITHIN_S = 300  # generous bound on a loaded 2-core machine; "promptly" = not killed, not hung


def stream_argv(landing, lake, checkpoint, *extra):
    return [os.path.join(os.path.dirname(sys.executable), "tidemark"), "stream", "--landing", landing,
            "--lake", lake, "--checkpoint", checkpoint, "--master", "local[2]",
            "--notify-topic", f"projects/{PROJECT}/topics/{TOPIC}", "--max-files-per-trigger", "1", *extra]


def committed_batches(log_path: str) -> int:
    with open(log_path, encoding="utf-8", errors="replace") as handle:
        return handle.read().count('"batch committed"')


def folders_without_marker(lake: str) -> list[str]:
    torn = []
    for event_date in receipts.list_event_dates(lake):
        folder = layout.event_date_dir(lake, event_date)
        for name in storage.list_subdirs(folder):
            if name.startswith("receipt_ts=") and not storage.exists(layout.join(folder, name, layout.RECEIPT_MARKER)):
                torn.append(f"{event_date}/{name}")
    return torn


def snapshot(lake: str) -> dict:
    """Every complete receipt partition -> its marker."""
    return {(d, ts): receipts.read_marker(lake, d, ts).to_json()
            for d in receipts.list_event_dates(lake) for ts in receipts.list_receipts(lake, d)}


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


@pytest.fixture()
def emulator(tmp_path):
    with ps.PubSubEmulator(str(tmp_path / "pubsub")) as emu:
        ps.ensure_topic(PROJECT, TOPIC, host=emu.host)
        ps.ensure_subscription(PROJECT, AUDIT, TOPIC, host=emu.host)
        yield emu


def test_sigterm_mid_run_exits_cleanly_and_a_restart_continues(emulator, tmp_path):
    landing, lake, checkpoint = (str(tmp_path / d) for d in ("landing", "lake", "checkpoint"))
    deliveries, _ = build(Workload(events=900, users=12, days=2, seed=31))
    chunks = split_files(deliveries, 10)
    now = time.time()
    names_landed = [os.path.basename(write_file(landing, i, chunk, now + i / 1000)) for i, chunk in enumerate(chunks)]
    log_path = str(tmp_path / "stream.log")
    env = {**os.environ, "PUBSUB_EMULATOR_HOST": emulator.host, "PYTHONUNBUFFERED": "1"}

    with open(log_path, "wb") as log:
        proc = subprocess.Popen(stream_argv(landing, lake, checkpoint, "--trigger-interval", "1s"),
                                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while committed_batches(log_path) < 2:  # running, with files still to take (one per batch)
            assert proc.poll() is None, f"stream exited early:\n{open(log_path).read()[-3000:]}"
            assert time.monotonic() < deadline, "stream committed no batch in 600 s"
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        sent_at = time.monotonic()
        code = proc.wait(timeout=STOP_WITHIN_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    log_text = open(log_path, encoding="utf-8", errors="replace").read()
    print(f"\nstopped {time.monotonic() - sent_at:.1f}s after SIGTERM, "
          f"{committed_batches(log_path)} batches committed")
    assert code == 0, log_text[-3000:]
    assert '"graceful": true' in log_text
    first_run = snapshot(lake)
    taken = processed_files(checkpoint)
    assert first_run and 0 < len(taken) < len(names_landed), "SIGTERM did not land mid-run"
    assert folders_without_marker(lake) == []

    # Every complete partition was advertised (and arrived) or is still owed in the outbox.
    outbox = Outbox(lake)
    published = {ts for e in outbox.sent() for ts in e["notice"]["receipt_ts_list"]}
    owed = {ts for e in outbox.owed() for ts in e["notice"]["receipt_ts_list"]}
    assert {ts for _, ts in first_run} <= published | owed
    arrived = {notice.decode(m.message.data)["notice_id"]
               for m in ps.pull_all(PROJECT, AUDIT, host=emulator.host)}
    assert {e["notice"]["notice_id"] for e in outbox.sent()} <= arrived

    # Restart on the same checkpoint: the rest of the files, nothing twice, first run untouched.
    rerun = subprocess.run(stream_argv(landing, lake, checkpoint, "--available-now"), env=env,
                           capture_output=True, text=True, timeout=900)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    entries = file_batches(checkpoint)
    assert sorted(entries) == sorted(names_landed)  # each file in exactly one committed batch
    after = snapshot(lake)
    assert {k: after[k] for k in first_run} == first_run
    first_batches = {m["batch_id"] for m in first_run.values()}
    assert all(m["batch_id"] > max(first_batches) for k, m in after.items() if k not in first_run)
    assert folders_without_marker(lake) == []
    assert outbox.owed() == []  # the restarted job published what the first one still owed
