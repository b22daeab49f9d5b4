"""Availability notices on the real Pub/Sub emulator, started and stopped by these tests.

The emulator keeps everything in memory: after a restart the tests recreate topic and
subscriptions, exactly what a real outage does not need (the stream test cuts the network link
instead, tests/netcut.py). It stores subscription filters without applying them, so the tests
check the stored filter and the attributes it would match.

Receiving: a pull may return only part of what is waiting, or nothing, so the tests pull until
every notice the outbox records as sent has arrived (pull_until), and use "pull until quiet"
only to check that nothing (more) arrives.
"""

from __future__ import annotations

import os
from collections.abc import Collection

import pytest

from tests.helpers import same_notice_copies
from tidemark.base import layout, names
from tidemark.cli import main as cli_main
from tidemark.devstack.pubsub_emulator import (
    PubSubEmulator,
    ensure_subscription,
    ensure_topic,
    get_subscription,
    pull_all,
    pull_until,
)
from tidemark.notices import availability_notice
from tidemark.notices.outbox import Outbox
from tidemark.notices.service import NoticeService
from tidemark.panes import receipts
from tidemark.panes.receipts import BatchReport, ReceiptPartition
from tidemark.store.lake import Lake

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

PROJECT = names.get("PROJECT")
# The filter of the late-data subscription in terraform/pubsub.tf.
LATE_FILTER = f'attributes.dataset = "{names.get("DATASET")}" AND attributes.late = "true"'


def matches_late_filter(attrs: dict) -> bool:
    """What LATE_FILTER selects (the emulator does not apply filters)."""
    return attrs.get("dataset") == names.get("DATASET") and attrs.get("late") == "true"


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    emu = PubSubEmulator(str(tmp_path_factory.mktemp("pubsub"))).start()
    yield emu
    emu.stop()


@pytest.fixture
def pubsub_env(emulator, monkeypatch):
    """The emulator as the stream's Pub/Sub (PUBSUB_EMULATOR_HOST), running when the test starts."""
    if not emulator.alive():
        emulator.start()
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", emulator.host)
    return emulator


def make_topic(host: str, topic: str) -> str:
    """Topic + an unfiltered subscription '<topic>-all' + the late-data one '<topic>-late'."""
    ensure_topic(PROJECT, topic, host=host)
    ensure_subscription(PROJECT, f"{topic}-all", topic, host=host)
    ensure_subscription(PROJECT, f"{topic}-late", topic, filter=LATE_FILTER, host=host)
    return f"projects/{PROJECT}/topics/{topic}"


def messages(
    host: str, topic: str, sub: str = "all", expect: Collection[str] = (), at_least: int = 0
) -> list[tuple[dict, dict]]:
    """(validated body, attributes) of messages on the subscription, acked: pulled until every
    notice id in `expect` (and at least `at_least` messages) arrived; with neither, until quiet."""
    expect = set(expect)
    subscription = f"{topic}-{sub}"
    if not expect and not at_least:
        raw = pull_all(PROJECT, subscription, host=host)
    else:
        raw = pull_until(
            PROJECT,
            subscription,
            host=host,
            done=lambda got: (
                len(got) >= at_least
                and expect <= {availability_notice.decode(m.message.data)["notice_id"] for m in got}
            ),
        )
    return [(availability_notice.decode(m.message.data), dict(m.message.attributes)) for m in raw]


def sent_ids(lake: Lake) -> set[str]:
    """The notices the outbox records as acknowledged by Pub/Sub."""
    return {e["notice"]["notice_id"] for e in Outbox(lake).sent()}


def ids(received: list[tuple[dict, dict]]) -> set[str]:
    return {body["notice_id"] for body, _ in received}


def partition(lake: Lake, event_date: str, receipt_ts: str, batch_id: int, late: bool) -> dict:
    return {
        "event_date": event_date,
        "receipt_ts": receipt_ts,
        "batch_id": batch_id,
        "uri": lake.receipt_dir(layout.as_event_date(event_date), receipt_ts),
        "rows": 1,
        "events": 2,
        "pane_kinds": ["late" if late else "early"],
        "min_event_ts": f"{event_date}T01:00:00.000000Z",
        "max_event_ts": f"{event_date}T02:00:00.000000Z",
        "watermark": "2026-03-08T00:30:00.000000Z",
        "late": late,
        "extra": {},
    }


def Report(batch_id: int, partitions: list[dict]) -> BatchReport:  # noqa: N802 - reads like the class
    """The stream's real batch report, its partitions as their markers say."""
    return BatchReport(
        batch_id,
        partitions[0]["receipt_ts"] if partitions else "",
        0,
        0,
        0,
        0,
        0,
        [ReceiptPartition.from_json(p) for p in partitions],
    )


# ---- service level: real emulator, synthetic batch reports ------------------------------------


