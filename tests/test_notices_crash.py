"""SIGKILL the stream while it writes and advertises, restart it on the same checkpoint and lake
(with another cadence), and check the notices on the real emulator: every complete partition is
advertised by exactly one notice_id, and a notice that arrives twice is the same notice."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict

import pytest

from tests.helpers import same_notice_copies, stream_alive, wait_for
from tidemark.base import layout, names
from tidemark.cli import main as cli_main
from tidemark.demo.generate import Workload, build, split_files, write_file
from tidemark.devstack.pubsub_emulator import PubSubEmulator, ensure_subscription, ensure_topic, pull_all, pull_until
from tidemark.notices import availability_notice
from tidemark.notices.outbox import Outbox
from tidemark.panes import receipts
from tidemark.store.lake import Lake

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

PROJECT = names.get("PROJECT")


def stream_cmd(landing, lake, checkpoint, topic, *extra):
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
        "--max-files-per-trigger",
        "2",
        "--notify-topic",
        topic,
        *extra,
    ]


def sent_count(lake: Lake) -> int:
    return sum(1 for n in lake.notices_dir("sent").names() if n.endswith(".json"))


def wait_for_sent(lake, at_least, timeout, proc):
    wait_for(
        lambda: sent_count(lake) >= at_least,
        timeout,
        f"{at_least} notices sent",
        interval=0.2,
        abort=lambda: stream_alive(proc),
    )


def test_sigkill_and_restart_advertise_each_partition_once(tmp_path):
    landing, lake, checkpoint = (str(tmp_path / d) for d in ("landing", "lake", "checkpoint"))
    lake = Lake.open(lake)
    deliveries, _ = build(Workload(events=800, users=20, days=2, seed=3))
    for i, chunk in enumerate(split_files(deliveries, 12)):
        write_file(landing, i, chunk, mtime=time.time() - 100 + i / 100)
    emulator = PubSubEmulator(str(tmp_path / "pubsub")).start()
    try:
        ensure_topic(PROJECT, "crash-topic", host=emulator.host)
        ensure_subscription(PROJECT, "crash-topic-all", "crash-topic", host=emulator.host)
        topic = f"projects/{PROJECT}/topics/crash-topic"
        env = {**os.environ, "TIDEMARK_LOG_LEVEL": "WARNING", "PUBSUB_EMULATOR_HOST": emulator.host}
        rng = random.Random(8)
        with open(tmp_path / "stream.log", "ab") as log:
            # Run 1: a notice per partition; run 2: coalesced notices; both killed mid-flight.
            for cadence in ([], ["--notice-coalesce", "2s"]):
                proc = subprocess.Popen(
                    stream_cmd(landing, lake, checkpoint, topic, "--trigger-interval", "200ms", *cadence),
                    stdout=log,
                    stderr=log,
                    env=env,
                    start_new_session=True,
                )
                try:
                    wait_for_sent(lake, sent_count(lake) + 1, 300, proc)
                    time.sleep(rng.uniform(0.0, 3.0))
                finally:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            subprocess.run(
                stream_cmd(landing, lake, checkpoint, topic, "--available-now", "--notice-coalesce", "2s"),
                stdout=log,
                stderr=log,
                env=env,
                check=True,
                timeout=600,
            )
        # Pull until every notice the outbox records as sent arrived (a pull may return only part
        # of what is waiting); then whatever else is still there (copies) until quiet.
        sent = {e["notice"]["notice_id"] for e in Outbox(lake).sent()}
        raw = pull_until(
            PROJECT,
            "crash-topic-all",
            host=emulator.host,
            done=lambda got: sent <= {availability_notice.decode(m.message.data)["notice_id"] for m in got},
        )
        raw += pull_all(PROJECT, "crash-topic-all", host=emulator.host)
        received = [(availability_notice.decode(m.message.data), dict(m.message.attributes)) for m in raw]
    finally:
        emulator.stop()

    by_id = same_notice_copies(received)
    advertised = defaultdict(set)
    for notice_id, body in by_id.items():
        for receipt_ts in body["receipt_ts_list"]:
            advertised[(layout.as_event_date(body["event_date"]), receipt_ts)].add(notice_id)
    on_disk = {(d, r) for d in receipts.list_event_dates(lake) for r in receipts.list_receipts(lake, d)}
    assert set(advertised) == on_disk
    assert all(len(ids) == 1 for ids in advertised.values()), "a partition advertised under two ids"
    assert {k for k, v in by_id.items()} == {e["notice"]["notice_id"] for e in Outbox(lake).sent()}
    assert Outbox(lake).owed() == []
    assert {b["kind"] for b, _ in received} >= {"partition", "coalesced"}
    assert cli_main(["notices", "--lake", str(lake), "--check", "--format", "summary"]) == 0