def test_filtered_subscription_is_stored_and_attributes_match_it(pubsub_env, tmp_path):
    host, lake = pubsub_env.host, Lake.open(tmp_path / "lake")
    topic = make_topic(host, "attrs-topic")
    stored = get_subscription(PROJECT, "attrs-topic-late", host=host)
    assert stored.filter == LATE_FILTER
    assert stored.topic == topic

    parts = [
        partition(lake, "2026-03-06", "20260308T001000000Z", 4, late=True),
        partition(lake, "2026-03-07", "20260308T001000000Z", 4, late=False),
        partition(lake, "2026-03-06", "20260308T002000000Z", 5, late=True),
    ]
    service = NoticeService(lake, topic, tick=0.2).start()
    service.on_batch(Report(4, parts[:2]))
    service.on_batch(Report(5, parts[2:]))
    assert service.stop(timeout=60) == 0

    received = messages(host, "attrs-topic", expect=sent_ids(lake))
    unique = same_notice_copies(received)
    assert sorted((b["event_date"], b["receipt_ts"]) for b in unique.values()) == sorted(
        (p["event_date"], p["receipt_ts"]) for p in parts
    )
    # What the late-data filter would let through: exactly the late partitions.
    would_match = {(b["event_date"], b["receipt_ts"]) for b, a in received if matches_late_filter(a)}
    assert would_match == {(p["event_date"], p["receipt_ts"]) for p in parts if p["late"]}
    sent = {e["notice"]["notice_id"]: e for e in Outbox(lake).sent()}
    assert set(sent) == set(unique)
    assert Outbox(lake).owed() == []


def test_outage_loses_nothing_and_owed_notices_go_out_after_a_restart(pubsub_env, tmp_path):
    emulator, lake = pubsub_env, Lake.open(tmp_path / "lake")
    topic = make_topic(emulator.host, "outage-topic")
    service = NoticeService(lake, topic, tick=0.2, backoff_max=2).start()
    before = [partition(lake, "2026-03-07", "20260308T001000000Z", 1, late=False)]
    service.on_batch(Report(1, before))
    assert service.stop(timeout=60) == 0
    received = messages(emulator.host, "outage-topic", expect=sent_ids(lake))

    emulator.stop()
    service = NoticeService(lake, topic, tick=0.2, backoff_max=2).start()
    during = [
        partition(lake, "2026-03-07", f"20260308T00{m}00000Z", b, late=False) for b, m in ((2, "20"), (3, "30"))
    ] + [partition(lake, "2026-03-06", "20260308T003000000Z", 3, late=True)]
    service.on_batch(Report(2, during[:1]))
    service.on_batch(Report(3, during[1:]))  # the listener does not wait for Pub/Sub
    still_owed = service.stop(timeout=3)  # a stopping stream gives up after a bounded wait
    assert still_owed == 3
    assert service.failures >= 1
    assert len(Outbox(lake).owed()) == 3

    # Pub/Sub is back (a fresh emulator: topics recreated); a new process publishes what is owed.
    emulator.start()
    make_topic(emulator.host, "outage-topic")
    assert (
        cli_main(["notices", "--lake", str(lake), "--send", topic, "--timeout", "60", "--format", "summary", "--check"])
        == 0
    )
    received += messages(emulator.host, "outage-topic", expect=sent_ids(lake) - ids(received))
    unique = same_notice_copies(received)
    assert sorted((b["event_date"], b["receipt_ts"]) for b in unique.values()) == sorted(
        (p["event_date"], p["receipt_ts"]) for p in before + during
    )
    assert Outbox(lake).owed() == []


def test_resend_after_a_lost_sent_record_keeps_the_notice_id(pubsub_env, tmp_path):
    host, lake = pubsub_env.host, Lake.open(tmp_path / "lake")
    topic = make_topic(host, "resend-topic")
    part = partition(lake, "2026-03-07", "20260308T001000000Z", 1, late=False)
    service = NoticeService(lake, topic, tick=0.2).start()
    service.on_batch(Report(1, [part]))
    assert service.stop(timeout=60) == 0
    # A crash after Pub/Sub acked but before the sent record was written: the entry is still owed.
    outbox = Outbox(lake)
    [sent] = outbox.sent()
    notice_id = sent["notice"]["notice_id"]
    os.replace(outbox.path("sent", notice_id), outbox.path("outbox", notice_id))
    service = NoticeService(lake, topic, tick=0.2).start()
    service.on_batch(Report(1, [part]))  # and the batch is replayed too
    assert service.stop(timeout=60) == 0
    received = messages(host, "resend-topic", expect={notice_id}, at_least=2)
    assert [b["notice_id"] for b, _ in received] == [notice_id, notice_id]
    assert len(same_notice_copies(received)) == 1


def test_a_batchs_notices_go_out_older_event_dates_first(pubsub_env, tmp_path):
    # The run of the notice published first is usually started first: a file's late correction of a
    # closed date then goes before its open date's dedup (tidemark/orchestration/date_priority.py).
    from tidemark.notices.sender import PubSubSender

    host, lake = pubsub_env.host, Lake.open(tmp_path / "lake")
    topic = make_topic(host, "order-topic")
    handed: list[str] = []

    class OrderRecordingSender(PubSubSender):
        def send_many(self, entries):
            handed.extend(e["notice"]["event_date"] for e in entries)
            return super().send_many(entries)

    batch = [
        partition(lake, "2026-03-07", "20260308T001000000Z", 1, late=False),
        partition(lake, "2026-03-05", "20260308T001000000Z", 1, late=True),
        partition(lake, "2026-03-06", "20260308T001000000Z", 1, late=True),
    ]
    service = NoticeService(lake, topic, sender=OrderRecordingSender(topic), tick=0.2).start()
    service.on_batch(Report(1, batch))
    assert service.stop(timeout=60) == 0
    assert handed == ["2026-03-05", "2026-03-06", "2026-03-07"]
    received = messages(host, "order-topic", expect=sent_ids(lake))
    assert sorted(body["event_date"] for body, _ in received) == handed


def test_coalesced_and_digest_notices_wait_for_their_window(pubsub_env, tmp_path):
    from datetime import datetime, timedelta, timezone

    from tidemark.notices.cadence import CadencePolicy

    host, lake = pubsub_env.host, Lake.open(tmp_path / "lake")
    topic = make_topic(host, "cadence-topic")
    policy = CadencePolicy(
        coalesce=timedelta(minutes=5), late_horizon=timedelta(days=1), digest_interval=timedelta(hours=1)
    )
    fresh = [
        partition(lake, "2026-03-07", ts, b, late=False)
        for b, ts in ((1, "20260308T001000000Z"), (2, "20260308T001200000Z"))
    ]
    next_window = partition(lake, "2026-03-07", "20260308T001500000Z", 3, late=False)
    # The watermark (2026-03-08 00:30) is more than a day past the end of 2026-03-05 and -04.
    old = [
        partition(lake, "2026-03-05", "20260308T001000000Z", 1, late=True),
        partition(lake, "2026-03-05", "20260308T001500000Z", 3, late=True),
        partition(lake, "2026-03-04", "20260308T001200000Z", 2, late=True),
    ]
    at = {"now": datetime(2026, 3, 8, 0, 14, tzinfo=timezone.utc)}
    service = NoticeService(lake, topic, policy=policy, tick=0.2, clock=lambda: at["now"]).start()
    service.on_batch(Report(1, [fresh[0], old[0]]))
    service.on_batch(Report(2, [fresh[1], old[2]]))
    service.on_batch(Report(3, [next_window, old[1]]))
    # Stopped before any window ended, without flushing: the groups wait durably in the lake.
    assert service.stop(timeout=10, flush_groups=False) == 0
    assert messages(host, "cadence-topic") == []

    at["now"] = datetime(2026, 3, 8, 0, 16, tzinfo=timezone.utc)  # 00:10-00:15 has ended
    service = NoticeService(lake, topic, policy=policy, tick=0.2, clock=lambda: at["now"]).start()
    assert service.stop(timeout=60, flush_groups=False) == 0
    [(body, attrs)] = messages(host, "cadence-topic", expect=sent_ids(lake))
    assert (body["kind"], attrs["kind"], body["receipt_ts_list"]) == (
        "coalesced",
        "coalesced",
        [p["receipt_ts"] for p in fresh],
    )

    at["now"] = datetime(2026, 3, 8, 1, 0, tzinfo=timezone.utc)  # the digest hour has ended
    service = NoticeService(lake, topic, policy=policy, tick=0.2, clock=lambda: at["now"]).start()
    assert service.stop(timeout=60, flush_groups=True) == 0  # a final flush closes 00:15-00:20 too
    received = {
        b["event_date"] + "/" + b["kind"]: b
        for b, _ in messages(host, "cadence-topic", expect=sent_ids(lake) - {body["notice_id"]})
    }
    assert sorted(received) == ["2026-03-04/late_digest", "2026-03-05/late_digest", "2026-03-07/coalesced"]
    assert received["2026-03-05/late_digest"]["receipt_ts_list"] == [old[0]["receipt_ts"], old[1]["receipt_ts"]]
    assert received["2026-03-07/coalesced"]["receipt_ts_list"] == [next_window["receipt_ts"]]
    assert Outbox(lake).owed() == []


# ---- the real stream ------------------------------------------------------------------------------

D6, D7 = "2026-03-06", "2026-03-07"


def _files():
    from tests.streamkit import event

    return [
        [event("u1", "a1", f"{D6}T10:00:00Z"), event("u1", "a2", f"{D6}T10:20:00Z")],
        # the watermark passes the end of D6: D6 is "late" from now on
        [event("u2", "b1", f"{D7}T12:00:00Z"), event("u1", "a2", f"{D6}T10:20:00Z")],
        [event("u3", "c1", f"{D6}T23:00:00Z"), event("u2", "b2", f"{D7}T12:10:00Z")],
        [event("u4", "d1", f"{D7}T12:20:00Z")],
        [event("u5", "e1", f"{D6}T09:00:00Z"), event("u4", "d2", f"{D7}T12:25:00Z")],
        [event("u6", "f1", f"{D7}T12:40:00Z")],
    ]


@pytest.mark.spark
def test_stream_notices_match_partitions_through_an_outage_and_a_replay(spark, pubsub_env, tmp_path, monkeypatch):
    from streaming_job.job import StreamConfig, run_stream
    from tests.netcut import NetCut
    from tests.streamkit import land
    from tidemark.base.session_rules import SessionRules
    from tidemark.devstack.process import wait_until

    emulator = pubsub_env
    landing, lake, checkpoint = (str(tmp_path / d) for d in ("landing", "lake", "checkpoint"))
    lake = Lake.open(lake)
    topic = make_topic(emulator.host, "stream-topic")
    land(landing, _files())
    # The stream reaches Pub/Sub through a link the test cuts: an outage that, unlike an emulator
    # restart, keeps the topic, its subscriptions and what they hold.
    link = NetCut(emulator.port).start()
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", link.host)
    owed_during_outage = []

    def outage(report):
        """Runs after the notice listener of the same batch: Pub/Sub becomes unreachable once the
        notices of batches 0-1 are out, and reachable again in batch 4."""
        if report.batch_id == 1:
            wait_until(lambda: not Outbox(lake).owed(), 60, "notices of batches 0-1 sent")
            link.cut()
        elif report.batch_id == 4:
            owed_during_outage.extend(Outbox(lake).owed())
            link.restore()

    config = StreamConfig(
        landing=landing,
        lake=lake,
        checkpoint=checkpoint,
        rules=SessionRules.parse("30m", "1h", "0s"),
        available_now=True,
        max_files_per_trigger=1,
        notify_topic=topic,
        notice_flush_timeout=60,
    )
    try:
        run_stream(config, listeners=[outage], spark=spark)
    finally:
        link.stop()
    assert len(owed_during_outage) >= 2  # batches 2 and 3 wrote while Pub/Sub was away
    received = messages(emulator.host, "stream-topic", expect=sent_ids(lake))
    late_received = messages(emulator.host, "stream-topic", "late", expect=sent_ids(lake))

    on_disk = {
        (d, r): receipts.read_marker(lake, d, r)
        for d in receipts.list_event_dates(lake)
        for r in receipts.list_receipts(lake, d)
    }
    unique = same_notice_copies(received)
    # One for one: every complete partition has exactly one notice, and every notice a partition.
    assert sorted((layout.as_event_date(b["event_date"]), b["receipt_ts"]) for b in unique.values()) == sorted(on_disk)
    for body in unique.values():
        marker = on_disk[(layout.as_event_date(body["event_date"]), body["receipt_ts"])]
        assert (body["rows"], body["events"], body["late"], body["batch_id"], body["uri"]) == (
            marker.rows,
            marker.events,
            marker.late,
            marker.batch_id,
            marker.uri,
        )
        assert body["pane_kinds"] == sorted(marker.pane_kinds)
    late_on_disk = {k for k, m in on_disk.items() if m.late}
    assert late_on_disk
    assert len(late_on_disk) < len(on_disk)
    late_notices = {(b["event_date"], b["receipt_ts"]) for b, a in late_received if matches_late_filter(a)}
    assert {(layout.as_event_date(d), r) for d, r in late_notices} == late_on_disk
    assert Outbox(lake).owed() == []

    # Replay the last batch (as after a crash before its commit): same partitions, no new notice.
    commits = layout.join(checkpoint, "query", "commits")
    last = max(int(n) for n in os.listdir(commits) if n.isdigit())
    for name in (str(last), f".{last}.crc"):
        if os.path.exists(os.path.join(commits, name)):
            os.remove(os.path.join(commits, name))
    sent_before = sent_ids(lake)
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", emulator.host)  # a wrong re-publish would arrive
    replayed = []
    run_stream(config, listeners=[replayed.append], spark=spark)
    assert [r.batch_id for r in replayed] == [last]
    assert replayed[0].partitions
    assert sent_ids(lake) == sent_before
    assert messages(emulator.host, "stream-topic") == []
    assert cli_main(["notices", "--lake", str(lake), "--check", "--format", "summary"]) == 0
